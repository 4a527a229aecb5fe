#!/usr/bin/env bash
# One device call on the GPU host with binaries scripts/gpuhost-prebuild.sh made on the development
# machine (.gpurun/bin/*.xz): the GPU tests named in TESTS, then bench/gpuhost_benchmarks.sh's
# STAGES, inside BUDGET seconds, everything it wrote coming back in $OUT before the budget ends
# (logs.tgz: every log and JSON; <stage>-results.tgz: the record folders the stages resumed or
# filled; timing-cache.json: the tactic timings, for the next call to carry in
# .gpurun/timing-cache.json). Run from the project root through the device tool, e.g.
#   COMMIT=abc1234 BUDGET=560 TESTS="pipeline_gpu_test engine_gpu_test:EngineGpuModels.*" \
#     STAGES="probe sweep" SWEEP_MODELS=r18 bash scripts/gpuhost-call.sh
# with carry .gpuhost/debs .gpuhost/wheels .gpuhost/enter.sh .gpurun (and .gpuhost/data when a stage
# or test reads the sample photos; DATA=data-small for .gpuhost/data-small). COMMIT is the commit
# the binaries were built at (the host's copy has no .git); every record names it. The stages'
# own variables (SWEEP_ARGS, PIPELINE_ARGS, ...) pass through.
set -uo pipefail
start=$(date +%s)
budget=${BUDGET:-560}
left() { echo $((budget - ($(date +%s) - start))); }
: "${COMMIT:?set COMMIT to the commit the prebuilt binaries were built at}"
: "${OUT:?run through the device tool, which sets OUT}"
export GPULAB_GIT_COMMIT=$COMMIT
# shellcheck source=/dev/null # packed by scripts/gpuhost-pack.sh, not in the repository
source .gpuhost/enter.sh > /dev/null
logs=/tmp/gpuhost-call
mkdir -p "$logs/bin" build/gpuhost
for f in .gpurun/bin/*.xz; do
  [ -e "$f" ] || { echo "gpuhost-call: no .gpurun/bin/*.xz: run scripts/gpuhost-prebuild.sh first" >&2; exit 2; }
  b=$(basename "$f" .xz)
  xz -dc "$f" > "$logs/bin/$b" && chmod +x "$logs/bin/$b"
done
[ -f .gpurun/timing-cache.json ] && cp .gpurun/timing-cache.json /tmp/gpulab-timing-cache.json
# What comes back: logs, the record folders of today and this commit, the timing cache.
records="bench/results/$(date -u +%F)-$COMMIT"
send() {
  cp /tmp/gpulab-timing-cache.json "$OUT/timing-cache.json" 2> /dev/null
  tar czf "$OUT/logs.tgz" -C "$logs" --exclude bin . 2> /dev/null
  [ -d "$records" ] && tar czf "$OUT/records.tgz" -C "$records" . 2> /dev/null
}
(sleep $((budget - 10)) && send) > /dev/null 2>&1 &
watchdog=$!
nvidia-smi > "$logs/nvidia_smi.txt" 2>&1
grep -m1 -oE "NVIDIA [A-Z][0-9]+[^|]*" "$logs/nvidia_smi.txt"
if ! "$logs/bin/gpulab" --version > "$logs/version.txt" 2>&1; then
  echo "gpuhost-call: the prebuilt gpulab does not run:"
  cat "$logs/version.txt"
  ldd "$logs/bin/gpulab" | grep "not found"
  send
  exit 3
fi
export GPULAB_DATASET_DIR=${GPULAB_DATASET_DIR:-$PWD/.gpuhost/${DATA:-data}/imagenet-sample-256}
export GPULAB_MODEL_FIXTURES=$PWD/build/gpuhost/fixtures
# Test binaries, each "name" or "name:gtest_filter", after the model fixtures they may read.
if [ -n "${TESTS:-}" ]; then
  PYTHONUNBUFFERED=1 timeout 300 python3 tests/fixtures/make_model_fixtures.py --out build/gpuhost/fixtures \
    > "$logs/fixtures.log" 2>&1
  for t in $TESTS; do
    name=${t%%:*}
    filter=""
    [ "$name" != "$t" ] && filter=${t#*:}
    [ -x "$logs/bin/$name" ] || { echo "$name: not among .gpurun/bin"; continue; }
    [ "$(left)" -lt 60 ] && { echo "$name: not run (time is up)"; continue; }
    timeout $(($(left) - 40 < 300 ? $(left) - 40 : 300)) "$logs/bin/$name" ${filter:+--gtest_filter="$filter"} \
      > "$logs/$name.log" 2>&1
    echo "$name rc=$? at $(($(date +%s) - start)) s: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$logs/$name.log" | tr '\n' ' ')"
    grep -E "^\[  (FAILED|SKIPPED) \] [A-Za-z]|Failure$" "$logs/$name.log" | head -10
  done
fi
if [ -n "${STAGES:-}" ] && [ "$(left)" -gt 60 ]; then
  OUT=$logs/stages STAGES=$STAGES GPULAB_PREBUILT=.gpurun/bin/gpulab.xz \
    bash bench/gpuhost_benchmarks.sh $(($(left) - 15)) 2>&1 | tail -80
fi
pkill -P "$watchdog" 2> /dev/null
kill "$watchdog" 2> /dev/null
send
echo "gpuhost-call: done at $(($(date +%s) - start)) s"
