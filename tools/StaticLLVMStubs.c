/*===- StaticLLVMStubs.c - back ends a static kvgen leaves out ------------===*
 *
 * MLIR's registration of every dialect extension (registerAllExtensions)
 * brings in the ROCDL and SPIR-V serializers, whose one-time initialization
 * names the AMDGPU and SPIR-V back ends. kvgen attaches neither target, so
 * the static build (KVGEN_STATIC_LLVM: NVPTX and X86 only) defines their
 * initializers here instead of linking two back ends that never run. Should
 * one run after all, it stops the process with a message instead of
 * compiling for a target that is not there.
 *
 *===----------------------------------------------------------------------===*/

#include <stdio.h>
#include <stdlib.h>

static void missingBackend(const char *name) {
  fprintf(stderr,
          "kvgen: this kvgen was linked without LLVM's %s back end (it "
          "generates NVPTX and X86 code only)\n",
          name);
  abort();
}

#define KVGEN_MISSING_BACKEND(target)                                          \
  void LLVMInitialize##target##Target(void) { missingBackend(#target); }       \
  void LLVMInitialize##target##TargetInfo(void) { missingBackend(#target); }   \
  void LLVMInitialize##target##TargetMC(void) { missingBackend(#target); }     \
  void LLVMInitialize##target##AsmParser(void) { missingBackend(#target); }    \
  void LLVMInitialize##target##AsmPrinter(void) { missingBackend(#target); }

KVGEN_MISSING_BACKEND(AMDGPU)
KVGEN_MISSING_BACKEND(SPIRV)
