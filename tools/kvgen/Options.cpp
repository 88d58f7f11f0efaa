//===- Options.cpp - kvgen's flags and their checks -----------------------===//

#include "Options.h"

#include "kvgen/ABI/ABI.h"
#include "kvgen/Pipeline/Description.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace kvgen;
using namespace kvgen::driver;
namespace cl = llvm::cl;

cl::OptionCategory driver::kvgenCategory("kvgen options");
cl::OptionCategory
    driver::descCategory("Description flags (instead of an input file)");
cl::OptionCategory driver::debugCategory("Debugging options");

cl::opt<std::string> driver::inputFilename(cl::Positional,
                                           cl::desc("<description.mlir>"),
                                           cl::init(""),
                                           cl::cat(kvgenCategory));
cl::opt<std::string> driver::outputFilename("o", cl::desc("Output file"),
                                            cl::value_desc("filename"),
                                            cl::init("-"),
                                            cl::cat(kvgenCategory));
cl::opt<Stage> driver::emit(
    "emit", cl::desc("The stage to emit"), cl::init(Stage::Bundle),
    cl::values(clEnumValN(Stage::KV, "kv", "the verified kv IR"),
               clEnumValN(Stage::Loops, "loops", "the loop nests"),
               clEnumValN(Stage::GPU, "gpu", "the gpu.module of kernels"),
               clEnumValN(Stage::NVVM, "nvvm", "the kernels in NVVM/LLVM IR"),
               clEnumValN(Stage::LLVM, "llvm", "LLVM IR"),
               clEnumValN(Stage::PTX, "ptx", "PTX"),
               clEnumValN(Stage::Cubin, "cubin", "a cubin (runs ptxas)"),
               clEnumValN(Stage::Bundle, "bundle", "a kvrt bundle (JSON)"),
               clEnumValN(Stage::Header, "header",
                          "a C header embedding the bundle"),
               clEnumValN(Stage::SharedLib, "shared-lib",
                          "host kernels and their bundle as a shared object "
                          "(--target=host)")),
    cl::cat(kvgenCategory));
cl::opt<Target> driver::target(
    "target", cl::desc("Where the kernels run"), cl::init(Target::GPU),
    cl::values(clEnumValN(Target::GPU, "gpu", "NVIDIA GPU (PTX)"),
               clEnumValN(Target::Host, "host",
                          "this CPU (loops and LLVM IR; kvrt's host path)")),
    cl::cat(kvgenCategory));
cl::opt<std::string> driver::chip(
    "kvgen-chip",
    cl::desc("GPU chip, also --chip (sm_XX, sm_XXa, sm_XXf; sm_75 or newer)"),
    cl::init("sm_90"), cl::cat(kvgenCategory));
static cl::alias chipAlias("chip", cl::aliasopt(chip),
                           cl::desc("Alias for --kvgen-chip"),
                           cl::cat(kvgenCategory));
cl::opt<std::string> driver::features(
    "kvgen-features",
    cl::desc("PTX ISA version as +ptxNN (default: the lowest that knows "
             "the chip)"),
    cl::init(""), cl::cat(kvgenCategory));
cl::opt<bool> driver::withCubin("with-cubin",
                                cl::desc("Put a cubin (ptxas) in the bundle"),
                                cl::init(false), cl::cat(kvgenCategory));
cl::opt<bool> driver::programmaticLaunch(
    "programmatic-launch",
    cl::desc("Kernels wait for the previous kernel in their stream "
             "(griddepcontrol, sm_90+), for kvrt's programmatic dependent "
             "launch; the manifest says programmatic_launch"),
    cl::init(false), cl::cat(kvgenCategory));
cl::opt<bool> driver::ptxasVerbose(
    "ptxas-verbose", cl::desc("Run ptxas -v on the PTX and print its report"),
    cl::init(false), cl::cat(kvgenCategory));
cl::opt<std::string> driver::pipelineOptions(
    "pipeline-options",
    cl::desc("Code-generation options, space-separated, as the named "
             "pipelines take them (kvgen-opt --help, kv-lower-to-nvvm): the "
             "kernel plan's (e.g. chunks-per-thread=2 wide-min-tokens=0; "
             "the bundle records the same plan), elide-token-check, "
             "noalias, pin-addresses. For measuring an alternative beside "
             "the defaults"),
    cl::value_desc("'name=value ...'"), cl::init(""), cl::cat(kvgenCategory));
cl::opt<bool> driver::verifyDiagnostics(
    "verify-diagnostics",
    cl::desc("Check diagnostics against expected-* lines in the input"),
    cl::init(false), cl::cat(kvgenCategory));

// Description flags.
// cl::desc keeps a StringRef: the text lives as long as the flag.
static const std::string layoutHelp = std::string("Cache layout (default ") +
                                      abi::layoutName(abi::kDefaultLayout) +
                                      ")";
static cl::opt<std::string> layoutFlag("layout", cl::desc(layoutHelp),
                                       cl::cat(descCategory));
static cl::opt<int64_t> blockSizeFlag("block-size",
                                      cl::desc("Block size (paged layouts)"),
                                      cl::init(16), cl::cat(descCategory));
static cl::opt<int64_t>
    maxSeqLenFlag("max-seq-len",
                  cl::desc("max_seq_len (a layout without blocks)"),
                  cl::init(0), cl::cat(descCategory));
static cl::opt<int64_t> numKvHeadsFlag("num-kv-heads", cl::desc("KV heads"),
                                       cl::init(8), cl::cat(descCategory));
static cl::opt<int64_t> headDimFlag("head-dim", cl::desc("Head dim"),
                                    cl::init(128), cl::cat(descCategory));
static cl::opt<std::string>
    dtypeFlag("dtype",
              cl::desc("Dtype of K and V (a gather's output); also of the "
                       "cache, unless --cache-dtype or --quant"),
              cl::init("bf16"), cl::cat(descCategory));
static cl::opt<std::string> cacheDtypeFlag("cache-dtype",
                                           cl::desc("Dtype of the cache"),
                                           cl::init(""), cl::cat(descCategory));
static cl::opt<std::string>
    quantFlag("quant",
              cl::desc("Quantization: kind,granularity,mode[,reciprocal] "
                       "(e.g. fp8_e4m3,per_tensor,static); implies the "
                       "cache dtype"),
              cl::init(""), cl::cat(descCategory));
static cl::opt<std::string>
    kernelsFlag("kernels",
                cl::desc("Kernels to generate, a comma-separated list of "
                         "kinds (default append,slot_mapping,fused_append)"),
                cl::init("append,slot_mapping,fused_append"),
                cl::cat(descCategory));
cl::opt<std::string>
    driver::nameFlag("name",
                     cl::desc("Kernel name prefix (and the header's array "
                              "name)"),
                     cl::init("kv"), cl::cat(descCategory));

/// Description flags other than --name (which also names a header's array).
static bool descriptionFlagsGiven() {
  for (cl::Option *o : std::initializer_list<cl::Option *>{
           &layoutFlag, &blockSizeFlag, &maxSeqLenFlag, &numKvHeadsFlag,
           &headDimFlag, &dtypeFlag, &cacheDtypeFlag, &quantFlag, &kernelsFlag})
    if (o->getNumOccurrences())
      return true;
  return false;
}

bool driver::describedByFlags() {
  return inputFilename.empty() &&
         (descriptionFlagsGiven() || nameFlag.getNumOccurrences());
}

static LogicalResult refuse(const llvm::Twine &message) {
  llvm::errs() << "kvgen: " << message << "\n";
  return failure();
}

static FailureOr<std::string> refuseText(const llvm::Twine &message) {
  (void)refuse(message);
  return failure();
}

static std::string layoutName() {
  return layoutFlag.empty() ? std::string(abi::layoutName(abi::kDefaultLayout))
                            : layoutFlag.getValue();
}

/// Whether --layout names a layout that is not paged (it takes
/// --max-seq-len); an unknown name is refused later, by its own message.
static bool layoutHasRows() {
  abi::Layout layout;
  return abi::parseLayout(layoutName(), &layout) &&
         !abi::layoutInfo(layout).paged();
}

static bool isCIdentifier(StringRef name) {
  return !name.empty() && !llvm::isDigit(name.front()) &&
         llvm::all_of(name,
                      [](char c) { return llvm::isAlnum(c) || c == '_'; });
}

LogicalResult driver::checkFlags() {
  bool gpuCode = target == Target::GPU &&
                 !llvm::is_contained({Stage::KV, Stage::Loops, Stage::GPU},
                                     emit.getValue());
  // LLVM's options keep the last of repeated values; kvgen's would then
  // compile something other than one of the values given.
  for (auto &[name, option] : cl::getRegisteredOptions()) {
    bool own = llvm::any_of(option->Categories, [](cl::OptionCategory *c) {
      return c == &kvgenCategory || c == &descCategory;
    });
    if (own && option->getNumOccurrences() > 1 &&
        option->getFormattingFlag() != cl::Positional && name == option->ArgStr)
      return refuse("--" + option->ArgStr + " is given " +
                    Twine(option->getNumOccurrences()) +
                    " times: give it once");
  }
  // An empty value would silently mean the default.
  for (cl::opt<std::string> *o :
       {&layoutFlag, &quantFlag, &cacheDtypeFlag, &dtypeFlag, &features})
    if (o->getNumOccurrences() && o->empty())
      return refuse("--" + o->ArgStr +
                    "= is empty: give a value, or leave the flag out for the "
                    "default");
  if (programmaticLaunch && target == Target::Host)
    return refuse("--programmatic-launch makes GPU kernels wait for the "
                  "previous kernel in their stream; the host's kernels have "
                  "no grid to wait for: use it with --target=gpu");
  if (programmaticLaunch && !gpuCode)
    return refuse("--programmatic-launch is applied when the kernels are "
                  "lowered to NVVM; --emit=" +
                  Twine(emit == Stage::KV      ? "kv"
                        : emit == Stage::Loops ? "loops"
                                               : "gpu") +
                  " stops before that: use --emit=nvvm or later");
  if (!inputFilename.empty() && descriptionFlagsGiven())
    return refuse("give a description file or description flags, not both");
  if (!inputFilename.empty() && nameFlag.getNumOccurrences() &&
      emit != Stage::Header)
    return refuse("--name prefixes the kernels of a description given by "
                  "flags, or names the array of --emit=header; the kernels "
                  "of " +
                  inputFilename + " are named in the file");
  if (!isCIdentifier(nameFlag))
    return refuse("--name=" + nameFlag +
                  ": expected a C identifier (letters, digits and _, not "
                  "starting with a digit)");
  if (maxSeqLenFlag.getNumOccurrences() && !layoutHasRows())
    return refuse("--max-seq-len is for --layout=" +
                  abi::layoutNamesWhere([](const abi::LayoutInfo &layout) {
                    return !layout.paged();
                  }) +
                  "; the " + layoutName() + " layout takes --block-size");
  if (blockSizeFlag.getNumOccurrences() && layoutHasRows())
    return refuse("--block-size is for paged layouts; --layout=" +
                  layoutName() + " takes --max-seq-len");
  if (emit == Stage::SharedLib && target != Target::Host)
    return refuse("--emit=shared-lib needs --target=host");
  if (target == Target::Host &&
      !llvm::is_contained({Stage::KV, Stage::Loops, Stage::LLVM, Stage::Bundle,
                           Stage::SharedLib},
                          emit.getValue()))
    return refuse("--target=host emits kv, loops, llvm or bundle, or a "
                  "shared-lib");
  if (withCubin && (target == Target::Host ||
                    (emit != Stage::Bundle && emit != Stage::Header)))
    return refuse("--with-cubin puts a cubin into a GPU bundle: use it with "
                  "--target=gpu and --emit=bundle or --emit=header "
                  "(--emit=cubin writes the cubin alone)");
  if (ptxasVerbose && (!gpuCode || emit == Stage::NVVM || emit == Stage::LLVM))
    return refuse("--ptxas-verbose reports on PTX: use it with --target=gpu "
                  "and --emit=ptx, cubin, bundle or header");
  if ((chip.getNumOccurrences() || features.getNumOccurrences()) && !gpuCode)
    return refuse("--chip and --kvgen-features choose the GPU code: use them "
                  "with --target=gpu and --emit=nvvm or later");
  std::string known;
  if (!isKnownChip(chip, &known))
    return refuse("--chip=" + chip +
                  ": not a chip kvgen generates for; "
                  "expected one of " +
                  known);
  if (features.getNumOccurrences())
    if (std::optional<std::string> why = checkPTXFeatures(chip, features))
      return refuse("--kvgen-features=" + features + ": " + *why);
  return success();
}

static FailureOr<CodegenOptions> refuseCodegen(const llvm::Twine &message) {
  (void)refuse(message);
  return failure();
}

FailureOr<CodegenOptions> driver::getCodegenOptions() {
  PipelineOptions options;
  std::string error;
  llvm::raw_string_ostream errorStream(error);
  if (failed(options.parseFromString(pipelineOptions, errorStream)))
    return refuseCodegen(
        "--pipeline-options='" + pipelineOptions + "': " +
        (error.empty() ? StringRef("a value does not parse as its option's "
                                   "type (above)")
                       : StringRef(error).trim()));
  // kvgen's own flags choose these, and check them (checkFlags).
  if (options.chip.hasValue())
    return refuseCodegen("--pipeline-options: chip= is kvgen's --chip flag: "
                         "give that instead");
  if (options.features.hasValue())
    return refuseCodegen("--pipeline-options: features= is kvgen's "
                         "--kvgen-features flag: give that instead");
  if (!pipelineOptions.empty() && emit == Stage::KV)
    return refuseCodegen("--pipeline-options choose the generated code; "
                         "--emit=kv stops before any is generated");
  LoweringStage last = target == Target::Host ? LoweringStage::Host
                       : emit == Stage::Loops ? LoweringStage::Loops
                       : emit == Stage::GPU   ? LoweringStage::GPUMapping
                                              : LoweringStage::NVVM;
  if (std::optional<std::string> unused = options.findUnused(last))
    return refuseCodegen("--pipeline-options: " + *unused + " applies to " +
                         (*unused == "elide-token-check"
                              ? "the GPU mapping: use it with --target=gpu and "
                                "--emit=gpu or later"
                              : "the NVVM lowering: use it with --target=gpu "
                                "and --emit=nvvm or later"));
  // The host plans as for the chip table's default row; the GPU for --chip.
  if (target != Target::Host)
    options.chip = chip.getValue();
  if (std::optional<std::string> why = options.check())
    return refuseCodegen("--pipeline-options: " + *why);
  CodegenOptions codegen;
  codegen.plan = options.getPlanOptions();
  codegen.gpuMapping = options.getGPUMappingOptions();
  codegen.target = options.getGPUTargetOptions();
  codegen.target.features =
      features.getNumOccurrences() ? features.getValue() : ptxFeaturesFor(chip);
  // The host has no grid to wait for: its kernels never say they wait.
  codegen.target.programmaticLaunch =
      programmaticLaunch && target != Target::Host;
  return codegen;
}

/// The MLIR spelling of an ABI dtype name.
static std::string mlirTypeName(abi::DType dtype) {
  switch (dtype) {
  case abi::DType::F8E4M3:
    return "f8E4M3FN";
  case abi::DType::F8E5M2:
    return "f8E5M2";
  default:
    return abi::dtypeName(dtype);
  }
}

/// The cache dtype that a quantization kind stores.
static abi::DType storageOf(abi::QuantKind kind) {
  switch (kind) {
  case abi::QuantKind::FP8E4M3:
    return abi::DType::F8E4M3;
  case abi::QuantKind::FP8E5M2:
    return abi::DType::F8E5M2;
  case abi::QuantKind::Int8:
  case abi::QuantKind::NVFP4: // bytes; the cache also needs its #kv.nvfp4
    return abi::DType::I8;
  }
  llvm_unreachable("unknown quantization kind");
}

/// Parses `value` of `--flag` with an abi parser, or explains what it takes.
template <typename Enum, size_t N>
static LogicalResult parseABI(StringRef flag, StringRef value,
                              const char *const (&names)[N], Enum *out) {
  if (abi::parseName(names, std::string_view(value.data(), value.size()), out))
    return success();
  return refuse("--" + flag + "=" + value + ": expected one of " +
                llvm::join(ArrayRef<const char *>(names), ", "));
}

/// Accepts the dtypes K and V may have (f32, f16, bf16): --dtype's values.
static FailureOr<std::string> parseSourceDType(StringRef value) {
  for (abi::DType dtype : {abi::DType::F32, abi::DType::F16, abi::DType::BF16})
    if (value == abi::dtypeName(dtype))
      return mlirTypeName(dtype);
  return refuseText("--dtype=" + value +
                    ": expected one of f32, f16, bf16 (the dtype of K and "
                    "V; an fp8 or int8 cache is chosen with --quant)");
}

/// Accepts an ABI dtype name, or MLIR's spelling of an fp8 type.
static FailureOr<std::string> parseDType(StringRef flag, StringRef value) {
  if (value == "f8E4M3FN" || value == "f8E5M2")
    return value.str();
  abi::DType dtype;
  if (failed(parseABI(flag, value, abi::kDTypeNames, &dtype)))
    return failure();
  return mlirTypeName(dtype);
}

FailureOr<std::string> driver::descriptionFromFlags() {
  std::string layout = layoutName();
  abi::Layout layoutId = abi::kDefaultLayout;
  if (failed(parseABI("layout", layout, abi::kLayoutNames, &layoutId)))
    return failure();
  FailureOr<std::string> dtype = parseSourceDType(dtypeFlag);
  if (failed(dtype))
    return failure();

  std::string quant;
  std::optional<std::string> quantStorage;
  if (!quantFlag.empty()) {
    SmallVector<StringRef> parts;
    StringRef(quantFlag).split(parts, ',');
    if (parts.size() != 3 && !(parts.size() == 4 && parts[3] == "reciprocal"))
      return refuseText("--quant=" + quantFlag +
                        ": expected kind,granularity,mode[,reciprocal]");
    abi::QuantKind kind;
    abi::ScaleGranularity granularity;
    abi::ScaleMode mode;
    if (failed(parseABI("quant kind", parts[0], abi::kQuantKindNames, &kind)) ||
        failed(parseABI("quant granularity", parts[1], abi::kGranularityNames,
                        &granularity)) ||
        failed(parseABI("quant mode", parts[2], abi::kScaleModeNames, &mode)))
      return failure();
    quant = (", quant = #kv.quant<kind = " + parts[0] +
             ", granularity = " + parts[1] + ", mode = " + parts[2] +
             (parts.size() == 4 ? ", reciprocal = true" : "") + ">")
                .str();
    quantStorage = mlirTypeName(storageOf(kind));
  }
  // The cache dtype: --cache-dtype, else what --quant stores, else --dtype.
  // A --cache-dtype that contradicts --quant is the verifier's to refuse.
  std::string cacheDtype = quantStorage.value_or(*dtype);
  if (!cacheDtypeFlag.empty()) {
    FailureOr<std::string> given = parseDType("cache-dtype", cacheDtypeFlag);
    if (failed(given))
      return failure();
    cacheDtype = *given;
  }

  std::string cache;
  llvm::raw_string_ostream os(cache);
  os << "!kv.cache<layout = " << layout << ", ";
  if (!abi::layoutInfo(layoutId).paged())
    os << "max_seq_len = " << maxSeqLenFlag << ", ";
  else
    os << "block_size = " << blockSizeFlag << ", ";
  os << "num_kv_heads = " << numKvHeadsFlag << ", head_dim = " << headDimFlag
     << ", dtype = " << cacheDtype << quant << ">";

  SmallVector<StringRef> kernels;
  StringRef(kernelsFlag).split(kernels, ',', -1, /*KeepEmpty=*/false);
  if (kernels.empty())
    return refuseText(
        "--kernels=" + kernelsFlag +
        ": no kernels to generate; expected a list of " +
        llvm::join(ArrayRef<const char *>(abi::kKindNames), ", "));
  std::string text = "module {\n";
  for (StringRef k : kernels) {
    abi::KernelKind kind;
    if (failed(parseABI("kernels", k, abi::kKindNames, &kind)))
      return failure();
    // What each kind's op takes besides the cache: the dtype the rows come
    // from, or the dtype it writes them in (a latent kind's verifier asks
    // for a latent cache).
    std::string clause;
    switch (abi::kindTraits(kind).rows) {
    case abi::KindRows::Into:
      clause = " from " + *dtype;
      break;
    case abi::KindRows::OutOf:
      clause = " to " + *dtype;
      break;
    case abi::KindRows::None:
      break;
    }
    text += ("  kv." + k + " @" + nameFlag + "_" + k + " : " + cache + clause +
             "\n")
                .str();
  }
  return text + "}\n";
}

void driver::organizeHelp() {
  // The MLIR options worth showing; everything else outside kvgen's own
  // categories is hidden (it is still accepted).
  static constexpr StringLiteral kShown[] = {"mlir-timing",
                                             "mlir-timing-display",
                                             "mlir-print-ir-after-all",
                                             "mlir-print-ir-before-all",
                                             "mlir-print-ir-after-failure",
                                             "mlir-disable-threading",
                                             "mlir-print-debuginfo"};
  auto &options = cl::getRegisteredOptions();
  for (StringRef name : kShown) {
    auto it = options.find(name);
    if (it != options.end())
      it->second->addCategory(debugCategory);
  }
  cl::HideUnrelatedOptions({&kvgenCategory, &descCategory, &debugCategory});
}
