//===- Device.cpp - kvbench's device, buffers and ceilings ----------------===//

#include "Device.h"
#include "BenchKernels.h"

#include <algorithm>

namespace kvbench {

void checkCuda(cudaError_t error, const char *call, const char *file,
               int line) {
  if (error == cudaSuccess)
    return;
  fatal(format("%s failed at %s:%d: %s (%s)", call, file, line,
               cudaGetErrorName(error), cudaGetErrorString(error)));
}

void initDevice(DeviceState &state, json &doc) {
  // cudaFree(0) makes the primary context current on this thread, the
  // context kvrt then finds and launches in.
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(nullptr));
  CUDA_CHECK(cudaGetDevice(&state.device));
  CUDA_CHECK(cudaGetDeviceProperties(&state.props, state.device));
  int driverVersion = 0, runtimeVersion = 0, smClockKHz = 0, memClockKHz = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driverVersion));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtimeVersion));
  CUDA_CHECK(
      cudaDeviceGetAttribute(&smClockKHz, cudaDevAttrClockRate, state.device));
  CUDA_CHECK(cudaDeviceGetAttribute(&memClockKHz, cudaDevAttrMemoryClockRate,
                                    state.device));
  size_t freeBytes = 0, totalBytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
  const cudaDeviceProp &p = state.props;
  logLine("kvbench: %s, sm_%d%d, %d SMs, L2 %.1f MiB, %.1f GiB (%.1f free), "
          "peak SM clock %d MHz, memory clock %d MHz; driver %d, runtime %d",
          p.name, p.major, p.minor, p.multiProcessorCount,
          double(p.l2CacheSize) / double(kMiB),
          double(totalBytes) / double(kGiB), double(freeBytes) / double(kGiB),
          smClockKHz / 1000, memClockKHz / 1000, driverVersion, runtimeVersion);
  if (p.major != 9)
    logLine("WARNING: the reference is built for sm_90 only; this device is "
            "sm_%d%d",
            p.major, p.minor);
  CUDA_CHECK(cudaStreamCreateWithFlags(&state.stream, cudaStreamNonBlocking));
  CUDA_CHECK(initReference(state.device));
  doc["device"] = {{"name", p.name},
                   {"cc", format("%d.%d", p.major, p.minor)},
                   {"sms", p.multiProcessorCount},
                   {"l2_bytes", p.l2CacheSize},
                   {"memory_bytes", totalBytes},
                   {"peak_sm_clock_mhz", smClockKHz / 1000},
                   {"memory_clock_mhz", memClockKHz / 1000},
                   {"driver", driverVersion},
                   {"runtime", runtimeVersion}};
}

namespace {

/// Bytes rounded up to whole 16-byte chunks, the unit of fillRandom16.
uint64_t roundTo16(uint64_t bytes) { return (bytes + 15) / 16 * 16; }

void fillRandomBytes(void *data, uint64_t bytes, uint32_t seed,
                     cudaStream_t stream) {
  CUDA_CHECK(fillRandom16(static_cast<uint16_t *>(data), roundTo16(bytes) / 2,
                          seed, stream));
}

/// A scale buffer of `count` floats, every one `value`.
float *makeScales(size_t count, float value) {
  float *ptr = nullptr;
  CUDA_CHECK(cudaMalloc(&ptr, count * sizeof(float)));
  std::vector<float> host(count, value);
  CUDA_CHECK(cudaMemcpy(ptr, host.data(), count * sizeof(float),
                        cudaMemcpyHostToDevice));
  return ptr;
}

/// The elements of one static scale tensor pool: enough for every set of
/// the largest size where the scales go with the tokens.
size_t staticScaleElems(const CacheGeometry &g, int64_t poolTokens) {
  const int64_t H = g.desc.numHeads;
  switch (g.desc.quant->granularity) {
  case abi::ScaleGranularity::PerTensor:
    return 1;
  case abi::ScaleGranularity::PerHead:
    return size_t(H);
  case abi::ScaleGranularity::PerToken:
    return size_t(poolTokens);
  case abi::ScaleGranularity::PerTokenHead:
    return size_t(poolTokens * H);
  case abi::ScaleGranularity::PerBlock:
    return size_t(g.numBlocks * H);
  }
  return 1;
}

} // namespace

void allocateBuffers(DeviceState &state, const CacheGeometry &g,
                     const std::vector<SizeCase> &cases, size_t events,
                     json &setup) {
  for (const SizeCase &c : cases) {
    state.poolTokens = std::max(state.poolTokens, int64_t(c.sets) * c.tokens);
    state.slotPoolEntries =
        std::max(state.slotPoolEntries, int64_t(c.slots.size()));
  }
  // The pools' K and V alone are >= 256 MiB.
  const int64_t rowElems = g.desc.numHeads * g.desc.headDim;
  const uint64_t poolBytes = uint64_t(state.poolTokens * rowElems) * 2;
  state.flushBytes = roundTo16(std::max<uint64_t>(
      kMinFlushBytes, 8 * uint64_t(state.props.l2CacheSize)));
  const uint64_t keyBytes = roundTo16(uint64_t(g.keyElems * g.elemBytes));
  const uint64_t valueBytes = roundTo16(uint64_t(g.valueElems * g.elemBytes));
  CUDA_CHECK(cudaMalloc(&state.keyPool, poolBytes));
  CUDA_CHECK(cudaMalloc(&state.valuePool, poolBytes));
  CUDA_CHECK(cudaMalloc(&state.slotPool,
                        size_t(state.slotPoolEntries) * sizeof(int64_t)));
  CUDA_CHECK(cudaMalloc(&state.keyCache, keyBytes));
  if (g.dual) {
    state.valueCache = state.keyCache + g.value.base * g.elemBytes;
  } else if (!g.desc.kOnly) {
    CUDA_CHECK(cudaMalloc(&state.valueAlloc, valueBytes));
    state.valueCache = state.valueAlloc;
  }
  if (g.desc.quant && g.desc.quant->mode == abi::ScaleMode::Static) {
    // Any positive scale times the same; 1/128 keeps most of the random
    // values (|x| < 2) inside fp8's and int8's range.
    const size_t n = staticScaleElems(g, state.poolTokens);
    state.keyScale = makeScales(n, 1.0f / 128);
    state.valueScale = makeScales(n, 1.0f / 128);
  } else if (g.desc.quant) {
    const size_t n = size_t(product(g.scaleCacheShape));
    state.keyScaleCache = makeScales(n, 0);
    state.valueScaleCache = makeScales(n, 0);
  }
  CUDA_CHECK(cudaMalloc(&state.flushBuffer, state.flushBytes));
  CUDA_CHECK(cudaMalloc(&state.sink, sizeof(uint32_t)));
  CUDA_CHECK(cudaMalloc(&state.counter, sizeof(unsigned long long)));
  fillRandomBytes(state.keyPool, poolBytes, kSeedKeyPool, state.stream);
  fillRandomBytes(state.valuePool, poolBytes, kSeedValuePool, state.stream);
  fillRandomBytes(state.flushBuffer, state.flushBytes, kSeedFlush,
                  state.stream);
  fillCaches(state, g);
  state.startEvents.resize(events);
  state.stopEvents.resize(events);
  for (size_t i = 0; i < events; ++i) {
    CUDA_CHECK(cudaEventCreate(&state.startEvents[i]));
    CUDA_CHECK(cudaEventCreate(&state.stopEvents[i]));
  }
  logLine("buffers: input pools 2 x %.0f MiB (%lld tokens), slot pool %lld "
          "entries, caches %.2f GiB, flush %.2f GiB",
          double(poolBytes) / double(kMiB), (long long)state.poolTokens,
          (long long)state.slotPoolEntries,
          double(keyBytes + valueBytes) / double(kGiB),
          double(state.flushBytes) / double(kGiB));
  setup["num_blocks"] = g.numBlocks;
  setup["key_cache_shape"] = g.keyShape;
  setup["value_cache_shape"] = g.valueShape;
  setup["cache_bytes_each"] =
      double(g.keyElems * g.elemBytes) / (g.dual ? 2 : 1);
  setup["pool_tokens"] = state.poolTokens;
  setup["min_touch_bytes"] = kMinTouchBytes;
  setup["flush_bytes"] = state.flushBytes;
  setup["bytes_per_token"] = bytesPerToken(g.desc);
  setup["graph_calls"] = kGraphCalls;
}

void freeBuffers(DeviceState &state) {
  for (size_t i = 0; i < state.startEvents.size(); ++i) {
    CUDA_CHECK(cudaEventDestroy(state.startEvents[i]));
    CUDA_CHECK(cudaEventDestroy(state.stopEvents[i]));
  }
  CUDA_CHECK(cudaStreamDestroy(state.stream));
  for (void *ptr :
       {static_cast<void *>(state.keyPool),
        static_cast<void *>(state.valuePool),
        static_cast<void *>(state.slotPool),
        static_cast<void *>(state.keyCache),
        static_cast<void *>(state.valueAlloc),
        static_cast<void *>(state.keyScale),
        static_cast<void *>(state.valueScale),
        static_cast<void *>(state.keyScaleCache),
        static_cast<void *>(state.valueScaleCache), state.flushBuffer,
        static_cast<void *>(state.sink), static_cast<void *>(state.counter)})
    if (ptr)
      CUDA_CHECK(cudaFree(ptr));
}

void flushL2(DeviceState &state) {
  CUDA_CHECK(kvbench::flushL2(state.flushBuffer, state.flushBytes, state.sink,
                              state.stream));
}

void fillCaches(DeviceState &state, const CacheGeometry &g) {
  fillRandomBytes(state.keyCache, uint64_t(g.keyElems * g.elemBytes),
                  kSeedKeyCache, state.stream);
  if (!g.dual && !g.desc.kOnly)
    fillRandomBytes(state.valueAlloc, uint64_t(g.valueElems * g.elemBytes),
                    kSeedValueCache, state.stream);
  CUDA_CHECK(cudaStreamSynchronize(state.stream));
}

std::vector<SetPointers> uploadCase(DeviceState &state, const CacheGeometry &g,
                                    const SizeCase &c) {
  const int64_t entries = int64_t(c.slots.size());
  if (entries > state.slotPoolEntries ||
      int64_t(c.sets) * c.tokens > state.poolTokens)
    fatal(format("case %s/%lld needs %lld tokens of pool, have %lld",
                 c.phase.c_str(), (long long)c.tokens,
                 (long long)(int64_t(c.sets) * c.tokens),
                 (long long)state.poolTokens));
  // The stream is non-blocking (it does not wait for the legacy stream a
  // plain cudaMemcpy uses): let it drain before its slots are replaced.
  CUDA_CHECK(cudaStreamSynchronize(state.stream));
  CUDA_CHECK(cudaMemcpy(state.slotPool, c.slots.data(),
                        size_t(entries) * sizeof(int64_t),
                        cudaMemcpyHostToDevice));
  const int64_t rowElems = g.desc.numHeads * g.desc.headDim;
  // Static scales that go with the tokens rotate with them.
  int64_t scaleStride = 0;
  if (g.desc.quant &&
      g.desc.quant->granularity == abi::ScaleGranularity::PerToken)
    scaleStride = c.tokens;
  if (g.desc.quant &&
      g.desc.quant->granularity == abi::ScaleGranularity::PerTokenHead)
    scaleStride = c.tokens * g.desc.numHeads;
  std::vector<SetPointers> sets(size_t(c.sets));
  for (int s = 0; s < c.sets; ++s) {
    SetPointers &p = sets[size_t(s)];
    p.key = state.keyPool + int64_t(s) * c.tokens * rowElems;
    p.value = state.valuePool + int64_t(s) * c.tokens * rowElems;
    p.slots = state.slotPool + int64_t(s) * c.tokens;
    if (state.keyScale) {
      p.keyScale = state.keyScale + int64_t(s) * scaleStride;
      p.valueScale = state.valueScale + int64_t(s) * scaleStride;
    }
  }
  return sets;
}

void measureFlush(DeviceState &state, json &doc) {
  cudaEvent_t a = state.startEvents[0], b = state.stopEvents[0];
  // The SM idles at a few hundred MHz: run the flush for a while first.
  const double warmUntil = nowSeconds() + 0.3;
  while (nowSeconds() < warmUntil) {
    flushL2(state);
    CUDA_CHECK(cudaStreamSynchronize(state.stream));
  }
  std::vector<double> flushUs;
  for (int r = 0; r < 5; ++r) {
    CUDA_CHECK(cudaEventRecord(a, state.stream));
    flushL2(state);
    CUDA_CHECK(cudaEventRecord(b, state.stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    flushUs.push_back(double(ms) * 1e3);
  }
  const Stats flush = summarize(flushUs);
  logLine("L2 flush: %.1f us for %.2f GiB read (%.0f GB/s)", flush.median,
          double(state.flushBytes) / double(kGiB),
          gbps(double(state.flushBytes), flush.median));
  doc["flush_us"] = statsJson(flush);
}

double measureCopyCeiling(DeviceState &state, int reps, json &doc) {
  void *src = nullptr, *dst = nullptr;
  CUDA_CHECK(cudaMalloc(&src, kCopyBytes));
  CUDA_CHECK(cudaMalloc(&dst, kCopyBytes));
  fillRandomBytes(src, kCopyBytes, kSeedCopy, state.stream);
  CUDA_CHECK(cudaMemcpyAsync(dst, src, kCopyBytes, cudaMemcpyDeviceToDevice,
                             state.stream));
  CUDA_CHECK(cudaStreamSynchronize(state.stream));
  std::vector<double> copyUs;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(state.startEvents[0], state.stream));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, kCopyBytes, cudaMemcpyDeviceToDevice,
                               state.stream));
    CUDA_CHECK(cudaEventRecord(state.stopEvents[0], state.stream));
    CUDA_CHECK(cudaEventSynchronize(state.stopEvents[0]));
    float ms = 0;
    CUDA_CHECK(
        cudaEventElapsedTime(&ms, state.startEvents[0], state.stopEvents[0]));
    copyUs.push_back(double(ms) * 1e3);
  }
  CUDA_CHECK(cudaFree(src));
  CUDA_CHECK(cudaFree(dst));
  const Stats copy = summarize(copyUs);
  const double copyGBps = gbps(2.0 * double(kCopyBytes), copy.median);
  doc["ceilings"] = {
      {"copy_bytes_read_plus_written", 2.0 * double(kCopyBytes)},
      {"copy_us", statsJson(copy)},
      {"copy_GBps", copyGBps},
      {"copy_GBps_best", gbps(2.0 * double(kCopyBytes), copy.min)}};
  logLine("copy ceiling: 4 GiB D2D in %.1f us (min %.1f, max %.1f): %.1f "
          "GB/s read + written",
          copy.median, copy.min, copy.max, copyGBps);
  return copyGBps;
}

} // namespace kvbench
