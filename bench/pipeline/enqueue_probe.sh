#!/usr/bin/env bash
# Where gpulab pipeline's infer thread loses its time on the GPU path (docs/performance.md, "The
# input pipeline and torchvision classifiers on an H100"). Its first run (2026-12-06, d99c91e)
# showed the enqueue time to be one 3-9 s preparation of cuDNN plans per new batch size, not a
# slow enqueue per batch (f09ee28 prepares before the clock). Runs one `gpulab pipeline --json -v` per variant over the same photos and
# prints, per variant, the warm img/s, the GPU busy split, the infer thread's host time and the
# enqueue log lines (which part of the enqueue was slow), and per thread (thread_sampler.py, from
# /proc every 5 ms) its user and system CPU time and where its samples found it. Variants:
#   default           16 decode threads (the host's cores)
#   threads1, threads4  --decode-threads 1 / 4
#   malloc            GLIBC_TUNABLES that stop glibc trimming and mmapping the decode threads'
#                     buffers (every arena grow or trim takes the process's mmap lock)
#   eager             --no-cuda-graph
# Usage, on the GPU host after `source .gpuhost/enter.sh`:
#   bash bench/pipeline/enqueue_probe.sh GPULAB MODEL IMAGES_DIR OUT_DIR [variant ...]
# TIMING_CACHE names the tactic timing cache to use (default OUT_DIR/timing-cache.json, new).
set -uo pipefail
if [ $# -lt 4 ]; then
  sed -n 2,14p "$0" >&2
  exit 2
fi
gpulab=$1 model=$2 images=$3 out=$4
shift 4
variants=${*:-default threads1 threads4 malloc eager}
mkdir -p "$out"
cache=${TIMING_CACHE:-$out/timing-cache.json}
here=$(dirname "$0")
for v in $variants; do
  env=() flags=()
  case $v in
    default) ;;
    threads1) flags=(--decode-threads 1) ;;
    threads4) flags=(--decode-threads 4) ;;
    malloc) env=(GLIBC_TUNABLES=glibc.malloc.trim_threshold=4294967295:glibc.malloc.mmap_threshold=33554432) ;;
    eager) flags=(--no-cuda-graph) ;;
    *) echo "enqueue_probe: unknown variant '$v'" >&2; exit 2 ;;
  esac
  timeout 120 env "${env[@]}" "$gpulab" -v pipeline --model "$model" --precision fp16 --batch 256 --loop 6 \
    --device cuda --timing-cache "$cache" "${flags[@]}" --json "$images" > "$out/$v.json" 2> "$out/$v.log" &
  pid=$!
  python3 "$here/thread_sampler.py" "$pid" --json "$out/$v.threads.json" > "$out/$v.threads.txt" 2>&1 &
  sampler=$!
  wait "$pid"
  rc=$?
  wait "$sampler"
  python3 - "$out/$v.json" "$v" "$rc" << 'EOF'
import json, sys
path, name, rc = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    d = json.load(open(path))
except ValueError:
    print(f"{name}: exit code {rc}, no JSON")
    sys.exit(0)
s = d.get("gpu_split") or {}
print(f"{name}: {d.get('warm_throughput_ips', 0):.0f} img/s warm; GPU model {s.get('model_s', 0):.3f} s, "
      f"preprocessing {s.get('preprocess_s', 0):.3f} s; host: queueing {s.get('host_submit_s') or 0:.3f} s, "
      f"enqueue {s.get('host_enqueue_s') or 0:.3f} s, waiting {s.get('host_wait_s') or 0:.3f} s")
EOF
  grep -m3 "enqueue at batch" "$out/$v.log" | sed 's/^/  /'
  cat "$out/$v.threads.txt"
done
