//===- Checked.cpp - checked mode: the slots of a launch, read on the host ===//

#include "Checked.h"

#include <cstring>
#include <unordered_map>

/// A refused launch: KVRT_ERROR_INVALID_ARGUMENT, the message saying that
/// checked mode found it.
#define KVRT_CHECKED_ERROR(format, ...)                                        \
  KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT, format " (checked mode)", __VA_ARGS__)

namespace kvrt::impl {

namespace {
/// A validated index tensor (i32 or i64, inner stride 1), copied to the host
/// once and read by index.
class HostIndex {
public:
  Status read(const TensorView &view, const ReadBytes &readBytes) {
    this->view = &view;
    bytes.resize(static_cast<size_t>(view.extent) * view.elementBytes);
    if (bytes.empty())
      return Status();
    return readBytes(view, bytes.data(), bytes.size());
  }

  int64_t at(int64_t i, int64_t j = 0) const {
    int64_t offset = i * view->strides[0] + (view->rank > 1 ? j : 0);
    const char *element = bytes.data() + offset * view->elementBytes;
    if (view->elementBytes == 8) {
      int64_t value;
      std::memcpy(&value, element, sizeof(value));
      return value;
    }
    int32_t value;
    std::memcpy(&value, element, sizeof(value));
    return value;
  }

private:
  const TensorView *view = nullptr;
  std::vector<char> bytes;
};

/// Slot -> the first token that used it.
class SlotOwners {
public:
  explicit SlotOwners(int64_t tokens) {
    owners.reserve(static_cast<size_t>(tokens));
  }
  /// The earlier token with this slot, or -1.
  int64_t claim(int64_t slot, int64_t token) {
    auto [it, inserted] = owners.emplace(slot, token);
    return inserted ? -1 : it->second;
  }

private:
  std::unordered_map<int64_t, int64_t> owners;
};
} // namespace

using abi::Param;

/// Claims `slot` for token `t` (request `r`, `position`) of a launch whose
/// slots come from a table, refusing a slot an earlier token already took.
static Status claimTableSlot(SlotOwners &owners, int64_t slot, int64_t t,
                             int64_t r, int64_t position) {
  int64_t earlier = owners.claim(slot, t);
  if (earlier < 0)
    return Status();
  return KVRT_CHECKED_ERROR(
      "token %lld (request %lld, position %lld) writes slot %lld, also used by "
      "token %lld; two tokens of one launch must not share a slot",
      static_cast<long long>(t), static_cast<long long>(r),
      static_cast<long long>(position), static_cast<long long>(slot),
      static_cast<long long>(earlier));
}

/// max_position, the rows of the cos/sin cache, for a launch whose prologue
/// has RoPE; -1 without one.
static int64_t ropeMaxPosition(const LaunchPlan &plan) {
  if (plan.bufferOf[static_cast<int>(Param::CosSinCache)] < 0)
    return -1;
  return plan.buffer(Param::CosSinCache).shape[0];
}

/// Whether `position` has a row in the cos/sin cache. The kernel checks it
/// too, but without a read back it can only drop the token: no K, no V and
/// no q_out row (docs/CONTRACT.md, "The fused prologue"). A padding token is
/// no exception: its Q is written when its position is in range, so a
/// position out of range drops a row the caller expects.
static bool inCosSinCache(int64_t position, int64_t maxPosition) {
  return position >= 0 && position < maxPosition;
}

/// append's and paged_kv_append's prologue: token t rotates at
/// rope_positions[t]. An MLA append's padding token (`padding`: its slots)
/// writes nothing, Q included, and reads no position (vLLM's kernel
/// neither): not checked.
static Status checkRopePositions(const LaunchPlan &plan, const ReadBytes &read,
                                 int64_t maxPosition,
                                 const HostIndex *padding) {
  HostIndex positions;
  KVRT_RETURN_IF_ERROR(positions.read(plan.buffer(Param::RopePositions), read));
  for (int64_t t = 0; t < plan.numTokens; ++t) {
    int64_t position = positions.at(t);
    if (padding && padding->at(t) < 0)
      continue;
    if (!inCosSinCache(position, maxPosition))
      return KVRT_CHECKED_ERROR(
          "rope_positions[%lld] = %lld is outside the cos/sin cache: "
          "cos_sin_cache has max_position %lld rows; the kernel would write "
          "no K, V or Q for that token",
          static_cast<long long>(t), static_cast<long long>(position),
          static_cast<long long>(maxPosition));
  }
  return Status();
}

static Status checkSlotMapping(const LaunchPlan &plan, const ReadBytes &read) {
  HostIndex slots;
  KVRT_RETURN_IF_ERROR(slots.read(plan.buffer(Param::SlotMapping), read));
  bool latent = abi::kindTraits(plan.kind).entry == abi::KindEntry::Latent;
  if (int64_t maxPosition = ropeMaxPosition(plan); maxPosition >= 0)
    KVRT_RETURN_IF_ERROR(
        checkRopePositions(plan, read, maxPosition, latent ? &slots : nullptr));
  // Bounded by the limits: num_blocks comes from a validated tensor and
  // block_size is at most 2^20, so the product may still overflow; saturate.
  int64_t capacity = 0;
  if (__builtin_mul_overflow(plan.numBlocks, plan.blockSize, &capacity))
    capacity = INT64_MAX;
  SlotOwners owners(plan.numTokens);
  for (int64_t t = 0; t < plan.numTokens; ++t) {
    int64_t slot = slots.at(t);
    if (slot < 0)
      continue;
    if (slot >= capacity)
      return KVRT_CHECKED_ERROR(
          "slot_mapping[%lld] = %lld is out of range: the cache has %lld slots "
          "(num_blocks %lld * block_size %lld)",
          static_cast<long long>(t), static_cast<long long>(slot),
          static_cast<long long>(capacity),
          static_cast<long long>(plan.numBlocks),
          static_cast<long long>(plan.blockSize));
    int64_t earlier = owners.claim(slot, t);
    if (earlier >= 0)
      return KVRT_CHECKED_ERROR(
          "slot_mapping[%lld] = %lld is also used by token %lld; two tokens of "
          "one launch must not share a slot",
          static_cast<long long>(t), static_cast<long long>(slot),
          static_cast<long long>(earlier));
  }
  return Status();
}

/// The fused append's slots, computed as the kernel does
/// (docs/KERNEL-ABI.md, "slot_mapping"). What the kernel drops or moves
/// without a word is refused here, named: a query_start_loc that is negative
/// or decreases (its tokens would shift to another request), a negative
/// context_lens, a position past the block-table row, and, with a RoPE
/// prologue, a position past the cos/sin cache (the position is the slot
/// rule's, so it is checked from what is read here).
static Status checkBlockTable(const LaunchPlan &plan, const ReadBytes &read) {
  const TensorView &tableView = plan.buffer(Param::BlockTable);
  HostIndex table, starts, lens;
  KVRT_RETURN_IF_ERROR(table.read(tableView, read));
  KVRT_RETURN_IF_ERROR(starts.read(plan.buffer(Param::QueryStartLoc), read));
  KVRT_RETURN_IF_ERROR(lens.read(plan.buffer(Param::ContextLens), read));
  int64_t numReqs = tableView.shape[0];
  int64_t maxBlocks = tableView.shape[1];
  for (int64_t r = 0; r <= numReqs; ++r) {
    int64_t start = starts.at(r);
    if (start < 0)
      return KVRT_CHECKED_ERROR("query_start_loc[%lld] = %lld is negative",
                                static_cast<long long>(r),
                                static_cast<long long>(start));
    if (r > 0 && start < starts.at(r - 1))
      return KVRT_CHECKED_ERROR(
          "query_start_loc[%lld] = %lld is below query_start_loc[%lld] = %lld: "
          "it must not decrease",
          static_cast<long long>(r), static_cast<long long>(start),
          static_cast<long long>(r - 1),
          static_cast<long long>(starts.at(r - 1)));
    if (r < numReqs && lens.at(r) < 0)
      return KVRT_CHECKED_ERROR("context_lens[%lld] = %lld is negative",
                                static_cast<long long>(r),
                                static_cast<long long>(lens.at(r)));
  }
  int64_t maxPosition = ropeMaxPosition(plan);
  SlotOwners owners(plan.numTokens);
  for (int64_t r = 0; r < numReqs; ++r) {
    int64_t begin = starts.at(r);
    int64_t end = std::min<int64_t>(starts.at(r + 1), plan.numTokens);
    for (int64_t t = begin; t < end; ++t) {
      int64_t position = lens.at(r) + t - starts.at(r);
      // Not negative: context_lens and the start were checked above.
      if (maxPosition >= 0 && !inCosSinCache(position, maxPosition))
        return KVRT_CHECKED_ERROR(
            "token %lld (request %lld, position %lld = context_lens[%lld] "
            "%lld + %lld) is outside the cos/sin cache: cos_sin_cache has "
            "max_position %lld rows; the kernel would write no K, V or Q for "
            "that token",
            static_cast<long long>(t), static_cast<long long>(r),
            static_cast<long long>(position), static_cast<long long>(r),
            static_cast<long long>(lens.at(r)),
            static_cast<long long>(t - starts.at(r)),
            static_cast<long long>(maxPosition));
      int64_t column = position / plan.blockSize;
      if (column >= maxBlocks)
        return KVRT_CHECKED_ERROR(
            "token %lld (request %lld, position %lld = context_lens[%lld] %lld "
            "+ %lld) is past its block_table row: block %lld of "
            "max_blocks_per_req %lld (block_size %lld)",
            static_cast<long long>(t), static_cast<long long>(r),
            static_cast<long long>(position), static_cast<long long>(r),
            static_cast<long long>(lens.at(r)),
            static_cast<long long>(t - starts.at(r)),
            static_cast<long long>(column), static_cast<long long>(maxBlocks),
            static_cast<long long>(plan.blockSize));
      int64_t block = table.at(r, column);
      if (block < 0)
        continue;
      if (block >= plan.numBlocks)
        return KVRT_CHECKED_ERROR(
            "block_table[%lld][%lld] = %lld (token %lld) is past the cache's "
            "num_blocks (%lld)",
            static_cast<long long>(r), static_cast<long long>(column),
            static_cast<long long>(block), static_cast<long long>(t),
            static_cast<long long>(plan.numBlocks));
      int64_t slot = block * plan.blockSize + position % plan.blockSize;
      KVRT_RETURN_IF_ERROR(claimTableSlot(owners, slot, t, r, position));
    }
  }
  return Status();
}

/// paged_kv_append's slots, computed as the kernel does (docs/CONTRACT.md,
/// "FlashInfer's page table"): every token whose index the kernel would
/// skip is refused here, named, as is a slot used twice.
static Status checkPageTable(const LaunchPlan &plan, const ReadBytes &read) {
  if (int64_t maxPosition = ropeMaxPosition(plan); maxPosition >= 0)
    KVRT_RETURN_IF_ERROR(checkRopePositions(plan, read, maxPosition, nullptr));
  HostIndex batch, positions, indices, indptr;
  const TensorView &indptrView = plan.buffer(Param::KvIndptr);
  const TensorView &indicesView = plan.buffer(Param::KvIndices);
  KVRT_RETURN_IF_ERROR(batch.read(plan.buffer(Param::BatchIndices), read));
  KVRT_RETURN_IF_ERROR(positions.read(plan.buffer(Param::Positions), read));
  KVRT_RETURN_IF_ERROR(indices.read(indicesView, read));
  KVRT_RETURN_IF_ERROR(indptr.read(indptrView, read));
  int64_t batchSize = indptrView.shape[0] - 1;
  int64_t numIndices = indicesView.shape[0];
  SlotOwners owners(plan.numTokens);
  for (int64_t i = 0; i < plan.numTokens; ++i) {
    int64_t b = batch.at(i);
    if (b < 0 || b >= batchSize)
      return KVRT_CHECKED_ERROR("batch_indices[%lld] = %lld is out of range: "
                                "batch_size is %lld (len(kv_indptr) - 1)",
                                static_cast<long long>(i),
                                static_cast<long long>(b),
                                static_cast<long long>(batchSize));
    int64_t start = indptr.at(b), end = indptr.at(b + 1);
    if (start < 0 || end > numIndices || start > end)
      return KVRT_CHECKED_ERROR(
          "kv_indptr[%lld] .. kv_indptr[%lld] = %lld .. %lld (token %lld) is "
          "not a range of kv_indices, which has %lld entries",
          static_cast<long long>(b), static_cast<long long>(b + 1),
          static_cast<long long>(start), static_cast<long long>(end),
          static_cast<long long>(i), static_cast<long long>(numIndices));
    int64_t p = positions.at(i);
    if (p < 0 || start + p / plan.blockSize >= end)
      return KVRT_CHECKED_ERROR(
          "positions[%lld] = %lld is out of range: request %lld has %lld pages "
          "of %lld positions",
          static_cast<long long>(i), static_cast<long long>(p),
          static_cast<long long>(b), static_cast<long long>(end - start),
          static_cast<long long>(plan.blockSize));
    int64_t column = start + p / plan.blockSize;
    int64_t page = indices.at(column);
    if (page < 0 || page >= plan.numBlocks)
      return KVRT_CHECKED_ERROR(
          "kv_indices[%lld] = %lld (token %lld, request %lld, position %lld) "
          "is out of range: the cache has num_blocks %lld",
          static_cast<long long>(column), static_cast<long long>(page),
          static_cast<long long>(i), static_cast<long long>(b),
          static_cast<long long>(p), static_cast<long long>(plan.numBlocks));
    int64_t slot = page * plan.blockSize + p % plan.blockSize;
    KVRT_RETURN_IF_ERROR(claimTableSlot(owners, slot, i, b, p));
  }
  return Status();
}

Status checkSlots(const LaunchPlan &plan, const ReadBytes &read) {
  if (!abi::kernelWrites(plan.kind, Param::KeyCache))
    return Status();
  switch (abi::kindTraits(plan.kind).slot) {
  case abi::KindSlot::Mapping:
    return checkSlotMapping(plan, read);
  case abi::KindSlot::BlockTable:
    return checkBlockTable(plan, read);
  case abi::KindSlot::PageTable:
    return checkPageTable(plan, read);
  }
  return Status();
}

} // namespace kvrt::impl
