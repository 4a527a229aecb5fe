#!/usr/bin/env python3
"""Compares the telemetry a `gpulab sweep` point recorded (NVML, sampled by gpulab) with an
independent reading of the same seconds by nvidia-smi.

nvidia-smi runs beside the sweep:
  nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,utilization.gpu --format=csv -lms 100 > smi.csv
The sweep's single point is timed for many seconds so that its timed window dominates; the samples
compared are nvidia-smi's longest run at or above --busy-pct utilization, less --trim-s at each end
(warm-up and plan building come before it, the tail after). Prints a table and writes --json.
"""
import argparse
import csv
import datetime
import json
import statistics
import sys


def number(text):
    text = text.strip().split(" ")[0]
    try:
        return float(text)
    except ValueError:
        return None


def read_smi(path):
    rows = []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row or row[0].startswith("timestamp"):
                continue
            try:
                t = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
            except ValueError:
                continue
            power, clock, util = (number(v) for v in row[1:4])
            if None not in (power, clock, util):
                rows.append((t.timestamp(), power, clock, util))
    return rows


def busy_window(rows, busy_pct, trim_s):
    best, run = [], []
    for r in rows:
        if r[3] >= busy_pct:
            run.append(r)
        else:
            best, run = (run if len(run) > len(best) else best), []
    best = run if len(run) > len(best) else best
    if not best:
        return []
    t0, t1 = best[0][0] + trim_s, best[-1][0] - trim_s
    return [r for r in best if t0 <= r[0] <= t1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smi", required=True, help="nvidia-smi CSV (timestamp, power.draw, clocks.sm, utilization.gpu)")
    ap.add_argument("--sweep", required=True, help="the sweep's JSON (its first measured point is compared)")
    ap.add_argument("--busy-pct", type=float, default=95.0)
    ap.add_argument("--trim-s", type=float, default=1.0)
    ap.add_argument("--json", help="write the comparison here")
    a = ap.parse_args()
    rows = busy_window(read_smi(a.smi), a.busy_pct, a.trim_s)
    if len(rows) < 10:
        sys.exit(f"telemetry_crosscheck: only {len(rows)} busy nvidia-smi samples in {a.smi}; time the point longer.")
    with open(a.sweep) as f:
        sweep = json.load(f)
    points = [p for p in sweep["points"] if p.get("status") == "ok" and p.get("telemetry")]
    if not points:
        sys.exit(f"telemetry_crosscheck: no measured point with telemetry in {a.sweep}.")
    p = points[0]
    t = p["telemetry"]
    smi_power = statistics.fmean(r[1] for r in rows)
    smi_clock = statistics.fmean(r[2] for r in rows)
    out = {
        "point": {"precision": p.get("precision"), "batch": p.get("batch")},
        "smi_samples": len(rows),
        "smi_window_s": rows[-1][0] - rows[0][0],
        "power_w": {"gpulab": t.get("power_mean_w"), "nvidia_smi": smi_power},
        "sm_clock_mhz": {"gpulab": t.get("sm_clock_mean_mhz"), "nvidia_smi": smi_clock},
        "gpu_util_pct": {"gpulab": t.get("gpu_util_mean_pct"), "nvidia_smi": statistics.fmean(r[3] for r in rows)},
    }
    for key, limit in (("power_w", 0.05), ("sm_clock_mhz", 0.02)):
        g, s = out[key]["gpulab"], out[key]["nvidia_smi"]
        out[key]["relative_difference"] = None if not g or not s else (g - s) / s
        out[key]["limit"] = limit
        out[key]["agrees"] = None if not g or not s else abs(g - s) / s <= limit
    print(f"point {p.get('precision')} batch {p.get('batch')}: {len(rows)} nvidia-smi samples over {out['smi_window_s']:.1f} s")
    for key in ("power_w", "sm_clock_mhz", "gpu_util_pct"):
        v = out[key]
        rel = v.get("relative_difference")
        print(f"  {key:14} gpulab {v['gpulab']!s:>10}  nvidia-smi {v['nvidia_smi']:10.1f}"
              + ("" if rel is None else f"  {100 * rel:+.2f}% (limit {100 * v['limit']:.0f}%)"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
