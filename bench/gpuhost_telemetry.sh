#!/usr/bin/env bash
# Telemetry, doctor and bandwidth on the GPU host: writes the evidence the issue asks for to $OUT.
#
#   bench/gpuhost_telemetry.sh            # from the repository root; OUT defaults to ./out/telemetry
#   BUILD_DIR=build/gpuhost OUT=/tmp/x bench/gpuhost_telemetry.sh
#
# Produces: doctor.txt/.json (table, exit code), monitor.csv (idle readings, every field),
# monitor_load.csv (readings while `gpulab bandwidth` runs), metrics.txt (one Prometheus scrape),
# bandwidth.txt/.csv (full sweep), gpu_tests.txt (ctest -L gpu for telemetry), and rc.txt with
# each step's exit code. Every step runs even when an earlier one fails.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out/telemetry}"
BUILD_DIR="${BUILD_DIR:-build/gpuhost}"
mkdir -p "$OUT"
: > "$OUT/rc.txt"

step() {  # step NAME COMMAND...: runs COMMAND, records its exit code
  local name=$1
  shift
  "$@"
  echo "$name $?" >> "$OUT/rc.txt"
}

{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv; } \
  > "$OUT/nvidia-smi.txt" 2>&1

if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  step configure cmake --preset gpuhost -B "$BUILD_DIR" > "$OUT/configure.log" 2>&1
fi
step build cmake --build "$BUILD_DIR" -j"$(nproc)" --target gpulab telemetry_gpu_test telemetry_test \
  telemetry_cli_test doctor_test > "$OUT/build.log" 2>&1
GPULAB="$BUILD_DIR/gpulab"

step doctor "$GPULAB" doctor > "$OUT/doctor.txt" 2>&1
step doctor_json "$GPULAB" doctor --json > "$OUT/doctor.json" 2> "$OUT/doctor_json.stderr"
step monitor_idle "$GPULAB" monitor --csv --count 10 --interval-ms 200 > "$OUT/monitor.csv" 2> "$OUT/monitor.stderr"
step monitor_json "$GPULAB" monitor --json --count 1 > "$OUT/monitor.jsonl" 2>> "$OUT/monitor.stderr"
step monitor_live "$GPULAB" monitor --count 1 > "$OUT/monitor_live.txt" 2>> "$OUT/monitor.stderr"

# Readings while copies run: PCIe rx/tx, link generation under load, utilization.
"$GPULAB" monitor --csv --count 40 --interval-ms 100 \
  --fields timestamp,index,utilization.gpu,memory.used,power.draw,clocks.sm,pcie.rx,pcie.tx,pcie.link.gen.current,pcie.link.width.current,clocks_event_reasons.names \
  > "$OUT/monitor_load.csv" 2>> "$OUT/monitor.stderr" &
MON=$!
step bandwidth_load "$GPULAB" bandwidth --sizes 256M --copies h2d,d2h --memory pinned --repeats 20 \
  > "$OUT/bandwidth_load.txt" 2>&1
wait "$MON"
echo "monitor_load $?" >> "$OUT/rc.txt"

# One Prometheus scrape.
"$GPULAB" monitor --serve 127.0.0.1:19400 > /dev/null 2> "$OUT/serve.stderr" &
SRV=$!
sleep 2
if command -v curl > /dev/null; then
  step metrics curl -sS http://127.0.0.1:19400/metrics -o "$OUT/metrics.txt"
else
  step metrics python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:19400/metrics').read().decode())" > "$OUT/metrics.txt"
fi
kill "$SRV" 2> /dev/null
wait "$SRV" 2> /dev/null

step bandwidth "$GPULAB" bandwidth > "$OUT/bandwidth.txt" 2> "$OUT/bandwidth.stderr"
step bandwidth_csv "$GPULAB" bandwidth --csv --sizes 64M,256M,1G --repeats 10 > "$OUT/bandwidth.csv" 2>> "$OUT/bandwidth.stderr"

step gpu_tests ctest --test-dir "$BUILD_DIR" -L gpu -R TelemetryGpu --output-on-failure -V > "$OUT/gpu_tests.txt" 2>&1
step unit_tests ctest --test-dir "$BUILD_DIR" -R "Telemetry|Doctor|DeviceFacts|ClockEvent|Bandwidth|MetricsServer|GpulabCli" \
  --output-on-failure > "$OUT/unit_tests.txt" 2>&1
cat "$OUT/rc.txt"
