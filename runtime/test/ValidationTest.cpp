//===- ValidationTest.cpp - one test per rule a launch can break ----------===//
//
// Each test starts from a valid host launch, breaks one rule, and checks the
// refusal code, that the message names the tensor and the rule, and that no
// kernel ran.
//
//===----------------------------------------------------------------------===//

#include "Fixtures.h"

#include <climits>

using namespace kvrt::test;

namespace {

TEST_F(LaunchTest, ValidLaunchesRun) {
  ASSERT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  ASSERT_EQ(slotMapping(), KVRT_SUCCESS) << kvrt_last_error();
  ASSERT_EQ(fused(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(calls(), 3);
}

//===----------------------------------------------------------------------===//
// Arguments and kernel lookup
//===----------------------------------------------------------------------===//

TEST_F(LaunchTest, NullBundleOrArgs) {
  kvrt_append_args args = appendArgs();
  expectRefused(kvrt_append(nullptr, &args, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT, {"bundle: is NULL"});
  expectRefused(kvrt_append(bundle.get(), nullptr, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT, {"args: is NULL"});
}

TEST_F(LaunchTest, StructSizeTooSmall) {
  // A caller that left struct_size unset (0), or one of a struct that lost
  // a field: refused by the struct's name before any field is read.
  kvrt_append_args args = appendArgs();
  args.struct_size = 0;
  expectRefused(kvrt_append(bundle.get(), &args, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT,
                {"args: struct_size is 0, smaller than any kvrt_append_args",
                 "KVRT_ARGS_INIT"});
  args.struct_size = KVRT_APPEND_ARGS_STRUCT_SIZE - 1;
  expectRefused(kvrt_append(bundle.get(), &args, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT, {"kvrt_append_args"});
  kvrt_slot_mapping_args slots = slotArgs();
  slots.struct_size = sizeof(void *);
  expectRefused(kvrt_build_slot_mapping(bundle.get(), &slots, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT,
                {"smaller than any kvrt_slot_mapping_args"});
  EXPECT_EQ(calls(), 0);
}

TEST_F(LaunchTest, StructSizeOfANewerCaller) {
  // A caller compiled against a later header passes a longer struct: kvrt
  // reads the fields it knows and ignores the rest.
  struct Longer {
    kvrt_append_args args;
    const DLTensor *laterField;
  } longer = {appendArgs(), nullptr};
  longer.args.struct_size = sizeof(Longer);
  longer.laterField = reinterpret_cast<const DLTensor *>(&longer);
  EXPECT_EQ(kvrt_append(bundle.get(), &longer.args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  kvrt_append_args init = KVRT_ARGS_INIT(kvrt_append_args);
  EXPECT_EQ(init.struct_size, sizeof(kvrt_append_args));
  EXPECT_EQ(init.key, nullptr);
  // The fused prologue's tensors came after the first version.
  EXPECT_EQ(KVRT_STRUCT_SIZE(kvrt_append_args, q_scale),
            sizeof(kvrt_append_args));
  EXPECT_LT(KVRT_APPEND_ARGS_STRUCT_SIZE, sizeof(kvrt_append_args));
  EXPECT_EQ(calls(), 1);
}

TEST_F(LaunchTest, VariantOutOfRange) {
  // As a C caller can store it: an enum value outside kvrt_variant.
  kvrt_append_args args = appendArgs();
  int seven = 7;
  std::memcpy(&args.variant, &seven, sizeof(seven));
  expectRefused(kvrt_append(bundle.get(), &args, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT,
                {"variant: 7 is not a kvrt_variant"});
}

TEST_F(LaunchTest, UnknownKernel) {
  kvrt_append_args args = appendArgs();
  args.kernel = "kv_nope";
  expectRefused(kvrt_append(bundle.get(), &args, nullptr), KVRT_ERROR_NOT_FOUND,
                {"kernel: the bundle has no kernel 'kv_nope'"});
}

TEST_F(LaunchTest, KernelOfAnotherKind) {
  kvrt_append_args args = appendArgs();
  args.kernel = "kv_fused";
  expectRefused(kvrt_append(bundle.get(), &args, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT,
                {"kernel: 'kv_fused' is a fused_append kernel, not append"});
}

TEST_F(LaunchTest, ScalarVariantNamedDirectly) {
  kvrt_append_args args = appendArgs();
  args.kernel = "kv_append_scalar";
  expectRefused(kvrt_append(bundle.get(), &args, nullptr), KVRT_ERROR_NOT_FOUND,
                {"'kv_append_scalar' is the scalar variant of 'kv_append'",
                 "KVRT_VARIANT_SCALAR"});
}

TEST_F(LaunchTest, NamedKernelRuns) {
  kvrt_append_args args = appendArgs();
  args.kernel = "kv_append";
  EXPECT_EQ(kvrt_append(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
}

TEST_F(LaunchTest, NullKernelWithTwoDescriptions) {
  std::vector<json> kernels = describe("kv_a", "append");
  for (json &kernel : describe("kv_b", "append"))
    kernels.push_back(kernel);
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(bundleJson(kernels), &raw), KVRT_SUCCESS);
  bundle.reset(raw);
  registerRecorders(raw);
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"kernel: is NULL but the bundle has 2 append descriptions "
                 "('kv_a', 'kv_b'); name one"});
}

TEST_F(LaunchTest, NoKernelOfThatKind) {
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(bundleJson(describe("kv_append", "append")), &raw),
            KVRT_SUCCESS);
  bundle.reset(raw);
  expectRefused(slotMapping(), KVRT_ERROR_NOT_FOUND,
                {"kernel: the bundle has no slot_mapping kernel"});
}

TEST_F(LaunchTest, SetHostKernelUnknownName) {
  EXPECT_EQ(
      kvrt_bundle_set_host_kernel(bundle.get(), "kv_nope", [](void **) {}),
      KVRT_ERROR_NOT_FOUND);
  EXPECT_THAT(kvrt_last_error(),
              ::testing::HasSubstr("the bundle has no kernel 'kv_nope'"));
  EXPECT_EQ(kvrt_bundle_set_host_kernel(nullptr, "kv_append", nullptr),
            KVRT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(kvrt_bundle_set_host_kernel(bundle.get(), nullptr, nullptr),
            KVRT_ERROR_INVALID_ARGUMENT);
}

TEST_F(LaunchTest, NoHostKernelRegistered) {
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(standardBundle(), &raw), KVRT_SUCCESS);
  bundle.reset(raw);
  expectRefused(append(), KVRT_ERROR_NOT_FOUND,
                {"key: on cpu:0, but no host kernel is registered for "
                 "'kv_append_scalar'",
                 "kvrt_bundle_set_host_kernel"});
  expectRefused(slotMapping(), KVRT_ERROR_NOT_FOUND,
                {"no host kernel is registered for 'kv_slots'"});
}

TEST_F(LaunchTest, UnregisteringAHostKernel) {
  ASSERT_EQ(kvrt_bundle_set_host_kernel(bundle.get(), "kv_slots", nullptr),
            KVRT_SUCCESS);
  expectRefused(slotMapping(), KVRT_ERROR_NOT_FOUND,
                {"no host kernel is registered for 'kv_slots'"});
}

TEST_F(LaunchTest, ZeroTokensLaunchesNothing) {
  for (HostTensor *tensor : {&key, &value, &slots})
    tensor->shapeRef()[0] = 0;
  EXPECT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(slotMapping(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(fused(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(calls(), 0);
}

TEST_F(LaunchTest, ZeroTokensStillValidates) {
  for (HostTensor *tensor : {&key, &value, &slots})
    tensor->shapeRef()[0] = 0;
  key.get()->dtype = f16();
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT, {"key: dtype is f16"});
}

TEST_F(LaunchTest, HostOnlyBundleRefusesGpuTensors) {
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(load(standardBundle(CacheConfig(), /*withPtx=*/false), &raw),
            KVRT_SUCCESS);
  bundle.reset(raw);
  moveAllTo({kDLCUDA, 0});
  // Refused before the driver is touched: the same answer with or without a
  // GPU.
  expectRefused(append(), KVRT_ERROR_NOT_FOUND,
                {"key: on cuda:0 but the bundle is host-only"});
}

//===----------------------------------------------------------------------===//
// Presence and device
//===----------------------------------------------------------------------===//

TEST_F(LaunchTest, RequiredTensorIsNull) {
  using Field = const DLTensor *kvrt_append_args::*;
  const std::pair<Field, const char *> fields[] = {
      {&kvrt_append_args::key, "key"},
      {&kvrt_append_args::value, "value"},
      {&kvrt_append_args::slot_mapping, "slot_mapping"},
      {&kvrt_append_args::key_cache, "key_cache"},
      {&kvrt_append_args::value_cache, "value_cache"}};
  for (const auto &[field, name] : fields) {
    kvrt_append_args args = appendArgs();
    args.*field = nullptr;
    expectRefused(kvrt_append(bundle.get(), &args, nullptr),
                  KVRT_ERROR_INVALID_ARGUMENT,
                  {std::string(name) + ": tensor is NULL (required)"});
  }
}

TEST_F(LaunchTest, IndexTensorIsNull) {
  kvrt_slot_mapping_args args = slotArgs();
  args.context_lens = nullptr;
  expectRefused(kvrt_build_slot_mapping(bundle.get(), &args, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT,
                {"context_lens: tensor is NULL (required)"});
  kvrt_fused_append_args fusedArguments = fusedArgs();
  fusedArguments.block_table = nullptr;
  expectRefused(kvrt_fused_append(bundle.get(), &fusedArguments, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT,
                {"block_table: tensor is NULL (required)"});
}

TEST_F(LaunchTest, UnsupportedDeviceType) {
  key.get()->device = {kDLOpenCL, 0};
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key: device", "is not supported", "kDLCUDA", "kDLCPU"});
}

TEST_F(LaunchTest, ManagedMemoryIsNotKDLCUDA) {
  slots.get()->device = {kDLCUDAManaged, 0};
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"slot_mapping: device cuda_managed:0 is not supported"});
}

TEST_F(LaunchTest, NegativeDeviceId) {
  value.get()->device = {kDLCPU, -1};
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value: device_id is -1"});
}

TEST_F(LaunchTest, MixedHostAndGpu) {
  value.get()->device = {kDLCUDA, 0};
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value: on cuda:0 but key is on cpu:0",
                 "all tensors of a launch must be on one device"});
}

TEST_F(LaunchTest, TwoGpus) {
  moveAllTo({kDLCUDA, 0});
  valueCache.get()->device = {kDLCUDA, 1};
  // Refused by validation, before any driver is needed.
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_cache: on cuda:1 but key_cache is on cuda:0"});
}

TEST_F(LaunchTest, InputsOnAnotherGpuThanTheCaches) {
  moveAllTo({kDLCUDA, 0});
  for (HostTensor *tensor : {&key, &value, &slots})
    tensor->get()->device = {kDLCUDA, 1};
  // Refused by validation, naming both tensors, before any driver is needed.
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: on cuda:0 but key is on cuda:1",
                 "all tensors of a launch must be on one device"});
  value.get()->device = {kDLCUDA, 0};
  slots.get()->device = {kDLCUDA, 0};
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value: on cuda:0 but key is on cuda:1"});
  expectRefused(fused(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value: on cuda:0 but key is on cuda:1"});
}

TEST_F(LaunchTest, CacheOnAnotherDeviceThanInputs) {
  keyCache.get()->device = {kDLCPU, 1};
  valueCache.get()->device = {kDLCPU, 1};
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: on cpu:1 but key is on cpu:0"});
}

TEST_F(LaunchTest, RequestTensorsOnAnotherDevice) {
  contextLens.get()->device = {kDLCUDA, 0};
  expectRefused(slotMapping(), KVRT_ERROR_INVALID_ARGUMENT,
                {"context_lens: on cuda:0 but block_table is on cpu:0"});
  contextLens.get()->device = {kDLCPU, 0};
  slots.get()->device = {kDLCUDA, 0};
  expectRefused(slotMapping(), KVRT_ERROR_INVALID_ARGUMENT,
                {"slot_mapping: on cuda:0 but block_table is on cpu:0"});
}

//===----------------------------------------------------------------------===//
// Dtype
//===----------------------------------------------------------------------===//

TEST_F(LaunchTest, SourceDtype) {
  key.get()->dtype = f16();
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key: dtype is f16 but the kernel 'kv_append' was generated "
                 "for bf16"});
}

TEST_F(LaunchTest, CacheDtype) {
  valueCache.get()->dtype = f32();
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_cache: dtype is f32 but the kernel 'kv_append' was "
                 "generated for bf16"});
}

TEST_F(LaunchTest, Lanes) {
  key.get()->dtype = {kDLBfloat, 16, 2};
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key: dtype bf16 x 2 lanes has 2 lanes", "lanes == 1"});
}

TEST_F(LaunchTest, SlotMappingDtype) {
  slots.get()->dtype = i32();
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"slot_mapping: dtype is i32 but must be i64"});
}

TEST_F(LaunchTest, BlockTableDtype) {
  blockTable.get()->dtype = i64();
  expectRefused(slotMapping(), KVRT_ERROR_INVALID_ARGUMENT,
                {"block_table: dtype is i64 but must be i32"});
}

TEST_F(LaunchTest, QueryStartLocDtype) {
  queryStartLoc.get()->dtype = {kDLUInt, 32, 1};
  expectRefused(fused(), KVRT_ERROR_INVALID_ARGUMENT,
                {"query_start_loc: dtype is u32 but must be i32"});
}

TEST_F(LaunchTest, ContextLensDtype) {
  contextLens.get()->dtype = i64();
  expectRefused(slotMapping(), KVRT_ERROR_INVALID_ARGUMENT,
                {"context_lens: dtype is i64 but must be i32"});
}

//===----------------------------------------------------------------------===//
// Rank and shape
//===----------------------------------------------------------------------===//

TEST_F(LaunchTest, InputRank) {
  key.get()->ndim = 2;
  expectRefused(
      append(), KVRT_ERROR_INVALID_ARGUMENT,
      {"key: rank is 2 but must be 3", "[num_tokens, num_kv_heads, head_dim]"});
}

TEST_F(LaunchTest, CacheRank) {
  keyCache.get()->ndim = 3;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: rank is 3 but must be 4",
                 "[num_blocks, block_size, num_kv_heads, head_dim] "
                 "(paged_nhd)"});
}

TEST_F(LaunchTest, BlockTableRank) {
  blockTable.get()->ndim = 1;
  expectRefused(fused(), KVRT_ERROR_INVALID_ARGUMENT,
                {"block_table: rank is 1 but must be 2"});
}

TEST_F(LaunchTest, ShapeIsNull) {
  value.get()->shape = nullptr;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value: shape is NULL"});
}

TEST_F(LaunchTest, NegativeExtent) {
  slots.shapeRef()[0] = -5;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"slot_mapping: shape[0] (num_tokens) is negative"});
}

TEST_F(LaunchTest, NumKvHeads) {
  key.shapeRef()[1] = 3;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key: shape[1] (num_kv_heads) is 3 but the kernel "
                 "'kv_append' was generated for 2"});
}

TEST_F(LaunchTest, HeadDim) {
  value.shapeRef()[2] = 8;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value: shape[2] (head_dim) is 8 but the kernel 'kv_append' "
                 "was generated for 16"});
}

TEST_F(LaunchTest, CacheBlockSize) {
  keyCache.shapeRef()[1] = 8;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: shape[1] (block_size) is 8 but the kernel "
                 "'kv_append' was generated for 4"});
}

TEST_F(LaunchTest, CacheHeadsAndDim) {
  valueCache.shapeRef()[2] = 1;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_cache: shape[2] (num_kv_heads) is 1"});
  valueCache.shapeRef()[2] = kHeads;
  valueCache.shapeRef()[3] = 32;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_cache: shape[3] (head_dim) is 32"});
}

TEST_F(LaunchTest, NumTokensValue) {
  value.shapeRef()[0] = 4;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value: shape[0] (num_tokens) is 4 but key has 5"});
}

TEST_F(LaunchTest, NumTokensSlotMapping) {
  slots.shapeRef()[0] = 6;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"slot_mapping: shape[0] (num_tokens) is 6 but key has 5"});
}

TEST_F(LaunchTest, NumBlocks) {
  valueCache.shapeRef()[0] = 2;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_cache: shape[0] (num_blocks) is 2 but key_cache has "
                 "3"});
}

TEST_F(LaunchTest, QueryStartLocLength) {
  queryStartLoc.shapeRef()[0] = kRequests;
  expectRefused(slotMapping(), KVRT_ERROR_INVALID_ARGUMENT,
                {"query_start_loc: shape[0] (num_reqs + 1) is 2 but must be 3 "
                 "(block_table has 2 rows, plus 1)"});
}

TEST_F(LaunchTest, ContextLensLength) {
  contextLens.shapeRef()[0] = 3;
  expectRefused(fused(), KVRT_ERROR_INVALID_ARGUMENT,
                {"context_lens: shape[0] (num_reqs) is 3 but block_table has "
                 "2"});
}

TEST_F(LaunchTest, FusedNumTokens) {
  value.shapeRef()[0] = 1;
  expectRefused(fused(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value: shape[0] (num_tokens) is 1 but key has 5"});
}

//===----------------------------------------------------------------------===//
// Strides
//===----------------------------------------------------------------------===//

TEST_F(LaunchTest, NegativeStride) {
  key.stridesRef()[0] = -kQkvRow;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key: stride[0] (num_tokens) is -128",
                 "negative strides are not supported"});
}

TEST_F(LaunchTest, CacheInnermostStride) {
  keyCache =
      HostTensor::strided(bf16(), {kBlocks, kBlockSize, kHeads, kHeadDim},
                          {2 * kBlockSize * kHeads * kHeadDim,
                           2 * kHeads * kHeadDim, 2 * kHeadDim, 2});
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: stride[3] (head_dim) is 2 but the innermost "
                 "dimension of a cache must have stride 1"});
}

TEST_F(LaunchTest, CacheOverlapsItself) {
  // pos and head share a stride: two slots would write the same bytes.
  valueCache = HostTensor::strided(
      bf16(), {kBlocks, kBlockSize, kHeads, kHeadDim},
      {kBlockSize * kHeads * kHeadDim, kHeadDim, kHeadDim, 1});
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_cache: its strides make distinct elements share "
                 "memory"});
}

TEST_F(LaunchTest, CacheWithZeroStride) {
  keyCache =
      HostTensor::strided(bf16(), {kBlocks, kBlockSize, kHeads, kHeadDim},
                          {0, kHeads * kHeadDim, kHeadDim, 1});
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: its strides make distinct elements share "
                 "memory"});
}

TEST_F(LaunchTest, SlotMappingStride) {
  slots = HostTensor::strided(i64(), {kTokens}, {2});
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"slot_mapping: stride[0] (num_tokens) is 2 but must be 1"});
}

TEST_F(LaunchTest, QueryStartLocStride) {
  queryStartLoc = HostTensor::strided(i32(), {kRequests + 1}, {3});
  expectRefused(slotMapping(), KVRT_ERROR_INVALID_ARGUMENT,
                {"query_start_loc: stride[0] (num_reqs + 1) is 3 but must be "
                 "1"});
}

TEST_F(LaunchTest, BlockTableInnerStride) {
  blockTable = HostTensor::strided(i32(), {kRequests, kMaxBlocksPerReq},
                                   {2 * kMaxBlocksPerReq, 2});
  expectRefused(slotMapping(), KVRT_ERROR_INVALID_ARGUMENT,
                {"block_table: stride[1] (max_blocks_per_req) is 2 but a "
                 "block table row must be contiguous"});
}

TEST_F(LaunchTest, StridesOfExtentOneDimsAreMoot) {
  // PyTorch leaves arbitrary strides on size-1 dimensions.
  key = qkv.view(bf16(), {1, kHeads, kHeadDim}, {999, kHeadDim, 1}, 128);
  value = qkv.view(bf16(), {1, kHeads, kHeadDim}, {7, kHeadDim, 1}, 192);
  slots = HostTensor::strided(i64(), {1}, {5});
  EXPECT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
}

TEST_F(LaunchTest, OffsetOverflow) {
  key.stridesRef()[0] = INT64_MAX / 2;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key: shape and strides overflow 64-bit offsets"});
}

TEST_F(LaunchTest, CompactShapeOverflow) {
  keyCache.shapeRef()[0] = INT64_MAX / 4;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: shape overflows 64-bit offsets"});
}

TEST_F(LaunchTest, HugeSpan) {
  keyCache.shapeRef()[0] = int64_t(1) << 50;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: data (", "2^57"});
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

TEST_F(LaunchTest, NullData) {
  value.get()->data = nullptr;
  value.get()->byte_offset = 0;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value: data is NULL but the tensor has elements"});
}

TEST_F(LaunchTest, ElementMisaligned) {
  key.get()->byte_offset += 1;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key: data + byte_offset", "is not aligned to its 2-byte "
                                            "elements"});
}

TEST_F(LaunchTest, SlotMappingMisaligned) {
  slots.get()->byte_offset = 4;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"slot_mapping: data + byte_offset",
                 "not aligned to its 8-byte elements"});
}

TEST_F(LaunchTest, KeyAndValueCachesOverlap) {
  valueCache =
      keyCache.view(bf16(), {kBlocks, kBlockSize, kHeads, kHeadDim}, {}, 64);
  expectRefused(
      append(), KVRT_ERROR_INVALID_ARGUMENT,
      {"key_cache: overlaps value_cache in memory", "must not alias another"});
}

TEST_F(LaunchTest, KeyAndValueCachesMayInterleaveByBlock) {
  // FlashInfer's paged layout: one [num_blocks, 2, block_size, H, D]
  // allocation, K = kv[:, 0] and V = kv[:, 1]. The byte ranges overlap; no
  // element of one is an element of the other.
  HostTensor kv =
      HostTensor::compact(bf16(), {kBlocks, 2, kBlockSize, kHeads, kHeadDim});
  std::vector<int64_t> shape = {kBlocks, kBlockSize, kHeads, kHeadDim};
  std::vector<int64_t> strides = {2 * kBlockSize * kHeads * kHeadDim,
                                  kHeads * kHeadDim, kHeadDim, 1};
  keyCache = kv.view(bf16(), shape, strides, 0);
  valueCache =
      kv.view(bf16(), shape, strides, kBlockSize * kHeads * kHeadDim * 2);
  EXPECT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
}

TEST_F(LaunchTest, InterleavedCachesThatShareElementsAreRefused) {
  // The same strides, but V starts one token into K's block: K's second
  // token of each block is V's first.
  HostTensor kv =
      HostTensor::compact(bf16(), {kBlocks, 2, kBlockSize, kHeads, kHeadDim});
  std::vector<int64_t> shape = {kBlocks, kBlockSize, kHeads, kHeadDim};
  std::vector<int64_t> strides = {2 * kBlockSize * kHeads * kHeadDim,
                                  kHeads * kHeadDim, kHeadDim, 1};
  keyCache = kv.view(bf16(), shape, strides, 0);
  valueCache = kv.view(bf16(), shape, strides, kHeads * kHeadDim * 2);
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: overlaps value_cache in memory"});
}

TEST_F(LaunchTest, CacheOverlapsKey) {
  key = keyCache.view(bf16(), {kTokens, kHeads, kHeadDim},
                      {kHeads * kHeadDim, kHeadDim, 1}, 0);
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: overlaps key in memory"});
}

TEST_F(LaunchTest, CacheOverlapsSlotMapping) {
  slots = valueCache.view(i64(), {kTokens}, {}, 64);
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_cache: overlaps slot_mapping in memory"});
}

TEST_F(LaunchTest, KeyAndValueMayInterleave) {
  // Views into one fused QKV buffer: byte ranges overlap, elements do not,
  // and the kernel only reads them.
  value = qkv.view(bf16(), {kTokens, kHeads, kHeadDim}, {kQkvRow, kHeadDim, 1},
                   kQueryHeads * kHeadDim * 2);
  EXPECT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
}

TEST_F(LaunchTest, SlotMappingOutputOverlapsBlockTable) {
  slots = blockTable.view(i64(), {2}, {}, 0);
  expectRefused(slotMapping(), KVRT_ERROR_INVALID_ARGUMENT,
                {"slot_mapping: overlaps block_table in memory"});
}

TEST_F(LaunchTest, SlotMappingOutputOverlapsContextLens) {
  slots = contextLens.view(i64(), {1}, {}, 0);
  expectRefused(slotMapping(), KVRT_ERROR_INVALID_ARGUMENT,
                {"slot_mapping: overlaps context_lens in memory"});
}

TEST_F(LaunchTest, FusedCacheOverlapsBlockTable) {
  blockTable = keyCache.view(i32(), {kRequests, kMaxBlocksPerReq}, {}, 0);
  expectRefused(fused(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: overlaps block_table in memory"});
}

TEST_F(LaunchTest, FusedCacheOverlapsQueryStartLoc) {
  queryStartLoc = valueCache.view(i32(), {kRequests + 1}, {}, 16);
  expectRefused(fused(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_cache: overlaps query_start_loc in memory"});
}

//===----------------------------------------------------------------------===//
// Layouts with their own rules
//===----------------------------------------------------------------------===//

TEST_F(DualStackedTest, ValidLaunchRuns) {
  EXPECT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(fused(), KVRT_SUCCESS) << kvrt_last_error();
}

TEST_F(DualStackedTest, ValueCacheMustBeNull) {
  passValueCache = true;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_cache: must be NULL for the dual_stacked layout of "
                 "'kv_append'"});
}

TEST_F(DualStackedTest, SecondDimIsTwo) {
  keyCache.shapeRef()[1] = 3;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: shape[1] (K/V index) is 3 but the kernel "
                 "'kv_append' was generated for 2"});
}

TEST_F(DualStackedTest, StackedCacheOverlapsValue) {
  value = keyCache.view(bf16(), {kTokens, kHeads, kHeadDim},
                        {kHeads * kHeadDim, kHeadDim, 1}, 0);
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: overlaps value in memory"});
}

TEST_F(VllmTest, ValidLaunchRuns) {
  EXPECT_EQ(append(), KVRT_SUCCESS) << kvrt_last_error();
}

TEST_F(VllmTest, KeyCacheX) {
  keyCache.shapeRef()[4] = 4;
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"key_cache: shape[4] (x) is 4 but the kernel 'kv_append' was "
                 "generated for 8"});
}

TEST_F(VllmTest, KeyCacheRank) {
  keyCache.get()->ndim = 4;
  expectRefused(
      append(), KVRT_ERROR_INVALID_ARGUMENT,
      {"key_cache: rank is 4 but must be 5", "(vllm_vectorized key cache)"});
}

TEST_F(VllmTest, ValueCacheInnermostIsBlockSize) {
  valueCache = HostTensor::strided(
      bf16(), {kBlocks, kHeads, kHeadDim, kBlockSize},
      {kHeads * kHeadDim * kBlockSize, kHeadDim * kBlockSize, 1, kHeadDim});
  expectRefused(append(), KVRT_ERROR_INVALID_ARGUMENT,
                {"value_cache: stride[3] (block_size) is 16 but the innermost "
                 "dimension of a cache must have stride 1"});
}

} // namespace
