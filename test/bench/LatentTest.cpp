//===- LatentTest.cpp - kvbench's K-only and MLA latent rows, on the CPU --===//
//
// The MLA row's pure parts: the latent description read from a manifest
// entry (as kvgen writes it for bench-mla.mlir), its 3-D cache without V,
// the byte count (1152 read + 8 slot + 1152 written per bf16 token),
// the sweep over it, a latent that does not add up refused, and the MLA
// prefill target of bench/targets.json (argv[1]) judged on made-up rows.
//
//===----------------------------------------------------------------------===//

#include "Latent.h"
#include "Expect.h"
#include "Geometry.h"
#include "Manifest.h"
#include "Report.h"
#include "Targets.h"
#include "Workloads.h"

#include <cstdio>
#include <sys/wait.h>
#include <unistd.h>

using namespace kvbench;

namespace {

/// bench-mla.mlir's entries as kvgen writes them.
json mlaEntry(const std::string &dtype, int64_t rank = 512, int64_t rope = 64,
              int64_t headDim = 576) {
  json cache = {{"layout", "paged_nhd"},
                {"block_size", 64},
                {"num_kv_heads", 1},
                {"head_dim", headDim},
                {"dtype", dtype},
                {"latent", {{"kv_lora_rank", rank}, {"rope_dim", rope}}}};
  if (dtype == "f8e4m3")
    cache["quant"] = {{"kind", "fp8_e4m3"},
                      {"granularity", "per_tensor"},
                      {"mode", "static"}};
  return {{"name", "bench_mla"},
          {"kind", "mla_append"},
          {"variant", "vector"},
          {"cache", cache},
          {"source_dtype", "bf16"}};
}

void testDescription() {
  const Description d = descriptionFromManifest(mlaEntry("bf16"));
  EXPECT(d.latent && d.latent->kvLoraRank == 512 && d.latent->ropeDim == 64);
  EXPECT(d.kOnly);
  // The count: 1152 read + 8 slot + 1152 written.
  EXPECT(bytesPerToken(d) == 1152 + 8 + 1152);
  const Description fp8 = descriptionFromManifest(mlaEntry("f8e4m3"));
  EXPECT(fp8.quantization() == abi::Quantization::Static);
  EXPECT(bytesPerToken(fp8) == 1152 + 8 + 576);

  // A K-only cache without a latent: K's bytes alone.
  json konly = mlaEntry("bf16");
  konly["cache"].erase("latent");
  konly["cache"]["k_only"] = true;
  konly["cache"]["num_kv_heads"] = 8;
  konly["cache"]["head_dim"] = 128;
  const Description k = descriptionFromManifest(konly);
  EXPECT(k.kOnly && !k.latent);
  EXPECT(bytesPerToken(k) == 2048 + 8 + 2048);
}

void testGeometry() {
  const CacheGeometry g =
      makeGeometry(descriptionFromManifest(mlaEntry("bf16")));
  // ceil(1 GiB / (64 x 576 x 2 B)) blocks of [64, 576]; no V.
  EXPECT(g.numBlocks == 14564);
  EXPECT((g.keyShape == std::vector<int64_t>{14564, 64, 576}));
  EXPECT(g.valueShape.empty() && g.valueElems == 0 && !g.dual);
  EXPECT(g.keyElems == 14564LL * 64 * 576);
  // Element (block 2, pos 5, d 7): the one head is no dimension.
  EXPECT(g.key.offset(2, 0, 5, 7) == (2 * 64 + 5) * 576 + 7);
  EXPECT(!referenceUnsupported(g.desc).empty());
  EXPECT(checkUnsupported(g.desc).empty());
  EXPECT(describe(g).find("latent 512 + 64") != std::string::npos);
  json description;
  recordKOnly(g.desc, description);
  EXPECT(description["latent"]["kv_lora_rank"] == 512);

  SizeCase check;
  const std::vector<SizeCase> cases = makeSweep(g, 7, &check);
  for (const SizeCase &c : cases) {
    EXPECT(double(c.sets) * double(c.tokens) * bytesPerToken(g.desc) >=
           double(kMinTouchBytes));
    for (int64_t slot : c.slots)
      EXPECT(slot >= 0 && slot < g.numBlocks * 64);
  }
  EXPECT(check.tokens == 37);
}

/// fp8_ds_mla's entry with inline scales, as kvgen writes it for
/// bench-mla.mlir's bench_mla_ds: a cache of 656-byte entries, 1152 read + 8
/// slot + 656 written per token, no scale cache.
void testInlineScales(const std::string &targetsPath) {
  json entry = mlaEntry("f8e4m3");
  entry["name"] = "bench_mla_ds";
  entry["cache"]["quant"] = {
      {"kind", "fp8_e4m3"}, {"granularity", "per_token"}, {"mode", "dynamic"}};
  entry["cache"]["latent"]["inline_scales"] = {
      {"group_size", 128}, {"rope_dtype", "bf16"}, {"entry_bytes", 656}};
  const Description d = descriptionFromManifest(entry);
  EXPECT(d.latent && d.latent->entryBytes == 656);
  EXPECT(d.quantization() == abi::Quantization::None);
  EXPECT(bytesPerToken(d) == 1152 + 8 + 656);
  const CacheGeometry g = makeGeometry(d);
  EXPECT(g.keyShape.size() == 3 && g.keyShape[2] == 656);
  EXPECT(g.keyElems == g.numBlocks * 64 * 656);
  EXPECT(g.scaleCacheShape.empty());
  EXPECT(g.key.offset(2, 0, 5, 7) == (2 * 64 + 5) * 656 + 7);
  // Its own prefill target (bench/targets.json), not the bf16 MLA group's.
  const json targets = loadTargets(targetsPath);
  std::vector<std::string> names;
  for (const json &group : targets["groups"])
    if (targetsApply(group["when"], d))
      names.push_back(group["name"]);
  EXPECT(names.size() == 1 && names[0].find("fp8_ds_mla") == 0);
}

/// A latent whose parts do not add up to head_dim is refused (kvbench's
/// fatal() exits 2): run in a child so the test goes on.
void testRefused() {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    std::fclose(stderr);
    (void)descriptionFromManifest(mlaEntry("bf16", 512, 32, 576));
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 2);
}

Row row(const std::string &phase, int64_t tokens, double us) {
  Row r;
  r.impl = "generated";
  r.phase = phase;
  r.tokens = tokens;
  r.bytes = double(tokens) * 2312;
  r.graph.median = us;
  r.cold.median = us;
  return r;
}

void testTargets(const std::string &path) {
  const json targets = loadTargets(path);
  const Description mla = descriptionFromManifest(mlaEntry("bf16"));
  const Description fp8 = descriptionFromManifest(mlaEntry("f8e4m3"));
  int mlaGroups = 0, fp8Groups = 0;
  for (const json &group : targets["groups"]) {
    mlaGroups += targetsApply(group["when"], mla);
    fp8Groups += targetsApply(group["when"], fp8);
  }
  // The bf16 MLA group and nothing else; the other groups do not take it.
  EXPECT(mlaGroups == 1 && fp8Groups == 0);

  Report report;
  report.copyGBps = 4000;
  // 65536 tokens at 91% of a 4000 GB/s copy: the target is 90%.
  report.rows.push_back(row("prefill", 65536, 65536 * 2312 / 3640e3));
  std::string text;
  json judged = judgeTargets(targets, mla, report, "generated", nullptr, &text);
  bool found = false;
  for (const json &t : judged)
    if (t["target"] == "prefill 65536: fraction_of_copy") {
      found = true;
      EXPECT(t["pass"] == true && t["limit"] == 0.9);
    }
  EXPECT(found);
  // At 85% it misses.
  report.rows[0] = row("prefill", 65536, 65536 * 2312 / 3400e3);
  judged = judgeTargets(targets, mla, report, "generated", nullptr, &text);
  for (const json &t : judged)
    if (t["target"] == "prefill 65536: fraction_of_copy")
      EXPECT(t["pass"] == false);
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::printf("usage: kvbench-latent-test bench/targets.json\n");
    return 2;
  }
  testDescription();
  testGeometry();
  testInlineScales(argv[1]);
  testRefused();
  testTargets(argv[1]);
  return kvbench::test::finish();
}
