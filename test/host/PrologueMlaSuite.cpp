//===- PrologueMlaSuite.cpp - the MLA appends' prologue, byte for byte ----===//
//
// kv.mla_append and kv.mla_fused_append with a #kv.prologue<rope = ...>
// (docs/dev/PROLOGUE.md, "MLA"): RoPE on k_pe and on each head of q_pe,
// kv_c stored as the plain latent append stores it. Each description is
// compiled by kvgen's host pipeline (or, with --gpu, to PTX for device 0)
// and each of its kernels (vector and scalar variants) is called with the
// ABI's parameters on host tensors laid out as vLLM's are: q_pe a strided
// view of a Q buffer whose heads are [q_nope, q_pe], kv_c and k_pe views of
// one [kv_c, k_pe] row per token. The latent cache, q_out and k_pe_out are
// poisoned (or, in place, are those views themselves), and every byte of the
// cache and of both buffers is compared with the reference
// (PrologueMlaCases.cpp), written from docs/CONTRACT.md ("The MLA appends'
// prologue"): written where the contract writes, untouched elsewhere (a
// padding slot, a slot past the cache, a position outside the cos/sin
// cache: nothing of the token, neither its entry nor its q_out and k_pe_out
// rows).
//
//   kvgen-prologue-mla-suite              every description, on the host
//   kvgen-prologue-mla-suite --filter=S   only those whose name contains S
//   kvgen-prologue-mla-suite --print      the descriptions, as kv ops
//   kvgen-prologue-mla-suite --gpu        the same on CUDA device 0
//                                         (--chip=sm_XX, sm_90 by default);
//                                         exit code 77 without a device
//   kvgen-prologue-mla-suite --emit-gpu=DIR
//                                         no run: each description's PTX
//                                         (for --chip) and
//                                         DIR/prologue.manifest for
//                                         kvgen-prologue-mla-gpu, which runs
//                                         them on a machine without MLIR
//   kvgen-prologue-mla-suite --break=B    a deliberately wrong reference
//                                         (swap: NeoX/GPT-J pairing swapped;
//                                         sign: sin negated; unrounded: the
//                                         entry's k_pe quantized from fp32,
//                                         not from k_pe_out's value;
//                                         padding-q: q_out written for a
//                                         padding token): every description
//                                         must then fail (unrounded: the
//                                         quantized ones, some kernel)
//
//===----------------------------------------------------------------------===//

#include "PrologueHost.h"
#include "PrologueMlaCases.h"

#include "kvgen/Pipeline/Description.h"
#include "kvgen/Pipeline/HostJIT.h"
#include "kvgen/Pipeline/PTX.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <sys/stat.h>
#include <vector>

using namespace kvgen;
using namespace kvgen::conformance;
using namespace kvgen::prologue;

namespace {
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
  bool gpu = false, print = false;
  Break brk = Break::None;
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
    else if (arg.rfind("--emit-gpu=", 0) == 0 && arg.size() > 11)
      emitDir = arg.substr(11);
    else if (arg == "--break=swap")
      brk = Break::Swap;
    else if (arg == "--break=sign")
      brk = Break::Sign;
    else if (arg == "--break=unrounded")
      brk = Break::Unrounded;
    else if (arg == "--break=padding-q")
      brk = Break::PaddingQ;
    else {
      std::cerr << "usage: kvgen-prologue-mla-suite [--gpu | --emit-gpu=DIR] "
                   "[--chip=sm_XX] "
                   "[--print] [--filter=S] "
                   "[--break=swap|sign|unrounded|padding-q]\n";
      return 2;
    }
  }
  bool emit = !emitDir.empty();
  if (emit && (gpu || brk != Break::None)) {
    std::cerr << "kvgen-prologue-mla-suite: --emit-gpu runs nothing: not with "
                 "--gpu or --break\n";
    return 2;
  }
  if (emit && mkdir(emitDir.c_str(), 0777) != 0 && errno != EEXIST) {
    std::cerr << "kvgen-prologue-mla-suite: cannot create " << emitDir << ": "
              << std::strerror(errno) << "\n";
    return 1;
  }
  if (emit && chip.empty())
    chip = PlanOptions().chip;
  Manifest manifest;
  manifest.chip = chip;
  CudaDriver cu;
  if (gpu) {
    if (std::string why = cu.init(); !why.empty()) {
      std::cerr << "kvgen-prologue-mla-suite --gpu: " << why << "; skipped\n";
      return 77;
    }
    if (chip.empty())
      chip = PlanOptions().chip;
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

  int descriptions = 0, runs = 0, failed = 0, caught = 0, missed = 0;
  uint32_t seed = 1;
  auto run = [&](const MlaCase &c, const Kernel &kernel,
                 const Launcher &launch) {
    ++runs;
    std::vector<std::string> failures =
        checkMla(c, kernel, seed++, launch, brk);
    if (brk != Break::None) {
      // A broken reference must be caught by every kernel's bytes, but for
      // the double rounding of unrounded, which changes an fp8 byte only
      // where the two roundings part: there, by some kernel of the run.
      if (failures.empty() && brk == Break::Unrounded) {
        ++missed;
      } else if (failures.empty()) {
        std::cerr << "FAIL " << kernel.name
                  << ": matches a deliberately wrong reference\n";
        ++failed;
      } else {
        ++caught;
      }
      return;
    }
    if (failures.empty())
      return;
    ++failed;
    std::cerr << "FAIL " << kernel.name << " " << c.spec().attr() << "\n";
    for (const std::string &f : failures)
      std::cerr << "  " << f << "\n";
  };
  for (const MlaCase &c : mlaCases()) {
    if (c.desc.name.find(filter) == std::string::npos)
      continue;
    // No q_pe: nothing for the padding-q break to catch; an unquantized
    // cache stores the rounded k_pe whichever way it is computed.
    if ((brk == Break::PaddingQ && c.qHeads == 0) ||
        (brk == Break::Unrounded && !c.desc.quant))
      continue;
    ++descriptions;
    std::string text = c.moduleText();
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
    if (emit) {
      // The seeds are the ones a run of the suite with the same filter
      // gives each kernel.
      std::vector<KernelPlan> plans = collectPlans(*module);
      mlir::FailureOr<std::string> ptx = compilePTX(*module, chip);
      Manifest::Description entry{c.desc.name, c.desc.name + ".ptx", {}};
      for (const KernelPlan &plan : plans) {
        ++runs;
        entry.kernels.push_back({kernelOf(plan), seed++});
      }
      std::ofstream out(emitDir + "/" + entry.ptx, std::ios::binary);
      if (mlir::succeeded(ptx))
        out << *ptx;
      out.close();
      if (mlir::failed(ptx) || !out) {
        std::cerr << "FAIL " << c.desc.name << ": no PTX written: " << error
                  << "\n";
        ++failed;
        continue;
      }
      manifest.descriptions.push_back(entry);
      continue;
    }
    if (gpu) {
      std::vector<KernelPlan> plans = collectPlans(*module);
      mlir::FailureOr<std::string> ptx = compilePTX(*module, chip);
      CudaDriver::Handle cuModule = nullptr;
      if (mlir::failed(ptx) ||
          cu.cuModuleLoadData(&cuModule, ptx->c_str()) != 0) {
        std::cerr << "FAIL " << c.desc.name
                  << ": no PTX the driver loads: " << error << "\n";
        ++failed;
        continue;
      }
      for (const KernelPlan &plan : plans)
        run(c, kernelOf(plan), gpuLauncher(cu, cuModule));
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
      if (!entry) {
        std::cerr << "FAIL " << plan.name << ": no entry point\n";
        ++runs;
        ++failed;
        continue;
      }
      run(c, kernelOf(plan), hostLauncher(entry));
    }
  }
  if (print)
    return 0;
  if (emit) {
    // A stage with a description missing would pass for a complete one:
    // where any failed, no manifest is written.
    std::string path = emitDir + "/" + kManifestName;
    std::remove(path.c_str());
    if (failed == 0 && descriptions > 0)
      if (std::string why = writeManifest(manifest, path); !why.empty()) {
        std::cerr << "kvgen-prologue-mla-suite: " << why << "\n";
        ++failed;
      }
    std::cout << "kvgen-prologue-mla-suite --emit-gpu (" << chip
              << "): " << descriptions << " descriptions, " << runs
              << " kernels, " << failed << " failed, in " << emitDir << "\n";
    return failed == 0 && descriptions > 0 ? 0 : 1;
  }
  std::cout << "kvgen-prologue-mla-suite" << (gpu ? " (" + chip + ")" : "")
            << ": " << descriptions << " descriptions, " << runs << " kernels, "
            << failed << " failed";
  if (brk != Break::None)
    std::cout << ", " << caught << " caught the broken reference"
              << (missed ? ", " + std::to_string(missed) + " did not" : "");
  std::cout << "\n";
  if (brk != Break::None && caught == 0)
    return 1;
  return failed == 0 && descriptions > 0 ? 0 : 1;
}
