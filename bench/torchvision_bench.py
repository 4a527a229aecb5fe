#!/usr/bin/env python3
"""Every torchvision classifier the GPU engine accepts, timed against PyTorch's CUDA graph (issue 30, item 4).

For each model (default: one or two full-size classifiers per torchvision family, DEFAULT_MODELS;
`--models all`: every classifier torchvision.models lists):
  1. builds it with seeded weights and exports it at its evaluation size, as the torchvision
     fixtures do (tests/fixtures/make_torchvision_fixtures.py: torch.manual_seed(0), redrawn
     norm affines, BatchNorm statistics re-estimated on random images, the TorchScript ONNX
     exporter, opset 17, batch axis dynamic);
  2. asks `gpulab inspect --json` whether the GPU engine builds a plan for it (as
     scripts/torchvision_gpu_support.py does); a model it refuses is recorded "unsupported" with the
     reason, and the script goes on with the next;
  3. times `gpulab bench --model M --precision P --batch B --no-include-transfers --cuda-graph
     --min-duration-s 1 --json J --save-output O` (the command line of bench/compare_pytorch.py)
     for every --precision and --batch, and reads the median GPU compute time and plan build seconds
     from its JSON;
  4. times torchvision's module itself, in the same precision (FP16: module.half()), channels_last,
     captured in a CUDA graph and replayed (compare_pytorch.py's run_graph: CUDA events around each
     replay, warm-up, median), cudnn.benchmark on, TF32 off for FP32;
  5. error: gpulab's logits (--save-output) of the first --check-images images of gpulab bench's own
     input (bench_input.py) against PyTorch's float64 output on the CPU (model.double()) for them,
     relative L2 (compare_pytorch.rel_error). FP32 and FP16 errors are measured even when only one of
     them is timed (an untimed precision gets one short `gpulab bench` at a batch of --check-images);
  6. ratio = PyTorch ms / gpulab ms (> 1: gpulab is faster). With --profile-slow, a model slower than
     PyTorch anywhere gets one more `gpulab bench ... --profile --json` at its worst point, whose JSON
     is kept (beside --results) and named in the results.

Results (--results FILE.json, schema gpulab.torchvision_bench): the environment (GPU, driver, torch,
torchvision, gpulab --version, commit, command line) and one entry per model, rewritten atomically
after each model, so that a run cut short keeps every finished model and never half of one. A rerun
skips the models already "ok" (or "unsupported") on the same device kind, so a series of short GPU
calls goes through a long list; --budget-s stops starting models when less than a model's estimate
is left: --model-estimate-s before the first, then 1.5x the slowest model timed so far when that is
less. `--table` prints the Markdown table (docs/performance.md) of a results file and exits.

`--device cpu` checks the script without a GPU: eager PyTorch on the CPU (perf_counter, median),
and gpulab only when --gpulab is given and runs.

  python3 bench/torchvision_bench.py --gpulab build/gpuhost/gpulab --results tv.json \\
      --timing-cache tv.cache --budget-s 1500 --profile-slow
  python3 bench/torchvision_bench.py --gpulab build/gpuhost/gpulab --models all --batch 1,256 \\
      --precision fp16 --results tv-all.json
  python3 bench/torchvision_bench.py --results tv.json --table
  python3 bench/torchvision_bench.py --device cpu --models squeezenet1_1 --batch 1 --precision fp32 \\
      --iters 2 --warmup 1 --results /tmp/tv-cpu.json
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
import grid  # noqa: E402 - beside this script (standard library only): write_json

SCHEMA = "gpulab.torchvision_bench"
ERROR_PRECISIONS = ("fp32", "fp16")  # measured whatever --precision times
# One or two full-size classifiers per torchvision family (all in torchvision 0.14 and 0.26).
DEFAULT_MODELS = ("resnet18", "resnet50", "resnext50_32x4d", "mobilenet_v2", "mobilenet_v3_large",
                  "efficientnet_b0", "efficientnet_v2_s", "regnet_y_400mf", "densenet121", "shufflenet_v2_x1_0",
                  "squeezenet1_1", "mnasnet1_0", "googlenet", "inception_v3", "alexnet", "vgg11_bn",
                  "convnext_tiny", "vit_b_16", "swin_t", "swin_v2_t", "maxvit_t")
GPULAB_CANDIDATES = ("build/release/gpulab", "build/gpuhost/gpulab")
DONE = ("ok", "unsupported")
METHOD = ("gpulab: bench --no-include-transfers --cuda-graph, median GPU compute ms; PyTorch: torchvision's "
          "module, channels_last, CUDA graph replay, CUDA events per iteration, median after warm-up (CPU: "
          "eager, perf_counter); error: relative L2 of gpulab's logits vs PyTorch float64 on the CPU, on the "
          "first images of gpulab bench's input")

# Imported by load_libraries() only to run models, so that --table needs nothing beyond Python.
cp = tvf = torch = None


def load_libraries() -> None:
    """compare_pytorch.py (torch, onnx, numpy) and the torchvision fixtures' builder."""
    global cp, tvf, torch
    import compare_pytorch  # noqa: PLC0415 - beside this script
    import make_torchvision_fixtures  # noqa: PLC0415 - tests/fixtures; exits with a message without torchvision
    cp, tvf, torch = compare_pytorch, make_torchvision_fixtures, compare_pytorch.torch


def log(message: str) -> None:
    print(f"torchvision_bench: {message} ({time.strftime('%H:%M:%S')})", file=sys.stderr, flush=True)


# ---- gpulab ---------------------------------------------------------------------------------------


def last_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in (proc.stderr or proc.stdout or "").splitlines() if line.strip()]
    return (lines[-1] if lines else f"exit code {proc.returncode}")[:300]


NOT_RUN = (OSError, subprocess.TimeoutExpired)  # could not start, or ran out of time


def run_text(command: List[str], timeout_s: float) -> Tuple[Optional[str], Optional[str]]:
    """(stdout, None) when the command exits with 0, else (None, its last line of output); raises NOT_RUN."""
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    return (proc.stdout, None) if proc.returncode == 0 else (None, last_line(proc))


def output_of(command: List[str]) -> Optional[str]:
    """The first line a command prints, or None when it fails (git, nvidia-smi)."""
    try:
        out, _ = run_text(command, 60)
    except NOT_RUN:
        return None
    return out.strip().splitlines()[0] if out and out.strip() else None


def gpulab_version(gpulab: str) -> Tuple[Optional[str], Optional[str]]:
    """(`gpulab --version`'s first line, None), or (None, why it does not run)."""
    try:
        out, why = run_text([gpulab, "--version"], 60)
    except NOT_RUN as e:
        return None, cp.first_line(e)
    return (out.strip().splitlines()[0] if out and out.strip() else out), why


def inspect_model(args, path: str) -> dict:
    """gpulab inspect's GPU-engine verdict: {"supported": True|False|None, "reason", "steps"}
    (None: the build has no plan library to ask). A gpulab that cannot run raises NOT_RUN: a failure
    of the model's run, not a verdict."""
    out, why = run_text([args.gpulab, "inspect", "--json", path], args.gpulab_timeout_s)
    if out is None:
        return {"supported": False, "reason": f"not imported: {why}"}
    try:
        verdict = json.loads(out).get("gpu_engine")
    except ValueError as e:
        return {"supported": None, "reason": f"inspect --json unreadable: {e}"}
    if not verdict:
        return {"supported": None, "reason": "no verdict (no plan library)"}
    return {"supported": bool(verdict.get("supported")), "reason": verdict.get("reason", ""),
            "steps": verdict.get("steps", {})}


def bench_args(args, path: str, short: bool) -> argparse.Namespace:
    """compare_pytorch's gpulab options for one model; `short`: one iteration, for logits only."""
    ns = argparse.Namespace(**vars(args))
    ns.model = path
    if short:
        ns.gpulab_warmup_ms, ns.gpulab_min_duration_s, ns.iters = 0, 0, 1
    return ns


def gpulab_cell(args, path: str, batch: int, precision: str, reference, short: bool = False) -> dict:
    """One `gpulab bench` (compare_pytorch.run_gpulab): median GPU compute ms, plan seconds, error."""
    row = cp.Row(batch, precision)
    cp.run_gpulab(bench_args(args, path, short), batch, precision, row, reference)
    cell = row.cells["gpulab"]
    return {"ms": cell.ms, "plan_s": cell.setup_s, "error": cell.rel_error,
            "error_ok": row.gpulab_agreement_ok, "failure": cell.error}


def gpulab_profile(args, path: str, name: str, batch: int, precision: str) -> dict:
    """One more `gpulab bench ... --profile --json` at a point where gpulab is slower; its JSON is kept."""
    os.makedirs(args.profile_dir, exist_ok=True)
    out_json = os.path.join(args.profile_dir, f"{name}_{precision}_b{batch}.profile.json")
    command = cp.gpulab_bench_command(bench_args(args, path, False), batch, precision, out_json, None)
    log(f"{name}: gpulab slower than PyTorch at {precision} b{batch}; profiling")
    try:
        _, why = run_text(command + ["--profile"], args.gpulab_timeout_s)
    except NOT_RUN as e:
        why = cp.first_line(e)
    return {"precision": precision, "batch": batch, "json": None if why else out_json, "failure": why}


# ---- PyTorch --------------------------------------------------------------------------------------


def reference_logits(model, images):
    """PyTorch's float64 output on the CPU for `images` (a copy of the model, converted with .double())."""
    reference = copy.deepcopy(model).double()
    with torch.inference_mode():
        return reference(images.double())


def torch_module(model, precision: str, device):
    dtype = cp.DTYPES[precision]
    return copy.deepcopy(model).to(device, dtype).to(memory_format=torch.channels_last).eval()


def torch_error(module, images, reference, precision: str, device) -> float:
    x = images.to(device, cp.DTYPES[precision]).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        return cp.rel_error(module(x), reference)


def torch_time(module, batch: int, size: int, precision: str, args) -> Tuple[Optional[float], Optional[str]]:
    """(ms, None) or (None, why): CUDA-graph replay on the GPU, eager on the CPU; inputs on the device."""
    device = torch.device(args.device)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    x = torch.randn(batch, 3, size, size, generator=gen, device=device).to(cp.DTYPES[precision])
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        if device.type == "cuda":
            cell = cp.run_graph(module, x, None, args)
            return cell.ms, cell.error
        try:
            return cp.time_cpu(lambda: module(x), args.warmup, args.iters), None
        except Exception as e:  # noqa: BLE001 - e.g. FP16 convolutions on the CPU
            return None, cp.first_line(e)


def torch_cells(model, size: int, images, reference, args, entry: dict) -> Dict[Tuple[str, int], float]:
    """PyTorch's error (bench input, every --precision) and time (every --precision x --batch)."""
    device = torch.device(args.device)
    times: Dict[Tuple[str, int], float] = {}
    for precision in args.precisions:
        if device.type == "cuda":
            cp.set_tf32(precision == "tf32")
            torch.backends.cudnn.benchmark = True
        try:
            module = torch_module(model, precision, device)
            entry["torch_errors"][precision] = torch_error(module, images, reference, precision, device)
        except Exception as e:  # noqa: BLE001 - recorded, the model goes on
            entry["failures"].append(f"torch {precision}: {cp.first_line(e)}")
            continue
        for batch in args.batches:
            log(f"{entry['model']}: PyTorch {precision} b{batch}")
            ms, why = torch_time(module, batch, size, precision, args)
            if ms is None:
                entry["failures"].append(f"torch {precision} b{batch}: {why}")
            else:
                times[(precision, batch)] = ms
        del module
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return times


# ---- One model ------------------------------------------------------------------------------------


def export_model(name: str, path: str):
    """The seeded model (CPU, FP32, eval), its image size and opset; the ONNX export at `path`."""
    size, opset = tvf.default_size(name), tvf.default_opset(name)
    model = tvf.build(name, size)  # torch.manual_seed(0), norms redrawn, BatchNorm re-estimated
    tvf.export(model, path, size, opset)
    return model, size, opset


def new_entry(name: str, args) -> dict:
    """A model's result; its own gpulab and commit, since one file collects the models of several runs."""
    return {"model": name, "status": "failed", "reason": "", "device": torch.device(args.device).type,
            "gpulab": args.gpulab, "gpulab_version": args.version, "commit": args.commit,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "iters": args.iters, "warmup": args.warmup,
            "check_images": args.check_images, "errors": {}, "errors_ok": {}, "torch_errors": {}, "cells": [],
            "profiles": [], "failures": []}


def gpulab_cells(args, path: str, batches_of: Dict[str, List[int]], reference, entry: dict) -> None:
    """gpulab bench for every (precision, batch); the error of each precision is the largest of its cells."""
    for precision, batches in batches_of.items():
        for batch in batches:
            log(f"{entry['model']}: gpulab {precision} b{batch}")
            short = precision not in args.precisions
            cell = dict(gpulab_cell(args, path, batch, precision, reference, short), precision=precision,
                        batch=batch, timed=not short)
            entry["cells"].append(cell)
            if cell["failure"]:
                entry["failures"].append(f"gpulab {precision} b{batch}: {cell['failure']}")
            if cell["error"] is not None:
                entry["errors"][precision] = max(cell["error"], entry["errors"].get(precision, 0.0))
                entry["errors_ok"][precision] = cell["error_ok"] and entry["errors_ok"].get(precision, True)


def merge_torch_times(entry: dict, times: Dict[Tuple[str, int], float], args) -> None:
    """torch_ms and ratio (torch / gpulab) into the timed cells; PyTorch-only cells without gpulab."""
    by_point = {(c["precision"], c["batch"]): c for c in entry["cells"] if c["timed"]}
    for precision in args.precisions:
        for batch in args.batches:
            cell = by_point.get((precision, batch))
            if cell is None:
                cell = {"precision": precision, "batch": batch, "timed": True, "ms": None}
                entry["cells"].append(cell)
            cell["torch_ms"] = times.get((precision, batch))
            cell["ratio"] = cell["torch_ms"] / cell["ms"] if cell["torch_ms"] and cell.get("ms") else None


def bench_model(name: str, args) -> dict:
    start = time.monotonic()
    entry = new_entry(name, args)
    path = os.path.join(args.workdir, name + ".onnx")
    try:
        log(f"{name}: seeded build and ONNX export")
        model, size, entry["opset"] = export_model(name, path)
        entry["size"] = size
        entry["export_s"] = round(time.monotonic() - start, 1)
        bench_exported(name, path, model, size, args, entry)
    except Exception as e:  # noqa: BLE001 - one model's failure is recorded, never the run's end
        entry["status"], entry["reason"] = "failed", cp.first_line(e)
    finally:
        if not args.keep_onnx:
            for leftover in (path, path + ".data"):
                if os.path.exists(leftover):
                    os.unlink(leftover)
    entry["seconds"] = round(time.monotonic() - start, 1)
    return entry


def bench_exported(name: str, path: str, model, size: int, args, entry: dict) -> None:
    if args.gpulab:
        entry["inspect"] = inspect_model(args, path)
        if entry["inspect"]["supported"] is False:
            entry["status"], entry["reason"] = "unsupported", entry["inspect"]["reason"]
            return
    images = torch.from_numpy(cp.bench_input(args.check_images, 3, size, size))
    reference = reference_logits(model, images)
    if args.gpulab:
        batches_of = {p: list(args.batches) for p in args.precisions}
        for p in ERROR_PRECISIONS:
            batches_of.setdefault(p, [args.check_images])
        gpulab_cells(args, path, batches_of, reference, entry)
    merge_torch_times(entry, torch_cells(model, size, images, reference, args, entry), args)
    slower = [c for c in entry["cells"] if c.get("ratio") is not None and c["ratio"] < 1]
    entry["slower"] = [f"{c['precision']} b{c['batch']}" for c in slower]
    if slower and args.profile_slow and args.gpulab:
        worst = min(slower, key=lambda c: c["ratio"])
        entry["profiles"].append(gpulab_profile(args, path, name, worst["batch"], worst["precision"]))
    entry["status"] = "failed" if entry["failures"] else "ok"
    entry["reason"] = "; ".join(entry["failures"])[:500]


# ---- Results file ---------------------------------------------------------------------------------


def read_results(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return {"schema": SCHEMA, "schema_version": 1, "models": []}
    except ValueError as e:  # not JSON, or not text: say which file
        raise ValueError(f"'{path}' is not a {SCHEMA} results file: {e}") from e
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"'{path}' is not a {SCHEMA} results file")
    return doc


def write_results(path: str, doc: dict) -> None:
    """Written to a temporary name and renamed: a run stopped at any point leaves the last whole file."""
    keys = ("schema", "schema_version", "method", "tolerance", "environment", "models")
    grid.write_json(path, {**{k: doc[k] for k in keys if k in doc}, **doc})


def find_entry(doc: dict, name: str) -> Optional[dict]:
    return next((m for m in doc["models"] if m.get("model") == name), None)


def put_entry(doc: dict, entry: dict) -> None:
    doc["models"] = [m for m in doc["models"] if m.get("model") != entry["model"]] + [entry]


def is_done(entry: Optional[dict], args) -> bool:
    if not entry or entry.get("status") not in DONE or entry.get("device") != torch.device(args.device).type:
        return False
    return entry["status"] == "ok" or not args.retry_unsupported


def git_commit() -> Optional[str]:
    """GPULAB_GIT_COMMIT (the GPU host's copy has no .git), else git's HEAD, "-dirty" with changes."""
    if os.environ.get("GPULAB_GIT_COMMIT"):
        return os.environ["GPULAB_GIT_COMMIT"]
    head = output_of(["git", "-C", ROOT, "rev-parse", "HEAD"])
    dirty = output_of(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"])
    return head + ("-dirty" if dirty else "") if head else None


def environment(args, version: Optional[str]) -> dict:
    env = cp.environment(args)  # torch, python, device, command line; GPU, CUDA, cuDNN on the GPU
    import onnx  # noqa: PLC0415 - compare_pytorch imported it already
    env.update(torchvision=tvf.torchvision.__version__, onnx=onnx.__version__, gpulab=args.gpulab,
               gpulab_version=version, commit=git_commit(), date=time.strftime("%Y-%m-%d %H:%M:%S"))
    if env["device"].startswith("cuda"):
        env["driver"] = output_of(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return env


# ---- Table ----------------------------------------------------------------------------------------


def fmt_err(entry: dict, precision: str) -> str:
    err = entry.get("errors", {}).get(precision)
    if err is None:
        return "–"
    return f"{err:.1e}" + (" !" if entry.get("errors_ok", {}).get(precision) is False else "")


def fmt_ms(ms: Optional[float]) -> str:
    if ms is None:
        return "–"
    return f"{ms:.3f}" if ms < 100 else f"{ms:.1f}"


def fmt_ratio(ratio: Optional[float]) -> str:
    if ratio is None:
        return "–"
    return f"**{ratio:.2f}x**" if ratio < 1 else f"{ratio:.2f}x"


def notes(entry: dict) -> str:
    parts = []
    if entry.get("status") != "ok":
        parts.append(f"{entry.get('status')}: {entry.get('reason', '')}"[:200])
    off = [p for p, ok in entry.get("errors_ok", {}).items() if ok is False]
    if off:
        parts.append(f"gpulab's logits off the {'/'.join(p.upper() for p in off)} tolerance")
        # PyTorch's own error in that precision, on the same input: whether the bound or gpulab is off.
        own = [f"{p.upper()} {entry['torch_errors'][p]:.1e}" for p in off
               if entry.get("torch_errors", {}).get(p) is not None]
        if own:
            parts[-1] += f" (PyTorch's own: {', '.join(own)})"
    if entry.get("slower"):
        parts.append("slower than PyTorch at " + ", ".join(entry["slower"]))
    parts += [f"profile {p['precision']} b{p['batch']}: `{p['json']}`" for p in entry.get("profiles", [])
              if p.get("json")]
    if entry.get("status") == "ok" and not entry.get("gpulab"):
        parts.append("gpulab not run")
    if entry.get("inspect", {}).get("supported") is None and entry.get("inspect"):
        parts.append(f"inspect: {entry['inspect'].get('reason')}")
    if entry.get("device") == "cpu":
        parts.append("CPU: PyTorch eager, not a CUDA graph")
    return "; ".join(parts).replace("|", "\\|").replace("\n", " ")


def short_commit(commit: Optional[str]) -> str:
    if not commit:
        return "?"
    return commit[:12] + ("-dirty" if commit.endswith("-dirty") else "")


def table_precision(doc: dict, asked: Optional[str]) -> str:
    """--table-precision, else FP16 when the results time it, else the first precision they time."""
    timed = [c["precision"] for m in doc["models"] for c in m.get("cells", []) if c.get("timed")]
    return asked or ("fp16" if "fp16" in timed or not timed else timed[0])


def table(doc: dict, asked_precision: Optional[str] = None) -> str:
    """Markdown: errors in FP32 and FP16, then per batch size gpulab ms, PyTorch graph ms and ratio."""
    precision = table_precision(doc, asked_precision)
    batches = sorted({c["batch"] for m in doc["models"] for c in m.get("cells", [])
                      if c.get("timed") and c["precision"] == precision}) or [1, 256]
    head = ["model", "FP32 err", "FP16 err"]
    for b in batches:
        head += [f"b{b} gpulab ms", f"b{b} torch graph ms", f"b{b} ratio"]
    lines = ["| " + " | ".join(head + ["notes"]) + " |", "|" + "---|" * (len(head) + 1)]
    for m in doc["models"]:
        cells = {c["batch"]: c for c in m.get("cells", []) if c.get("timed") and c["precision"] == precision}
        row = [m["model"], fmt_err(m, "fp32"), fmt_err(m, "fp16")]
        for b in batches:
            c = cells.get(b, {})
            row += [fmt_ms(c.get("ms")), fmt_ms(c.get("torch_ms")), fmt_ratio(c.get("ratio"))]
        lines.append("| " + " | ".join(row + [notes(m)]) + " |")
    images = {m.get("check_images") for m in doc["models"]} - {None}
    commits = {m.get("commit") for m in doc["models"]} - {None}
    env, tolerance = doc.get("environment", {}), doc.get("tolerance", {})
    lines += ["", f"Times: {precision.upper()}, median GPU compute ms per batch (CUDA events, inputs on the "
              "device, CUDA graphs on both sides); ratio = PyTorch / gpulab (> 1: gpulab faster; bold: "
              "slower). Errors: relative L2 of gpulab's logits against PyTorch in float64 on the CPU, on the "
              f"first {'/'.join(str(i) for i in sorted(images)) or '?'} images of gpulab bench's input; '!' "
              f"above {tolerance.get('fp32', '?')} (FP32) or {tolerance.get('fp16', '?')} (FP16). "
              f"{env.get('gpu') or env.get('device', '?')}, driver {env.get('driver') or '?'}, torch "
              f"{env.get('torch', '?')}, torchvision {env.get('torchvision', '?')}, "
              f"{env.get('gpulab_version') or 'no gpulab'}, commit {short_commit(env.get('commit'))}"
              + (f" (the models come from {len(commits)} commits: see each model's in the JSON)."
                 if len(commits) > 1 else ".")]
    return "\n".join(lines)


# ---- Command line ---------------------------------------------------------------------------------


def parse_list(parser, flag: str, text: str, kind, allowed=None) -> list:
    try:
        values = [kind(v.strip()) for v in text.split(",") if v.strip()]
    except ValueError:
        parser.error(f"{flag}: '{text}' is not a comma-separated list")
    bad = [v for v in values if (allowed is not None and v not in allowed) or (kind is int and v < 1)]
    if bad or not values:
        parser.error(f"{flag}: {bad or 'empty'} " + (f"not in {list(allowed)}" if allowed else "(at least 1)"))
    return values


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpulab", help="the gpulab executable (default on CUDA: " + ", ".join(GPULAB_CANDIDATES)
                   + ", then PATH; on the CPU: none, PyTorch only)")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help="comma-separated torchvision names, or all (default: one or two per family)")
    p.add_argument("--batch", default="1,256", help="comma-separated batch sizes to time")
    p.add_argument("--precision", default="fp16,fp32", help="comma-separated precisions to time: fp32 (TF32 "
                   "off), tf32, fp16, bf16 (FP32 and FP16 errors are measured either way)")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (checks the script: eager PyTorch)")
    p.add_argument("--iters", type=int, default=100, help="PyTorch's timed iterations (median); gpulab's minimum")
    p.add_argument("--warmup", type=int, default=10, help="PyTorch's warm-up iterations")
    p.add_argument("--check-images", type=int, default=4, help="images of gpulab bench's input compared")
    p.add_argument("--seed", type=int, default=0, help="seed of PyTorch's timing input")
    p.add_argument("--results", required=True, help="results JSON (read, extended, rewritten after each model)")
    p.add_argument("--table", action="store_true", help="print the Markdown table of --results and exit")
    p.add_argument("--table-precision", help="the precision of the table's times (default: fp16 when timed)")
    p.add_argument("--workdir", help="where the ONNX exports go (default: a temporary folder under /tmp)")
    p.add_argument("--keep-onnx", action="store_true", help="keep the exports in --workdir")
    p.add_argument("--timing-cache", dest="gpulab_timing_cache", metavar="FILE",
                   help="gpulab's timing cache file (gpulab bench --timing-cache)")
    p.add_argument("--gpulab-warmup-ms", type=float, default=500)
    p.add_argument("--gpulab-min-duration-s", type=float, default=1)
    p.add_argument("--gpulab-timeout-s", type=float, default=900, help="limit of each gpulab process")
    p.add_argument("--budget-s", type=float, default=math.inf, help="start no model after this many seconds ...")
    p.add_argument("--model-estimate-s", type=float, default=300,
                   help="... or when fewer than this many are left (what one model may take)")
    p.add_argument("--profile-slow", action="store_true",
                   help="one `gpulab bench --profile` where gpulab is slowest against PyTorch")
    p.add_argument("--profile-dir", help="where profile JSONs go (default: beside --results)")
    p.add_argument("--retry-unsupported", action="store_true", help="ask gpulab again about unsupported models")
    args = p.parse_args(argv)
    args.batches = parse_list(p, "--batch", args.batch, int)
    args.precisions = parse_list(p, "--precision", args.precision, str)
    bad = [x for x in args.precisions if x not in grid.PRECISIONS]  # compare_pytorch.py's, without torch
    if bad:
        p.error(f"--precision: {bad} not in {list(grid.PRECISIONS)}")
    if args.iters < 1 or args.warmup < 0 or args.check_images < 1:
        p.error("--iters and --check-images must be at least 1, --warmup at least 0")
    if not (args.device == "cpu" or args.device == "cuda" or args.device.startswith("cuda:")):
        p.error(f"--device: '{args.device}' is not cpu, cuda or cuda:N")
    if args.profile_dir is None:
        args.profile_dir = os.path.splitext(args.results)[0] + "-profiles"
    return args


def find_gpulab(args) -> Optional[str]:
    """The gpulab to run, after `gpulab --version` answered; exits on CUDA when there is none."""
    if args.gpulab is None and args.device == "cpu":
        return None
    candidates = [args.gpulab] if args.gpulab else [c for c in GPULAB_CANDIDATES if os.path.exists(c)]
    candidates += [] if args.gpulab else [shutil.which("gpulab")]
    gpulab = next((c for c in candidates if c), None)
    version, why = gpulab_version(gpulab) if gpulab else (None, "no gpulab found; pass --gpulab PATH")
    if version is not None:
        args.version = version
        return gpulab
    if args.device == "cpu":
        log(f"gpulab {gpulab} does not run ({why}); PyTorch only")
        return None
    sys.exit(f"torchvision_bench: {why}")


def model_names(args) -> List[str]:
    if args.models == "all":
        return tvf.torchvision.models.list_models(module=tvf.torchvision.models)
    return [n.strip() for n in args.models.split(",") if n.strip()]


def run(args) -> int:
    load_libraries()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(f"torchvision_bench: torch {torch.__version__} sees no CUDA GPU; --device cpu checks the script")
    args.version = None
    args.gpulab = find_gpulab(args)
    doc = read_results(args.results)
    doc["tolerance"] = {p: cp.TOLERANCE[p] for p in ERROR_PRECISIONS}
    doc["method"] = METHOD
    env = environment(args, args.version)
    args.commit = env["commit"]
    made_workdir = args.workdir is None
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="torchvision_bench-")
    os.makedirs(args.workdir, exist_ok=True)
    deadline = time.monotonic() + args.budget_s
    available = set(tvf.torchvision.models.list_models(module=tvf.torchvision.models))
    counts: Dict[str, int] = {}
    try:
        todo = [n for n in model_names(args) if not is_done(find_entry(doc, n), args)]
        counts["skipped (done already)"] = len(model_names(args)) - len(todo)
        took: List[float] = []  # seconds of each model this run timed
        for i, name in enumerate(todo):
            estimate = model_estimate(args.model_estimate_s, took)
            if deadline - time.monotonic() < estimate:
                log(f"{len(todo) - i} model(s) not started ({name} next): "
                    f"{max(0.0, deadline - time.monotonic()):.0f} s of --budget-s left, a model is estimated at "
                    f"{estimate:.0f} s (--model-estimate-s {args.model_estimate_s:g}, or 1.5x the slowest model "
                    "this run timed when less)")
                counts["not started"] = len(todo) - i
                break
            if name in available:
                entry = bench_model(name, args)
            else:
                entry = dict(new_entry(name, args), status="unavailable",
                             reason=f"not in torchvision {tvf.torchvision.__version__}")
            doc["environment"] = env
            put_entry(doc, entry)
            write_results(args.results, doc)
            counts[entry["status"]] = counts.get(entry["status"], 0) + 1
            if entry["status"] in ("ok", "failed") and entry.get("seconds"):
                took.append(float(entry["seconds"]))
            log(f"{name}: {entry['status']} in {entry.get('seconds', 0):.0f} s" + (
                f" ({entry['reason'][:200]})" if entry["reason"] else ""))
    finally:
        if made_workdir:
            shutil.rmtree(args.workdir, ignore_errors=True)
    print(table(doc, args.table_precision))
    log(", ".join(f"{n} {k}" for k, n in counts.items()) or "nothing to do")
    return 1 if counts.get("failed") else 0


def model_estimate(limit_s: float, took: List[float]) -> float:
    """What the next model may take: 1.5x the slowest model this run has timed, at most limit_s
    (--model-estimate-s, also the estimate before any model ran). On an H100 ResNet-18 and ResNet-50
    took 61 and 102 s against the 300 s default, which left 226 s of a call's budget unused."""
    return min(limit_s, 1.5 * max(took)) if took else limit_s


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        if args.table:
            if not os.path.isfile(args.results):
                raise FileNotFoundError(f"no results file '{args.results}'")
            print(table(read_results(args.results), args.table_precision))
            return 0
        return run(args)
    except (OSError, ValueError) as e:  # an unreadable or foreign results file
        print(f"torchvision_bench: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
