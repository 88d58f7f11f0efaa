//===- Checked.h - checked mode: the slots of a launch, read on the host --===//
//
// A developer's aid for a cache that looks corrupted (docs/CONTRACT.md,
// "Duplicate slots"): before an append, kvrt copies the slot mapping (or the
// block table and positions of a fused append) to the host and refuses a
// launch with a slot out of range, a slot used twice, or a block id past the
// cache, naming the first offending token. With a fused RoPE prologue it
// also copies rope_positions (an append's; a fused append's positions are
// the slot rule's) and refuses a position outside the cos/sin cache, which
// the kernel would skip without a word. It synchronizes the stream, so it
// is off by default and cannot be captured in a graph.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_CHECKED_H
#define KVRT_SRC_CHECKED_H

#include "Status.h"
#include "Validation.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace kvrt::impl {

/// Copies the `bytes` bytes at `view.first` to `out`: a memcpy on the host,
/// a device-to-host copy on the launch's stream on the GPU.
using ReadBytes =
    std::function<Status(const TensorView &view, void *out, size_t bytes)>;

/// Refuses (INVALID_ARGUMENT) a launch whose slots or RoPE positions break
/// the rules above; OK for kinds that write no cache.
Status checkSlots(const LaunchPlan &plan, const ReadBytes &read);

} // namespace kvrt::impl

#endif // KVRT_SRC_CHECKED_H
