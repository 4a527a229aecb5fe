#!/usr/bin/env bash
# Installs what gpulab needs, builds it, and runs its main job on the built-in default:
# `gpulab classify` with the bundled MobileNetV2 on the bundled photos. With an NVIDIA GPU and
# driver it builds the CUDA backend and runs there; without one it says so and uses the CPU
# reference backend. Extra arguments go to `gpulab classify`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --no-python
if command -v nvcc >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  preset=release
else
  preset=cpu-only
fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" --target gpulab
exec "build/$preset/gpulab" classify "$@"
