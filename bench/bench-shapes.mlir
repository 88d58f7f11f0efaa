// A block size that is not a power of two, as hybrid attention/Mamba models
// get: paged NHD, 8 KV heads of 128, bf16, block 528, to compare with
// bench.mlir's bench_paged_nhd_bs512 (the target: within 3% at every size).
// Built into bench-shapes.bundle.json when KVBENCH_SHAPE_ROWS is ON (it needs
// a kvgen that accepts any block size).
module {
  kv.append @bench_paged_nhd_bs528 : !kv.cache<layout = paged_nhd,
      block_size = 528, num_kv_heads = 8, head_dim = 128, dtype = bf16>
      from bf16
}
