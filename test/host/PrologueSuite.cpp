//===- PrologueSuite.cpp - the fused prologue, run on the CPU -------------===//
//
// Each description of kv.append with a #kv.prologue<...> (docs/dev/
// PROLOGUE.md) is compiled by kvgen's host pipeline, JIT-compiled, and each
// of its kernels (vector and scalar variants) is called through its packed
// entry point with the ABI's parameters (docs/KERNEL-ABI.md) on host
// tensors: K, V and Q views of one fused QKV row, poisoned caches and a
// poisoned q_out. Every byte of both caches and of q_out is then compared
// with the plain C++ reference (conformance/PrologueReference.h) applied to
// the poisoned copies: written where the contract writes, untouched
// elsewhere (padding slots, a slot past the cache, a position outside the
// cos/sin cache). The cases, inputs and comparison are PrologueCases.cpp's,
// shared with kvgen-prologue-gpu.
//
// The parameters are packed here, from the plan's list, rather than by
// kvrt: the suite checks the kernels, kvrt's own tests check its packing.
//
//   kvgen-prologue-suite            every description, on the host
//   kvgen-prologue-suite --filter=S only those whose name contains S
//   kvgen-prologue-suite --print    the descriptions, as kv ops (a module's
//                                   body)
//   kvgen-prologue-suite --gpu      the same on CUDA device 0 (kvgen's PTX,
//                                   loaded by the driver; --chip=sm_XX picks
//                                   the plan's chip, sm_90 by default); exit
//                                   code 77 where there is no device
//   kvgen-prologue-suite --emit-gpu=DIR
//                                   no run: writes each description's PTX
//                                   (for --chip) and DIR/prologue.manifest
//                                   (each kernel's plan and seed) for
//                                   kvgen-prologue-gpu, which runs them on a
//                                   machine without MLIR
//
//===----------------------------------------------------------------------===//

#include "PrologueCases.h"
#include "PrologueHost.h"

#include "kvgen/Pipeline/Description.h"
#include "kvgen/Pipeline/HostJIT.h"
#include "kvgen/Pipeline/PTX.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <sys/stat.h>
#include <vector>

using namespace kvgen;
using namespace kvgen::prologue;

namespace {

/// The description's PTX, by kvgen's GPU pipeline for `chip`.
mlir::FailureOr<std::string> compilePTX(mlir::ModuleOp module,
                                        const std::string &chip) {
  PipelineOptions options;
  options.chip = chip;
  if (std::optional<std::string> why = options.check()) {
    module.emitError(*why);
    return mlir::failure();
  }
  mlir::PassManager pm(module.getContext());
  buildLoopsPipeline(pm, options.getPlanOptions());
  buildGPUMappingPipeline(pm, options.getGPUMappingOptions());
  buildNVVMPipeline(pm, options.getGPUTargetOptions());
  if (mlir::failed(pm.run(module)))
    return mlir::failure();
  return serializeToPTX(module);
}
} // namespace

int main(int argc, char **argv) {
  std::string filter, chip, emitDir;
  bool gpu = false, print = false, emit = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--filter=", 0) == 0)
      filter = arg.substr(9);
    else if (arg == "--gpu")
      gpu = true;
    else if (arg == "--print")
      print = true;
    else if (arg.rfind("--chip=", 0) == 0)
      chip = arg.substr(7);
    else if (arg.rfind("--emit-gpu=", 0) == 0 && arg.size() > 11) {
      emit = true;
      emitDir = arg.substr(11);
    } else {
      std::cerr << "usage: kvgen-prologue-suite [--gpu | --emit-gpu=DIR] "
                   "[--chip=sm_XX] [--print] [--filter=S]\n";
      return 2;
    }
  }
  if (gpu && emit) {
    std::cerr << "kvgen-prologue-suite: --gpu and --emit-gpu exclude each "
                 "other (--emit-gpu runs nothing)\n";
    return 2;
  }
  CudaDriver cu;
  if (gpu) {
    if (std::string why = cu.init(); !why.empty()) {
      std::cerr << "kvgen-prologue-suite --gpu: " << why << "; skipped\n";
      return 77;
    }
  }
  if ((gpu || emit) && chip.empty())
    chip = PlanOptions().chip;
  if (emit && mkdir(emitDir.c_str(), 0777) != 0 && errno != EEXIST) {
    std::cerr << "kvgen-prologue-suite: cannot create " << emitDir << ": "
              << std::strerror(errno) << "\n";
    return 1;
  }
  mlir::DialectRegistry registry;
  registerKVGenDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  std::string error;
  context.getDiagEngine().registerHandler([&](mlir::Diagnostic &diag) {
    error = diag.str();
    return mlir::success();
  });

  auto report = [](const Kernel &kernel, const Case &c,
                   const std::vector<std::string> &failures) {
    std::cerr << "FAIL " << kernel.name << " " << c.spec.attr() << "\n";
    for (const std::string &f : failures)
      std::cerr << "  " << f << "\n";
  };
  Manifest manifest;
  manifest.chip = chip;
  int descriptions = 0, runs = 0, failed = 0;
  uint32_t seed = 1;
  for (const Case &c : cases()) {
    if (c.desc.name.find(filter) == std::string::npos)
      continue;
    ++descriptions;
    std::string text = moduleText(c);
    if (print) {
      std::cout << text.substr(9, text.size() - 12) << "\n";
      continue;
    }
    mlir::OwningOpRef<mlir::ModuleOp> module = parseDescription(text, &context);
    if (!module) {
      std::cerr << "FAIL " << c.desc.name << ": does not parse: " << error
                << "\n"
                << text;
      ++failed;
      continue;
    }
    if (gpu || emit) {
      std::vector<KernelPlan> plans = collectPlans(*module);
      mlir::FailureOr<std::string> ptx = compilePTX(*module, chip);
      if (mlir::failed(ptx)) {
        std::cerr << "FAIL " << c.desc.name << ": no PTX: " << error << "\n";
        ++failed;
        continue;
      }
      if (emit) {
        // The seeds are the ones a run of the suite with the same filter
        // gives each kernel.
        Manifest::Description entry{c.desc.name, c.desc.name + ".ptx", {}};
        for (const KernelPlan &plan : plans) {
          ++runs;
          entry.kernels.push_back({kernelOf(plan), seed++});
        }
        std::ofstream out(emitDir + "/" + entry.ptx, std::ios::binary);
        out << *ptx;
        out.close();
        if (!out) {
          std::cerr << "FAIL " << c.desc.name << ": cannot write " << emitDir
                    << "/" << entry.ptx << "\n";
          ++failed;
          continue;
        }
        manifest.descriptions.push_back(entry);
        continue;
      }
      CudaDriver::Handle cuModule = nullptr;
      if (cu.cuModuleLoadData(&cuModule, ptx->c_str()) != 0) {
        std::cerr << "FAIL " << c.desc.name << ": the driver refuses its PTX\n";
        ++failed;
        continue;
      }
      for (const KernelPlan &plan : plans) {
        ++runs;
        Kernel kernel = kernelOf(plan);
        std::vector<std::string> failures =
            check(c, kernel, seed++, gpuLauncher(cu, cuModule));
        if (failures.empty())
          continue;
        ++failed;
        report(kernel, c, failures);
      }
      cu.cuModuleUnload(cuModule);
      continue;
    }
    mlir::FailureOr<HostKernels> kernels = compileForHost(*module);
    if (mlir::failed(kernels)) {
      std::cerr << "FAIL " << c.desc.name << ": does not compile: " << error
                << "\n"
                << text;
      ++failed;
      continue;
    }
    for (const KernelPlan &plan : kernels->getPlans()) {
      HostKernels::Entry entry = kernels->lookup(plan.name);
      ++runs;
      if (!entry) {
        std::cerr << "FAIL " << plan.name << ": no entry point\n";
        ++failed;
        continue;
      }
      Kernel kernel = kernelOf(plan);
      std::vector<std::string> failures =
          check(c, kernel, seed++, hostLauncher(entry));
      if (failures.empty())
        continue;
      ++failed;
      report(kernel, c, failures);
    }
  }
  if (print)
    return 0;
  if (emit) {
    // A stage with a description missing would pass for a complete one:
    // where any failed, no manifest is written and the runner refuses DIR.
    std::string manifestPath = emitDir + "/" + kManifestName;
    std::remove(manifestPath.c_str());
    if (failed == 0 && descriptions > 0)
      if (std::string why = writeManifest(manifest, manifestPath);
          !why.empty()) {
        std::cerr << "kvgen-prologue-suite: " << why << "\n";
        ++failed;
      }
    std::cout << "kvgen-prologue-suite --emit-gpu (" << chip
              << "): " << descriptions << " descriptions, " << runs
              << " kernels, " << failed << " failed, in " << emitDir << "\n";
    return failed == 0 && descriptions > 0 ? 0 : 1;
  }
  std::cout << "kvgen-prologue-suite" << (gpu ? " (" + chip + ")" : "") << ": "
            << descriptions << " descriptions, " << runs << " kernels, "
            << failed << " failed\n";
  return failed == 0 && descriptions > 0 ? 0 : 1;
}
