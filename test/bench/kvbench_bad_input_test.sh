#!/usr/bin/env bash
# kvbench refuses bad input before it touches a GPU: a message naming the
# problem, a non-zero status, and no output directory.
#   kvbench_bad_input_test.sh KVBENCH BUNDLE
set -uo pipefail
kvbench=${1:?usage: kvbench_bad_input_test.sh KVBENCH BUNDLE}
bundle=${2:?usage: kvbench_bad_input_test.sh KVBENCH BUNDLE}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
# refused STATUS MESSAGE ARGS...: kvbench exits STATUS, says MESSAGE, writes
# nothing.
refused() {
  local want=$1 message=$2
  shift 2
  "$kvbench" "$@" "$work/out" > "$work/log" 2>&1
  local rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -qF -- "$message" "$work/log" ||
    [ -e "$work/out" ]; then
    echo "FAIL: kvbench $* -> rc $rc (want $want, '$message'):"
    sed 's/^/  | /' "$work/log"
    fails=$((fails + 1))
  fi
  rm -rf "$work/out"
}
echo '{"groups": 3}' > "$work/no-groups.json"
echo '{not json' > "$work/broken.json"
echo '{"kernels": []}' > "$work/empty.bundle.json"

refused 2 "unknown --layout paged_xyz" --layout paged_xyz
refused 2 "--variant must be auto, vector, wide or scalar, not fast" --variant fast
refused 2 "--kernel needs --bundle" --kernel bench_paged_nhd
refused 2 "unknown option --frobnicate" --frobnicate
refused 2 "cannot read the targets file $work/none.json" --targets "$work/none.json"
refused 2 "is not JSON" --targets "$work/broken.json"
refused 2 "has no \"groups\" array" --targets "$work/no-groups.json"
refused 2 "kvrt cannot load the bundle $work/none.bundle.json" --bundle "$work/none.bundle.json"
refused 2 "kvrt cannot load the bundle $work/empty.bundle.json" --bundle "$work/empty.bundle.json"
refused 4 "no kernel 'bench_nope' in the bundle" --bundle "$bundle" --kernel bench_nope
echo "kvbench_bad_input_test: $fails failures"
[ "$fails" -eq 0 ]
