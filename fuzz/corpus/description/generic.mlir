"builtin.module"() ({
  "kv.append"() <{cache = !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16>, source_type = bf16, sym_name = "a"}> : () -> ()
}) {kv.note = [affine_map<(d0) -> (d0 * 2)>, tuple<i8, () -> f32>, "str\"ing"]} : () -> ()
