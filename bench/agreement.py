#!/usr/bin/env python3
"""Top-1 agreement between two `gpulab classify --json` runs over the same photos.

    python3 bench/agreement.py --reference classify_fp32.json classify_int8.json [...] \
        [--labels DATASET/labels.tsv] [--exclude-calibration 200] [--json out.json]

For each run after the reference: the fraction of photos whose top-1 class equals the reference's,
and with --labels the top-1 accuracy against the labels (an agreement figure, not an ImageNet
claim: the sample set has one photo per class). --exclude-calibration N leaves out the N photos
`gpulab accuracy` and `gpulab build` calibrate on by default (N spread evenly over labels.tsv's
order, src/quant/calibration.cc spread_subset), so that the figure covers the photos `gpulab
accuracy` scores. Used for the GPU runs of bench/gpuhost_int8.sh.
"""

import argparse
import json
import os
import sys


def top1_by_file(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"agreement.py: cannot read {path} as gpulab classify --json output: {e}")
    out = {}
    images = doc.get("images", []) if isinstance(doc, dict) else []
    for image in images:
        top = (image.get("top") or []) if isinstance(image, dict) else []
        if top and isinstance(top[0], dict) and "file" in image and "index" in top[0]:
            out[os.path.basename(str(image["file"]))] = top[0]["index"]
    if not out:
        sys.exit(f"agreement.py: {path} lists no predictions")
    return out


def labels_of(path):
    labels = []
    try:
        f = open(path)
    except OSError as e:
        sys.exit(f"agreement.py: cannot read the labels {path}: {e}")
    with f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 2 and parts[1].lstrip("-").isdigit():
                labels.append((os.path.basename(parts[0]), int(parts[1])))
    return labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, help="classify JSON the others are compared with")
    parser.add_argument("runs", nargs="+", help="classify JSON files")
    parser.add_argument("--labels", help="labels.tsv (file, class index) of the photos")
    parser.add_argument("--exclude-calibration", type=int, default=0,
                        help="leave out this many photos spread evenly over labels.tsv (needs --labels)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    if args.exclude_calibration and not args.labels:
        sys.exit("agreement.py: --exclude-calibration needs --labels (their order defines the spread)")

    reference = top1_by_file(args.reference)
    labels = labels_of(args.labels) if args.labels else []
    files = sorted(reference)
    if labels:
        excluded = set()
        n = len(labels)
        count = min(args.exclude_calibration, n)
        for j in range(count):
            excluded.add(labels[j * n // count][0])
        files = [name for name, _ in labels if name not in excluded and name in reference]
    label_of = dict(labels)

    result = {"reference": args.reference, "photos": len(files), "excluded_calibration": args.exclude_calibration,
              "runs": []}
    for run in [args.reference] + args.runs:
        top1 = top1_by_file(run)
        missing = [f for f in files if f not in top1]
        if missing:
            sys.exit(f"agreement.py: {run} has no prediction for {len(missing)} photos, e.g. {missing[0]}")
        entry = {"run": run, "agreement": sum(top1[f] == reference[f] for f in files) / len(files)}
        if label_of:
            entry["top1"] = sum(top1[f] == label_of[f] for f in files) / len(files)
        result["runs"].append(entry)
        print(f"{os.path.basename(run)}: agreement {entry['agreement'] * 100:.3f}%"
              + (f", top-1 {entry['top1'] * 100:.2f}%" if "top1" in entry else "") + f" over {len(files)} photos")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
