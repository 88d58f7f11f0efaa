#!/usr/bin/env bash
# scripts/bench.sh on the CPU, over a stand-in kvbench that records its
# arguments: both invocations, the order of the runs, the skips (a bundle
# that was not built, a kernel the bundle lacks, no peer, no time left) and
# bad arguments.
#   bench_sh_test.sh REPO_ROOT
set -uo pipefail
repo=$(cd "${1:?usage: bench_sh_test.sh REPO_ROOT}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
expect() { # expect DESCRIPTION COMMAND...
  local what=$1
  shift
  if ! "$@"; then
    echo "FAIL: $what"
    fails=$((fails + 1))
  fi
}

mkdir -p "$work/build/bin" "$work/build/lib" "$work/build/bench"
cat > "$work/build/bin/kvbench" <<'STUB'
#!/usr/bin/env bash
if [ "$1" = --list-layouts ]; then
  printf '%s\n' contiguous paged_nhd paged_hnd
  exit 0
fi
echo "$*" >> "$FAKE_LOG"
kernel=; out=
while [ $# -gt 0 ]; do
  case $1 in
  --kernel) kernel=$2; shift 2 ;;
  --bundle | --targets | --layout) shift 2 ;;
  --*) shift ;;
  *) out=$1; shift ;;
  esac
done
if [ -n "$kernel" ] && ! grep -q "\"name\": \"$kernel\"" "$FAKE_BUNDLE"; then
  echo "kvbench: no kernel '$kernel' in the bundle"
  exit 4
fi
printf '=== kvbench %s\ntargets of x:\n' "${kernel:-ref}" > "$out/kvbench-${kernel:-ref}.txt"
STUB
chmod +x "$work/build/bin/kvbench"
bundle=$work/build/bench/bench.bundle.json
echo '{"kernels": [{"name": "bench_paged_nhd"}, {"name": "bench_paged_hnd"}]}' > "$bundle"
export FAKE_BUNDLE=$bundle FAKE_LOG=$work/log
cd "$repo" || exit 2

# The new form: BUILD_DIR OUT_DIR, options first.
scripts/bench.sh --budget 200 --quick "$work/build" "$work/out" > "$work/new.txt" 2>&1
expect "new form exits 0" test $? -eq 0
expect "paged_nhd first, quick, with the targets" \
  grep -qx -- "--bundle $bundle --kernel bench_paged_nhd --targets bench/targets.json --quick $work/out" <(head -n 1 "$work/log")
expect "an unbuilt quant bundle is skipped with the option to flip" \
  grep -q "SKIPPED: bench_paged_nhd_fp8 (no bench-quant.bundle.json: configure with -DKVBENCH_QUANT_ROWS=ON" "$work/new.txt"
expect "an unbuilt shapes bundle is skipped with the option to flip" \
  grep -q "SKIPPED: bench_paged_nhd_bs528 (no bench-shapes.bundle.json: configure with -DKVBENCH_SHAPE_ROWS=ON" "$work/new.txt"
expect "an unbuilt MLA bundle is skipped with the option to flip" \
  grep -q "SKIPPED: bench_mla (no bench-mla.bundle.json: configure with -DKVBENCH_MLA_ROWS=ON" "$work/new.txt"
expect "a kernel the bundle lacks is skipped, not failed" \
  grep -q "SKIPPED: bench_contiguous (not in the bundle" "$work/new.txt"
expect "no peer: the side-by-side run is skipped" \
  grep -q "SKIPPED: side_by_side (no --peer" "$work/new.txt"
expect "the first table comes last with its targets" \
  test "$(grep -n '=== kvbench' "$work/new.txt" | tail -n 1 | cut -d: -f2-)" = "=== kvbench bench_paged_nhd"
expect "the summary is kept" test -s "$work/out/summary.txt"
expect "the kernels run are those bench/bench.mlir defines, none named in the script" \
  test "$(grep -o -- "--bundle $bundle --kernel [^ ]*" "$work/log" | awk '{print $4}' | sort | tr '\n' ' ')" \
  = "$(grep -oE '^\s*kv\.[a-z_]+ @[A-Za-z0-9_]+' bench/bench.mlir | sed 's/.*@//' | sort | tr '\n' ' ')"

# The older form: one bundle file, the build from KVGEN_BUILD_DIR, OUT_DIR.
: > "$work/log"
KVGEN_BUILD_DIR=$work/build KVBENCH_KERNELS=bench_paged_hnd \
  scripts/bench.sh "$bundle" "$work/old" > "$work/old.txt" 2>&1
expect "old form exits 0" test $? -eq 0
expect "old form runs the kernels asked for, into OUT_DIR" \
  grep -qx -- "--bundle $bundle --kernel bench_paged_hnd --targets bench/targets.json $work/old" "$work/log"

# KVBENCH_KERNELS names kernels of any bench description: each runs from the
# bundle its description is compiled into.
: > "$work/log"
mla=$work/build/bench/bench-mla.bundle.json
echo '{"kernels": [{"name": "bench_mla"}]}' > "$mla"
FAKE_BUNDLE=$mla KVBENCH_KERNELS=bench_mla \
  scripts/bench.sh "$work/build" "$work/mla" > "$work/mla.txt" 2>&1
rm "$mla"
expect "an MLA kernel asked for runs from the MLA bundle" \
  grep -qx -- "--bundle $mla --kernel bench_mla --targets bench/targets.json $work/mla" "$work/log"

# No time left: every run is skipped, nothing launched.
: > "$work/log"
scripts/bench.sh --budget 10 "$work/build" "$work/none" > "$work/none.txt" 2>&1
expect "out of time: nothing runs" test ! -s "$work/log"
expect "out of time: said so" grep -q "SKIPPED: bench_paged_nhd (out of time" "$work/none.txt"

# No bundle: the reference of every layout kvbench knows, paged_nhd first.
mv "$bundle" "$bundle.away"
: > "$work/log"
scripts/bench.sh "$work/build" "$work/ref" > "$work/ref.txt" 2>&1
mv "$bundle.away" "$bundle"
expect "no bundle: said so" grep -q "NO BUNDLE" "$work/ref.txt"
expect "no bundle: the references, paged_nhd first" \
  test "$(cut -d' ' -f2 "$work/log" | tr '\n' ' ')" = "paged_nhd contiguous paged_hnd "

# Bad arguments: a message and status 2, nothing run.
: > "$work/log"
for bad in "--budget abc" "--budget" "--frobnicate" "a b c"; do
  # shellcheck disable=SC2086 # the words are the arguments
  scripts/bench.sh $bad > "$work/bad.txt" 2>&1
  expect "'$bad' is refused" test $? -eq 2
  expect "'$bad' says why" grep -q "bench.sh: " "$work/bad.txt"
done
expect "bad arguments ran nothing" test ! -s "$work/log"

echo "bench_sh_test: $fails failures"
[ "$fails" -eq 0 ]
