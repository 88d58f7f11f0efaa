// RUN: kvgen-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(gpu.module(kv-programmatic-launch{chip=sm_90}))'
// RUN: not kvgen-opt %s --pass-pipeline='builtin.module(gpu.module(kv-programmatic-launch{chip=sm_80}))' 2>&1 | FileCheck %s --check-prefix=OLD
// RUN: not kvgen-opt %s --pass-pipeline='builtin.module(gpu.module(kv-programmatic-launch{chip=gfx90a}))' 2>&1 | FileCheck %s --check-prefix=BAD

// A chip without griddepcontrol, or a chip the pass cannot read, is refused
// by name.
// OLD: error: kv-programmatic-launch: programmatic dependent launch (griddepcontrol) needs sm_90 or newer; the target is sm_80
// BAD: error: kv-programmatic-launch: chip 'gfx90a' is not sm_<digits>[a|f]

// The pass places the griddepcontrols itself, once: a kernel that already
// has one is refused rather than given a second wait.
gpu.module @kv_kernels {
  gpu.func @twice(%in: memref<1xi64>) kernel {
    // expected-error @+1 {{the kernel already has a griddepcontrol}}
    nvvm.griddepcontrol wait
    %c0 = arith.constant 0 : index
    %v = memref.load %in[%c0] : memref<1xi64>
    gpu.return
  }
}
