//===- Chip.cpp - which GPU names kvgen accepts, and their PTX ISA -------===//
//
// The NVPTX back end's processor list is the authority: a name it does not
// know would be compiled for a default processor with only a warning, and
// the bundle would claim a chip that nothing can load.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/Description.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/Regex.h"
#include "llvm/TargetParser/Triple.h"

#include <memory>
#include <optional>
#include <string>

extern "C" void LLVMInitializeNVPTXTargetInfo();
extern "C" void LLVMInitializeNVPTXTargetMC();

/// The NVPTX back end's subtarget table (processors and features), or null
/// where the back end is missing.
static const llvm::MCSubtargetInfo *nvptxSubtarget() {
  static const std::unique_ptr<llvm::MCSubtargetInfo> subtarget = [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTargetMC();
    llvm::Triple triple("nvptx64-nvidia-cuda");
    std::string error;
    const llvm::Target *target =
        llvm::TargetRegistry::lookupTarget(triple, error);
    return std::unique_ptr<llvm::MCSubtargetInfo>(
        target ? target->createMCSubtargetInfo(triple, "", "") : nullptr);
  }();
  return subtarget.get();
}

bool kvgen::isKnownChip(llvm::StringRef chip, std::string *known) {
  const llvm::MCSubtargetInfo *subtarget = nvptxSubtarget();
  // Only the sm_XX[a|f] spellings (LLVM also knows names such as
  // "generic"), from Turing on: CUDA 13's ptxas no longer assembles for the
  // older chips that LLVM still lists.
  static const llvm::Regex form("^sm_[0-9]+[af]?$");
  constexpr unsigned kOldestChip = 75;
  auto supported = [&](llvm::StringRef name) {
    unsigned number = 0;
    return form.match(name) &&
           !name.drop_front(3)
                .take_while(llvm::isDigit)
                .getAsInteger(10, number) &&
           number >= kOldestChip;
  };
  if (known && subtarget) {
    known->clear();
    for (const llvm::SubtargetSubTypeKV &p :
         subtarget->getAllProcessorDescriptions()) {
      if (!supported(p.Key))
        continue;
      if (!known->empty())
        *known += ", ";
      *known += p.Key;
    }
  }
  return subtarget && supported(chip) && subtarget->isCPUStringValid(chip);
}

namespace {
/// The PTX ISA versions (major * 10 + minor) of one chip number: plain, with
/// the `a` (architecture-specific) and the `f` (family) suffix.
struct ChipISA {
  unsigned number, plain, arch, family;
};
} // namespace

// The lowest PTX ISA that knows each chip, from the PTX ISA manual ("Release
// Notes" and ".target") for CUDA 13.0; the NVPTX back end's processor table
// (NVPTX.td) gives the same numbers and refuses older PTX ("PTX version 8.0
// does not support target 'sm_100'"). The lowest, so that the oldest driver
// that runs the chip loads the PTX. Raised where the back end selects an
// instruction of kvgen's kernels only from a later ISA on that chip:
//  - sm_80: 7.1, for cvt.f32.bf16 (7.0 widens bf16 with shifts);
//  - sm_89: 8.1, for cvt to e4m3x2/e5m2x2 of the fp8 caches (from 7.8 on
//    sm_90, from 8.1 on sm_89: the back end's hasFP8ConversionSupport);
//  - sm_90: 8.0, for packed 16-bit min/max (max.u16x2), and the ISA kvgen's
//    sm_90 kernels were measured with.
// (From 8.8 the back end also has a three-input max.f32 on sm_100 and later;
// kvgen keeps their first ISA, which the first drivers for them load.)
static constexpr ChipISA kChipISA[] = {
    {75, 63, 0, 0},    {80, 71, 0, 0},    {86, 71, 0, 0},    {87, 74, 0, 0},
    {88, 90, 0, 0},    {89, 81, 0, 0},    {90, 80, 80, 0},   {100, 86, 86, 88},
    {101, 86, 86, 88}, {103, 88, 88, 88}, {110, 90, 90, 90}, {120, 87, 87, 88},
    {121, 88, 88, 88},
};

unsigned kvgen::chipNumber(llvm::StringRef chip) {
  unsigned number = 0;
  if (!chip.consume_front("sm_") ||
      chip.take_while(llvm::isDigit).getAsInteger(10, number))
    return 0;
  return number;
}

unsigned kvgen::ptxVersionFor(llvm::StringRef chip) {
  unsigned number = chipNumber(chip);
  for (const ChipISA &c : kChipISA)
    if (c.number == number) {
      unsigned version = chip.ends_with("a")   ? c.arch
                         : chip.ends_with("f") ? c.family
                                               : c.plain;
      return version;
    }
  return 0;
}

std::string kvgen::ptxFeaturesFor(llvm::StringRef chip) {
  unsigned version = ptxVersionFor(chip);
  return version ? "+ptx" + std::to_string(version) : std::string();
}

std::optional<std::string> kvgen::checkPTXFeatures(llvm::StringRef chip,
                                                   llvm::StringRef features) {
  unsigned needed = ptxVersionFor(chip);
  auto spell = [](unsigned v) {
    return std::to_string(v / 10) + "." + std::to_string(v % 10) + " (+ptx" +
           std::to_string(v) + ")";
  };
  llvm::StringRef digits = features;
  unsigned version = 0;
  bool known = false;
  if (digits.consume_front("+ptx") && !digits.getAsInteger(10, version))
    if (const llvm::MCSubtargetInfo *subtarget = nvptxSubtarget())
      known =
          llvm::any_of(subtarget->getAllProcessorFeatures(),
                       [&](const llvm::SubtargetFeatureKV &f) {
                         return llvm::StringRef(f.Key) == features.drop_front();
                       });
  if (!known)
    return "expected one PTX ISA version as +ptxNN (e.g. " +
           spell(needed ? needed : 80) + "); kvgen takes no other PTX feature";
  if (version < needed)
    return (chip + " needs PTX ISA " + spell(needed) + " or later").str();
  return std::nullopt;
}
