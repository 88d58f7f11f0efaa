//===- KVPrologue.td - the fused prologue attribute --------*- tablegen -*-===//
//
// #kv.prologue<...>: RMSNorm and RoPE of K (and Q) inside an append
// (docs/dev/PROLOGUE.md). The attribute verifies what it can alone; what
// depends on the cache and the op (rotary_dim against head_dim, q_heads
// against num_kv_heads, the op's kind) is checked with the op
// (lib/Dialect/KV/IR/KVPrologue.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_DIALECT_KV_IR_KVPROLOGUE_TD
#define KVGEN_DIALECT_KV_IR_KVPROLOGUE_TD

// A bare keyword (norm = rms, rope = neox), empty where absent. The
// verifier names the keywords each parameter takes.
class KV_KeywordParameter<string desc>
    : StringRefParameter<desc, "\"\""> {
  let parser = [{[&]() -> ::mlir::FailureOr<::llvm::StringRef> {
      ::llvm::StringRef keyword;
      if (::mlir::failed($_parser.parseKeyword(&keyword)))
        return ::mlir::failure();
      return keyword;
    }()}];
  let printer = "$_printer << $_self";
}

def KV_PrologueAttr : KV_Attr<"Prologue", "prologue"> {
  let summary = "RMSNorm and RoPE of K (and Q) fused into an append";
  let description = [{
    Applied to each token's K heads (and, with `q_heads`, its Q heads)
    before the cache's quantization and store, in fp32, in the order
    docs/CONTRACT.md ("The fused prologue") gives:

    - `norm = rms`: RMSNorm of each head with the weights `k_norm_weight`
      (and `q_norm_weight`) `[head_dim]` and the f32 `epsilon`;
    - `rope = neox | gptj` with `rotary_dim` (even, at most `head_dim`):
      RoPE of each head's first `rotary_dim` elements at the token's
      position (`rope_positions`), from `cos_sin_cache [max_position,
      rotary_dim]` (cos then sin, vLLM's);
    - `q_heads`: Q `[num_tokens, q_heads, head_dim]` is read and written,
      transformed, to `q_out`, for every token (padding included);
    - `q_quant = fp8_e4m3` (with `q_heads`): `q_out` is fp8 e4m3, the
      transformed Q divided by the f32 `q_scale [1]`, saturated and rounded
      (the static quantization of the cache, FlashInfer's fused op's Q);
      without it `q_out` has the source dtype;
    - `cos_sin = f32` (with `rope`): the cos/sin cache is f32 whatever the
      source dtype (FlashInfer's); without it, the source dtype (vLLM's).

    V is unchanged.

    ```mlir
    #kv.prologue<q_heads = 32, norm = rms, rope = neox, rotary_dim = 128>
    ```
  }];
  let parameters = (ins DefaultValuedParameter<"int64_t", "0">:$q_heads,
                        KV_KeywordParameter<"the norm: rms">:$norm,
                        KV_KeywordParameter<"the rotation: neox or gptj">:$rope,
                        DefaultValuedParameter<"int64_t", "0">:$rotary_dim,
                        KV_KeywordParameter<"Q's quantization: fp8_e4m3">:$q_quant,
                        KV_KeywordParameter<"the cos/sin cache's dtype: f32">:$cos_sin);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    bool hasNorm() const { return getNorm() == "rms"; }
    bool hasRope() const { return !getRope().empty(); }
    /// NeoX pairs element i with i + rotary_dim / 2; GPT-J 2i with 2i + 1.
    bool isNeox() const { return getRope() == "neox"; }
    bool hasQ() const { return getQHeads() > 0; }
    /// q_out is fp8 e4m3, Q divided by q_scale (else the source dtype).
    bool hasQQuant() const { return getQQuant() == "fp8_e4m3"; }
    /// The cos/sin cache is f32 (else the source dtype).
    bool hasF32CosSin() const { return getCosSin() == "f32"; }
    /// The parameter groups of the kernel ABI this prologue adds.
    ::kvgen::abi::PrologueParts getParts() const {
      return {hasNorm(), hasRope(), hasQ(), hasQQuant()};
    }
  }];
}

#endif // KVGEN_DIALECT_KV_IR_KVPROLOGUE_TD
