#!/usr/bin/env bash
# Installs, consumes and packages a configured build; CI runs it after scripts/test.sh (preset ci),
# the Dockerfile's build stage with the release preset. Each step fails the script:
#   1. `cmake --install` into a fresh prefix;
#   2. tests/package, an out-of-tree CMake project, find_package(gpulab)s from that prefix alone,
#      builds and runs: gpulab::ReferenceModel on the installed MobileNetV2 and a grey image (and the
#      GPU engine where a GPU is usable);
#   3. cpack writes the .deb; its control fields and file list are printed; it is unpacked
#      (dpkg -x) into a scratch root, and that root's `gpulab --version` and `gpulab classify` run
#      (classify on the bundled photos and the grey image, with the root's own model, which step 2's
#      result must match: same top 5, scores within 1e-4).
#   bash scripts/package.sh [PRESET]          default: ci; build/PRESET must be configured
# The .deb stays in build/PRESET/packages/; its file list in build/PRESET/packages/gpulab.files.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-ci}
build=build/$preset
if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "package: $build is not configured; run \`cmake --preset $preset\` first" >&2
  exit 2
fi
start=$(date +%s)
step() { echo "== package: $1 ($(($(date +%s) - start)) s)"; }

cmake --build --preset "$preset" >/dev/null  # nothing to do after scripts/test.sh
scratch=$(mktemp -d "${TMPDIR:-/tmp}/gpulab-package.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

step "install into a fresh prefix"
prefix=$scratch/prefix
cmake --install "$build" --prefix "$prefix" >"$scratch/install.log"
echo "$(find "$prefix" -type f | wc -l) files, $(du -sh "$prefix" | cut -f1)"

step "tests/package: find_package(gpulab) from the prefix, build, run"
consumer=$scratch/consumer
if ! cmake -S tests/package -B "$consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$scratch/consumer-configure.log" 2>&1; then
  cat "$scratch/consumer-configure.log"
  exit 1
fi
grep "gpulab .* from" "$scratch/consumer-configure.log" | sed 's/^-- //'
cmake --build "$consumer" -j2 >"$scratch/consumer-build.log" 2>&1 || { cat "$scratch/consumer-build.log"; exit 1; }
"$consumer/gpulab_consumer" "$prefix/share/gpulab/models/mobilenet_v2_1.0_224.onnx" --json "$scratch/consumer.json"
if [ -x "$consumer/engine_example" ]; then
  "$consumer/engine_example" --help >/dev/null
  echo "engine_example built against the package (it needs a GPU to run: tests/package/README.md)"
fi

step "cpack: the .deb"
rm -rf "$build/packages"
(cd "$build" && cpack -G DEB >"$scratch/cpack.log" 2>&1) || { cat "$scratch/cpack.log"; exit 1; }
deb=$(ls "$build"/packages/gpulab_*.deb)
dpkg-deb --contents "$deb" | awk '{print $6, $3}' >"$build/packages/gpulab.files"
echo "$deb: $(du -h "$deb" | cut -f1), $(grep -vc '/ ' "$build/packages/gpulab.files") files"
dpkg-deb --field "$deb" Package Version Architecture Installed-Size Depends Recommends

step "dpkg -x into a scratch root; its gpulab --version and classify"
root=$scratch/root
dpkg -x "$deb" "$root"
"$root/usr/bin/gpulab" --version
{ printf 'P6\n224 224\n255\n'; head -c $((224 * 224 * 3)) /dev/zero | tr '\0' '\200'; } >"$scratch/grey.ppm"
(cd "$scratch" && "$root/usr/bin/gpulab" classify --device cpu --json \
  "$root/usr/share/gpulab/data/images" grey.ppm >classify.json)
python3 - "$scratch/classify.json" "$scratch/consumer.json" "$root" <<'PY'
import json, sys
classify, consumer, root = (json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3])
if not classify["model"].startswith(root + "/usr/share/gpulab/"):
    sys.exit(f"package: the unpacked gpulab used {classify['model']}, not the model in its own root")
for image in classify["images"]:
    top = image["top"][0]
    print(f"  {image['file'].split('/')[-1]:<18} {top.get('label', '-'):<24} {100 * top['probability']:.1f}%")
grey = next(i for i in classify["images"] if i["file"].endswith("grey.ppm"))
cli = [(t["index"], t["logit"]) for t in grey["top"]]
lib = [(t["index"], t["score"]) for t in consumer["reference"]["top"]]
if [i for i, _ in cli] != [i for i, _ in lib] or max(abs(a - b) for (_, a), (_, b) in zip(cli, lib)) > 1e-4:
    sys.exit(f"package: grey image: gpulab classify gave {cli}, the installed library {lib}")
print(f"grey image: the unpacked gpulab classify and the installed library agree on the top 5 {[i for i, _ in cli]}")
PY
step "done"
