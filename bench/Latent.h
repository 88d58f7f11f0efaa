//===- Latent.h - K-only and MLA latent caches in the bench -----*- C++ -*-===//
//
// What kvbench needs to time a cache without V: a K-only description (the
// manifest's "k_only") writes one cache, and an MLA latent description (the
// manifest's "latent", docs/KERNEL-ABI.md's mla_append) is a K-only paged NHD
// cache of one head whose row is kv_c's kv_lora_rank elements followed by
// k_pe's rope_dim elements, shaped [num_blocks, block_size, L + R]. The rest
// of the bench (the sweep, the check, the timing) treats it as that one-head
// K-only cache; MlaAppend.cpp launches it through kvrt_mla_append.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_LATENT_H
#define KVGEN_BENCH_LATENT_H

#include "Geometry.h"
#include "Support.h"

#include <string>

namespace kvbench {

/// Reads "k_only" and "latent" of a manifest entry's cache into `d`; a latent
/// cache that is not one paged NHD head of kv_lora_rank + rope_dim elements
/// is fatal, naming the field.
void readKOnly(const json &entry, const json &cache, Description &d);

/// Drops the value cache of a K-only geometry; a latent cache's key cache is
/// the 3-D [num_blocks, block_size, L + R] kvrt_mla_append takes.
void shapeKOnlyCache(CacheGeometry &g);

/// ", no V" or ", no V; latent 512 + 64" for describe().
std::string kOnlyText(const Description &d);

/// The description's "k_only" and "latent" fields for the JSON report.
void recordKOnly(const Description &d, json &description);

/// Whether `key` is a targets.json "when" field of this file ("k_only",
/// "kv_lora_rank", "rope_dim"); if so, `*actual` is the description's value
/// (0 for a cache that is not latent).
bool kOnlyField(const std::string &key, const Description &d, json *actual);

} // namespace kvbench

#endif // KVGEN_BENCH_LATENT_H
