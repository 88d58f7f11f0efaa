//===- SupportMatrix.cpp - what kvgen generates, as a table ---------------===//
//
// Rows and columns are the kernel ABI's vocabulary (include/kvgen/ABI/*.def)
// and the chips kvgen accepts (Chip.cpp); a cell is what the kv dialect's
// verifier says of a description of it, a chip's conversions are read off the
// PTX kvgen emits for it. Nothing here restates a rule. The test
// test/tools/support-matrix.test checks docs/SUPPORT.md against this output
// and compiles every supported cell for the host.
//
//===----------------------------------------------------------------------===//

#include "SupportMatrix.h"
#include "Options.h"

#include "kvgen/ABI/ABI.h"
#include "kvgen/Dialect/KV/IR/KVDialect.h"
#include "kvgen/Pipeline/Description.h"
#include "kvgen/Pipeline/PTX.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace mlir;
using namespace kvgen;
namespace cl = llvm::cl;

static cl::opt<std::string> supportMatrixFlag(
    "print-support-matrix",
    cl::desc("Print the support matrix (layouts, dtypes, quantization, "
             "kernel kinds, chips) as markdown, or with =kv a description "
             "holding a kernel of each supported combination"),
    cl::value_desc("kv"), cl::ValueOptional, cl::cat(driver::kvgenCategory));

bool driver::supportMatrixRequested() {
  return supportMatrixFlag.getNumOccurrences() > 0;
}

namespace {

/// The shapes of cache a description can have: K and V of one head size
/// or of two (`v_head_dim`), K only, an MLA latent.
enum class Form { KV, KVTwoSizes, KOnly, Latent };
constexpr Form kForms[] = {Form::KV, Form::KVTwoSizes, Form::KOnly,
                           Form::Latent};

const char *formName(Form form) {
  return form == Form::KV           ? "K and V"
         : form == Form::KVTwoSizes ? "K and V of two head sizes"
         : form == Form::KOnly      ? "K only"
                                    : "latent";
}

/// Every value of an ABI enum, in the order of its names.
template <typename Enum, size_t N>
constexpr std::array<Enum, N> allOf(const char *const (&)[N]) {
  std::array<Enum, N> all{};
  for (size_t i = 0; i < N; ++i)
    all[i] = static_cast<Enum>(i);
  return all;
}
constexpr auto kLayouts = allOf<abi::Layout>(abi::kLayoutNames);
constexpr auto kKinds = allOf<abi::KernelKind>(abi::kKindNames);
constexpr auto kDTypes = allOf<abi::DType>(abi::kDTypeNames);
constexpr auto kQuantKinds = allOf<abi::QuantKind>(abi::kQuantKindNames);
constexpr auto kGranularities =
    allOf<abi::ScaleGranularity>(abi::kGranularityNames);
constexpr auto kModes = allOf<abi::ScaleMode>(abi::kScaleModeNames);

struct Checker {
  explicit Checker(MLIRContext &context) : context(context) {}

  /// MLIR's spelling of an ABI dtype: its name, but for the fp8 types.
  static std::string typeText(abi::DType dtype) {
    return dtype == abi::DType::F8E4M3   ? "f8E4M3FN"
           : dtype == abi::DType::F8E5M2 ? "f8E5M2"
                                         : abi::dtypeName(dtype);
  }

  /// The ABI dtype a quantization kind stores (QuantAttr::getStorageType).
  abi::DType storageOf(abi::QuantKind kind) {
    Type storage =
        kv::QuantAttr::get(&context, kind, abi::ScaleGranularity::PerTensor,
                           abi::ScaleMode::Static, false)
            .getStorageType(&context);
    abi::DType dtype;
    if (!abi::parseDType(kv::getDTypeName(storage), &dtype))
      llvm::report_fatal_error("a quantization kind stores no ABI dtype");
    return dtype;
  }

  /// What a kind's op takes after its cache, as its rows trait says:
  /// " from " the rows' type, " to " it, or nothing.
  StringRef clauseOf(abi::KernelKind kind) {
    if (!RegisteredOperationName::lookup(
            (Twine("kv.") + abi::kindName(kind)).str(), &context))
      llvm::report_fatal_error(Twine("the ABI's kernel kind '") +
                               abi::kindName(kind) + "' has no kv op");
    switch (abi::kindTraits(kind).rows) {
    case abi::KindRows::Into:
      return " from ";
    case abi::KindRows::OutOf:
      return " to ";
    case abi::KindRows::None:
      break;
    }
    return "";
  }

  /// A cache of `form` in `layout` storing `dtype`, quantized by `quant` (or
  /// not: empty), of 8 heads of 128 or a latent of 512 + 64.
  std::string cacheText(abi::Layout layout, Form form, abi::DType dtype,
                        StringRef quant) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "!kv.cache<layout = " << abi::layoutName(layout) << ", "
       << (abi::layoutInfo(layout).paged() ? "block_size = 16"
                                           : "max_seq_len = 4096")
       << (form == Form::Latent ? ", num_kv_heads = 1, head_dim = 576"
                                : ", num_kv_heads = 8, head_dim = 128")
       << (form == Form::KVTwoSizes ? ", v_head_dim = 64" : "")
       << ", dtype = " << typeText(dtype);
    if (!quant.empty())
      os << ", quant = " << quant;
    if (form == Form::KOnly)
      os << ", k_only = true";
    if (form == Form::Latent)
      os << ", latent = #kv.latent<kv_lora_rank = 512, rope_dim = 64>";
    os << ">";
    return text;
  }

  static std::string quantText(abi::QuantKind kind, abi::ScaleGranularity g,
                               abi::ScaleMode mode, bool reciprocal = false) {
    return (Twine("#kv.quant<kind = ") + abi::quantKindName(kind) +
            ", granularity = " + abi::granularityName(g) +
            ", mode = " + abi::scaleModeName(mode) +
            (reciprocal ? ", reciprocal = true" : "") + ">")
        .str();
  }

  /// One kernel of `kind` on `cache`, its rows of `rows`.
  std::string opText(abi::KernelKind kind, StringRef symbol, StringRef cache,
                     abi::DType rows) {
    std::string text =
        (Twine("kv.") + abi::kindName(kind) + " @" + symbol + " : " + cache)
            .str();
    StringRef clause = clauseOf(kind);
    return clause.empty() ? text : text + clause.str() + typeText(rows);
  }

  /// Whether the dialect accepts `op` (a kv op's text); `why` receives the
  /// first error otherwise. An accepted op is kept for the =kv module, with
  /// `label` as its comment.
  bool accepts(abi::KernelKind kind, StringRef cache, abi::DType rows,
               StringRef label, std::string *why = nullptr) {
    std::string op = opText(kind, "k", cache, rows);
    std::string first;
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      if (first.empty() && diag.getSeverity() == DiagnosticSeverity::Error)
        first = diag.str();
      return success();
    });
    OwningOpRef<ModuleOp> module =
        parseDescription("module {\n  " + op + "\n}\n", &context);
    if (!module) {
      if (why)
        *why = first;
      return false;
    }
    if (!label.empty() && kept.insert(op).second) {
      std::string symbol = "k" + std::to_string(keptOps.size());
      keptOps.push_back("  // " + label.str() + "\n  " +
                        opText(kind, symbol, cache, rows) + "\n");
    }
    return true;
  }

  MLIRContext &context;
  std::set<std::string> kept;
  std::vector<std::string> keptOps;
};

/// A markdown table, written row by row.
struct Table {
  Table(llvm::raw_ostream &os, ArrayRef<std::string> header) : os(os) {
    row(header);
    row(std::vector<std::string>(header.size(), "---"));
  }
  void row(ArrayRef<std::string> cells) {
    os << "| " << llvm::join(cells, " | ") << " |\n";
  }
  llvm::raw_ostream &os;
};

std::string code(StringRef text) { return ("`" + text + "`").str(); }

std::string opName(abi::KernelKind kind) {
  return code((Twine("kv.") + abi::kindName(kind)).str());
}

/// The verifier's reasons, each with where it applies, in first-seen order.
struct Refusals {
  struct Reason {
    std::string why;
    std::vector<std::string> rows, columns;
  };

  void add(std::string why, std::string row, std::string column = "") {
    // The op's name is in the table: one reason for every op it applies to.
    if (StringRef(why).starts_with("'kv.") && StringRef(why).contains("' op "))
      why = why.substr(why.find("' op ") + 5);
    auto it =
        llvm::find_if(reasons, [&](const Reason &r) { return r.why == why; });
    Reason &reason =
        it != reasons.end() ? *it : reasons.emplace_back(Reason{why, {}, {}});
    if (!llvm::is_contained(reason.rows, row))
      reason.rows.push_back(row);
    if (!column.empty() && !llvm::is_contained(reason.columns, column))
      reason.columns.push_back(column);
  }

  /// "- why: row, row (in column; column)" (or "in every column").
  void print(llvm::raw_ostream &os, size_t numColumns = 0) const {
    if (reasons.empty())
      return;
    os << "\nRefused:\n\n";
    for (const Reason &r : reasons) {
      std::string in = r.columns.size() == numColumns
                           ? "every column"
                           : llvm::join(r.columns, "; ");
      os << "- " << r.why << ": " << llvm::join(r.rows, ", ")
         << (r.columns.empty() ? "" : " (in " + in + ")") << "\n";
    }
  }

  std::vector<Reason> reasons;
};

/// The matrix's sections, in order.
class SupportMatrix {
public:
  SupportMatrix(MLIRContext &context) : check(context) {}

  void print(llvm::raw_ostream &os, bool withChips) {
    os << "# What kvgen generates\n\n"
       << "<!-- Generated by `kvgen --print-support-matrix`; "
          "test/tools/support-matrix.test checks that this file is its "
          "output. Do not edit. -->\n\n"
       << "Every row and column below is a name of the kernel ABI "
          "(`include/kvgen/ABI/*.def`) or a chip kvgen accepts. A cell says "
          "what the kv dialect's verifier makes of a description of that "
          "combination (block_size 16 or max_seq_len 4096, 8 KV heads of "
          "128, or a latent of 512 + 64; bf16 K and V unless the column "
          "says otherwise); every combination marked supported is compiled "
          "for the host by the test that checks this file. Where the "
          "verifier refuses, its message says why. The descriptions "
          "themselves: `kvgen --print-support-matrix=kv`.\n";
    printKinds(os);
    printDTypes(os);
    printQuant(os);
    if (withChips)
      printChips(os);
  }

  std::string module() {
    // The markdown's checks, run for the ops they keep.
    llvm::raw_null_ostream os;
    print(os, /*withChips=*/false);
    std::string text = "// Generated by `kvgen --print-support-matrix=kv`: "
                       "a kernel of each supported combination of "
                       "docs/SUPPORT.md.\nmodule {\n";
    for (const std::string &op : check.keptOps)
      text += op;
    return text + "}\n";
  }

private:
  /// The forms of cache a kind accepts in some layout (unquantized bf16).
  std::vector<Form> formsOf(abi::KernelKind kind) {
    std::vector<Form> forms;
    for (Form form : kForms)
      for (abi::Layout layout : kLayouts)
        if (check.accepts(kind,
                          check.cacheText(layout, form, abi::DType::BF16, ""),
                          abi::DType::BF16, "")) {
          forms.push_back(form);
          break;
        }
    return forms;
  }

  void printKinds(llvm::raw_ostream &os) {
    os << "\n## Kernel kinds and layouts\n\n"
       << "The forms of cache (K and V, K and V of two head sizes, K only, "
          "an MLA latent) each kernel kind writes or reads in each layout; "
          "a bf16 cache (two head sizes: K's 128, V's 64).\n\n";
    std::vector<std::string> header = {"kernel kind"};
    for (abi::Layout layout : kLayouts)
      header.push_back(code(abi::layoutName(layout)));
    Table table(os, header);
    Refusals refusals;
    for (abi::KernelKind kind : kKinds) {
      std::vector<std::string> cells = {opName(kind)};
      // A form the kind takes in no layout is no refusal of this layout.
      std::vector<Form> kindForms = formsOf(kind);
      for (abi::Layout layout : kLayouts) {
        std::vector<std::string> accepted;
        for (Form form : kForms) {
          std::string why;
          std::string label = (Twine(abi::kindName(kind)) + " on " +
                               abi::layoutName(layout) + ", " + formName(form))
                                  .str();
          if (check.accepts(kind,
                            check.cacheText(layout, form, abi::DType::BF16, ""),
                            abi::DType::BF16, label, &why))
            accepted.push_back(formName(form));
          else if (llvm::is_contained(kindForms, form))
            refusals.add(why, opName(kind) + " on " +
                                  code(abi::layoutName(layout)) + " (" +
                                  formName(form) + ")");
        }
        cells.push_back(accepted.empty() ? "—" : llvm::join(accepted, ", "));
      }
      table.row(cells);
    }
    refusals.print(os);
  }

  void printDTypes(llvm::raw_ostream &os) {
    os << "\n## Cache dtypes and the dtypes of K and V\n\n"
       << "For each cache dtype of the ABI, the dtypes each kind's rows "
          "(K and V, kv_c and k_pe, or a gather's output) may have, in a `"
       << abi::layoutName(abi::Layout::PagedNHD)
       << "` cache. A cache of fp8 or int8 is a quantized one "
          "(shown with per_tensor static scales; the next table has the "
          "others).\n\n";
    std::vector<abi::KernelKind> kinds;
    std::vector<std::string> header = {"cache dtype", "quantization"};
    for (abi::KernelKind kind : kKinds)
      if (!check.clauseOf(kind).empty()) {
        kinds.push_back(kind);
        header.push_back(opName(kind) + check.clauseOf(kind).rtrim().str());
      }
    Table table(os, header);
    for (abi::DType cacheDtype : kDTypes) {
      // The quantization kind that stores this dtype, if one does.
      std::optional<abi::QuantKind> quantKind;
      for (abi::QuantKind kind : kQuantKinds)
        if (check.storageOf(kind) == cacheDtype)
          quantKind = kind;
      std::string quant =
          quantKind
              ? Checker::quantText(*quantKind, abi::ScaleGranularity::PerTensor,
                                   abi::ScaleMode::Static)
              : "";
      std::vector<std::string> cells = {
          code(abi::dtypeName(cacheDtype)),
          quantKind ? code(abi::quantKindName(*quantKind)) : "none"};
      for (abi::KernelKind kind : kinds) {
        std::vector<std::string> rows;
        std::vector<Form> forms = formsOf(kind);
        for (abi::DType rowDtype : kDTypes)
          if (!forms.empty() &&
              check.accepts(kind,
                            check.cacheText(abi::Layout::PagedNHD,
                                            forms.front(), cacheDtype, quant),
                            rowDtype,
                            (Twine(abi::kindName(kind)) + ", cache " +
                             abi::dtypeName(cacheDtype) + ", rows " +
                             abi::dtypeName(rowDtype))
                                .str()))
            rows.push_back(abi::dtypeName(rowDtype));
        cells.push_back(rows.empty() ? "—" : llvm::join(rows, ", "));
      }
      table.row(cells);
    }
  }

  void printQuant(llvm::raw_ostream &os) {
    os << "\n## Quantization\n\n"
       << "`#kv.quant<kind, granularity, mode>` (docs/CONTRACT.md, "
          "\"Quantization\"): each kind in the form of cache it takes, in a `"
       << abi::layoutName(abi::Layout::PagedNHD)
       << "` cache of the kind's storage dtype, and `kv.append` on a K-only "
          "cache and on a `"
       << abi::layoutName(abi::Layout::Contiguous) << "` one.\n\n";
    constexpr abi::Layout kPaged = abi::Layout::PagedNHD;
    struct Column {
      std::string name;
      abi::KernelKind kind;
      Form form;
      abi::Layout layout;
    };
    std::vector<Column> columns;
    for (abi::KernelKind kind : kKinds)
      if (std::vector<Form> forms = formsOf(kind); !forms.empty())
        columns.push_back({opName(kind), kind, forms.front(), kPaged});
    abi::KernelKind append = abi::KernelKind::Append;
    columns.push_back(
        {opName(append) + ", K only", append, Form::KOnly, kPaged});
    columns.push_back({opName(append) + ", `" +
                           abi::layoutName(abi::Layout::Contiguous) + "`",
                       append, Form::KV, abi::Layout::Contiguous});
    std::vector<std::string> header = {"kind", "granularity", "mode", "stores"};
    for (const Column &column : columns)
      header.push_back(column.name);
    Table table(os, header);
    Refusals refusals;
    bool reciprocalAgrees = true;
    for (abi::QuantKind kind : kQuantKinds)
      for (abi::ScaleGranularity g : kGranularities)
        for (abi::ScaleMode mode : kModes) {
          abi::DType storage = check.storageOf(kind);
          std::string rowName =
              (Twine(abi::quantKindName(kind)) + " " + abi::granularityName(g) +
               " " + abi::scaleModeName(mode))
                  .str();
          std::vector<std::string> cells = {
              code(abi::quantKindName(kind)), code(abi::granularityName(g)),
              code(abi::scaleModeName(mode)), code(abi::dtypeName(storage))};
          for (const Column &column : columns) {
            std::string why;
            std::string label = rowName + ", " + abi::kindName(column.kind) +
                                " " + formName(column.form) + " " +
                                abi::layoutName(column.layout);
            auto cache = [&](bool reciprocal) {
              return check.cacheText(
                  column.layout, column.form, storage,
                  Checker::quantText(kind, g, mode, reciprocal));
            };
            bool ok = check.accepts(column.kind, cache(false), abi::DType::BF16,
                                    label, &why);
            reciprocalAgrees &= ok == check.accepts(column.kind, cache(true),
                                                    abi::DType::BF16, "");
            cells.push_back(ok ? "yes" : "—");
            if (!ok)
              refusals.add(why, code(rowName), column.name);
          }
          table.row(cells);
        }
    os << "\n`reciprocal = true` (multiply by 1 / scale) is "
       << (reciprocalAgrees ? "accepted wherever its row is"
                            : "NOT accepted everywhere its row is")
       << ".\n";
    refusals.print(os, columns.size());
  }

  /// The PTX of a quantized fp8 append and gather and of a bf16 append and
  /// gather for `chip`, or the first error.
  FailureOr<std::string> ptxFor(StringRef chip, std::string &error) {
    std::string fp8 =
        check.cacheText(abi::Layout::PagedNHD, Form::KV, abi::DType::F8E4M3,
                        Checker::quantText(abi::QuantKind::FP8E4M3,
                                           abi::ScaleGranularity::PerTensor,
                                           abi::ScaleMode::Static));
    std::string bf16 =
        check.cacheText(abi::Layout::PagedNHD, Form::KV, abi::DType::BF16, "");
    std::string text = "module {\n";
    int n = 0;
    for (const std::string &cache : {fp8, bf16})
      for (abi::KernelKind kind :
           {abi::KernelKind::Append, abi::KernelKind::Gather})
        text += "  " +
                check.opText(kind, "k" + std::to_string(n++), cache,
                             abi::DType::F32) +
                "\n";
    ScopedDiagnosticHandler handler(&check.context, [&](Diagnostic &diag) {
      if (error.empty())
        error = diag.str();
      return success();
    });
    OwningOpRef<ModuleOp> module =
        parseDescription(text + "}\n", &check.context);
    if (!module)
      return failure();
    GPUTargetOptions options;
    options.chip = chip.str();
    options.features = ptxFeaturesFor(chip);
    PassManager pm(&check.context);
    buildLoopsPipeline(pm);
    buildGPUMappingPipeline(pm);
    buildNVVMPipeline(pm, options);
    if (failed(pm.run(*module)))
      return failure();
    return serializeToPTX(*module);
  }

  void printChips(llvm::raw_ostream &os) {
    os << "\n## Chips\n\n"
       << "The GPUs kvgen generates for (`--chip`), the PTX ISA it emits for "
          "each spelling, and how the kernels convert between f32 and the "
          "cache's fp8 and bf16: hardware (one `cvt` instruction) or "
          "software (integer operations that give the same bytes), as the "
          "PTX kvgen emits for the chip shows. On the host (`--target=host`) "
          "every conversion is software.\n\n";
    std::string known;
    (void)isKnownChip("", &known);
    // The spellings of each chip number, in the back end's order.
    std::map<unsigned, std::vector<std::string>> chips;
    for (StringRef name : llvm::split(known, ", "))
      chips[chipNumber(name)].push_back(name.str());
    Table table(os, {"chip", "PTX ISA", "f32 → fp8", "fp8 → f32", "f32 → bf16",
                     "bf16 → f32"});
    for (auto &[number, spellings] : chips) {
      std::vector<std::string> isa;
      for (const std::string &spelling : spellings) {
        unsigned v = ptxVersionFor(spelling);
        isa.push_back(code(spelling) + " " + std::to_string(v / 10) + "." +
                      std::to_string(v % 10));
      }
      std::string plain = "sm_" + std::to_string(number), error;
      FailureOr<std::string> ptx = ptxFor(
          llvm::is_contained(spellings, plain) ? plain : spellings.front(),
          error);
      // One cvt instruction is hardware; anything else, integer operations.
      auto how = [&](StringRef instruction) -> std::string {
        if (failed(ptx))
          return "does not build: " + error;
        return StringRef(*ptx).contains(instruction) ? "hardware" : "software";
      };
      table.row({code(plain), llvm::join(isa, ", "),
                 how("cvt.rn.satfinite.e4m3x2.f32"), how("f16x2.e4m3x2"),
                 how("cvt.rn.bf16"), how("cvt.f32.bf16")});
    }
  }

  Checker check;
};

} // namespace

int driver::printSupportMatrix() {
  auto fail = [](const Twine &message) {
    llvm::errs() << "kvgen: " << message << "\n";
    return 1;
  };
  if (!supportMatrixFlag.empty() && supportMatrixFlag != "kv")
    return fail("--print-support-matrix=" + supportMatrixFlag +
                ": expected no value (markdown) or kv");
  // A flag it would ignore. The positional argument is not among the named
  // options.
  std::string ignored =
      inputFilename.getNumOccurrences() ? "a description file" : "";
  for (auto &[name, option] : cl::getRegisteredOptions()) {
    bool own = llvm::any_of(option->Categories, [](cl::OptionCategory *c) {
      return c == &kvgenCategory || c == &descCategory;
    });
    if (ignored.empty() && own && option->getNumOccurrences() &&
        option != &supportMatrixFlag && option != &outputFilename &&
        name == option->ArgStr)
      ignored = "--" + option->ArgStr.str();
  }
  if (!ignored.empty())
    return fail("--print-support-matrix describes every combination; " +
                ignored + " has no meaning with it (give -o alone)");
  if (supportMatrixFlag.getNumOccurrences() > 1)
    return fail("--print-support-matrix is given " +
                Twine(supportMatrixFlag.getNumOccurrences()) +
                " times: give it once");
  DialectRegistry registry;
  registerKVGenDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false);

  SupportMatrix matrix(context);
  std::string text;
  if (supportMatrixFlag == "kv") {
    text = matrix.module();
  } else {
    llvm::raw_string_ostream os(text);
    matrix.print(os, /*withChips=*/true);
  }
  // Written whole or not at all: the file is removed unless kept.
  std::error_code ec;
  llvm::ToolOutputFile out(outputFilename, ec, llvm::sys::fs::OF_None);
  if (!ec) {
    out.os() << text;
    out.os().flush();
    ec = out.os().error();
    out.os().clear_error();
  }
  if (ec)
    return fail("cannot write '" + outputFilename + "': " + ec.message());
  out.keep();
  return 0;
}
