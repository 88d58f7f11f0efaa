//===- DLTensors.cpp - kvbench's buffers as DLPack tensors ----------------===//

#include "DLTensors.h"

#include "Support.h"

#include <string>

namespace kvbench {

DLDataType dlpackDtype(abi::DType dtype) {
  switch (dtype) {
  case abi::DType::BF16:
    return DLDataType{kDLBfloat, 16, 1};
  case abi::DType::F16:
    return DLDataType{kDLFloat, 16, 1};
  case abi::DType::F32:
    return DLDataType{kDLFloat, 32, 1};
  case abi::DType::F8E4M3:
  case abi::DType::F8E5M2:
    return DLDataType{kDLUInt, 8, 1};
  case abi::DType::I8:
    return DLDataType{kDLInt, 8, 1};
  case abi::DType::I32:
    return DLDataType{kDLInt, 32, 1};
  case abi::DType::I64:
    return DLDataType{kDLInt, 64, 1};
  }
  fatal(std::string("no DLPack dtype for ") + abi::dtypeName(dtype));
}

DLTensor deviceTensor(const void *data, int device, DLDataType dtype,
                      std::vector<int64_t> &shape, int64_t *strides) {
  DLTensor t{};
  t.data = const_cast<void *>(data);
  t.device = DLDevice{kDLCUDA, int32_t(device)};
  t.ndim = int32_t(shape.size());
  t.dtype = dtype;
  t.shape = shape.data();
  t.strides = strides;
  t.byte_offset = 0;
  return t;
}

} // namespace kvbench
