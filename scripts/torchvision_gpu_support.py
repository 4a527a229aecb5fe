#!/usr/bin/env python3
"""Which of torchvision's classifiers the GPU engine builds plans for, asked of `gpulab inspect`.

Usage: torchvision_gpu_support.py [--gpulab PATH] [--models resnet18,vgg11,...]
(--gpulab defaults to what scripts/run.sh builds: build/release/gpulab, else build/cpu-only/gpulab)

Exports each model with random weights (no download; opset 13, or 14 for HardSwish), runs
`gpulab inspect --json` on it and prints one line per model: the plan's steps by kind, or the
reason the lowering gives. Needs torch, torchvision and onnx (scripts/install-deps.sh installs
Debian's). Lowering is CPU work, so no GPU is needed. The README's list of model families comes
from this, and from the plan interpreter's checks against the reference backend (tests/unit/plan).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

DEFAULT_MODELS = ("resnet18,resnext50_32x4d,mobilenet_v2,mobilenet_v3_small,mobilenet_v3_large,"
                  "efficientnet_b0,regnet_y_400mf,mnasnet0_5,vgg11,alexnet,squeezenet1_1,googlenet,"
                  "inception_v3,densenet121,shufflenet_v2_x0_5,convnext_tiny")


def export(name, path):
    import torch
    import torchvision
    torch.manual_seed(0)
    extra = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
    model = getattr(torchvision.models, name)(weights=None, **extra).eval()
    size = 299 if name == "inception_v3" else 224
    opset = 14 if name.startswith("mobilenet_v3") else 13
    kwargs = {}
    import inspect
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    torch.onnx.export(model, torch.zeros(1, 3, size, size), path, opset_version=opset,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}}, do_constant_folding=True,
                      **kwargs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpulab", help="the gpulab executable")
    parser.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated torchvision names")
    args = parser.parse_args()
    if not args.gpulab:
        args.gpulab = next((p for p in ("build/release/gpulab", "build/cpu-only/gpulab") if os.path.exists(p)),
                           "build/release/gpulab")
    if not os.path.exists(args.gpulab):
        sys.exit(f"torchvision_gpu_support.py: {args.gpulab} not found; build gpulab or pass --gpulab")
    try:
        import torchvision  # noqa: F401
    except ImportError as e:
        sys.exit(f"torchvision_gpu_support.py: cannot import {e.name}; install torch, torchvision, onnx")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            path = os.path.join(tmp, name + ".onnx")
            try:
                export(name, path)
            except Exception as e:  # an architecture this torchvision lacks, or an export failure
                print(f"{name:20} export failed: {str(e).splitlines()[0]}")
                failed += 1
                continue
            run = subprocess.run([args.gpulab, "inspect", "--json", path], capture_output=True, text=True)
            os.unlink(path)
            if run.returncode != 0:
                print(f"{name:20} not imported: {run.stderr.strip().splitlines()[-1]}")
                continue
            verdict = json.loads(run.stdout).get("gpu_engine", {})
            if verdict.get("supported"):
                steps = ", ".join(f"{n} {k}" for k, n in sorted(verdict["steps"].items()))
                print(f"{name:20} GPU plan: {steps}")
            else:
                print(f"{name:20} not on the GPU: {verdict.get('reason', 'no verdict (no plan library)')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
