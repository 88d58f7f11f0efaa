//===- GpuSuite.cpp - The conformance matrix on a CUDA device -------------===//
//
// kvgen-gpu-suite [--bundle=PATH] [--reduced] [--filter=S] [--cases=S]
//                 [--seed=N] [--verbose] [gtest flags]
//
// Loads the matrix bundle (built from kvgen-conformance-matrix by kvgen at
// build time; by default next to this binary, or $KVGEN_GPU_BUNDLE), runs
// every description's conformance cases through kvrt on device 0 (one gtest
// test per description, Matrix.<name>), then the GPU-only tests (CUDA graph
// capture and replay, caches past 2^32 elements, kvrt's checked mode turned
// on by KVRT_CHECKED at load). --reduced (or
// KVGEN_GPU_SUITE_REDUCED=1) runs the reduced matrix, for compute-sanitizer.
//
// Without a usable CUDA device it prints "SKIPPED: no CUDA device (...)" and
// exits with 77, which ctest counts as skipped.
//
//===----------------------------------------------------------------------===//

#include "GpuSuite.h"
#include "MatrixBundle.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

using namespace kvgen;
using namespace kvgen::conformance;

namespace kvgen::gpu {

Suite &suite() {
  static Suite instance;
  return instance;
}

} // namespace kvgen::gpu

namespace {

class MatrixTest : public testing::Test {
public:
  explicit MatrixTest(Description desc) : desc(std::move(desc)) {}

  void TestBody() override {
    gpu::Suite &s = gpu::suite();
    RunStats stats = runDescription(*s.backend, desc, s.options, std::cout);
    s.stats.merge(stats);
    EXPECT_GT(stats.cases, 0) << desc.summary();
    for (const CaseFailure &f : stats.failures)
      ADD_FAILURE() << f.caseName << ": " << f.message;
  }

private:
  Description desc;
};

bool envFlag(const char *name) {
  const char *value = std::getenv(name);
  return value && *value && std::strcmp(value, "0") != 0;
}

void usage() {
  std::cerr
      << "usage: kvgen-gpu-suite [--bundle=PATH] [--reduced] [--filter=S]\n"
         "                       [--cases=S] [--seed=N] [--verbose] [gtest "
         "flags]\n"
      << gpu::kMatrixBundleUsage
      << "  --reduced      the reduced matrix (also "
         "KVGEN_GPU_SUITE_REDUCED=1)\n"
         "  --filter=S     only descriptions whose name contains S\n"
         "  --cases=S      only cases whose name contains S\n"
         "  --seed=N       the data seed (also KVGEN_CONFORMANCE_SEED)\n";
}

} // namespace

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);

  gpu::MatrixBundle matrixBundle;
  bool reduced = envFlag("KVGEN_GPU_SUITE_REDUCED");
  std::string filter;
  gpu::Suite &s = gpu::suite();
  if (const char *env = std::getenv("KVGEN_CONFORMANCE_SEED"))
    s.options.seed = std::strtoull(env, nullptr, 0);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (matrixBundle.parse(arg))
      continue;
    if (arg == "--reduced")
      reduced = true;
    else if (arg.rfind("--filter=", 0) == 0)
      filter = arg.substr(9);
    else if (arg.rfind("--cases=", 0) == 0)
      s.options.caseFilter = arg.substr(8);
    else if (arg.rfind("--seed=", 0) == 0)
      s.options.seed = std::strtoull(arg.c_str() + 7, nullptr, 0);
    else if (arg == "--verbose")
      s.options.verbose = true;
    else {
      usage();
      return 2;
    }
  }

  std::string reason = gpu::noDeviceReason();
  if (!reason.empty()) {
    std::printf("SKIPPED: no CUDA device (%s)\n", reason.c_str());
    return gpu::kSkipped;
  }

  kvrt_bundle *bundle = matrixBundle.load();
  if (!bundle)
    return 1;

  // Destroyed before the bundle: its stream goes first.
  auto backend = std::make_unique<gpu::CudaBackend>();
  std::string error;
  if (!backend->init(bundle, error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    kvrt_bundle_destroy(bundle);
    return 1;
  }
  s.backend = backend.get();
  s.bundle = bundle;
  s.bundlePath = matrixBundle.getPath();
  s.matrix = conformanceMatrix();

  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf(
      "gpu suite: %s (sm_%d%d), bundle %s (%zu kernels), seed 0x%llx%s\n",
      prop.name, prop.major, prop.minor, matrixBundle.getPath().c_str(),
      kvrt_bundle_num_kernels(bundle),
      static_cast<unsigned long long>(s.options.seed),
      reduced ? ", reduced matrix" : "");
  // Whether the padding cases can put their padding rows past a fence (the
  // driver's virtual memory API), or must back them with memory.
  void *probe = backend->allocateFenced(256);
  std::printf("gpu suite: padding rows %s\n",
              probe ? "fenced (unmapped memory after the stored rows)"
                    : "backed (no fenced memory on this device)");
  if (probe)
    backend->deallocateFenced(probe);

  for (const Description &desc : reduced ? reducedMatrix() : s.matrix) {
    if (!filter.empty() && desc.name.find(filter) == std::string::npos)
      continue;
    testing::RegisterTest(
        "Matrix", desc.name.c_str(), nullptr, desc.summary().c_str(), __FILE__,
        __LINE__, [desc]() -> testing::Test * { return new MatrixTest(desc); });
  }

  int result = RUN_ALL_TESTS();
  std::printf("gpu suite: %s\n", s.stats.summary().c_str());

  s.backend = nullptr;
  backend.reset();
  kvrt_bundle_destroy(bundle);
  return result;
}
