//===- PrologueMlaCases.cpp - the MLA prologue's cases and reference ------===//
//
// See PrologueMlaCases.h. The reference is written from docs/CONTRACT.md
// ("The MLA appends' prologue"): per token with a valid slot and a position
// in the cos/sin cache, kv_c into the entry as the cache stores it; k_pe
// rotated in fp32 (conformance::prologueHead), rounded to the source dtype
// into k_pe_out, and that value into the entry; each q_pe head rotated and
// rounded into q_out; nothing of any other token. The inputs are vLLM's
// buffers: q_pe a strided view of a Q buffer whose heads are [q_nope, q_pe],
// kv_c and k_pe views of one [kv_c, k_pe] row per token.
//
//===----------------------------------------------------------------------===//

#include "PrologueMlaCases.h"

#include "conformance/Quant.h"
#include "conformance/Reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

using namespace kvgen;
using namespace kvgen::conformance;
using namespace kvgen::prologue;

PrologueSpec MlaCase::spec() const {
  PrologueSpec s;
  s.qHeads = qHeads;
  s.rope = rope;
  s.rotaryDim = desc.ropeDim;
  return s;
}

std::string MlaCase::moduleText() const {
  return std::string("module {\nkv.") + kindName(desc.kind) + " @" + desc.name +
         " : " + desc.cacheType() + " from " + dtypeName(desc.sourceDtype) +
         " {prologue = " + spec().attr() + "}\n}\n";
}

std::vector<MlaCase> prologue::mlaCases() {
  std::vector<MlaCase> out;
  struct Types {
    DType source, cache;
    std::optional<QuantSpec> quant;
  };
  QuantSpec fp8, fp8Rcp;
  fp8Rcp.reciprocal = true;
  const Types types[] = {
      {DType::BF16, DType::BF16, std::nullopt},
      {DType::F16, DType::F16, std::nullopt},
      {DType::BF16, DType::F8E4M3, fp8},
      {DType::F16, DType::F8E4M3, fp8Rcp},
      {DType::F32, DType::F32, std::nullopt},
      {DType::F32, DType::BF16, std::nullopt},
  };
  auto add = [&](const Types &ty, Kind kind, int64_t blockSize, int64_t rank,
                 int64_t ropeDim, Rope rope, int64_t qHeads, bool inPlace) {
    MlaCase c;
    Description &d = c.desc;
    d.kind = kind;
    d.layout = Layout::PagedNHD;
    d.blockSize = blockSize;
    d.numKvHeads = 1;
    d.kvLoraRank = rank;
    d.ropeDim = ropeDim;
    d.headDim = rank + ropeDim;
    d.sourceDtype = ty.source;
    d.cacheDtype = ty.cache;
    d.quant = ty.quant;
    c.rope = rope;
    c.qHeads = qHeads;
    c.inPlace = inPlace;
    d.name = std::string(kind == Kind::MlaAppend ? "pm_" : "pmf_") +
             dtypeName(ty.source) + "_" +
             (ty.quant ? ty.quant->tag() : std::string(dtypeName(ty.cache))) +
             "_b" + std::to_string(blockSize) + "_" + std::to_string(rank) +
             "x" + std::to_string(ropeDim) +
             (rope == Rope::Neox ? "_neox" : "_gptj") + "_q" +
             std::to_string(qHeads) + (inPlace ? "_inplace" : "");
    out.push_back(c);
  };
  // Every dtype pair with NeoX and GPT-J on a small latent (32 + 16) and
  // DeepSeek's (512 + 64), in place and not, both kinds.
  int n = 0;
  for (const Types &ty : types)
    for (Rope rope : {Rope::Neox, Rope::Gptj}) {
      add(ty, Kind::MlaAppend, 16, 32, 16, rope, 2, n % 2 == 0);
      add(ty, Kind::MlaFusedAppend, 8, 32, 16, rope, 3, n % 2 == 1);
      ++n;
    }
  add(types[0], Kind::MlaAppend, 64, 512, 64, Rope::Neox, 16, true);
  add(types[0], Kind::MlaAppend, 64, 512, 64, Rope::Gptj, 16, false);
  add(types[2], Kind::MlaAppend, 64, 512, 64, Rope::Neox, 16, true);
  add(types[2], Kind::MlaFusedAppend, 16, 512, 64, Rope::Gptj, 8, true);
  // Past 256 iterations a token (the GPU loops over the chunk loop), no Q
  // (k_pe alone), a half of 4 elements (chunks of 4 bf16), a block of one.
  add(types[0], Kind::MlaAppend, 64, 512, 64, Rope::Neox, 128, true);
  add(types[0], Kind::MlaAppend, 16, 32, 16, Rope::Neox, 0, true);
  add(types[1], Kind::MlaFusedAppend, 16, 32, 16, Rope::Gptj, 0, false);
  add(types[0], Kind::MlaAppend, 16, 48, 8, Rope::Neox, 2, true);
  add(types[2], Kind::MlaAppend, 1, 32, 16, Rope::Gptj, 2, false);
  return out;
}

/// One kernel call: its inputs from the seed, the reference on poisoned
/// copies, the launch and the comparison.
std::vector<std::string> prologue::checkMla(const MlaCase &c,
                                            const Kernel &kernel, uint32_t seed,
                                            const Launcher &launch, Break brk) {
  const Description &d = c.desc;
  std::mt19937 rng(seed);
  auto uniform = [&](float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(rng);
  };
  const DType src = d.sourceDtype;
  const size_t srcBytes = dtypeBytes(src);
  auto put = [&](std::vector<uint8_t> &bytes, int64_t i, float value) {
    storeBits(bytes.data() + i * srcBytes, src, floatToElement(value, src));
  };
  auto get = [&](const std::vector<uint8_t> &bytes, int64_t i) {
    return elementToFloat(loadBits(bytes.data() + i * srcBytes, src), src);
  };
  const int64_t numTokens = 9, R = d.kvLoraRank, rope = d.ropeDim;
  const int64_t entry = R + rope, qH = c.qHeads;
  const int64_t numBlocks = d.blockSize == 1 ? 48 : 8;
  const int64_t capacity = numBlocks * d.blockSize;
  const int64_t maxPosition = 40;

  // vLLM's buffers: Q [T, qH, nope + rope] (q_pe its last rope elements of
  // each head), KV [T, R + rope + pad] (kv_c then k_pe), with a padded row
  // so that no stride is the compact one.
  const int64_t nope = 16, qHead = nope + rope,
                qRow = std::max<int64_t>(qH, 1) * qHead + 8;
  const int64_t kvRow = entry + 8;
  std::vector<uint8_t> qBuf(numTokens * qRow * srcBytes);
  std::vector<uint8_t> kvBuf(numTokens * kvRow * srcBytes);
  for (int64_t i = 0; i < numTokens * qRow; ++i)
    put(qBuf, i, uniform(-2.0f, 2.0f));
  for (int64_t i = 0; i < numTokens * kvRow; ++i)
    put(kvBuf, i, uniform(-2.0f, 2.0f));

  // Slots: distinct, a padding token, one past the cache. Positions: one at
  // max_position and one negative.
  std::vector<int64_t> slots(numTokens), positions(numTokens);
  std::vector<int64_t> all(capacity);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  for (int64_t t = 0; t < numTokens; ++t) {
    slots[t] = all[t];
    positions[t] =
        std::uniform_int_distribution<int64_t>(0, maxPosition - 1)(rng);
  }
  slots[2] = -1;
  slots[5] = capacity + 3;
  positions[6] = maxPosition;
  positions[8] = -5;
  // mla_fused_append: the slot rule's slots and positions (as
  // PrologueCases.cpp: request 1's block is negative, request 2 ends at
  // max_position, tokens 7 and 8 are padding).
  const bool fused = d.kind == Kind::MlaFusedAppend;
  const int64_t numReqs = 3, maxBlocksPerReq = 48 / d.blockSize + 1;
  std::vector<int32_t> blockTable(numReqs * maxBlocksPerReq, -1);
  std::vector<int32_t> queryStartLoc{0, 3, 4, 7};
  std::vector<int32_t> contextLens{5, 0, int32_t(maxPosition - 2)};
  if (fused) {
    std::vector<int32_t> ids(numBlocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    blockTable[0] = ids[0];
    for (int64_t col = 0; col < maxBlocksPerReq && 1 + col < numBlocks; ++col)
      blockTable[2 * maxBlocksPerReq + col] = ids[1 + col];
    for (int64_t t = 0; t < numTokens; ++t) {
      slots[t] = positions[t] = -1;
      for (int64_t r = 0; r < numReqs; ++r) {
        if (t < queryStartLoc[r] || t >= queryStartLoc[r + 1])
          continue;
        int64_t p = contextLens[r] + t - queryStartLoc[r];
        int64_t col = p / d.blockSize;
        positions[t] = p;
        if (col < maxBlocksPerReq && blockTable[r * maxBlocksPerReq + col] >= 0)
          slots[t] = blockTable[r * maxBlocksPerReq + col] * d.blockSize +
                     p % d.blockSize;
      }
    }
  }
  // vLLM's cos/sin cache.
  std::vector<uint8_t> cosSin(maxPosition * rope * srcBytes);
  for (int64_t p = 0; p < maxPosition; ++p)
    for (int64_t i = 0; i < rope / 2; ++i) {
      double freq = std::pow(10000.0, -2.0 * i / rope);
      put(cosSin, p * rope + i, float(std::cos(p * freq)));
      put(cosSin, p * rope + rope / 2 + i, float(std::sin(p * freq)));
    }
  std::vector<float> keyScale;
  if (d.quant)
    keyScale.push_back(uniform(0.004f, 0.02f));

  // The cache [num_blocks, block_size, entry], q_out and k_pe_out,
  // poisoned; the expected copies start alike.
  const size_t cacheBytes = dtypeBytes(d.cacheDtype);
  std::vector<uint8_t> cache(capacity * entry * cacheBytes, 0xA5);
  std::vector<uint8_t> qOut(
      numTokens * std::max<int64_t>(qH, 1) * rope * srcBytes, 0xC3);
  std::vector<uint8_t> kPeOut(numTokens * rope * srcBytes, 0x3C);
  std::vector<uint8_t> wantCache = cache, wantQOut = qOut, wantKPeOut = kPeOut,
                       wantQBuf = qBuf, wantKvBuf = kvBuf;
  // Where the outputs are: their own buffers, or in place the views.
  std::vector<uint8_t> &qOutWant = c.inPlace ? wantQBuf : wantQOut;
  std::vector<uint8_t> &kPeOutWant = c.inPlace ? wantKvBuf : wantKPeOut;
  auto qOutAt = [&](int64_t t, int64_t h, int64_t e) {
    return c.inPlace ? t * qRow + h * qHead + nope + e
                     : (t * qH + h) * rope + e;
  };
  auto kPeOutAt = [&](int64_t t, int64_t e) {
    return c.inPlace ? t * kvRow + R + e : t * rope + e;
  };

  // The reference (docs/CONTRACT.md): per token with a valid slot and a
  // position in the cos/sin cache, kv_c into the entry as the cache stores
  // it; k_pe rotated in fp32, rounded to the source dtype into k_pe_out,
  // and that value into the entry; each q_pe head rotated and rounded into
  // q_out.
  PrologueSpec spec = c.spec();
  if (brk == Break::Swap)
    spec.rope = spec.rope == Rope::Neox ? Rope::Gptj : Rope::Neox;
  auto toCache = [&](float x) -> uint32_t {
    if (!d.quant)
      return floatToElement(x, d.cacheDtype);
    return quantize(d.quant->kind, x, keyScale[0], d.quant->reciprocal);
  };
  auto putCache = [&](int64_t slot, int64_t e, float x) {
    storeBits(wantCache.data() + (slot * entry + e) * cacheBytes, d.cacheDtype,
              toCache(x));
  };
  std::vector<float> cs(rope);
  for (int64_t t = 0; t < numTokens; ++t) {
    bool valid = slots[t] >= 0 && slots[t] < capacity;
    bool inCache = positions[t] >= 0 && positions[t] < maxPosition;
    if (brk == Break::PaddingQ && !valid && inCache && qH > 0)
      put(qOutWant, qOutAt(t, 0, 0), 1.0f);
    if (!valid || !inCache)
      continue;
    for (int64_t i = 0; i < rope; ++i)
      cs[i] = get(cosSin, positions[t] * rope + i);
    if (brk == Break::Sign)
      for (int64_t i = rope / 2; i < rope; ++i)
        cs[i] = -cs[i];
    for (int64_t e = 0; e < R; ++e)
      putCache(slots[t], e, get(kvBuf, t * kvRow + e));
    std::vector<float> x(rope);
    for (int64_t e = 0; e < rope; ++e)
      x[e] = get(kvBuf, t * kvRow + R + e);
    std::vector<float> y = prologueHead(spec, {1, 1}, x, {}, 0.0f, cs.data());
    for (int64_t e = 0; e < rope; ++e) {
      uint32_t rounded = floatToElement(y[e], src);
      storeBits(kPeOutWant.data() + kPeOutAt(t, e) * srcBytes, src, rounded);
      putCache(slots[t], R + e,
               brk == Break::Unrounded ? y[e] : elementToFloat(rounded, src));
    }
    for (int64_t h = 0; h < qH; ++h) {
      for (int64_t e = 0; e < rope; ++e)
        x[e] = get(qBuf, t * qRow + h * qHead + nope + e);
      y = prologueHead(spec, {1, 1}, x, {}, 0.0f, cs.data());
      for (int64_t e = 0; e < rope; ++e)
        put(qOutWant, qOutAt(t, h, e), y[e]);
    }
  }

  // The parameters, in the plan's order. Each view is the rest of its
  // buffer from its first element.
  std::vector<HostBuffer> buffers;
  std::vector<int32_t> scalars;
  std::vector<bool> isBuffer;
  auto vecBuffer = [](auto &v) {
    return HostBuffer{v.data(), v.size() * sizeof(v[0])};
  };
  auto view = [&](std::vector<uint8_t> &buf, int64_t offset) {
    return HostBuffer{buf.data() + offset * srcBytes,
                      buf.size() - offset * srcBytes};
  };
  for (abi::Param p : kernel.params) {
    using P = abi::Param;
    if (abi::paramInfo(p).role == abi::ParamRole::Buffer) {
      HostBuffer buffer{nullptr, 0};
      switch (p) {
      case P::KvC:
        buffer = view(kvBuf, 0);
        break;
      case P::KPe:
        buffer = view(kvBuf, R);
        break;
      case P::KPeOut:
        buffer = c.inPlace ? view(kvBuf, R) : vecBuffer(kPeOut);
        break;
      case P::Query:
        buffer = view(qBuf, nope);
        break;
      case P::QOut:
        buffer = c.inPlace ? view(qBuf, nope) : vecBuffer(qOut);
        break;
      case P::SlotMapping:
        buffer = vecBuffer(slots);
        break;
      case P::BlockTable:
        buffer = vecBuffer(blockTable);
        break;
      case P::QueryStartLoc:
        buffer = vecBuffer(queryStartLoc);
        break;
      case P::ContextLens:
        buffer = vecBuffer(contextLens);
        break;
      case P::KeyCache:
        buffer = vecBuffer(cache);
        break;
      case P::KeyScale:
        buffer = vecBuffer(keyScale);
        break;
      case P::RopePositions:
        buffer = vecBuffer(positions);
        break;
      case P::CosSinCache:
        buffer = vecBuffer(cosSin);
        break;
      default:
        return {std::string("no tensor for buffer ") + abi::paramName(p)};
      }
      buffers.push_back(buffer);
      isBuffer.push_back(true);
      continue;
    }
    int64_t v = -1;
    switch (p) {
    case P::NumTokens:
      v = numTokens;
      break;
    case P::NumBlocks:
      v = numBlocks;
      break;
    case P::NumReqs:
      v = numReqs;
      break;
    case P::BlockTableStride:
    case P::MaxBlocksPerReq:
      v = maxBlocksPerReq;
      break;
    case P::KvCStrideToken:
    case P::KPeStrideToken:
      v = kvRow;
      break;
    case P::KPeOutStrideToken:
      v = c.inPlace ? kvRow : rope;
      break;
    case P::KvCStrideDim:
    case P::KPeStrideDim:
    case P::KPeOutStrideDim:
    case P::QueryStrideDim:
    case P::QOutStrideDim:
    case P::KeyCacheStrideDim:
      v = 1;
      break;
    case P::QueryStrideToken:
      v = qRow;
      break;
    case P::QueryStrideHead:
      v = qHead;
      break;
    case P::QOutStrideToken:
      v = c.inPlace ? qRow : qH * rope;
      break;
    case P::QOutStrideHead:
      v = c.inPlace ? qHead : rope;
      break;
    case P::KeyCacheStrideBlock:
      v = d.blockSize * entry;
      break;
    case P::KeyCacheStridePos:
      v = entry;
      break;
    case P::MaxPosition:
      v = maxPosition;
      break;
    default:
      return {std::string("no value for scalar ") + abi::paramName(p)};
    }
    scalars.push_back(static_cast<int32_t>(v));
    isBuffer.push_back(false);
  }
  if (std::string why = launch(kernel, numTokens, buffers, scalars, isBuffer);
      !why.empty())
    return {why};

  std::vector<std::string> failures;
  auto compare = [&](const char *what, const std::vector<uint8_t> &got,
                     const std::vector<uint8_t> &want, DType type) {
    if (std::optional<std::string> why = compareBytes(what, got, want, type))
      failures.push_back(*why);
  };
  compare("key_cache", cache, wantCache, d.cacheDtype);
  compare(c.inPlace ? "q buffer (q_out is q_pe)" : "q buffer", qBuf, wantQBuf,
          src);
  compare(c.inPlace ? "kv buffer (k_pe_out is k_pe)" : "kv buffer", kvBuf,
          wantKvBuf, src);
  if (!c.inPlace) {
    compare("q_out", qOut, wantQOut, src);
    compare("k_pe_out", kPeOut, wantKPeOut, src);
  }
  return failures;
}
