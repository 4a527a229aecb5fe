#!/usr/bin/env bash
# Packs what a run on the GPU host needs into the ignored .gpuhost/ folder (carried with the
# checkout; the host has no package access), from the project's root:
#   1. ../shared/gpu-host/pack.sh: the Debian packages of its packages.txt, plus cpp-httplib's
#      (libcpp-httplib0.11 and brotli's headers and library) and any named here;
#   2. the cuDNN frontend and CUTLASS headers at the versions pinned in scripts/pip-requirements.txt:
#      the wheels are downloaded hash-checked (pip --require-hashes, for the host's Python 3.12)
#      and only their headers are kept, as .gpuhost/cudnn_frontend/include and
#      .gpuhost/cutlass-include.tgz (about 6 MB of the 64 MiB a run may carry, where the wheels
#      would take 18 MB). bench/gpuhost_benchmarks.sh and tests/gpu/engine/gpuhost_run.sh pass them
#      to CMake.
#   bash scripts/gpuhost-pack.sh [extra Debian package ...]
# pack.sh cannot read hashes from its own pip-packages.txt (it passes the names to pip download as
# arguments), so gpulab's pins stay out of it.
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${GPULAB_SHARED_DIR:-../shared}
bash "$shared/gpu-host/pack.sh" libbrotli-dev libbrotli1 libcpp-httplib0.11 "$@"

wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
python3 -m pip download -q --no-deps --require-hashes --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform any -d "$wheels" -r scripts/pip-requirements.txt
rm -rf .gpuhost/cudnn_frontend .gpuhost/cutlass-include.tgz "$wheels/cutlass"
python3 - "$wheels" <<'PY'
import pathlib, sys, zipfile
wheels = pathlib.Path(sys.argv[1])
def extract(pattern, prefix, dest):
    (wheel,) = wheels.glob(pattern)
    with zipfile.ZipFile(wheel) as z:
        members = [m for m in z.namelist() if m.startswith(prefix)]
        z.extractall(dest, members)
    print(f"gpuhost-pack: {len(members)} headers from {wheel.name}")
extract("nvidia_cudnn_frontend-*.whl", "include/", ".gpuhost/cudnn_frontend")
extract("nvidia_cutlass-*.whl", "cutlass_library/source/include/", wheels / "cutlass")
PY
tar czf .gpuhost/cutlass-include.tgz -C "$wheels/cutlass/cutlass_library/source" include
echo "gpuhost-pack: $(du -sh .gpuhost | cut -f1) in .gpuhost/"
