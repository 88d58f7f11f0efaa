#!/usr/bin/env bash
# prologue-gpu-stage.sh SUITE RUNNER DIR
#
# What can be checked of kvgen-prologue-gpu without a device: the suite
# writes a stage into DIR, the runner reads it and its comparison catches
# wrong bytes (--self-test), a run exits 0 or (no device) 77, and a stage
# the runner's cases do not know, or one missing a PTX file, is refused
# before any device is opened.
set -u
suite=$1 runner=$2 dir=$3
rm -rf "$dir" "$dir.bad"
"$suite" --emit-gpu="$dir" || exit 1
"$runner" --self-test "$dir" || exit 1
"$runner" "$dir"
rc=$?
if [[ $rc -ne 0 && $rc -ne 77 ]]; then
  echo "FAIL: kvgen-prologue-gpu exited $rc (0 or 77 expected)"
  exit 1
fi
refused() { # WHY: the runner must exit 1 on $dir.bad and say WHY
  local out
  out=$("$runner" "$dir.bad" 2>&1)
  local rc=$?
  if [[ $rc -ne 1 || $out != *"$1"* ]]; then
    echo "FAIL: expected exit 1 and '$1', got exit $rc: $out"
    exit 1
  fi
}
cp -r "$dir" "$dir.bad"
sed -i '0,/^description p_/s//description x_/' "$dir.bad/prologue.manifest"
refused "is not one of this build's cases"
cp "$dir/prologue.manifest" "$dir.bad/"
rm "$dir.bad"/p_*.ptx
refused "cannot read"
echo "prologue-gpu-stage: ok"
