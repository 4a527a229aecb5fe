#!/usr/bin/env bash
# Installs gpulab's Debian build and test dependencies. Idempotent and non-interactive:
# packages already present are skipped, so a second run costs one dpkg query.
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --no-python  skip the PyTorch/ONNX fixture generators
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
      libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev zlib1g-dev
      libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev
      python3 python3-pip)  # pip: NVIDIA's cuDNN frontend headers (below)
if [ "$with_python" = 1 ]; then
  # Debian's torch/torchvision/onnx generate the seeded fixtures and the PyTorch goldens.
  pkgs+=(python3 python3-numpy python3-torch python3-torchvision python3-onnx python3-pil)
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

# NVIDIA's cuDNN frontend C++ headers (the CUDA backend's cuDNN graph API) come from the PyPI
# wheel nvidia-cudnn-frontend, installed into <project>/.deps/pip (git-ignored; --target keeps it
# out of the system Python, so Debian 12's externally-managed environment is not touched).
# src/backends/cuda/CMakeLists.txt looks for .deps/pip/include/cudnn_frontend.h first.
root=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -f "$root/.deps/pip/include/cudnn_frontend.h" ]; then
  echo "install-deps: installing nvidia-cudnn-frontend into $root/.deps/pip"
  python3 -m pip install -q --no-deps --target "$root/.deps/pip" nvidia-cudnn-frontend
fi
# NVIDIA's CUTLASS C++ headers (the small-channel convolution kernels), from the PyPI wheel
# nvidia-cutlass, beside it; the headers sit in cutlass_library/source/include.
if [ ! -f "$root/.deps/pip/cutlass_library/source/include/cutlass/cutlass.h" ]; then
  echo "install-deps: installing nvidia-cutlass into $root/.deps/pip"
  python3 -m pip install -q --no-deps --target "$root/.deps/pip" nvidia-cutlass
fi
