//===- PrologueCases.h - the fused prologue's cases, without MLIR -*- C++
//-*-===//
//
// What kvgen-prologue-suite and kvgen-prologue-gpu share: the descriptions
// the suite covers, the inputs of one kernel call (from a seed), the
// reference's expected bytes, the byte-for-byte comparison, and the CUDA
// driver (loaded at run time). None of it needs MLIR or LLVM, so that the
// GPU runner links only this, the reference and the driver loader: the GPU
// machine has no MLIR. A kernel is known here by what its plan says of it
// (name, parameter list, head split, launch geometry), which the suite takes
// from kvgen's plan and the runner from the manifest the suite wrote.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_TEST_HOST_PROLOGUECASES_H
#define KVGEN_TEST_HOST_PROLOGUECASES_H

#include "conformance/Description.h"
#include "conformance/PrologueReference.h"

#include "kvgen/ABI/ABI.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kvgen::prologue {

struct Case {
  conformance::Description desc;
  conformance::PrologueSpec spec;
  /// q_out is query itself (the same elements, the same strides): vLLM
  /// rotates Q in place inside its fused QKV buffer.
  bool inPlace = false;
};

/// Every description the suite covers, in the suite's order.
std::vector<Case> cases();

/// The kv op of `c`, as a module's text.
std::string moduleText(const Case &c);

/// What the check needs of one kernel's plan.
struct Kernel {
  std::string name;
  /// Logical parameters, in ABI order.
  std::vector<abi::Param> params;
  int64_t vectorElems = 1;
  int64_t lanesPerGroup = 1;
  int64_t threadsX = 1;
  int64_t tokensPerBlock = 1;
};

/// One buffer of a launch: its host copy.
struct HostBuffer {
  void *data;
  size_t bytes;
};

/// Runs one kernel on its parameters (ABI order): the buffers' host copies
/// (which it leaves holding what the kernel wrote) and the scalars. Returns
/// "" or why it could not run.
using Launcher = std::function<std::string(
    const Kernel &, int64_t numTokens, std::vector<HostBuffer> &,
    std::vector<int32_t> &, const std::vector<bool> &isBuffer)>;

/// Runs `kernel` of `c` through `launch` on inputs drawn from `seed` and
/// compares every byte of both caches and q_out with the reference; returns
/// the failures' descriptions (none: it passed).
std::vector<std::string> check(const Case &c, const Kernel &kernel,
                               uint32_t seed, const Launcher &launch);

/// Compares `got` with `want` element by element (elements of `type`):
/// nothing where every byte matches, else how many elements differ and the
/// first few.
std::optional<std::string> compareBytes(const char *what,
                                        const std::vector<uint8_t> &got,
                                        const std::vector<uint8_t> &want,
                                        conformance::DType type);

/// The CUDA driver, loaded at run time (libcuda.so.1), so that the suite
/// builds and runs its host part where there is neither a toolkit nor a
/// driver. Only what a launch needs.
class CudaDriver {
public:
  using CUresult = int;
  using CUdeviceptr = unsigned long long;
  using Handle = void *;

  /// Why there is no device ("" once loaded and a context is current).
  std::string init();

  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGet)(int *, int) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(Handle *, int) = nullptr;
  CUresult (*cuCtxSetCurrent)(Handle) = nullptr;
  CUresult (*cuModuleLoadData)(Handle *, const void *) = nullptr;
  CUresult (*cuModuleUnload)(Handle) = nullptr;
  CUresult (*cuModuleGetFunction)(Handle *, Handle, const char *) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t) = nullptr;
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuLaunchKernel)(Handle, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, Handle, void **,
                             void **) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
};

/// The GPU: `module` (loaded from the description's PTX) on device copies
/// of the buffers, launched as kvrt would (docs/KERNEL-ABI.md's grid:
/// ceil(num_tokens / tokens_per_block) blocks of threads_x x
/// tokens_per_block), every buffer copied back. Buffers that overlap on the
/// host (K, V and Q views of one QKV buffer; q_out that is query) share one
/// device copy, so that the kernel sees the aliasing the caller made.
Launcher gpuLauncher(CudaDriver &cu, CudaDriver::Handle module);

/// What `kvgen-prologue-suite --emit-gpu=DIR` writes (DIR/prologue.manifest,
/// beside one PTX file per description) and kvgen-prologue-gpu reads: per
/// description its PTX file, per kernel its plan and the seed of its inputs.
struct Manifest {
  struct Entry {
    Kernel kernel;
    uint32_t seed = 0;
  };
  struct Description {
    std::string name;
    /// The PTX file, relative to the manifest's folder.
    std::string ptx;
    std::vector<Entry> kernels;
  };
  std::string chip;
  std::vector<Description> descriptions;
};

/// The manifest's file name in its folder.
inline constexpr const char *kManifestName = "prologue.manifest";

/// Writes `manifest` to `path`; "" or why not.
std::string writeManifest(const Manifest &manifest, const std::string &path);
/// Reads `path` into `manifest`; "" or why it is not a manifest (the line
/// and what is wrong with it).
std::string readManifest(const std::string &path, Manifest &manifest);

} // namespace kvgen::prologue

#endif // KVGEN_TEST_HOST_PROLOGUECASES_H
