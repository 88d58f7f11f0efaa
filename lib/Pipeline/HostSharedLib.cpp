//===- HostSharedLib.cpp - host kernels as a loadable shared object -------===//
//
// The host JIT (compileForHost) needs LLVM in the process that runs the
// kernels. A shared object does not: kvgen compiles the same host module
// once, and a process without LLVM (the Python package's CPU path, a test)
// dlopens it and hands its packed entry points to kvrt.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/HostSharedLib.h"
#include "kvgen/ABI/ABI.h"
#include "kvgen/Pipeline/Bundle.h"
#include "kvgen/Pipeline/HostBuiltins.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "RunTool.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/BinaryFormat/ELF.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Object/ELFObjectFile.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/StringSaver.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"

#ifndef KVGEN_VERSION_STRING
#define KVGEN_VERSION_STRING "unknown"
#endif

using namespace mlir;
using namespace kvgen;

void kvgen::printKVGenVersion(llvm::raw_ostream &os) {
  os << "kvgen " << KVGEN_VERSION_STRING << " (bundle format "
     << abi::kBundleVersion << ")\n";
}

/// Defines `void _mlir_<f>(void **args)` for every kernel `f`: argument i is
/// loaded from *args[i], the convention of MLIR's ExecutionEngine (whose own
/// helper is not exported) and of kvrt's host launches. The kernels become
/// hidden: only the packed entry points are the object's interface. A
/// function hidden already (a runtime builtin, HostBuiltins.h) is no kernel.
static void definePackedEntryPoints(llvm::Module &module) {
  llvm::LLVMContext &ctx = module.getContext();
  llvm::IRBuilder<> builder(ctx);
  SmallVector<llvm::Function *> kernels;
  for (llvm::Function &f : module.functions())
    if (!f.isDeclaration() && !f.hasLocalLinkage() && !f.hasHiddenVisibility())
      kernels.push_back(&f);
  for (llvm::Function *f : kernels) {
    auto *type = llvm::FunctionType::get(
        builder.getVoidTy(), builder.getPtrTy(), /*isVarArg=*/false);
    auto *entry =
        llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage,
                               "_mlir_" + f->getName(), module);
    builder.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", entry));
    llvm::Value *argList = entry->getArg(0);
    SmallVector<llvm::Value *> args;
    for (llvm::Argument &arg : f->args()) {
      llvm::Value *slot = builder.CreateConstGEP1_64(builder.getPtrTy(),
                                                     argList, arg.getArgNo());
      llvm::Value *argPtr = builder.CreateLoad(builder.getPtrTy(), slot);
      args.push_back(builder.CreateLoad(arg.getType(), argPtr));
    }
    builder.CreateCall(f, args);
    builder.CreateRetVoid();
    f->setVisibility(llvm::GlobalValue::HiddenVisibility);
    f->setDSOLocal(true);
  }
}

/// Drops the kv.* argument attributes (the ABI names kvgen's lowering keeps
/// for the bundle): LLVM IR has no place for them, and the translation would
/// warn about each one.
static void dropKVArgumentAttrs(ModuleOp module) {
  module.walk([](LLVM::LLVMFuncOp func) {
    for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
      if (DictionaryAttr attrs = func.getArgAttrDict(i))
        for (NamedAttribute attr : llvm::to_vector(attrs.getValue()))
          if (attr.getName().strref().starts_with("kv."))
            func.removeArgAttr(i, attr.getName());
  });
}

/// Defines a function `name` returning a constant.
static void defineConstantGetter(llvm::Module &module, StringRef name,
                                 llvm::Constant *value) {
  llvm::LLVMContext &ctx = module.getContext();
  auto *fn = llvm::Function::Create(
      llvm::FunctionType::get(value->getType(), /*isVarArg=*/false),
      llvm::GlobalValue::ExternalLinkage, name, module);
  llvm::IRBuilder<> builder(llvm::BasicBlock::Create(ctx, "entry", fn));
  builder.CreateRet(value);
}

/// Embeds `text` (NUL-terminated) and defines `getter` returning it.
static void embedString(llvm::Module &module, StringRef getter,
                        StringRef text) {
  llvm::Constant *data = llvm::ConstantDataArray::getString(
      module.getContext(), text, /*AddNull=*/true);
  auto *global = new llvm::GlobalVariable(
      module, data->getType(), /*isConstant=*/true,
      llvm::GlobalValue::PrivateLinkage, data, (getter + ".data").str());
  global->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
  defineConstantGetter(module, getter, global);
}

/// The C compiler driver that links the object, as a program and the
/// arguments that come before kvgen's: $CC split into words as make's shell
/// would (so `CC="gcc -m32"` keeps its flag), else the first of cc, gcc,
/// clang on PATH. A $CC that cannot be split without a shell, or whose
/// program is not found, is an error naming it: never a silent fallback to
/// another compiler.
static FailureOr<SmallVector<std::string>> findLinker(std::string &error) {
  if (const char *cc = std::getenv("CC")) {
    StringRef value(cc);
    // Quotes and backslashes are split as the shell would; expansions,
    // redirections and command separators need a shell, which kvgen does
    // not run.
    size_t special = value.find_first_of("$`;|&<>(){}*?[]~\n#!");
    if (special != StringRef::npos) {
      error = ("$CC='" + value + "': '" + Twine(value[special]) +
               "' needs a shell to mean what make would make of it; kvgen "
               "runs the compiler without one: set CC to a program and its "
               "arguments")
                  .str();
      return failure();
    }
    llvm::BumpPtrAllocator alloc;
    llvm::StringSaver saver(alloc);
    SmallVector<const char *> words;
    llvm::cl::TokenizeGNUCommandLine(value, saver, words);
    if (words.empty()) {
      error = "$CC is set but names no program: unset it (kvgen then links "
              "with cc, gcc or clang) or set it to a C compiler driver";
      return failure();
    }
    llvm::ErrorOr<std::string> found =
        llvm::sys::findProgramByName(words.front());
    if (!found || !llvm::sys::fs::can_execute(*found)) {
      error = ("$CC='" + value + "': '" + words.front() + "' is not found" +
               (StringRef(words.front()).contains('/') ? "" : " on PATH") +
               "; --emit=shared-lib links with the C compiler driver $CC "
               "names: install it, or set CC to one that is installed")
                  .str();
      return failure();
    }
    SmallVector<std::string> linker{*found};
    for (const char *word : ArrayRef(words).drop_front())
      linker.push_back(word);
    return linker;
  }
  for (StringRef name : {"cc", "gcc", "clang"})
    if (auto found = llvm::sys::findProgramByName(name))
      return SmallVector<std::string>{*found};
  error = "--emit=shared-lib links with the system's C compiler driver and "
          "none was found (looked for $CC, cc, gcc, clang on PATH); install "
          "one (Debian: gcc) or set CC";
  return failure();
}

/// Refuses a linked file that is not what the package loads: an ELF shared
/// object of this host's machine that defines (in its dynamic symbol table)
/// the packed entry point of every kernel and the bundle getters. A driver
/// that exits 0 without linking (`CC=true`) or links for another machine
/// (`CC="gcc -m32"`) is caught here, not at load time.
static LogicalResult checkSharedObject(StringRef bytes, StringRef linker,
                                       ArrayRef<std::string> symbols,
                                       std::string &error) {
  std::string by = "the shared object linked by '" + linker.str() + "'";
  if (bytes.empty()) {
    error = by + " is empty (0 bytes): the driver exited 0 without linking";
    return failure();
  }
  llvm::Expected<std::unique_ptr<llvm::object::ObjectFile>> object =
      llvm::object::ObjectFile::createObjectFile(
          llvm::MemoryBufferRef(bytes, "shared object"));
  if (!object) {
    error = by + " is not an object file (" +
            llvm::toString(object.takeError()) + ")";
    return failure();
  }
  auto *elf = dyn_cast<llvm::object::ELFObjectFileBase>(object->get());
  if (!elf || elf->getEType() != llvm::ELF::ET_DYN) {
    error = by + " is not an ELF shared object";
    return failure();
  }
  llvm::Triple host(llvm::sys::getProcessTriple());
  if (elf->getArch() != host.getArch()) {
    error = by + " is for " +
            llvm::Triple::getArchTypeName(elf->getArch()).str() +
            (elf->is64Bit() ? " (64-bit)" : " (32-bit)") +
            ", not for this host's " + host.getArchName().str() +
            " (do the flags in $CC choose another machine?)";
    return failure();
  }
  llvm::StringSet<> defined;
  for (const llvm::object::ELFSymbolRef &sym :
       elf->getDynamicSymbolIterators()) {
    llvm::Expected<llvm::StringRef> name = sym.getName();
    llvm::Expected<uint32_t> flags = sym.getFlags();
    if (!name || !flags) {
      if (!name)
        llvm::consumeError(name.takeError());
      if (!flags)
        llvm::consumeError(flags.takeError());
      continue;
    }
    if (!(*flags & llvm::object::SymbolRef::SF_Undefined) &&
        (*flags & llvm::object::SymbolRef::SF_Global))
      defined.insert(*name);
  }
  for (const std::string &symbol : symbols)
    if (!defined.contains(symbol)) {
      error = by + " does not export '" + symbol + "'";
      return failure();
    }
  return success();
}

/// Links `object` into a shared object with the system's C compiler driver
/// and checks that it exports `symbols`; returns its bytes, or failure with
/// the reason in `error`.
static FailureOr<std::string> linkSharedObject(StringRef object,
                                               ArrayRef<std::string> symbols,
                                               std::string &error) {
  FailureOr<SmallVector<std::string>> linker = findLinker(error);
  if (failed(linker))
    return failure();
  std::string program = linker->front();
  std::string command = llvm::join(*linker, " ");
  ToolRun run = runTool(
      program, object, "kvgen-host", "o", "so",
      [&](StringRef objPath, StringRef soPath) -> SmallVector<std::string> {
        SmallVector<std::string> args(*linker);
        args.append({"-shared", "-Wl,-z,noexecstack", "-o", soPath.str(),
                     objPath.str()});
        return args;
      });
  switch (run.status) {
  case ToolRun::NoTemporaryFile:
    error = "cannot write the host kernels' object to a temporary file" +
            (run.writeError.empty() ? "" : ": " + run.writeError);
    return failure();
  case ToolRun::Failed:
    if (run.signal)
      error = "the C compiler driver '" + command +
              "' linking the host "
              "kernels was " +
              describeSignal(run.signal) +
              (run.log.empty() ? "" : ":\n" + run.log);
    else
      error = "linking the host kernels with '" + command + "' failed (" +
              describeFailure(run) + "):\n" + run.log;
    return failure();
  case ToolRun::NoOutput:
    error = "cannot read the linked shared object";
    return failure();
  case ToolRun::Succeeded:
    break;
  }
  if (failed(checkSharedObject(run.output, command, symbols, error)))
    return failure();
  return run.output;
}

FailureOr<std::string> kvgen::buildHostSharedLib(ModuleOp module,
                                                 PassManager &pm,
                                                 std::string *toolError,
                                                 const PlanOptions &options) {
  static bool initialized = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)initialized;

  // The manifest comes from the kv ops, before lowering consumes them.
  std::string bundle =
      writeBundle(collectPlans(module, options), GPUTargetOptions(), /*ptx=*/"",
                  /*cubin=*/std::nullopt);
  buildLoopsPipeline(pm, options);
  buildHostPipeline(pm);
  if (failed(pm.run(module)))
    return failure();

  // The module now holds LLVM dialect; an error names its location only, not
  // the whole lowered module.
  Location loc = module.getLoc();
  // A generic CPU of the host's architecture: the object may be carried to
  // another machine of the same architecture (a cache of generated kernels).
  llvm::Triple triple(llvm::sys::getProcessTriple());
  std::string error;
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return emitError(loc, "no LLVM target for this host: ") << error;
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      triple, "generic", "", llvm::TargetOptions(), llvm::Reloc::PIC_));
  if (!machine)
    return emitError(loc, "cannot create a target machine for ")
           << triple.str();

  dropKVArgumentAttrs(module);
  defineHostBuiltins(module);
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext, "kvgen_host_kernels");
  if (!llvmModule)
    return emitError(loc, "cannot translate the host kernels to LLVM IR");
  llvmModule->setTargetTriple(triple);
  llvmModule->setDataLayout(machine->createDataLayout());
  definePackedEntryPoints(*llvmModule);
  SmallVector<std::string> exported{
      "kvgen_bundle_json", "kvgen_bundle_json_size", "kvgen_compiler_version"};
  for (llvm::Function &f : llvmModule->functions())
    if (f.getName().starts_with("_mlir_") && !f.isDeclaration())
      exported.push_back(f.getName().str());
  embedString(*llvmModule, "kvgen_bundle_json", bundle);
  defineConstantGetter(*llvmModule, "kvgen_bundle_json_size",
                       llvm::ConstantInt::get(
                           llvm::Type::getInt64Ty(llvmContext), bundle.size()));
  std::string version;
  llvm::raw_string_ostream versionOS(version);
  printKVGenVersion(versionOS);
  embedString(*llvmModule, "kvgen_compiler_version",
              StringRef(version).rtrim('\n'));

  auto optimize =
      makeOptimizingTransformer(/*optLevel=*/2, /*sizeLevel=*/0, machine.get());
  if (llvm::Error err = optimize(llvmModule.get()))
    return emitError(loc, "optimizing the host kernels failed: ")
           << llvm::toString(std::move(err));

  llvm::SmallString<0> object;
  llvm::raw_svector_ostream objectOS(object);
  llvm::legacy::PassManager codegen;
  if (machine->addPassesToEmitFile(codegen, objectOS, nullptr,
                                   llvm::CodeGenFileType::ObjectFile))
    return emitError(loc, "the host target cannot emit object files");
  codegen.run(*llvmModule);

  FailureOr<std::string> lib = linkSharedObject(object, exported, error);
  if (failed(lib) && toolError) {
    *toolError = error;
    return failure();
  }
  if (failed(lib))
    return emitError(loc, error);
  return lib;
}
