#!/usr/bin/env python3
"""The comparison grid (models x precisions x batch sizes), one cell per run of compare_pytorch.py.

compare_pytorch.py times PyTorch and gpulab in one invocation. A whole grid in one invocation
does not fit in a call to the GPU host: torch.compile alone spends 77-125 s per cell compiling
and autotuning, and a call that runs out of time loses the cell it was in. This script:
  - runs each cell as its own compare_pytorch.py process, all columns of a cell in that one
    process (so every row stays a same-run comparison), with a timeout per cell that ends the
    process and everything it started (gpulab's plan build included);
  - keeps one result file per cell in --results and skips cells whose file already has every
    asked-for column, so a later call (or day, with the folder carried along) goes on where
    the last one stopped; a cell that timed out is tried again when it would get more time than
    it had (FP32 torch.compile cells autotune for over 500 s: retrying them with less wastes the call);
  - spreads the cells over the GPUs given by --gpus, one process per GPU at a time
    (CUDA_VISIBLE_DEVICES), so a machine of several GPUs runs that many cells at once;
  - stops starting cells when --budget-s is nearly spent;
  - prints the results as Markdown tables (`table`), with the label of the run each row came from.

  python3 bench/grid.py run --model r18=build/gpuhost/fixtures/resnet18.onnx \\
      --model mnv2=models/mobilenet_v2_1.0_224.onnx --precision fp16,bf16 --batch 1,256 \\
      --modes eager,graph,compile,gpulab --gpulab build/gpuhost/gpulab --results grid-results \\
      --label "$(git rev-parse --short HEAD)" --budget-s 500 --gpus 0,1 -- --iters 30 --warmup 5
  python3 bench/grid.py table --results grid-results

Arguments after `--` go to every compare_pytorch.py run. Cell files are JSON
(schema gpulab.grid_cell, version 1) and hold compare_pytorch.py's own JSON under "compare".
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
MODES = ("eager", "graph", "compile", "gpulab")
PRECISION_TITLES = {"fp32": "FP32", "tf32": "TF32", "fp16": "FP16", "bf16": "BF16"}
HERE = os.path.dirname(os.path.abspath(__file__))

# The compare runs in flight, so that a signal to this script ends them too: each runs in a process
# group of its own (for the timeout's kill), which a signal to this script's group would miss.
_active: set = set()
_active_lock = threading.Lock()
_stopping = threading.Event()


@dataclass(frozen=True)
class Cell:
    model: str  # short name, e.g. r18
    path: str  # its ONNX file
    precision: str
    batch: int

    @property
    def name(self) -> str:
        return f"{self.model}_{self.precision}_b{self.batch}"


def cells_of(models: Dict[str, str], precisions: List[str], batches: List[int]) -> List[Cell]:
    """Every cell, model by model, precision by precision, in the order given."""
    return [Cell(m, path, p, b) for m, path in models.items() for p in precisions for b in batches]


def result_path(results: str, cell: Cell) -> str:
    return os.path.join(results, cell.name + ".json")


def read_cell_file(path: str) -> Optional[dict]:
    """A cell file's document, or None for a file that is missing, unreadable or not a cell file."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("schema") == "gpulab.grid_cell" else None


def load_result(results: str, cell: Cell) -> Optional[dict]:
    return read_cell_file(result_path(results, cell))


def load_results(results: str) -> List[dict]:
    """Every cell file in `results` (other files are passed over)."""
    docs = [read_cell_file(os.path.join(results, name)) for name in sorted(os.listdir(results))
            if name.endswith(".json") and not name.endswith(".compare.json")]
    return [d for d in docs if d]


def is_done(result: Optional[dict], modes: List[str]) -> bool:
    """Whether a cell's result already has a time in every asked-for column, from one finished run
    (an n/a column, say a gpulab binary that was missing, is tried again)."""
    if not result or result.get("status") != "ok" or not set(modes) <= set(result.get("modes", [])):
        return False
    cells = result["compare"]["rows"][0]["cells"]
    return all((cells.get(m) or {}).get("ms") is not None for m in modes)


def last_progress(log_path: str) -> str:
    """The last '...' progress line compare_pytorch.py wrote: where a stopped run was."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [l.strip() for l in f if l.startswith("...")]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def write_json(path: str, doc: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, path)


def run_cell(cell: Cell, args, gpu: Optional[str], timeout_s: float) -> dict:
    """One compare_pytorch.py run for the cell; returns the cell's result document."""
    log_path = os.path.join(args.results, cell.name + ".log")
    out_json = os.path.join(args.results, cell.name + ".compare.json")
    if os.path.exists(out_json):
        os.remove(out_json)
    command = [sys.executable, args.compare_script, cell.path, "--batch", str(cell.batch), "--precision",
               cell.precision, "--modes", ",".join(args.modes), "--json", out_json]
    if args.gpulab:
        command += ["--gpulab", args.gpulab]
    command += args.compare_args
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    start = time.monotonic()
    status, rc = "ok", None
    with open(log_path, "w", encoding="utf-8") as log:
        # A process group of its own, so that a timeout ends gpulab's process too, not only
        # Python's. Not a session of its own: whatever ends this script's session ends it too.
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=os.setpgrp)
        with _active_lock:
            _active.add(proc)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            proc.wait()
            status = "timeout"
        finally:
            with _active_lock:
                _active.discard(proc)
    seconds = time.monotonic() - start
    compare = None
    if os.path.exists(out_json):
        with open(out_json, encoding="utf-8") as f:
            compare = json.load(f)
        os.remove(out_json)
    # compare_pytorch.py exits 1 when an output (PyTorch's or gpulab's) is off its tolerance: the
    # timings stand, and the errors are in the table.
    if status == "ok" and (rc not in (0, 1) or not compare or not compare.get("rows")):
        status = "failed"
    return {"schema": "gpulab.grid_cell", "schema_version": 1,
            "cell": {"model": cell.model, "model_path": cell.path, "precision": cell.precision,
                     "batch": cell.batch},
            "modes": list(args.modes), "label": args.label, "status": status, "exit_code": rc,
            "seconds": round(seconds, 1), "gpu": gpu, "last_progress": last_progress(log_path),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "compare": compare}


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop(signum, _frame) -> None:
    """SIGTERM/SIGINT: end the compare runs in flight and exit; their cells stay to do."""
    _stopping.set()
    with _active_lock:
        for proc in list(_active):
            kill_group(proc)
    print(f"grid: stopped by signal {signum}; the cells in flight were not recorded", flush=True)
    os._exit(128 + signum)


def run(args) -> int:
    os.makedirs(args.results, exist_ok=True)
    cells = cells_of(args.models, args.precisions, args.batches)
    todo = [c for c in cells if not is_done(load_result(args.results, c), args.modes)]
    print(f"grid: {len(cells)} cells, {len(cells) - len(todo)} already done, {len(todo)} to run "
          f"on {len(args.gpus)} GPU(s)", flush=True)
    work: "queue.Queue[Cell]" = queue.Queue()
    for c in todo:
        work.put(c)
    deadline = time.monotonic() + args.budget_s
    lock = threading.Lock()
    counts = {"ok": 0, "timeout": 0, "failed": 0, "not started": 0, "not retried": 0}

    def worker(gpu: Optional[str]) -> None:
        while True:
            try:
                cell = work.get_nowait()
            except queue.Empty:
                return
            left = deadline - time.monotonic()
            if left < args.min_start_s or _stopping.is_set():
                with lock:
                    counts["not started"] += 1
                continue
            allowed = min(args.cell_timeout_s, left)
            before = load_result(args.results, cell)
            if before and before.get("status") == "timeout" and allowed <= before.get("seconds", 0):
                # It would run out of time again (torch.compile in FP32 autotunes for over 500 s):
                # spend the budget on cells that can finish.
                with lock:
                    counts["not retried"] += 1
                    print(f"grid: {cell.name} not retried: it ran out of {before['seconds']:.0f} s before and "
                          f"would get {allowed:.0f} s (raise --cell-timeout-s or --budget-s)", flush=True)
                continue
            with lock:
                print(f"grid: {cell.name} on GPU {gpu if gpu is not None else '(default)'}", flush=True)
            result = run_cell(cell, args, gpu, allowed)
            if _stopping.is_set():
                return
            write_json(result_path(args.results, cell), result)
            with lock:
                counts[result["status"]] += 1
                print(f"grid: {cell.name} {result['status']} in {result['seconds']:.0f} s"
                      + (f" ({result['last_progress']})" if result["status"] != "ok" else ""), flush=True)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threads = [threading.Thread(target=worker, args=(g,), daemon=True) for g in args.gpus]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():  # a timed join, so that signals reach the handler promptly
            t.join(0.5)
    print("grid: " + ", ".join(f"{n} {k}" for k, n in counts.items()), flush=True)
    return 0 if counts["failed"] == 0 else 1


# ---- The tables ----------------------------------------------------------------------------------


def fmt_ms(ms: Optional[float]) -> str:
    if ms is None:
        return "–"
    return f"{ms:.3f}" if ms < 100 else f"{ms:.1f}"


def fmt_ips(ips: float) -> str:
    return f"{ips / 1000:.1f}k" if ips >= 1000 else f"{ips:.0f}"


def table_row(precision: str, batch: int, result: Optional[dict]) -> str:
    head = f"| {PRECISION_TITLES.get(precision, precision)} | {batch} |"
    if result is None:
        return head + " not measured | | | | | | | |"
    if result["status"] != "ok":
        where = f": {result['last_progress'].lstrip('. ')}" if result.get("last_progress") else ""
        return head + f" {result['status']} after {result['seconds']:.0f} s{where} | | | | | | | {result.get('label') or ''} |"
    row = result["compare"]["rows"][0]
    ms = {m: (row["cells"].get(m) or {}).get("ms") for m in MODES}
    text = {m: fmt_ms(ms[m]) if ms[m] is not None or m not in row["cells"] else "n/a" for m in MODES}
    torch_ms = [ms[m] for m in ("eager", "graph", "compile") if ms[m] is not None]
    vs = "–"
    if torch_ms and ms["gpulab"]:
        fastest = min(torch_ms)
        which = next(m for m in ("eager", "graph", "compile") if ms[m] == fastest)
        vs = f"{fastest / ms['gpulab']:.2f}x ({which})"
    gl = f"**{text['gpulab']}**" if ms["gpulab"] is not None else text["gpulab"]
    ips = fmt_ips(batch / ms["gpulab"] * 1e3) if ms["gpulab"] else ""
    err = (row["cells"].get("gpulab") or {}).get("rel_error")
    err_text = "–" if err is None else f"{err:.1e}" + (" !" if row.get("gpulab_agreement_ok") is False else "")
    return (head + f" {text['eager']} | {text['graph']} | {text['compile']} | {gl} | {ips} | {vs} | {err_text} |"
            f" {result.get('label') or ''} |")


def table(docs: List[dict], model: str) -> str:
    """A Markdown table of every cell of `model` among `docs` (load_results)."""
    found = {(d["cell"]["precision"], d["cell"]["batch"]): d for d in docs if d["cell"]["model"] == model}
    precisions = [p for p in PRECISIONS if any(k[0] == p for k in found)]
    batches = sorted({k[1] for k in found})
    lines = ["| precision | batch | eager ms | CUDA graph ms | torch.compile ms | gpulab ms | gpulab img/s "
             "| gpulab vs PyTorch's fastest | gpulab rel. error | run |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [table_row(p, b, found.get((p, b))) for p in precisions for b in batches]
    return "\n".join(lines)


# ---- Command line --------------------------------------------------------------------------------


def parse_list(text: str, kind, allowed=None, what="value") -> list:
    values = []
    for item in text.split(","):
        item = item.strip()
        try:
            value = kind(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{item}' is not a {what}") from None
        if allowed is not None and value not in allowed:
            raise argparse.ArgumentTypeError(f"'{item}' is not one of {', '.join(allowed)}")
        if kind is int and value < 1:
            raise argparse.ArgumentTypeError(f"'{item}': a batch size is at least 1")
        values.append(value)
    return values


def parse_args(argv: List[str]):
    compare_args: List[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, compare_args = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the cells not done yet")
    r.add_argument("--model", action="append", required=True, metavar="NAME=ONNX",
                   help="a model of the grid, by short name (repeatable)")
    r.add_argument("--precision", default="fp32,tf32,fp16,bf16",
                   type=lambda t: parse_list(t, str, PRECISIONS, "precision"))
    r.add_argument("--batch", default="1,8,32,128,256,1024", type=lambda t: parse_list(t, int, what="batch size"))
    r.add_argument("--modes", default="eager,graph,compile,gpulab",
                   type=lambda t: parse_list(t, str, MODES, "mode"))
    r.add_argument("--results", required=True, help="folder of the cell files (created)")
    r.add_argument("--gpulab", help="the gpulab binary (compare_pytorch.py looks on PATH without it)")
    r.add_argument("--gpus", default="", help="GPU ordinals to spread cells over, e.g. 0,1,2,3; "
                   "default: one process at a time on the default GPU")
    r.add_argument("--label", default="", help="kept with each cell (e.g. the commit measured)")
    r.add_argument("--budget-s", type=float, default=1e9, help="start no cell after this many seconds")
    r.add_argument("--min-start-s", type=float, default=60,
                   help="start a cell only if at least this many seconds of the budget are left")
    r.add_argument("--cell-timeout-s", type=float, default=900, help="end a cell's run after this long")
    r.add_argument("--compare-script", default=os.path.join(HERE, "compare_pytorch.py"), help=argparse.SUPPRESS)
    t = sub.add_parser("table", help="print the results as Markdown")
    t.add_argument("--results", required=True)
    t.add_argument("--model", action="append", help="only these models (default: every one found)")
    args = p.parse_args(argv)
    if args.command == "run":
        models = {}
        for spec in args.model:
            name, sep, path = spec.partition("=")
            if not sep or not name or not path:
                p.error(f"--model '{spec}': expected NAME=ONNX")
            if not os.path.isfile(path):
                p.error(f"--model '{spec}': no file '{path}'")
            models[name] = path
        args.models = models
        args.precisions, args.batches = args.precision, args.batch
        args.gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] or [None]
        args.compare_args = compare_args
        if os.path.exists(args.results) and not os.path.isdir(args.results):
            p.error(f"--results '{args.results}': not a folder")
        if args.budget_s <= 0 or args.cell_timeout_s <= 0:
            p.error("--budget-s and --cell-timeout-s must be positive")
    elif compare_args:
        p.error("arguments after -- are for `run`")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "run":
        return run(args)
    if not os.path.isdir(args.results):
        print(f"grid: no folder '{args.results}'", file=sys.stderr)
        return 2
    docs = load_results(args.results)
    for i, model in enumerate(args.model or sorted({d["cell"]["model"] for d in docs})):
        print(("\n" if i else "") + f"**{model}**\n\n" + table(docs, model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
