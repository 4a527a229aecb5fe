#!/usr/bin/env python3
"""gpulab against PyTorch on the same ONNX model, GPU and method, in one invocation.

For each batch size and precision this script times, on the same GPU:
  eager     PyTorch eager (channels_last),
  graph     the same module captured in a CUDA graph and replayed,
  compile   torch.compile(mode="max-autotune"), with Inductor's freezing when it exists,
  gpulab    `gpulab bench --model M --batch B --precision P --no-include-transfers --cuda-graph`,
and prints one table with ms, img/s and the ratios gpulab/torch.compile and gpulab/eager, then
what each side spent before its timing: torch.compile's first call (compiling and autotuning)
and gpulab's plan build (tactic timing included), in host seconds (also `setup_s` in --json).

Method (the same for every column, and the one `gpulab bench` uses for "GPU compute time"):
inputs already on the device; warm-up iterations first; then every iteration is bracketed by two
CUDA events recorded on the stream, back to back; the reported time is the median over
--iters iterations; img/s = batch / median time. FP32 means TF32 off (cuDNN and matmul), TF32
turns it on, FP16 and BF16 cast weights and inputs (FP32 accumulation as cuDNN/cuBLAS do);
torch.backends.cudnn.benchmark is on, so PyTorch gets its fastest cuDNN algorithms.

Weights: the script does not need the model's Python source. It runs the ONNX graph itself
through a small interpreter of the ops torchvision-style classifiers export (Conv, BatchNorm,
Relu, Clip, Add, Mul, Sigmoid, HardSigmoid, HardSwish, MaxPool, AveragePool,
GlobalAveragePool, Flatten, Reshape, Gemm, MatMul, Concat, Softmax, Identity, Dropout,
Constant), each mapped to the ATen op torchvision's module would call, so eager PyTorch runs the
same kernels as the original architecture (with BatchNorm already folded when the export
folded it).

Agreement: PyTorch's output on the GPU at each precision is compared with the same interpreter
in FP32 on the CPU on the same input (relative L2 error over the first --check-batch images),
and torch.compile / CUDA-graph outputs with eager's. gpulab's logits (`gpulab bench
--save-output`) are compared with the same FP32 interpreter on gpulab bench's own input, whose
first images the script rebuilds (bench_input.py, docs/metrics.md): column "gpulab err". Either
side above its precision's tolerance is marked "!" and the script exits 1.

Runs with torch 2.x (the GPU host has 2.11) and degrades gracefully: a missing or failing
torch.compile, CUDA graph or gpulab run is shown as "n/a" with the reason. `--device cpu` times
eager PyTorch on the CPU (for checking the script without a GPU).

  python3 bench/compare_pytorch.py resnet18.onnx --gpulab build/release/gpulab \
      --batch 1,8,32,128,256,1024 --precision fp32,tf32,fp16,bf16 --json results.json
  python3 bench/compare_pytorch.py model.onnx --device cpu --batch 1 --iters 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, asdict
from typing import Callable, Dict, List, Optional

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_input import bench_input  # noqa: E402 - beside this script
from grid import write_json as write_json_atomic  # noqa: E402 - beside this script (standard library only)

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Relative L2 error of PyTorch at each precision against the FP32 CPU reference (the same bounds
# gpulab's engine is held to).
TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "fp16": 1e-2, "bf16": 3e-2}


class Unsupported(Exception):
    pass


# ---- ONNX -> torch interpreter -------------------------------------------------------------------


def _attrs(node) -> Dict[str, object]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _pads_2d(pads, kernel, strides, dilations, auto_pad, in_hw=None):
    """ONNX pads [top, left, bottom, right] for 2-D ops; auto_pad VALID/NOTSET/SAME_* resolved."""
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad in ("", "NOTSET", None):
        return list(pads) if pads else [0, 0, 0, 0]
    if auto_pad == "VALID":
        return [0, 0, 0, 0]
    if in_hw is None:
        raise Unsupported(f"auto_pad {auto_pad} needs a static input size")
    out = []
    for i in range(2):
        size = in_hw[i]
        out_size = math.ceil(size / strides[i])
        total = max(0, (out_size - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size)
        out.append(total)
    small = [t // 2 for t in out]
    big = [t - t // 2 for t in out]
    if auto_pad == "SAME_UPPER":
        return [small[0], small[1], big[0], big[1]]
    return [big[0], big[1], small[0], small[1]]


class OnnxModule(torch.nn.Module):
    """Runs one ONNX graph with torch ops. Weights are buffers (converted by .to())."""

    def __init__(self, model: onnx.ModelProto):
        super().__init__()
        graph = model.graph
        self._consts: Dict[str, np.ndarray] = {}
        self._buffer_of: Dict[str, str] = {}
        for i, init in enumerate(graph.initializer):
            array = numpy_helper.to_array(init)
            self._consts[init.name] = array
            if array.dtype.kind == "f":
                buf = f"w{i}"
                self.register_buffer(buf, torch.from_numpy(array.copy()))
                self._buffer_of[init.name] = buf
        initializer_names = {i.name for i in graph.initializer}
        self.input_names = [i.name for i in graph.input if i.name not in initializer_names]
        if len(self.input_names) != 1:
            raise Unsupported(f"the model has {len(self.input_names)} inputs; one image input is supported")
        self.output_name = graph.output[0].name
        dims = graph.input[[i.name for i in graph.input].index(self.input_names[0])].type.tensor_type.shape.dim
        self.input_chw = [d.dim_value if d.HasField("dim_value") else None for d in dims][1:]
        self.steps: List[Callable[[Dict[str, torch.Tensor]], None]] = []
        for node in graph.node:
            self.steps.append(self._compile_node(node))

    # A tensor argument: a float initializer (buffer), else a value computed earlier.
    def _tensor(self, env, name):
        buf = self._buffer_of.get(name)
        if buf is not None:
            return getattr(self, buf)
        return env[name]

    def _const(self, name, what):
        if name not in self._consts:
            raise Unsupported(f"{what} '{name}' must be a constant initializer")
        return self._consts[name]

    def _compile_node(self, node):
        op = node.op_type
        a = _attrs(node)
        ins = list(node.input)
        out = node.output[0] if node.output else None
        T = self._tensor

        if op == "Conv":
            kernel = list(a.get("kernel_shape") or self._consts[ins[1]].shape[2:])
            if len(kernel) != 2:
                raise Unsupported(f"Conv '{node.name}': only 2-D convolutions")
            strides = list(a.get("strides", [1, 1]))
            dil = list(a.get("dilations", [1, 1]))
            groups = int(a.get("group", 1))
            pads = _pads_2d(a.get("pads"), kernel, strides, dil, a.get("auto_pad", "NOTSET"))
            has_bias = len(ins) > 2 and ins[2] != ""
            symmetric = pads[0] == pads[2] and pads[1] == pads[3]

            def conv(env, ins=ins, out=out):
                x = T(env, ins[0])
                if not symmetric:
                    x = F.pad(x, (pads[1], pads[3], pads[0], pads[2]))
                padding = (pads[0], pads[1]) if symmetric else (0, 0)
                env[out] = F.conv2d(x, T(env, ins[1]), T(env, ins[2]) if has_bias else None,
                                    strides, padding, dil, groups)
            return conv

        if op == "BatchNormalization":
            eps = float(a.get("epsilon", 1e-5))

            def bn(env, ins=ins, out=out):
                env[out] = F.batch_norm(T(env, ins[0]), T(env, ins[3]), T(env, ins[4]), T(env, ins[1]),
                                        T(env, ins[2]), False, 0.0, eps)
            return bn

        if op in ("Relu", "Sigmoid", "HardSwish", "Identity", "Dropout"):
            fn = {"Relu": F.relu, "Sigmoid": torch.sigmoid, "HardSwish": F.hardswish,
                  "Identity": lambda x: x, "Dropout": lambda x: x}[op]

            def unary(env, ins=ins, out=out, fn=fn):
                env[out] = fn(T(env, ins[0]))
            return unary

        if op == "HardSigmoid":
            alpha, beta = float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))

            def hsig(env, ins=ins, out=out):
                env[out] = torch.clamp(T(env, ins[0]) * alpha + beta, 0.0, 1.0)
            return hsig

        if op == "Clip":
            lo, hi = a.get("min"), a.get("max")
            if len(ins) > 1 and ins[1]:
                lo = float(self._const(ins[1], "Clip min"))
            if len(ins) > 2 and ins[2]:
                hi = float(self._const(ins[2], "Clip max"))

            def clip(env, ins=ins, out=out):
                env[out] = torch.clamp(T(env, ins[0]), lo, hi)
            return clip

        if op in ("Add", "Mul"):
            fn = torch.add if op == "Add" else torch.mul

            def binary(env, ins=ins, out=out, fn=fn):
                env[out] = fn(T(env, ins[0]), T(env, ins[1]))
            return binary

        if op in ("MaxPool", "AveragePool"):
            kernel = list(a["kernel_shape"])
            strides = list(a.get("strides", [1, 1]))
            dil = list(a.get("dilations", [1, 1]))
            ceil_mode = bool(a.get("ceil_mode", 0))
            pads = _pads_2d(a.get("pads"), kernel, strides, dil, a.get("auto_pad", "NOTSET"))
            symmetric = pads[0] == pads[2] and pads[1] == pads[3]
            if op == "MaxPool":
                def maxpool(env, ins=ins, out=out):
                    x = T(env, ins[0])
                    if not symmetric:
                        x = F.pad(x, (pads[1], pads[3], pads[0], pads[2]), value=-math.inf)
                    padding = (pads[0], pads[1]) if symmetric else (0, 0)
                    env[out] = F.max_pool2d(x, kernel, strides, padding, dil, ceil_mode)
                return maxpool
            include_pad = bool(a.get("count_include_pad", 0))
            if not symmetric and not include_pad:
                raise Unsupported(f"AveragePool '{node.name}': asymmetric pads without count_include_pad")

            def avgpool(env, ins=ins, out=out):
                x = T(env, ins[0])
                if not symmetric:
                    x = F.pad(x, (pads[1], pads[3], pads[0], pads[2]))
                padding = (pads[0], pads[1]) if symmetric else (0, 0)
                env[out] = F.avg_pool2d(x, kernel, strides, padding, ceil_mode, include_pad)
            return avgpool

        if op == "GlobalAveragePool":
            def gap(env, ins=ins, out=out):
                env[out] = F.adaptive_avg_pool2d(T(env, ins[0]), 1)
            return gap

        if op == "Flatten":
            axis = int(a.get("axis", 1))

            def flatten(env, ins=ins, out=out):
                env[out] = torch.flatten(T(env, ins[0]), axis)
            return flatten

        if op == "Reshape":
            shape = [int(v) for v in self._const(ins[1], "Reshape shape")]

            def reshape(env, ins=ins, out=out):
                x = T(env, ins[0])
                target = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
                env[out] = x.reshape(target)
            return reshape

        if op == "Gemm":
            alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
            trans_a, trans_b = int(a.get("transA", 0)), int(a.get("transB", 0))
            has_c = len(ins) > 2 and ins[2] != ""

            def gemm(env, ins=ins, out=out):
                x = T(env, ins[0])
                w = T(env, ins[1])
                if trans_a:
                    x = x.t()
                if trans_b and alpha == 1.0 and beta == 1.0:
                    env[out] = F.linear(x, w, T(env, ins[2]) if has_c else None)
                    return
                y = alpha * (x @ (w.t() if trans_b else w))
                env[out] = y + beta * T(env, ins[2]) if has_c else y
            return gemm

        if op == "MatMul":
            def matmul(env, ins=ins, out=out):
                env[out] = torch.matmul(T(env, ins[0]), T(env, ins[1]))
            return matmul

        if op == "Concat":
            axis = int(a["axis"])

            def concat(env, ins=ins, out=out):
                env[out] = torch.cat([T(env, n) for n in ins], axis)
            return concat

        if op == "Softmax":
            axis = int(a.get("axis", -1))

            def softmax(env, ins=ins, out=out):
                env[out] = torch.softmax(T(env, ins[0]), axis)
            return softmax

        if op == "Constant":
            value = numpy_helper.to_array(a["value"])
            self._consts[out] = value
            if value.dtype.kind == "f":
                buf = f"c{len(self._buffer_of)}"
                self.register_buffer(buf, torch.from_numpy(value.copy()))
                self._buffer_of[out] = buf
            return lambda env: None

        raise Unsupported(f"op {op} (node '{node.name}') is not supported by this script's interpreter")

    def forward(self, x):
        env = {self.input_names[0]: x}
        for step in self.steps:
            step(env)
        return env[self.output_name]


# ---- Timing --------------------------------------------------------------------------------------


def time_cuda(fn, warmup: int, iters: int) -> float:
    """Median GPU time of fn() in ms: each call bracketed by two CUDA events, back to back."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def time_cpu(fn, warmup: int, iters: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def set_tf32(enabled: bool):
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.detach().float().cpu().reshape(ref.shape[0], -1)
    ref = ref.detach().float().cpu().reshape(ref.shape[0], -1)
    denom = torch.linalg.norm(ref).item()
    return torch.linalg.norm(out - ref).item() / denom if denom > 0 else float("inf")


def first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0][:200] if text else type(e).__name__


@dataclass
class Cell:
    ms: Optional[float] = None
    ips: Optional[float] = None
    error: Optional[str] = None  # why the cell is n/a
    rel_error: Optional[float] = None  # against the reference (eager) or eager (graph, compile)
    setup_s: Optional[float] = None  # host seconds before timing: torch.compile's first call, gpulab's plan


@dataclass
class Row:
    batch: int
    precision: str
    cells: Dict[str, Cell] = field(default_factory=dict)
    agreement_ok: Optional[bool] = None
    gpulab_agreement_ok: Optional[bool] = None  # gpulab's logits vs the reference on its own input
    gpulab_throughput_ips: Optional[float] = None  # host wall time, from gpulab's JSON


# ---- The runs ------------------------------------------------------------------------------------


def progress(step: str) -> None:
    """One stderr line as each column of a cell starts, so that a run stopped by a timeout shows
    which side it was in (torch.compile's autotuning, gpulab's tactic timing)."""
    print(f"...   {step} ({time.strftime('%H:%M:%S')})", file=sys.stderr, flush=True)


def run_torch(args, batch: int, precision: str, reference: torch.Tensor, x_cpu: torch.Tensor) -> Row:
    row = Row(batch, precision)
    dev = torch.device(args.device)
    dtype = DTYPES[precision]
    cuda = dev.type == "cuda"
    if cuda:
        set_tf32(precision == "tf32")
        # cuDNN picks its fastest algorithm per shape (timed on first use, i.e. in the warm-up).
        torch.backends.cudnn.benchmark = True
    timer = time_cuda if cuda else time_cpu

    try:
        module = OnnxModule(args.onnx_model).eval().to(dev, dtype)
        module = module.to(memory_format=torch.channels_last)
        x = x_cpu.to(dev, dtype).contiguous(memory_format=torch.channels_last)
    except Exception as e:  # noqa: BLE001 - reported in the table
        for mode in args.modes:
            if mode != "gpulab":
                row.cells[mode] = Cell(error=f"setup: {first_line(e)}")
        return row

    with torch.inference_mode():
        eager_out = None
        if "eager" in args.modes or "graph" in args.modes or "compile" in args.modes:
            progress("eager")
            try:
                eager_out = module(x)
                err = rel_error(eager_out[: reference.shape[0]], reference)
                ms = timer(lambda: module(x), args.warmup, args.iters)
                row.cells["eager"] = Cell(ms, batch / ms * 1e3, rel_error=err)
                row.agreement_ok = err <= TOLERANCE[precision]
            except Exception as e:  # noqa: BLE001
                row.cells["eager"] = Cell(error=first_line(e))
        if "graph" in args.modes:
            progress("graph")
            row.cells["graph"] = run_graph(module, x, eager_out, args) if cuda else Cell(error="needs CUDA")
        if "compile" in args.modes:
            progress("compile: compiling and autotuning, then timing")
            row.cells["compile"] = run_compile(module, x, eager_out, args, timer, batch)
    return row


def capture_graph(module, static_x):
    """(graph, static_out): module(static_x) captured in a CUDA graph after three warm-up calls on a
    side stream; graph.replay() recomputes static_out from static_x's current contents."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            module(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = module(static_x)
    return graph, static_out


def run_graph(module, x, eager_out, args) -> Cell:
    try:
        static_x = x.clone()
        graph, static_out = capture_graph(module, static_x)
        graph.replay()
        torch.cuda.synchronize()
        err = rel_error(static_out, eager_out) if eager_out is not None else None
        ms = time_cuda(graph.replay, args.warmup, args.iters)
        return Cell(ms, x.shape[0] / ms * 1e3, rel_error=err)
    except Exception as e:  # noqa: BLE001
        return Cell(error=first_line(e))


def run_compile(module, x, eager_out, args, timer, batch) -> Cell:
    if not hasattr(torch, "compile"):
        return Cell(error=f"torch.compile is not in torch {torch.__version__}")
    try:
        try:
            import torch._inductor.config as inductor_config  # noqa: PLC0415

            if hasattr(inductor_config, "freezing"):
                inductor_config.freezing = True
        except Exception:  # noqa: BLE001 - freezing is optional
            pass
        torch._dynamo.reset()
        compiled = torch.compile(module, mode=args.compile_mode, dynamic=False)
        start = time.perf_counter()
        out = compiled(x)  # compiles (minutes with max-autotune)
        if x.is_cuda:
            torch.cuda.synchronize()
        setup_s = time.perf_counter() - start
        err = rel_error(out, eager_out) if eager_out is not None else None
        ms = timer(lambda: compiled(x), args.warmup, args.iters)
        return Cell(ms, batch / ms * 1e3, rel_error=err, setup_s=setup_s)
    except Exception as e:  # noqa: BLE001
        return Cell(error=first_line(e))


def gpulab_bench_command(args, batch: int, precision: str, out_json: str, out_logits: Optional[str]) -> List[str]:
    """The `gpulab bench` command line of a cell (bench/torchvision_bench.py runs the same)."""
    command = [args.gpulab, "bench", "--model", args.model, "--batch", str(batch), "--precision", precision,
               "--no-include-transfers", "--cuda-graph", "--warmup-ms", str(args.gpulab_warmup_ms),
               "--min-duration-s", str(args.gpulab_min_duration_s),
               "--min-iterations", str(args.iters), "--percentiles", "50,99", "--json", out_json]
    if out_logits:
        command += ["--save-output", out_logits]
    if args.device.startswith("cuda:"):
        command += ["--device", args.device.split(":", 1)[1]]
    if args.gpulab_timing_cache:
        command += ["--timing-cache", args.gpulab_timing_cache]
    return command


def run_gpulab(args, batch: int, precision: str, row: Row, reference: Optional[torch.Tensor]):
    """gpulab bench for the cell; `reference`: the FP32 CPU reference's logits on the first images
    of gpulab bench's own input (bench_input.py), against which its saved logits are checked."""
    if not args.gpulab:
        row.cells["gpulab"] = Cell(error="no gpulab binary (pass --gpulab PATH)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        out_json = os.path.join(tmp, "bench.json")
        out_logits = os.path.join(tmp, "logits.npy")
        command = gpulab_bench_command(args, batch, precision, out_json, out_logits)
        progress("gpulab: plan build (tactic timing), then timing")
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=args.gpulab_timeout_s)
        except (OSError, subprocess.TimeoutExpired) as e:
            row.cells["gpulab"] = Cell(error=first_line(e))
            return
        if proc.returncode != 0:
            lines = [l for l in (proc.stderr or proc.stdout).splitlines() if l.strip()]
            row.cells["gpulab"] = Cell(error=(lines[-1] if lines else f"exit code {proc.returncode}")[:300])
            return
        with open(out_json, encoding="utf-8") as f:
            result = json.load(f)
        ms = result["metrics"]["gpu_compute_ms"]["median"]
        plan = result.get("plan") or {}  # gpulab builds before 2026-12-03 do not report it
        err = None
        if reference is not None and os.path.exists(out_logits):
            try:
                logits = torch.from_numpy(np.load(out_logits))
            except (OSError, ValueError) as e:
                print(f"compare_pytorch: gpulab's --save-output file is unreadable, not checked: {first_line(e)}",
                      file=sys.stderr)
            else:
                n = min(batch, reference.shape[0])
                err = rel_error(logits[:n], reference[:n])
                row.gpulab_agreement_ok = err <= TOLERANCE[precision]
        row.cells["gpulab"] = Cell(ms, batch / ms * 1e3, rel_error=err, setup_s=plan.get("seconds"))
        row.gpulab_throughput_ips = result.get("throughput_ips")


# ---- Output --------------------------------------------------------------------------------------


def fmt_num(v: Optional[float], spec: str) -> str:
    width = spec.split(".")[0]
    return format("n/a", f">{width}") if v is None else format(v, spec)


def ratio(a: Optional[Cell], b: Optional[Cell]) -> str:
    if not a or not b or a.ips is None or b.ips is None:
        return "n/a"
    return f"{a.ips / b.ips:.2f}x"


def print_table(rows: List[Row], args):
    modes = [m for m in ("eager", "graph", "compile", "gpulab") if m in args.modes]
    header = f"{'batch':>5} {'prec':<5}"
    for m in modes:
        header += f" | {m + ' ms':>11} {m + ' img/s':>14}"
    header += f" | {'gpulab/compile':>14} {'gpulab/eager':>12} | {'rel.err':>8}"
    if "gpulab" in modes:
        header += f"   {'gpulab err':>10}"
    print(header)
    print("-" * len(header))
    notes: Dict[str, List[str]] = {}  # "mode: reason" -> cells
    for r in rows:
        line = f"{r.batch:>5} {r.precision:<5}"
        for m in modes:
            c = r.cells.get(m, Cell(error="not run"))
            if c.error:
                notes.setdefault(f"{m}: {c.error}", []).append(f"{r.batch}/{r.precision}")
            line += f" | {fmt_num(c.ms, '11.4f')} {fmt_num(c.ips, '14.1f')}"
        line += f" | {ratio(r.cells.get('gpulab'), r.cells.get('compile')):>14}"
        line += f" {ratio(r.cells.get('gpulab'), r.cells.get('eager')):>12}"
        eager = r.cells.get("eager")
        err = eager.rel_error if eager else None
        flag = "" if r.agreement_ok in (None, True) else " !"
        line += f" | {fmt_num(err, '8.1e')}{flag:2}"
        if "gpulab" in modes:
            gerr = r.cells["gpulab"].rel_error if "gpulab" in r.cells else None
            gflag = "" if r.gpulab_agreement_ok in (None, True) else " !"
            line += f" {fmt_num(gerr, '10.1e')}{gflag}"
        print(line)
    print()
    if args.device.startswith("cuda"):
        print("ms: median GPU time per batch (CUDA events, inputs on the device); img/s = batch / ms.")
    else:
        print("ms: median host time per batch on the CPU (perf_counter); img/s = batch / ms.")
    print("rel.err: eager PyTorch vs the FP32 CPU reference, ||out-ref||/||ref||; '!' = above "
          f"{TOLERANCE} for that precision.")
    if "gpulab" in modes:
        print("gpulab err: gpulab's logits (bench --save-output) vs the same FP32 CPU reference, on gpulab "
              "bench's own input (docs/metrics.md); '!' = above the same tolerance.")
    setups = []
    for r in rows:
        compile_cell, gpulab_cell = r.cells.get("compile"), r.cells.get("gpulab")
        parts = [f"{name} {c.setup_s:.1f} s" for name, c in (("torch.compile", compile_cell), ("gpulab", gpulab_cell))
                 if c is not None and c.setup_s is not None]
        if parts:
            setups.append(f"  {r.batch}/{r.precision}: " + ", ".join(parts))
    if setups:
        print("setup before timing (torch.compile: first call, compiling and autotuning; gpulab: plan build "
              "with tactic timing, or plan load):")
        for line in setups:
            print(line)
    if notes:
        print("n/a cells (batch/precision):")
    for reason, cells in notes.items():
        print(f"  {reason}  [{', '.join(cells)}]")


def environment(args) -> dict:
    env = {"torch": torch.__version__, "python": platform.python_version(), "device": args.device,
           "command_line": " ".join(sys.argv)}
    if args.device.startswith("cuda") and torch.cuda.is_available():
        env.update(gpu=torch.cuda.get_device_name(torch.device(args.device)), cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version())
    return env


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="ONNX model (one float NCHW image input)")
    p.add_argument("--batch", default="1,8,32,128,256", help="comma-separated batch sizes")
    p.add_argument("--precision", default="fp32,tf32,fp16,bf16", help="comma-separated: " + ",".join(PRECISIONS))
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--modes", default="eager,graph,compile,gpulab", help="columns to run")
    p.add_argument("--iters", type=int, default=200, help="timed iterations per cell (median)")
    p.add_argument("--warmup", type=int, default=20, help="warm-up iterations per cell")
    p.add_argument("--compile-mode", default="max-autotune", help="torch.compile mode")
    p.add_argument("--gpulab", default=None, help="path of the gpulab executable (default: on PATH)")
    p.add_argument("--gpulab-warmup-ms", type=float, default=500)
    p.add_argument("--gpulab-min-duration-s", type=float, default=2)
    p.add_argument("--gpulab-timeout-s", type=float, default=900)
    p.add_argument("--gpulab-timing-cache", help="timing cache file shared by gpulab's plan builds")
    p.add_argument("--check-batch", type=int, default=4, help="images compared with the CPU reference")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write every cell, the environment and the errors as JSON")
    args = p.parse_args(argv)
    try:
        args.batches = [int(b) for b in args.batch.split(",")]
    except ValueError:
        p.error(f"--batch: '{args.batch}' is not a comma-separated list of integers")
    if any(b < 1 for b in args.batches):
        p.error("--batch: every batch size must be at least 1")
    args.precisions = [s.strip() for s in args.precision.split(",")]
    bad = [s for s in args.precisions if s not in PRECISIONS]
    if bad:
        p.error(f"--precision: {bad} not in {list(PRECISIONS)}")
    args.modes = [m.strip() for m in args.modes.split(",")]
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be at least 1 and --warmup at least 0")
    if args.gpulab is None and "gpulab" in args.modes:
        args.gpulab = shutil.which("gpulab")
    return args


def write_json(rows: List[Row], args, env: dict) -> None:
    doc = {"schema": "gpulab.compare_pytorch", "schema_version": 1, "model": args.model,
           "method": "median of per-iteration CUDA events, inputs on the device, after warm-up",
           "iters": args.iters, "warmup": args.warmup, "compile_mode": args.compile_mode,
           "environment": env, "rows": [asdict(r) for r in rows]}
    write_json_atomic(args.json, doc)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"compare_pytorch: device '{args.device}' asked for, but torch {torch.__version__} sees no "
              "CUDA GPU. Use --device cpu to check the script on the CPU.", file=sys.stderr)
        return 2
    try:
        args.onnx_model = onnx.load(args.model)
        reference_module = OnnxModule(args.onnx_model).eval()
    except Exception as e:  # noqa: BLE001 - unreadable file, protobuf error, unsupported op
        print(f"compare_pytorch: '{args.model}': {e}", file=sys.stderr)
        return 2
    c, h, w = reference_module.input_chw
    if None in (c, h, w):
        print(f"compare_pytorch: '{args.model}': the input needs static C, H, W (got {reference_module.input_chw})",
              file=sys.stderr)
        return 2

    rows: List[Row] = []
    env = environment(args) if args.json else None
    gpulab_reference = None
    if "gpulab" in args.modes:
        # The first images of gpulab bench's input are the same at every batch size.
        with torch.inference_mode():
            gpulab_reference = reference_module(torch.from_numpy(bench_input(args.check_batch, c, h, w)))
    gen = torch.Generator().manual_seed(args.seed)
    for batch in args.batches:
        x_cpu = torch.randn(batch, c, h, w, generator=gen)
        check = x_cpu[: min(batch, args.check_batch)]
        with torch.inference_mode():
            reference = reference_module(check)
        for precision in args.precisions:
            print(f"... batch {batch} {precision}", file=sys.stderr, flush=True)
            row = run_torch(args, batch, precision, reference, x_cpu)
            if "gpulab" in args.modes:
                run_gpulab(args, batch, precision, row, gpulab_reference)
            rows.append(row)
            # One line per finished cell, so that a run cut short still leaves its numbers.
            done = ", ".join(f"{m} {c.ms:.4f} ms" if c.ms is not None else f"{m} n/a ({c.error})"
                             for m, c in row.cells.items())
            print(f"... done batch {batch} {precision}: {done}", file=sys.stderr, flush=True)
            if args.json:
                write_json(rows, args, env)  # after every cell, so that a run cut short keeps its rows
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()

    print_table(rows, args)
    failed = [r for r in rows if r.agreement_ok is False]
    if failed:
        print("compare_pytorch: PyTorch's output disagrees with the FP32 reference beyond the tolerance for "
              + ", ".join(f"batch {r.batch} {r.precision}" for r in failed), file=sys.stderr)
    gpulab_failed = [r for r in rows if r.gpulab_agreement_ok is False]
    if gpulab_failed:
        print("compare_pytorch: gpulab's output disagrees with the FP32 reference beyond the tolerance for "
              + ", ".join(f"batch {r.batch} {r.precision}" for r in gpulab_failed), file=sys.stderr)
    return 1 if failed or gpulab_failed else 0


if __name__ == "__main__":
    sys.exit(main())
