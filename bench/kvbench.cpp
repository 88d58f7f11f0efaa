//===- kvbench.cpp - time KV-cache appends against the ceilings -----------===//
//
// Measures one generated append kernel (through kvrt) and the hand-written
// CUDA reference for the same description, beside the ceilings of the same
// run, with the method of docs/PERFORMANCE.md: caches of >= 1 GiB, random
// data, inputs rotated so every timing loop touches >= 256 MiB, L2 flushed by
// a 1 GiB read-only pass before each cold timing. Without --bundle it
// benchmarks only the reference and the ceilings, which checks the bench
// itself before any generated kernel exists.
//
// The first GPU run has to count: every CUDA and kvrt call is checked, the
// log says what was set up and what each step measured, and the JSON is
// rewritten after every step so a crash still leaves the numbers so far.
//
//===----------------------------------------------------------------------===//

#include "Check.h"
#include "Latent.h"
#include "Manifest.h"
#include "Options.h"
#include "Sweep.h"
#include "Targets.h"

#include "kvrt/kvrt.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sys/stat.h>
#include <unistd.h>

namespace kvbench {
namespace {

/// What is timed: a kernel of a bundle opened through kvrt, or (without
/// --bundle) the reference alone on a default description.
struct Subject {
  kvrt_bundle *bundle = nullptr;
  KernelChoice kernel;
  Description desc;
};

/// Opens the bundle and picks the kernel before the device is touched, so a
/// bundle without the kernel costs no GPU time.
Subject openSubject(const Options &options, Report &report) {
  Subject s;
  if (options.bundlePath.empty()) {
    abi::Layout layout;
    if (!abi::parseLayout(options.layout, &layout))
      fatal("unknown --layout " + options.layout);
    s.desc = defaultDescription(layout);
    report.tag = "reference_" + options.layout;
    return s;
  }
  // kvrt's checked mode copies the slots to the host before each launch and
  // cannot be captured: the bench times the plain path.
  if (const char *checked = std::getenv("KVRT_CHECKED"); checked && *checked) {
    logLine("KVRT_CHECKED=%s ignored: kvbench times kvrt's plain path",
            checked);
    unsetenv("KVRT_CHECKED");
  }
  const double t0 = nowSeconds();
  if (kvrt_bundle_load_file(options.bundlePath.c_str(), &s.bundle) !=
      KVRT_SUCCESS)
    fatal("kvrt cannot load the bundle " + options.bundlePath + ": " +
          kvrt_last_error());
  logLine("kvrt: bundle loaded in %.1f ms, %zu kernels",
          (nowSeconds() - t0) * 1e3, kvrt_bundle_num_kernels(s.bundle));
  s.kernel =
      pickKernel(s.bundle, options.bundlePath, options.kernel, options.variant);
  s.desc = descriptionFromManifest(s.kernel.manifest);
  report.tag = s.kernel.manifestName;
  report.doc["kernel"] = {{"manifest_name", s.kernel.manifestName},
                          {"kvrt_name", s.kernel.kvrtName},
                          {"variant", s.kernel.variant},
                          {"bundle", options.bundlePath},
                          {"manifest", s.kernel.manifest}};
  logLine("kernel: %s (kvrt name %s, variant %s); manifest entry: %s",
          s.kernel.manifestName.c_str(), s.kernel.kvrtName.c_str(),
          s.kernel.variant.c_str(), s.kernel.manifest.dump().c_str());
  return s;
}

/// --targets, or bench/targets.json of the build tree kvbench runs from;
/// null if neither.
json findTargets(const Options &options) {
  std::string path = options.targetsPath;
  if (path.empty()) {
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
      std::string dir(exe, size_t(n));
      dir = dir.substr(0, dir.find_last_of('/'));
      const std::string candidate = dir + "/../bench/targets.json";
      if (access(candidate.c_str(), R_OK) == 0)
        path = candidate;
    }
  }
  if (path.empty()) {
    logLine("targets: none (no --targets, no bench/targets.json in the build "
            "tree): nothing is judged");
    return nullptr;
  }
  logLine("targets: %s", path.c_str());
  return loadTargets(path);
}

void recordSetup(Report &report, const Options &options, const CacheGeometry &g,
                 const Repetitions &reps, json setup,
                 const std::vector<SizeCase> &cases) {
  const Description &d = g.desc;
  report.doc["tool"] = "kvbench";
  report.doc["format_version"] = 2;
  report.doc["tag"] = report.tag;
  report.doc["quick"] = options.quick;
  report.doc["seed"] = options.seed;
  json description = {{"layout", abi::layoutName(d.layout)},
                      {"block_size_or_max_seq_len", d.blockSize},
                      {"paged", abi::layoutInfo(d.layout).paged()},
                      {"num_kv_heads", d.numHeads},
                      {"head_dim", d.headDim},
                      {"x", d.x},
                      {"dtype", abi::dtypeName(d.cacheDtype)},
                      {"source_dtype", abi::dtypeName(d.sourceDtype)}};
  if (d.quant)
    description["quant"] = {
        {"kind", abi::quantKindName(d.quant->kind)},
        {"granularity", abi::granularityName(d.quant->granularity)},
        {"mode", abi::scaleModeName(d.quant->mode)},
        {"reciprocal", d.quant->reciprocal}};
  recordKOnly(d, description);
  report.doc["description"] = description;
  setup["reps"] = {{"eager", reps.eager},
                   {"graph", reps.graph},
                   {"cold", reps.cold},
                   {"tune", reps.tune},
                   {"loop_seconds", reps.loopSeconds}};
  report.doc["setup"] = setup;
  for (const SizeCase &c : cases) {
    std::string sample;
    for (size_t i = 0; i < std::min<size_t>(4, c.slots.size()); ++i)
      sample += " " + std::to_string(c.slots[i]);
    logLine("  case %-7s %6lld tokens: %5d sets (%.0f MiB touched per pass); "
            "first slots%s",
            c.phase.c_str(), (long long)c.tokens, c.sets,
            double(c.sets) * double(c.tokens) * bytesPerToken(d) / double(kMiB),
            sample.c_str());
  }
}

/// The reference, correct in every configuration, or nothing it says
/// counts: a wrong one is fatal. Null if it cannot do this description.
std::unique_ptr<ReferenceAppend>
checkedReference(const CacheGeometry &g, DeviceState &state,
                 const SizeCase &checkCase, Report &report, json &checks) {
  const std::string why = referenceUnsupported(g.desc);
  if (!why.empty()) {
    logLine("reference: not run for this description: %s", why.c_str());
    report.doc["reference_skipped"] = why;
    return nullptr;
  }
  auto reference = std::make_unique<ReferenceAppend>(g, state);
  for (size_t i = 0; i < referenceConfigs().size(); ++i) {
    reference->setConfig(int(i));
    // Twice: with its own grid, and with 3 blocks, so that every block
    // strides over several token groups as the persistent grid does at the
    // large sizes.
    for (int64_t maxBlocks : {int64_t(0), int64_t(3)}) {
      reference->setMaxGridBlocks(maxBlocks);
      const CheckResult r = checkAppend(*reference, false, state, g, checkCase);
      const std::string name =
          reference->name() + (maxBlocks ? ", grid of 3" : "");
      logLine("check %-32s %s: %s", name.c_str(), r.ok ? "ok" : "WRONG",
              r.detail.c_str());
      checks.push_back({{"impl", name},
                        {"mode", "eager"},
                        {"ok", r.ok},
                        {"detail", r.detail}});
      if (r.ok)
        continue;
      report.doc["checks"] = checks;
      report.failures.push_back("reference wrong: " + r.detail);
      writeResults(report);
      fatal("the hand-written reference (" + name +
            ") wrote the wrong cache: the bench itself is broken. " + r.detail);
    }
  }
  reference->setMaxGridBlocks(0);
  return reference;
}

/// The generated kernel, checked eagerly and from a graph where the check
/// can judge its description, else launched once to see it is accepted. A
/// kernel that kvrt refuses is a result, not a reason to lose the
/// reference's numbers: it is recorded and dropped (exit 3).
std::unique_ptr<Launchable> checkedGenerated(const Subject &subject,
                                             const CacheGeometry &g,
                                             DeviceState &state,
                                             const SizeCase &checkCase,
                                             Report &report, json &checks) {
  if (!subject.bundle)
    return nullptr;
  std::unique_ptr<Launchable> gen =
      makeGeneratedAppend(subject.bundle, subject.kernel.kvrtName,
                          subject.kernel.variant, g, state);
  const std::string unchecked = checkUnsupported(g.desc);
  if (!unchecked.empty()) {
    logLine("check generated: NOT CHECKED here (%s)", unchecked.c_str());
    gen->prepare(checkCase.tokens, uploadCase(state, g, checkCase));
    const bool ok = gen->launch(0, state.stream);
    CUDA_CHECK(cudaStreamSynchronize(state.stream));
    checks.push_back({{"impl", "generated"},
                      {"mode", "eager"},
                      {"ok", nullptr},
                      {"detail", "not checked: " + unchecked}});
    if (ok)
      return gen;
    report.failures.push_back("kvrt refused the launch: " + gen->lastError());
    logLine("!!! %s", report.failures.back().c_str());
    return nullptr;
  }
  // The first launch loads the module (JIT from PTX if no cubin fits):
  // time it once, outside everything else.
  const double t0 = nowSeconds();
  for (bool viaGraph : {false, true}) {
    const CheckResult r = checkAppend(*gen, viaGraph, state, g, checkCase);
    if (!viaGraph)
      logLine("kvrt: first launch + check took %.1f ms",
              (nowSeconds() - t0) * 1e3);
    const char *mode = viaGraph ? "graph" : "eager";
    logLine("check %-22s %s (%s): %s", "generated", r.ok ? "ok" : "WRONG", mode,
            r.detail.c_str());
    checks.push_back({{"impl", "generated"},
                      {"mode", mode},
                      {"ok", r.ok},
                      {"detail", r.detail}});
    if (!r.ok)
      report.failures.push_back(std::string("generated check failed (") + mode +
                                "): " + r.detail);
    if (!r.launched) {
      logLine("!!! kvrt refused the generated kernel's launch: timing the "
              "reference alone");
      return nullptr;
    }
  }
  if (!report.failures.empty())
    logLine("!!! THE GENERATED KERNEL FAILED ITS CHECK (above): its times "
            "below may be of a wrong kernel !!!");
  return gen;
}

void sweep(const std::vector<SizeCase> &cases, ReferenceAppend *reference,
           Launchable *gen, EmptyKernel &empty, EmptyAbiKernel &emptyAbi,
           const Subject &subject, const CacheGeometry &g, DeviceState &state,
           const Repetitions &reps, json &launch, Report &report) {
  for (const SizeCase &c : cases) {
    logLine("size %s %lld tokens (%d sets):", c.phase.c_str(),
            (long long)c.tokens, c.sets);
    const std::vector<SetPointers> sets = uploadCase(state, g, c);
    if (reference) {
      reference->prepare(c.tokens, sets);
      report.rows.push_back(
          measureTunedReference(*reference, c, state, g, reps));
      writeResults(report);
    }
    if (gen) {
      gen->prepare(c.tokens, sets);
      Row row = measure(*gen, "generated", c, state, g, reps);
      row.config = subject.kernel.variant;
      report.rows.push_back(row);
    }
    // At 1 token the eager loop is host-bound, so kvrt's loop against the
    // empty kernels' loop is the runtime's own cost.
    if (c.tokens == 1) {
      compareLaunchPaths(empty, emptyAbi, gen, reference, c.sets, state, reps,
                         launch);
      report.doc["launch"] = launch;
    }
    writeResults(report);
  }
}

/// Judges the targets, writes the table and prints it.
void finish(Report &report, const json &targets, const CacheGeometry &g,
            const std::string &impl, const json &launch, double startTime) {
  std::string judged;
  if (!targets.is_null())
    report.doc["targets"] =
        judgeTargets(targets, g.desc, report, impl, launch, &judged);
  report.doc["elapsed_s"] = nowSeconds() - startTime;
  writeResults(report);
  const std::string table = tableText(report, g, impl, launch) + judged;
  writeFile(report.outDir + "/kvbench-" + report.tag + ".txt", table);
  std::printf("%s", table.c_str());
  for (const std::string &f : report.failures)
    std::printf("FAILURE: %s\n", f.c_str());
  std::printf("kvbench %s: done in %.1f s; results in %s/kvbench-%s.{json,"
              "csv,txt}\n",
              report.tag.c_str(), nowSeconds() - startTime,
              report.outDir.c_str(), report.tag.c_str());
}

int run(const Options &options) {
  const Repetitions reps = options.quick ? Repetitions::quick() : Repetitions();
  const double startTime = nowSeconds();
  Report report;
  report.outDir = options.outDir;
  // Everything that can be refused is read before anything is written.
  Subject subject = openSubject(options, report);
  const CacheGeometry g = makeGeometry(subject.desc);
  const json targets = findTargets(options);
  if (mkdir(options.outDir.c_str(), 0755) != 0 && errno != EEXIST)
    fatal("cannot create the output directory " + options.outDir);

  DeviceState state;
  initDevice(state, report.doc);
  logLine("description: %s", describe(g).c_str());
  logLine("mode: %s; %s",
          subject.bundle ? "generated + reference" : "reference only",
          options.quick ? "QUICK (smoke test: too few repetitions to quote)"
                        : "full repetitions");
  SizeCase checkCase;
  const std::vector<SizeCase> cases = makeSweep(g, options.seed, &checkCase);
  json setup;
  allocateBuffers(state, g, cases, size_t(std::max(reps.cold, reps.tune)),
                  setup);
  recordSetup(report, options, g, reps, setup, cases);
  measureFlush(state, report.doc);
  report.copyGBps =
      measureCopyCeiling(state, options.quick ? 3 : 10, report.doc);
  EmptyKernel empty;
  EmptyAbiKernel emptyAbi;
  json launch = measureLaunchAnchors(empty, emptyAbi, state, reps);
  report.doc["launch"] = launch;
  writeResults(report);

  json checks = json::array();
  std::unique_ptr<ReferenceAppend> reference =
      checkedReference(g, state, checkCase, report, checks);
  std::unique_ptr<Launchable> gen =
      checkedGenerated(subject, g, state, checkCase, report, checks);
  report.doc["checks"] = checks;
  if (!reference && !gen) {
    writeResults(report);
    fatal("nothing to time: no reference for this description and no "
          "generated kernel that kvrt launches");
  }
  // The checks overwrote parts of the caches; the data stays random.
  fillCaches(state, g);
  sweep(cases, reference.get(), gen.get(), empty, emptyAbi, subject, g, state,
        reps, launch, report);
  finish(report, targets, g, gen ? "generated" : "reference", launch,
         startTime);

  gen.reset();
  if (subject.bundle)
    kvrt_bundle_destroy(subject.bundle);
  freeBuffers(state);
  return report.failures.empty() ? 0 : 3;
}

} // namespace
} // namespace kvbench

int main(int argc, char **argv) {
  return kvbench::run(kvbench::parseOptions(argc, argv));
}
