//===- Bundle.h - the kvrt bundle and its C-header form ---------*- C++ -*-===//
//
// What kvgen hands to kvrt: the bundle, a JSON manifest of the kernels (their
// cache, launch geometry and parameter list) with their PTX and cubin
// (docs/KERNEL-ABI.md), and the same bytes as a C header for applications
// that embed their kernels.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_PIPELINE_BUNDLE_H
#define KVGEN_PIPELINE_BUNDLE_H

#include "kvgen/Pipeline/Pipeline.h"
#include "kvgen/Plan/KernelPlan.h"

#include <optional>
#include <string>

namespace kvgen {

/// The bundle JSON (docs/KERNEL-ABI.md). `ptx` may be empty (host bundles).
std::string writeBundle(llvm::ArrayRef<KernelPlan> plans,
                        const GPUTargetOptions &opts, llvm::StringRef ptx,
                        std::optional<llvm::StringRef> cubin);

/// The bundle as a C header: `kvgen_bundle_<name>[]` and its size.
std::string writeBundleHeader(llvm::StringRef bundle, llvm::StringRef name);

} // namespace kvgen

#endif // KVGEN_PIPELINE_BUNDLE_H
