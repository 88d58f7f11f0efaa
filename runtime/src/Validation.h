//===- Validation.h - check every tensor before a launch ------------------===//
//
// A launch is planned before anything runs: every DLTensor is checked against
// the kernel's description (docs/KERNEL-ABI.md, "Tensors kvrt accepts") and
// turned into a TensorView (shape, strides in elements, first element, extent)
// from which Packing.h builds the parameters, in the order of the ABI's
// parameter lists (include/kvgen/ABI/Params.def). One planner serves every
// kernel kind, driven by Params.def. A refusal names the tensor and the rule.
// Planning touches no driver and allocates nothing unless it refuses.
//
//===----------------------------------------------------------------------===//

#ifndef KVRT_SRC_VALIDATION_H
#define KVRT_SRC_VALIDATION_H

#include "Manifest.h"
#include "Status.h"
#include "TensorCheck.h"

#include "kvrt/kvrt.h"

#include <iterator>

namespace kvrt::impl {

/// Whether `when` is a part of a fused prologue (its parameters are taken
/// only by a description with that part).
constexpr bool isPrologue(abi::ParamWhen when) {
  return when == abi::ParamWhen::PrologueNorm ||
         when == abi::ParamWhen::PrologueQNorm ||
         when == abi::ParamWhen::PrologueRope ||
         when == abi::ParamWhen::PrologueQ ||
         when == abi::ParamWhen::PrologueQQuant;
}

/// The most buffers (or scalars) any kernel takes, a fused prologue's
/// included: abi::maxBuffers() and abi::maxScalars() count descriptions
/// without one, and a prologue only adds parameters, so every part of one
/// bounds them.
constexpr int maxParamsWithPrologue(bool buffers) {
  int most = 0;
  for (int k = 0; k < static_cast<int>(std::size(abi::kKindNames)); ++k)
    for (Quantization q :
         {Quantization::None, Quantization::Static, Quantization::Dynamic}) {
      int count = 0;
      for (const abi::KernelParam &p : abi::kKernelParams)
        if (p.kind == static_cast<KernelKind>(k) &&
            abi::isPresent(p.when, q, false, {true, true, true, true}) &&
            (abi::paramInfo(p.id).role == abi::ParamRole::Buffer) == buffers)
          ++count;
      most = count > most ? count : most;
    }
  return most;
}
constexpr int kMaxBuffers = maxParamsWithPrologue(/*buffers=*/true);
constexpr int kMaxScalars = maxParamsWithPrologue(/*buffers=*/false);
/// A buffer is one pointer parameter.
constexpr int kMaxParams = kMaxBuffers + kMaxScalars;
static_assert(kMaxParams >= static_cast<int>(abi::maxParams()),
              "a launch's arrays hold every parameter of every kind");
constexpr int kNumParamIds =
    static_cast<int>(sizeof(abi::kParams) / sizeof(abi::kParams[0]));

/// The spec of each buffer of a description's launches, by abi::Param: the
/// rows, caches and scales (specs of their granularity) as the description
/// fixes them, the index tensors as the ABI does. A spec the description
/// does not use is left empty.
struct OperationSpecs {
  TensorSpec byParam[kNumParamIds];

  TensorSpec &operator[](abi::Param param) {
    return byParam[static_cast<int>(param)];
  }
  const TensorSpec &operator[](abi::Param param) const {
    return byParam[static_cast<int>(param)];
  }
};

OperationSpecs makeSpecs(const KernelDescription &kernel);

/// KVGEN_ABI_EXTENT: dimension `dim` of `buffer` is the count `count` plus
/// `bias`.
struct ExtentRule {
  abi::Param buffer;
  int dim;
  abi::Param count;
  int bias;
};
inline constexpr ExtentRule kExtents[] = {
#define KVGEN_ABI_EXTENT(Id, Dim, Count, Bias)                                 \
  {abi::Param::Id, Dim, abi::Param::Count, Bias},
#include "kvgen/ABI/Params.def"
};

/// The name of a count in messages: "num_reqs + 1" for a bias of 1.
std::string countName(abi::Param count, int bias);

/// A launch that passed every check: the buffers in ABI order, the i32
/// scalars in ABI order, and the tensors the vector promise covers.
struct LaunchPlan {
  KernelKind kind = KernelKind::Append;
  const Operation *operation = nullptr;
  DLDevice device = {kDLCPU, 0};
  int64_t numTokens = 0;
  /// The cache's slots, which checked mode reads: num_blocks * block_size.
  int64_t numBlocks = 0;
  int64_t blockSize = 0;
  TensorView buffers[kMaxBuffers];
  /// The parameter each buffer is passed as, and the buffer of each
  /// parameter (-1 where the kind has none).
  abi::Param bufferParams[kMaxBuffers];
  int numBuffers = 0;
  int bufferOf[kNumParamIds];

  const TensorView &buffer(abi::Param param) const {
    return buffers[bufferOf[static_cast<int>(param)]];
  }
  int32_t scalars[kMaxScalars];
  int numScalars = 0;
  /// Indices into `buffers` of the tensors the vector variant reads or
  /// writes 16 bytes at a time.
  int promised[kMaxBuffers];
  int numPromised = 0;
};

/// The description (cache, dtypes) shared by the variants of `operation`.
const KernelDescription &describingKernel(const Manifest &manifest,
                                          const Operation &operation);

/// Plans a launch of `operation` from the caller's tensors by parameter
/// (NULL where not given): checks each buffer of the kind (Params.def's
/// KVGEN_ABI_KERNEL_PARAM) against its spec, then that they share one device
/// and their extents agree (KVGEN_ABI_EXTENT), the scales the description
/// takes, and that what the kind writes (KVGEN_ABI_KERNEL_WRITES) aliases
/// nothing else; reads the scalars off the buffers (KVGEN_ABI_EXTENT,
/// KVGEN_ABI_STRIDE) and packs them (Packing.h).
Status planLaunch(const Manifest &manifest, const Operation &operation,
                  const OperationSpecs &specs,
                  const DLTensor *const given[kNumParamIds], LaunchPlan *plan);

} // namespace kvrt::impl

#endif // KVRT_SRC_VALIDATION_H
