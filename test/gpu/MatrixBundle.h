//===- MatrixBundle.h - which matrix bundle a GPU test loads -----*- C++
//-*-===//
//
// The GPU suite and the multi-GPU test run the same prebuilt bundle of the
// conformance matrix: --bundle=PATH, else $KVGEN_GPU_BUNDLE, else
// conformance-matrix.bundle.json next to the binary (where the build and
// scripts/stage-gpu.sh put it).
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_TEST_GPU_MATRIXBUNDLE_H
#define KVGEN_TEST_GPU_MATRIXBUNDLE_H

#include "kvrt/kvrt.h"

#include <string>

namespace kvgen::gpu {

/// The exit status of a test that found no device (ctest's
/// SKIP_RETURN_CODE).
inline constexpr int kSkipped = 77;

/// The --bundle line of a test's usage.
inline constexpr const char *kMatrixBundleUsage =
    "  --bundle=PATH  the matrix bundle (default: $KVGEN_GPU_BUNDLE, else\n"
    "                 conformance-matrix.bundle.json next to this binary)\n";

class MatrixBundle {
public:
  /// Starts from $KVGEN_GPU_BUNDLE, if set.
  MatrixBundle();
  /// Takes `arg` if it is --bundle=PATH.
  bool parse(const std::string &arg);
  /// Loads the bundle; on failure prints why and returns nullptr.
  kvrt_bundle *load();
  const std::string &getPath() const { return path; }

private:
  std::string path;
};

} // namespace kvgen::gpu

#endif // KVGEN_TEST_GPU_MATRIXBUNDLE_H
