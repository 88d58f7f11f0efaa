//===- PrologueTest.cpp - launching kernels with a fused prologue ---------===//
//
// A description with #kv.prologue<...> (manifest "prologue") takes Q in and
// out, the positions, the cos/sin cache, the norm weights and epsilon
// (docs/CONTRACT.md, "The fused prologue"). Each test launches through the
// recording host kernels, so what is checked is kvrt's half: the manifest's
// prologue, each tensor's validation and the parameters packed.
//
//===----------------------------------------------------------------------===//

#include "PrologueSupport.h"

namespace kvrt::test {
namespace {

/// The standard bundle plus the prologue descriptions the tests launch:
/// "kv_rope" (append, every part, GPT-J), "kv_rope_neox" (the same, NeoX),
/// "kv_norm" (append, K's norm only), "kv_fused_rope" (fused_append, every
/// part), "kv_paged_rope" (paged_kv_append, every part), "kv_paged"
/// (paged_kv_append, no prologue), "kv_paged_fp8q" (paged_kv_append, Q and
/// NeoX RoPE, Q written as fp8 with q_scale, the cos/sin cache in f32).
json prologueBundle() {
  json bundle = standardBundle();
  for (json &kernel : describePrologue("kv_rope", "append", Parts()))
    bundle["kernels"].push_back(kernel);
  for (json &kernel :
       describePrologue("kv_rope_neox", "append", Parts(), "neox"))
    bundle["kernels"].push_back(kernel);
  for (json &kernel :
       describePrologue("kv_norm", "append", {false, true, false}))
    bundle["kernels"].push_back(kernel);
  for (json &kernel :
       describePrologue("kv_fused_rope", "fused_append", Parts()))
    bundle["kernels"].push_back(kernel);
  for (json &kernel :
       describePrologue("kv_paged_rope", "paged_kv_append", Parts()))
    bundle["kernels"].push_back(kernel);
  for (json &kernel : describe("kv_paged", "paged_kv_append"))
    bundle["kernels"].push_back(kernel);
  for (json &kernel : describePrologue("kv_paged_fp8q", "paged_kv_append",
                                       {true, false, true, true}, "neox"))
    bundle["kernels"].push_back(kernel);
  return bundle;
}

class PrologueTest : public LaunchTest {
protected:
  void SetUp() override {
    LaunchTest::SetUp();
    recorded() = Recorded();
    kvrt_bundle *raw = nullptr;
    ASSERT_EQ(load(prologueBundle(), &raw), KVRT_SUCCESS) << kvrt_last_error();
    bundle.reset(raw);
    registerRecorders(raw);
    // Q is the first section of the fused QKV rows (makeRows), as vLLM
    // passes it; q_out a tensor of its own.
    query = qkv.view(bf16(), {kTokens, kQueryHeads, kHeadDim},
                     {kQkvRow, kHeadDim, 1}, 0);
    qOut = HostTensor::compact(bf16(), {kTokens, kQueryHeads, kHeadDim});
    positions = HostTensor::compact(i64(), {kTokens});
    cosSin = HostTensor::compact(bf16(), {kMaxPosition, kRotaryDim});
    kWeight = HostTensor::compact(bf16(), {kHeadDim});
    qWeight = HostTensor::compact(bf16(), {kHeadDim});
    epsilon = HostTensor::compact(f32(), {1});
    // FlashInfer's page table: request 0's pages 0 and 2, request 1's page
    // 1; tokens 0-2 of request 0 at positions 0-2, tokens 3-4 of request 1
    // at 0-1.
    batchIndices = HostTensor::compact(i32(), {kTokens});
    pagePositions = HostTensor::compact(i32(), {kTokens});
    kvIndices = HostTensor::compact(i32(), {3});
    kvIndptr = HostTensor::compact(i32(), {3});
    setI32(batchIndices, {0, 0, 0, 1, 1});
    setI32(pagePositions, {0, 1, 2, 0, 1});
    setI32(kvIndices, {0, 2, 1});
    setI32(kvIndptr, {0, 2, 3});
  }
  static void setI32(HostTensor &tensor, std::vector<int32_t> values) {
    std::memcpy(tensor.data(), values.data(), values.size() * sizeof(int32_t));
  }

  /// paged_kv_append with every prologue tensor.
  kvrt_paged_kv_append_args pagedArgs() {
    kvrt_paged_kv_append_args args = KVRT_ARGS_INIT(kvrt_paged_kv_append_args);
    args.kernel = "kv_paged_rope";
    args.key = key.get();
    args.value = value.get();
    args.batch_indices = batchIndices.get();
    args.positions = pagePositions.get();
    args.kv_indices = kvIndices.get();
    args.kv_indptr = kvIndptr.get();
    args.key_cache = keyCache.get();
    args.value_cache = valueCache.get();
    args.query = query.get();
    args.q_out = qOut.get();
    args.rope_positions = positions.get();
    args.cos_sin_cache = cosSin.get();
    args.k_norm_weight = kWeight.get();
    args.q_norm_weight = qWeight.get();
    args.epsilon = epsilon.get();
    return args;
  }
  kvrt_status launch(const kvrt_paged_kv_append_args &args) {
    return kvrt_paged_kv_append(bundle.get(), &args, nullptr);
  }

  kvrt_append_args ropeArgs(const char *kernel = "kv_rope") {
    kvrt_append_args args = appendArgs();
    args.kernel = kernel;
    args.query = query.get();
    args.q_out = qOut.get();
    args.rope_positions = positions.get();
    args.cos_sin_cache = cosSin.get();
    args.k_norm_weight = kWeight.get();
    args.q_norm_weight = qWeight.get();
    args.epsilon = epsilon.get();
    return args;
  }
  kvrt_status launch(const kvrt_append_args &args) {
    return kvrt_append(bundle.get(), &args, nullptr);
  }
  /// `mutate` breaks one thing of a good launch; refused with `fragments`.
  template <typename Fn>
  void expectAppendRefused(Fn &&mutate,
                           const std::vector<std::string> &fragments) {
    kvrt_append_args args = ropeArgs();
    mutate(args);
    expectRefused(launch(args), KVRT_ERROR_INVALID_ARGUMENT, fragments);
  }

  /// The recorded parameter `name` of kernel `kernel`'s list.
  int64_t param(const std::vector<std::string> &names, const char *name) {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name)
        return recorded().params.at(i);
    ADD_FAILURE() << "no parameter " << name;
    return -1;
  }
  static int64_t address(const HostTensor &tensor) {
    return reinterpret_cast<int64_t>(tensor.data());
  }

  HostTensor query, qOut, positions, cosSin, kWeight, qWeight, epsilon;
  HostTensor batchIndices, pagePositions, kvIndices, kvIndptr;
};

//===----------------------------------------------------------------------===//
// Launches
//===----------------------------------------------------------------------===//

TEST_F(PrologueTest, AppendPacksEveryPrologueParameter) {
  ASSERT_EQ(launch(ropeArgs()), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(calls(), 1);
  std::vector<std::string> names = prologueParams("append", Parts());
  ASSERT_EQ(recorded().params.size(), names.size());
  EXPECT_EQ(param(names, "query"), address(qkv));
  EXPECT_EQ(param(names, "q_out"), address(qOut));
  EXPECT_EQ(param(names, "rope_positions"), address(positions));
  EXPECT_EQ(param(names, "cos_sin_cache"), address(cosSin));
  EXPECT_EQ(param(names, "k_norm_weight"), address(kWeight));
  EXPECT_EQ(param(names, "q_norm_weight"), address(qWeight));
  EXPECT_EQ(param(names, "epsilon"), address(epsilon));
  EXPECT_EQ(param(names, "max_position"), kMaxPosition);
  EXPECT_EQ(param(names, "query_stride_token"), kQkvRow);
  EXPECT_EQ(param(names, "query_stride_head"), kHeadDim);
  EXPECT_EQ(param(names, "query_stride_dim"), 1);
  EXPECT_EQ(param(names, "q_out_stride_token"), kQueryHeads * kHeadDim);
  EXPECT_EQ(param(names, "q_out_stride_head"), kHeadDim);
  EXPECT_EQ(param(names, "q_out_stride_dim"), 1);
  EXPECT_EQ(param(names, "num_tokens"), kTokens);
}

TEST_F(PrologueTest, FusedAppendPacksEveryPrologueParameter) {
  kvrt_fused_append_args args = fusedArgs();
  args.kernel = "kv_fused_rope";
  args.query = query.get();
  args.q_out = qOut.get();
  args.cos_sin_cache = cosSin.get();
  args.k_norm_weight = kWeight.get();
  args.q_norm_weight = qWeight.get();
  args.epsilon = epsilon.get();
  ASSERT_EQ(kvrt_fused_append(bundle.get(), &args, nullptr), KVRT_SUCCESS)
      << kvrt_last_error();
  std::vector<std::string> names = prologueParams("fused_append", Parts());
  ASSERT_EQ(recorded().params.size(), names.size());
  EXPECT_EQ(param(names, "query"), address(qkv));
  EXPECT_EQ(param(names, "q_out"), address(qOut));
  EXPECT_EQ(param(names, "cos_sin_cache"), address(cosSin));
  EXPECT_EQ(param(names, "epsilon"), address(epsilon));
  EXPECT_EQ(param(names, "max_position"), kMaxPosition);
  EXPECT_EQ(param(names, "query_stride_token"), kQkvRow);
  EXPECT_EQ(param(names, "q_out_stride_token"), kQueryHeads * kHeadDim);
}

TEST_F(PrologueTest, PagedKvAppendPacksEveryPrologueParameter) {
  ASSERT_EQ(launch(pagedArgs()), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(calls(), 1);
  std::vector<std::string> names = prologueParams("paged_kv_append", Parts());
  ASSERT_EQ(recorded().params.size(), names.size());
  EXPECT_EQ(param(names, "positions"), address(pagePositions));
  EXPECT_EQ(param(names, "query"), address(qkv));
  EXPECT_EQ(param(names, "q_out"), address(qOut));
  EXPECT_EQ(param(names, "rope_positions"), address(positions));
  EXPECT_EQ(param(names, "cos_sin_cache"), address(cosSin));
  EXPECT_EQ(param(names, "k_norm_weight"), address(kWeight));
  EXPECT_EQ(param(names, "q_norm_weight"), address(qWeight));
  EXPECT_EQ(param(names, "epsilon"), address(epsilon));
  EXPECT_EQ(param(names, "batch_size"), 2);
  EXPECT_EQ(param(names, "num_indices"), 3);
  EXPECT_EQ(param(names, "max_position"), kMaxPosition);
  EXPECT_EQ(param(names, "query_stride_token"), kQkvRow);
  EXPECT_EQ(param(names, "q_out_stride_token"), kQueryHeads * kHeadDim);
  EXPECT_EQ(param(names, "num_tokens"), kTokens);
}

TEST_F(PrologueTest, PagedKvAppendRefusesAMissingOrWrongPrologueTensor) {
  kvrt_paged_kv_append_args args = pagedArgs();
  args.rope_positions = nullptr;
  expectRefused(launch(args), KVRT_ERROR_INVALID_ARGUMENT, {"rope_positions"});
  // FlashInfer's positions are int32; rope_positions stays int64.
  args = pagedArgs();
  args.rope_positions = pagePositions.get();
  expectRefused(launch(args), KVRT_ERROR_INVALID_ARGUMENT, {"rope_positions"});
  HostTensor shortQ =
      HostTensor::compact(bf16(), {kTokens - 1, kQueryHeads, kHeadDim});
  args = pagedArgs();
  args.q_out = shortQ.get();
  expectRefused(launch(args), KVRT_ERROR_INVALID_ARGUMENT, {"q_out"});
  // A description without a prologue refuses the prologue's tensors.
  args = pagedArgs();
  args.kernel = "kv_paged";
  expectRefused(launch(args), KVRT_ERROR_INVALID_ARGUMENT,
                {"query", "no fused prologue"});
}

TEST_F(PrologueTest, Fp8QTakesQScaleAndAnF32CosSinCache) {
  HostTensor qOut8 =
      HostTensor::compact(f8e4m3(), {kTokens, kQueryHeads, kHeadDim});
  HostTensor cosSin32 = HostTensor::compact(f32(), {kMaxPosition, kRotaryDim});
  HostTensor qScale = HostTensor::compact(f32(), {1});
  auto args = [&] {
    kvrt_paged_kv_append_args a = pagedArgs();
    a.kernel = "kv_paged_fp8q";
    a.k_norm_weight = a.q_norm_weight = a.epsilon = nullptr;
    a.q_out = qOut8.get();
    a.cos_sin_cache = cosSin32.get();
    a.q_scale = qScale.get();
    return a;
  };
  ASSERT_EQ(launch(args()), KVRT_SUCCESS) << kvrt_last_error();
  std::vector<std::string> names =
      prologueParams("paged_kv_append", {true, false, true, true});
  ASSERT_EQ(recorded().params.size(), names.size());
  EXPECT_EQ(param(names, "q_out"), address(qOut8));
  EXPECT_EQ(param(names, "cos_sin_cache"), address(cosSin32));
  EXPECT_EQ(param(names, "q_scale"), address(qScale));
  EXPECT_EQ(param(names, "q_out_stride_token"), kQueryHeads * kHeadDim);
  // uint8 is fp8's other DLPack spelling.
  HostTensor qOutU8 =
      HostTensor::compact(u8(), {kTokens, kQueryHeads, kHeadDim});
  kvrt_paged_kv_append_args a = args();
  a.q_out = qOutU8.get();
  ASSERT_EQ(launch(a), KVRT_SUCCESS) << kvrt_last_error();
  recorded() = Recorded();
  // Each refused by name, nothing launched.
  a = args();
  a.q_out = qOut.get();
  expectRefused(launch(a), KVRT_ERROR_INVALID_ARGUMENT, {"q_out", "dtype"});
  a = args();
  a.cos_sin_cache = cosSin.get();
  expectRefused(launch(a), KVRT_ERROR_INVALID_ARGUMENT,
                {"cos_sin_cache", "dtype"});
  a = args();
  a.q_scale = nullptr;
  expectRefused(launch(a), KVRT_ERROR_INVALID_ARGUMENT,
                {"q_scale: tensor is NULL", "q_quant"});
  HostTensor twoScales = HostTensor::compact(f32(), {2});
  a = args();
  a.q_scale = twoScales.get();
  expectRefused(launch(a), KVRT_ERROR_INVALID_ARGUMENT, {"q_scale"});
  // An fp8 q_out over query's first byte, with query's shape and element
  // strides, is not query itself: its elements are half as wide, so a lane's
  // fp8 store lands on Q another lane has yet to read (docs/CONTRACT.md: in
  // place only without q_quant). Q a buffer of its own, so that q_out lies
  // inside it and overlaps nothing else.
  HostTensor ownQuery =
      HostTensor::compact(bf16(), {kTokens, kQueryHeads, kHeadDim});
  HostTensor overQuery =
      ownQuery.view(f8e4m3(), {kTokens, kQueryHeads, kHeadDim},
                    {kQueryHeads * kHeadDim, kHeadDim, 1}, 0);
  a = args();
  a.query = ownQuery.get();
  ASSERT_EQ(launch(a), KVRT_SUCCESS) << kvrt_last_error();
  recorded() = Recorded();
  a.q_out = overQuery.get();
  expectRefused(launch(a), KVRT_ERROR_INVALID_ARGUMENT,
                {"q_out: overlaps query but is not query itself"});
  // A description without q_quant refuses q_scale.
  kvrt_paged_kv_append_args plain = pagedArgs();
  plain.q_scale = qScale.get();
  expectRefused(launch(plain), KVRT_ERROR_INVALID_ARGUMENT,
                {"q_scale: must be NULL"});
}

TEST_F(PrologueTest, QOutMayBeQueryItself) {
  // vLLM rotates Q in place inside its QKV rows: the same view twice.
  for (const char *kernel : {"kv_rope", "kv_rope_neox"}) {
    kvrt_append_args args = ropeArgs(kernel);
    args.q_out = query.get();
    ASSERT_EQ(launch(args), KVRT_SUCCESS) << kernel << kvrt_last_error();
    std::vector<std::string> names = prologueParams("append", Parts());
    EXPECT_EQ(param(names, "q_out"), address(qkv));
    EXPECT_EQ(param(names, "q_out_stride_token"), kQkvRow);
    // Another DLTensor of the same view is the same.
    HostTensor same = qkv.view(bf16(), {kTokens, kQueryHeads, kHeadDim},
                               {kQkvRow, kHeadDim, 1}, 0);
    args.q_out = same.get();
    ASSERT_EQ(launch(args), KVRT_SUCCESS) << kernel << kvrt_last_error();
  }
}

TEST_F(PrologueTest, InPlaceMovesToNewAddresses) {
  // A second input set of the same shapes, in place again: the remembered
  // plan moves; then one whose q_out is shifted from query must be refused,
  // not moved.
  kvrt_append_args args = ropeArgs();
  args.q_out = query.get();
  ASSERT_EQ(launch(args), KVRT_SUCCESS) << kvrt_last_error();
  HostTensor otherQkv = HostTensor::compact(bf16(), {kTokens, kQkvRow});
  HostTensor otherQuery = otherQkv.view(
      bf16(), {kTokens, kQueryHeads, kHeadDim}, {kQkvRow, kHeadDim, 1}, 0);
  HostTensor otherQOut = otherQkv.view(bf16(), {kTokens, kQueryHeads, kHeadDim},
                                       {kQkvRow, kHeadDim, 1}, 0);
  args.query = otherQuery.get();
  args.q_out = otherQOut.get();
  ASSERT_EQ(launch(args), KVRT_SUCCESS) << kvrt_last_error();
  std::vector<std::string> names = prologueParams("append", Parts());
  EXPECT_EQ(param(names, "query"), address(otherQkv));
  EXPECT_EQ(param(names, "q_out"), address(otherQkv));

  recorded() = Recorded();
  HostTensor shifted = otherQkv.view(bf16(), {kTokens, kQueryHeads, kHeadDim},
                                     {kQkvRow, kHeadDim, 1}, 2);
  args.q_out = shifted.get();
  expectRefused(launch(args), KVRT_ERROR_INVALID_ARGUMENT,
                {"q_out: overlaps query but is not query itself"});
}

TEST_F(PrologueTest, NormOnlyTakesKsWeightAndEpsilon) {
  kvrt_append_args args = appendArgs();
  args.kernel = "kv_norm";
  args.k_norm_weight = kWeight.get();
  args.epsilon = epsilon.get();
  ASSERT_EQ(launch(args), KVRT_SUCCESS) << kvrt_last_error();
  std::vector<std::string> names =
      prologueParams("append", {false, true, false});
  ASSERT_EQ(recorded().params.size(), names.size());
  EXPECT_EQ(param(names, "k_norm_weight"), address(kWeight));
  EXPECT_EQ(param(names, "epsilon"), address(epsilon));

  // Q's tensors belong to a prologue with q_heads.
  recorded() = Recorded();
  args.q_norm_weight = qWeight.get();
  expectRefused(launch(args), KVRT_ERROR_INVALID_ARGUMENT,
                {"q_norm_weight: must be NULL", "'kv_norm'",
                 "without norm = rms with q_heads"});
  args.q_norm_weight = nullptr;
  args.query = query.get();
  expectRefused(launch(args), KVRT_ERROR_INVALID_ARGUMENT,
                {"query: must be NULL", "without q_heads"});
}

TEST_F(PrologueTest, AnOldCallerLaunchesOnlyWithoutAPrologue) {
  // A caller built against the header before the prologue: its struct ends
  // at value_scale_cache.
  kvrt_append_args args = ropeArgs();
  args.struct_size = KVRT_APPEND_ARGS_STRUCT_SIZE;
  args.kernel = "kv_append";
  ASSERT_EQ(launch(args), KVRT_SUCCESS) << kvrt_last_error();
  recorded() = Recorded();
  args.kernel = "kv_rope";
  expectRefused(launch(args), KVRT_ERROR_INVALID_ARGUMENT,
                {"query: tensor is NULL but the kernel 'kv_rope' has a fused "
                 "prologue with q_heads"});
}

//===----------------------------------------------------------------------===//
// Refusals: each tensor by name, nothing run
//===----------------------------------------------------------------------===//

TEST_F(PrologueTest, RefusesPrologueTensorsWithoutAPrologue) {
  kvrt_append_args args = ropeArgs("kv_append");
  expectRefused(launch(args), KVRT_ERROR_INVALID_ARGUMENT,
                {"query: must be NULL: the kernel 'kv_append' has no fused "
                 "prologue"});
  args = appendArgs();
  args.kernel = "kv_append";
  args.epsilon = epsilon.get();
  expectRefused(launch(args), KVRT_ERROR_INVALID_ARGUMENT,
                {"epsilon: must be NULL"});
  kvrt_fused_append_args fused = fusedArgs();
  fused.kernel = "kv_fused";
  fused.cos_sin_cache = cosSin.get();
  expectRefused(kvrt_fused_append(bundle.get(), &fused, nullptr),
                KVRT_ERROR_INVALID_ARGUMENT,
                {"cos_sin_cache: must be NULL: the kernel 'kv_fused' has no "
                 "fused prologue"});
}

TEST_F(PrologueTest, RefusesAMissingPrologueTensor) {
  expectAppendRefused([](kvrt_append_args &a) { a.rope_positions = nullptr; },
                      {"rope_positions: tensor is NULL", "with rope"});
  expectAppendRefused([](kvrt_append_args &a) { a.cos_sin_cache = nullptr; },
                      {"cos_sin_cache: tensor is NULL"});
  expectAppendRefused([](kvrt_append_args &a) { a.k_norm_weight = nullptr; },
                      {"k_norm_weight: tensor is NULL", "norm = rms"});
  expectAppendRefused([](kvrt_append_args &a) { a.q_norm_weight = nullptr; },
                      {"q_norm_weight: tensor is NULL"});
  expectAppendRefused([](kvrt_append_args &a) { a.epsilon = nullptr; },
                      {"epsilon: tensor is NULL"});
  expectAppendRefused([](kvrt_append_args &a) { a.q_out = nullptr; },
                      {"q_out: tensor is NULL", "q_heads"});
}

TEST_F(PrologueTest, RefusesQueryOfAnotherShapeOrDtype) {
  HostTensor heads = HostTensor::compact(bf16(), {kTokens, kHeads, kHeadDim});
  expectAppendRefused(
      [&](kvrt_append_args &a) { a.query = heads.get(); },
      {"query: shape[1] (q_heads) is 2", "[num_tokens, q_heads, head_dim]"});
  HostTensor half =
      HostTensor::compact(f16(), {kTokens, kQueryHeads, kHeadDim});
  expectAppendRefused([&](kvrt_append_args &a) { a.q_out = half.get(); },
                      {"q_out: dtype is f16", "bf16"});
  HostTensor fewer =
      HostTensor::compact(bf16(), {kTokens - 1, kQueryHeads, kHeadDim});
  expectAppendRefused([&](kvrt_append_args &a) { a.q_out = fewer.get(); },
                      {"q_out", "num_tokens"});
  query.get()->device = {kDLCUDA, 0};
  expectAppendRefused([](kvrt_append_args &) {},
                      {"query: on cuda:0", "one device"});
}

TEST_F(PrologueTest, TakesQWithAnyStrides) {
  // Q's dimensions in another order: the kernel takes its strides.
  HostTensor transposed =
      HostTensor::strided(bf16(), {kTokens, kQueryHeads, kHeadDim},
                          {kHeadDim, kTokens * kHeadDim, 1});
  kvrt_append_args args = ropeArgs();
  args.q_out = transposed.get();
  ASSERT_EQ(launch(args), KVRT_SUCCESS) << kvrt_last_error();
  std::vector<std::string> names = prologueParams("append", Parts());
  EXPECT_EQ(param(names, "q_out_stride_token"), kHeadDim);
  EXPECT_EQ(param(names, "q_out_stride_head"), kTokens * kHeadDim);
  // But two Q elements at one address would be written twice.
  recorded() = Recorded();
  HostTensor broadcast = HostTensor::strided(
      bf16(), {kTokens, kQueryHeads, kHeadDim}, {kHeadDim, 0, 1});
  args.q_out = broadcast.get();
  expectRefused(launch(args), KVRT_ERROR_INVALID_ARGUMENT,
                {"q_out: its strides make distinct elements share memory"});
}

TEST_F(PrologueTest, RefusesPositionsOfAnotherDtypeOrLength) {
  HostTensor narrow = HostTensor::compact(i32(), {kTokens});
  expectAppendRefused(
      [&](kvrt_append_args &a) { a.rope_positions = narrow.get(); },
      {"rope_positions: dtype is i32", "i64"});
  HostTensor shorter = HostTensor::compact(i64(), {kTokens - 1});
  expectAppendRefused(
      [&](kvrt_append_args &a) { a.rope_positions = shorter.get(); },
      {"rope_positions", "num_tokens"});
  HostTensor spaced = HostTensor::strided(i64(), {kTokens}, {2});
  expectAppendRefused(
      [&](kvrt_append_args &a) { a.rope_positions = spaced.get(); },
      {"rope_positions: stride[0]", "contiguous"});
}

TEST_F(PrologueTest, RefusesACosSinCacheOfAnotherShape) {
  HostTensor wide = HostTensor::compact(bf16(), {kMaxPosition, kHeadDim});
  expectAppendRefused(
      [&](kvrt_append_args &a) { a.cos_sin_cache = wide.get(); },
      {"cos_sin_cache: shape[1] (rotary_dim) is 16",
       "[max_position, rotary_dim]"});
  HostTensor f32Cache = HostTensor::compact(f32(), {kMaxPosition, kRotaryDim});
  expectAppendRefused(
      [&](kvrt_append_args &a) { a.cos_sin_cache = f32Cache.get(); },
      {"cos_sin_cache: dtype is f32"});
  HostTensor strided = HostTensor::strided(bf16(), {kMaxPosition, kRotaryDim},
                                           {2 * kRotaryDim, 1});
  expectAppendRefused(
      [&](kvrt_append_args &a) { a.cos_sin_cache = strided.get(); },
      {"cos_sin_cache: stride[0]", "contiguous"});
}

TEST_F(PrologueTest, RefusesWeightsAndEpsilonOfAnotherShape) {
  HostTensor shortWeight = HostTensor::compact(bf16(), {kHeadDim / 2});
  expectAppendRefused(
      [&](kvrt_append_args &a) { a.k_norm_weight = shortWeight.get(); },
      {"k_norm_weight: shape[0] (head_dim) is 8", "[head_dim]"});
  HostTensor spaced = HostTensor::strided(bf16(), {kHeadDim}, {2});
  expectAppendRefused(
      [&](kvrt_append_args &a) { a.q_norm_weight = spaced.get(); },
      {"q_norm_weight: stride[0]", "contiguous"});
  HostTensor halfEpsilon = HostTensor::compact(bf16(), {1});
  expectAppendRefused(
      [&](kvrt_append_args &a) { a.epsilon = halfEpsilon.get(); },
      {"epsilon: dtype is bf16", "f32"});
  HostTensor twoEpsilons = HostTensor::compact(f32(), {2});
  expectAppendRefused(
      [&](kvrt_append_args &a) { a.epsilon = twoEpsilons.get(); },
      {"epsilon: shape[0]", "[1] (f32)"});
}

TEST_F(PrologueTest, RefusesQOutOverlappingAnythingElse) {
  // q_out over the K section of the QKV rows: the kernel would overwrite K
  // before it reads it.
  HostTensor overKey = qkv.view(bf16(), {kTokens, kQueryHeads, kHeadDim},
                                {kQkvRow, kHeadDim, 1}, 2 * kHeadDim * 2);
  expectAppendRefused([&](kvrt_append_args &a) { a.q_out = overKey.get(); },
                      {"q_out: overlaps"});
  HostTensor overCache =
      keyCache.view(bf16(), {kTokens, kQueryHeads, kHeadDim},
                    {kQueryHeads * kHeadDim, kHeadDim, 1}, 0);
  // Named by whichever the planner meets first: key_cache, a written
  // tensor too.
  expectAppendRefused([&](kvrt_append_args &a) { a.q_out = overCache.get(); },
                      {"key_cache: overlaps q_out in memory"});
  // Q partly over itself: in place must be exact.
  HostTensor shifted = qkv.view(bf16(), {kTokens, kQueryHeads, kHeadDim},
                                {kQkvRow, kHeadDim, 1}, kHeadDim * 2);
  expectAppendRefused([&](kvrt_append_args &a) { a.q_out = shifted.get(); },
                      {"q_out: overlaps query but is not query itself"});
  HostTensor otherStrides = qkv.view(bf16(), {kTokens, kQueryHeads, kHeadDim},
                                     {kQkvRow, 1, kQueryHeads}, 0);
  expectAppendRefused(
      [&](kvrt_append_args &a) { a.q_out = otherStrides.get(); },
      {"q_out: overlaps query but is not query itself"});
}

//===----------------------------------------------------------------------===//
// Checked mode: a position outside the cos/sin cache
//===----------------------------------------------------------------------===//

/// The kernel writes nothing for a token whose position has no row in the
/// cos/sin cache (no K, V or q_out row: docs/CONTRACT.md, "The fused
/// prologue"), a padding token included, since its Q is written otherwise.
/// Checked mode reads the positions (rope_positions, or the slot rule's for
/// fused_append) and refuses such a launch by name; unchecked, it runs (the
/// host suite checks that the token's bytes are left as they were).
class PrologueCheckedTest : public PrologueTest {
protected:
  void SetUp() override {
    PrologueTest::SetUp();
    // Distinct slots, one padding token; every position in [0, 32).
    setI64(slots, {0, 5, -1, 11, 2});
    setI64(positions, {0, 3, 7, kMaxPosition - 1, 12});
  }
  static void setI64(HostTensor &tensor, std::vector<int64_t> values) {
    std::memcpy(tensor.data(), values.data(), values.size() * sizeof(int64_t));
  }
  void checked(bool enabled) {
    ASSERT_EQ(kvrt_bundle_set_checked(bundle.get(), enabled), KVRT_SUCCESS);
  }
  /// fused_append with every prologue tensor, the cos/sin cache `cosSinRows`
  /// rows long, positions from a block table of `table`, request 0 at
  /// context 0 (tokens 0-2) and request 1 at context `context1` (tokens 3-4).
  kvrt_status fusedLaunch(HostTensor &cosSinRows, std::vector<int32_t> table,
                          int32_t context1) {
    std::vector<int32_t> starts = {0, 3, 5}, lens = {0, context1};
    std::memcpy(blockTable.data(), table.data(), table.size() * 4);
    std::memcpy(queryStartLoc.data(), starts.data(), starts.size() * 4);
    std::memcpy(contextLens.data(), lens.data(), lens.size() * 4);
    kvrt_fused_append_args args = fusedArgs();
    args.kernel = "kv_fused_rope";
    args.query = query.get();
    args.q_out = qOut.get();
    args.cos_sin_cache = cosSinRows.get();
    args.k_norm_weight = kWeight.get();
    args.q_norm_weight = qWeight.get();
    args.epsilon = epsilon.get();
    return kvrt_fused_append(bundle.get(), &args, nullptr);
  }
};

TEST_F(PrologueCheckedTest, PositionsInRangeRun) {
  checked(true);
  ASSERT_EQ(launch(ropeArgs()), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(calls(), 1);
}

TEST_F(PrologueCheckedTest, PositionPastTheCosSinCacheIsRefused) {
  checked(true);
  setI64(positions, {0, 3, 7, kMaxPosition, 12});
  expectRefused(launch(ropeArgs()), KVRT_ERROR_INVALID_ARGUMENT,
                {"rope_positions[3] = 32 is outside the cos/sin cache: "
                 "cos_sin_cache has max_position 32 rows; the kernel would "
                 "write no K, V or Q for that token (checked mode)"});
  // Unchecked, the same launch runs: the kernel skips the token.
  checked(false);
  ASSERT_EQ(launch(ropeArgs()), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(calls(), 1);
}

TEST_F(PrologueCheckedTest, NegativePositionIsRefused) {
  checked(true);
  setI64(positions, {0, -1, 7, 3, 12});
  expectRefused(launch(ropeArgs()), KVRT_ERROR_INVALID_ARGUMENT,
                {"rope_positions[1] = -1 is outside the cos/sin cache",
                 "max_position 32"});
}

TEST_F(PrologueCheckedTest, PaddingTokensPositionIsChecked) {
  // Token 2 pads (slot -1): it writes no K or V, but its Q row is written,
  // so a position past the cos/sin cache drops a row the caller expects.
  checked(true);
  setI64(positions, {0, 3, 40, 3, 12});
  expectRefused(launch(ropeArgs()), KVRT_ERROR_INVALID_ARGUMENT,
                {"rope_positions[2] = 40 is outside the cos/sin cache"});
}

TEST_F(PrologueCheckedTest, PagedPositionPastTheCosSinCacheIsRefused) {
  checked(true);
  ASSERT_EQ(launch(pagedArgs()), KVRT_SUCCESS) << kvrt_last_error();
  EXPECT_EQ(calls(), 1);
  recorded() = Recorded();
  setI64(positions, {0, 3, 7, kMaxPosition, 12});
  expectRefused(launch(pagedArgs()), KVRT_ERROR_INVALID_ARGUMENT,
                {"rope_positions[3] = 32 is outside the cos/sin cache"});
  // Padding (batch index -1) is no exception: its Q row is written.
  setI64(positions, {0, 3, -2, 1, 12});
  setI32(batchIndices, {0, 0, -1, 1, 1});
  checked(false);
  ASSERT_EQ(launch(pagedArgs()), KVRT_SUCCESS) << kvrt_last_error();
  recorded() = Recorded();
  checked(true);
  expectRefused(launch(pagedArgs()), KVRT_ERROR_INVALID_ARGUMENT,
                {"rope_positions[2] = -2 is outside the cos/sin cache"});
}

TEST_F(PrologueCheckedTest, FusedPositionPastTheCosSinCacheIsRefused) {
  // An 8-row cos/sin cache, shorter than a block-table row (3 blocks of 4):
  // the slot rule's position 8 has a slot but no row.
  HostTensor shortCosSin = HostTensor::compact(bf16(), {8, kRotaryDim});
  checked(true);
  // Request 1 at context 6: positions 6 and 7.
  ASSERT_EQ(fusedLaunch(shortCosSin, {0, 2, 2, 1, 2, 2}, 6), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(calls(), 1);
  recorded() = Recorded();
  // At context 7: positions 7 and 8.
  expectRefused(fusedLaunch(shortCosSin, {0, 2, 2, 1, 2, 2}, 7),
                KVRT_ERROR_INVALID_ARGUMENT,
                {"token 4 (request 1, position 8 = context_lens[1] 7 + 1) is "
                 "outside the cos/sin cache: cos_sin_cache has max_position 8 "
                 "rows"});
  // A padding token (negative block id) too: its Q would be written.
  expectRefused(fusedLaunch(shortCosSin, {0, 2, 2, -1, -1, -1}, 7),
                KVRT_ERROR_INVALID_ARGUMENT,
                {"token 4 (request 1, position 8"});
  // Unchecked, it runs: the kernel skips the token.
  checked(false);
  ASSERT_EQ(fusedLaunch(shortCosSin, {0, 2, 2, 1, 2, 2}, 7), KVRT_SUCCESS)
      << kvrt_last_error();
  EXPECT_EQ(calls(), 1);
}

//===----------------------------------------------------------------------===//
// The manifest's prologue
//===----------------------------------------------------------------------===//

class PrologueManifestTest : public ::testing::Test {
protected:
  /// The bundle with kv_rope's vector kernel changed by `mutate`: refused
  /// as INVALID_BUNDLE with `fragment`.
  template <typename Fn>
  void expectBundleRefused(Fn &&mutate, const std::string &fragment) {
    json bundle = bundleJson(describePrologue("kv_rope", "append", Parts()));
    mutate(bundle["kernels"][0]);
    kvrt_bundle *raw = nullptr;
    EXPECT_EQ(load(bundle, &raw), KVRT_ERROR_INVALID_BUNDLE) << fragment;
    EXPECT_THAT(kvrt_last_error(), ::testing::HasSubstr(fragment));
    kvrt_bundle_destroy(raw);
  }
};

TEST_F(PrologueManifestTest, ReadsThePrologueBack) {
  kvrt_bundle *raw = nullptr;
  ASSERT_EQ(
      load(bundleJson(describePrologue("kv_rope", "append", Parts())), &raw),
      KVRT_SUCCESS)
      << kvrt_last_error();
  BundlePtr bundle(raw);
  json entry = json::parse(kvrt_bundle_kernel_manifest(raw, 0));
  EXPECT_EQ(entry["prologue"], prologueJson(Parts()));
  EXPECT_EQ(entry["params"], prologueParams("append", Parts()));
}

TEST_F(PrologueManifestTest, RefusesABrokenPrologue) {
  expectBundleRefused([](json &k) { k["prologue"].erase("rotary_dim"); },
                      "kernels[0] ('kv_rope').prologue.rotary_dim");
  expectBundleRefused([](json &k) { k["prologue"]["rotary_dim"] = 7; },
                      "must be even and at most head_dim");
  expectBundleRefused([](json &k) { k["prologue"]["rotary_dim"] = 32; },
                      "must be even and at most head_dim (16)");
  expectBundleRefused([](json &k) { k["prologue"]["q_heads"] = 3; },
                      "multiple of num_kv_heads");
  expectBundleRefused([](json &k) { k["prologue"]["norm"] = "layer"; },
                      "the norm is \"rms\"");
  expectBundleRefused([](json &k) { k["prologue"]["rope"] = "yarn"; },
                      "\"neox\" or \"gptj\"");
  expectBundleRefused([](json &k) { k["prologue"]["scale"] = 1; },
                      "the key 'scale'");
  expectBundleRefused([](json &k) { k["prologue"] = json::object(); },
                      "has neither norm nor rope");
  expectBundleRefused([](json &k) { k["prologue"].erase("q_heads"); },
                      "but kvrt packs");
  expectBundleRefused([](json &k) { k.erase("prologue"); }, "but kvrt packs");
  expectBundleRefused(
      [](json &k) {
        k["prologue"].erase("rope");
        k["params"] = prologueParams("append", {true, true, false});
      },
      "only a prologue with rope has one");
  expectBundleRefused([](json &k) { k["prologue"]["q_quant"] = "int8"; },
                      "Q's quantization is \"fp8_e4m3\", with q_heads");
  expectBundleRefused([](json &k) { k["prologue"]["cos_sin"] = "bf16"; },
                      "the cos/sin cache's dtype is \"f32\"");
  expectBundleRefused(
      [](json &k) {
        k["cache"]["k_only"] = true;
        k["params"] = paramsFor("append");
      },
      "a prologue needs a cache with K and V");
}

TEST_F(PrologueManifestTest, RefusesAPrologueOnAnotherKind) {
  json bundle = bundleJson(describe("kv_gather", "gather"));
  bundle["kernels"][0]["prologue"] = prologueJson(Parts());
  kvrt_bundle *raw = nullptr;
  EXPECT_EQ(load(bundle, &raw), KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_THAT(kvrt_last_error(),
              ::testing::HasSubstr("a gather kernel has no fused prologue"));
  kvrt_bundle_destroy(raw);
}

TEST_F(PrologueManifestTest, RefusesVariantsOfTwoPrologues) {
  json bundle = bundleJson(describePrologue("kv_rope", "append", Parts()));
  bundle["kernels"][1]["prologue"]["rope"] = "neox";
  kvrt_bundle *raw = nullptr;
  EXPECT_EQ(load(bundle, &raw), KVRT_ERROR_INVALID_BUNDLE);
  EXPECT_THAT(kvrt_last_error(), ::testing::HasSubstr("prologues"));
  kvrt_bundle_destroy(raw);
}

} // namespace
} // namespace kvrt::test
