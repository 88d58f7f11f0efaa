//===- SupportMatrix.h - what kvgen generates, as a table -------*- C++ -*-===//
//
// `kvgen --print-support-matrix` writes docs/SUPPORT.md: the layouts, cache
// dtypes, quantizations, kernel kinds and chips of the kernel ABI's
// vocabulary, each combination marked by what the kv dialect's verifier
// says of a description of it and the chips by the PTX kvgen emits for them.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_TOOLS_KVGEN_SUPPORTMATRIX_H
#define KVGEN_TOOLS_KVGEN_SUPPORTMATRIX_H

namespace kvgen::driver {

/// Whether --print-support-matrix was given.
bool supportMatrixRequested();

/// Writes the support matrix as markdown (--print-support-matrix), or with
/// =kv one kv module holding a kernel of every supported cell, to -o. Refuses
/// any other kvgen flag. Returns the exit status.
int printSupportMatrix();

} // namespace kvgen::driver

#endif // KVGEN_TOOLS_KVGEN_SUPPORTMATRIX_H
