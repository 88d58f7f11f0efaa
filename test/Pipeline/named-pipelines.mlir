// kvgen's pipelines by name, on a hand-written description: what kvgen runs
// for --emit=loops, gpu, nvvm and the host target.
// RUN: kvgen-opt --kv-lower-to-loops %s | FileCheck %s --check-prefix=LOOPS
// RUN: kvgen-opt --kv-lower-to-gpu %s | FileCheck %s --check-prefix=GPU
// RUN: kvgen-opt --kv-lower-to-nvvm=chip=sm_80 %s | FileCheck %s --check-prefix=NVVM
// RUN: kvgen-opt --kv-lower-to-host %s | FileCheck %s --check-prefix=HOST
// A bad description gets the verifier's diagnostic, not a crash.
// RUN: not kvgen-opt --kv-lower-to-nvvm %S/Inputs/zero-block-size.mlir 2>&1 | FileCheck %s --check-prefix=BAD

kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 2,
    head_dim = 64, dtype = bf16> from bf16

// LOOPS: func.func @a(
// LOOPS: scf.parallel
// LOOPS: func.func @a_scalar(

// GPU: gpu.module @kv_kernels
// GPU: gpu.func @a({{.*}} kernel
// GPU-SAME: kv.launch = #kv.launch<threads_x = 16, tokens_per_block = 8, chunks_per_token = 16>

// NVVM: gpu.module @kv_kernels [#nvvm.target<O = 3, chip = "sm_80", features = "+ptx80">]
// NVVM: llvm.func @a(
// NVVM-SAME: nvvm.kernel

// HOST-NOT: gpu.module
// HOST: llvm.func @a(
// HOST: llvm.func @a_scalar(

// BAD: zero-block-size.mlir:{{[0-9]+}}:{{[0-9]+}}: error: block_size must be positive, got 0
