// RUN: kvgen-opt %s --split-input-file --pass-pipeline='builtin.module(gpu.module(kv-programmatic-launch{chip=sm_90a}))' | FileCheck %s

// A decode-shaped kernel: the token's address math reads nothing and stays
// before the wait; the wait comes before the token check that holds the slot
// load; launch_dependents follows the chunk loop (the last read) inside the
// branches that read, never inside the loop.

gpu.module @kv_kernels {
  // CHECK-LABEL: gpu.func @append
  // CHECK:         gpu.block_id x
  // CHECK-NEXT:    arith.muli
  // CHECK-NEXT:    arith.cmpi
  // CHECK-NEXT:    nvvm.griddepcontrol wait
  // CHECK-NEXT:    llvm.inline_asm has_side_effects "", "~{memory}"
  // CHECK-NEXT:    scf.if
  // CHECK:           memref.load
  // CHECK:           scf.if
  // CHECK:             scf.for
  // CHECK-NOT:           griddepcontrol
  // CHECK:               vector.load
  // CHECK:               vector.store
  // CHECK:             }
  // CHECK-NEXT:        nvvm.griddepcontrol launch_dependents
  // CHECK:           }
  // CHECK:         }
  // CHECK-NEXT:    gpu.return
  // CHECK-NOT:     griddepcontrol
  gpu.func @append(%key: memref<?xbf16>, %slots: memref<?xi64>,
                   %cache: memref<?xbf16>, %n: index) kernel {
    %c0 = arith.constant 0 : index
    %c8 = arith.constant 8 : index
    %c128 = arith.constant 128 : index
    %c0_i64 = arith.constant 0 : i64
    %b = gpu.block_id x
    %src = arith.muli %b, %c128 : index
    %live = arith.cmpi ult, %b, %n : index
    scf.if %live {
      %slot = memref.load %slots[%b] : memref<?xi64>
      %valid = arith.cmpi sge, %slot, %c0_i64 : i64
      scf.if %valid {
        %s = arith.index_cast %slot : i64 to index
        %dst = arith.muli %s, %c128 : index
        scf.for %i = %c0 to %c128 step %c8 {
          %from = arith.addi %src, %i : index
          %to = arith.addi %dst, %i : index
          %v = vector.load %key[%from] : memref<?xbf16>, vector<8xbf16>
          vector.store %v, %cache[%to] : memref<?xbf16>, vector<8xbf16>
        }
      }
    }
    gpu.return
  }
}

// -----

// A kernel whose first read is a top-level load waits just before it and
// triggers just after it, before its store.

gpu.module @kv_kernels {
  // CHECK-LABEL: gpu.func @first_op_reads
  // CHECK-NEXT:    arith.constant
  // CHECK-NEXT:    nvvm.griddepcontrol wait
  // CHECK-NEXT:    llvm.inline_asm has_side_effects "", "~{memory}"
  // CHECK-NEXT:    memref.load
  // CHECK-NEXT:    nvvm.griddepcontrol launch_dependents
  // CHECK-NEXT:    memref.store
  gpu.func @first_op_reads(%in: memref<1xi64>, %out: memref<1xi64>) kernel {
    %c0 = arith.constant 0 : index
    %v = memref.load %in[%c0] : memref<1xi64>
    memref.store %v, %out[%c0] : memref<1xi64>
    gpu.return
  }
  // A device function that is not a kernel is left alone.
  // CHECK-LABEL: gpu.func @helper
  // CHECK-NOT:     griddepcontrol
  // CHECK:         gpu.return
  gpu.func @helper(%in: memref<1xi64>) {
    %c0 = arith.constant 0 : index
    %v = memref.load %in[%c0] : memref<1xi64>
    gpu.return
  }
}
