//===- Device.h - kvbench's device, buffers and ceilings --------*- C++ -*-===//
//
// Everything kvbench allocates on the GPU (input pools, slot pool, caches,
// scales, the L2 flush buffer), how input set s of a size is found in the
// pools, and the two ceilings measured in the same run: the L2 flush and
// the 4 GiB device-to-device copy.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_DEVICE_H
#define KVGEN_BENCH_DEVICE_H

#include "Geometry.h"
#include "Support.h"
#include "Workloads.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace kvbench {

void checkCuda(cudaError_t error, const char *call, const char *file, int line);
#define CUDA_CHECK(call) ::kvbench::checkCuda((call), #call, __FILE__, __LINE__)

constexpr uint32_t kSeedKeyPool = 0x1001;
constexpr uint32_t kSeedValuePool = 0x1002;
constexpr uint32_t kSeedKeyCache = 0x2001;
constexpr uint32_t kSeedValueCache = 0x2002;
constexpr uint32_t kSeedFlush = 0x3001;
constexpr uint32_t kSeedCopy = 0x3002;

struct DeviceState {
  int device = 0;
  cudaDeviceProp props{};
  cudaStream_t stream = nullptr;
  uint16_t *keyPool = nullptr, *valuePool = nullptr;
  int64_t poolTokens = 0;
  int64_t *slotPool = nullptr;
  int64_t slotPoolEntries = 0;
  uint8_t *keyCache = nullptr;
  /// The value cache's first element (a stacked layout: inside keyCache).
  uint8_t *valueCache = nullptr;
  /// The allocation behind valueCache (null for a stacked layout).
  uint8_t *valueAlloc = nullptr;
  /// Quantized descriptions: static scales (a pool, rotated with the
  /// inputs where they are per token) or dynamic scale caches.
  float *keyScale = nullptr, *valueScale = nullptr;
  float *keyScaleCache = nullptr, *valueScaleCache = nullptr;
  void *flushBuffer = nullptr;
  uint64_t flushBytes = 0;
  uint32_t *sink = nullptr;
  unsigned long long *counter = nullptr;
  std::vector<cudaEvent_t> startEvents, stopEvents;
};

/// Input set s of a size: its K/V rows, slots and (static, per token)
/// scales.
struct SetPointers {
  const uint16_t *key = nullptr;
  const uint16_t *value = nullptr;
  const int64_t *slots = nullptr;
  const float *keyScale = nullptr;
  const float *valueScale = nullptr;
};

/// Makes device 0's primary context current (the one kvrt launches in),
/// creates the stream and records the device in `doc["device"]`.
void initDevice(DeviceState &state, json &doc);

/// Allocates and fills every buffer for `cases`, with `events` event pairs.
void allocateBuffers(DeviceState &state, const CacheGeometry &g,
                     const std::vector<SizeCase> &cases, size_t events,
                     json &setup);

void freeBuffers(DeviceState &state);

void flushL2(DeviceState &state);

/// Refills both caches with their random patterns.
void fillCaches(DeviceState &state, const CacheGeometry &g);

/// Uploads a case's slots and points set s at tokens [s*T, (s+1)*T) of the
/// pools (compact [T, H, D] rows).
std::vector<SetPointers> uploadCase(DeviceState &state, const CacheGeometry &g,
                                    const SizeCase &c);

/// Warms the clocks and times the L2 flush: the sanity check of the cold
/// timings. Records it in doc["flush_us"].
void measureFlush(DeviceState &state, json &doc);

/// The copy ceiling: 4 GiB device to device, read + written, in GB/s.
double measureCopyCeiling(DeviceState &state, int reps, json &doc);

} // namespace kvbench

#endif // KVGEN_BENCH_DEVICE_H
