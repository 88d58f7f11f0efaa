"""The fused prologue benchmark's torch reference of vLLM's unfused sequence,
the per-element check against it (docs/CONTRACT.md, "Against the unfused
sequence"), and the check's own check (a torch model of the fused kernel,
whole and broken) that --cpu-dry-run runs."""

import torch

from prologue_common import D, EPS, FP8_SCALE, KH, ROT, Inputs, split

# ----------------------------------------------------------------------------
# The torch reference and the check
# ----------------------------------------------------------------------------

def reference(qkv, pos, sh, norm):
    """vLLM's unfused sequence of torch ops: RMSNorm.forward_native (fp32,
    then the dtype, then * weight in the dtype) and
    RotaryEmbedding.forward_native with the cos/sin cache in the dtype (each
    op rounded to the dtype). Returns (q, k, v) in bf16 and the magnitude
    each element's bound is taken from: |y[a]| + |y[b]| of its NeoX pair,
    y the normalized head in fp32."""
    q, k, v = split(qkv)

    def rms(x, w):
        xf = x.float()
        var = xf.pow(2).mean(dim=-1, keepdim=True)
        y = xf * torch.rsqrt(var + EPS)
        return y.to(x.dtype) * w, y * w.float()

    if norm:
        q, yq = rms(q, sh["q_w"])
        k, yk = rms(k, sh["k_w"])
    else:
        yq, yk = q.float(), k.float()
    cos, sin = sh["cs"][pos].chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)

    def rope(x):
        x1, x2 = x[..., :ROT // 2], x[..., ROT // 2:ROT]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin,
                          x[..., ROT:]), dim=-1)

    def pair(y):
        a = y[..., :ROT // 2].abs() + y[..., ROT // 2:ROT].abs()
        return torch.cat((a, a, y[..., ROT:].abs()), dim=-1)

    return rope(q), rope(k), v, pair(yq), pair(yk)


U_BF16 = 2.0 ** -8


def bound(mag, norm):
    """docs/CONTRACT.md's bound between the fused and the unfused values: 5u
    of the pair's magnitude with norm, 3u without, a quarter more for the
    fp32 estimate of the exact value, and an absolute floor for values near
    zero."""
    return (5.0 if norm else 3.0) * 1.25 * U_BF16 * mag + 2.0 ** -24


def fp8_step(x, scale):
    """One e4m3 step at magnitude |x| (in the source's units)."""
    q = (x.abs() / scale).clamp(min=2.0 ** -6)
    return torch.exp2(torch.floor(torch.log2(q)) - 3) * scale


def compare(name, got, want, tol, fp8_scale=None):
    """The worst |got - want| / tol over the elements; > 1 fails."""
    g = got.float()
    w = want.float()
    if fp8_scale is not None:
        g = g * fp8_scale
        tol = tol + fp8_step(w.abs() + tol, fp8_scale)
    err = (g - w).abs()
    bad = ~torch.isfinite(g)
    worst = float((err / tol).max()) if err.numel() else 0.0
    if bool(bad.any()):
        worst = float("inf")
    return name, worst


def rows(cache, slots):
    return cache.view(-1, KH, D)[slots]


class Check:
    """One system's check at one size: (name, worst ratio) of each output."""

    def __init__(self):
        self.parts = []

    def add(self, part):
        self.parts.append(part)

    @property
    def ok(self):
        return all(r <= 1.0 for _, r in self.parts)

    def text(self):
        return ", ".join("%s %.2f" % (n, r) for n, r in self.parts)


# ----------------------------------------------------------------------------
# The check's own check (--cpu-dry-run): a torch model of the fused kernel
# passes it, the model broken as kvgen-prologue-unfused --break= breaks it
# fails it
# ----------------------------------------------------------------------------

def fused_model(qkv, pos, sh, norm, brk=None):
    """docs/CONTRACT.md's order in fp32 (x, RMSNorm, RoPE, one rounding),
    optionally broken: "sign" flips the rotation, "weight" drops the norm's
    weight, "pair" rotates GPT-J's pairs instead of NeoX's."""
    q, k, _ = split(qkv)
    cos, sin = sh["cs"][pos].float().chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)

    def head(x, w):
        x = x.float()
        if norm:
            r = 1.0 / torch.sqrt((x * x).sum(-1, keepdim=True) / D + EPS)
            x = x * r
            if brk != "weight":
                x = x * w.float()
        if brk == "pair":
            a, b = x[..., 0:ROT:2], x[..., 1:ROT:2]
        else:
            a, b = x[..., :ROT // 2], x[..., ROT // 2:ROT]
        sign = -1.0 if brk == "sign" else 1.0
        ra, rb = a * cos - sign * b * sin, b * cos + sign * a * sin
        if brk == "pair":
            out = torch.stack((ra, rb), dim=-1).flatten(-2)
        else:
            out = torch.cat((ra, rb), dim=-1)
        return torch.cat((out, x[..., ROT:]), dim=-1).to(torch.bfloat16)

    return head(q, sh["q_w"]), head(k, sh["k_w"])


def self_test(sh, dev, gen):
    """(what, passed) of each case: the model within the bound, each broken
    model outside it, for 33 tokens with and without norm."""
    results = []
    inp = Inputs(33, 1, sh, dev, gen, 2048)
    s = inp.s[0]
    for norm in (True, False):
        rq, rk, _, mq, mk = reference(s["qkv"], s["pos"], sh, norm)
        for brk in (None, "sign", "weight", "pair"):
            if brk == "weight" and not norm:
                continue
            fq, fk = fused_model(s["qkv"], s["pos"], sh, norm, brk)
            worst = max(compare("Q", fq, rq, bound(mq, norm))[1],
                        compare("K", fk, rk, bound(mk, norm))[1])
            passed = worst <= 1.0 if brk is None else worst > 1.0
            results.append(("model%s %s: worst %.2f of the bound" % (
                "" if norm else " (rope only)",
                "as built" if brk is None else "broken (%s)" % brk, worst),
                passed))
    # fp8: the model's K quantized as the cache would be.
    rq, rk, _, mq, mk = reference(s["qkv"], s["pos"], sh, True)
    fq, fk = fused_model(s["qkv"], s["pos"], sh, True)
    k8 = (fk.float() / FP8_SCALE).to(torch.float8_e4m3fn)
    worst = compare("K", k8, rk, bound(mk, True), FP8_SCALE)[1]
    results.append(("model fp8 K: worst %.2f of the bound" % worst,
                    worst <= 1.0))
    return results


def check_outputs(qkv, pos, slots, sh, norm, q_out, kc, vc, scale,
                  q_scale=None):
    """A system's Q out and cache rows against the torch reference."""
    rq, rk, rv, mq, mk = reference(qkv, pos, sh, norm)
    c = Check()
    c.add(compare("Q", q_out, rq, bound(mq, norm), q_scale))
    c.add(compare("K", rows(kc, slots), rk, bound(mk, norm), scale))
    zero = torch.zeros((), device=qkv.device) + 2.0 ** -24
    c.add(compare("V", rows(vc, slots), rv, zero, scale))
    return c
