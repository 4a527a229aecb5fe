#!/usr/bin/env bash
# One device call on the GPU host with binaries scripts/gpuhost-prebuild.sh made on the development
# machine (.gpurun/bin/*.xz): bench/gpuhost_benchmarks.sh with the prebuilt gpulab and test
# binaries, its tests stage first when TESTS names some, then STAGES, inside BUDGET seconds, and
# everything it wrote coming back in $OUT before the budget ends (logs.tgz: every log and JSON;
# records.tgz: today's record folder of COMMIT, which the stages resumed or filled;
# timing-cache.json: the tactic timings, for the next call to carry in .gpurun/timing-cache.json).
# Run from the project root through the device tool, e.g.
#   COMMIT=abc1234 BUDGET=560 TESTS="pipeline_gpu_test engine_gpu_test:EngineGpuModels.*" \
#     STAGES="probe sweep" SWEEP_MODELS=r18 bash scripts/gpuhost-call.sh
# with carry .gpuhost/debs .gpuhost/wheels .gpuhost/enter.sh .gpurun (and .gpuhost/data when a stage
# or test reads the sample photos; DATA=data-small for .gpuhost/data-small). COMMIT is the commit
# the binaries were built at (the host's copy has no .git); every record names it. TESTS entries are
# "name" or "name:gtest_filter"; the stages' own variables (SWEEP_ARGS, PIPELINE_ARGS, ...) pass
# through.
set -uo pipefail
start=$(date +%s)
budget=${BUDGET:-560}
: "${COMMIT:?set COMMIT to the commit the prebuilt binaries were built at}"
: "${OUT:?run through the device tool, which sets OUT}"
[ -n "${TESTS:-}${STAGES:-}" ] || { echo "gpuhost-call: name TESTS or STAGES (or both)" >&2; exit 2; }
[ -f .gpurun/bin/gpulab.xz ] || { echo "gpuhost-call: no .gpurun/bin/gpulab.xz: run scripts/gpuhost-prebuild.sh first" >&2; exit 2; }
export GPULAB_GIT_COMMIT=$COMMIT
# shellcheck source=/dev/null # packed by scripts/gpuhost-pack.sh, not in the repository
source .gpuhost/enter.sh > /dev/null
export GPULAB_DATASET_DIR=${GPULAB_DATASET_DIR:-$PWD/.gpuhost/${DATA:-data}/imagenet-sample-256}
logs=/tmp/gpuhost-call
mkdir -p "$logs"
[ -f .gpurun/timing-cache.json ] && cp .gpurun/timing-cache.json /tmp/gpulab-timing-cache.json
records="bench/results/$(date -u +%F)-$COMMIT"
send() {
  cp /tmp/gpulab-timing-cache.json "$OUT/timing-cache.json" 2> /dev/null
  tar czf "$OUT/logs.tgz" -C "$logs" . 2> /dev/null
  [ -d "$records" ] && tar czf "$OUT/records.tgz" -C "$records" . 2> /dev/null
}
(sleep $((budget - 10)) && send) > /dev/null 2>&1 &
watchdog=$!
OUT=$logs STAGES="${TESTS:+tests }${STAGES:-}" GPULAB_PREBUILT=.gpurun/bin/gpulab.xz \
  GPULAB_PREBUILT_TESTS=.gpurun/bin bash bench/gpuhost_benchmarks.sh $((budget - 15 - ($(date +%s) - start))) 2>&1 |
  tail -100
pkill -P "$watchdog" 2> /dev/null
kill "$watchdog" 2> /dev/null
send
echo "gpuhost-call: done at $(($(date +%s) - start)) s"
