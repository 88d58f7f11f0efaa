//===- Timing.h - the timing modes ------------------------------*- C++ -*-===//
//
// The three ways a call is timed (docs/PERFORMANCE.md): eager (a C++ loop of
// launches, host clock, what an application sees), graph (us per call in
// CUDA graphs of 100 calls, events) and cold (an L2 flush, then events
// around one call), plus the host's own enqueue cost. Each rotates through
// the size's input sets.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_TIMING_H
#define KVGEN_BENCH_TIMING_H

#include "Launchables.h"

namespace kvbench {

struct Repetitions {
  int eager = 5;
  int graph = 5;
  int cold = 100;
  int tune = 25;
  /// The launch-path comparison: rounds of one timed loop per launcher.
  int launchRounds = 8;
  int launchReps = 1;
  int hostEnqueue = 50;
  double loopSeconds = 0.02;

  /// A smoke test: too few repetitions to quote.
  static Repetitions quick();
};

void launchOrDie(Launchable &what, int set, cudaStream_t stream);

/// Eager: us per call of a C++ loop of launches, host clock from the first
/// launch to the end of the stream synchronize, so it is what an application
/// sees (host-bound when the launch costs more than the kernel). `calls` = 0
/// sizes the loop to >= loopSeconds and >= one pass over every set.
Stats timeEager(Launchable &what, int sets, cudaStream_t stream, int reps,
                int64_t calls, double loopSeconds);

/// Host enqueue: us per launch of a batch of 256 launches into an idle
/// stream, host clock, no synchronize inside: the launch path's own cost,
/// whatever the kernel's device time.
Stats timeHostEnqueue(Launchable &what, int sets, cudaStream_t stream,
                      int reps);

struct GraphTiming {
  Stats perCall;
  std::string captureMode;
  std::string error;
  int graphs = 0;
  int64_t loops = 0;
};

/// Captures graphs of 100 calls, each on the next sets, so one pass over the
/// graphs touches every set; times replays of all of them with events.
GraphTiming timeGraph(Launchable &what, int sets, cudaStream_t stream, int reps,
                      double loopSeconds);

/// Cold device time: per repetition an L2 flush, then events around one
/// call. Everything is enqueued before the first synchronize, so the call is
/// already queued when its start event fires and no host gap is timed.
Stats timeCold(Launchable &what, int sets, DeviceState &state, int reps);

} // namespace kvbench

#endif // KVGEN_BENCH_TIMING_H
