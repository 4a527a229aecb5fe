#!/usr/bin/env python3
"""How many timed candidates a tactic search needs, from the `-v` log of a gpulab build or sweep.

Each layer's search logs "tactics: <layer> (fused): N cuDNN candidates" (and "(unfused)"), then one
"debug: tactics: <layer> candidate <i> <tactic> <ms> ms" per candidate timed, in the order timed
(followed, since 2026-12-07, by "(built in <s> s)", which this does not read).
For caps on the number of candidates timed per search, this prints how many timed candidates the
cap would have skipped, their share of all the timed kernel time (a proxy for timing cost: every
candidate runs several times), and the cost in run time: the summed best times with the cap over
the summed best times without it (1.0000: no search lost its winner). src/runtime/tactics.cc's
kMaxTimedPerSearch was chosen from this on the H200 sweep of bench/results/2026-12-06-5b3cf93 and the
H100 builds of bench/results/2026-12-06-d62b738.

Usage: tactic_search_log.py LOG [--caps 6,9,12,16,20] [--json OUT]
Exit codes: 0 a table, 1 a log without timed candidates, 2 bad arguments or an unreadable log.
"""
import argparse
import json
import re
import sys
from typing import Dict, List

SEARCH = re.compile(r"tactics: (.+?) \((fused|unfused)\): (\d+) cuDNN candidates")
TIMED = re.compile(r"debug: tactics: (.+?) candidate (\d+) (\S+) ([0-9.]+) ms")


def searches(lines) -> List[Dict]:
    """One dict per layer search with the candidates' times in the order they were timed."""
    out: List[Dict] = []
    current = None
    for line in lines:
        m = SEARCH.match(line)
        if m:
            if m.group(2) == "fused" or current is None or current["label"] != m.group(1):
                current = {"label": m.group(1), "timed": []}
                out.append(current)
            continue
        m = TIMED.match(line)
        if m and current is not None and m.group(1) == current["label"]:
            current["timed"].append(float(m.group(4)))
    return [s for s in out if s["timed"]]


def cap_table(found: List[Dict], caps: List[int]) -> List[Dict]:
    total_timed = sum(len(s["timed"]) for s in found)
    total_ms = sum(sum(s["timed"]) for s in found)
    best = sum(min(s["timed"]) for s in found)
    rows = []
    for cap in caps:
        rows.append({"cap": cap,
                     "skipped": sum(max(0, len(s["timed"]) - cap) for s in found),
                     "timed": total_timed,
                     "skipped_time_share": sum(sum(s["timed"][cap:]) for s in found) / total_ms if total_ms else 0,
                     "best_ratio": sum(min(s["timed"][:cap]) for s in found) / best if best else 1,
                     "searches_losing_2pct": sum(min(s["timed"][:cap]) > 1.02 * min(s["timed"]) for s in found)})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--caps", default="6,9,12,16,20")
    ap.add_argument("--json")
    a = ap.parse_args()
    try:
        caps = [int(c) for c in a.caps.split(",")]
    except ValueError:
        ap.error(f"--caps: '{a.caps}' is not a comma-separated list of integers")
    if any(c < 1 for c in caps):
        ap.error(f"--caps: '{a.caps}': every cap must be at least 1")
    try:
        with open(a.log, errors="replace") as f:
            found = searches(f)
    except OSError as e:
        print(f"tactic_search_log: cannot read '{a.log}': {e.strerror}", file=sys.stderr)
        return 2
    if not found:
        print(f"{a.log}: no timed cuDNN candidates (was the build run with -v? An INT8/FP8 plan's "
              "convolutions time gpulab's own kernels, which its log lists per layer instead)", file=sys.stderr)
        return 1
    rows = cap_table(found, caps)
    winners = sorted(s["timed"].index(min(s["timed"])) for s in found)
    print(f"{len(found)} searches, {rows[0]['timed']} candidates timed; the winner's position among the "
          f"timed: median {winners[len(winners) // 2]}, last {winners[-1]}")
    print(f"{'cap':>4} {'skipped':>8} {'their time':>11} {'best ratio':>11} {'losing >2%':>11}")
    for r in rows:
        print(f"{r['cap']:>4} {r['skipped']:>8} {100 * r['skipped_time_share']:>10.1f}% {r['best_ratio']:>11.4f} "
              f"{r['searches_losing_2pct']:>11}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"searches": len(found), "last_winner_position": winners[-1], "caps": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
