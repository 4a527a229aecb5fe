#!/usr/bin/env bash
# Builds gpulab and GPU test binaries for the GPU host on the development machine (gpuhost preset:
# sm_90, the Debian 12 libraries that .gpuhost/debs carries), strips them and xz-compresses them
# into the ignored .gpurun/bin/, so that a device call runs them without spending its minutes on a
# build (bench/gpuhost_benchmarks.sh: GPULAB_PREBUILT=.gpurun/bin/gpulab.xz and, for its tests
# stage, GPULAB_PREBUILT_TESTS=.gpurun/bin). From the project's root:
#   bash scripts/gpuhost-prebuild.sh [test target ...]     e.g. quant_kernels_gpu_test engine_gpu_test
# scripts/gpuhost-call.sh runs them in a device call (tests, then gpuhost_benchmarks.sh's stages).
# gpulab compresses to about 3.5 MB and a test binary to 0.5-3 MB; a call carries at most 64 MiB
# with the checkout (about 23 MB) and .gpuhost (about 9 MB of packages, plus the sample photos when
# a stage needs them, 25 MB), so name only the tests the call runs. Set CMAKE_CXX_COMPILER_LAUNCHER
# and CMAKE_CUDA_COMPILER_LAUNCHER to ccache to rebuild faster.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.gpurun/bin
grep -qxF '/.gpurun/' .git/info/exclude 2>/dev/null || echo '/.gpurun/' >> .git/info/exclude
cmake --preset gpuhost > /dev/null
cmake --build build/gpuhost --target gpulab "$@"
rm -rf "$bin" && mkdir -p "$bin"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
pack() {  # built binary
  strip -o "$scratch/$(basename "$1")" "$1"
  xz -T0 -6 -c "$scratch/$(basename "$1")" > "$bin/$(basename "$1").xz"
}
pack build/gpuhost/gpulab
for t in "$@"; do
  path=$(find build/gpuhost/tests -type f -name "$t" -perm -u+x | head -1)
  [ -n "$path" ] || { echo "gpuhost-prebuild: no built test binary named $t" >&2; exit 2; }
  pack "$path"
done
du -h "$bin"/*.xz
echo "gpuhost-prebuild: $(du -sh "$bin" | cut -f1) in $bin (commit $(git rev-parse --short=7 HEAD)$(git diff --quiet HEAD || echo ', with uncommitted changes'))"
