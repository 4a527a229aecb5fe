#!/usr/bin/env bash
# Fails when a C++/CUDA source differs from .clang-format (clang-format 14, Debian 12).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check-format: clang-format not installed, skipped"; exit 0; }
files=$(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')
[ -z "$files" ] && exit 0
bad=$(clang-format --dry-run $files 2>&1 | grep -c 'warning:' || true)
if [ "$bad" != 0 ]; then
  clang-format --dry-run $files 2>&1 | grep 'warning:' | cut -d: -f1 | sort -u | sed 's/^/check-format: needs clang-format: /'
  echo "check-format: run 'clang-format -i' on the files above"
  exit 1
fi
echo "check-format: $(echo "$files" | wc -w) files clean"
