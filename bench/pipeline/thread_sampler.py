#!/usr/bin/env python3
"""Samples where each thread of a running process spends its time, from /proc, until it exits.

Every --interval-ms it reads, for each thread of PID, its state (R running, S sleeping, D in
uninterruptible I/O), the system call it is blocked in (/proc/PID/task/TID/syscall: its number, or
"running" in user space) and its user and system CPU time (/proc/PID/task/TID/stat). At the
process's exit it prints, per thread name (gpulab names its pipeline threads gpulab-read and
gpulab-decN; the inference thread is the main one), the CPU time split into user and system and
the share of samples in each state and system call. Without a profiler on the GPU host, that says
whether a slow thread computes in user space, spins in the kernel or waits, and on what.

PID may be a wrapper (timeout, env): its child is sampled.

Usage: thread_sampler.py PID [--interval-ms 5] [--json OUT]
"""
import argparse
import collections
import json
import os
import sys
import time

# x86-64 system call numbers of the calls a CUDA process is usually found in.
SYSCALLS = {0: "read", 1: "write", 7: "poll", 9: "mmap", 10: "mprotect", 11: "munmap", 16: "ioctl",
            24: "sched_yield", 28: "madvise", 35: "nanosleep", 202: "futex", 228: "clock_gettime",
            230: "clock_nanosleep", 232: "epoll_wait", 281: "epoll_pwait"}


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def sample(pid, ticks):
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        stat = read(f"/proc/{pid}/task/{tid}/stat")
        if not stat:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        if tid == str(pid):
            name = f"{name} (main)"
        fields = stat[stat.rindex(")") + 2:].split()
        state, utime, stime = fields[0], int(fields[11]) / ticks, int(fields[12]) / ticks
        sc = (read(f"/proc/{pid}/task/{tid}/syscall") or "?").split()
        if not sc:
            where = "?"
        elif sc[0] == "running":
            where = "user space"
        elif sc[0].lstrip("-").isdigit():
            n = int(sc[0])
            where = SYSCALLS.get(n, f"syscall {n}")
        else:
            where = sc[0]
        out[tid] = (name, state, where, utime, stime)
    return out


def row_name(thread_name):
    """The report's row of a thread: gpulab-dec0..N share "gpulab-dec*"."""
    return thread_name.rstrip("0123456789") + "*" if thread_name.startswith("gpulab-dec") else thread_name


def resolve(pid):
    """The process to watch: PID itself, or its child when PID is a wrapper (timeout, env) that runs it."""
    for _ in range(400):
        comm = (read(f"/proc/{pid}/comm") or "").strip()
        if comm not in ("timeout", "env"):
            return pid
        children = (read(f"/proc/{pid}/task/{pid}/children") or "").split()
        if children:
            pid = int(children[0])
            continue
        time.sleep(0.005)
    return pid


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pid", type=int)
    ap.add_argument("--interval-ms", type=float, default=5.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    ticks = os.sysconf("SC_CLK_TCK")
    a.pid = resolve(a.pid)
    if not os.path.isdir(f"/proc/{a.pid}/task"):
        print(f"thread_sampler: no process {a.pid} to sample", file=sys.stderr)
        return 1
    counts = collections.defaultdict(collections.Counter)  # thread name -> (state, where) -> samples
    last = {}  # tid -> (name, utime, stime)
    while True:
        s = sample(a.pid, ticks)
        if s is None:
            break
        for tid, (name, state, where, utime, stime) in s.items():
            counts[name][f"{state} {where}"] += 1
            last[tid] = (name, utime, stime)
        time.sleep(a.interval_ms / 1000)
    cpu = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for name, utime, stime in last.values():
        key = row_name(name)
        cpu[key][0] += utime
        cpu[key][1] += stime
        cpu[key][2] += 1
    merged = collections.defaultdict(collections.Counter)
    for name, c in counts.items():
        key = row_name(name)
        merged[key].update(c)
    report = {}
    for key in sorted(merged, key=lambda k: -(cpu[k][0] + cpu[k][1])):
        total = sum(merged[key].values())
        shares = {k: v / total for k, v in merged[key].most_common(6)}
        report[key] = {"threads": cpu[key][2], "user_s": cpu[key][0], "system_s": cpu[key][1], "samples": shares}
        print(f"  {key} x{cpu[key][2]}: CPU {cpu[key][0]:.2f} s user, {cpu[key][1]:.2f} s system; "
              + ", ".join(f"{k} {100 * v:.0f}%" for k, v in shares.items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
