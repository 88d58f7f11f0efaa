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
#include "kvgen/Pipeline/Pipeline.h"

#include "RunTool.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/Program.h"
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
/// hidden: only the packed entry points are the object's interface.
static void definePackedEntryPoints(llvm::Module &module) {
  llvm::LLVMContext &ctx = module.getContext();
  llvm::IRBuilder<> builder(ctx);
  SmallVector<llvm::Function *> kernels;
  for (llvm::Function &f : module.functions())
    if (!f.isDeclaration() && !f.hasLocalLinkage())
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

/// The C compiler driver that links the object: $CC, else cc, gcc, clang.
static std::string findLinker() {
  if (const char *cc = std::getenv("CC"))
    if (auto found = llvm::sys::findProgramByName(cc))
      return *found;
  for (StringRef name : {"cc", "gcc", "clang"})
    if (auto found = llvm::sys::findProgramByName(name))
      return *found;
  return "";
}

/// Links `object` into a shared object with the system's C compiler driver;
/// returns its bytes, or failure with the reason in `error`.
static FailureOr<std::string> linkSharedObject(StringRef object,
                                               std::string &error) {
  std::string linker = findLinker();
  if (linker.empty()) {
    error = "--emit=shared-lib links with the system's C compiler driver and "
            "none was found (looked for $CC, cc, gcc, clang on PATH); install "
            "one (Debian: gcc) or set CC";
    return failure();
  }
  ToolRun run = runTool(
      linker, object, "kvgen-host", "o", "so",
      [&](StringRef objPath, StringRef soPath) -> SmallVector<std::string> {
        return {linker, "-shared",    "-Wl,-z,noexecstack",
                "-o",   soPath.str(), objPath.str()};
      });
  switch (run.status) {
  case ToolRun::NoTemporaryFile:
    error = "cannot create a temporary file for the object";
    return failure();
  case ToolRun::Failed:
    error = "linking the host kernels with '" + linker + "' failed" +
            (run.execError.empty() ? "" : " (" + run.execError + ")") + ":\n" +
            run.log;
    return failure();
  case ToolRun::NoOutput:
    error = "cannot read the linked shared object";
    return failure();
  case ToolRun::Succeeded:
    break;
  }
  return run.output;
}

FailureOr<std::string> kvgen::buildHostSharedLib(ModuleOp module,
                                                 PassManager &pm) {
  static bool initialized = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)initialized;

  // The manifest comes from the kv ops, before lowering consumes them.
  std::string bundle =
      writeBundle(collectPlans(module), GPUTargetOptions(), /*ptx=*/"",
                  /*cubin=*/std::nullopt);
  buildLoopsPipeline(pm);
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
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext, "kvgen_host_kernels");
  if (!llvmModule)
    return emitError(loc, "cannot translate the host kernels to LLVM IR");
  llvmModule->setTargetTriple(triple);
  llvmModule->setDataLayout(machine->createDataLayout());
  definePackedEntryPoints(*llvmModule);
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

  FailureOr<std::string> lib = linkSharedObject(object, error);
  if (failed(lib))
    return emitError(loc, error);
  return lib;
}
