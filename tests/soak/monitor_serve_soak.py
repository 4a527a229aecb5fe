#!/usr/bin/env python3
"""Soak test of `gpulab monitor --serve`: CLIENTS concurrent keep-alive clients scrape /metrics on
127.0.0.1 for SECONDS, while a prober sends malformed and non-GET requests; the server's resident
memory is sampled every second. With the stand-in NVML of the unit tests (one fake H200), so it
runs on any machine. Not part of ctest (it takes minutes): run by hand, numbers in docs/fuzzing.md.

Usage: monitor_serve_soak.py --gpulab build/ci/gpulab --fake-nvml build/ci/tests/unit/telemetry/fake_nvml
                             [--clients 50] [--seconds 300] [--port 0]
Passes (exit 0) when no scrape failed, every malformed request got a 4xx, resident memory at the
end is within 2 % of the middle of the run (the first third is warm-up), and SIGTERM ended the
server with 143 within a second.
"""

import argparse
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET\r\n\r\n",
    b"GET /metrics HTTP/9.9\r\n\r\n",
    b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\na=1",
    b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    b"PUT / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"a" * 70000 + b"\r\n\r\n",
]


def raw_status(port, request):
    # No half-close after the request: cpp-httplib drops a connection whose client has shut down
    # its side before it answers (a valid GET included).
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    if not data.startswith(b"HTTP/1.1 "):
        return 0 if not data else -1
    return int(data[9:12])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpulab", required=True)
    ap.add_argument("--fake-nvml", required=True, help="folder holding the stand-in libnvidia-ml.so.1")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    port = args.port or free_port()
    env = dict(os.environ, LD_LIBRARY_PATH=args.fake_nvml + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    server = subprocess.Popen([args.gpulab, "monitor", "--serve", f"127.0.0.1:{port}"], env=env,
                              stderr=subprocess.PIPE, text=True)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        print("soak: the server did not start listening", file=sys.stderr)
        server.kill()
        return 1

    # Binds the address it is given: 127.0.0.1 only, not every interface.
    bound = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout.split()
    local = [w for w in bound if w.endswith(f":{port}")]

    stop = time.monotonic() + args.seconds
    ok, failed, latencies_ms, errors = [0], [0], [], []
    lock = threading.Lock()

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                conn.request("GET", "/metrics")
                r = conn.getresponse()
                body = r.read()
                good = r.status == 200 and b"DCGM_FI_DEV_FB_USED" in body
                if r.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            except (OSError, http.client.HTTPException) as e:
                good = False
                with lock:
                    errors.append(repr(e))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            with lock:
                if good:
                    ok[0] += 1
                    latencies_ms.append((time.perf_counter() - t0) * 1e3)
                else:
                    failed[0] += 1
        conn.close()

    bad_answers = []

    def prober():
        while time.monotonic() < stop:
            for req in MALFORMED:
                try:
                    status = raw_status(port, req)
                except OSError as e:
                    status = repr(e)
                if not (isinstance(status, int) and 400 <= status < 500):
                    bad_answers.append((req[:40], status))
            time.sleep(1)

    threads = [threading.Thread(target=client) for _ in range(args.clients)] + [threading.Thread(target=prober)]
    for t in threads:
        t.start()
    samples = []  # (seconds since start, RSS KiB)
    t_start = time.monotonic()
    while time.monotonic() < stop:
        samples.append((time.monotonic() - t_start, rss_kib(server.pid)))
        time.sleep(1)
    for t in threads:
        t.join()

    t0 = time.monotonic()
    server.send_signal(signal.SIGTERM)
    try:
        code = server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.kill()
        code = None
    exit_ms = (time.monotonic() - t0) * 1e3

    # The worker threads' allocator arenas grow over the first minutes (50 clients, 8 workers):
    # the baseline is the middle of the run, compared with its last tenth.
    warm = [r for t, r in samples if args.seconds / 3 <= t <= args.seconds / 2]
    base = statistics.median(warm or [samples[-1][1]])
    end = statistics.median([r for _, r in samples[-max(1, len(samples) // 10):]])
    growth = (end - base) / base * 100
    lat = sorted(latencies_ms)
    pct = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]) if lat else (lambda q: float("nan"))
    print(f"soak: {args.clients} clients, {args.seconds:.0f} s, listening on {' '.join(local) or '?'}")
    print(f"soak: {ok[0]} scrapes ok ({ok[0] / args.seconds:.0f}/s), {failed[0]} failed; latency ms "
          f"p50 {pct(0.5):.2f} p99 {pct(0.99):.2f} max {lat[-1] if lat else float('nan'):.1f}")
    print(f"soak: RSS KiB first {samples[0][1]}, after warm-up {base:.0f}, end {end:.0f} "
          f"({growth:+.2f} %), peak {max(r for _, r in samples)}")
    trend = [f"{t:.0f}s:{r}" for t, r in samples[:: max(1, len(samples) // 10)]]
    print(f"soak: RSS KiB over time: {' '.join(trend)}")
    print(f"soak: malformed requests not answered 4xx: {len(bad_answers)} {bad_answers[:3]}")
    print(f"soak: SIGTERM -> exit {code} after {exit_ms:.0f} ms")
    if errors:
        print(f"soak: first errors: {errors[:3]}")
    passed = (failed[0] == 0 and not bad_answers and abs(growth) <= 2.0 and code == 143 and exit_ms < 1000
              and local == [f"127.0.0.1:{port}"])
    print("soak: PASS" if passed else "soak: FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
