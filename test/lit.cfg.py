# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "kvgen"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py",
                   "conformance", "host", "gpu", "unit", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kvgen_obj_root, "test")

# Upstream's strictness: captures do not leak across CHECK-LABELs, and an
# unused prefix is a typo.
config.environment["FILECHECK_OPTS"] = (
    "-enable-var-scope --allow-unused-prefixes=false")

llvm_config.use_default_substitutions()
# FileCheck, not and count live in LLVM's tool directory, not on PATH.
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
tool_dirs = [config.kvgen_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["kvgen", "kvgen-opt"], tool_dirs)

# PTX checks that run ptxas need the CUDA toolkit.
if config.cuda_ptxas and os.access(config.cuda_ptxas, os.X_OK):
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", config.cuda_ptxas))

# Tests that run lowered IR on the host (mlir-runner) print through MLIR's
# runner utilities.
config.substitutions.append(
    ("%mlir_c_runner_utils",
     os.path.join(config.llvm_tools_dir, "..", "lib",
                  "libmlir_c_runner_utils.so")))
