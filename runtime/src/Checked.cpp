//===- Checked.cpp - checked mode: the slots of a launch, read on the host ===//

#include "Checked.h"

#include <cstdlib>
#include <cstring>
#include <unordered_map>

namespace kvrt::impl {

bool checkedFromEnvironment() {
  const char *value = std::getenv("KVRT_CHECKED");
  return value && std::strcmp(value, "1") == 0;
}

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

static Status checkSlotMapping(const LaunchPlan &plan, const ReadBytes &read) {
  HostIndex slots;
  KVRT_RETURN_IF_ERROR(slots.read(plan.buffers[plan.slotMapping], read));
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
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "slot_mapping[%lld] = %lld is out of range: the cache "
                        "has %lld slots (num_blocks %lld * block_size %lld) "
                        "(checked mode)",
                        static_cast<long long>(t), static_cast<long long>(slot),
                        static_cast<long long>(capacity),
                        static_cast<long long>(plan.numBlocks),
                        static_cast<long long>(plan.blockSize));
    int64_t earlier = owners.claim(slot, t);
    if (earlier >= 0)
      return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                        "slot_mapping[%lld] = %lld is also used by token %lld; "
                        "two tokens of one launch must not share a slot "
                        "(checked mode)",
                        static_cast<long long>(t), static_cast<long long>(slot),
                        static_cast<long long>(earlier));
  }
  return Status();
}

/// The fused append's slots, computed as the kernel does
/// (docs/KERNEL-ABI.md, "slot_mapping").
static Status checkBlockTable(const LaunchPlan &plan, const ReadBytes &read) {
  const TensorView &tableView = plan.buffers[plan.blockTable];
  HostIndex table, starts, lens;
  KVRT_RETURN_IF_ERROR(table.read(tableView, read));
  KVRT_RETURN_IF_ERROR(starts.read(plan.buffers[plan.queryStartLoc], read));
  KVRT_RETURN_IF_ERROR(lens.read(plan.buffers[plan.contextLens], read));
  int64_t numReqs = tableView.shape[0];
  int64_t maxBlocks = tableView.shape[1];
  SlotOwners owners(plan.numTokens);
  for (int64_t r = 0; r < numReqs; ++r) {
    int64_t begin = std::max<int64_t>(starts.at(r), 0);
    int64_t end = std::min<int64_t>(starts.at(r + 1), plan.numTokens);
    for (int64_t t = begin; t < end; ++t) {
      int64_t position = lens.at(r) + t - starts.at(r);
      if (position < 0 || position / plan.blockSize >= maxBlocks)
        continue;
      int64_t column = position / plan.blockSize;
      int64_t block = table.at(r, column);
      if (block < 0)
        continue;
      if (block >= plan.numBlocks)
        return KVRT_ERROR(
            KVRT_ERROR_INVALID_ARGUMENT,
            "block_table[%lld][%lld] = %lld (token %lld) is past "
            "the cache's num_blocks (%lld) (checked mode)",
            static_cast<long long>(r), static_cast<long long>(column),
            static_cast<long long>(block), static_cast<long long>(t),
            static_cast<long long>(plan.numBlocks));
      int64_t slot = block * plan.blockSize + position % plan.blockSize;
      int64_t earlier = owners.claim(slot, t);
      if (earlier >= 0)
        return KVRT_ERROR(KVRT_ERROR_INVALID_ARGUMENT,
                          "token %lld (request %lld, position %lld) writes "
                          "slot %lld, also used by token %lld; two tokens of "
                          "one launch must not share a slot (checked mode)",
                          static_cast<long long>(t), static_cast<long long>(r),
                          static_cast<long long>(position),
                          static_cast<long long>(slot),
                          static_cast<long long>(earlier));
    }
  }
  return Status();
}

Status checkSlots(const LaunchPlan &plan, const ReadBytes &read) {
  if (plan.slotMapping >= 0)
    return checkSlotMapping(plan, read);
  if (plan.blockTable >= 0)
    return checkBlockTable(plan, read);
  return Status();
}

} // namespace kvrt::impl
