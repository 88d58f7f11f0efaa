//===- HostBuiltins.h - runtime functions the host code may call -*- C++
//-*-===//
//
// The host kernels are loaded where no compiler runtime library can be
// assumed: a shared object linked by the system's C compiler driver (whose
// libgcc may predate a builtin), or the JIT. The functions here are the
// compiler-runtime calls LLVM's code generator may emit for the kernels'
// types; kvgen defines them inside the module, hidden, so that the object
// needs nothing but libc.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_PIPELINE_HOSTBUILTINS_H
#define KVGEN_PIPELINE_HOSTBUILTINS_H

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace kvgen {

/// Defines, in a module already lowered to the LLVM dialect, the compiler
/// runtime functions that LLVM's code generator calls for bf16 on a CPU
/// without bf16 conversion instructions: `__truncsfbf2` (f32 to bf16,
/// round to nearest even, NaN kept quiet). Hidden, so the shared object
/// does not export it; a module that defines one already keeps its own.
void defineHostBuiltins(mlir::ModuleOp module);

} // namespace kvgen

#endif // KVGEN_PIPELINE_HOSTBUILTINS_H
