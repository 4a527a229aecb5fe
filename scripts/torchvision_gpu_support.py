#!/usr/bin/env python3
"""Which of torchvision's classifiers the GPU engine builds plans for, asked of `gpulab inspect`.

Usage: torchvision_gpu_support.py [--gpulab PATH] [--models resnet18,vgg11,...] [--json FILE]
(--gpulab defaults to build/release/gpulab, else build/cpu-only/gpulab, else build/ci/gpulab;
--models defaults to every classifier torchvision.models lists)

Exports each model with torchvision's default random initialisation (no download) through
tests/fixtures/make_torchvision_fixtures.py's export (the TorchScript exporter of Debian's torch 1.13,
the model's evaluation size, opset 17), runs
`gpulab inspect --json` on it and prints one line per model: "supported" with the plan's steps by
kind, or why not (the export, the import or the lowering, with its message). Needs torch,
torchvision and onnx (scripts/install-deps.sh installs Debian's). Lowering is CPU work, so no GPU is
needed. Exit code 0 when every model was asked, 1 when an export failed. The README's table comes
from this and scripts/torchvision_acceptance.py (the numeric checks on the CPU).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fixtures():
    sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
    import make_torchvision_fixtures
    return make_torchvision_fixtures


def export(name, path):
    f = fixtures()
    f.torch.manual_seed(0)
    size = f.default_size(name)
    extra = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
    model = getattr(f.torchvision.models, name)(weights=None, **extra).eval()
    f.export(model, path, size, f.default_opset(name))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpulab", help="the gpulab executable")
    parser.add_argument("--models", help="comma-separated torchvision names (default: every classifier)")
    parser.add_argument("--json", help="also write the verdicts to this file")
    args = parser.parse_args()
    if not args.gpulab:
        candidates = ("build/release/gpulab", "build/cpu-only/gpulab", "build/ci/gpulab")
        args.gpulab = next((p for p in candidates if os.path.exists(p)), candidates[0])
    if not os.path.exists(args.gpulab):
        sys.exit(f"torchvision_gpu_support.py: {args.gpulab} not found; build gpulab or pass --gpulab")
    try:
        import torchvision  # noqa: F401
    except ImportError as e:
        sys.exit(f"torchvision_gpu_support.py: cannot import {e.name}; install torch, torchvision, onnx")
    names = args.models.split(",") if args.models else fixtures().torchvision.models.list_models(
        module=fixtures().torchvision.models)
    failed = 0
    verdicts = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = os.path.join(tmp, name + ".onnx")
            try:
                export(name, path)
            except Exception as e:  # an architecture this torchvision lacks, or an export failure
                verdicts[name] = {"supported": False, "reason": f"export failed: {str(e).splitlines()[0]}"}
                failed += 1
            else:
                run = subprocess.run([args.gpulab, "inspect", "--json", path], capture_output=True, text=True)
                for leftover in (path, path + ".data"):
                    if os.path.exists(leftover):
                        os.unlink(leftover)
                if run.returncode != 0:
                    verdicts[name] = {"supported": False,
                                      "reason": f"not imported: {run.stderr.strip().splitlines()[-1]}"}
                else:
                    v = json.loads(run.stdout).get("gpu_engine", {})
                    verdicts[name] = {"supported": bool(v.get("supported")), "steps": v.get("steps", {}),
                                      "reason": v.get("reason", "" if v else "no verdict (no plan library)")}
            v = verdicts[name]
            if v["supported"]:
                steps = ", ".join(f"{n} {k}" for k, n in sorted(v["steps"].items()))
                print(f"{name:20} supported: {steps}", flush=True)
            else:
                print(f"{name:20} not supported: {v['reason']}", flush=True)
    if args.json:
        tmp_path = args.json + ".tmp"
        with open(tmp_path, "w") as out:
            json.dump(verdicts, out, indent=1)
        os.replace(tmp_path, args.json)
    supported = sum(v["supported"] for v in verdicts.values())
    print(f"{supported} of {len(verdicts)} classifiers supported")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
