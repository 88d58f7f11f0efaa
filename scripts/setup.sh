#!/usr/bin/env bash
# Prepares a build of kvgen on a Debian 12 machine. Steps (default: deps and
# build); each is safe to run again:
#
#   deps   installs the packages kvgen builds with (as root), skipping those
#          present; clang-22 and its runtimes are for the fuzzers
#   build  configures and builds everything into ${KVGEN_BUILD_DIR:-build}
#   asan   builds the kvrt unit tests and the host suite with AddressSanitizer
#          and UndefinedBehaviorSanitizer into ${KVGEN_ASAN_BUILD_DIR:-build-asan}
#          (only the targets of `ctest -L 'unit|host'`, to keep it short)
#
#   scripts/setup.sh [deps] [build] [asan]
set -euo pipefail
cd "$(dirname "$0")/.."

deps() {
  local packages=(cmake ninja-build g++ python3 python3-dev python3-pytest python3-numpy
                  python3-venv
                  ccache libgtest-dev libzstd-dev zlib1g-dev
                  libdlpack-dev nlohmann-json3-dev libmlir-22-dev mlir-22-tools
                  llvm-22-dev llvm-22-tools clang-22 libclang-rt-22-dev)
  local missing=() p
  for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

configure() {
  local dir=$1
  shift
  # ccache when present: a second build of the same sources is nearly free.
  # The checkout as ccache's base dir makes the paths it hashes relative, so
  # that two build folders side by side (build/ and the wheel's build-wheel/)
  # share the objects of one compile.
  local launcher=()
  if command -v ccache >/dev/null; then
    local cc="env;CCACHE_BASEDIR=$PWD;ccache"
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$cc"
              -DCMAKE_C_COMPILER_LAUNCHER="$cc")
  fi
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit "${launcher[@]}" "$@" >/dev/null
}

build() {
  local dir=${KVGEN_BUILD_DIR:-build}
  configure "$dir"
  ninja -C "$dir" -j2
}

asan() {
  local dir=${KVGEN_ASAN_BUILD_DIR:-build-asan}
  # vptr checks need RTTI, which LLVM and so kvgen build without.
  local flags="-fsanitize=address,undefined -fno-sanitize=vptr"
  flags+=" -fno-sanitize-recover=all -fno-omit-frame-pointer -g1"
  # -O1: the sanitizers need no more, and it halves the compile time of the
  # MLIR-heavy sources.
  configure "$dir" -DKVGEN_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="$flags" \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
  # The targets of every test labelled unit or host (kvrt_cuda_abi_test
  # exists only where the CUDA toolkit is).
  local targets=() t
  for t in kvrt kvrt_api_test kvrt_internal_test kvrt_cuda_abi_test \
           kvrt_launch_path_bench kvgen-unittests kvgen-host-suite; do
    ninja -C "$dir" -t query "$t" >/dev/null 2>&1 && targets+=("$t")
  done
  echo "setup: sanitizer targets: ${targets[*]}"
  ninja -C "$dir" -j2 "${targets[@]}"
}

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(deps build)
for step in "${steps[@]}"; do
  case $step in
    deps|build|asan) "$step" ;;
    *) echo "setup: unknown step '$step' (deps, build, asan)" >&2; exit 2 ;;
  esac
done
