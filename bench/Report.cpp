//===- Report.cpp - kvbench's rows, JSON, CSV and table -------------------===//

#include "Report.h"

#include <fstream>
#include <sstream>

namespace kvbench {

const Row *Report::find(const std::string &impl, const std::string &phase,
                        int64_t tokens) const {
  for (const Row &r : rows)
    if (r.impl == impl && r.phase == phase && r.tokens == tokens)
      return &r;
  return nullptr;
}

json rowJson(const Row &r, double copyGBps) {
  json j;
  j["impl"] = r.impl;
  j["config"] = r.config;
  j["phase"] = r.phase;
  j["tokens"] = r.tokens;
  j["sets"] = r.sets;
  j["bytes_per_call"] = r.bytes;
  j["grid"] = r.grid;
  j["eager_us"] = statsJson(r.eager);
  j["graph_us"] = statsJson(r.graph);
  j["graph_capture_mode"] = r.graphMode;
  j["graph_error"] = r.graphError;
  j["graphs_of_100"] = r.graphs;
  j["graph_passes_per_sample"] = r.graphLoops;
  j["cold_us"] = statsJson(r.cold);
  j["headline"] = r.phase == "decode" ? "graph_us" : "cold_us";
  j["headline_us"] = r.headline();
  j["GBps"] = gbps(r.bytes, r.headline());
  j["fraction_of_copy"] = gbps(r.bytes, r.headline()) / copyGBps;
  if (!r.tuning.is_null())
    j["tuning_cold_us"] = r.tuning;
  return j;
}

void writeFile(const std::string &path, const std::string &text) {
  std::ofstream out(path);
  out << text;
  if (!out)
    fatal("could not write " + path);
}

void writeResults(Report &report) {
  report.doc["rows"] = json::array();
  for (const Row &r : report.rows)
    report.doc["rows"].push_back(rowJson(r, report.copyGBps));
  json comparison = json::array();
  for (const Row &r : report.rows) {
    if (r.impl != "generated")
      continue;
    const Row *ref = report.find("reference", r.phase, r.tokens);
    json c;
    c["phase"] = r.phase;
    c["tokens"] = r.tokens;
    c["generated_over_reference_time"] =
        ref ? r.headline() / ref->headline() : kNaN;
    c["eager_ratio"] = ref ? r.eager.median / ref->eager.median : kNaN;
    c["graph_ratio"] = ref ? r.graph.median / ref->graph.median : kNaN;
    c["cold_ratio"] = ref ? r.cold.median / ref->cold.median : kNaN;
    comparison.push_back(c);
  }
  report.doc["generated_vs_reference"] = comparison;
  report.doc["failures"] = report.failures;
  writeFile(report.outDir + "/kvbench-" + report.tag + ".json",
            report.doc.dump(1) + "\n");

  std::ostringstream csv;
  csv << "impl,config,phase,tokens,sets,bytes_per_call,eager_us,graph_us,"
         "cold_us,cold_us_min,cold_us_max,headline_us,GBps,"
         "fraction_of_copy,generated_over_reference\n";
  for (const Row &r : report.rows) {
    const Row *ref = r.impl == "generated"
                         ? report.find("reference", r.phase, r.tokens)
                         : nullptr;
    const double h = r.headline();
    csv << format("%s,%s,%s,%lld,%d,%.0f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,"
                  "%.2f,%.4f,%.4f\n",
                  r.impl.c_str(), r.config.c_str(), r.phase.c_str(),
                  (long long)r.tokens, r.sets, r.bytes, r.eager.median,
                  r.graph.median, r.cold.median, r.cold.min, r.cold.max, h,
                  gbps(r.bytes, h), gbps(r.bytes, h) / report.copyGBps,
                  ref ? h / ref->headline() : kNaN);
  }
  writeFile(report.outDir + "/kvbench-" + report.tag + ".csv", csv.str());
}

std::string tableText(const Report &report, const CacheGeometry &g,
                      const std::string &main, const json &launch) {
  const bool haveGenerated = main == "generated";
  std::ostringstream out;
  const double ceiling = report.copyGBps;
  out << "\n=== kvbench " << report.tag << ": " << describe(g) << "\n";
  out << format("device %s; copy ceiling %.1f GB/s (4 GiB D2D, read + "
                "written); fractions below are of it\n",
                report.doc["device"].value("name", "?").c_str(), ceiling);
  if (!launch.is_null()) {
    out << format(
        "launch: empty kernel eager %s us (host enqueue %s), graph node %s "
        "us; 21-param empty via cuLaunchKernel eager %s us (enqueue %s)\n",
        fmtNum(launch.value("empty_eager_us", kNaN), "%.3f").c_str(),
        fmtNum(launch.value("empty_host_enqueue_us", kNaN), "%.3f").c_str(),
        fmtNum(launch.value("empty_graph_node_us", kNaN), "%.3f").c_str(),
        fmtNum(launch.value("empty_abi_eager_us", kNaN), "%.3f").c_str(),
        fmtNum(launch.value("empty_abi_host_enqueue_us", kNaN), "%.3f")
            .c_str());
    out << format(
        "        reference append (1 token) eager %s us "
        "(enqueue %s): %s x the empty kernel\n",
        fmtNum(launch.value("reference_eager_us", kNaN), "%.3f").c_str(),
        fmtNum(launch.value("reference_host_enqueue_us", kNaN), "%.3f").c_str(),
        fmtNum(launch.value("reference_over_empty_eager", kNaN), "%.3f")
            .c_str());
    if (haveGenerated)
      out << format(
          "        kvrt append (1 token) eager %s us (enqueue %s): %s x the "
          "empty kernel, %s x the 21-param one (target <= 1.10)\n",
          fmtNum(launch.value("kvrt_eager_us", kNaN), "%.3f").c_str(),
          fmtNum(launch.value("kvrt_host_enqueue_us", kNaN), "%.3f").c_str(),
          fmtNum(launch.value("kvrt_over_empty_eager", kNaN), "%.3f").c_str(),
          fmtNum(launch.value("kvrt_over_empty_abi_eager", kNaN), "%.3f")
              .c_str());
  }
  for (const std::string phase : {"decode", "prefill"}) {
    const bool decode = phase == "decode";
    out << (decode ? "decode: headline = us per call in a CUDA graph of 100 "
                     "calls\n"
                   : "prefill: headline = cold device time (L2 flushed), "
                     "us\n");
    out << format("%8s %10s %8s %7s %10s %10s", "tokens", "us", "GB/s", "%copy",
                  "eager_us", decode ? "cold_us" : "graph_us");
    if (haveGenerated)
      out << format(" | %10s %7s %8s", "ref_us", "ref_%", "gen/ref");
    out << format(" %8s\n", "ref_cfg");
    for (const Row &r : report.rows) {
      if (r.impl != main || r.phase != phase)
        continue;
      const double h = r.headline();
      out << format(
          "%8lld %10s %8s %7s %10s %10s", (long long)r.tokens,
          fmtNum(h, "%.3f").c_str(), fmtNum(gbps(r.bytes, h), "%.0f").c_str(),
          fmtNum(100 * gbps(r.bytes, h) / ceiling, "%.1f").c_str(),
          fmtNum(r.eager.median, "%.3f").c_str(),
          fmtNum(decode ? r.cold.median : r.graph.median, "%.3f").c_str());
      const Row *ref = report.find("reference", phase, r.tokens);
      if (haveGenerated) {
        const double rh = ref ? ref->headline() : kNaN;
        out << format(" | %10s %7s %8s", fmtNum(rh, "%.3f").c_str(),
                      fmtNum(100 * gbps(r.bytes, rh) / ceiling, "%.1f").c_str(),
                      fmtNum(h / rh, "%.3f").c_str());
      }
      out << format(" %8s\n", ref ? ref->config.c_str() : "-");
    }
  }
  return out.str();
}

} // namespace kvbench
