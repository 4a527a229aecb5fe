#!/usr/bin/env python3
"""Every torchvision classifier through gpulab on the CPU: the README's table of issue 26.

Usage: torchvision_acceptance.py [--check PATH] [--work DIR] [--models a,b,...] [--json FILE]
                                 [--markdown FILE] [--max-gflops N] [--timeout-s N] [--keep]

For each classifier torchvision lists (cheapest first), it exports a seeded model with
tests/fixtures/make_torchvision_fixtures.py at the model's evaluation size (batches 1 and 3, PyTorch's
output in float64), then runs torchvision_check (built with the tests: build/<preset>/tests/reference/
torchvision/torchvision_check) on it, which measures, per batch, the relative L2 error of
  - the reference backend (after run_passes) against PyTorch,
  - the FP32 plan in the CPU plan interpreter against the reference,
  - the FP16 plan with its storage emulated against the reference,
and whether lower_graph builds a plan (the GPU engine runs every step kind a plan has); beside them,
from the fixture script, how far PyTorch's own float64 output moves under float16 storage (weights,
input and every module's output rounded: the seeded model's sensitivity). Results go
to the JSON file as each model finishes (a rerun skips the models already there), and the markdown
table is rewritten from it. Models above --max-gflops (per image, torchvision's published numbers at
the evaluation size) are listed as not measured, with their estimated time, rather than skipped
silently; so is a model that exceeds --timeout-s. Bounds: 1e-5 (FP32), or for the reference PyTorch's
own float32 error against its float64 output where that is larger (deep seeded networks drift that
far in float32 arithmetic whoever computes them); 1e-2 (FP16), or 1.25x PyTorch's own float16-storage
error where that is larger. The verdict says which bound a model met.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# GFLOPs per image (multiply-adds x 2 / 1e9 at the evaluation size), from torchvision's model docs; used to
# order the runs and estimate the time of the ones left out.
GFLOPS = {
    "alexnet": 1.43, "convnext_base": 30.7, "convnext_large": 68.7, "convnext_small": 17.4, "convnext_tiny": 8.9,
    "densenet121": 5.7, "densenet161": 15.5, "densenet169": 6.7, "densenet201": 8.6, "efficientnet_b0": 0.8,
    "efficientnet_b1": 1.4, "efficientnet_b2": 2.2, "efficientnet_b3": 3.7, "efficientnet_b4": 8.8,
    "efficientnet_b5": 20.5, "efficientnet_b6": 38.1, "efficientnet_b7": 75.5, "efficientnet_v2_l": 112.2,
    "efficientnet_v2_m": 49.2, "efficientnet_v2_s": 16.7, "googlenet": 3.0, "inception_v3": 11.4,
    "maxvit_t": 11.1, "mnasnet0_5": 0.2, "mnasnet0_75": 0.4, "mnasnet1_0": 0.6, "mnasnet1_3": 1.1,
    "mobilenet_v2": 0.6, "mobilenet_v3_large": 0.4, "mobilenet_v3_small": 0.1, "regnet_x_16gf": 31.9,
    "regnet_x_1_6gf": 3.2, "regnet_x_32gf": 63.5, "regnet_x_3_2gf": 6.4, "regnet_x_400mf": 0.8,
    "regnet_x_800mf": 1.6, "regnet_x_8gf": 16.0, "regnet_y_128gf": 749.9, "regnet_y_16gf": 31.8,
    "regnet_y_1_6gf": 3.2, "regnet_y_32gf": 64.6, "regnet_y_3_2gf": 6.4, "regnet_y_400mf": 0.8,
    "regnet_y_800mf": 1.7, "regnet_y_8gf": 16.9, "resnet101": 15.6, "resnet152": 23.0, "resnet18": 3.6,
    "resnet34": 7.3, "resnet50": 8.2, "resnext101_32x8d": 32.8, "resnext101_64x4d": 30.9,
    "resnext50_32x4d": 8.5, "shufflenet_v2_x0_5": 0.08, "shufflenet_v2_x1_0": 0.3, "shufflenet_v2_x1_5": 0.6,
    "shufflenet_v2_x2_0": 1.2, "squeezenet1_0": 1.6, "squeezenet1_1": 0.7, "swin_b": 30.9, "swin_s": 17.5,
    "swin_t": 9.0, "swin_v2_b": 40.6, "swin_v2_s": 23.1, "swin_v2_t": 11.9, "vgg11": 15.2, "vgg11_bn": 15.2,
    "vgg13": 22.6, "vgg13_bn": 22.6, "vgg16": 30.9, "vgg16_bn": 30.9, "vgg19": 39.3, "vgg19_bn": 39.3,
    "vit_b_16": 35.1, "vit_b_32": 8.8, "vit_h_14": 334.6, "vit_l_16": 123.1, "vit_l_32": 30.8,
    "wide_resnet101_2": 45.5, "wide_resnet50_2": 22.8,
}
FP32_BOUND, FP16_BOUND = 1e-5, 1e-2


def fmt(x):
    return "-" if x is None or x < 0 else f"{x:.1e}"


def markdown(records, models):
    lines = ["| model | size | reference vs PyTorch (b1 / b3) | FP32 plan vs reference | "
             "emulated FP16 plan vs reference | PyTorch alone, FP16 storage | GPU plan | |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name in models:
        r = records.get(name)
        if r is None:
            continue
        if "batches" not in r:
            lines.append(f"| {name} | {r.get('size', '-')} | not measured | | | | | {r.get('note', r.get('error', ''))} |")
            continue
        floor16 = dict(zip((1, 3), r.get("torch_fp16_storage_rel_l2") or []))
        b = {x["batch"]: x for x in r["batches"]}
        pair = lambda key: " / ".join(fmt(b[k][key]) if k in b else "-" for k in (1, 3))
        plan32 = all(not r["plan_built"] or 0 <= x["plan_fp32_rel_l2"] <= FP32_BOUND for x in r["batches"])
        strict32 = plan32 and all(0 <= x["passes_rel_l2"] <= FP32_BOUND for x in r["batches"])
        # A deep seeded network's float32 arithmetic drifts from float64 by more than 1e-5 in PyTorch
        # itself: gpulab's reference (float32 values, float64 sums) is then held to PyTorch's own
        # float32 error on the same input instead.
        floor32 = dict(zip((1, 3), r.get("torch_fp32_rel_l2") or []))
        ok32 = plan32 and all(0 <= x["passes_rel_l2"] <= max(FP32_BOUND, floor32.get(x["batch"]) or 0)
                              for x in r["batches"])
        strict16 = all(not r["plan_built"] or 0 <= x["plan_fp16_rel_l2"] <= FP16_BOUND for x in r["batches"])
        ok16 = all(not r["plan_built"] or
                   0 <= x["plan_fp16_rel_l2"] <= max(FP16_BOUND, 1.25 * (floor16.get(x["batch"]) or 0))
                   for x in r["batches"])
        if not ok32:
            verdict = "FP32 above 1e-5"
        elif not strict32:
            verdict = "ok; FP32 above 1e-5, within PyTorch's own float32 error"
        elif strict16:
            verdict = "ok"
        elif ok16:
            verdict = "ok; FP16 above 1e-2, within 1.25x PyTorch's own"
        else:
            verdict = "FP16 above bound"
        gpu = "yes" if r["plan_built"] else "no: " + r.get("plan_refusal", "?")
        lines.append(f"| {name} | {r.get('size', '-')} | {pair('passes_rel_l2')} | {pair('plan_fp32_rel_l2')} | "
                     f"{pair('plan_fp16_rel_l2')} | {' / '.join(fmt(floor16.get(k)) for k in (1, 3))} | {gpu} | "
                     f"{verdict} |")
    return "\n".join(lines) + "\n"


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", default=os.path.join(ROOT, "build/ci/tests/reference/torchvision/torchvision_check"))
    parser.add_argument("--work", default=os.path.join(ROOT, "build/torchvision-acceptance"))
    parser.add_argument("--models", help="comma-separated torchvision names (default: every classifier)")
    parser.add_argument("--json", default=None, help="results file (default: WORK/results.json)")
    parser.add_argument("--markdown", default=None, help="table file (default: WORK/table.md)")
    parser.add_argument("--max-gflops", type=float, default=1e9, help="leave out models above this (per image)")
    parser.add_argument("--timeout-s", type=int, default=6 * 3600, help="per model, export and checks")
    parser.add_argument("--keep", action="store_true", help="keep the exported fixtures")
    args = parser.parse_args()
    if not os.path.exists(args.check):
        sys.exit(f"torchvision_acceptance.py: {args.check} not found; build the tests (cmake --build --preset ci "
                 "--target torchvision_check) or pass --check")
    os.makedirs(args.work, exist_ok=True)
    json_path = args.json or os.path.join(args.work, "results.json")
    md_path = args.markdown or os.path.join(args.work, "table.md")
    records = {}
    if os.path.exists(json_path):
        with open(json_path) as f:
            records = json.load(f)
    models = args.models.split(",") if args.models else sorted(GFLOPS, key=lambda n: GFLOPS[n])
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    for name in models:
        if name in records and "batches" in records[name] and records[name].get("torch_fp16_storage_rel_l2"):
            continue
        gflops = GFLOPS.get(name, 0)
        if gflops > args.max_gflops:
            records[name] = {"model": name, "note": f"not run: {gflops:.0f} GFLOPs per image, above --max-gflops "
                                                    f"{args.max_gflops:.0f} (the reference and the interpreter run "
                                                    f"12 images' worth on the CPU)"}
            continue
        start = time.time()
        fixture = os.path.join(args.work, name)
        print(f"torchvision_acceptance.py: {name} ({gflops} GFLOPs per image)", file=sys.stderr, flush=True)
        try:
            exported = subprocess.run([python, os.path.join(ROOT, "tests/fixtures/make_torchvision_fixtures.py"),
                                       "--out", fixture, "--models", name], capture_output=True, text=True,
                                      timeout=args.timeout_s)
            manifest = os.path.join(fixture, "manifest.json")
            entry = {}
            if os.path.exists(manifest):
                with open(manifest) as f:
                    entry = json.load(f)["models"].get(name, {})
            if exported.returncode != 0 or "cases" not in entry:
                last = (entry.get("error") or (exported.stderr.strip().splitlines() or ["?"])[-1])
                records[name] = {"model": name, "error": f"export failed: {last}"}
            else:
                left = max(60, args.timeout_s - int(time.time() - start))
                run = subprocess.run([args.check, fixture, name, "--no-unpassed"], capture_output=True, text=True,
                                     timeout=left)
                record = json.loads(run.stdout) if run.stdout.strip() else {"model": name, "error": run.stderr}
                record["size"] = entry.get("size")
                record["opset"] = entry.get("opset")
                record["torch_fp32_rel_l2"] = [c["output"].get("torch_fp32_rel_l2") for c in entry["cases"]]
                record["torch_fp16_storage_rel_l2"] = [c["output"].get("torch_fp16_storage_rel_l2")
                                                       for c in entry["cases"]]
                records[name] = record
        except subprocess.TimeoutExpired:
            records[name] = {"model": name, "note": f"not measured: over {args.timeout_s} s on this machine "
                                                    f"({gflops:.0f} GFLOPs per image)"}
        records[name]["wall_s"] = round(time.time() - start, 1)
        if not args.keep:
            shutil.rmtree(fixture, ignore_errors=True)
        write_atomic(json_path, json.dumps(records, indent=1) + "\n")
        write_atomic(md_path, markdown(records, sorted(records)))
    write_atomic(json_path, json.dumps(records, indent=1) + "\n")
    write_atomic(md_path, markdown(records, sorted(records)))
    print(f"torchvision_acceptance.py: {len(records)} models in {json_path}, table in {md_path}")


if __name__ == "__main__":
    main()
