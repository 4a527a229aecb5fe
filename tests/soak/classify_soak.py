#!/usr/bin/env python3
"""Soak test of `gpulab classify` on the CPU path: one process classifies the bundled photos over
and over (the folder given REPEATS times) while its resident memory is sampled every half second.
Not part of ctest (it takes minutes): run by hand, numbers in docs/fuzzing.md.

Usage: classify_soak.py --gpulab build/ci/gpulab [--repeats 60] [--images data/images]
Passes (exit 0) when classify succeeds and its resident memory in the last tenth of the run is
within 2 % of the memory after the first tenth (the model, the first batch's buffers).
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpulab", required=True)
    ap.add_argument("--repeats", type=int, default=60)
    ap.add_argument("--images", default="data/images")
    args = ap.parse_args()
    cmd = [args.gpulab, "classify", "--device", "cpu", "--json"] + [args.images] * args.repeats
    t0 = time.monotonic()
    out_file = tempfile.TemporaryFile()  # not a pipe: nobody reads it while classify runs
    proc = subprocess.Popen(cmd, stdout=out_file, stderr=subprocess.DEVNULL)
    samples = []
    while proc.poll() is None:
        r = rss_kib(proc.pid)
        if r:
            samples.append((time.monotonic() - t0, r))
        time.sleep(0.5)
    out_file.seek(0)
    out = out_file.read()
    seconds = time.monotonic() - t0
    if proc.returncode != 0 or len(samples) < 20:
        print(f"soak: classify exited {proc.returncode} after {seconds:.0f} s with {len(samples)} samples: FAIL")
        return 1
    n = len(samples)
    after_warmup = statistics.median(r for _, r in samples[n // 10: n // 5])
    end = statistics.median(r for _, r in samples[-n // 10:])
    growth = (end - after_warmup) / after_warmup * 100
    images = out.count(b'"file"') or out.count(b'"path"')
    print(f"soak: classify --device cpu, {args.repeats} passes over {args.images}, {seconds:.0f} s, "
          f"{images} image results")
    print(f"soak: RSS KiB after warm-up {after_warmup:.0f}, end {end:.0f} ({growth:+.2f} %), "
          f"peak {max(r for _, r in samples)}")
    passed = abs(growth) <= 2.0
    print("soak: PASS" if passed else "soak: FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
