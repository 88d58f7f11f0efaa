// The code-generation options are pass and pipeline options, listed by
// --help: kv-to-loops' plan options, kv-loops-to-gpu's elide-token-check,
// and the named pipelines' (each pass's option, and the NVVM stage's).
// RUN: kvgen-opt --help | FileCheck %s --check-prefix=HELP
// HELP:      --kv-loops-to-gpu
// HELP-NEXT:   --elide-token-check
// HELP:      --kv-to-loops
// HELP-NEXT:   --chip=<string>
// HELP-NEXT:   --chunks-per-thread=<long>
// HELP-NEXT:   --fast-division
// HELP-NEXT:   --min-blocks-per-sm=<long>
// HELP-NEXT:   --tokens-per-block=<long>
// HELP-NEXT:   --whole-warps
// HELP-NEXT:   --wide-max-tokens=<long>
// HELP-NEXT:   --wide-min-tokens=<long>
// HELP:      --kv-lower-to-nvvm
// HELP-NEXT:   --chip=<string>
// HELP-NEXT:   --chunks-per-thread=<long>
// HELP-NEXT:   --elide-token-check
// HELP-NEXT:   --fast-division
// HELP-NEXT:   --features=<string>
// HELP-NEXT:   --min-blocks-per-sm=<long>
// HELP-NEXT:   --noalias
// HELP-NEXT:   --pin-addresses
// HELP-NEXT:   --tokens-per-block=<long>
// HELP-NEXT:   --whole-warps
// HELP-NEXT:   --wide-max-tokens=<long>
// HELP-NEXT:   --wide-min-tokens=<long>

// A pipeline passes its options to the stage that takes them.
// RUN: kvgen-opt '--kv-lower-to-loops=chunks-per-thread=2' %s | FileCheck %s --check-prefix=LOOPS
// LOOPS: kv.launch = #kv.launch<threads_x = 64, tokens_per_block = 2, chunks_per_token = 128>
// RUN: kvgen-opt '--kv-lower-to-gpu=elide-token-check=false' %s | FileCheck %s --check-prefix=CHECKED
// RUN: kvgen-opt --kv-lower-to-gpu %s | FileCheck %s --check-prefix=ELIDED
// The vector kernel has one token a block: its bound check is elided, unless
// the option keeps it.
// CHECKED-LABEL: gpu.func @a(
// CHECKED: arith.cmpi ult, %{{.*}}, %{{.*}} : index
// CHECKED: scf.if
// ELIDED-LABEL: gpu.func @a(
// ELIDED-NOT: arith.cmpi ult, {{.*}} : index
// ELIDED: gpu.return
// RUN: kvgen-opt '--kv-lower-to-nvvm=noalias=false' %s | FileCheck %s --check-prefix=ALIASED
// RUN: kvgen-opt --kv-lower-to-nvvm %s | FileCheck %s --check-prefix=NOALIAS
// ALIASED-NOT: llvm.noalias
// NOALIAS: llvm.noalias

// An option of a stage the pipeline does not run is refused, not ignored;
// so is a value the plan cannot use.
// RUN: not kvgen-opt '--kv-lower-to-loops=noalias=false' %s 2>&1 | FileCheck %s --check-prefix=UNUSED
// UNUSED: error: kv-lower-to-loops: noalias is an option of a stage this pipeline does not run
// RUN: not kvgen-opt '--kv-lower-to-gpu=pin-addresses=false' %s 2>&1 | FileCheck %s --check-prefix=UNUSEDPIN
// UNUSEDPIN: error: kv-lower-to-gpu: pin-addresses is an option of a stage this pipeline does not run
// RUN: not kvgen-opt '--kv-lower-to-host=elide-token-check=false' %s 2>&1 | FileCheck %s --check-prefix=HOSTGPU
// HOSTGPU: error: kv-lower-to-host: elide-token-check is an option of a stage this pipeline does not run
// RUN: not kvgen-opt '--kv-lower-to-host=chip=sm_80' %s 2>&1 | FileCheck %s --check-prefix=HOSTCHIP
// HOSTCHIP: error: kv-lower-to-host: chip is an option of a stage this pipeline does not run
// RUN: not kvgen-opt '--kv-lower-to-loops=min-blocks-per-sm=-2' %s 2>&1 | FileCheck %s --check-prefix=VALUE
// VALUE: error: kv-lower-to-loops: min-blocks-per-sm=-2: expected -1 (the plan's choice), 0 or more

kv.append @a : !kv.cache<layout = paged_nhd, block_size = 16, num_kv_heads = 8,
    head_dim = 128, dtype = bf16> from bf16
