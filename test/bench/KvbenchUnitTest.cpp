//===- KvbenchUnitTest.cpp - kvbench's pure parts, on the CPU -------------===//
//
// What kvbench computes before it touches a GPU: the description read from a
// manifest entry, the caches sized for it, the minimum bytes per token, the
// sweep's slot mappings, kvrt names of scalar kernels, the targets of
// bench/targets.json (given as argv[1]) judged on made-up rows, and the
// launch path's paired ratio.
//
//===----------------------------------------------------------------------===//

#include "Expect.h"
#include "Geometry.h"
#include "Manifest.h"
#include "Report.h"
#include "Targets.h"
#include "Workloads.h"

#include <cmath>
#include <cstdio>
#include <set>

using namespace kvbench;

namespace {

json entry(const std::string &layout, int64_t blockSize,
           const std::string &dtype, json quant = nullptr) {
  json cache = {{"layout", layout},
                {"block_size", blockSize},
                {"num_kv_heads", 8},
                {"head_dim", 128},
                {"dtype", dtype}};
  if (!quant.is_null())
    cache["quant"] = quant;
  return {{"name", "k"},
          {"kind", "append"},
          {"variant", "vector"},
          {"cache", cache},
          {"source_dtype", "bf16"}};
}

void testManifestAndBytes() {
  const Description bf16 =
      descriptionFromManifest(entry("paged_nhd", 16, "bf16"));
  EXPECT(bf16.layout == abi::Layout::PagedNHD);
  EXPECT(bf16.blockSize == 16 && bf16.numHeads == 8 && bf16.headDim == 128);
  EXPECT(!bf16.quant);
  // 4096 read + 8 slot + 4096 written.
  EXPECT(bytesPerToken(bf16) == 8200);

  const Description fp8 =
      descriptionFromManifest(entry("paged_nhd", 16, "f8e4m3",
                                    {{"kind", "fp8_e4m3"},
                                     {"granularity", "per_tensor"},
                                     {"mode", "static"},
                                     {"reciprocal", false}}));
  EXPECT(fp8.quant && fp8.quant->kind == abi::QuantKind::FP8E4M3);
  EXPECT(fp8.quantization() == abi::Quantization::Static);
  EXPECT(fp8.x == 16);
  // 4096 read + 8 slot + 2048 written; a static scale is not per token.
  EXPECT(bytesPerToken(fp8) == 6152);

  const Description int8 =
      descriptionFromManifest(entry("paged_nhd", 16, "i8",
                                    {{"kind", "int8"},
                                     {"granularity", "per_token_head"},
                                     {"mode", "dynamic"}}));
  EXPECT(int8.quantization() == abi::Quantization::Dynamic);
  // ... plus a 4-byte scale per head for K and for V.
  EXPECT(bytesPerToken(int8) == 6152 + 2 * 8 * 4);
}

void testGeometry() {
  const CacheGeometry nhd =
      makeGeometry(descriptionFromManifest(entry("paged_nhd", 16, "bf16")));
  EXPECT(nhd.numBlocks == 32768);
  EXPECT((nhd.keyShape == std::vector<int64_t>{32768, 16, 8, 128}));
  // Element (block 2, head 3, pos 5, d 7) of [nb, bs, H, D].
  EXPECT(nhd.key.offset(2, 3, 5, 7) == ((2 * 16 + 5) * 8 + 3) * 128 + 7);
  EXPECT(referenceUnsupported(nhd.desc).empty());
  EXPECT(checkUnsupported(nhd.desc).empty());

  const CacheGeometry bs528 =
      makeGeometry(descriptionFromManifest(entry("paged_nhd", 528, "bf16")));
  // ceil(1 GiB / (528 x 8 x 128 x 2 B)).
  EXPECT(bs528.numBlocks == 993);
  EXPECT(!referenceUnsupported(bs528.desc).empty());
  EXPECT(checkUnsupported(bs528.desc).empty());

  const CacheGeometry int8 = makeGeometry(
      descriptionFromManifest(entry("paged_nhd", 16, "i8",
                                    {{"kind", "int8"},
                                     {"granularity", "per_token_head"},
                                     {"mode", "dynamic"}})));
  EXPECT(int8.elemBytes == 1 && int8.numBlocks == 65536);
  EXPECT((int8.scaleCacheShape == std::vector<int64_t>{65536, 16, 8}));
  EXPECT(!referenceUnsupported(int8.desc).empty());
  EXPECT(!checkUnsupported(int8.desc).empty());

  const CacheGeometry dual =
      makeGeometry(defaultDescription(abi::Layout::DualStacked));
  EXPECT(dual.dual && dual.valueElems == 0);
  EXPECT(dual.value.offset(0, 0, 0, 0) == 8 * 16 * 128);
}

void testWorkloads() {
  const CacheGeometry g =
      makeGeometry(descriptionFromManifest(entry("paged_nhd", 528, "bf16")));
  SizeCase check;
  const std::vector<SizeCase> cases = makeSweep(g, 7, &check);
  EXPECT(cases.size() == kDecodeTokens.size() + kPrefillTokens.size());
  for (const SizeCase &c : cases) {
    EXPECT(int64_t(c.slots.size()) == c.sets * c.tokens);
    // Every pass touches at least the minimum bytes.
    EXPECT(double(c.sets) * double(c.tokens) * bytesPerToken(g.desc) >=
           double(kMinTouchBytes));
    for (int s = 0; s < c.sets; ++s) {
      std::set<int64_t> slots, blocks;
      for (int64_t t = 0; t < c.tokens; ++t) {
        const int64_t slot = c.slots[size_t(s * c.tokens + t)];
        EXPECT(slot >= 0 && slot < g.numBlocks * 528);
        slots.insert(slot);
        blocks.insert(slot / 528);
      }
      // No slot twice in a set; decode tokens each in their own block.
      EXPECT(int64_t(slots.size()) == c.tokens);
      if (c.phase == "decode")
        EXPECT(int64_t(blocks.size()) == c.tokens);
    }
    if (c.phase == "prefill")
      // A request's positions follow each other within a block.
      EXPECT(c.slots[1] == c.slots[0] + 1 || c.slots[1] % 528 == 0);
  }
  int invalid = 0;
  for (int64_t slot : check.slots)
    invalid += slot < 0 || slot >= g.numBlocks * 528;
  EXPECT(check.tokens == 37 && invalid == 3);
}

void testKvrtNames() {
  KernelChoice c;
  std::string error;
  EXPECT(kvrtNameOf("bench_paged_nhd_scalar", "scalar", "vector", &c, &error));
  EXPECT(c.kvrtName == "bench_paged_nhd" && c.variant == "scalar");
  EXPECT(kvrtNameOf("bench_paged_nhd", "vector", "auto", &c, &error));
  EXPECT(c.kvrtName == "bench_paged_nhd" && c.variant == "auto");
  EXPECT(!kvrtNameOf("odd", "scalar", "vector", &c, &error));
  EXPECT(error.find("_scalar") != std::string::npos);
  // Naming the wide kernel forces it, whatever --variant says.
  EXPECT(kvrtNameOf("bench_paged_nhd_wide", "wide", "auto", &c, &error));
  EXPECT(c.kvrtName == "bench_paged_nhd" && c.variant == "wide");
  EXPECT(!kvrtNameOf("odd", "wide", "auto", &c, &error));
  EXPECT(error.find("_wide") != std::string::npos);
  EXPECT(!kvrtNameOf("bench_paged_nhd", "narrow", "auto", &c, &error));
  EXPECT(error.find("'narrow'") != std::string::npos);
}

Row row(const std::string &phase, int64_t tokens, double us) {
  Row r;
  r.impl = "generated";
  r.phase = phase;
  r.tokens = tokens;
  r.bytes = double(tokens) * 8200;
  r.graph.median = us;
  r.cold.median = us;
  return r;
}

void testTargets(const std::string &path) {
  const json targets = loadTargets(path);
  const Description bf16 =
      descriptionFromManifest(entry("paged_nhd", 16, "bf16"));
  const Description fp8 =
      descriptionFromManifest(entry("paged_nhd", 16, "f8e4m3",
                                    {{"kind", "fp8_e4m3"},
                                     {"granularity", "per_tensor"},
                                     {"mode", "static"}}));
  int bf16Groups = 0, fp8Groups = 0;
  for (const json &group : targets["groups"]) {
    bf16Groups += targetsApply(group["when"], bf16);
    fp8Groups += targetsApply(group["when"], fp8);
  }
  EXPECT(bf16Groups == 1 && fp8Groups == 1);
  EXPECT(!targetsApply(targets["groups"][0]["when"],
                       defaultDescription(abi::Layout::PagedHND)));

  Report report;
  report.copyGBps = 4000;
  // 65536 tokens at 96% of a 4000 GB/s copy; 16384 at 50%; decode 1 at 1.0.
  report.rows.push_back(row("prefill", 65536, 65536 * 8200 / 3840e3));
  report.rows.push_back(row("prefill", 16384, 16384 * 8200 / 2000e3));
  report.rows.push_back(row("decode", 1, 1.0));
  std::string text;
  const json judged = judgeTargets(targets, bf16, report, "generated",
                                   json{{"kvrt_over_empty_eager", 1.2}}, &text);
  auto passOf = [&](const std::string &what) -> json {
    for (const json &t : judged)
      if (t["target"] == what)
        return t["pass"];
    return "absent";
  };
  EXPECT(passOf("prefill 65536: fraction_of_copy") == true);
  EXPECT(passOf("prefill 16384: fraction_of_copy") == false);
  EXPECT(passOf("decode 1: graph_us") == true);
  // A size that was not measured misses.
  EXPECT(passOf("decode 512: graph_us") == false);
  EXPECT(passOf("kvrt_over_empty_eager") == false);
  EXPECT(text.find("MISS") != std::string::npos);
  EXPECT(text.find("MET") != std::string::npos);
}

void testMedianRoundRatio() {
  // Round 2 runs in a slow phase that doubles both sides, round 3 in one that
  // slows only the empty kernel: the paired ratio stays 1.1, where the ratio
  // of the two medians (2.3 / 3.0) would not.
  const std::vector<double> kvrt = {2.2, 4.4, 2.3};
  const std::vector<double> empty = {2.0, 4.0, 3.0};
  EXPECT(std::abs(medianRoundRatio(kvrt, empty, 1) - 1.1) < 1e-12);
  // Two samples a round: each round's median first.
  const std::vector<double> k2 = {2.0, 2.4, 4.0, 4.8, 9.0, 9.0};
  const std::vector<double> e2 = {2.0, 2.0, 4.0, 4.0, 1.0, 1.0};
  EXPECT(std::abs(medianRoundRatio(k2, e2, 2) - 1.1) < 1e-12);
  // Unequal rounds, no samples, a partial round: no ratio.
  EXPECT(std::isnan(medianRoundRatio({1.0, 2.0}, {1.0}, 1)));
  EXPECT(std::isnan(medianRoundRatio({}, {}, 1)));
  EXPECT(std::isnan(medianRoundRatio({1.0, 2.0, 3.0}, {1.0, 2.0, 3.0}, 2)));
}

void testTable() {
  Report report;
  report.copyGBps = 4000;
  report.tag = "t";
  report.doc["device"] = {{"name", "test"}};
  report.rows.push_back(row("decode", 1, 1.5));
  const CacheGeometry g =
      makeGeometry(descriptionFromManifest(entry("paged_nhd", 528, "bf16")));
  const std::string table = tableText(report, g, "generated", nullptr);
  // No reference row for block 528: its columns say so.
  EXPECT(table.find("n/a") != std::string::npos);
  EXPECT(table.find("block_size 528") != std::string::npos);
  EXPECT(table.find("1.500") != std::string::npos);
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::printf("usage: kvbench-unit-test bench/targets.json\n");
    return 2;
  }
  testManifestAndBytes();
  testGeometry();
  testWorkloads();
  testKvrtNames();
  testTargets(argv[1]);
  testTable();
  testMedianRoundRatio();
  return kvbench::test::finish();
}
