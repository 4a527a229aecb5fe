#!/usr/bin/env bash
# One run on the GPU host for the engine, inside a fixed time budget: configure, build the engine's
# test and example first (model fixtures generated meanwhile with the host's torch), the other
# gpu-labelled tests next, run every gpu-labelled test, then time ResNet-18 (FP16, CUDA graphs,
# batch 256 with a per-layer profile, and batch 1). Run from the project root after
# `source .gpuhost/enter.sh`. Logs go to $OUT (or ./gpuhost-logs); BUILD_DIR overrides build/gpuhost.
#   bash tests/gpu/engine/gpuhost_run.sh [budget_s]
set -uo pipefail
budget=${1:-510}
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
out=${OUT:-gpuhost-logs}
mkdir -p "$out"
build=${BUILD_DIR:-build/gpuhost}

# cpp-httplib's pkg-config file requires brotli and openssl .pc files; stub the ones the host lacks
# (they only matter for static linking).
stub=/tmp/gpulab-pcstub; mkdir -p "$stub"
for m in libbrotlicommon libbrotlidec libbrotlienc openssl zlib; do
  PKG_CONFIG_PATH=/opt/gpuhost/usr/lib/x86_64-linux-gnu/pkgconfig:/opt/gpuhost/usr/share/pkgconfig:${PKG_CONFIG_PATH:-} \
    pkg-config --exists "$m" || printf 'Name: %s\nDescription: stub\nVersion: 3.0.0\n' "$m" >"$stub/$m.pc"
done
export PKG_CONFIG_PATH=/opt/gpuhost/usr/lib/x86_64-linux-gnu/pkgconfig:/opt/gpuhost/usr/share/pkgconfig:$stub${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}

fe="${GPUHOST_PIP:-}/include"
[ -f "$fe/cudnn_frontend.h" ] || fe=""
timeout 90 cmake --preset gpuhost -G Ninja -B "$build" ${fe:+-DGPULAB_CUDNN_FRONTEND_INCLUDE_DIR=$fe} >"$out/configure.log" 2>&1 \
  || { tail -30 "$out/configure.log"; exit 1; }
echo "configured at $(( $(date +%s) - start )) s"

# torch >= 2.9 exports with dynamo by default (needs onnxscript): ask for the TorchScript exporter.
( PYTHONUNBUFFERED=1 timeout 300 python3 - "$build/fixtures" >"$out/fixtures.log" 2>&1 <<'PY'
import functools, inspect, runpy, sys
import torch
if "dynamo" in inspect.signature(torch.onnx.export).parameters:
    torch.onnx.export = functools.partial(torch.onnx.export, dynamo=False)
sys.argv = ["make_model_fixtures.py", "--out", sys.argv[1]]
runpy.run_path("tests/fixtures/make_model_fixtures.py", run_name="__main__")
PY
) &
fixtures_pid=$!

for t in engine_gpu_test engine_example kernels_gpu_test telemetry_gpu_test gpulab bench_gpu_test; do
  [ "$(left)" -lt 200 ] && { echo "skipping build of $t: time"; continue; }
  timeout $(( $(left) - 190 )) cmake --build "$build" -j16 --target "$t" -- -k 0 >>"$out/build.log" 2>&1 \
    || echo "build of $t failed"
  echo "built $t at $(( $(date +%s) - start )) s"
done
grep -E "error:|FAILED" "$out/build.log" | head -20
wait "$fixtures_pid"; tail -2 "$out/fixtures.log"; ls "$build/fixtures" 2>/dev/null | tr '\n' ' '; echo

timeout $(( $(left) - 70 )) ctest --test-dir "$build" -L gpu --output-on-failure --timeout 200 >"$out/ctest.log" 2>&1
echo "ctest done at $(( $(date +%s) - start )) s"
grep -E "tests passed|tests failed|\*\*\*Failed|\*\*\*Timeout|Not Run|Exception|\[ error \]|\[ note" "$out/ctest.log" | head -70

model="$build/fixtures/resnet18.onnx"
ex="$build/tests/gpu/engine/engine_example"
if [ -f "$model" ] && [ -x "$ex" ] && [ "$(left)" -gt 20 ]; then
  timeout $(( $(left) * 2 / 3 )) "$ex" "$model" --precision fp16 --batch 256 --iterations 50 \
      --timing-cache /tmp/tc.json --save /tmp/r18_b256.plan --profile 2>&1 | tee "$out/r18_fp16_b256.log"
  timeout 20 "$ex" /tmp/r18_b256.plan --batch 256 --iterations 30 2>&1 | tee "$out/r18_fp16_b256_loaded.log"
  [ "$(left)" -gt 10 ] && timeout $(( $(left) - 3 )) "$ex" "$model" --precision fp16 --batch 1 --iterations 300 \
      2>&1 | tee "$out/r18_fp16_b1.log"
fi
echo "end at $(( $(date +%s) - start )) s"
