// Affine maps and sets under the operator limit, on a kv op: parsed, then
// refused or lowered as the kv verifiers decide.
#map = affine_map<(d0, d1)[s0] -> (d0 * 2 + d1 floordiv 4 - s0 mod 3, -d0 ceildiv 2)>
#set = affine_set<(d0)[s0] : (d0 - s0 >= 0, -d0 + 10 == 0)>
module attributes {x.map = #map, x.set = #set} {
  kv.append @kv_append : !kv.cache<layout = paged_nhd, block_size = 16,
      num_kv_heads = 8, head_dim = 128, dtype = bf16> from bf16 {x.a = #map}
}
