// RUN: kvgen-opt %s --pass-pipeline='builtin.module(gpu.module(kv-expand-fp8-casts{nvvm=true}),convert-vector-to-llvm,convert-arith-to-llvm,convert-func-to-llvm,reconcile-unrealized-casts,gpu-module-to-binary{format=isa})' \
// RUN:   | FileCheck %s --check-prefix=SM100A
// RUN: sed -e 's/"sm_100a", features = "+ptx86"/"sm_90", features = "+ptx80"/' %s \
// RUN:   | kvgen-opt --pass-pipeline='builtin.module(gpu.module(kv-expand-fp8-casts{nvvm=true}),convert-vector-to-llvm,convert-arith-to-llvm,convert-func-to-llvm,reconcile-unrealized-casts,gpu-module-to-binary{format=isa})' \
// RUN:   | FileCheck %s --check-prefix=SM90

// The PTX of 16 elements' e2m1 rounding (one NVFP4 group) on each path:
// sm_100a's cvt, two elements an instruction, after a NaN test of each
// element; sm_90 has no cvt to e2m1 and compares bits instead. No GPU here
// runs either: the bits of the cvt path are PTX's definition of the
// instruction, which the integer path's lit test (e2m1-host-bytes.mlir)
// checks the contract's values against.

// SM100A: .target sm_100a
// SM100A-COUNT-8: cvt.rn.satfinite.e2m1x2.f32
// SM100A-NOT: cvt.rn.satfinite.e2m1x2.f32

// SM90: .target sm_90
// SM90-NOT: e2m1
// SM90: setp.gt.u32

gpu.module @m [#nvvm.target<chip = "sm_100a", features = "+ptx86">] {
  func.func @round16(%x: vector<16xf32>) -> vector<8xi8> {
    %q = arith.truncf %x : vector<16xf32> to vector<16xf4E2M1FN>
    %n = arith.bitcast %q : vector<16xf4E2M1FN> to vector<16xi4>
    %b = vector.bitcast %n : vector<16xi4> to vector<8xi8>
    return %b : vector<8xi8>
  }
}
