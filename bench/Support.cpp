//===- Support.cpp - kvbench's messages and statistics --------------------===//

#include "Support.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace kvbench {

std::string format(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  char buffer[2048];
  vsnprintf(buffer, sizeof(buffer), fmt, args);
  va_end(args);
  return buffer;
}

void fatal(const std::string &message) {
  std::fflush(stdout);
  std::fprintf(stderr, "\nkvbench: FATAL: %s\n", message.c_str());
  std::fflush(stderr);
  std::exit(2);
}

void logLine(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vprintf(fmt, args);
  va_end(args);
  std::printf("\n");
  std::fflush(stdout);
}

double nowSeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string fmtNum(double v, const char *fmt) {
  return std::isnan(v) ? std::string("n/a") : format(fmt, v);
}

Stats summarize(std::vector<double> samples) {
  Stats stats;
  stats.samples = samples;
  if (samples.empty())
    return stats;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  stats.median =
      n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  stats.min = samples.front();
  stats.max = samples.back();
  return stats;
}

double medianRoundRatio(const std::vector<double> &numerator,
                        const std::vector<double> &denominator, int perRound) {
  if (perRound <= 0 || numerator.empty() ||
      numerator.size() != denominator.size() ||
      numerator.size() % size_t(perRound))
    return kNaN;
  std::vector<double> ratios;
  for (size_t first = 0; first < numerator.size(); first += size_t(perRound)) {
    auto round = [&](const std::vector<double> &samples) {
      return summarize(std::vector<double>(samples.begin() + first,
                                           samples.begin() + first + perRound))
          .median;
    };
    ratios.push_back(round(numerator) / round(denominator));
  }
  return summarize(ratios).median;
}

json statsJson(const Stats &stats) {
  json out;
  out["median"] = stats.median;
  out["min"] = stats.min;
  out["max"] = stats.max;
  out["n"] = stats.samples.size();
  out["samples"] = stats.samples;
  return out;
}

} // namespace kvbench
