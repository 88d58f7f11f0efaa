//===- Chip.cpp - which GPU names kvgen accepts
//----------------------------===//
//
// The NVPTX back end's processor list is the authority: a name it does not
// know would be compiled for a default processor with only a warning, and
// the bundle would claim a chip that nothing can load.
//
//===----------------------------------------------------------------------===//

#include "kvgen/Pipeline/Description.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/Regex.h"
#include "llvm/TargetParser/Triple.h"

#include <memory>

extern "C" void LLVMInitializeNVPTXTargetInfo();
extern "C" void LLVMInitializeNVPTXTargetMC();

bool kvgen::isKnownChip(llvm::StringRef chip, std::string *known) {
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
