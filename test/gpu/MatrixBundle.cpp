//===- MatrixBundle.cpp - which matrix bundle a GPU test loads ------------===//

#include "MatrixBundle.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace kvgen::gpu {

static std::string directoryOfExecutable() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0)
    return ".";
  path[n] = '\0';
  std::string full(path);
  size_t slash = full.rfind('/');
  return slash == std::string::npos ? "." : full.substr(0, slash);
}

MatrixBundle::MatrixBundle() {
  if (const char *env = std::getenv("KVGEN_GPU_BUNDLE"))
    path = env;
}

bool MatrixBundle::parse(const std::string &arg) {
  static const std::string flag = "--bundle=";
  if (arg.compare(0, flag.size(), flag) != 0)
    return false;
  path = arg.substr(flag.size());
  return true;
}

kvrt_bundle *MatrixBundle::load() {
  if (path.empty())
    path = directoryOfExecutable() + "/conformance-matrix.bundle.json";
  kvrt_bundle *bundle = nullptr;
  if (kvrt_bundle_load_file(path.c_str(), &bundle) != KVRT_SUCCESS) {
    std::fprintf(stderr, "error: cannot load the matrix bundle %s: %s\n",
                 path.c_str(), kvrt_last_error());
    return nullptr;
  }
  return bundle;
}

} // namespace kvgen::gpu
