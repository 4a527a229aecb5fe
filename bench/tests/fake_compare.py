#!/usr/bin/env python3
"""Stands in for compare_pytorch.py in test_grid.py: takes its arguments, prints its progress
lines and writes its JSON with made-up times (eager 4, graph 3, compile 2, gpulab 1 ms per 8
images). Batch 7 has no gpulab time (n/a). Batch 999 hangs instead, with a child process of its own, as a slow plan build would."""
import argparse
import json
import os
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("model")
p.add_argument("--batch", type=int)
p.add_argument("--precision")
p.add_argument("--modes")
p.add_argument("--json")
p.add_argument("--gpulab")
p.add_argument("--iters", type=int)
args = p.parse_args()
print(f"... batch {args.batch} {args.precision}", file=sys.stderr, flush=True)
print("...   eager (00:00:00)", file=sys.stderr, flush=True)
if args.batch == 999:
    print("...   gpulab: plan build (tactic timing), then timing (00:00:01)", file=sys.stderr, flush=True)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(os.environ["FAKE_CHILD_PID_FILE"], "w") as f:
        f.write(str(child.pid))
    time.sleep(60)
scale = args.batch / 8
base = {"eager": 4.0, "graph": 3.0, "compile": 2.0, "gpulab": 1.0}
cells = {m: {"ms": base[m] * scale, "ips": args.batch / (base[m] * scale) * 1e3} for m in args.modes.split(",")}
if "gpulab" in cells:
    cells["gpulab"]["rel_error"] = 2.5e-4
if args.batch == 7 and "gpulab" in cells:  # as compare_pytorch.py reports a gpulab run that failed
    cells["gpulab"] = {"ms": None, "ips": None, "error": "no gpulab binary (pass --gpulab PATH)"}
doc = {"schema": "gpulab.compare_pytorch", "rows": [{"batch": args.batch, "precision": args.precision, "cells": cells}],
       "environment": {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "iters": args.iters,
                       "gpulab": args.gpulab}}
with open(args.json, "w") as f:
    json.dump(doc, f)
