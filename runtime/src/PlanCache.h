//===- PlanCache.h - validated launches, remembered per thread ------------===//
//
// An eager loop launches the same bundle with the same tensors (the same
// pointers, shapes and strides) call after call; validating them again costs
// as much as the launch. Each thread therefore remembers its last few plans,
// keyed on everything validation reads: the bundle, the kernel kind and name,
// the variant, and every field of every DLTensor of the arguments (data,
// byte_offset, device, ndim, dtype, and the contents of shape and strides).
// Only plans that passed are remembered; a refusal is planned, and refused,
// every time. Checked mode reads the slots' values, which no key covers: it
// runs on the plan, remembered or not, at every launch.
//
// The same arguments are a hit. Arguments that differ from a remembered
// plan's only in their tensors' data and byte_offset (the next input set of
// an eager loop, the next layer's cache: new tensors of the same shapes) are
// a rebase: the plan moves to the new addresses, and every check planning
// makes of an address runs again on them (NULL data, the 2^57 bound,
// element alignment, the written tensors' disjointness). A rebase checks
// disjointness as plain byte ranges, stricter than planning's; anything a
// rebase cannot accept plans anew, so a refusal carries planning's message
// and a rebased plan is one planning would have produced. Any other
// difference, one stride or one dtype, plans anew.
//
// A remembered plan's views keep the DLTensor pointers of the call that
// planned it; after planning they are only compared with each other (the K
// and V views of one stacked cache), never read.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_PLANCACHE_H
#define KVRT_SRC_PLANCACHE_H

#include "Args.h"
#include "Validation.h"

#include <cstdint>
#include <cstring>
#include <string>

namespace kvrt::impl {

/// Everything validation reads from a launch's arguments, as words.
class LaunchKey {
public:
  /// The launch's identity: bundle (its unique id), kind, kernel name.
  LaunchKey(uint64_t bundleId, KernelKind kind, const char *kernel);

  /// Adds one argument tensor (NULL allowed). A tensor whose fields would
  /// make validation refuse it before reading them all (a rank past
  /// kMaxRank, a NULL shape) makes the key unusable: such a launch is
  /// planned, and refused, every time.
  void addTensor(const DLTensor *tensor);
  /// Adds a raw word (the variant, read as its bits). Inline: a launch adds
  /// about 60.
  void addWord(uint64_t word) {
    if (count == kMaxWords) {
      ok = false;
      return;
    }
    words[count++] = word;
  }
  /// Copies `other` (its used words only: a key is 2 KiB at most, a launch's
  /// about 500 bytes).
  void assign(const LaunchKey &other);

  bool usable() const { return ok; }
  /// Every word and every address equal.
  bool operator==(const LaunchKey &other) const;
  /// Equal but for the tensors' data and byte_offset.
  bool sameShapes(const LaunchKey &other) const;

  /// The most tensors a launch's arguments hold.
  static constexpr int kMaxTensors = kMaxArgsTensors;
  /// The argument tensors added, in order (NULL ones included), and the
  /// data and byte_offset of each (0 for NULL).
  int numTensors() const { return tensorCount; }
  const DLTensor *tensor(int i) const { return tensors[i]; }
  uint64_t data(int i) const { return addresses[2 * i]; }
  uint64_t byteOffset(int i) const { return addresses[2 * i + 1]; }

private:
  friend class PlanCache;
  static constexpr int kMaxWords = 256;
  uint64_t bundleId;
  KernelKind kind;
  const char *kernel;
  /// Everything but the addresses.
  uint64_t words[kMaxWords];
  int count = 0;
  /// Per argument tensor, in argument order: data and byte_offset (0, 0 for
  /// NULL), and the DLTensor itself (read only while the call lasts).
  uint64_t addresses[2 * kMaxTensors];
  const DLTensor *tensors[kMaxTensors];
  int tensorCount = 0;
  bool ok = true;
};

/// Adds every tensor of a launch's arguments, and its variant's bits (a C
/// caller may store any int there).
template <typename Args> void addArguments(LaunchKey &key, const Args &args) {
  forEachTensor(
      args, [&](const DLTensor *tensor, abi::Param) { key.addTensor(tensor); });
  if constexpr (HasVariant<Args>::value) {
    int raw = 0;
    std::memcpy(&raw, &args.variant, sizeof(raw));
    key.addWord(static_cast<uint32_t>(raw));
  }
}

/// The calling thread's remembered plans.
class PlanCache {
public:
  /// The plan remembered for `key`, the same arguments or a rebase of them
  /// (above); nullptr if none, and for a rebase whose new addresses fail a
  /// check (the caller plans anew, and refuses with planning's message).
  static const LaunchPlan *find(const LaunchKey &key);
  /// Remembers `plan` for `key` (a usable key), evicting the oldest entry.
  static void remember(const LaunchKey &key, const LaunchPlan &plan);
  /// Forgets every plan of the calling thread (tests).
  static void clear();
  /// The calling thread's hits so far, rebases included (tests).
  static uint64_t hits();
  /// The calling thread's rebases so far (tests).
  static uint64_t rebases();
};

/// A process-wide id, never reused: a bundle created at the address of a
/// destroyed one gets a new id, so a plan of the old one never hits.
uint64_t nextBundleId();

} // namespace kvrt::impl

#endif // KVRT_SRC_PLANCACHE_H
