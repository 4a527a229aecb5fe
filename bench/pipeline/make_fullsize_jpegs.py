#!/usr/bin/env python3
"""Writes full-size JPEG photos for the pipeline's CPU benchmarks into a folder (never committed).

Usage: make_fullsize_jpegs.py --out DIR [--count 200] [--size 1024x768] [--quality 90]
                              [--source FOLDER]

Each output is a photo of FOLDER (default: the shared imagenet-sample-256 images, found through
$GPULAB_SHARED_DIR or ../shared beside the checkout) enlarged with PIL's bicubic filter to the
size, saved as baseline JPEG (4:2:0, the PIL default) at the quality. Real photo content keeps
the entropy decoding realistic; the enlargement makes them as large as a camera's downsized
photos. Without a source folder, smooth synthetic images with noise are written instead.
Idempotent: files already there are kept.
"""
import argparse
import os
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError as e:
    sys.exit(f"make_fullsize_jpegs.py: {e}. Use a python3 with numpy and PIL (Debian: /usr/bin/python3).")


def default_source():
    shared = os.environ.get("GPULAB_SHARED_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared")
    folder = os.path.join(shared, "datasets", "imagenet-sample-256", "images")
    return folder if os.path.isdir(folder) else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--size", default="1024x768")
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--source", default=None)
    a = ap.parse_args()
    width, height = (int(v) for v in a.size.split("x"))
    source = a.source or default_source()
    os.makedirs(a.out, exist_ok=True)
    names = sorted(os.listdir(source))[: a.count] if source else [f"synthetic{i}" for i in range(a.count)]
    rng = np.random.default_rng(0)
    for i, name in enumerate(names):
        path = os.path.join(a.out, f"full{i:04d}_{width}x{height}.jpg")
        if os.path.exists(path):
            continue
        if source:
            img = Image.open(os.path.join(source, name)).convert("RGB")
            # Crop to the target aspect ratio, then enlarge.
            w, h = img.size
            target = width / height
            if w / h > target:
                nw = int(h * target)
                img = img.crop(((w - nw) // 2, 0, (w - nw) // 2 + nw, h))
            else:
                nh = int(w / target)
                img = img.crop((0, (h - nh) // 2, w, (h - nh) // 2 + nh))
            img = img.resize((width, height), Image.BICUBIC)
        else:
            y, x = np.mgrid[0:height, 0:width]
            base = np.stack([128 + 100 * np.sin(x / (40 + i) + c) * np.cos(y / 30) for c in range(3)], -1)
            img = Image.fromarray(np.clip(base + rng.normal(0, 8, base.shape), 0, 255).astype(np.uint8))
        tmp = path + ".tmp"
        img.save(tmp, format="JPEG", quality=a.quality)
        os.replace(tmp, path)
    print(f"make_fullsize_jpegs.py: {len(names)} images of {width}x{height} (quality {a.quality}) in {a.out}")


if __name__ == "__main__":
    main()
