//===- Sweep.cpp - every size in every mode, and the launch path ----------===//

#include "Sweep.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace kvbench {

json measureLaunchAnchors(EmptyKernel &empty, EmptyAbiKernel &emptyAbi,
                          DeviceState &state, const Repetitions &reps) {
  json launch;
  const Stats eager = timeEager(empty, 1, state.stream, reps.eager, 20000, 0);
  const Stats enqueue =
      timeHostEnqueue(empty, 1, state.stream, reps.hostEnqueue);
  const GraphTiming graph =
      timeGraph(empty, 1, state.stream, reps.graph, reps.loopSeconds);
  Stats abiEager, abiEnqueue;
  if (emptyAbi.available()) {
    abiEager = timeEager(emptyAbi, 1, state.stream, reps.eager, 20000, 0);
    abiEnqueue = timeHostEnqueue(emptyAbi, 1, state.stream, reps.hostEnqueue);
  } else {
    logLine("WARNING: the 21-parameter empty kernel is not measured: %s",
            emptyAbi.lastError().c_str());
  }
  launch["empty_eager_us"] = eager.median;
  launch["empty_host_enqueue_us"] = enqueue.median;
  launch["empty_graph_node_us"] = graph.perCall.median;
  launch["empty_abi_eager_us"] = abiEager.median;
  launch["empty_abi_host_enqueue_us"] = abiEnqueue.median;
  launch["detail"] = {{"empty_eager", statsJson(eager)},
                      {"empty_enqueue", statsJson(enqueue)},
                      {"empty_graph", statsJson(graph.perCall)},
                      {"empty_abi_eager", statsJson(abiEager)},
                      {"empty_abi_enqueue", statsJson(abiEnqueue)}};
  logLine("empty kernel: eager %.3f us/launch (enqueue %.3f), graph %.3f "
          "us/node; 21-param cuLaunchKernel: eager %.3f (enqueue %.3f)",
          eager.median, enqueue.median, graph.perCall.median, abiEager.median,
          abiEnqueue.median);
  return launch;
}

void compareLaunchPaths(Launchable &empty, EmptyAbiKernel &emptyAbi,
                        Launchable *generated, Launchable *reference, int sets,
                        DeviceState &state, const Repetitions &reps,
                        json &launch) {
  std::vector<double> e, ea, k, r;
  const int64_t calls = std::max<int64_t>(sets, 20000);
  auto collect = [&](Launchable &what, int whatSets, std::vector<double> &to) {
    for (double v :
         timeEager(what, whatSets, state.stream, reps.launchReps, calls, 0)
             .samples)
      to.push_back(v);
  };
  // Each round times every launcher once, in an order that rotates from round
  // to round: a launcher's place in a round (after which launcher, how long
  // after the last synchronize) then favours none of them on the whole.
  std::vector<std::function<void()>> turns;
  turns.push_back([&] { collect(empty, 1, e); });
  if (emptyAbi.available())
    turns.push_back([&] { collect(emptyAbi, 1, ea); });
  if (generated)
    turns.push_back([&] { collect(*generated, sets, k); });
  if (reference)
    turns.push_back([&] { collect(*reference, sets, r); });
  for (int round = 0; round < reps.launchRounds; ++round)
    for (size_t turn = 0; turn < turns.size(); ++turn)
      turns[(turn + size_t(round)) % turns.size()]();
  const Stats se = summarize(e), sea = summarize(ea), sk = summarize(k),
              sr = summarize(r);
  Stats kEnqueue, rEnqueue;
  if (reference)
    rEnqueue =
        timeHostEnqueue(*reference, sets, state.stream, reps.hostEnqueue);
  if (generated)
    kEnqueue =
        timeHostEnqueue(*generated, sets, state.stream, reps.hostEnqueue);
  launch["comparison_calls"] = calls;
  launch["comparison_rounds"] = reps.launchRounds;
  launch["comparison_empty_eager_us"] = se.median;
  launch["comparison_empty_abi_eager_us"] = sea.median;
  launch["kvrt_eager_us"] = sk.median;
  launch["reference_eager_us"] = sr.median;
  launch["kvrt_host_enqueue_us"] = kEnqueue.median;
  launch["reference_host_enqueue_us"] = rEnqueue.median;
  // The ratios pair each round's samples: the empty kernel's eager time moves
  // by up to half between phases of one process, and a phase that covers one
  // launcher's samples and not the other's would move an unpaired ratio.
  const int perRound = reps.launchReps;
  launch["kvrt_over_empty_eager"] = medianRoundRatio(k, e, perRound);
  launch["kvrt_over_empty_abi_eager"] = medianRoundRatio(k, ea, perRound);
  launch["kvrt_over_reference_eager"] = medianRoundRatio(k, r, perRound);
  launch["kvrt_over_empty_eager_unpaired"] = sk.median / se.median;
  launch["kvrt_over_empty_host_enqueue"] =
      kEnqueue.median / launch.value("empty_host_enqueue_us", kNaN);
  launch["reference_over_empty_eager"] = medianRoundRatio(r, e, perRound);
  launch["detail"]["comparison"] = {{"empty", statsJson(se)},
                                    {"empty_abi", statsJson(sea)},
                                    {"kvrt", statsJson(sk)},
                                    {"reference", statsJson(sr)},
                                    {"kvrt_enqueue", statsJson(kEnqueue)},
                                    {"reference_enqueue", statsJson(rEnqueue)}};
  logLine(
      "  launch path, %lld calls x %d rounds x %d reps: empty %.3f, "
      "21-param empty %.3f, kvrt %s, reference %s us/call; kvrt/empty "
      "= %s (rounds paired; %s unpaired), kvrt/reference = %s; host "
      "enqueue: kvrt %s, reference %s us",
      (long long)calls, reps.launchRounds, reps.launchReps, se.median,
      sea.median, fmtNum(sk.median, "%.3f").c_str(),
      fmtNum(sr.median, "%.3f").c_str(),
      fmtNum(launch.value("kvrt_over_empty_eager", kNaN), "%.3f").c_str(),
      fmtNum(sk.median / se.median, "%.3f").c_str(),
      fmtNum(launch.value("kvrt_over_reference_eager", kNaN), "%.3f").c_str(),
      fmtNum(kEnqueue.median, "%.3f").c_str(),
      fmtNum(rEnqueue.median, "%.3f").c_str());
}

Row measure(Launchable &what, const std::string &impl, const SizeCase &c,
            DeviceState &state, const CacheGeometry &g,
            const Repetitions &reps) {
  Row row;
  row.impl = impl;
  row.phase = c.phase;
  row.tokens = c.tokens;
  row.sets = c.sets;
  row.bytes = double(c.tokens) * bytesPerToken(g.desc);
  row.eager =
      timeEager(what, c.sets, state.stream, reps.eager, 0, reps.loopSeconds);
  GraphTiming graph =
      timeGraph(what, c.sets, state.stream, reps.graph, reps.loopSeconds);
  row.graph = graph.perCall;
  row.graphMode = graph.captureMode;
  row.graphError = graph.error;
  row.graphs = graph.graphs;
  row.graphLoops = graph.loops;
  row.cold = timeCold(what, c.sets, state, reps.cold);
  logLine("  %-9s %-8s %6lld tok  eager %9s us  graph %9s us  cold %9s us "
          "(min %s, max %s)  %s GB/s",
          impl.c_str(), c.phase.c_str(), (long long)c.tokens,
          fmtNum(row.eager.median, "%.3f").c_str(),
          fmtNum(row.graph.median, "%.3f").c_str(),
          fmtNum(row.cold.median, "%.3f").c_str(),
          fmtNum(row.cold.min, "%.3f").c_str(),
          fmtNum(row.cold.max, "%.3f").c_str(),
          fmtNum(gbps(row.bytes, row.headline()), "%.0f").c_str());
  return row;
}

Row measureTunedReference(ReferenceAppend &reference, const SizeCase &c,
                          DeviceState &state, const CacheGeometry &g,
                          const Repetitions &reps) {
  const auto &configs = referenceConfigs();
  json tuning;
  int best = 0;
  double bestUs = kNaN;
  for (size_t i = 0; i < configs.size(); ++i) {
    reference.setConfig(int(i));
    const Stats s = timeCold(reference, c.sets, state, reps.tune);
    tuning[configs[i].name] = s.median;
    if (std::isnan(bestUs) || s.median < bestUs) {
      bestUs = s.median;
      best = int(i);
    }
  }
  reference.setConfig(best);
  Row row = measure(reference, "reference", c, state, g, reps);
  row.config = configs[size_t(best)].name;
  row.grid = reference.gridFor(c.tokens);
  row.tuning = tuning;
  logLine("  reference tuning (cold us): %s -> %s", tuning.dump().c_str(),
          row.config.c_str());
  return row;
}

} // namespace kvbench
