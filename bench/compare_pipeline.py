#!/usr/bin/env python3
"""Image files to predictions: gpulab's pipeline against PyTorch's loaders, same files, same GPU (issue 29).

In one invocation, on the same image files and the same GPU, the script times three ways of going
from the files to top-k predictions of one ONNX classifier:
  gpulab      `gpulab pipeline --json --model M --precision P --batch B --loop L+1 --decode-threads T
              --device cuda --preprocess gpu FILES...` (docs/metrics.md, "gpulab pipeline"): its
              end-to-end img/s, each stage's capacity, the limiting stage, its compute-only rate
              and its memory figures, read from its JSON (schema gpulab.pipeline);
  dataloader  a torch.utils.data.DataLoader over the same file list (an ImageFolder-like Dataset:
              PIL open + convert("RGB"), then torchvision transforms), num_workers = --workers,
              pin_memory, persistent workers, batch B, feeding the model in PyTorch (FP16 or FP32,
              channels_last) captured once in a CUDA graph (compare_pytorch.py's ONNX interpreter
              and capture_graph);
  nvjpeg      the files read into RAM as bytes once, then per batch of B torchvision.io.decode_jpeg(
              list of tensors, device="cuda") (nvJPEG), resize, crop and normalize with torch ops on
              the GPU, and the same CUDA-graph model. "n/a" with the reason where torchvision's
              decode_jpeg takes no list (before 0.19) or there is no GPU.

Method: each PyTorch mode runs one untimed warm-up pass over the files (worker start, cuDNN's
algorithm search, CUDA graph already captured; it also brings the files into the OS page cache),
then --loop timed passes: img/s = images of the --loop passes / wall time from the first batch
requested to the last batch's top-k on the host (torch.cuda.synchronize). Each batch's top-5 goes
to pinned host memory without waiting, so batches overlap as in gpulab. The last batch of a pass
may be partial (the graph still runs B images; only the real ones count). gpulab runs --loop + 1
passes and its figure is warm_throughput_ips: the same --loop passes after a first one, files in
gpulab's RAM cache (--gpulab-loop gives gpulab more passes where --loop of them would be too short
to time; img/s is a rate either way). Per stage, PyTorch's modes report the loader alone (one more pass without the
model: DataLoader batches, or GPU decode + preprocessing synchronized) and the model alone
(compute-only: the CUDA graph replayed on the batch already on the device, 20 replays after 3,
CUDA events, as gpulab's compute_only_ips); the lower of the two is the limiting stage.

Preprocessing: both sides use the preset gpulab uses for the model (--preset auto: the model's
preprocess.* metadata as `gpulab pipeline --preset auto` reads it, torchvision's ImageNet transform
when it has none; or --preset torchvision|tf-slim, passed to gpulab too). torchvision preset:
Resize(256), CenterCrop(224), ToTensor, Normalize(ImageNet mean, std). tf-slim preset (the bundled
MobileNetV2's metadata): central crop 0.875 (tf.image.central_crop's offsets), resize to 224x224,
ToTensor, Normalize(mean = std = 128/255). The DataLoader's resizes are PIL's (antialiased); the
nvJPEG mode's torch ops follow gpulab: antialiased bilinear (torchvision) and TF1 bilinear without
antialiasing (tf-slim). gpulab decodes JPEGs at 1/2, 1/4 or 1/8 size where the preprocessing
allows (DCT scaling); PIL in the DataLoader decodes at full size, as torchvision's loaders do.

Memory: gpulab's own RSS and device memory come from its JSON (after pass 1, end, peak). For each
PyTorch mode: this process's VmRSS (/proc/self/status) at the mode's start, after the warm-up pass
and at the end; the DataLoader workers' VmRSS summed after the warm-up and at the end, and the
largest RSS of any finished child process (getrusage(RUSAGE_CHILDREN), read after the workers
exit; gpulab's run counts there too when it ran before); device memory in use
(torch.cuda.mem_get_info, the whole device) after the warm-up and at the end.

A mode that cannot run on this machine is "n/a" with the reason; a mode that fails is recorded
with its error and the others still run; the exit code is 1 when an asked-for mode failed.
`--device cpu` checks the script without a GPU: the DataLoader feeds eager PyTorch in FP32 on the
CPU, gpulab runs `gpulab pipeline --device cpu`, nvjpeg is n/a.

  GPULAB_GIT_COMMIT=<commit> python3 bench/compare_pipeline.py models/mobilenet_v2_1.0_224.onnx \\
      --gpulab build/gpuhost/gpulab --precision fp16 --batch 256 --loop 5 --json pipeline_mnv2.json
  python3 bench/compare_pipeline.py build/gpuhost/fixtures/resnet18.onnx --gpulab build/gpuhost/gpulab \\
      --images build/bench-images/full-1024x768 --loop 3
  python3 bench/compare_pipeline.py models/mobilenet_v2_1.0_224.onnx --device cpu --limit 8 --batch 4 \\
      --loop 1 --workers 1 --gpulab build/ci/gpulab
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field, asdict
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_pytorch as cp  # noqa: E402 - beside this script: the ONNX interpreter, CUDA graphs, timing
import grid  # noqa: E402 - beside this script (standard library only): write_json
from torchvision_bench import git_commit, last_line  # noqa: E402 - beside this script (standard library only)

try:  # the PyTorch modes need them; gpulab's mode runs without
    import torchvision
    import torchvision.transforms as T
    from PIL import Image
except ImportError as e:  # noqa: F841 - reported by the modes that need them
    torchvision = T = Image = None
    TORCHVISION_MISSING = f"needs torchvision and PIL ({e})"

SCHEMA = "gpulab.compare_pipeline"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODES = ("gpulab", "dataloader", "nvjpeg")
EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm")  # what `gpulab pipeline` takes from a folder
DEFAULT_IMAGES = (os.path.join(ROOT, "..", "shared", "datasets", "imagenet-sample-256", "images"),
                  os.path.join(ROOT, ".gpuhost", "data", "imagenet-sample-256", "images"))
GPULAB_CANDIDATES = ("build/release/gpulab", "build/gpuhost/gpulab")  # under the repository root
TOP_K = 5
COMPUTE_WARMUP, COMPUTE_ITERS = 3, 20  # gpulab pipeline's compute-only figure: 20 enqueues after 3
METHOD = ("end-to-end img/s = images of --loop passes / their wall time, after one untimed warm-up pass "
          "(gpulab: warm_throughput_ips of --loop + 1 passes); compute-only: the model alone on a batch already "
          "on the device (CUDA events; CPU: perf_counter); loader: the input path alone for one more pass")


class NotAvailable(Exception):
    """The mode cannot run on this machine (no GPU, torchvision too old): n/a, not a failure."""


# ---- Preprocessing -------------------------------------------------------------------------------


@dataclass
class Preset:
    name: str  # "torchvision" or "tf-slim", as gpulab's PreprocessSpec
    size: int  # model input side
    mean: List[float]  # per channel, in units of pixel / 255
    std: List[float]
    resize_shorter: int = 256  # torchvision only
    central_fraction: float = 0.875  # tf-slim only
    source: str = ""  # where the choice came from

    def describe(self) -> str:
        norm = (f"mean ({', '.join(f'{v:.4g}' for v in self.mean)}) std ({', '.join(f'{v:.4g}' for v in self.std)})"
                " of pixel/255")
        if self.name == "torchvision":
            return (f"torchvision: Resize({self.resize_shorter}), CenterCrop({self.size}), ToTensor, Normalize {norm}")
        return (f"tf-slim: central crop {self.central_fraction:.4g}, resize to {self.size}x{self.size}, ToTensor, "
                f"Normalize {norm}")


IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def resolve_preset(model, choice: str, size: int) -> Preset:
    """The preprocessing `gpulab pipeline --preset CHOICE` uses for this ONNX model
    (tools/gpulab/classifier.cc choose_preprocess, src/image/preprocess.cc preprocess_from_metadata);
    the output size is the model's input size, as gpulab's. ValueError for metadata gpulab refuses."""
    if choice == "torchvision":
        return Preset("torchvision", size, IMAGENET_MEAN, IMAGENET_STD, source="--preset torchvision")
    if choice == "tf-slim":
        return Preset("tf-slim", size, [0.5] * 3, [0.5] * 3, source="--preset tf-slim")
    meta = {p.key: p.value for p in model.metadata_props}
    if not any(k.startswith("preprocess.") for k in meta):
        return Preset("torchvision", size, IMAGENET_MEAN, IMAGENET_STD,
                      source="auto: the model has no preprocess.* metadata, so torchvision's ImageNet transform")
    resize = meta.get("preprocess.resize", "")
    pixel_max = {"0-255": 255.0, "0-1": 1.0}.get(meta.get("preprocess.pixel_range", "0-255"))
    if pixel_max is None:
        raise ValueError(f"preprocess.pixel_range '{meta['preprocess.pixel_range']}' is not 0-255 or 0-1")

    def triple(key, default):
        try:
            values = [float(v) / pixel_max for v in meta.get(key, default).split(",")]
        except ValueError:
            values = []
        if len(values) != 3:
            raise ValueError(f"{key} '{meta.get(key)}' is not three comma-separated numbers")
        return values

    mean, std = triple("preprocess.mean", "0,0,0"), triple("preprocess.std", ",".join([str(pixel_max)] * 3))
    source = f"auto: the model's metadata (preprocess.resize '{resize}')"
    m = re.fullmatch(r"center_crop_([0-9.eE+-]+)_then_resize_(\d+)", resize)
    if m:
        return Preset("tf-slim", size, mean, std, central_fraction=float(m.group(1)), source=source)
    m = re.fullmatch(r"resize_(\d+)_then_center_crop_(\d+)", resize)
    if m:
        return Preset("torchvision", size, mean, std, resize_shorter=int(m.group(1)), source=source)
    raise ValueError(f"preprocess.resize '{resize}' is not one gpulab understands; pass --preset")


def central_crop_box(width: int, height: int, fraction: float):
    """tf.image.central_crop's window (src/image/preprocess.cc central_crop_offset): (x0, y0, x1, y1)."""
    x0, y0 = int((width - width * fraction) / 2.0), int((height - height * fraction) / 2.0)
    return x0, y0, width - x0, height - y0


class CentralCrop:
    """tf.image.central_crop on a PIL image (a transform for torchvision's Compose)."""

    def __init__(self, fraction: float):
        self.fraction = fraction

    def __call__(self, img):
        return img.crop(central_crop_box(img.width, img.height, self.fraction))

    def __repr__(self):
        return f"CentralCrop({self.fraction})"


def pil_transform(preset: Preset):
    """torchvision transforms for the preset, on a PIL image (the DataLoader's workers run them)."""
    if preset.name == "torchvision":
        geometry = [T.Resize(preset.resize_shorter), T.CenterCrop(preset.size)]
    else:
        geometry = [CentralCrop(preset.central_fraction), T.Resize((preset.size, preset.size))]
    return T.Compose(geometry + [T.ToTensor(), T.Normalize(preset.mean, preset.std)])


class FileDataset(torch.utils.data.Dataset):
    """ImageFolder's loading over a list of files (no labels): PIL open, convert("RGB"), transform."""

    def __init__(self, files: List[str], transform):
        self.files, self.transform = files, transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with open(self.files[i], "rb") as f, Image.open(f) as img:
            return self.transform(img.convert("RGB"))


def tf1_resize(x: torch.Tensor, size: int) -> torch.Tensor:
    """TF1 resize_bilinear (align_corners=False, half_pixel_centers=False, no antialiasing) of float
    [N, C, H, W] to size x size: src = dst * in / out in float32, as gpulab's tf-slim preset."""
    def axis(n):
        src = torch.arange(size, dtype=torch.float32, device=x.device) * torch.tensor(n / size, dtype=torch.float32)
        lo = src.floor()
        lerp = src - lo
        lo = lo.long().clamp(min=0)
        return lo, (lo + 1).clamp(max=n - 1), lerp

    ylo, yhi, yl = axis(x.shape[-2])
    xlo, xhi, xl = axis(x.shape[-1])

    def along_x(rows):
        left, right = rows[..., xlo], rows[..., xhi]
        return left + (right - left) * xl

    top, bottom = along_x(x[..., ylo, :]), along_x(x[..., yhi, :])
    return top + (bottom - top) * yl[:, None]


def tensor_preprocess(images: List[torch.Tensor], preset: Preset, out: torch.Tensor) -> torch.Tensor:
    """The preset with torch ops on uint8 CHW RGB tensors (any device) into float out [n, 3, S, S]."""
    s = preset.size
    for i, img in enumerate(images):
        x = img.unsqueeze(0).float()
        h, w = x.shape[-2:]
        if preset.name == "torchvision":
            r = preset.resize_shorter
            rh, rw = (r * h // w, r) if w <= h else (r, r * w // h)
            x = F.interpolate(x, size=(rh, rw), mode="bilinear", align_corners=False, antialias=True)
            if rh < s or rw < s:  # torchvision's CenterCrop pads
                ph, pw = max(0, s - rh), max(0, s - rw)
                x = F.pad(x, (pw // 2, (pw + 1) // 2, ph // 2, (ph + 1) // 2))
                rh, rw = x.shape[-2:]
            top, left = int(round((rh - s) / 2.0)), int(round((rw - s) / 2.0))
            x = x[..., top:top + s, left:left + s]
        else:
            x0, y0, x1, y1 = central_crop_box(w, h, preset.central_fraction)
            x = tf1_resize(x[..., y0:y1, x0:x1], s)
        out[i] = x[0]
    mean = torch.tensor(preset.mean, device=out.device).view(1, 3, 1, 1) * 255.0
    std = torch.tensor(preset.std, device=out.device).view(1, 3, 1, 1) * 255.0
    return out.sub_(mean).div_(std)


# ---- Files and memory ----------------------------------------------------------------------------


def list_files(paths: List[str]) -> List[str]:
    """Files in gpulab's order (image/dataset.cc list_images): a folder's images sorted, files as given."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, n) for n in os.listdir(p)
                            if n.lower().endswith(EXTS) and os.path.isfile(os.path.join(p, n)))
        elif os.path.exists(p):
            files.append(p)
        else:
            raise FileNotFoundError(f"'{p}': no such file or folder")
    return files


def vm_rss(pid="self") -> Optional[int]:
    """VmRSS of /proc/PID/status in bytes, None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def children_max_rss() -> int:
    """The largest RSS of any child process that has finished (getrusage RUSAGE_CHILDREN), bytes."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


def workers_rss(loader) -> Optional[int]:
    """The DataLoader workers' VmRSS summed (shared pages count in each), None without workers."""
    workers = getattr(getattr(loader, "_iterator", None), "_workers", None)  # private, stable since torch 1.x
    if not workers:
        return None
    sizes = [vm_rss(w.pid) for w in workers]
    return sum(v for v in sizes if v is not None)


def device_used(dev: torch.device) -> Optional[int]:
    if dev.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info()  # the current device: mem_get_info wants an index, not "cuda"
    return total - free


# ---- Results -------------------------------------------------------------------------------------


@dataclass
class ModeResult:
    mode: str
    status: str = "not run"  # ok, n/a (cannot run here), failed
    error: Optional[str] = None
    ips: Optional[float] = None  # end to end over --loop passes after the warm-up pass
    images: Optional[int] = None
    wall_s: Optional[float] = None
    warmup_s: Optional[float] = None
    stages: Dict[str, Optional[float]] = field(default_factory=dict)  # stage -> capacity, img/s
    limiting: Optional[str] = None
    compute_only_ips: Optional[float] = None
    end_to_end_vs_compute: Optional[float] = None
    memory: Dict[str, Optional[float]] = field(default_factory=dict)
    details: Dict[str, object] = field(default_factory=dict)
    command: Optional[List[str]] = None


# ---- gpulab --------------------------------------------------------------------------------------


def gpulab_command(args) -> List[str]:
    command = [args.gpulab, "pipeline", "--json", "--predictions", "--model", args.model, "--batch", str(args.batch),
               "--loop", str(args.gpulab_loop + 1), "--decode-threads", str(args.decode_threads)]
    if args.device == "cpu":
        command += ["--device", "cpu"]
    else:
        command += ["--device", "cuda", "--precision", args.precision]
        if args.gpulab_preprocess != "auto":
            command += ["--preprocess", args.gpulab_preprocess]
        if args.gpulab_timing_cache:
            command += ["--timing-cache", args.gpulab_timing_cache]
    if args.preset != "auto":
        command += ["--preset", args.preset]
    return command + args.files


def run_gpulab(args, r: ModeResult) -> None:
    if not args.gpulab:
        raise RuntimeError("no gpulab binary found (pass --gpulab PATH)")
    command = gpulab_command(args)
    r.command = command[:len(command) - len(args.files)] + [f"<{len(args.files)} files>"]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"gpulab pipeline ran past --timeout-s {args.timeout_s:g}") from None
    # 9: some inputs were skipped (named on stderr); the figures are still there.
    if proc.returncode not in (0, 9):
        raise RuntimeError(f"gpulab pipeline exited with {proc.returncode}: {last_line(proc)}")
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise RuntimeError(f"gpulab pipeline printed no JSON: {last_line(proc)}") from None
    if doc.get("schema") != "gpulab.pipeline":
        raise RuntimeError(f"gpulab pipeline's JSON has schema {doc.get('schema')!r}, not 'gpulab.pipeline'")
    r.ips = doc.get("warm_throughput_ips")
    r.images = doc["images"] - doc["files"] if doc.get("files") is not None else None
    if r.ips is not None and r.ips > 0:
        r.wall_s = r.images / r.ips if r.images else None
    r.warmup_s = doc.get("first_pass_s")
    r.stages = {s["name"]: s.get("capacity_ips") for s in doc.get("stages", [])}
    limiting = doc.get("limiting_stage") or {}
    r.limiting = limiting.get("name")
    r.compute_only_ips = doc.get("compute_only_ips")
    if r.ips and r.compute_only_ips:  # gpulab's own end_to_end_vs_compute counts pass 1 too
        r.end_to_end_vs_compute = r.ips / r.compute_only_ips
    r.memory = dict(doc.get("memory") or {})
    # Pass 1's top-1 per file, for the PyTorch modes' agreement; not kept in the record (1,000 entries).
    predictions = doc.pop("predictions", None) or []
    args.gpulab_top1 = {os.path.normpath(p["file"]): p["top"][0]["index"] for p in predictions if p.get("top")}
    r.details = {"pipeline": doc, "exit_code": proc.returncode}
    if proc.returncode == 9 or doc.get("failed_images"):
        r.details["note"] = f"{doc.get('failed_images')} images failed to decode (gpulab exit code 9)"


# ---- PyTorch -------------------------------------------------------------------------------------


class TorchModel:
    """The ONNX model in PyTorch on one device: FP16/FP32 channels_last in a CUDA graph (CPU: eager
    FP32), a static input of `batch` images, and the top-k of each batch copied to the host."""

    def __init__(self, args, dev: torch.device):
        dtype = torch.float16 if dev.type == "cuda" and args.precision == "fp16" else torch.float32
        if dev.type == "cuda":
            cp.set_tf32(False)
            torch.backends.cudnn.benchmark = True
        start = time.perf_counter()
        self.dev, self.batch = dev, args.batch
        self.module = cp.OnnxModule(args.onnx_model).eval().to(dev, dtype).to(memory_format=torch.channels_last)
        size = args.preset_spec.size
        self.static_x = torch.zeros(args.batch, 3, size, size, device=dev, dtype=dtype).contiguous(
            memory_format=torch.channels_last)
        if dev.type == "cuda":
            with torch.inference_mode():
                self.graph, self.static_out = cp.capture_graph(self.module, self.static_x)
            self.replay = self.graph.replay
        else:
            def eager():
                self.static_out = self.module(self.static_x)
            self.replay = eager
            with torch.inference_mode():
                eager()
        self.k = min(TOP_K, self.static_out.shape[-1])
        self.setup_s = time.perf_counter() - start

    def results_buffer(self, batches: int) -> torch.Tensor:
        return torch.empty(batches, self.batch, self.k, dtype=torch.int64, pin_memory=self.dev.type == "cuda")

    def infer(self, x: torch.Tensor, row: torch.Tensor) -> None:
        """x: n <= batch preprocessed images on the device; their top-k indices into row[:n], no wait."""
        n = x.shape[0]
        self.static_x[:n].copy_(x)
        self.replay()
        row[:n].copy_(torch.topk(self.static_out[:n], self.k).indices, non_blocking=True)

    def sync(self) -> None:
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)

    def compute_only_ips(self) -> float:
        if self.dev.type == "cuda":
            ms = cp.time_cuda(self.replay, COMPUTE_WARMUP, COMPUTE_ITERS)
        else:
            ms = cp.time_cpu(self.replay, 0, 2)
        return self.batch / ms * 1e3


def timed_passes(r: ModeResult, model: TorchModel, args, one_pass, on_warm) -> None:
    """Warm-up pass, then --loop timed passes of one_pass(results) -> (images, wait_s), where batch j
    of every pass writes its top-k into results[j] (in stream order: the host reads the last pass's)."""
    batches = math.ceil(len(args.files) / args.batch)
    results = model.results_buffer(batches)
    start = time.perf_counter()
    one_pass(results)
    model.sync()
    r.warmup_s = time.perf_counter() - start
    on_warm()
    images, wait_s = 0, 0.0
    start = time.perf_counter()
    for _ in range(args.loop):
        n, w = one_pass(results)
        images, wait_s = images + n, wait_s + w
    model.sync()
    r.wall_s = time.perf_counter() - start
    r.images = images
    r.ips = images / r.wall_s
    r.details["wait_input_s"] = wait_s
    r.details["wait_input_share"] = wait_s / r.wall_s
    top1 = results[:, :, 0].reshape(-1)[:len(args.files)].tolist()  # file i: batch i // B, image i % B
    pairs = [(t, args.gpulab_top1.get(os.path.normpath(f))) for t, f in zip(top1, args.files)]
    pairs = [(t, g) for t, g in pairs if g is not None]
    if pairs:
        r.details["top1_agreement_with_gpulab"] = sum(t == g for t, g in pairs) / len(pairs)
        r.details["top1_compared"] = len(pairs)


def finish_stages(r: ModeResult, model: TorchModel, loader_name: str, loader_ips: float) -> None:
    r.compute_only_ips = model.compute_only_ips()
    r.end_to_end_vs_compute = r.ips / r.compute_only_ips
    r.stages = {loader_name: loader_ips, "compute": r.compute_only_ips}
    r.limiting = min(r.stages, key=r.stages.get)


def memory_start(dev) -> Dict[str, Optional[float]]:
    return {"rss_start_bytes": vm_rss(), "device_used_start_bytes": device_used(dev)}


def memory_warm(mem, dev, loader=None) -> None:
    mem.update(rss_after_warmup_bytes=vm_rss(), device_used_after_warmup_bytes=device_used(dev))
    if loader is not None:
        mem["workers_rss_after_warmup_bytes"] = workers_rss(loader)


def memory_end(mem, dev, loader=None) -> None:
    mem.update(rss_end_bytes=vm_rss(), device_used_end_bytes=device_used(dev))
    if loader is not None:
        mem["workers_rss_end_bytes"] = workers_rss(loader)
    warm, end = mem.get("rss_after_warmup_bytes"), mem["rss_end_bytes"]
    mem["rss_growth_fraction"] = (end - warm) / warm if warm and end else None
    if dev.type == "cuda":
        mem["torch_max_reserved_bytes"] = torch.cuda.max_memory_reserved()


def run_dataloader(args, model: TorchModel, r: ModeResult) -> None:
    dev = model.dev
    cuda = dev.type == "cuda"
    r.memory = memory_start(dev)
    workers = args.workers
    loader = torch.utils.data.DataLoader(
        FileDataset(args.files, pil_transform(args.preset_spec)), batch_size=args.batch, shuffle=False,
        num_workers=workers, pin_memory=cuda, persistent_workers=workers > 0,
        timeout=args.timeout_s if workers > 0 else 0)
    r.details.update(num_workers=workers, pin_memory=cuda, persistent_workers=workers > 0,
                     transform=repr(loader.dataset.transform).replace("\n", " "))

    def one_pass(results):
        images, wait_s, it = 0, 0.0, iter(loader)
        for j in range(len(loader)):
            t = time.perf_counter()
            xb = next(it)
            wait_s += time.perf_counter() - t
            model.infer(xb.to(dev, non_blocking=True), results[j])
            images += xb.shape[0]
        return images, wait_s

    with torch.inference_mode():
        timed_passes(r, model, args, one_pass, lambda: memory_warm(r.memory, dev, loader))
        memory_end(r.memory, dev, loader)
        start = time.perf_counter()  # the loader alone: one more pass, batches only
        images = sum(xb.shape[0] for xb in loader)
        loader_ips = images / (time.perf_counter() - start)
        finish_stages(r, model, "loader", loader_ips)
    loader = None  # its persistent workers exit (and are waited for) with its iterator
    gc.collect()
    r.memory["children_max_rss_bytes"] = children_max_rss()


def is_jpeg(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\xff\xd8"


def gpu_decoder(args):
    """torchvision.io.decode_jpeg, after it decoded a list of one file on the GPU (batched nvJPEG:
    torchvision >= 0.19); NotAvailable with the reason otherwise."""
    if args.device != "cuda":
        raise NotAvailable("needs CUDA: nvJPEG decodes on the GPU (--device cuda)")
    if torchvision is None:
        raise NotAvailable(TORCHVISION_MISSING)
    from torchvision.io import ImageReadMode, read_file  # noqa: PLC0415
    decode = getattr(torchvision.io, "decode_jpeg", None)
    if decode is None:
        raise NotAvailable(f"torchvision {torchvision.__version__} has no torchvision.io.decode_jpeg")
    first = next((f for f in args.files if is_jpeg(f)), None)
    if first is None:
        raise NotAvailable("none of the files is a JPEG")
    try:
        out = decode([read_file(first)], mode=ImageReadMode.RGB, device="cuda")
        if not isinstance(out, (list, tuple)):
            raise TypeError("a list in gave no list out")
    except (TypeError, RuntimeError, ValueError) as e:
        raise NotAvailable(f"torchvision {torchvision.__version__}: decode_jpeg(list, device='cuda') does not run "
                           f"(batched GPU decode needs torchvision >= 0.19): {cp.first_line(e)}") from None
    return decode


def run_nvjpeg(args, model: TorchModel, decode, r: ModeResult) -> None:
    dev = model.dev
    from torchvision.io import ImageReadMode, read_file  # noqa: PLC0415
    r.memory = memory_start(dev)
    start = time.perf_counter()
    blobs = [read_file(f) for f in args.files]  # the files in RAM, as uint8 tensors
    r.details["read_s"] = time.perf_counter() - start
    jpeg = [b.numel() > 2 and b[0].item() == 0xFF and b[1].item() == 0xD8 for b in blobs]
    others = jpeg.count(False)
    if others:  # BMP, PNG...: decoded by PIL on the CPU and uploaded, each pass
        r.details["note"] = f"{others} of {len(blobs)} files are not JPEGs: PIL decodes them on the CPU"
    size = args.preset_spec.size
    scratch = torch.empty(args.batch, 3, size, size, device=dev)

    def gpu_decode(indices) -> Dict[int, torch.Tensor]:
        """{file index: uint8 CHW on the GPU} for those of indices that nvJPEG decodes."""
        try:
            return dict(zip(indices, decode([blobs[i] for i in indices], mode=ImageReadMode.RGB, device=str(dev))))
        except RuntimeError:  # a JPEG that nvJPEG refuses: PIL decodes it on the CPU from now on
            refused = []
            for i in indices:
                try:
                    decode([blobs[i]], mode=ImageReadMode.RGB, device=str(dev))
                except RuntimeError as e:
                    refused.append(i)
                    r.details.setdefault("nvjpeg_refused", []).append(f"{args.files[i]}: {cp.first_line(e)}")
            if not refused:
                raise
            for i in refused:
                jpeg[i] = False
            rest = [i for i in indices if jpeg[i]]
            return gpu_decode(rest) if rest else {}

    def decode_batch(indices):
        jpegs = [i for i in indices if jpeg[i]]
        images = gpu_decode(jpegs) if jpegs else {}
        for i in indices:
            if not jpeg[i]:
                with Image.open(args.files[i]) as img:
                    pixels = T.functional.pil_to_tensor(img.convert("RGB"))
                images[i] = pixels.to(dev, non_blocking=False)
        return tensor_preprocess([images[i] for i in indices], args.preset_spec, scratch[:len(indices)])

    def batches():
        for first in range(0, len(blobs), args.batch):
            yield list(range(first, min(first + args.batch, len(blobs))))

    def one_pass(results):
        images = 0
        for j, indices in enumerate(batches()):
            model.infer(decode_batch(indices), results[j])
            images += len(indices)
        return images, 0.0

    def after_warmup():
        memory_warm(r.memory, dev)
        refused = len(r.details.get("nvjpeg_refused", []))
        if refused:
            r.details["note"] = (r.details.get("note", "") + "; " if r.details.get("note") else "") + (
                f"nvJPEG refused {refused} files in the warm-up pass: PIL decodes them on the CPU")

    with torch.inference_mode():
        timed_passes(r, model, args, one_pass, after_warmup)
        memory_end(r.memory, dev)
        start = time.perf_counter()  # decode + preprocessing alone: one more pass
        for indices in batches():
            decode_batch(indices)
        model.sync()
        finish_stages(r, model, "decode", len(blobs) / (time.perf_counter() - start))
    r.details.pop("wait_input_s")  # one thread: no queue to wait on
    r.details.pop("wait_input_share")


# ---- Output --------------------------------------------------------------------------------------


def fmt(v: Optional[float], spec: str) -> str:
    width = spec.split(".")[0]
    return format("n/a", f">{width}") if v is None else format(v, spec)


def mib(v) -> str:
    return "n/a" if v is None else f"{v / 2**20:.1f}"


def ratios(results: Dict[str, ModeResult]) -> dict:
    """Each mode's img/s over the DataLoader's, and issue 29's two targets for gpulab."""
    base = results.get("dataloader")
    base_ips = base.ips if base and base.status == "ok" else None
    out = {"vs_dataloader": {m: (r.ips / base_ips if base_ips and r.ips else None) for m, r in results.items()}}
    g = results.get("gpulab")
    if g and g.status == "ok" and g.ips:
        decode, compute = g.stages.get("decode"), g.compute_only_ips
        bound = min(v for v in (decode, compute) if v) if (decode or compute) else None
        out["gpulab_targets"] = {
            "vs_dataloader": out["vs_dataloader"].get("gpulab"),
            "vs_dataloader_ok": None if out["vs_dataloader"].get("gpulab") is None
            else out["vs_dataloader"]["gpulab"] >= 2.0,
            "bound_ips": bound, "bound": "min(decode capacity, compute-only)",
            "vs_bound": g.ips / bound if bound else None,
            "vs_bound_ok": None if not bound else g.ips / bound >= 0.9}
    return out


def limiting_text(r: ModeResult) -> str:
    if r.status != "ok":
        return r.error or r.status
    if r.mode == "gpulab":
        lim = r.details["pipeline"].get("limiting_stage") or {}
        text = f"{lim.get('name')} ({fmt(lim.get('capacity_ips'), '.1f')} img/s"
        if lim.get("next_name"):
            text += f"; next {lim['next_name']} x{lim.get('margin', 0):.2f}"
        text += ")"
    else:
        text = f"{r.limiting} ({r.stages[r.limiting]:.1f} img/s)"
        if "wait_input_share" in r.details:
            text += f"; waited for batches {100 * r.details['wait_input_share']:.0f}% of the time"
        if "top1_agreement_with_gpulab" in r.details:
            text += f"; top-1 = gpulab's on {100 * r.details['top1_agreement_with_gpulab']:.1f}%"
    return text + (f"; {r.details['note']}" if r.details.get("note") else "")


def print_table(results: Dict[str, ModeResult], args) -> None:
    summary = ratios(results)
    header = (f"{'mode':<10} {'status':<6} {'img/s':>10} {'vs DataLoader':>13} {'compute-only':>12} "
              f"{'e2e/compute':>11}  limiting stage (capacity) / notes")
    print(header)
    print("-" * len(header))
    for mode, r in results.items():
        rel = summary["vs_dataloader"].get(mode)
        print(f"{mode:<10} {r.status:<6} {fmt(r.ips, '10.1f')} {fmt(rel, '12.2f') + ('x' if rel else ' '):>13} "
              f"{fmt(r.compute_only_ips, '12.1f')} {fmt(r.end_to_end_vs_compute, '11.2f')}  {limiting_text(r)}")
    print()
    where = "GPU" if args.device == "cuda" else "CPU"
    gpulab_passes = f" ({args.gpulab_loop} for gpulab)" if args.gpulab_loop != args.loop else ""
    print(f"{len(args.files)} files, batch {args.batch}, {args.loop} timed passes{gpulab_passes} after a warm-up pass; "
          f"{args.workers} DataLoader workers, {args.decode_threads} gpulab decode threads; model on the {where} "
          f"in {args.precision}.")
    print(f"Preprocessing (both sides): {args.preset_spec.describe()} [{args.preset_spec.source}].")
    print("img/s: images of the timed passes / their wall time, files to top-5 on the host (gpulab: "
          "warm_throughput_ips). compute-only: the model alone on a batch already on the device. Limiting, for "
          "PyTorch: the lower of the loader alone (one more pass) and compute-only. top-1 = gpulab's: the last "
          "pass's top-1 against gpulab's pass 1.")
    g = results.get("gpulab")
    if g and g.status == "ok":
        print(f"gpulab's own: {g.details['pipeline'].get('preprocess_spec')} (preprocess on the "
              f"{g.details['pipeline'].get('preprocess')}).")
        stages = ", ".join(f"{k} {fmt(v, '.1f')}" for k, v in g.stages.items())
        print(f"gpulab stage capacities (img/s): {stages}; all {g.details['pipeline'].get('passes')} passes "
              f"{fmt(g.details['pipeline'].get('throughput_ips'), '.1f')} img/s.")
        split = g.details['pipeline'].get('gpu_split')
        if split:
            print(f"gpulab's GPU busy time: {fmt(split.get('preprocess_s'), '.3f')} s preprocessing, "
                  f"{fmt(split.get('model_s'), '.3f')} s the model, {fmt(split.get('output_s'), '.3f')} s top-k "
                  f"and results; host: {fmt(split.get('host_submit_s'), '.3f')} s queueing batches "
                  f"({fmt(split.get('host_enqueue_s'), '.3f')} s in the engine's enqueue), "
                  f"{fmt(split.get('host_wait_s'), '.3f')} s waiting.")
    targets = summary.get("gpulab_targets")
    if targets and args.device == "cuda":
        def verdict(ok):
            return "n/a" if ok is None else ("met" if ok else "NOT met")
        print(f"Issue 29 targets: gpulab / DataLoader {fmt(targets['vs_dataloader'], '.2f')}x (>= 2x: "
              f"{verdict(targets['vs_dataloader_ok'])}); gpulab / {targets['bound']} "
              f"{fmt(targets['vs_bound'], '.2f')} (>= 0.90: {verdict(targets['vs_bound_ok'])}).")
    print("Memory (MiB):")
    for mode, r in results.items():
        m = r.memory
        if r.status != "ok":
            continue
        if mode == "gpulab":
            print(f"  gpulab      RSS after pass 1 {mib(m.get('rss_after_first_pass_bytes'))} -> end "
                  f"{mib(m.get('rss_final_bytes'))} (peak {mib(m.get('rss_peak_bytes'))}); device used after pass 1 "
                  f"{mib(m.get('device_used_after_first_pass_bytes'))} -> end {mib(m.get('device_used_final_bytes'))} "
                  f"(peak {mib(m.get('device_used_peak_bytes'))})")
            continue
        line = (f"  {mode:<11} RSS start {mib(m.get('rss_start_bytes'))}, after warm-up "
                f"{mib(m.get('rss_after_warmup_bytes'))} -> end {mib(m.get('rss_end_bytes'))}")
        if "workers_rss_end_bytes" in m:
            line += (f"; workers {mib(m.get('workers_rss_after_warmup_bytes'))} -> "
                     f"{mib(m.get('workers_rss_end_bytes'))} (largest finished child "
                     f"{mib(m.get('children_max_rss_bytes'))})")
        line += (f"; device used after warm-up {mib(m.get('device_used_after_warmup_bytes'))} -> end "
                 f"{mib(m.get('device_used_end_bytes'))}")
        print(line)


def environment(args) -> dict:
    env = cp.environment(args)  # torch, python, device, command line; GPU, CUDA, cuDNN on the GPU
    import onnx  # noqa: PLC0415 - compare_pytorch imported it already
    try:
        import PIL  # noqa: PLC0415
        pil = PIL.__version__
    except ImportError:
        pil = None
    env.update(torchvision=torchvision.__version__ if torchvision else None, pillow=pil, onnx=onnx.__version__,
               gpulab=args.gpulab, commit=git_commit(), cores=args.cores, date=time.strftime("%Y-%m-%d %H:%M:%S"))
    return env


def write_json(results: Dict[str, ModeResult], args, env: dict) -> None:
    doc = {"schema": SCHEMA, "schema_version": 1, "model": args.model, "method": METHOD,
           "files": len(args.files), "inputs": args.images, "batch": args.batch, "loop": args.loop,
           "gpulab_loop": args.gpulab_loop,
           "precision": args.precision, "workers": args.workers, "decode_threads": args.decode_threads,
           "preprocess": {**asdict(args.preset_spec), "describe": args.preset_spec.describe()},
           "modes_asked": args.modes, "environment": env,
           "results": {m: asdict(r) for m, r in results.items()}, **ratios(results)}
    grid.write_json(args.json, doc)


# ---- Main ----------------------------------------------------------------------------------------


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def find_gpulab(args) -> Optional[str]:
    if args.gpulab:
        return args.gpulab
    candidates = [os.path.join(ROOT, c) for c in GPULAB_CANDIDATES]
    if args.device == "cpu":
        candidates.append(os.path.join(ROOT, "build", "ci", "gpulab"))
    found = next((c for c in candidates if os.access(c, os.X_OK)), None)
    return found or shutil.which("gpulab")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="ONNX classifier (one float NCHW image input)")
    p.add_argument("--images", nargs="+", help="image folders or files (default: the 1,000 sample photos, "
                   "../shared/datasets/imagenet-sample-256/images or .gpuhost/data/imagenet-sample-256/images)")
    p.add_argument("--limit", type=int, help="the first N images only")
    p.add_argument("--gpulab", help="the gpulab executable (default: build/release/gpulab, build/gpuhost/gpulab, "
                   "with --device cpu also build/ci/gpulab, then PATH)")
    p.add_argument("--precision", choices=("fp16", "fp32"), help="GPU precision of both sides (default fp16; "
                   "--device cpu: fp32)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--loop", type=int, default=5, help="timed passes over the files, after one warm-up pass")
    p.add_argument("--gpulab-loop", type=int, help="gpulab's timed passes (default --loop): at 20k+ img/s five "
                   "passes over 1,000 files last a quarter of a second, too short a window to time")
    p.add_argument("--workers", type=int, help="DataLoader workers (default: the usable cores)")
    p.add_argument("--gpulab-timing-cache", help="gpulab's timing cache file (its plan build times tactics; the "
                   "file keeps them for the next run)")
    p.add_argument("--decode-threads", type=int, help="gpulab's decode threads (default: the usable cores)")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ",".join(MODES))
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu: eager FP32 PyTorch and `gpulab pipeline --device cpu` (checks the script)")
    p.add_argument("--preset", default="auto", choices=("auto", "torchvision", "tf-slim"),
                   help="preprocessing of both sides (auto: the model's metadata, as gpulab reads it)")
    p.add_argument("--gpulab-preprocess", default="gpu", choices=("auto", "gpu", "cpu"),
                   help="gpulab pipeline --preprocess on the GPU (auto: gpulab's default)")
    p.add_argument("--timeout-s", type=float, default=900,
                   help="gpulab's run, and the DataLoader's wait for one batch")
    p.add_argument("--json", help="write the results, the environment and the errors as JSON")
    args = p.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.modes if m not in MODES]
    if bad or not args.modes:
        p.error(f"--modes: {bad or 'none'} not in {list(MODES)}")
    if args.gpulab_loop is None:
        args.gpulab_loop = args.loop
    if args.batch < 1 or args.loop < 1 or args.gpulab_loop < 1 or (args.limit is not None and args.limit < 1):
        p.error("--batch, --loop and --limit must be at least 1")
    args.cores = usable_cores()
    args.workers = args.cores if args.workers is None else args.workers
    args.decode_threads = args.cores if args.decode_threads is None else args.decode_threads
    if args.workers < 0 or args.decode_threads < 1:
        p.error("--workers must be at least 0 and --decode-threads at least 1")
    if args.images is None:
        args.images = [next((d for d in DEFAULT_IMAGES if os.path.isdir(d)), None)]
        if args.images[0] is None:
            p.error("no default images (" + ", ".join(DEFAULT_IMAGES) + "); pass --images")
    if args.device == "cpu" and args.precision == "fp16":
        p.error("--device cpu runs FP32 on both sides")
    args.precision = args.precision or ("fp16" if args.device == "cuda" else "fp32")
    args.gpulab = find_gpulab(args) if "gpulab" in args.modes else args.gpulab
    args.gpulab_top1 = {}  # file -> gpulab's top-1 class, once gpulab ran
    return args


def prepare(args) -> Optional[str]:
    """args.files, args.onnx_model and args.preset_spec; the reason when they cannot be had."""
    try:
        args.files = list_files(args.images)[:args.limit]
    except OSError as e:
        return str(e)
    if not args.files:
        return f"no images in {' '.join(args.images)}"
    try:
        import onnx  # noqa: PLC0415
        args.onnx_model = onnx.load(args.model)
        c, size, width = cp.OnnxModule(args.onnx_model).input_chw
        if (c, size) != (3, width):
            raise ValueError(f"the input is {c}x{size}x{width}; a square RGB image input is needed")
        args.preset_spec = resolve_preset(args.onnx_model, args.preset, size)
    except Exception as e:  # noqa: BLE001 - unreadable file, unsupported op, metadata gpulab refuses
        return f"'{args.model}': {cp.first_line(e)}"
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"compare_pipeline: --device cuda, but torch {torch.__version__} sees no CUDA GPU. Use --device cpu "
              "to check the script on the CPU.", file=sys.stderr)
        return 2
    why = prepare(args)
    if why:
        print(f"compare_pipeline: {why}", file=sys.stderr)
        return 2

    env: dict = {}
    results: Dict[str, ModeResult] = {}
    dev = torch.device(args.device)
    model: Optional[TorchModel] = None
    # gpulab first, before this process touches the GPU (the environment's GPU name included), so that
    # its device-memory figures hold no PyTorch context; the PyTorch modes share one model and graph.
    for mode in [m for m in MODES if m in args.modes]:
        if mode != "gpulab" and not env:
            env.update(environment(args), GPULAB_GIT_COMMIT=os.environ.get("GPULAB_GIT_COMMIT"))
        cp.progress(mode)
        r = results[mode] = ModeResult(mode)  # what a failing mode measured before its error stays
        try:
            if mode == "gpulab":
                run_gpulab(args, r)
            else:
                decode = gpu_decoder(args) if mode == "nvjpeg" else None  # n/a before building the model
                if mode == "dataloader" and torchvision is None:
                    raise NotAvailable(TORCHVISION_MISSING)
                if model is None:
                    model = TorchModel(args, dev)
                    env["torch_model_setup_s"] = model.setup_s
                if decode is None:
                    run_dataloader(args, model, r)
                else:
                    run_nvjpeg(args, model, decode, r)
            r.status = "ok"
        except NotAvailable as e:
            r.status, r.error = "n/a", str(e)
        except Exception as e:  # noqa: BLE001 - recorded, the other modes still run
            r.status, r.error = "failed", cp.first_line(e)
        print(f"... done {mode}: " + (f"{r.ips:.1f} img/s" if r.ips is not None else f"{r.status} ({r.error})"),
              file=sys.stderr, flush=True)
        if args.json and env:
            write_json(results, args, env)  # after every mode, so that a run cut short keeps what it measured
    if not env:  # gpulab alone
        env.update(environment(args), GPULAB_GIT_COMMIT=os.environ.get("GPULAB_GIT_COMMIT"))
        if args.json:
            write_json(results, args, env)
    print_table(results, args)
    failed = [m for m, r in results.items() if r.status == "failed"]
    if failed:
        print("compare_pipeline: failed: " + "; ".join(f"{m}: {results[m].error}" for m in failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
