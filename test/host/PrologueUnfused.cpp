//===- PrologueUnfused.cpp - the fused prologue against vLLM's unfused ops ===//
//
// kvgen-prologue-suite checks the fused prologue byte for byte against the
// project's fp32 reference. This checks it against what it replaces: vLLM's
// unfused sequence of torch ops (RMSNorm.forward_native, then
// RotaryEmbedding.forward_native with the cos/sin cache in the query's
// dtype, then reshape_and_cache_flash), modelled here in C++ with a
// rounding to the source dtype after each bf16/fp16 op, as eager torch
// rounds. The two differ by rounding only; docs/CONTRACT.md ("Against the
// unfused sequence") derives, per element, how far apart they may be, and
// every element of both caches and of q_out must be within that bound.
//
// The kernels run on the host (kvgen's JIT) on PrologueCases' inputs: the
// launcher given to prologue::check() runs the kernel, then reads the
// inputs and outputs back from the ABI's parameters and compares them with
// the unfused model. check() also compares with the fp32 reference, as
// kvgen-prologue-suite does.
//
//   kvgen-prologue-unfused              every bf16/fp16-source kv.append
//                                       case, bf16/fp16 and static fp8
//                                       caches
//   kvgen-prologue-unfused --filter=S   only those whose name contains S
//   kvgen-prologue-unfused --break=B    puts bug B into the unfused model
//                                       (sign: the rotation's sign flipped;
//                                       weight: the norm's weight dropped;
//                                       pair: NeoX and GPT-J pairs swapped)
//                                       and passes only where the bound
//                                       catches it in every kernel it
//                                       touches: the bound is tight enough
//                                       to see a real bug
//
//===----------------------------------------------------------------------===//

#include "PrologueCases.h"
#include "PrologueHost.h"

#include "conformance/Quant.h"
#include "conformance/Reference.h"

#include "kvgen/Pipeline/Description.h"
#include "kvgen/Pipeline/HostJIT.h"
#include "kvgen/Pipeline/Pipeline.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <string>
#include <vector>

using namespace kvgen;
using namespace kvgen::conformance;
using namespace kvgen::prologue;

namespace {

/// A deliberate bug in the unfused model, to show that the bound sees it.
enum class Break { None, Sign, Weight, Pair };

/// Whether `bug` changes what the model computes for `spec`.
bool touches(Break bug, const PrologueSpec &spec) {
  switch (bug) {
  case Break::None:
    return false;
  case Break::Sign:
    return spec.rope != Rope::None;
  case Break::Weight:
    return spec.norm;
  case Break::Pair:
    // On two elements NeoX and GPT-J pair the same two.
    return spec.rope != Rope::None && spec.rotaryDim > 2;
  }
  return false;
}

/// The largest error seen, as a fraction of its bound, per group of
/// descriptions (source -> cache).
struct Stats {
  double maxRatio = 0;   // |fused - unfused| / bound, 16-bit outputs
  double modelRatio = 0; // |unfused - exact| / the model's share
  int maxCodeDiff = 0;   // fp8: ordered encodings
  double fp8Ratio = 0;   // fp8: least |fused - unfused| / bound
  int64_t fp8Elements = 0, fp8Differ = 0, fp8PastOne = 0, elements = 0;
};

/// `value` (an fp32 result) rounded to `type`, as a torch op of that dtype
/// stores it.
float roundTo(float value, DType type) {
  return elementToFloat(floatToElement(value, type), type);
}

/// One head: the exact value of each element (real arithmetic on the
/// inputs, in double), the magnitude S its error bound scales with, and
/// whether RoPE rotated it.
struct Exact {
  std::vector<double> value, scale;
  std::vector<bool> rotated;
};

/// The pairs RoPE rotates: (a, b) for i < R/2.
std::pair<int64_t, int64_t> pairOf(Rope style, int64_t half, int64_t i) {
  if (style == Rope::Neox)
    return {i, i + half};
  return {2 * i, 2 * i + 1};
}

Exact exactHead(const PrologueSpec &spec, const std::vector<float> &x,
                const std::vector<float> &w, float eps, const float *cs) {
  const int64_t D = static_cast<int64_t>(x.size());
  Exact e;
  e.value.assign(x.begin(), x.end());
  e.rotated.assign(D, false);
  if (spec.norm) {
    double sum = 0;
    for (float v : x)
      sum += double(v) * double(v);
    double r = 1.0 / std::sqrt(sum / double(D) + double(eps));
    for (int64_t d = 0; d < D; ++d)
      e.value[d] = double(x[d]) * r * double(w[d]);
  }
  e.scale.resize(D);
  for (int64_t d = 0; d < D; ++d)
    e.scale[d] = std::fabs(e.value[d]);
  if (spec.rope == Rope::None)
    return e;
  const int64_t half = spec.rotaryDim / 2;
  std::vector<double> y = e.value;
  for (int64_t i = 0; i < half; ++i) {
    auto [a, b] = pairOf(spec.rope, half, i);
    double c = cs[i], s = cs[half + i];
    e.value[a] = y[a] * c - y[b] * s;
    e.value[b] = y[b] * c + y[a] * s;
    e.scale[a] = std::fabs(y[a] * c) + std::fabs(y[b] * s);
    e.scale[b] = std::fabs(y[b] * c) + std::fabs(y[a] * s);
    e.rotated[a] = e.rotated[b] = true;
  }
  return e;
}

/// vLLM's unfused sequence on one head, `src` the source dtype: RMSNorm
/// (fp32 up to the normalized value, rounded to `src`, times the weight in
/// `src`), then RoPE, each product and each sum or difference a torch op of
/// `src` (computed in fp32, rounded to `src`).
std::vector<float> unfusedHead(const PrologueSpec &spec, DType src,
                               const std::vector<float> &x,
                               const std::vector<float> &w, float eps,
                               const float *cs, Break bug) {
  const int64_t D = static_cast<int64_t>(x.size());
  std::vector<float> y = x;
  if (spec.norm) {
    // x.float(); x.pow(2).mean(-1); x * rsqrt(var + eps); .to(src) * w. The
    // order of the mean's sum is torch's own; the bound allows any.
    float sum = 0;
    for (float v : x) {
      float square = v * v;
      sum = sum + square;
    }
    float variance = sum / float(D);
    float r = 1.0f / std::sqrt(variance + eps);
    for (int64_t d = 0; d < D; ++d) {
      float n = roundTo(x[d] * r, src);
      y[d] = bug == Break::Weight ? n : roundTo(n * w[d], src);
    }
  }
  if (spec.rope == Rope::None)
    return y;
  const int64_t half = spec.rotaryDim / 2;
  Rope style = spec.rope;
  if (bug == Break::Pair)
    style = style == Rope::Neox ? Rope::Gptj : Rope::Neox;
  std::vector<float> out = y;
  for (int64_t i = 0; i < half; ++i) {
    auto [a, b] = pairOf(style, half, i);
    float c = cs[i], s = cs[half + i];
    // o1 = x1 * cos - x2 * sin; o2 = x2 * cos + x1 * sin.
    float x1c = roundTo(y[a] * c, src), x2s = roundTo(y[b] * s, src);
    float x2c = roundTo(y[b] * c, src), x1s = roundTo(y[a] * s, src);
    out[a] = roundTo(bug == Break::Sign ? x1c + x2s : x1c - x2s, src);
    out[b] = roundTo(bug == Break::Sign ? x2c - x1s : x2c + x1s, src);
  }
  return out;
}

/// docs/CONTRACT.md, "Against the unfused sequence": the bound for a source
/// dtype, a head of `headDim` and norm weights of magnitude at most
/// `maxWeight`, as a function of the element's exact value E and its scale
/// S (|y[a] c| + |y[b] s| for a rotated element, |E| otherwise).
struct Bound {
  double u;   // the source dtype's unit roundoff: half its ulp at 1
  double ut;  // one torch op of it: fp32, then rounded to it
  double rho; // the fp32 work of either path up to the normalized value
  double alpha, beta, epsF;
  double abs; // underflow, in all: (8 + 4 W) eta

  Bound(DType src, int64_t headDim, bool norm, double maxWeight) {
    const double u32 = std::ldexp(1.0, -24);
    u = std::ldexp(1.0, src == DType::BF16 ? -8 : -11);
    ut = u + 2 * u32;
    // Half the dtype's smallest subnormal.
    double eta = std::ldexp(1.0, src == DType::BF16 ? -134 : -25);
    rho = (double(headDim) / 2 + 16) * u32;
    alpha = norm ? (1 + rho) * (1 + ut) * (1 + ut) - 1 : 0;
    beta = (1 + alpha) * (1 + ut) - 1;
    epsF = rho + 3 * u32;
    abs = (8 + 4 * (norm ? maxWeight : 0)) * eta;
  }
  /// How far the unfused value may be from the exact one, underflow aside.
  double unfused(double exact, double scale, bool rotated) const {
    if (!rotated)
      return alpha * scale;
    return beta * (1 + ut) * scale + ut * std::fabs(exact);
  }
  /// How far the fused fp32 value may be from the exact one, underflow
  /// aside.
  double fused(double scale) const { return epsF * scale; }
  /// How far the fused value may be from the unfused one before the
  /// quantization of an fp8 cache.
  double beforeQuant(double exact, double scale, bool rotated) const {
    return unfused(exact, scale, rotated) + fused(scale) + abs;
  }
  /// How far the fused value rounded to the source dtype may be from the
  /// unfused one.
  double rounded(double exact, double scale, bool rotated) const {
    return beforeQuant(exact, scale, rotated) +
           u * (std::fabs(exact) + fused(scale));
  }
};

/// An fp8 byte's place in value order (-0 and +0 alike).
int ordered(uint8_t byte) {
  return byte & 0x80 ? -int(byte & 0x7f) : int(byte);
}

/// What one launch is given and left, by ABI parameter.
struct Params {
  std::map<abi::Param, HostBuffer> buffers;
  std::map<abi::Param, int64_t> scalars;
  std::string missing;

  int64_t scalar(abi::Param p) {
    auto it = scalars.find(p);
    if (it != scalars.end())
      return it->second;
    missing += std::string(" ") + abi::paramName(p);
    return 0;
  }
  template <typename T> T *buffer(abi::Param p) {
    auto it = buffers.find(p);
    if (it != buffers.end())
      return static_cast<T *>(it->second.data);
    missing += std::string(" ") + abi::paramName(p);
    return nullptr;
  }
};

/// Compares what the kernel left in `buffers` with the unfused model;
/// appends failures.
void compareUnfused(const Case &c, const Kernel &kernel, int64_t numTokens,
                    std::vector<HostBuffer> &buffers,
                    std::vector<int32_t> &scalars,
                    const std::vector<bool> &isBuffer, Break bug, Stats &stats,
                    std::vector<std::string> &failures) {
  using P = abi::Param;
  const Description &d = c.desc;
  const PrologueSpec &spec = c.spec;
  const DType src = d.sourceDtype;
  const int64_t H = d.numKvHeads, D = d.headDim, qH = spec.qHeads;
  const int64_t R = spec.rotaryDim;
  Params p;
  size_t b = 0, s = 0;
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    if (isBuffer[i])
      p.buffers[kernel.params[i]] = buffers[b++];
    else
      p.scalars[kernel.params[i]] = scalars[s++];
  }
  auto srcAt = [&](P param, int64_t offset) {
    const uint8_t *base = p.buffer<uint8_t>(param);
    return base ? elementToFloat(loadBits(base + offset * dtypeBytes(src), src),
                                 src)
                : 0.0f;
  };
  const int64_t *slots = p.buffer<int64_t>(P::SlotMapping);
  const int64_t *positions =
      spec.rope != Rope::None ? p.buffer<int64_t>(P::RopePositions) : nullptr;
  const float *epsilon = spec.norm ? p.buffer<float>(P::Epsilon) : nullptr;
  uint8_t *keyCache = p.buffer<uint8_t>(P::KeyCache);
  uint8_t *valueCache = p.buffer<uint8_t>(P::ValueCache);
  uint8_t *qOut = qH > 0 ? p.buffer<uint8_t>(P::QOut) : nullptr;
  const float *keyScale = d.quant ? p.buffer<float>(P::KeyScale) : nullptr;
  const float *valueScale = d.quant ? p.buffer<float>(P::ValueScale) : nullptr;
  int64_t kStride[3] = {p.scalar(P::KeyStrideToken), p.scalar(P::KeyStrideHead),
                        p.scalar(P::KeyStrideDim)};
  int64_t vStride[3] = {p.scalar(P::ValueStrideToken),
                        p.scalar(P::ValueStrideHead),
                        p.scalar(P::ValueStrideDim)};
  int64_t qStride[3] = {0, 0, 0}, qOutStride[3] = {0, 0, 0};
  if (qH > 0) {
    qStride[0] = p.scalar(P::QueryStrideToken);
    qStride[1] = p.scalar(P::QueryStrideHead);
    qStride[2] = p.scalar(P::QueryStrideDim);
    qOutStride[0] = p.scalar(P::QOutStrideToken);
    qOutStride[1] = p.scalar(P::QOutStrideHead);
    qOutStride[2] = p.scalar(P::QOutStrideDim);
  }
  int64_t kcStride[4] = {
      p.scalar(P::KeyCacheStrideBlock), p.scalar(P::KeyCacheStrideHead),
      p.scalar(P::KeyCacheStridePos), p.scalar(P::KeyCacheStrideDim)};
  int64_t vcStride[4] = {
      p.scalar(P::ValueCacheStrideBlock), p.scalar(P::ValueCacheStrideHead),
      p.scalar(P::ValueCacheStridePos), p.scalar(P::ValueCacheStrideDim)};
  const int64_t capacity = p.scalar(P::NumBlocks) * d.blockSize;
  const int64_t maxPosition =
      spec.rope != Rope::None ? p.scalar(P::MaxPosition) : 0;
  if (!p.missing.empty()) {
    failures.push_back("the plan lacks" + p.missing);
    return;
  }

  std::vector<float> kw(D, 1.0f), qw(D, 1.0f), cs(std::max<int64_t>(R, 1));
  if (spec.norm)
    for (int64_t e = 0; e < D; ++e) {
      kw[e] = srcAt(P::KNormWeight, e);
      if (qH > 0)
        qw[e] = srcAt(P::QNormWeight, e);
    }
  auto largest = [](const std::vector<float> &w) {
    double m = 0;
    for (float v : w)
      m = std::max(m, std::fabs(double(v)));
    return m;
  };
  const Bound kBound(src, D, spec.norm, largest(kw));
  const Bound qBound(src, D, spec.norm, largest(qw));
  const float eps = epsilon ? *epsilon : 0.0f;
  int bad = 0;
  auto fail = [&](const std::string &what) {
    if (bad++ < 4)
      failures.push_back(what);
  };
  auto where = [](const char *what, int64_t t, int64_t h, int64_t e) {
    return std::string(what) + "[t " + std::to_string(t) + ", h " +
           std::to_string(h) + ", d " + std::to_string(e) + "]";
  };
  auto rowOf = [&](P param, const int64_t *stride, int64_t t, int64_t h) {
    std::vector<float> row(D);
    for (int64_t e = 0; e < D; ++e)
      row[e] = srcAt(param, t * stride[0] + h * stride[1] + e * stride[2]);
    return row;
  };
  // One element of a 16-bit output: fused `got` against unfused `want`.
  auto check16 = [&](const Bound &bound, const std::string &at, float got,
                     float want, double exact, double scale, bool rotated) {
    double limit = bound.rounded(exact, scale, rotated);
    double err = std::fabs(double(got) - double(want));
    ++stats.elements;
    stats.maxRatio = std::max(stats.maxRatio, err / limit);
    if (!(err <= limit))
      fail(at + ": fused " + std::to_string(got) + ", unfused " +
           std::to_string(want) + ", bound " + std::to_string(limit));
  };
  // The model's own error: a check of the derivation.
  auto checkModel = [&](const Bound &bound, const std::string &at, float want,
                        double exact, double scale, bool rotated) {
    if (bug != Break::None)
      return;
    double limit = bound.unfused(exact, scale, rotated) + bound.abs;
    double err = std::fabs(double(want) - exact);
    if (limit > 0)
      stats.modelRatio = std::max(stats.modelRatio, err / limit);
    if (!(err <= limit))
      fail(at + ": the unfused model is " + std::to_string(err) +
           " from the exact value, past its derived " + std::to_string(limit));
  };

  for (int64_t t = 0; t < numTokens; ++t) {
    if (positions && (positions[t] < 0 || positions[t] >= maxPosition))
      continue;
    for (int64_t i = 0; i < R; ++i)
      cs[i] = srcAt(P::CosSinCache, positions[t] * R + i);
    for (int64_t h = 0; h < qH; ++h) {
      std::vector<float> x = rowOf(P::Query, qStride, t, h);
      Exact ex = exactHead(spec, x, qw, eps, cs.data());
      std::vector<float> un =
          unfusedHead(spec, src, x, qw, eps, cs.data(), bug);
      for (int64_t e = 0; e < D; ++e) {
        int64_t at = t * qOutStride[0] + h * qOutStride[1] + e * qOutStride[2];
        float got =
            elementToFloat(loadBits(qOut + at * dtypeBytes(src), src), src);
        check16(qBound, where("q_out", t, h, e), got, un[e], ex.value[e],
                ex.scale[e], ex.rotated[e]);
        checkModel(qBound, where("q_out", t, h, e), un[e], ex.value[e],
                   ex.scale[e], ex.rotated[e]);
      }
    }
    if (slots[t] < 0 || slots[t] >= capacity)
      continue;
    const int64_t block = slots[t] / d.blockSize, pos = slots[t] % d.blockSize;
    const DType cacheType = d.cacheDtype;
    for (int64_t h = 0; h < H; ++h) {
      std::vector<float> x = rowOf(P::Key, kStride, t, h);
      std::vector<float> v = rowOf(P::Value, vStride, t, h);
      Exact ex = exactHead(spec, x, kw, eps, cs.data());
      std::vector<float> un =
          unfusedHead(spec, src, x, kw, eps, cs.data(), bug);
      int64_t scaleAt = d.quant ? staticScaleIndex(d, t, h, block) : 0;
      for (int64_t e = 0; e < D; ++e) {
        int64_t kAt = block * kcStride[0] + h * kcStride[1] +
                      pos * kcStride[2] + e * kcStride[3];
        int64_t vAt = block * vcStride[0] + h * vcStride[1] +
                      pos * vcStride[2] + e * vcStride[3];
        uint32_t gotK =
            loadBits(keyCache + kAt * dtypeBytes(cacheType), cacheType);
        uint32_t gotV =
            loadBits(valueCache + vAt * dtypeBytes(cacheType), cacheType);
        checkModel(kBound, where("key_cache", t, h, e), un[e], ex.value[e],
                   ex.scale[e], ex.rotated[e]);
        // V: reshape_and_cache_flash's cast or quantization, exactly.
        uint32_t wantV =
            d.quant ? quantize(d.quant->kind, v[e], valueScale[scaleAt],
                               d.quant->reciprocal)
                    : floatToElement(v[e], cacheType);
        if (gotV != wantV)
          fail(where("value_cache", t, h, e) + ": got bits " +
               std::to_string(gotV) + ", want " + std::to_string(wantV));
        if (!d.quant) {
          check16(kBound, where("key_cache", t, h, e),
                  elementToFloat(gotK, cacheType), un[e], ex.value[e],
                  ex.scale[e], ex.rotated[e]);
          continue;
        }
        // fp8: the fused value is within `limit` of the unfused one before
        // quantization, and quantization is monotone, so its byte lies
        // between the bytes of the interval's ends.
        double limit =
            kBound.beforeQuant(ex.value[e], ex.scale[e], ex.rotated[e]);
        float lo = std::nextafter(float(double(un[e]) - limit), -INFINITY);
        float hi = std::nextafter(float(double(un[e]) + limit), INFINITY);
        float scale = keyScale[scaleAt];
        auto q = [&](float value) {
          return ordered(
              quantize(d.quant->kind, value, scale, d.quant->reciprocal));
        };
        int got = ordered(uint8_t(gotK)), want = q(un[e]);
        int low = q(lo), high = q(hi);
        ++stats.fp8Elements;
        stats.fp8Differ += got != want;
        stats.fp8PastOne += std::abs(got - want) > 1;
        stats.maxCodeDiff = std::max(stats.maxCodeDiff, std::abs(got - want));
        // The least the fused value can have been from the unfused one:
        // the distance from it to the values that round to the fused byte
        // (half-way to the byte's neighbours), as a fraction of the bound.
        if (got != want) {
          auto value = [&](int o) -> double {
            if (std::abs(o) > 0x7e)
              return o > 0 ? INFINITY : -INFINITY;
            uint8_t byte = o >= 0 ? uint8_t(o) : uint8_t(0x80 | -o);
            return double(decode(d.quant->kind, byte)) * scale;
          };
          double mid = value(got);
          double from = (mid + value(got - 1)) / 2;
          double to = (mid + value(got + 1)) / 2;
          double dist = std::max({0.0, from - un[e], un[e] - to});
          stats.fp8Ratio = std::max(stats.fp8Ratio, dist / limit);
        }
        if (got < low || got > high)
          fail(where("key_cache", t, h, e) + ": fused fp8 " +
               std::to_string(got) + ", unfused " + std::to_string(want) +
               ", allowed [" + std::to_string(low) + ", " +
               std::to_string(high) + "] (ordered encodings)");
      }
    }
  }
  if (bad > 4)
    failures.push_back("... " + std::to_string(bad) + " in all");
}

/// The descriptions this covers: kv.append from bf16 or fp16 into a cache
/// of the same dtype or a static fp8 one, with vLLM's Q and cos/sin cache
/// (in the source dtype): vLLM's unfused sequence has neither an fp8 Q nor
/// an f32 cos/sin cache under a 16-bit source.
bool covered(const Case &c) {
  const Description &d = c.desc;
  if (c.spec.qQuant || c.spec.f32CosSin)
    return false;
  // In place, the kernel has rotated query by the time this reads it; the
  // kernels are those of the cases beside them, which query does not alias
  // (kvgen-prologue-suite checks the in-place bytes against the reference).
  if (c.inPlace)
    return false;
  if (d.kind != Kind::Append ||
      (d.sourceDtype != DType::BF16 && d.sourceDtype != DType::F16))
    return false;
  if (d.quant)
    return !d.quant->dynamic() && d.quant->kind == QuantKind::FP8E4M3;
  return d.cacheDtype == d.sourceDtype;
}

std::string groupOf(const Description &d) {
  return std::string(dtypeName(d.sourceDtype)) + " -> " +
         (d.quant ? d.quant->tag() : std::string(dtypeName(d.cacheDtype)));
}

} // namespace

int main(int argc, char **argv) {
  std::string filter;
  Break bug = Break::None;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--filter=", 0) == 0)
      filter = arg.substr(9);
    else if (arg == "--break=sign")
      bug = Break::Sign;
    else if (arg == "--break=weight")
      bug = Break::Weight;
    else if (arg == "--break=pair")
      bug = Break::Pair;
    else {
      std::cerr << "usage: kvgen-prologue-unfused [--filter=S] "
                   "[--break=sign|weight|pair]\n";
      return 2;
    }
  }
  mlir::DialectRegistry registry;
  registerKVGenDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  std::string error;
  context.getDiagEngine().registerHandler([&](mlir::Diagnostic &diag) {
    error = diag.str();
    return mlir::success();
  });

  std::map<std::string, Stats> stats;
  int descriptions = 0, runs = 0, failed = 0, caught = 0;
  uint32_t seed = 1;
  for (const Case &c : cases()) {
    if (!covered(c) || c.desc.name.find(filter) == std::string::npos)
      continue;
    if (bug != Break::None && !touches(bug, c.spec))
      continue;
    ++descriptions;
    mlir::OwningOpRef<mlir::ModuleOp> module =
        parseDescription(moduleText(c), &context);
    if (!module) {
      std::cerr << "FAIL " << c.desc.name << ": does not parse: " << error
                << "\n";
      ++failed;
      continue;
    }
    mlir::FailureOr<HostKernels> kernels = compileForHost(*module);
    if (mlir::failed(kernels)) {
      std::cerr << "FAIL " << c.desc.name << ": " << error << "\n";
      ++failed;
      continue;
    }
    Stats &group = stats[groupOf(c.desc)];
    for (const KernelPlan &plan : kernels->getPlans()) {
      HostKernels::Entry entry = kernels->lookup(plan.name);
      ++runs;
      if (!entry) {
        std::cerr << "FAIL " << plan.name << ": no entry point\n";
        ++failed;
        continue;
      }
      Kernel kernel = kernelOf(plan);
      std::vector<std::string> unfused;
      Launcher launch =
          hostLauncher(entry, [&](const Kernel &k, int64_t numTokens,
                                  std::vector<HostBuffer> &buffers,
                                  std::vector<int32_t> &scalars,
                                  const std::vector<bool> &isBuffer) {
            compareUnfused(c, k, numTokens, buffers, scalars, isBuffer, bug,
                           group, unfused);
            return std::string();
          });
      std::vector<std::string> reference = check(c, kernel, seed++, launch);
      if (bug != Break::None) {
        // Only the unfused comparison sees the model's bug.
        if (!unfused.empty() && caught++ == 0)
          std::cout << "first caught: " << kernel.name << ": " << unfused[0]
                    << "\n";
        continue;
      }
      for (const std::string &f : reference)
        unfused.push_back("(against the fp32 reference) " + f);
      if (unfused.empty())
        continue;
      ++failed;
      std::cerr << "FAIL " << kernel.name << " " << c.spec.attr() << "\n";
      for (const std::string &f : unfused)
        std::cerr << "  " << f << "\n";
    }
  }
  for (const auto &[name, st] : stats) {
    std::cout << "  " << name << ": " << st.elements
              << " 16-bit elements, largest |fused - unfused| / bound "
              << st.maxRatio << "; unfused model's error / its share "
              << st.modelRatio;
    if (st.fp8Elements)
      std::cout << "; " << st.fp8Elements << " fp8 elements, " << st.fp8Differ
                << " differ from the unfused byte (" << st.fp8PastOne
                << " by more than one step, at most " << st.maxCodeDiff
                << "), the fused value at least " << st.fp8Ratio
                << " of the bound from the unfused one";
    std::cout << "\n";
  }
  if (bug != Break::None) {
    std::cout << "kvgen-prologue-unfused " << argv[1] << ": the bound caught "
              << caught << " of " << runs << " kernels the bug touches, "
              << failed << " did not run\n";
    return failed == 0 && runs > 0 && caught == runs ? 0 : 1;
  }
  std::cout << "kvgen-prologue-unfused: " << descriptions << " descriptions, "
            << runs << " kernels, " << failed << " failed\n";
  return failed == 0 && descriptions > 0 ? 0 : 1;
}
