//===- Chip.cpp - which GPU names kvgen accepts, and their PTX ISA -------===//
//
// The chips and their PTX ISA are rows of the chip table (ChipTable.cpp).
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
      if (!supported(p.Key) || !findChip(p.Key))
        continue;
      if (!known->empty())
        *known += ", ";
      *known += p.Key;
    }
  }
  return subtarget && supported(chip) && subtarget->isCPUStringValid(chip) &&
         findChip(chip);
}

unsigned kvgen::ptxVersionFor(llvm::StringRef chip) {
  const ChipInfo *info = findChip(chip);
  if (!info)
    return 0;
  return chip.ends_with("a")   ? info->ptxArch
         : chip.ends_with("f") ? info->ptxFamily
                               : info->ptxPlain;
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
