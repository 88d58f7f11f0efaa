//===- HostSharedLib.h - host kernels as a loadable shared object -*- C++
//-*-===//
//
// kvgen --target=host --emit=shared-lib: the host kernels compiled ahead of
// time into a shared object that any process can dlopen (the Python package,
// a test, an application without LLVM), instead of JIT-compiled in-process.
//
// The object exports, for every kernel of the bundle:
//   void _mlir_<name>(void **params)     the packed entry point that
//                                        kvrt_bundle_set_host_kernel takes
// and the bundle the kernels belong to:
//   const char *kvgen_bundle_json(void)  the manifest (NUL-terminated)
//   size_t kvgen_bundle_json_size(void)  its length, without the NUL
//   const char *kvgen_compiler_version(void)  the kvgen that made it
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_PIPELINE_HOSTSHAREDLIB_H
#define KVGEN_PIPELINE_HOSTSHAREDLIB_H

#include "kvgen/Plan/KernelPlan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

#include <string>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace kvgen {

/// Lowers the kv module (consumed) through `pm` (to which the loops and host
/// pipelines are added), compiles it for this CPU's architecture (generic
/// CPU, position-independent) and links it with the system's C compiler
/// driver. Returns the shared object's bytes; on failure, emits an error on
/// the module and writes nothing. A failure of the linking step (the driver
/// not found, failed or killed, a temporary file not written, the linked
/// file not a shared object of this host) is not the description's: with
/// `toolError`, its message goes there instead of onto the module. The
/// kernels and the manifest are planned with `options` (which must pass
/// checkPlanOptions).
mlir::FailureOr<std::string>
buildHostSharedLib(mlir::ModuleOp module, mlir::PassManager &pm,
                   std::string *toolError = nullptr,
                   const PlanOptions &options = {});

/// "kvgen <version> (bundle format <n>)": what `kvgen --version` prints and
/// what a shared object records as its producer. Caches of generated
/// kernels key on it.
void printKVGenVersion(llvm::raw_ostream &os);

} // namespace kvgen

#endif // KVGEN_PIPELINE_HOSTSHAREDLIB_H
