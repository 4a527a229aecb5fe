#!/usr/bin/env python3
"""Decode + preprocess per CPU core: gpulab's CPU path against PIL + torchvision, same files.

Usage: compare_pil.py FOLDER... [--passes 3] [--decode-bench build/ci/bench/decode_bench]
                      [--json OUT]

Both sides read the files from RAM (bytes loaded once before timing) and run on one thread:
  * PIL + torchvision: Image.open(BytesIO(b)).convert("RGB"), then Resize(256), CenterCrop(224),
    ToTensor(), Normalize(ImageNet mean, std), with torch.set_num_threads(1): the eval transform
    a torchvision DataLoader worker runs per image;
  * gpulab: bench/pipeline/decode_bench (decode_image_into + resize_crop_into + normalize_into,
    what the pipeline's decode threads run with --preprocess cpu), with DCT scaling on and off.
Each side is timed by thread CPU time (time.thread_time / CLOCK_THREAD_CPUTIME_ID), so other work
on a shared machine does not count; per-core img/s = images / CPU seconds. One warm-up pass first.
The runs alternate (PIL, gpulab, gpulab without DCT scaling) for `--rounds` rounds and the best
round of each is reported.
"""
import argparse
import io
import json
import os
import subprocess
import sys
import time

try:
    import torch
    import torchvision.transforms as T
    from PIL import Image
except ImportError as e:
    sys.exit(f"compare_pil.py: {e}. Use a python3 with torch, torchvision and PIL (Debian: /usr/bin/python3).")

EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm")


def list_files(folders):
    files = []
    for f in folders:
        if os.path.isdir(f):
            files += sorted(os.path.join(f, n) for n in os.listdir(f) if n.lower().endswith(EXTS))
        else:
            files.append(f)
    return files


def time_pil(blobs, passes):
    torch.set_num_threads(1)
    transform = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                           T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    for b in blobs:  # warm-up pass
        transform(Image.open(io.BytesIO(b)).convert("RGB"))
    c0, w0 = time.thread_time(), time.perf_counter()
    for _ in range(passes):
        for b in blobs:
            transform(Image.open(io.BytesIO(b)).convert("RGB"))
    cpu_s, wall_s = time.thread_time() - c0, time.perf_counter() - w0
    n = len(blobs) * passes
    return {"images": n, "cpu_s": cpu_s, "wall_s": wall_s, "per_core_ips": n / cpu_s}


def time_gpulab(exe, folders, passes, dct):
    cmd = [exe, "--passes", str(passes)] + ([] if dct else ["--no-dct-scaling"]) + folders
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--decode-bench", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                           "..", "..", "build", "ci", "bench", "decode_bench"))
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    files = list_files(a.folders)
    if not files:
        sys.exit("compare_pil.py: no images in " + " ".join(a.folders))
    blobs = [open(f, "rb").read() for f in files]
    best = {}
    for _ in range(a.rounds):
        for name, fn in (("pil_torchvision", lambda: time_pil(blobs, a.passes)),
                         ("gpulab", lambda: time_gpulab(a.decode_bench, a.folders, a.passes, True)),
                         ("gpulab_no_dct_scaling", lambda: time_gpulab(a.decode_bench, a.folders, a.passes, False))):
            r = fn()
            if name not in best or r["per_core_ips"] > best[name]["per_core_ips"]:
                best[name] = r
    pil = best["pil_torchvision"]["per_core_ips"]
    print(f"{len(files)} files x {a.passes} passes, one thread each, best of {a.rounds} rounds (thread CPU time)")
    print(f"{'':24} {'img/s per core':>15} {'vs PIL':>8}")
    for name, r in best.items():
        print(f"{name:24} {r['per_core_ips']:15.1f} {r['per_core_ips'] / pil:7.2f}x")
    g, g0 = best["gpulab"], best["gpulab_no_dct_scaling"]
    print(f"DCT scaling: {g['dct_scaled_images']} of {g['images']} decodes scaled; "
          f"speed-up {g['per_core_ips'] / g0['per_core_ips']:.2f}x over full-size decodes")
    if a.json:
        import PIL
        import platform
        import torchvision
        environment = {"command_line": " ".join([sys.executable] + sys.argv), "pil_version": PIL.__version__,
                       "torch_version": torch.__version__, "torchvision_version": torchvision.__version__,
                       "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
                       "load_average": os.getloadavg()}
        with open(a.json, "w") as f:
            json.dump({"schema": "gpulab.compare_pil", "schema_version": 1, "files": len(files), "passes": a.passes,
                       "rounds": a.rounds, "results": best, "environment": environment}, f, indent=2)


if __name__ == "__main__":
    main()
