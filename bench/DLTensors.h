//===- DLTensors.h - kvbench's buffers as DLPack tensors --------*- C++ -*-===//
//
// How the launchables that go through kvrt (GeneratedAppend.cpp,
// MlaAppend.cpp) describe kvbench's device buffers to it.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_DLTENSORS_H
#define KVGEN_BENCH_DLTENSORS_H

#include "kvgen/ABI/ABI.h"

#include <dlpack/dlpack.h>

#include <cstdint>
#include <vector>

namespace kvbench {

namespace abi = kvgen::abi;

/// The DLPack type of a cache or source dtype; fp8 caches go as uint8, which
/// kvrt accepts beside DLPack's float8 codes.
DLDataType dlpackDtype(abi::DType dtype);

/// A tensor over `data` on CUDA device `device`. `shape` (and `strides`, if
/// any) must outlive it; NULL strides are compact row-major, as DLPack
/// defines them.
DLTensor deviceTensor(const void *data, int device, DLDataType dtype,
                      std::vector<int64_t> &shape, int64_t *strides = nullptr);

} // namespace kvbench

#endif // KVGEN_BENCH_DLTENSORS_H
