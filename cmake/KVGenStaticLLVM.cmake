# The MLIR and LLVM libraries kvgen's compiler links (KVGEN_MLIR_LIBS,
# KVGEN_MLIR_EXECUTION_ENGINE). Included after find_package(MLIR).
#
# Default: the shared libMLIR.so (with libLLVM.so behind it), for fast links
# in a developer build. KVGEN_STATIC_LLVM=ON: the static archives, so that
# kvgen and kvgen-opt run on a machine without LLVM (the wheel, an install
# carried to another machine), with the NVPTX and X86 back ends only.
#
# Debian's LLVMConfig.cmake sets LLVM_LINK_LLVM_DYLIB, so the exported
# static MLIR targets that need LLVM name the dylib ("LLVM") in their
# INTERFACE_LINK_LIBRARIES. A static link replaces that entry with LLVM's
# static component libraries, less the back ends kvgen does not target: a
# reference to one of those fails the link instead of growing the binary.

# What every executable that links kvgen's libraries needs for a static link,
# as the link interface of `target` (KVGenPipeline): only the sections reached
# (the archives are built with -ffunction-sections), shared libraries only
# where referenced, libstdc++ and libgcc inside (the binary then needs only
# the C library), and the initializers of the back ends left out (below).
# Nothing in the shared mode.
function(kvgen_static_llvm_interface target)
  if(KVGEN_STATIC_LLVM)
    target_sources(${target} INTERFACE
      $<BUILD_INTERFACE:${KVGEN_MISSING_BACKENDS_SOURCE}>)
    target_link_options(${target} INTERFACE
      "LINKER:--gc-sections" "LINKER:--as-needed"
      -static-libstdc++ -static-libgcc)
  endif()
endfunction()

if(NOT KVGEN_STATIC_LLVM)
  set(KVGEN_MLIR_LIBS MLIR)
  set(KVGEN_MLIR_EXECUTION_ENGINE MLIRExecutionEngineShared)
  return()
endif()

# The back ends kept; every other target's libraries are left out.
set(KVGEN_LLVM_BACKENDS NVPTX X86)
set(_kvgen_other_targets ${LLVM_ALL_TARGETS} ${LLVM_TARGETS_TO_BUILD})
list(REMOVE_DUPLICATES _kvgen_other_targets)
list(REMOVE_ITEM _kvgen_other_targets ${KVGEN_LLVM_BACKENDS})

# A static library target whose archive is installed. Debian exports some
# whose archive it does not ship (Polly, which LLVMExtensions names).
# "static" is TRUE for a static library target, "present" when its archive
# is there too.
function(_kvgen_archive_present lib static present)
  set(${static} FALSE PARENT_SCOPE)
  set(${present} FALSE PARENT_SCOPE)
  if(NOT TARGET ${lib})
    return()
  endif()
  get_target_property(type ${lib} TYPE)
  if(NOT type STREQUAL "STATIC_LIBRARY")
    return()
  endif()
  set(${static} TRUE PARENT_SCOPE)
  get_target_property(configs ${lib} IMPORTED_CONFIGURATIONS)
  foreach(config IN LISTS configs)
    get_target_property(location ${lib} IMPORTED_LOCATION_${config})
    if(location AND EXISTS "${location}")
      set(${present} TRUE PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

# Libraries left out of the link, and out of every link interface that names
# them: the other back ends (and llvm-exegesis's per-target libraries, which
# pull them in), and those kvgen never calls whose system libraries a
# dylib-linked LLVM config does not look for (libedit, libcurl, libxml2,
# libpfm).
set(_kvgen_dropped_patterns "^LLVMExegesis" "^LLVMLineEditor$"
  "^LLVMDebuginfod$" "^LLVMWindowsManifest$" "^Polly" "^LLVMPolly$")
foreach(t IN LISTS _kvgen_other_targets)
  list(APPEND _kvgen_dropped_patterns "^LLVM${t}")
endforeach()

# Every imported static library of LLVM and MLIR, sorted into kept and dropped.
get_property(_kvgen_imported DIRECTORY PROPERTY IMPORTED_TARGETS)
set(_kvgen_llvm_static)
set(_kvgen_static_all)
set(_kvgen_dropped)
foreach(lib IN LISTS _kvgen_imported)
  _kvgen_archive_present(${lib} static present)
  if(NOT static)
    continue()
  endif()
  set(drop FALSE)
  if(NOT present)
    set(drop TRUE)
  endif()
  foreach(pattern IN LISTS _kvgen_dropped_patterns)
    if(lib MATCHES "${pattern}")
      set(drop TRUE)
    endif()
  endforeach()
  if(drop)
    list(APPEND _kvgen_dropped ${lib})
    continue()
  endif()
  list(APPEND _kvgen_static_all ${lib})
  if(lib IN_LIST LLVM_AVAILABLE_LIBS)
    list(APPEND _kvgen_llvm_static ${lib})
  endif()
endforeach()
if(NOT _kvgen_llvm_static)
  message(FATAL_ERROR "KVGEN_STATIC_LLVM: no static LLVM libraries in "
    "${LLVM_CMAKE_DIR} (Debian: llvm-22-dev ships them)")
endif()
foreach(t IN LISTS KVGEN_LLVM_BACKENDS)
  if(NOT TARGET LLVM${t}CodeGen)
    message(FATAL_ERROR "KVGEN_STATIC_LLVM: LLVM has no static ${t} back end "
      "(LLVM${t}CodeGen)")
  endif()
endforeach()

# LLVMSupport's compression libraries, as archives, so that the binary needs
# no libz.so or libzstd.so (Debian: zlib1g-dev, libzstd-dev). LLVM's config
# does not define zstd's target when it links the dylib.
find_library(KVGEN_ZLIB_STATIC NAMES libz.a)
find_library(KVGEN_ZSTD_STATIC NAMES libzstd.a)
if(NOT KVGEN_ZLIB_STATIC OR NOT KVGEN_ZSTD_STATIC)
  message(FATAL_ERROR "KVGEN_STATIC_LLVM needs libz.a and libzstd.a "
    "(Debian: zlib1g-dev, libzstd-dev)")
endif()

# Every static MLIR library, "LLVM" replaced by the archives above.
get_property(_kvgen_mlir_all GLOBAL PROPERTY MLIR_ALL_LIBS)
set(KVGEN_MLIR_LIBS)
foreach(lib IN LISTS _kvgen_mlir_all)
  if(lib IN_LIST _kvgen_static_all)
    list(APPEND KVGEN_MLIR_LIBS ${lib})
  endif()
endforeach()
list(REMOVE_DUPLICATES KVGEN_MLIR_LIBS)

foreach(lib IN LISTS _kvgen_static_all)
  get_target_property(deps ${lib} INTERFACE_LINK_LIBRARIES)
  if(NOT deps)
    continue()
  endif()
  # $<LINK_ONLY:X> (a private dependency) is X for a static library.
  set(before "${deps}")
  list(TRANSFORM deps REPLACE "^\\$<LINK_ONLY:([^>]*)>$" "\\1")
  set(changed FALSE)
  if(NOT deps STREQUAL before)
    set(changed TRUE)
  endif()
  foreach(dropped IN LISTS _kvgen_dropped)
    if(dropped IN_LIST deps)
      list(REMOVE_ITEM deps ${dropped})
      set(changed TRUE)
    endif()
  endforeach()
  # The dylibs: "MLIR" where an MLIR library names libMLIR.so.
  if("MLIR" IN_LIST deps)
    list(REMOVE_ITEM deps MLIR)
    list(APPEND deps ${KVGEN_MLIR_LIBS})
    set(changed TRUE)
  endif()
  if("LLVM" IN_LIST deps)
    list(REMOVE_ITEM deps LLVM)
    list(APPEND deps ${_kvgen_llvm_static})
    set(changed TRUE)
  endif()
  if("ZLIB::ZLIB" IN_LIST deps OR "zstd::libzstd_shared" IN_LIST deps)
    list(TRANSFORM deps REPLACE "^ZLIB::ZLIB$" "${KVGEN_ZLIB_STATIC}")
    list(TRANSFORM deps REPLACE "^zstd::libzstd_shared$" "${KVGEN_ZSTD_STATIC}")
    set(changed TRUE)
  endif()
  if(changed)
    set_target_properties(${lib} PROPERTIES INTERFACE_LINK_LIBRARIES "${deps}")
  endif()
endforeach()

set(KVGEN_MLIR_EXECUTION_ENGINE MLIRExecutionEngine)

# The back ends left out are still named: MLIR's registration of every
# dialect extension brings in the ROCDL and SPIR-V serializers, whose one-time
# setup initializes the AMDGPU and SPIR-V back ends, and kvgen-opt's test
# passes call InitializeAllTargets. Their initializers are defined here to
# register nothing: kvgen never targets them, and a use of one fails as LLVM
# fails for any target it does not know ("no available targets are compatible
# with triple ..."), never by compiling for another.
set(KVGEN_MISSING_BACKENDS_SOURCE ${PROJECT_BINARY_DIR}/MissingBackends.c)
set(_kvgen_stub_text "/* Generated by cmake/KVGenStaticLLVM.cmake. */\n")
foreach(t IN LISTS _kvgen_other_targets)
  foreach(part Target TargetInfo TargetMC AsmParser AsmPrinter Disassembler
          TargetMCA)
    string(APPEND _kvgen_stub_text "void LLVMInitialize${t}${part}(void) {}\n")
  endforeach()
endforeach()
file(CONFIGURE OUTPUT ${KVGEN_MISSING_BACKENDS_SOURCE}
  CONTENT "${_kvgen_stub_text}" @ONLY)
list(LENGTH KVGEN_MLIR_LIBS _kvgen_n_mlir)
list(LENGTH _kvgen_llvm_static _kvgen_n_llvm)
message(STATUS "kvgen: static MLIR (${_kvgen_n_mlir} libraries) and LLVM "
  "(${_kvgen_n_llvm} libraries, back ends ${KVGEN_LLVM_BACKENDS})")

