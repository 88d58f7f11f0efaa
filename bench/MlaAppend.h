//===- MlaAppend.h - the generated MLA append, through kvrt -----*- C++ -*-===//
//
// The launchable of an MLA latent description: kvrt_mla_append with kv_c and
// k_pe as the two column ranges of one [tokens, kv_lora_rank + rope_dim]
// projection output (how vLLM hands them over), into the 3-D latent cache.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_BENCH_MLAAPPEND_H
#define KVGEN_BENCH_MLAAPPEND_H

#include "Launchables.h"

#include "kvrt/kvrt.h"

#include <dlpack/dlpack.h>

namespace kvbench {

/// The generated mla_append `kvrtName` of `bundle` over the buffers of
/// `state` (a latent geometry: Latent.h).
std::unique_ptr<Launchable> makeMlaAppend(kvrt_bundle *bundle,
                                          const std::string &kvrtName,
                                          kvrt_variant variant,
                                          const CacheGeometry &g,
                                          const DeviceState &state);

} // namespace kvbench

#endif // KVGEN_BENCH_MLAAPPEND_H
