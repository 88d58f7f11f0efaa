//===- ChipTable.cpp - what kvgen knows of each GPU -----------------------===//

#include "kvgen/Plan/ChipTable.h"

#include "llvm/ADT/StringExtras.h"

using namespace kvgen;

// The plan's thresholds as measured on an H100 (sm_90) with the bench's
// shapes (8 KV heads x 128, bf16 and fp8/int8 caches, block 16;
// docs/dev/TUNING.md). KernelPlan.cpp says what each one decides and what
// the measurement showed.
static constexpr PlanThresholds kSM90Plan = {
    /*minThreadsPerBlock=*/128,
    /*wholeWarpsMaxThreads=*/512,
    /*threadsPerSM=*/2048,
    /*fusedFP8WideThreadsPerSM=*/1280,
    /*wideMinTokensFourChunks=*/2048,
    /*wideMinTokensTwoChunks=*/4096,
    /*wideMinTokensQuantized=*/16384,
    /*wideMinTokensDivision=*/2048,
    /*wideMinTokensDivisionPerToken=*/16384,
    /*wideMaxTokensTwoChunks=*/16384,
};

// The PTX ISA: the lowest that knows each chip, from the PTX ISA manual
// ("Release Notes" and ".target") for CUDA 13.0; the NVPTX back end's
// processor table (NVPTX.td) gives the same numbers and refuses older PTX
// ("PTX version 8.0 does not support target 'sm_100'"). The lowest, so that
// the oldest driver that runs the chip loads the PTX. Raised where the back
// end selects an instruction of kvgen's kernels only from a later ISA on
// that chip:
//  - sm_80: 7.1, for cvt.f32.bf16 (7.0 widens bf16 with shifts);
//  - sm_89: 8.1, for cvt to e4m3x2/e5m2x2 of the fp8 caches (from 7.8 on
//    sm_90, from 8.1 on sm_89: the back end's hasFP8ConversionSupport);
//  - sm_90: 8.0, for packed 16-bit min/max (max.u16x2), and the ISA kvgen's
//    sm_90 kernels were measured with.
// (From 8.8 the back end also has a three-input max.f32 on sm_100 and later;
// kvgen keeps their first ISA, which the first drivers for them load.)
//
// The plan's thresholds: only sm_90's are measured. The other chips take
// them until they are measured there; where a chip holds fewer threads an
// SM than sm_90 (sm_75, sm_86, sm_89, sm_120), ptxas cannot meet the
// occupancy bound they give and only the register limit it implies holds.
using S = ThresholdSource;
static constexpr ChipInfo kChips[] = {
    {75, 63, 0, 0, kSM90Plan, S::AssumedSameAsSM90},
    {80, 71, 0, 0, kSM90Plan, S::AssumedSameAsSM90},
    {86, 71, 0, 0, kSM90Plan, S::AssumedSameAsSM90},
    {87, 74, 0, 0, kSM90Plan, S::AssumedSameAsSM90},
    {88, 90, 0, 0, kSM90Plan, S::AssumedSameAsSM90},
    {89, 81, 0, 0, kSM90Plan, S::AssumedSameAsSM90},
    {90, 80, 80, 0, kSM90Plan, S::Measured},
    {100, 86, 86, 88, kSM90Plan, S::AssumedSameAsSM90},
    {101, 86, 86, 88, kSM90Plan, S::AssumedSameAsSM90},
    {103, 88, 88, 88, kSM90Plan, S::AssumedSameAsSM90},
    {110, 90, 90, 90, kSM90Plan, S::AssumedSameAsSM90},
    {120, 87, 87, 88, kSM90Plan, S::AssumedSameAsSM90},
    {121, 88, 88, 88, kSM90Plan, S::AssumedSameAsSM90},
};

const ChipInfo *kvgen::findChip(unsigned number) {
  for (const ChipInfo &chip : kChips)
    if (chip.number == number)
      return &chip;
  return nullptr;
}

unsigned kvgen::chipNumber(llvm::StringRef chip) {
  unsigned number = 0;
  if (!chip.consume_front("sm_") ||
      chip.take_while(llvm::isDigit).getAsInteger(10, number))
    return 0;
  return number;
}

const ChipInfo *kvgen::findChip(llvm::StringRef chip) {
  llvm::StringRef rest = chip;
  if (!rest.consume_front("sm_"))
    return nullptr;
  llvm::StringRef digits = rest.take_while(llvm::isDigit);
  llvm::StringRef suffix = rest.drop_front(digits.size());
  if (!suffix.empty() && suffix != "a" && suffix != "f")
    return nullptr;
  return findChip(chipNumber(chip));
}
