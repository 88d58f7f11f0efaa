//===- Targets.cpp - the run judged against bench/targets.json ------------===//

#include "Targets.h"
#include "Latent.h"

#include <cmath>
#include <fstream>

namespace kvbench {

json loadTargets(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    fatal("cannot read the targets file " + path);
  json targets;
  try {
    targets = json::parse(in);
  } catch (const json::exception &e) {
    fatal("the targets file " + path + " is not JSON: " + e.what());
  }
  if (!targets.contains("groups") || !targets["groups"].is_array())
    fatal("the targets file " + path + " has no \"groups\" array");
  for (const json &group : targets["groups"])
    if (!group.is_object() || !group.contains("when") ||
        !group["when"].is_object())
      fatal("the targets file " + path +
            " has a group without \"when\": " + group.dump());
  return targets;
}

bool targetsApply(const json &when, const Description &desc) {
  for (const auto &[key, value] : when.items()) {
    json actual;
    if (key == "layout")
      actual = abi::layoutName(desc.layout);
    else if (key == "dtype")
      actual = abi::dtypeName(desc.cacheDtype);
    else if (key == "source_dtype")
      actual = abi::dtypeName(desc.sourceDtype);
    else if (key == "num_kv_heads")
      actual = desc.numHeads;
    else if (key == "head_dim")
      actual = desc.headDim;
    else if (key == "block_size")
      actual = desc.blockSize;
    else if (key == "quant")
      actual = desc.quant ? abi::quantKindName(desc.quant->kind) : "none";
    else if (!kOnlyField(key, desc, &actual))
      fatal("the targets file matches on an unknown field \"" + key + "\"");
    if (actual != value)
      return false;
  }
  return true;
}

namespace {

/// The number a target names: a row's metric, or a launch ratio.
double metricValue(const json &target, const Report &report,
                   const std::string &impl, const json &launch) {
  const std::string metric = target.value("metric", "");
  if (metric == "launch")
    return launch.is_object() ? launch.value(target.value("key", ""), kNaN)
                              : kNaN;
  const Row *r = report.find(impl, target.value("phase", ""),
                             target.value("tokens", int64_t(0)));
  if (!r)
    return kNaN;
  if (metric == "fraction_of_copy")
    return report.fraction(*r);
  if (metric == "graph_us")
    return r->graph.median;
  if (metric == "cold_us")
    return r->cold.median;
  if (metric == "eager_us")
    return r->eager.median;
  if (metric == "headline_us")
    return r->headline();
  fatal("the targets file names an unknown metric \"" + metric + "\"");
}

std::string describeTarget(const json &t) {
  const std::string metric = t.value("metric", "");
  if (metric == "launch")
    return t.value("key", "");
  return format("%s %lld: %s", t.value("phase", "").c_str(),
                (long long)t.value("tokens", int64_t(0)), metric.c_str());
}

} // namespace

json judgeTargets(const json &targets, const Description &desc,
                  const Report &report, const std::string &impl,
                  const json &launch, std::string *text) {
  json out = json::array();
  auto add = [&](const std::string &group, const std::string &what,
                 double value, double limit, bool atMost) {
    const bool pass =
        !std::isnan(value) && (atMost ? value <= limit : value >= limit);
    out.push_back({{"group", group},
                   {"target", what},
                   {"value", value},
                   {"limit", limit},
                   {"at_most", atMost},
                   {"pass", pass}});
    *text += format("  %-4s %-58s %10s %s %s\n", pass ? "MET" : "MISS",
                    what.c_str(), fmtNum(value, "%.3f").c_str(),
                    atMost ? "<=" : ">=", fmtNum(limit, "%.3f").c_str());
  };
  for (const json &group : targets["groups"]) {
    if (!targetsApply(group["when"], desc))
      continue;
    const std::string name = group.value("name", "?");
    *text += "targets of " + name + " (" + impl + " kernel):\n";
    for (const json &t : group.value("targets", json::array())) {
      if (t.contains("impl") && t["impl"] != impl)
        continue;
      const bool atMost = t.contains("at_most");
      add(name, describeTarget(t), metricValue(t, report, impl, launch),
          t.value(atMost ? "at_most" : "at_least", kNaN), atMost);
    }
    // A peer's number: this run's must be below its time, above its
    // fraction.
    const json peers = group.value("peers", json::object());
    const std::string peer = peers.value("name", "peer");
    for (const char *metric : {"cold_us", "graph_us", "fraction_of_copy"}) {
      if (!peers.contains(metric))
        continue;
      for (const auto &[phase, sizes] : peers[metric].items()) {
        for (const auto &[tokens, limit] : sizes.items()) {
          const json t = {{"metric", metric},
                          {"phase", phase},
                          {"tokens", std::stoll(tokens)}};
          const bool atMost = std::string(metric) != "fraction_of_copy";
          add(name, describeTarget(t) + " vs " + peer,
              metricValue(t, report, impl, launch), limit.get<double>(),
              atMost);
        }
      }
    }
  }
  return out;
}

} // namespace kvbench
