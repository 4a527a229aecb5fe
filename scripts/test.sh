#!/usr/bin/env bash
# Installs what the tests need (build dependencies plus Debian's torch/torchvision/onnx for the
# seeded fixtures), builds with warnings as errors, and runs every test that this machine can
# run. GPU tests are labelled `gpu`; without a GPU they report themselves as skipped.
#   GPULAB_TEST_PRESETS="ci asan" scripts/test.sh   also runs the CPU tests under ASan/UBSan
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
for preset in ${GPULAB_TEST_PRESETS:-ci}; do
  echo "== $preset"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset"
  ctest --preset "$preset"
done
