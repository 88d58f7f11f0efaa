//===- GpuSuite.h - State shared by the GPU suite's tests -------*- C++ -*-===//

#ifndef KVGEN_TEST_GPU_GPUSUITE_H
#define KVGEN_TEST_GPU_GPUSUITE_H

#include "CudaBackend.h"

#include "conformance/Conformance.h"
#include "conformance/Description.h"

#include <string>
#include <vector>

namespace kvgen::gpu {

struct Suite {
  CudaBackend *backend = nullptr;
  kvrt_bundle *bundle = nullptr;
  /// Where `bundle` was loaded from (tests that load it again use it).
  std::string bundlePath;
  /// The full matrix: the GPU-only tests look their descriptions up here.
  std::vector<conformance::Description> matrix;
  conformance::RunOptions options;
  /// Accumulated over the matrix tests, for the closing summary.
  conformance::RunStats stats;
};

/// The suite main() set up; valid while tests run.
Suite &suite();

} // namespace kvgen::gpu

#endif // KVGEN_TEST_GPU_GPUSUITE_H
