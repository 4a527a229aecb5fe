#!/usr/bin/env bash
# Installs gpulab's Debian build and test dependencies. Idempotent and non-interactive:
# packages already present are skipped, so a second run costs one dpkg query.
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --no-python  skip what only the tests need (the PyTorch/ONNX fixture
#                                        generators, Chromium for the report's browser check)
#   scripts/install-deps.sh --fuzz       only what the fuzz preset adds: clang, libFuzzer and the
#                                        sanitizer runtimes, llvm-symbolizer (CI's fuzz stage)
set -euo pipefail
with_python=1
[ "${1:-}" = "--no-python" ] && with_python=0

if [ "${1:-}" = "--fuzz" ]; then
  pkgs=(clang-14 libclang-rt-14-dev llvm-14)
  with_python=0
else
pkgs=(cmake ninja-build g++ pkg-config
      libonnx-dev libprotobuf-dev protobuf-compiler
      libcli11-dev nlohmann-json3-dev libfmt-dev
      libturbojpeg0-dev libjpeg-dev libpng-dev zlib1g-dev  # libjpeg-dev: a name Debian and Ubuntu share
      libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev
      gnuplot-nox  # gpulab report draws its plots with it (svg terminal)
      python3 python3-pip   # pip: NVIDIA's cuDNN frontend and CUTLASS headers (below)
      dpkg-dev file)        # cpack's .deb: dpkg-shlibdeps finds the Depends: of the binary
if [ "$with_python" = 1 ]; then
  # Debian's torch/torchvision/onnx generate the seeded fixtures and the PyTorch goldens;
  # headless Chromium loads gpulab report's page in the browser test (tests/unit/report).
  pkgs+=(python3 python3-numpy python3-torch python3-torchvision python3-onnx python3-pil chromium)
fi
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "install-deps: done"
fi

[ "${1:-}" = "--fuzz" ] && exit 0

# NVIDIA's cuDNN frontend and CUTLASS C++ headers (the CUDA backend) come from the PyPI wheels
# nvidia-cudnn-frontend and nvidia-cutlass, at the versions and hashes pinned in
# scripts/pip-requirements.txt, installed into <project>/.deps/pip (git-ignored; --target keeps
# them out of the system Python, so Debian 12's externally-managed environment is not touched).
# src/backends/cuda/CMakeLists.txt looks there first: include/cudnn_frontend.h and
# cutlass_library/source/include/cutlass/cutlass.h. Nothing is downloaded when .deps/pip already
# holds the pinned versions; otherwise both are installed into a new folder that then replaces it.
root=$(cd "$(dirname "$0")/.." && pwd)
requirements="$root/scripts/pip-requirements.txt"
pins=$(sed -n 's/^\([A-Za-z0-9_.-]*\)==\([^ \\]*\).*/\1 \2/p' "$requirements")
stale=()
while read -r name version; do
  # pip names its metadata folder <name with _ for ->-<version>.dist-info.
  [ -d "$root/.deps/pip/${name//-/_}-$version.dist-info" ] || stale+=("$name==$version")
done <<< "$pins"
if [ "${#stale[@]}" -gt 0 ]; then
  echo "install-deps: installing ${stale[*]} (pinned in scripts/pip-requirements.txt) into $root/.deps/pip"
  mkdir -p "$root/.deps"
  fresh=$(mktemp -d "$root/.deps/pip.new.XXXXXX")
  trap 'rm -rf "$fresh"' EXIT
  python3 -m pip install -q --root-user-action=ignore --no-deps --require-hashes --only-binary=:all: --target "$fresh" -r "$requirements"
  rm -rf "$root/.deps/pip"
  mv "$fresh" "$root/.deps/pip"
  trap - EXIT
fi
# onnxruntime (CPU), pinned, beside them: tests/fixtures/make_qdq_fixture.py writes its output for
# the QDQ fixture, which tests/reference/qdq compares the importer and the INT8 plan with. Its
# Python dependencies are Debian's numpy; without it the fixture keeps a numpy reference only.
if [ "$with_python" = 1 ] && [ ! -d "$root/.deps/onnxruntime/onnxruntime" ]; then
  echo "install-deps: installing onnxruntime 1.16.3 into $root/.deps/onnxruntime"
  python3 -m pip install -q --no-deps --target "$root/.deps/onnxruntime" onnxruntime==1.16.3 ||
    echo "install-deps: onnxruntime could not be installed; the QDQ test compares with numpy only"
fi
