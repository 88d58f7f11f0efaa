//===- Launchables.h - what the timing loops launch -------------*- C++ -*-===//
//
// One interface for everything timed: the generated append (through
// kvrt_append, as an application calls it), the hand-written reference and
// the empty kernels that anchor the launch cost. Every timing mode goes
// through launch(), so the C++ loop around an empty kernel and around kvrt
// is the same loop.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_LAUNCHABLES_H
#define KVGEN_BENCH_LAUNCHABLES_H

#include "BenchKernels.h"
#include "Device.h"

#include <cuda.h> // CUfunction and cuLaunchKernel's signature: no libcuda link.

#include <memory>
#include <string>
#include <vector>

struct kvrt_bundle;

namespace kvbench {

class Launchable {
public:
  virtual ~Launchable() = default;
  virtual std::string name() const = 0;
  /// Builds the arguments of every set (outside all timed regions).
  virtual void prepare(int64_t tokens, const std::vector<SetPointers> &sets) {
    (void)tokens;
    (void)sets;
  }
  /// Enqueues one call on input set `set`; false (with lastError()) if the
  /// launch was refused. Never synchronizes.
  virtual bool launch(int set, cudaStream_t stream) = 0;
  std::string lastError() const { return error; }

protected:
  std::string error;
};

/// An empty kernel, <<<1, 1>>>.
class EmptyKernel : public Launchable {
public:
  std::string name() const override { return "empty kernel <<<1,1>>>"; }
  bool launch(int, cudaStream_t stream) override;
};

/// An empty kernel with the append's 21 8-byte parameters, launched through
/// cuLaunchKernel with the decode-1 geometry (1 x 128): what a kvrt launch
/// costs when the runtime adds nothing. An anchor, not the subject: if the
/// driver's entry point or the function cannot be had, available() is false
/// and the run goes on without this one number.
class EmptyAbiKernel : public Launchable {
public:
  EmptyAbiKernel();
  bool available() const { return kernel != nullptr; }
  std::string name() const override {
    return "empty kernel, 21 params, cuLaunchKernel 1x128";
  }
  bool launch(int, cudaStream_t stream) override;

private:
  using LaunchKernelFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned,
                                      unsigned, unsigned, unsigned, unsigned,
                                      CUstream, void **, void **);
  LaunchKernelFn launchKernel = nullptr;
  CUfunction kernel = nullptr;
  /// Zeros, one 8-byte slot per parameter: wide enough for a pointer and
  /// for an i32 scalar alike.
  uint64_t values[kAppendAbiParams];
  void *params[kAppendAbiParams];
};

/// The hand-written reference of BenchKernels.cu, in one of its
/// configurations.
class ReferenceAppend : public Launchable {
public:
  ReferenceAppend(const CacheGeometry &g, const DeviceState &state);
  void setConfig(int index) { config = index; }
  /// Caps the grid (0: none) from the next prepare() on; see
  /// ReferenceAppendParams::maxGridBlocks.
  void setMaxGridBlocks(int64_t blocks) { base.maxGridBlocks = blocks; }
  std::string configName() const {
    return referenceConfigs()[size_t(config)].name;
  }
  std::string name() const override {
    return "reference (" + configName() + ")";
  }
  void prepare(int64_t tokens, const std::vector<SetPointers> &sets) override;
  bool launch(int set, cudaStream_t stream) override;
  int64_t gridFor(int64_t tokens) const;

private:
  ReferenceAppendParams base;
  std::vector<ReferenceAppendParams> params;
  int config = 0;
};

/// The generated kernel `kvrtName` of `bundle`, launched through
/// kvrt_append exactly as an application would: DLPack tensors in, a
/// stream, nothing else.
std::unique_ptr<Launchable> makeGeneratedAppend(kvrt_bundle *bundle,
                                                const std::string &kvrtName,
                                                const std::string &variant,
                                                const CacheGeometry &g,
                                                const DeviceState &state);

} // namespace kvbench

#endif // KVGEN_BENCH_LAUNCHABLES_H
