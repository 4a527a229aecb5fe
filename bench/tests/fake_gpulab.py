#!/usr/bin/env python3
"""Stands in for `gpulab bench` in test_compare_gpulab.py: writes the JSON fields that
compare_pytorch.py reads and, for --save-output, the FP32 logits of the model on gpulab bench's
input (computed with compare_pytorch.py's own interpreter), multiplied by FAKE_GPULAB_SCALE (1 by
default) so that a test can make them disagree."""
import argparse
import json
import os
import sys

import numpy as np
import onnx
import torch

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)
import compare_pytorch  # noqa: E402
from bench_input import bench_input  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("command")
p.add_argument("--model")
p.add_argument("--batch", type=int)
p.add_argument("--json")
p.add_argument("--save-output")
args, _ = p.parse_known_args()
module = compare_pytorch.OnnxModule(onnx.load(args.model)).eval()
c, h, w = module.input_chw
with torch.inference_mode():
    logits = module(torch.from_numpy(bench_input(args.batch, c, h, w))).numpy().astype(np.float32)
logits *= float(os.environ.get("FAKE_GPULAB_SCALE", "1"))
if args.save_output:
    np.save(args.save_output, logits)
with open(args.json, "w") as f:
    json.dump({"metrics": {"gpu_compute_ms": {"median": 1.0}}, "plan": {"seconds": 0.5},
               "throughput_ips": args.batch * 1000.0}, f)
