#!/usr/bin/env bash
# What gpulab measures on the GPU host, in one call inside a time budget: build (gpuhost preset),
# the gpu-labelled tests, the precision-agreement check on the ImageNet sample set, `gpulab bench`
# on ResNet-18 and MobileNetV2, and the side-by-side comparison with PyTorch.
# Run from the project root after `source .gpuhost/enter.sh`; logs go to $OUT.
#   OUT=dir STAGES="tests accuracy bench compare compile grid sweep torchvision pipeline probe soak crosscheck int8 buildcost" bash bench/gpuhost_benchmarks.sh [budget_s]
# COMPARE_MODELS="r18 mnv2" and COMPARE_ARGS choose what the compare stage runs.
# BUILD_TARGETS="gpulab" builds only those targets (for calls that run no tests).
# GPULAB_PREBUILT=file.xz: a gpulab binary an earlier call on the host built (and returned through
# $OUT), xz-compressed; configure and build are skipped, so only the stages that run gpulab alone
# (bench, sweep, crosscheck, compare, grid) make sense. Saves the build's minutes of device time.
# The data set is read from $GPULAB_DATASET_DIR (default .gpuhost/data/imagenet-sample-256).
# Set GPULAB_GIT_COMMIT to the commit whose tree was copied: the copy's .git does not say it, and
# every result records it (cmake/write_git_commit.cmake).
set -uo pipefail
budget=${1:-540}
stages=" ${STAGES:-tests accuracy bench compare} "
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
has() { [[ "$stages" == *" $1 "* ]]; }
out=${OUT:-gpuhost-logs}
# Model names in the lists below (and GRID_MODELS): checked before anything is built.
for cfg in ${BENCH_CONFIGS:-} ${PROFILE_CONFIGS:-} ${COMPARE_MODELS:-} ${GRID_MODELS:-} ${SWEEP_MODELS:-} \
  ${BUILDCOST_CONFIGS:-}; do
  case ${cfg%%:*} in
    r18 | mnv2 | mnv3) ;;
    *) echo "gpuhost_benchmarks: unknown model '${cfg%%:*}' in '$cfg' (r18, mnv2 or mnv3)" >&2; exit 2 ;;
  esac
done
build=${BUILD_DIR:-build/gpuhost}
mkdir -p "$out"
export GPULAB_DATASET_DIR=${GPULAB_DATASET_DIR:-$PWD/.gpuhost/data/imagenet-sample-256}

# cpp-httplib's pkg-config file names brotli/openssl .pc files the host may lack; stub them
# (they only matter for static linking).
stub=/tmp/gpulab-pcstub
mkdir -p "$stub"
pc=/opt/gpuhost/usr/lib/x86_64-linux-gnu/pkgconfig:/opt/gpuhost/usr/share/pkgconfig
for m in libbrotlicommon libbrotlidec libbrotlienc openssl zlib; do
  PKG_CONFIG_PATH=$pc:${PKG_CONFIG_PATH:-} pkg-config --exists "$m" ||
    printf 'Name: %s\nDescription: stub\nVersion: 3.0.0\n' "$m" > "$stub/$m.pc"
done
export PKG_CONFIG_PATH=$pc:$stub${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
fe="${GPUHOST_PIP:-}/include"
[ -f "$fe/cudnn_frontend.h" ] || fe="$PWD/.gpuhost/cudnn_frontend/include"  # headers carried without the wheel
[ -f "$fe/cudnn_frontend.h" ] || fe=""
# CUTLASS's headers: from the nvidia-cutlass wheel when enter.sh installed it, else from a carried
# tarball of its include folder (tar czf .gpuhost/cutlass-include.tgz -C <wheel>/cutlass_library/source include).
cutlass="${GPUHOST_PIP:-}/cutlass_library/source/include"
if [ ! -f "$cutlass/cutlass/cutlass.h" ] && [ -f .gpuhost/cutlass-include.tgz ]; then
  mkdir -p /tmp/gpulab-cutlass && tar xzf .gpuhost/cutlass-include.tgz -C /tmp/gpulab-cutlass
  cutlass=/tmp/gpulab-cutlass/include
fi
[ -f "$cutlass/cutlass/cutlass.h" ] || cutlass=""

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv \
  | tee "$out/gpu.txt"
mkdir -p "$build"
(PYTHONUNBUFFERED=1 timeout 300 python3 tests/fixtures/make_model_fixtures.py --out "$build/fixtures" \
  > "$out/fixtures.log" 2>&1) &
fixtures=$!
if [ -n "${GPULAB_PREBUILT:-}" ]; then
  if ! xz -dc "$GPULAB_PREBUILT" > "$build/gpulab"; then
    echo "gpuhost_benchmarks: cannot unpack $GPULAB_PREBUILT" >&2
    exit 1
  fi
  chmod +x "$build/gpulab"
  if ! "$build/gpulab" --version > "$out/version.txt" 2>&1; then
    echo "gpuhost_benchmarks: the prebuilt gpulab does not run here:" >&2
    cat "$out/version.txt" >&2
    ldd "$build/gpulab" | grep "not found" >&2
    exit 1
  fi
else
  # The torchvision fixtures need the python3 with torch on PATH (the host's venv): CMake would pick
  # /usr/bin/python3 first, which has no numpy there.
  timeout 120 cmake --preset gpuhost -G Ninja -B "$build" ${fe:+-DGPULAB_CUDNN_FRONTEND_INCLUDE_DIR=$fe} \
    ${cutlass:+-DGPULAB_CUTLASS_INCLUDE_DIR=$cutlass} -DGPULAB_TV_FIXTURE_PYTHON3="$(command -v python3)" \
    > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  timeout $(($(left) - 60)) cmake --build "$build" -j"$(nproc)" ${BUILD_TARGETS:+--target $BUILD_TARGETS} -- -k 0 > "$out/build.log" 2>&1 ||
    { echo "build failed:"; grep -E "error|FAILED" "$out/build.log" | head -20; }
  echo "built at $(($(date +%s) - start)) s"
fi
wait "$fixtures"
tail -1 "$out/fixtures.log"
gpulab=$build/gpulab
r18=$build/fixtures/resnet18.onnx
mnv2=models/mobilenet_v2_1.0_224.onnx
mnv3=$build/fixtures/mobilenet_v3_small.onnx  # seeded random weights (make_model_fixtures.py)
# The record folder of today and the commit measured (bench/README.md, "Records"): the host's copy
# of the tree has no .git, so GPULAB_GIT_COMMIT names the commit there; git only where it works.
record_dir() {
  echo "bench/results/$(date -u +%F)-${GPULAB_GIT_COMMIT:-$(git rev-parse --short=7 HEAD 2>/dev/null || echo nocommit)}"
}
# The ONNX file of a short model name (BENCH_CONFIGS, PROFILE_CONFIGS, COMPARE_MODELS).
model_path() {
  case $1 in
    r18) echo "$r18" ;;
    mnv2) echo "$mnv2" ;;
    mnv3) echo "$mnv3" ;;
    *) echo "gpuhost_benchmarks: unknown model '$1' (r18, mnv2 or mnv3)" >&2; return 1 ;;
  esac
}

if has tests; then
  # Two fifths of what is left when other stages follow; all of it (less 10 s) when tests are
  # the only stage.
  tests_s=$(($(left) * 2 / 5))
  [ "$stages" = " tests " ] && tests_s=$(($(left) - 10))
  if [ -n "${GPULAB_PREBUILT_TESTS:-}" ]; then
    # Test binaries scripts/gpuhost-prebuild.sh built on the development machine (<name>.xz in that
    # folder): those TESTS names ("name" or "name:gtest_filter", in order), else every *_test.xz
    # there, each run whole or with its filter (TESTS_FILTER when it has none), against the
    # fixtures exported above.
    export GPULAB_MODEL_FIXTURES=$PWD/$build/fixtures
    tests_end=$(($(date +%s) + tests_s))
    entries=${TESTS:-}
    if [ -z "$entries" ]; then
      for f in "$GPULAB_PREBUILT_TESTS"/*_test.xz; do
        [ -e "$f" ] && entries="$entries $(basename "$f" .xz)"
      done
      [ -n "$entries" ] || echo "gpuhost_benchmarks: no *_test.xz in $GPULAB_PREBUILT_TESTS"
    fi
    for entry in $entries; do
      t=${entry%%:*}
      filter=${TESTS_FILTER:-}
      [ "$t" != "$entry" ] && filter=${entry#*:}
      f=$GPULAB_PREBUILT_TESTS/$t.xz
      xz -dc "$f" > "$build/$t" && chmod +x "$build/$t" || { echo "$t: cannot unpack $f"; continue; }
      t_left=$((tests_end - $(date +%s)))
      [ "$t_left" -lt 20 ] && { echo "$t: not run (the stage's time is up)"; continue; }
      timeout $((t_left < 200 ? t_left : 200)) "$build/$t" ${filter:+--gtest_filter="$filter"} \
        > "$out/$t.log" 2>&1
      echo "$t rc=$? at $(($(date +%s) - start)) s: $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/$t.log" | tr '\n' ' ')"
      grep -E "^\[  FAILED  \] [A-Za-z]|^\[  SKIPPED \] [A-Za-z]" "$out/$t.log" | head -10
    done
  else
    timeout $tests_s ctest --test-dir "$build" -L gpu -E "AccuracyGpu${TESTS_EXCLUDE:+|$TESTS_EXCLUDE}" ${TESTS_REGEX:+-R "$TESTS_REGEX"} --output-on-failure --timeout 200 \
      > "$out/ctest_gpu.log" 2>&1
    echo "gpu tests done at $(($(date +%s) - start)) s"
    grep -E "tests passed|tests failed|\*\*\*Failed|\*\*\*Timeout|\(Failed\)|\(Skipped\)" "$out/ctest_gpu.log" | head -30
  fi
fi
if has accuracy; then
  timeout 150 "$build/tests/gpu/accuracy/accuracy_gpu_test" 2>&1 | tee "$out/accuracy.log" | grep -vE "^\[ (RUN|  +OK) "
fi
if has bench; then
  # GPU compute time (inputs already on the device), CUDA graphs, median; one timing cache.
  # BENCH_CONFIGS overrides the list: "model:precision:batch[:nos2d|:nofuse|:nofold|:nochunk|:chunksearch] ..."
  # with model r18, mnv2 or mnv3 (MobileNetV3-Small, seeded weights); nos2d builds without the
  # space-to-depth stem rewrite, nofuse without the fused stem kernel, nofold with the float32
  # casts before depthwise layers, nochunk without batch-chunked tactics, chunksearch with them
  # timed on every long layer (--batch-chunks search), for before/after.
  # PROFILE_CONFIGS (same form) get a per-layer profile (eager) as well.
  configs=${BENCH_CONFIGS:-"r18:fp16:256 r18:fp16:1 r18:fp32:256 r18:tf32:256 r18:bf16:256 mnv2:fp16:256 mnv2:fp16:1 mnv2:fp32:256 mnv2:bf16:256"}
  bench_one() {  # model precision batch extra-flags name-suffix [more bench flags]
    local m=$1 p=$2 b=$3 extra=$4 suffix=$5
    shift 5
    local name
    name=$(basename "$m" .onnx)_${p}_b${b}${suffix}
    timeout 150 "$gpulab" -v bench --model "$m" --precision "$p" --batch "$b" --min-duration-s 1 \
      --no-include-transfers --cuda-graph --timing-cache /tmp/gpulab-timing-cache.json $extra \
      --json "$out/bench_$name.json" "$@" > "$out/bench_$name.txt" 2>&1
    echo "$name rc=$? $(grep -iE "gpu compute|throughput" "$out/bench_$name.txt" | head -2 | tr -s ' ' | tr '\n' ' ')"
  }
  run_configs() {  # configs [more bench flags]
    local list=$1 cfg m p b f extra suffix
    shift
    for cfg in $list; do
      IFS=: read -r m p b f <<< "$cfg"
      m=$(model_path "$m") || continue
      extra="" suffix=""
      [ "$f" = nos2d ] && extra="--no-stem-space-to-depth" suffix=_nos2d
      [ "$f" = nofuse ] && extra="--no-fuse-stem" suffix=_nofuse
      [ "$f" = nofold ] && extra="--no-fold-casts" suffix=_nofold
      [ "$f" = nochunk ] && extra="--no-batch-chunks" suffix=_nochunk
      [ "$f" = chunksearch ] && extra="--batch-chunks search" suffix=_chunksearch
      [ "$(left)" -lt 60 ] && break
      bench_one "$m" "$p" "$b" "$extra" "$suffix$([ $# -gt 0 ] && echo _profile)" "$@"
    done
  }
  run_configs "$configs"
  run_configs "${PROFILE_CONFIGS:-r18:fp16:256}" --profile --ceilings
fi
if has compile; then
  # torch.compile (max-autotune) beside eager, CUDA graphs and gpulab; compiling takes minutes.
  timeout ${COMPILE_TIMEOUT:-$(($(left) - 30))} python3 bench/compare_pytorch.py "$r18" --gpulab "$gpulab" \
    ${COMPILE_ARGS:---modes eager,graph,compile,gpulab --batch 256,1 --precision fp16} --json "$out/compare_compile_resnet18.json" \
    > "$out/compare_compile_resnet18.txt" 2>&1
  tail -12 "$out/compare_compile_resnet18.txt"
fi
if has compare; then
  # COMPARE_MODELS picks the models ("r18 mnv2" by default); each gets an equal share of what is
  # left, so that the last one gets a turn.
  models=()
  for name in ${COMPARE_MODELS:-r18 mnv2}; do
    path=$(model_path "$name") && models+=("$path")
  done
  for i in "${!models[@]}"; do
    m=${models[$i]}
    [ "$(left)" -lt 40 ] && break
    t=$((($(left) - 20) / (${#models[@]} - i)))
    timeout $t python3 bench/compare_pytorch.py "$m" --gpulab "$gpulab" --gpulab-timing-cache /tmp/gpulab-timing-cache.json \
      ${COMPARE_ARGS:---modes eager,graph,gpulab --batch 1,256 --precision fp32,tf32,fp16,bf16} --json "$out/compare_$(basename "$m" .onnx).json" \
      > "$out/compare_$(basename "$m" .onnx).txt" 2>&1
    tail -22 "$out/compare_$(basename "$m" .onnx).txt"
  done
fi
if has grid; then
  # bench/grid.py: one compare_pytorch.py run per cell, spread over every GPU of the machine,
  # resumable from the cell files in GRID_RESULTS. By default that is the record folder of today
  # and the commit measured, bench/results/<YYYY-MM-DD>-<short commit> (bench/README.md,
  # "Records"): it travels with the working tree, so a later call on the same commit goes on from
  # it; unpack $OUT/grid-results.tgz into it after the call and commit the cell files.
  # GRID_MODELS picks the models ("r18 mnv2" by default); GRID_ARGS holds grid.py run's other
  # arguments, e.g.
  #   GRID_ARGS="--precision fp16 --batch 1024 --modes eager,graph,compile,gpulab --min-start-s 180 -- --iters 30"
  results=${GRID_RESULTS:-$(record_dir)}
  grid_models=()
  for name in ${GRID_MODELS:-r18 mnv2}; do
    path=$(model_path "$name") && grid_models+=(--model "$name=$path")
  done
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)
  # shellcheck disable=SC2086 # GRID_ARGS is a list of arguments
  python3 bench/grid.py run "${grid_models[@]}" --gpulab "$gpulab" --results "$results" --gpus "$gpus" \
    --budget-s $(($(left) - 20)) ${GRID_ARGS:-} 2>&1 | tee "$out/grid.log"
  python3 bench/grid.py table --results "$results" > "$out/grid.md"
  tar czf "$out/grid-results.tgz" -C "$results" .
fi
if has sweep; then
  # gpulab sweep of each of SWEEP_MODELS ("r18 mnv2" by default), fp32/tf32/fp16/bf16 to
  # out-of-memory with the accuracy gate on the sample photos; SWEEP_ARGS adds flags (e.g.
  # "--include-transfers --precisions fp16"). The JSON is kept in the record folder of the day and
  # commit (bench/results/<YYYY-MM-DD>-<short commit>/sweep_<model>.json), which travels with the
  # working tree: a call that runs out of time ends the sweep with SIGTERM (it stops after the
  # current point, its JSON complete), and the next call resumes it. Commit the JSON afterwards.
  results=${SWEEP_RESULTS:-$(record_dir)}
  mkdir -p "$results"
  for name in ${SWEEP_MODELS:-r18 mnv2}; do
    m=$(model_path "$name") || continue
    [ "$(left)" -lt 60 ] && break
    json="$results/sweep_${name}${SWEEP_SUFFIX:-}.json"
    resume=()
    [ -f "$json" ] && resume=(--resume "$json")
    # shellcheck disable=SC2086 # SWEEP_ARGS is a list of arguments
    timeout --kill-after=20 $(($(left) - 40)) "$gpulab" sweep --model "$m" --json "$json" "${resume[@]}" \
      --timing-cache /tmp/gpulab-timing-cache.json --dataset "$GPULAB_DATASET_DIR" ${SWEEP_ARGS:-} \
      > "$out/sweep_${name}.txt" 2>&1
    echo "sweep $name rc=$?"
    tail -25 "$out/sweep_${name}.txt"
  done
  tar czf "$out/sweep-results.tgz" -C "$results" .
fi
if has torchvision; then
  # bench/torchvision_bench.py: torchvision's classifiers (seeded, exported here with the host's
  # torch) that the engine accepts, gpulab's FP32/FP16 error and GPU compute at batch 1 and 256
  # against PyTorch's CUDA graph. The results file lives in the record folder of the day and commit
  # (TORCHVISION_RESULTS, like SWEEP_RESULTS) and travels with the tree, so the next call goes on
  # with the models not yet done; unpack $OUT/torchvision-results.tgz into it afterwards and commit
  # it. TORCHVISION_ARGS adds flags (e.g. "--models resnet50,vit_b_16").
  results=${TORCHVISION_RESULTS:-$(record_dir)}
  mkdir -p "$results"
  # shellcheck disable=SC2086 # TORCHVISION_ARGS is a list of arguments
  timeout --kill-after=20 $(($(left) - 20)) python3 bench/torchvision_bench.py --gpulab "$gpulab" \
    --results "$results/torchvision.json" --timing-cache /tmp/gpulab-timing-cache.json \
    --budget-s $(($(left) - 40)) --profile-slow ${TORCHVISION_ARGS:-} > "$out/torchvision.txt" 2>&1
  echo "torchvision_bench rc=$?"
  python3 bench/torchvision_bench.py --results "$results/torchvision.json" --table | tee "$out/torchvision.md"
  tar czf "$out/torchvision-results.tgz" -C "$results" .
fi
if has pipeline; then
  # bench/compare_pipeline.py (issue 29): `gpulab pipeline` against PyTorch's DataLoader and its
  # nvJPEG decode on the same files, end to end, for each of PIPELINE_MODELS ("mnv2 r18"), FP16 at
  # batch 256, over the sample photos; PIPELINE_FULLSIZE=1 adds MobileNetV2 over 200 larger JPEGs
  # (bench/pipeline/make_fullsize_jpegs.py, 1024x768). PIPELINE_ARGS adds flags (e.g. "--loop 20");
  # gpulab's own passes are PIPELINE_GPULAB_LOOP (40: at 20k+ img/s, five passes would last 0.25 s).
  for name in ${PIPELINE_MODELS:-mnv2 r18}; do
    m=$(model_path "$name") || continue
    [ "$(left)" -lt 60 ] && break
    # shellcheck disable=SC2086 # PIPELINE_ARGS is a list of arguments
    timeout $(($(left) - 20)) python3 bench/compare_pipeline.py "$m" --gpulab "$gpulab" --gpulab-timing-cache /tmp/gpulab-timing-cache.json \
      --gpulab-loop "${PIPELINE_GPULAB_LOOP:-40}" --images "$GPULAB_DATASET_DIR/images" --precision fp16 --batch 256 --json "$out/pipeline_$name.json" \
      ${PIPELINE_ARGS:-} > "$out/pipeline_$name.txt" 2>&1
    echo "pipeline $name rc=$?"
    tail -15 "$out/pipeline_$name.txt"
  done
  if [ -n "${PIPELINE_FULLSIZE:-}" ] && [ "$(left)" -gt 90 ]; then
    python3 bench/pipeline/make_fullsize_jpegs.py --out /tmp/gpulab-fullsize --count 200 \
      --source "$GPULAB_DATASET_DIR/images" > "$out/fullsize.log" 2>&1
    # shellcheck disable=SC2086
    timeout $(($(left) - 20)) python3 bench/compare_pipeline.py "$mnv2" --gpulab "$gpulab" --gpulab-timing-cache /tmp/gpulab-timing-cache.json \
      --gpulab-loop "${PIPELINE_GPULAB_LOOP:-40}" --images /tmp/gpulab-fullsize --precision fp16 --batch 256 --json "$out/pipeline_mnv2_fullsize.json" \
      ${PIPELINE_ARGS:-} > "$out/pipeline_mnv2_fullsize.txt" 2>&1
    echo "pipeline mnv2 fullsize rc=$?"
    tail -15 "$out/pipeline_mnv2_fullsize.txt"
  fi
fi
if has probe; then
  # bench/pipeline/enqueue_probe.sh: gpulab pipeline over the sample photos once per variant
  # (PROBE_VARIANTS, default all: decode threads, malloc tunables, eager launches), with the GPU
  # split, the infer thread's host time and the enqueue's own log of its slow part.
  # shellcheck disable=SC2086 # PROBE_VARIANTS is a list of names
  TIMING_CACHE=/tmp/gpulab-timing-cache.json timeout $(($(left) - 20)) bash bench/pipeline/enqueue_probe.sh "$gpulab" "$mnv2" "$GPULAB_DATASET_DIR/images" \
    "$out/probe" ${PROBE_VARIANTS:-} 2>&1 | tee "$out/probe.txt"
fi
if has soak; then
  # Issue 29's memory check: gpulab pipeline over the sample photos for about SOAK_S seconds (300 by
  # default; --loop sized from a 3-pass run's warm rate), then device memory and RSS after pass 1
  # against the end, from its JSON.
  soak_s=${SOAK_S:-300}
  soak() {  # loop json
    timeout $(($(left) - 10)) "$gpulab" pipeline --model "$mnv2" --precision fp16 --batch 256 --loop "$1" \
      --device cuda --timing-cache /tmp/gpulab-timing-cache.json --json "$GPULAB_DATASET_DIR/images" > "$2" 2> "$2.log"
  }
  soak 3 "$out/soak_probe.json"
  loops=$(python3 -c "import json,math,sys; d=json.load(open(sys.argv[1])); print(max(2, math.ceil($soak_s * d['warm_throughput_ips'] / d['files'])))" "$out/soak_probe.json" 2>/dev/null || echo 0)
  if [ "$loops" -gt 0 ] && [ "$(left)" -gt $((soak_s + 60)) ]; then
    soak "$loops" "$out/soak.json"
    echo "soak rc=$? ($loops passes)"
    python3 - "$out/soak.json" << 'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
m, mib = d["memory"], 1 << 20
print(f"soak: {d['images']} images in {d['wall_s']:.0f} s ({d['warm_throughput_ips']:.0f} img/s warm); "
      f"device memory {(m['device_used_after_first_pass_bytes'] or 0) / mib:.1f} -> {(m['device_used_final_bytes'] or 0) / mib:.1f} MiB; "
      f"RSS {m['rss_after_first_pass_bytes'] / mib:.1f} -> {m['rss_final_bytes'] / mib:.1f} MiB "
      f"({100 * (m['rss_growth_fraction'] or 0):+.2f}%); heap {m['heap_after_first_pass_bytes'] / mib:.1f} -> "
      f"{m['heap_before_last_pass_bytes'] / mib:.1f} MiB")
EOF
  else
    echo "soak: not run ($loops passes; $(left) s left for a $soak_s s run)"
  fi
fi
if has crosscheck; then
  # The sweep's NVML telemetry against nvidia-smi's own reading of the same seconds: one point
  # (CROSSCHECK_POINT, "fp16 256" by default) timed for 20 s, nvidia-smi sampling every 100 ms beside
  # it; bench/telemetry_crosscheck.py compares the means over nvidia-smi's busy window.
  read -r cp cb <<< "${CROSSCHECK_POINT:-fp16 256}"
  nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,utilization.gpu --format=csv -lms 100 \
    > "$out/crosscheck_smi.csv" 2>&1 &
  smi=$!
  timeout 150 "$gpulab" sweep --model "$r18" --precisions "$cp" --batches "$cb" --min-duration-s 20 \
    --timing-cache /tmp/gpulab-timing-cache.json --json "$out/crosscheck_sweep.json" > "$out/crosscheck_sweep.txt" 2>&1
  echo "crosscheck sweep rc=$?"
  kill "$smi"
  python3 bench/telemetry_crosscheck.py --smi "$out/crosscheck_smi.csv" --sweep "$out/crosscheck_sweep.json" \
    --json "$out/crosscheck.json"
fi
if has int8; then
  # Issue 28: bench/gpuhost_int8.sh with the seeded ResNet-18 at INT8_BATCHES ("1 256 1024"), its
  # INT8 plan beside FP16 and, when INT8_PREV names another gpulab (xz-compressed, e.g. the previous
  # commit's, carried in .gpurun), beside that gpulab's INT8 plan in the same run; MobileNetV2's 8-bit
  # plans when INT8_CACHE names its calibration cache. Stage `compile` adds torch.compile
  # (COMPILE_ARGS="--modes compile,gpulab --batch 256 --precision fp16").
  prev=""
  if [ -n "${INT8_PREV:-}" ] && xz -dc "$INT8_PREV" > /tmp/gpulab-prev && chmod +x /tmp/gpulab-prev; then
    prev=/tmp/gpulab-prev
  fi
  R18=$r18 GPULAB=$gpulab CACHE=${INT8_CACHE:-} PREV_GPULAB=$prev BATCHES=${INT8_BATCHES:-1 256 1024} \
    OUT=$out/int8 bash bench/gpuhost_int8.sh $(($(left) - 20)) 2>&1 | tail -40
fi
if has buildcost; then
  # Issue 30 item 3, a first build at max batch 1024: per BUILDCOST_CONFIGS entry ("r18:fp16
  # r18:fp32" by default), two builds from an empty timing cache, each with `-v` (the tactic
  # search's split and every candidate's time, for bench/tactic_search_log.py): tactics timed at
  # 1024 (the default) and at 256 (--tactic-batch 256); then both plans benched at batch 1024, A B A B.
  mkdir -p "$out/buildcost"
  for cfg in ${BUILDCOST_CONFIGS:-r18:fp16 r18:fp32}; do
    m=$(model_path "${cfg%%:*}") || continue
    p=${cfg#*:}
    name=${cfg%%:*}_$p
    for variant in t1024 tb256; do
      [ "$(left)" -lt 120 ] && break 2
      flags=()
      [ "$variant" = tb256 ] && flags=(--tactic-batch 256)
      rm -f "/tmp/buildcost_${name}_$variant.cache"
      t=$(date +%s%N)
      timeout $(($(left) - 60)) "$gpulab" -v build "$m" --precision "$p" --max-batch 1024 "${flags[@]}" \
        --timing-cache "/tmp/buildcost_${name}_$variant.cache" -o "/tmp/buildcost_${name}_$variant.plan" \
        > "$out/buildcost/build_${name}_$variant.log" 2>&1
      echo "buildcost $name $variant: rc=$? $(( ($(date +%s%N) - t) / 1000000 )) ms;" \
        "$(grep -oE "[0-9.]+ s building [0-9]+ cuDNN candidate plans.*" "$out/buildcost/build_${name}_$variant.log")" |
        tee -a "$out/buildcost/summary.txt"
    done
    for r in 1 2; do
      for variant in t1024 tb256; do
        [ -f "/tmp/buildcost_${name}_$variant.plan" ] && [ "$(left)" -gt 30 ] || continue
        timeout 60 "$gpulab" bench --plan "/tmp/buildcost_${name}_$variant.plan" --batch 1024 \
          --json "$out/buildcost/bench_${name}_${variant}_$r.json" > "$out/buildcost/bench_${name}_${variant}_$r.txt" 2>&1
        echo "buildcost $name $variant bench $r: rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(round(d['metrics']['gpu_compute_ms']['median'], 4), 'ms GPU compute median,', round(d['throughput_ips']), 'img/s')" \
          "$out/buildcost/bench_${name}_${variant}_$r.json" 2> /dev/null)" | tee -a "$out/buildcost/summary.txt"
      done
    done
  done
fi
echo "end at $(($(date +%s) - start)) s"
