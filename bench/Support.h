//===- Support.h - kvbench's constants, messages and statistics -*- C++ -*-===//
//
// What every part of kvbench shares and that needs no GPU: the method's
// constants (docs/PERFORMANCE.md), printf-style formatting, the one way to
// give up, the log, and medians. Kept free of CUDA so the pure parts of the
// bench (geometry, workloads, the manifest, the targets) build and are
// tested on a machine without a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_SUPPORT_H
#define KVGEN_BENCH_SUPPORT_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace kvbench {

using json = nlohmann::ordered_json;

constexpr uint64_t kGiB = uint64_t(1) << 30;
constexpr uint64_t kMiB = uint64_t(1) << 20;
/// Each of K and V cache is at least this big: far past the L2.
constexpr uint64_t kMinCacheBytes = kGiB;
/// Every timing loop touches at least this many (minimum) bytes.
constexpr uint64_t kMinTouchBytes = 256 * kMiB;
/// The L2 flush reads at least this much (and at least 8x the L2).
constexpr uint64_t kMinFlushBytes = kGiB;
/// The device-to-device copy of the ceiling: 4 GiB read + 4 GiB written.
constexpr uint64_t kCopyBytes = 4 * kGiB;
/// Calls per captured graph: decode's headline is us per call in it.
constexpr int kGraphCalls = 100;

inline const double kNaN = std::numeric_limits<double>::quiet_NaN();

/// printf into a std::string.
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/// Prints the message and exits with status 2: a broken setup, not a result.
[[noreturn]] void fatal(const std::string &message);

/// One line of the log, flushed at once so a crash keeps everything before.
void logLine(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

double nowSeconds();

/// `v` with `fmt`, or "n/a" for a NaN (a number that was not measured).
std::string fmtNum(double v, const char *fmt = "%.2f");

struct Stats {
  double median = kNaN, min = kNaN, max = kNaN;
  std::vector<double> samples;
};

Stats summarize(std::vector<double> samples);
json statsJson(const Stats &stats);

/// The median over rounds of each round's ratio `numerator / denominator`,
/// where a round's value is the median of its `perRound` consecutive samples
/// in each vector: a paired estimate, which a slow phase of the process
/// moves only in the rounds it covers, and moves both sides of alike. NaN if
/// either vector is empty or the two hold different numbers of rounds.
double medianRoundRatio(const std::vector<double> &numerator,
                        const std::vector<double> &denominator, int perRound);

/// Bytes over microseconds, in GB/s.
inline double gbps(double bytes, double us) { return bytes / us / 1e3; }

} // namespace kvbench

#endif // KVGEN_BENCH_SUPPORT_H
