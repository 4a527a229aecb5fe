#!/usr/bin/env bash
# INT8 and FP8 plans on the GPU host: the bundled MobileNetV2's 8-bit plans classify the sample
# photos on the GPU (top-1 agreement with the GPU FP32 plan, to set beside the CPU emulation's
# figure from `gpulab accuracy`), and their GPU compute time against the FP16 plan's.
# Run from the project root after `source .gpuhost/enter.sh`, with a gpulab built for the host:
#   GPULAB=build/gpuhost/gpulab CACHE=cache.json [FALLBACK_LAYERS=names.txt] [R18=resnet18.onnx] \
#     [PREV_GPULAB=other/gpulab] OUT=dir bash bench/gpuhost_int8.sh [budget_s]
# CACHE is a calibration cache of the bundled MobileNetV2 (gpulab build/accuracy
# --calibration-cache) holding the INT8 and FP8 bias corrections, made on any machine: calibration
# runs on the CPU and the model file is the same everywhere, so the GPU plans use the very scales the
# emulated figures were measured with. FALLBACK_LAYERS (one layer name per line, e.g. the `layers` of
# `gpulab accuracy --fallback auto --json`) adds an INT8 plan with those layers in FP16. Without
# CACHE the MobileNetV2 part is skipped (the ResNet-18 part below still runs).
# BATCHES ("1 256" by default) are timed with CUDA graphs, inputs on the device; plans are built for
# the largest. The data set is read from $GPULAB_DATASET_DIR (default .gpuhost/data/imagenet-sample-256).
# Everything goes to $OUT: classify_<name>.json (predictions, one per photo; bench/agreement.py
# compares them), bench_<name>_b<batch>.json.
set -uo pipefail
budget=${1:-300}
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
gpulab=${GPULAB:-build/gpuhost/gpulab}
out=${OUT:-gpuhost-logs}
data=${GPULAB_DATASET_DIR:-$PWD/.gpuhost/data/imagenet-sample-256}
model=models/mobilenet_v2_1.0_224.onnx
batches=${BATCHES:-1 256}
photos=$data
[ -d "$data/images" ] && photos=$data/images  # labels.tsv's folder of the sample set (classify does not recurse)
max_batch=$(tr ' ' '\n' <<< "$batches" | sort -n | tail -1)
mkdir -p "$out"
mnv2_plans=true
if [ ! -f "${CACHE:-}" ]; then
  echo "gpuhost_int8: no CACHE (a calibration cache of $model): MobileNetV2 skipped"
  mnv2_plans=false
fi

build_plan() {  # name precision [build flags]
  local name=$1 precision=$2
  shift 2
  timeout $(($(left) - 10)) "$gpulab" build "$model" --precision "$precision" --max-batch "$max_batch" \
    --calibration-cache "$CACHE" --timing-cache /tmp/gpulab-timing-cache.json -o "/tmp/$name.gpl" "$@" \
    > "$out/build_$name.log" 2>&1
  echo "build $name rc=$? at $(($(date +%s) - start)) s"
}
classify() {  # name plan-or-model flags...
  local name=$1
  shift
  timeout $(($(left) - 10)) "$gpulab" classify "$@" --batch 64 --top-k 1 --json "$photos" \
    > "$out/classify_$name.json" 2> "$out/classify_$name.log"
  echo "classify $name rc=$? at $(($(date +%s) - start)) s"
}
bench() {  # name batch plan-or-model flags...
  local name=$1 batch=$2
  shift 2
  timeout 120 "$gpulab" bench "$@" --batch "$batch" --min-duration-s 1 --cuda-graph --no-include-transfers \
    --json "$out/bench_${name}_b$batch.json" > "$out/bench_${name}_b$batch.log" 2>&1
  echo "bench $name b$batch rc=$? $(grep -iE "gpu compute" "$out/bench_${name}_b$batch.log" | head -1 | tr -s ' ')"
}

plans=()
$mnv2_plans && build_plan int8 int8 && build_plan fp8 fp8 && plans=(int8 fp8)
if $mnv2_plans && [ -f "${FALLBACK_LAYERS:-}" ]; then
  flags=()
  while read -r layer; do [ -n "$layer" ] && flags+=(--layer-precision "$layer=fp16"); done < "$FALLBACK_LAYERS"
  build_plan int8_fallback int8 "${flags[@]}"
  plans+=(int8_fallback)
fi
$mnv2_plans && classify fp32 --model "$model" --device cuda --precision fp32
for p in "${plans[@]}"; do
  [ -f "/tmp/$p.gpl" ] && classify "$p" --plan "/tmp/$p.gpl"
done
for b in $batches; do
  [ "$(left)" -lt 30 ] && break
  $mnv2_plans && bench fp16 "$b" --model "$model" --precision fp16 --timing-cache /tmp/gpulab-timing-cache.json
  for p in "${plans[@]}"; do
    [ -f "/tmp/$p.gpl" ] && bench "$p" "$b" --plan "/tmp/$p.gpl"
  done
done
# R18 (an ONNX file, e.g. the seeded ResNet-18 fixture): its INT8 plan, calibrated on the host
# (R18_CALIBRATION_IMAGES photos, 32 by default: this is for speed, not for accuracy; `-v`: the
# build log has every 8-bit tactic's time per layer), timed beside its FP16 plan at the same
# batches, and beside PREV_GPULAB's INT8 plan (another gpulab, e.g. the previous commit's: the
# same-run A/B of a kernel change), built and timed the same way.
r18_int8() {  # binary name
  timeout $(($(left) - 60)) "$1" -v build "$R18" --precision int8 --max-batch "$max_batch" \
    --calibration-data "$data" --calibration-images "${R18_CALIBRATION_IMAGES:-32}" \
    --timing-cache /tmp/gpulab-timing-cache.json -o "/tmp/$2.gpl" > "$out/build_$2.log" 2>&1
  echo "build $2 rc=$? at $(($(date +%s) - start)) s"
}
if [ -f "${R18:-}" ] && [ "$(left)" -gt 120 ]; then
  r18_int8 "$gpulab" r18_int8
  [ -x "${PREV_GPULAB:-}" ] && [ "$(left)" -gt 90 ] && r18_int8 "$PREV_GPULAB" r18_int8_prev
  for b in $batches; do
    [ "$(left)" -lt 30 ] && break
    bench r18_fp16 "$b" --model "$R18" --precision fp16 --timing-cache /tmp/gpulab-timing-cache.json
    [ -f /tmp/r18_int8.gpl ] && bench r18_int8 "$b" --plan /tmp/r18_int8.gpl
    [ -f /tmp/r18_int8_prev.gpl ] && gpulab=$PREV_GPULAB bench r18_int8_prev "$b" --plan /tmp/r18_int8_prev.gpl
  done
  # The per-layer profile (eager launches) with the roofline, at the largest batch.
  [ -f /tmp/r18_int8.gpl ] && [ "$(left)" -gt 40 ] &&
    bench r18_int8_profile "$max_batch" --plan /tmp/r18_int8.gpl --profile --ceilings
fi
echo "gpuhost_int8: end at $(($(date +%s) - start)) s"
