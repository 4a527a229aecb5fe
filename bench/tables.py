#!/usr/bin/env python3
"""The tables of docs/performance.md, generated from the measurement records in bench/results.

A record is the raw JSON a tool wrote on the GPU host, kept as it came back, in a folder named
after the day and the commit it measured: bench/results/<YYYY-MM-DD>-<short commit>/. Read here:
  - gpulab.grid_cell (bench/grid.py run): one cell, compare_pytorch.py's JSON under "compare";
  - gpulab.compare_pytorch (compare_pytorch.py --json): any number of rows.
Other files there (gpulab bench --json, logs) are kept for reading, not tabulated.

Numbers quoted before raw records were kept are listed in bench/results/unrecorded.json, each
with the date and commit it was measured at (and the card, its "gpu" key: the H200). For every
cell (model, precision, batch) the table shows the latest measurement, whichever card it ran on, and
says which; a record beats an unrecorded number of the same day.

  python3 bench/tables.py                                print every table
  python3 bench/tables.py --write docs/performance.md    rewrite the tables between the markers
  python3 bench/tables.py --check docs/performance.md    exit 1 when the file's tables differ

In the Markdown file a table sits between
  <!-- tables.py: NAME -->
  <!-- tables.py: end -->
where NAME is one of TABLES (e.g. grid-r18). Everything between the two lines is replaced.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from grid import PRECISION_TITLES, PRECISIONS, fmt_ips, fmt_ms

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
UNRECORDED = "unrecorded.json"

TORCH_MODES = ("eager", "graph", "compile")
# compare_pytorch.py records the ONNX path; the tables use gpuhost_benchmarks.sh's short names.
MODEL_FILES = {"resnet18.onnx": "r18", "mobilenet_v2_1.0_224.onnx": "mnv2", "mobilenet_v3_small.onnx": "mnv3"}
# Table name -> model short name.
TABLES = {"grid-r18": "r18", "grid-mnv2": "mnv2", "grid-mnv3": "mnv3"}

RUN_FOLDER = re.compile(r"^(\d{4}-\d{2}-\d{2})-([0-9a-f]{7,40})$")
BEGIN = re.compile(r"^<!-- tables\.py: (?!end -->)([a-z0-9-]+) -->$")
END = "<!-- tables.py: end -->"


class TablesError(Exception):
    """A record or a Markdown file that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Measurement:
    model: str
    precision: str
    batch: int
    ms: Dict[str, Optional[float]]  # eager, graph, compile, gpulab
    date: str  # YYYY-MM-DD
    commit: str
    recorded: bool  # False: quoted before records were kept (unrecorded.json)
    source: str  # the record's path under bench/, or unrecorded.json
    gpu: Optional[str] = None  # the card, as the record's environment names it ("NVIDIA H100 80GB HBM3")

    @property
    def key(self) -> Tuple[str, str, int]:
        return (self.model, self.precision, self.batch)


def model_name(path: str) -> str:
    base = os.path.basename(path)
    return MODEL_FILES.get(base, os.path.splitext(base)[0])


def rows_of(doc: dict) -> List[Tuple[str, dict]]:
    """(model, row) of every timed row of a grid cell or compare_pytorch.py document."""
    if doc.get("schema") == "gpulab.grid_cell":
        if doc.get("status") != "ok" or not doc.get("compare"):
            return []  # a timeout or failure: no times
        return [(doc["cell"]["model"], row) for row in doc["compare"].get("rows", [])]
    if doc.get("schema") == "gpulab.compare_pytorch":
        return [(model_name(doc.get("model", "")), row) for row in doc.get("rows", [])]
    return []


def read_records(results: str) -> List[Measurement]:
    """Every timed row of every record folder under `results`."""
    out = []
    for folder in sorted(os.listdir(results)):
        match = RUN_FOLDER.match(folder)
        path = os.path.join(results, folder)
        if not os.path.isdir(path):
            continue
        if not match:
            raise TablesError(f"{path}: a record folder is named <YYYY-MM-DD>-<short commit>")
        date, commit = match.groups()
        for name in sorted(os.listdir(path)):
            if not name.endswith(".json"):
                continue
            file = os.path.join(path, name)
            try:
                with open(file, encoding="utf-8") as f:
                    doc = json.load(f)
            except (OSError, ValueError) as e:
                raise TablesError(f"{file}: not readable JSON ({e})") from None
            gpu = ((doc.get("compare") or doc).get("environment") or {}).get("gpu")
            for model, row in rows_of(doc):
                cells = row.get("cells", {})
                ms = {m: (cells.get(m) or {}).get("ms") for m in TORCH_MODES + ("gpulab",)}
                if ms["gpulab"] is None:
                    continue
                out.append(Measurement(model, row["precision"], int(row["batch"]), ms, date, commit, True,
                                       os.path.relpath(file, os.path.dirname(results)), gpu))
    return out


def read_unrecorded(results: str) -> List[Measurement]:
    path = os.path.join(results, UNRECORDED)
    if not os.path.exists(path):
        return []
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        return [Measurement(e["model"], e["precision"], int(e["batch"]),
                            {m: e.get(f"{m}_ms") for m in TORCH_MODES + ("gpulab",)}, e["measured"], e["commit"],
                            False, UNRECORDED, e.get("gpu", doc.get("gpu"))) for e in doc["cells"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TablesError(f"{path}: expected {{\"cells\": [{{model, precision, batch, eager_ms, graph_ms, "
                          f"compile_ms, gpulab_ms, measured, commit}}]}} ({e!r})") from None


def latest(measurements: List[Measurement]) -> Dict[Tuple[str, str, int], Measurement]:
    """The latest measurement of each cell; on the same day a record beats an unrecorded number, and
    a later record file (by name) an earlier one."""
    best: Dict[Tuple[str, str, int], Measurement] = {}
    for m in sorted(measurements, key=lambda m: (m.date, m.recorded, m.source)):
        best[m.key] = m
    return best


# ---- Markdown ------------------------------------------------------------------------------------


def card(gpu: Optional[str]) -> str:
    """' (H100)' for "NVIDIA H100 80GB HBM3": the tables mix cells of more than one card."""
    names = re.findall(r"\b[A-Z]+\d+[A-Za-z]*\b", gpu or "")
    return f" ({names[0]})" if names else ""


def provenance(m: Measurement) -> str:
    if m.recorded:
        return f"[{m.date}-{m.commit}](../bench/{m.source}){card(m.gpu)}"
    return f"{m.date} at {m.commit}{card(m.gpu)}, no raw record kept"


def table_row(m: Measurement) -> str:
    ms = m.ms
    torch = [(ms[mode], mode) for mode in TORCH_MODES if ms[mode] is not None]
    vs = "–"
    if torch:
        fastest, which = min(torch)
        vs = f"{fastest / ms['gpulab']:.2f}x ({which})"
    return (f"| {PRECISION_TITLES.get(m.precision, m.precision)} | {m.batch} | {fmt_ms(ms['eager'])} | "
            f"{fmt_ms(ms['graph'])} | {fmt_ms(ms['compile'])} | **{fmt_ms(ms['gpulab'])}** | "
            f"{fmt_ips(m.batch / ms['gpulab'] * 1e3)} | {vs} | {provenance(m)} |")


def table(cells: Dict[Tuple[str, str, int], Measurement], model: str) -> str:
    rows = sorted((m for m in cells.values() if m.model == model),
                  key=lambda m: (PRECISIONS.index(m.precision) if m.precision in PRECISIONS else 99, m.batch))
    if not rows:
        return f"No measurement of {model} yet."
    lines = ["| precision | batch | eager ms | CUDA graph ms | torch.compile ms | gpulab ms | gpulab img/s "
             "| gpulab vs PyTorch's fastest | measured |",
             "|---|---|---|---|---|---|---|---|---|"]
    return "\n".join(lines + [table_row(m) for m in rows])


def all_tables(results: str) -> Dict[str, str]:
    cells = latest(read_records(results) + read_unrecorded(results))
    return {name: table(cells, model) for name, model in TABLES.items()}


def fill(text: str, tables: Dict[str, str], source: str = "the file") -> str:
    """`text` with every marked table replaced by its generated form."""
    out: List[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        out.append(lines[i])
        match = BEGIN.match(lines[i])
        i += 1
        if not match:
            continue
        name = match.group(1)
        if name not in tables:
            raise TablesError(f"{source}: line {i}: unknown table '{name}' (known: {', '.join(tables)})")
        end = next((j for j in range(i, len(lines)) if lines[j] == END or BEGIN.match(lines[j])), None)
        if end is None or lines[end] != END:
            raise TablesError(f"{source}: line {i}: table '{name}' has no '{END}' line after it")
        out.append(tables[name])
        i = end
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=RESULTS, help="the records' folder (default: bench/results)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", metavar="MD", help="rewrite the marked tables of this Markdown file")
    mode.add_argument("--check", metavar="MD", help="exit 1 when this file's marked tables are not "
                      "what the records give")
    args = p.parse_args(argv)
    try:
        tables = all_tables(args.results)
        target = args.write or args.check
        if not target:
            print("\n\n".join(f"{name}:\n\n{body}" for name, body in tables.items()))
            return 0
        with open(target, encoding="utf-8") as f:
            text = f.read()
        filled = fill(text, tables, target)
    except (OSError, TablesError) as e:
        print(f"tables: {e}", file=sys.stderr)
        return 2
    if args.check:
        if filled != text:
            print(f"tables: {target}'s tables differ from what the records in {args.results} give. "
                  f"Run `python3 bench/tables.py --write {target}` and commit the result.", file=sys.stderr)
            return 1
        return 0
    if filled != text:
        tmp = target + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(filled)
        os.replace(tmp, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
