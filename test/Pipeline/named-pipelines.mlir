// kvgen's pipelines by name, on a hand-written description: what kvgen runs
// for --emit=loops, gpu, nvvm and the host target.
// RUN: kvgen-opt --kv-lower-to-loops %s | FileCheck %s --check-prefix=LOOPS
// RUN: kvgen-opt --kv-lower-to-gpu %s | FileCheck %s --check-prefix=GPU
// RUN: kvgen-opt --kv-lower-to-nvvm=chip=sm_80 %s | FileCheck %s --check-prefix=NVVM
// RUN: kvgen-opt --kv-lower-to-host %s | FileCheck %s --check-prefix=HOST
// A PTX ISA older than the chip's aborted in the back end.
// RUN: not kvgen-opt --kv-lower-to-nvvm="chip=sm_100 features=+ptx80" %s 2>&1 | FileCheck %s --check-prefix=OLDPTX
// OLDPTX: error: kv-lower-to-nvvm: features=+ptx80: sm_100 needs PTX ISA 8.6 (+ptx86) or later
// A bad description gets the verifier's diagnostic from every pipeline, not
// a crash.
// RUN: not kvgen-opt --kv-lower-to-loops %S/Inputs/zero-block-size.mlir 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not kvgen-opt --kv-lower-to-gpu %S/Inputs/zero-block-size.mlir 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not kvgen-opt --kv-lower-to-nvvm %S/Inputs/zero-block-size.mlir 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not kvgen-opt --kv-lower-to-host %S/Inputs/zero-block-size.mlir 2>&1 | FileCheck %s --check-prefix=BAD
// So does a loop nest the GPU mapping cannot map.
// RUN: not kvgen-opt --kv-lower-to-gpu %S/Inputs/no-launch.mlir 2>&1 | FileCheck %s --check-prefix=NOLAUNCH
// RUN: not kvgen-opt --kv-lower-to-nvvm %S/Inputs/no-launch.mlir 2>&1 | FileCheck %s --check-prefix=NOLAUNCH
// A chip the NVPTX back end does not know, or an unknown option, is refused
// before anything runs.
// RUN: not kvgen-opt --kv-lower-to-nvvm=chip=sm_99 %s 2>&1 | FileCheck %s --check-prefix=CHIP
// RUN: not kvgen-opt --kv-lower-to-nvvm=bogus=1 %s 2>&1 | FileCheck %s --check-prefix=OPTION

kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 2,
    head_dim = 64, dtype = bf16> from bf16

// LOOPS: func.func @a(
// LOOPS: scf.parallel
// LOOPS: func.func @a_scalar(

// GPU: gpu.module @kv_kernels
// GPU: gpu.func @a({{.*}} kernel
// GPU-SAME: kv.launch = #kv.launch<threads_x = 16, tokens_per_block = 8, chunks_per_token = 16>

// NVVM: gpu.module @kv_kernels [#nvvm.target<O = 3, chip = "sm_80", features = "+ptx71">]
// NVVM: llvm.func @a(
// NVVM-SAME: nvvm.kernel

// HOST-NOT: gpu.module
// HOST: llvm.func @a(
// HOST: llvm.func @a_scalar(

// BAD: zero-block-size.mlir:{{[0-9]+}}:{{[0-9]+}}: error: block_size must be positive, got 0
// NOLAUNCH: no-launch.mlir:{{[0-9]+}}:{{[0-9]+}}: error: a kv loop nest needs 'kv.launch = #kv.launch<threads_x = ..., tokens_per_block = ..., chunks_per_token = ...>'
// CHIP: kv-lower-to-nvvm: chip=sm_99 is not a chip kvgen generates for; expected one of {{.*}}sm_90
// OPTION: no such option bogus
