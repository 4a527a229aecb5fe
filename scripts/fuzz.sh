#!/usr/bin/env bash
# Runs one libFuzzer target of tests/fuzz for a fixed time, from its corpus.
#   scripts/fuzz.sh TARGET SECONDS [libFuzzer options...]
#   scripts/fuzz.sh list                     the targets
#   scripts/fuzz.sh TARGET repro FILE        runs one input (a crash's reproducer) and exits
#   scripts/fuzz.sh all SECONDS              every target for SECONDS each, two at a time (CI)
# TARGET is a name without the fuzz_ prefix (onnx_import, plan, jpeg, ...). Builds the fuzz preset
# (clang-14, ASan, UBSan; scripts/install-deps.sh --fuzz installs it) and generates the seeds on
# first use. The corpus is build/fuzz/corpus/TARGET (what the run adds; kept between runs), the
# generated seeds build/fuzz/seeds/TARGET and the checked-in tests/fuzz/corpus/TARGET (minimized
# inputs that add coverage). Exit status: 0 when nothing was found; otherwise libFuzzer's, after
# the reproducer has been printed (path, size, hex dump) with the command that replays it.
# Long runs: `nice -n 19 scripts/fuzz.sh TARGET 36000` (the machine is shared).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

targets="onnx_import plan timing_cache calibration_cache sweep_json report_input labels labels_tsv metrics_request image jpeg png bmp ppm"
if [ "${1:-}" = list ]; then
  echo "$targets" | tr ' ' '\n'
  exit 0
fi
if [ $# -lt 2 ]; then
  echo "usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer options...] | TARGET repro FILE | all SECONDS | list" >&2
  exit 2
fi
target=$1
shift

build=$root/build/fuzz
seeds=$build/seeds
build_and_seed() {
  [ -f "$build/build.ninja" ] || cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -- -j"${GPULAB_FUZZ_JOBS:-2}" "$@" >/dev/null
  # The seeds are generated again when their generators change (a new target's seeds included):
  # .complete holds the generators' hash.
  local stamp
  stamp=$(cat tests/fuzz/make_seeds.py tests/fuzz/make_plan_seeds.cc | sha256sum | cut -c1-64)
  if [ "$(cat "$seeds/.complete" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$seeds"
    local python=/usr/bin/python3
    [ -x "$python" ] || python=python3
    "$python" tests/fuzz/make_seeds.py --out "$seeds" >/dev/null
    "$build/fuzz/make_plan_seeds" "$seeds/onnx_import" "$seeds/plan" >/dev/null
    # Sweep results: what a simulated sweep writes (build/ci's gpulab, when the ci preset is built).
    mkdir -p "$seeds/sweep_json"
    cp tests/fuzz/corpus/sweep_json/* "$seeds/sweep_json/" 2>/dev/null || true
    echo "$stamp" > "$seeds/.complete"
  fi
  # Result files of every kind gpulab report reads (its own check, so older seed folders get them):
  # the fixtures of the GPU commands, the simulated sweep, the pipeline's CPU record; doctor's and
  # monitor's real outputs are checked in (tests/fuzz/corpus/report_input).
  if [ ! -d "$seeds/report_input" ]; then
    mkdir -p "$seeds/report_input.new"
    python3 tests/fixtures/make_report_fixtures.py --out "$seeds/report_input.new" >/dev/null
    cp tests/fuzz/corpus/sweep_json/* bench/results/2026-12-05-32716b3/cpu_pipeline_sample256_loop50.json \
      "$seeds/report_input.new/"
    mv "$seeds/report_input.new" "$seeds/report_input"
  fi
}

if [ "$target" = all ]; then
  start=$(date +%s)
  build_and_seed
  echo "fuzz: built and seeded in $(( $(date +%s) - start )) s; $(echo $targets | wc -w) targets, $1 s each, two at a time"
  export GPULAB_FUZZ_NO_BUILD=1
  set +e
  echo $targets | tr ' ' '\n' | xargs -P 2 -I{} bash scripts/fuzz.sh {} "$@"
  status=$?
  set -e
  echo "fuzz: all targets done in $(( $(date +%s) - start )) s"
  [ "$status" -eq 0 ] || { echo "fuzz: a target found a crash, a leak, a hang or a resource bound exceeded (above)"; exit 1; }
  exit 0
fi
case " $targets " in
  *" $target "*) ;;
  *) echo "fuzz.sh: unknown target '$target'; one of: $targets" >&2; exit 2 ;;
esac

# Per target: the most bytes an input may have (libFuzzer's -max_len), and dictionaries.
case $target in
  onnx_import) max_len=262144; dicts="onnx_import" ;;
  plan) max_len=262144; dicts="plan" ;;
  timing_cache | calibration_cache) max_len=16384; dicts="json" ;;
  sweep_json) max_len=65536; dicts="json" ;;
  report_input) max_len=65536; dicts="json" ;;
  labels | labels_tsv) max_len=16384; dicts="" ;;
  metrics_request) max_len=8192; dicts="metrics_request" ;;
  image) max_len=65536; dicts="jpeg png bmp ppm" ;;
  *) max_len=65536; dicts="$target" ;;
esac

[ -n "${GPULAB_FUZZ_NO_BUILD:-}" ] || build_and_seed "fuzz_$target" make_plan_seeds
binary=$build/fuzz/fuzz_$target

if [ "$1" = repro ]; then
  exec "$binary" -runs=1 "$2"
fi
seconds=$1
shift

corpus=$build/corpus/$target
artifacts=$build/artifacts/$target
mkdir -p "$corpus" "$artifacts"
dirs=("$corpus" "$seeds/$target")
[ -d "tests/fuzz/corpus/$target" ] && dirs+=("tests/fuzz/corpus/$target")

dict_args=()
if [ -n "$dicts" ]; then
  dict=$build/$target.dict
  for d in $dicts; do cat "tests/fuzz/dict/$d.dict"; done >"$dict"
  dict_args=(-dict="$dict")
fi

log=$build/logs/$target.log
mkdir -p "$(dirname "$log")"
# -malloc_limit_mb: no single allocation above 1 GiB from inputs of at most 256 kB (docs/fuzzing.md,
# resource bounds); -timeout: an input that takes 10 s is a hang. Leaks are reported too.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
[ -x /usr/lib/llvm-14/bin/llvm-symbolizer ] && export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
set +e
"$binary" "${dict_args[@]}" -max_len="$max_len" -max_total_time="$seconds" -timeout=10 \
  -rss_limit_mb=2560 -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$artifacts/" \
  "$@" "${dirs[@]}" >"$log" 2>&1
status=$?
set -e

grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)" "$log" | sed "s/^/fuzz $target: /" || true
grep -E "^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)" "$log" | sed "s/^/fuzz $target: /" || true
if [ "$status" -ne 0 ]; then
  echo "fuzz $target: FAILED (libFuzzer exit $status); the end of its log ($log):"
  tail -n 60 "$log"
  reproducer=$(grep -oE "Test unit written to [^ ]+" "$log" | tail -1 | sed 's/Test unit written to //')
  if [ -n "$reproducer" ] && [ -f "$reproducer" ]; then
    echo "fuzz $target: reproducer $reproducer ($(stat -c %s "$reproducer") bytes); replay with:"
    echo "  scripts/fuzz.sh $target repro $reproducer"
    echo "fuzz $target: reproducer bytes (first 1 kB, hex):"
    od -A x -t x1z -v -N 1024 "$reproducer"
  fi
  exit "$status"
fi
