//===- BenchRandom.h - the bench's random data, on device and host --------===//
//
// Every buffer kvbench fills (inputs, caches) holds a hash of (seed, element
// index), so the host can recompute any element without copying the buffer
// back: that is how the correctness check knows what every untouched byte of a
// 1 GiB cache must still hold. Values are finite and never zero
// (zeros hide unwritten outputs).
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_BENCHRANDOM_H
#define KVGEN_BENCH_BENCHRANDOM_H

#include <cstdint>

#ifdef __CUDACC__
#define KVBENCH_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KVBENCH_HOST_DEVICE inline
#endif

namespace kvbench {

/// MurmurHash3's 32-bit finalizer: full avalanche for a few integer ops, cheap
/// enough to recompute for every element of a 1 GiB buffer on the device.
KVBENCH_HOST_DEVICE uint32_t mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

/// The 16-bit pattern of element `index` of a buffer filled with `seed`: a
/// normal bf16 with a random sign, exponent in [120, 127] and mantissa, so
/// never zero, never NaN or Inf (as bf16; the bench copies bits, so an f16
/// reading of the same bits does not matter).
KVBENCH_HOST_DEVICE uint16_t randomBits16(uint32_t seed, uint64_t index) {
  const uint32_t high =
      mix32(static_cast<uint32_t>(index >> 32) + seed * 0x9e3779b9u + 1u);
  const uint32_t h = mix32(static_cast<uint32_t>(index) ^ high);
  const uint32_t sign = (h >> 31) << 15;
  const uint32_t exponent = 120u + ((h >> 7) & 7u);
  const uint32_t mantissa = h & 0x7fu;
  return static_cast<uint16_t>(sign | (exponent << 7) | mantissa);
}

} // namespace kvbench

#endif // KVGEN_BENCH_BENCHRANDOM_H
