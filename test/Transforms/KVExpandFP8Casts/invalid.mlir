// RUN: kvgen-opt %s -kv-expand-fp8-casts -split-input-file -verify-diagnostics
// RUN: kvgen-opt %s -kv-expand-fp8-casts=nvvm=true -split-input-file -verify-diagnostics

// fp8 casts kvgen does not generate: a diagnostic naming the cast, not IR
// that breaks later.

func.func @from_f16(%x: f16) -> f8E4M3FN {
  // expected-error @+1 {{'arith.truncf' op kvgen rounds only f32 to fp8}}
  %0 = arith.truncf %x : f16 to f8E4M3FN
  return %0 : f8E4M3FN
}

// -----

func.func @to_f16(%x: f8E5M2) -> f16 {
  // expected-error @+1 {{'arith.extf' op kvgen extends fp8 only to f32}}
  %0 = arith.extf %x : f8E5M2 to f16
  return %0 : f16
}

// -----

func.func @tensor(%x: tensor<2xf32>) -> tensor<2xf8E4M3FN> {
  // expected-error @+1 {{'arith.truncf' op kvgen expands fp8 casts of scalars and fixed 1-d vectors only, got 'tensor<2xf32>'}}
  %0 = arith.truncf %x : tensor<2xf32> to tensor<2xf8E4M3FN>
  return %0 : tensor<2xf8E4M3FN>
}

// -----

func.func @matrix(%x: vector<2x2xf32>) -> vector<2x2xf8E4M3FN> {
  // expected-error @+1 {{'arith.truncf' op kvgen expands fp8 casts of scalars and fixed 1-d vectors only, got 'vector<2x2xf32>'}}
  %0 = arith.truncf %x : vector<2x2xf32> to vector<2x2xf8E4M3FN>
  return %0 : vector<2x2xf8E4M3FN>
}

// -----

func.func @scalable(%x: vector<[4]xf8E4M3FN>) -> vector<[4]xf32> {
  // expected-error @+1 {{'arith.extf' op kvgen expands fp8 casts of scalars and fixed 1-d vectors only, got 'vector<[4]xf8E4M3FN>'}}
  %0 = arith.extf %x : vector<[4]xf8E4M3FN> to vector<[4]xf32>
  return %0 : vector<[4]xf32>
}

// -----

func.func @e2m1_from_f16(%x: f16) -> f4E2M1FN {
  // expected-error @+1 {{'arith.truncf' op kvgen rounds only f32 to e2m1}}
  %0 = arith.truncf %x : f16 to f4E2M1FN
  return %0 : f4E2M1FN
}

// -----

func.func @e2m1_to_f16(%x: f4E2M1FN) -> f16 {
  // expected-error @+1 {{'arith.extf' op kvgen extends e2m1 only to f32}}
  %0 = arith.extf %x : f4E2M1FN to f16
  return %0 : f16
}
