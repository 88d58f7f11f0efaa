#!/usr/bin/env bash
# scripts/vllm-tests.sh [--gpu] [--all] [--stage-gpu DIR] [PYTEST_ARGS...]
#
# Runs vLLM 0.34.0's own cache test (tests/kernels/attention/test_cache.py,
# unchanged) against kvgen: vllm._custom_ops and torch.ops._C_cache_ops are
# kvgen.vllm's, through the stand-in vllm package of python/tests/vllm_compat
# (docs/VLLM.md).
#
#   (default)        on the CPU: the file's cuda:0 cases run on CPU tensors,
#                    through host kernels that the build's kvgen compiles on
#                    demand into $KVGEN_CACHE_DIR
#                    (without the num_blocks=10000 cases, unless --all or a
#                    -k of your own: each builds caches of up to 2.6 GB and
#                    needs up to 21 GB and two minutes on the CPU)
#   --gpu            on the CUDA device, through the GPU kernels of
#                    $KVGEN_CACHE_DIR (a machine without the compiler needs
#                    them staged: --stage-gpu)
#   --stage-gpu DIR  no test run: compiles, for $KVGEN_CHIP (default sm_90),
#                    every description that a CPU run compiled, into
#                    DIR/kvgen-cache, and copies libkvrt, the package's
#                    binding and the extracted test files beside it; then
#                    run on the GPU machine
#                    KVGEN_VLLM_STAGE=DIR scripts/vllm-tests.sh --gpu
#
# The source distribution comes from PyPI into build/vllm-0.34.0/ (ignored
# by git), checked against PyPI's published sha256; only the test file and
# the helpers it imports from vLLM's tests/ are extracted. It needs torch and
# pytest: $KVGEN_PYTHON, python3 or /usr/bin/python3 when one imports both,
# else a virtual environment build/vllm-venv (Debian's pytest and numpy, with
# PyPI's torch==2.11.0 installed there: about 4 GB, the CUDA libraries
# included, which its import needs even on the CPU).
#
# Writes build/vllm-0.34.0/out/{junit.xml,summary.json,pytest.log}
# ($KVGEN_VLLM_OUT overrides). Exits with pytest's status: a case that kvgen
# cannot run (an op or format it does not provide) is xfailed with kvgen's
# message, never passed; any other failure fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

version=0.34.0
url=https://files.pythonhosted.org/packages/92/21/6e0b077dc4a0b28f5a8ce8bb352a38d7196650d681fd4faa87f8dc622eff/vllm-$version.tar.gz
# PyPI's published digest of that file (its simple index and JSON API).
sha256=fcad848b246a9d8652b47e6425af92334dc02492f9802720f54e27b823cf0113
files=(tests/__init__.py tests/kernels/__init__.py tests/kernels/conftest.py
       tests/kernels/utils.py tests/kernels/quant_utils.py
       tests/kernels/quantization/nvfp4_utils.py
       tests/kernels/attention/conftest.py tests/kernels/attention/test_cache.py)

build=${KVGEN_BUILD_DIR:-build}
work=$build/vllm-$version
src=$work/src
out=${KVGEN_VLLM_OUT:-$work/out}
device=cpu
stage_gpu=
all=
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --gpu) device=cuda ;;
    --all) all=1 ;;
    --stage-gpu) stage_gpu=${2:?--stage-gpu needs a folder}; shift ;;
    *) args+=("$1") ;;
  esac
  shift
done
say() { echo "vllm-tests: $*"; }

fetch() {
  mkdir -p "$work"
  local tarball=$work/vllm-$version.tar.gz
  if [ -f "$src/.sha256" ] && [ "$(cat "$src/.sha256")" = "$sha256" ]; then
    return
  fi
  if [ ! -f "$tarball" ] ||
    [ "$(sha256sum "$tarball" | cut -d' ' -f1)" != "$sha256" ]; then
    say "fetching $url"
    rm -f "$tarball.part"
    python3 - "$url" "$tarball.part" <<'EOF'
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=300) as r, \
        open(sys.argv[2], "wb") as f:
    while True:
        chunk = r.read(1 << 20)
        if not chunk:
            break
        f.write(chunk)
EOF
    local got
    got=$(sha256sum "$tarball.part" | cut -d' ' -f1)
    if [ "$got" != "$sha256" ]; then
      say "refusing $url: sha256 $got is not PyPI's $sha256"
      rm -f "$tarball.part"
      exit 1
    fi
    mv "$tarball.part" "$tarball"
  fi
  # PyPI's index says the same digest, when it can be asked.
  local published
  published=$(python3 - <<'EOF' 2>/dev/null || true
import json, urllib.request
req = urllib.request.Request("https://pypi.org/simple/vllm/", headers={
    "Accept": "application/vnd.pypi.simple.v1+json"})
with urllib.request.urlopen(req, timeout=30) as r:
    for f in json.load(r)["files"]:
        if f["filename"] == "vllm-0.34.0.tar.gz":
            print(f["hashes"]["sha256"])
EOF
)
  if [ -n "$published" ] && [ "$published" != "$sha256" ]; then
    say "PyPI publishes sha256 $published for vllm-$version.tar.gz, not" \
      "$sha256: refusing it"
    exit 1
  fi
  rm -rf "$src"
  mkdir -p "$src"
  tar -xzf "$tarball" -C "$src" --strip-components=1 \
    "${files[@]/#/vllm-$version/}"
  echo "$sha256" > "$src/.sha256"
  say "extracted ${#files[@]} files of vllm-$version.tar.gz (sha256 $sha256)"
}

find_python() {
  local py
  for py in ${KVGEN_PYTHON:-} python3 /usr/bin/python3 "$root/build/vllm-venv/bin/python"; do
    if command -v "$py" >/dev/null 2>&1 &&
      "$py" -c 'import torch, pytest, numpy' >/dev/null 2>&1; then
      echo "$py"
      return
    fi
  done
  [ "$device" = cpu ] || { say "no python3 with torch, pytest and numpy" >&2; exit 1; }
  local venv=$root/build/vllm-venv
  say "installing torch==2.11.0 into $venv (test-only; about 4 GB)" >&2
  if ! /usr/bin/python3 -c 'import pytest, numpy' 2>/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      python3-pytest python3-numpy >/dev/null
  fi
  /usr/bin/python3 -m venv --system-site-packages "$venv" >&2 ||
    { say "python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
  "$venv/bin/pip" install -q torch==2.11.0 >&2
  echo "$venv/bin/python"
}

stage() {
  local dst=$1 cache=${KVGEN_CACHE_DIR:-$work/kvgen-cache} chip=${KVGEN_CHIP:-sm_90}
  local descs
  descs=$(find "$cache" -path '*/host-*' -name description.mlir 2>/dev/null | sort)
  [ -n "$descs" ] || { say "no host descriptions in $cache: run the CPU tests first"; exit 1; }
  mkdir -p "$dst/lib" "$dst/kvgen-cache"
  cp -P "$build"/lib/libkvrt.so* "$dst/lib/"
  # The package's binding, found beside KVGEN_KVRT_LIB.
  cp "$build"/lib/_kvext.abi3.so "$dst/lib/"
  rm -rf "$dst/src" && cp -r "$src" "$dst/src"
  local n=0 d
  for d in $descs; do
    KVGEN_COMPILER=$build/bin/kvgen PYTHONPATH=python python3 - "$d" "$dst/kvgen-cache" "$chip" <<'EOF'
import sys
from kvgen import compiler
compiler.cache_entry(open(sys.argv[1]).read(), target="gpu", chip=sys.argv[3],
                     cache=sys.argv[2])
EOF
    n=$((n + 1))
  done
  say "staged $n descriptions for $chip, libkvrt and the test files in $dst ($(du -sh "$dst" | cut -f1))"
}

if [ -n "$stage_gpu" ]; then
  fetch
  stage "$stage_gpu"
  exit 0
fi

if [ -n "${KVGEN_VLLM_STAGE:-}" ]; then
  # A staged folder: the test files, libkvrt and the GPU kernels.
  staged=$(cd "$KVGEN_VLLM_STAGE" && pwd)
  src=$staged/src
  export KVGEN_KVRT_LIB=${KVGEN_KVRT_LIB:-$staged/lib/libkvrt.so}
  export KVGEN_CACHE_DIR=${KVGEN_CACHE_DIR:-$staged/kvgen-cache}
  [ "$(cat "$src/.sha256" 2>/dev/null)" = "$sha256" ] ||
    { say "$src holds no vllm-$version test files"; exit 1; }
else
  fetch
  export KVGEN_KVRT_LIB=${KVGEN_KVRT_LIB:-$root/$build/lib/libkvrt.so}
  export KVGEN_CACHE_DIR=${KVGEN_CACHE_DIR:-$root/$work/kvgen-cache}
  if [ -x "$build/bin/kvgen" ]; then
    export KVGEN_COMPILER=${KVGEN_COMPILER:-$root/$build/bin/kvgen}
  fi
fi
case " ${args[*]-} " in *" -k "*|*" -k"*) all=1 ;; esac
if [ "$device" = cpu ] && [ -z "$all" ]; then
  say "leaving out the num_blocks=10000 cases on the CPU (--all runs them)"
  args+=(-k "not 10000")
fi
py=$(find_python)
mkdir -p "$out"
out=$(cd "$out" && pwd)
compat=$root/python/tests/vllm_compat
export PYTHONPATH=$compat/standin:$compat:$root/python:$(cd "$src" && pwd)
export KVGEN_VLLM_DEVICE=$device
say "$("$py" -c 'import torch; print("torch", torch.__version__)'), device $device," \
  "kernels in $KVGEN_CACHE_DIR"
start=$(date +%s)
status=0
(cd "$src" && "$py" -m pytest -p kvgen_vllm_plugin -p no:cacheprovider -q \
  --kvgen-device="$device" --kvgen-summary="$out/summary.json" \
  --junitxml="$out/junit.xml" -o junit_family=xunit1 --durations=15 \
  tests/kernels/attention/test_cache.py ${args[@]+"${args[@]}"}) \
  > "$out/pytest.log" 2>&1 || status=$?
sed -n '/kvgen: vLLM cache test/,$p' "$out/pytest.log" | grep -v '^tests/' || tail -n 30 "$out/pytest.log"
say "$(($(date +%s) - start)) s; log, JUnit XML and summary in $out"
exit $status
