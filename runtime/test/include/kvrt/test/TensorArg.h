//===- TensorArg.h - a DLTensor that owns its shape and strides -*- C++ -*-===//
//
// The one DLTensor helper of kvgen's tests: kvrt's unit tests (host tensors),
// its GPU test and the conformance suites (device buffers through a Backend)
// all describe their memory to kvrt through it. It owns the shape and strides
// the DLTensor points at and keeps them pointed at across copies and moves;
// the memory itself is the caller's.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_TEST_TENSORARG_H
#define KVRT_TEST_TENSORARG_H

#include <dlpack/dlpack.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace kvrt::test {

class TensorArg {
public:
  /// Unset: get() is nullptr (an absent optional tensor).
  TensorArg() = default;

  /// `data` + `byteOffset` on `device`; empty `strides` means compact (NULL
  /// strides, as DLPack allows).
  TensorArg(void *data, uint64_t byteOffset, DLDevice device, DLDataType dtype,
            std::vector<int64_t> shape, std::vector<int64_t> strides)
      : shapeStorage(std::move(shape)), strideStorage(std::move(strides)),
        isSet(true) {
    tensor.data = data;
    tensor.byte_offset = byteOffset;
    tensor.device = device;
    tensor.dtype = dtype;
    tensor.ndim = static_cast<int32_t>(shapeStorage.size());
    point();
  }

  TensorArg(const TensorArg &other)
      : tensor(other.tensor), shapeStorage(other.shapeStorage),
        strideStorage(other.strideStorage), isSet(other.isSet) {
    point();
  }
  TensorArg(TensorArg &&other) noexcept
      : tensor(other.tensor), shapeStorage(std::move(other.shapeStorage)),
        strideStorage(std::move(other.strideStorage)), isSet(other.isSet) {
    point();
  }
  TensorArg &operator=(TensorArg other) noexcept {
    tensor = other.tensor;
    shapeStorage = std::move(other.shapeStorage);
    strideStorage = std::move(other.strideStorage);
    isSet = other.isSet;
    point();
    return *this;
  }

  /// The DLTensor; a test may break its fields in place. Unset, nullptr.
  const DLTensor *get() const { return isSet ? &tensor : nullptr; }
  DLTensor *get() { return isSet ? &tensor : nullptr; }

  void *data() const { return tensor.data; }
  /// The shape and strides the DLTensor points at, to change in place (not
  /// to resize: the DLTensor keeps the pointers it has).
  std::vector<int64_t> &shapeRef() { return shapeStorage; }
  std::vector<int64_t> &stridesRef() { return strideStorage; }

private:
  void point() {
    tensor.shape = shapeStorage.data();
    tensor.strides = strideStorage.empty() ? nullptr : strideStorage.data();
  }

  DLTensor tensor{};
  std::vector<int64_t> shapeStorage, strideStorage;
  bool isSet = false;
};

} // namespace kvrt::test

#endif // KVRT_TEST_TENSORARG_H
