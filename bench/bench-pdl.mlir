// The programmatic-dependent-launch row's description: the setup of
// docs/PERFORMANCE.md (paged NHD, bf16 in and in the cache, 8 KV heads of 128,
// block 16), compiled with --programmatic-launch: the kernels wait for the
// previous kernel in their stream (griddepcontrol) and the manifest says
// programmatic_launch. python/tests/test_gpu.py launches it after a producer
// of K/V, staged beside the other bench bundles.
module {
  kv.append @bench_pdl_paged_nhd : !kv.cache<layout = paged_nhd,
      block_size = 16, num_kv_heads = 8, head_dim = 128, dtype = bf16>
      from bf16
}
