//===- Limits.h - the largest caches a generated kernel supports -*- C++
//-*-===//
//
// The limits of docs/CONTRACT.md, defined once: the dialect's verifier refuses
// a description past one (so kvgen never plans a kernel it cannot launch), and
// kvrt refuses a bundle past one. They come from what a GPU can launch and
// from keeping every product of two of them far inside int64_t: with these
// bounds, elements per token times tokens per block is at most 2^40, so no
// offset computed from the compile-time geometry can wrap.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_ABI_LIMITS_H
#define KVGEN_ABI_LIMITS_H

#include <cstdint>

namespace kvgen::abi {

/// block_size of a paged layout, max_seq_len of the contiguous layout.
inline constexpr int64_t kMaxTokensPerBlock = int64_t(1) << 20;
inline constexpr int64_t kMaxHeadDim = int64_t(1) << 16;
inline constexpr int64_t kMaxKvHeads = int64_t(1) << 12;
/// num_kv_heads * head_dim.
inline constexpr int64_t kMaxElementsPerToken = int64_t(1) << 20;
/// CUDA's limit on the threads of one block.
inline constexpr int64_t kMaxThreadsPerBlock = 1024;

} // namespace kvgen::abi

#endif // KVGEN_ABI_LIMITS_H
