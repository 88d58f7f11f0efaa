//===- Timing.cpp - the timing modes --------------------------------------===//

#include "Timing.h"

#include <algorithm>
#include <cmath>

namespace kvbench {

Repetitions Repetitions::quick() {
  Repetitions reps;
  reps.eager = 2;
  reps.graph = 2;
  reps.cold = 20;
  reps.tune = 8;
  reps.launchRounds = 3;
  reps.launchReps = 1;
  reps.hostEnqueue = 10;
  reps.loopSeconds = 0.005;
  return reps;
}

void launchOrDie(Launchable &what, int set, cudaStream_t stream) {
  if (!what.launch(set, stream))
    fatal(what.name() + ": " + what.lastError());
}

/// Launches `calls` calls, rotating through `sets` sets from `*nextSet`.
static void launchLoop(Launchable &what, int sets, int64_t calls,
                       cudaStream_t stream, int *nextSet) {
  int set = *nextSet;
  for (int64_t k = 0; k < calls; ++k) {
    if (!what.launch(set, stream))
      fatal(what.name() + ": " + what.lastError());
    if (++set == sets)
      set = 0;
  }
  *nextSet = set;
}

Stats timeEager(Launchable &what, int sets, cudaStream_t stream, int reps,
                int64_t calls, double loopSeconds) {
  int next = 0;
  const int64_t warm = std::min<int64_t>(std::max(sets, 16), 512);
  launchLoop(what, sets, warm, stream, &next);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (calls == 0) {
    const double t0 = nowSeconds();
    launchLoop(what, sets, warm, stream, &next);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const double perCall = (nowSeconds() - t0) / double(warm);
    calls = std::max<int64_t>(
        sets, int64_t(std::ceil(loopSeconds / std::max(perCall, 1e-7))));
    calls = std::min<int64_t>(calls, 2000000);
  }
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const double t0 = nowSeconds();
    launchLoop(what, sets, calls, stream, &next);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    samples.push_back((nowSeconds() - t0) * 1e6 / double(calls));
  }
  CUDA_CHECK(cudaGetLastError());
  return summarize(samples);
}

Stats timeHostEnqueue(Launchable &what, int sets, cudaStream_t stream,
                      int reps) {
  constexpr int64_t kBatch = 256;
  int next = 0;
  launchLoop(what, sets, kBatch, stream, &next);
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const double t0 = nowSeconds();
    launchLoop(what, sets, kBatch, stream, &next);
    samples.push_back((nowSeconds() - t0) * 1e6 / double(kBatch));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return summarize(samples);
}

GraphTiming timeGraph(Launchable &what, int sets, cudaStream_t stream, int reps,
                      double loopSeconds) {
  GraphTiming result;
  const int graphs = (sets + kGraphCalls - 1) / kGraphCalls;
  result.graphs = graphs;
  std::vector<cudaGraphExec_t> execs;
  // Global mode refuses any unsafe CUDA call made anywhere during capture:
  // the strict test of "capturable". Relaxed is tried only if that fails,
  // and the JSON says which one worked.
  const cudaStreamCaptureMode modes[] = {cudaStreamCaptureModeGlobal,
                                         cudaStreamCaptureModeRelaxed};
  const char *modeNames[] = {"global", "relaxed"};
  for (int m = 0; m < 2 && execs.empty(); ++m) {
    std::string failure;
    for (int gi = 0; gi < graphs && failure.empty(); ++gi) {
      CUDA_CHECK(cudaStreamBeginCapture(stream, modes[m]));
      bool launched = true;
      for (int j = 0; j < kGraphCalls; ++j) {
        if (!what.launch((gi * kGraphCalls + j) % sets, stream)) {
          launched = false;
          failure = "launch during capture: " + what.lastError();
          break;
        }
      }
      cudaGraph_t graph = nullptr;
      const cudaError_t end = cudaStreamEndCapture(stream, &graph);
      if (launched && end != cudaSuccess)
        failure = format("cudaStreamEndCapture: %s", cudaGetErrorString(end));
      cudaGraphExec_t exec = nullptr;
      if (failure.empty()) {
        const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
        if (inst != cudaSuccess)
          failure =
              format("cudaGraphInstantiate: %s", cudaGetErrorString(inst));
      }
      if (graph)
        CUDA_CHECK(cudaGraphDestroy(graph));
      if (!failure.empty()) {
        // Capture errors are not sticky: clear it so later calls succeed.
        (void)cudaGetLastError();
        break;
      }
      execs.push_back(exec);
    }
    if (!failure.empty()) {
      for (cudaGraphExec_t exec : execs)
        CUDA_CHECK(cudaGraphExecDestroy(exec));
      execs.clear();
      logLine("  graph capture (%s mode) of %s FAILED: %s", modeNames[m],
              what.name().c_str(), failure.c_str());
      result.error += std::string(modeNames[m]) + ": " + failure + "; ";
      continue;
    }
    result.captureMode = modeNames[m];
  }
  if (execs.empty())
    return result;

  // Upload and warm-up: the first replay of a graph costs more.
  for (cudaGraphExec_t exec : execs)
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const double t0 = nowSeconds();
  for (cudaGraphExec_t exec : execs)
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const double pass = nowSeconds() - t0;
  result.loops = std::max<int64_t>(
      1, int64_t(std::ceil(loopSeconds / std::max(pass, 1e-7))));

  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    for (int64_t l = 0; l < result.loops; ++l)
      for (cudaGraphExec_t exec : execs)
        CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(double(ms) * 1e3 /
                      double(result.loops * graphs * kGraphCalls));
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  for (cudaGraphExec_t exec : execs)
    CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGetLastError());
  result.perCall = summarize(samples);
  return result;
}

Stats timeCold(Launchable &what, int sets, DeviceState &state, int reps) {
  reps = std::min<int>(reps, int(state.startEvents.size()));
  launchOrDie(what, 0, state.stream);
  CUDA_CHECK(cudaStreamSynchronize(state.stream));
  for (int r = 0; r < reps; ++r) {
    flushL2(state);
    CUDA_CHECK(cudaEventRecord(state.startEvents[size_t(r)], state.stream));
    launchOrDie(what, r % sets, state.stream);
    CUDA_CHECK(cudaEventRecord(state.stopEvents[size_t(r)], state.stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(state.stream));
  CUDA_CHECK(cudaGetLastError());
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, state.startEvents[size_t(r)],
                                    state.stopEvents[size_t(r)]));
    samples.push_back(double(ms) * 1e3);
  }
  return summarize(samples);
}

} // namespace kvbench
