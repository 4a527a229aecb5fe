"""compare_pipeline.py on the CPU (--device cpu): the DataLoader feeding eager PyTorch over four of the
bundled photos, with a stand-in `gpulab pipeline` written by the test (a canned gpulab.pipeline JSON
whose predictions are all class 7), then a stand-in that fails. Also runs the nvJPEG mode on the CPU
through a stand-in for the batched GPU decoder, and checks its torch-op preprocessing on one photo
against the references of gpulab's presets. Needs torch, torchvision, PIL, onnx and numpy (Debian's
/usr/bin/python3 has them); skipped without."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
MODEL = os.path.join(ROOT, "models", "mobilenet_v2_1.0_224.onnx")
PHOTOS = [os.path.join(ROOT, "data", "images", n) for n in ("hot_dog.jpg", "owl.jpg", "parrot.jpg", "cat.bmp")]
NEEDED = ("torch", "torchvision", "PIL", "onnx", "numpy")
MISSING = [m for m in NEEDED if importlib.util.find_spec(m) is None]

# `gpulab pipeline --json` as the CPU build prints it (trimmed), with the files, passes and batch of the
# command line; FAKE_PIPELINE_FAIL=1 makes it fail as gpulab does on a missing model (exit code 3).
STAND_IN = r'''
import json, os, sys
argv = sys.argv[1:]
if os.environ.get("FAKE_PIPELINE_FAIL"):
    print("gpulab: error: 'nope.onnx': no such file. Check the path.", file=sys.stderr)
    sys.exit(3)
assert argv[0] == "pipeline" and "--json" in argv, argv
def opt(name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default
flags_with_values = {"--model", "--batch", "--loop", "--decode-threads", "--device", "--precision", "--preprocess",
                     "--preset"}
files, i = [], 1
while i < len(argv):
    if argv[i] in flags_with_values:
        i += 2
    else:
        if not argv[i].startswith("--"):
            files.append(argv[i])
        i += 1
loop, batch = int(opt("--loop")), int(opt("--batch"))
n = len(files)
stages = [{"name": "read", "threads": 1, "items": n * loop, "images": n * loop, "busy_s": 0.001, "busy_share": 0.01,
           "cpu_s": 0.001, "capacity_ips": 4000.0, "wait_input_s": 0.0, "wait_output_s": 0.0},
          {"name": "decode", "threads": int(opt("--decode-threads")), "items": n * loop, "images": n * loop,
           "busy_s": 0.02, "busy_share": 0.02, "cpu_s": 0.02, "capacity_ips": 400.0, "wait_input_s": 0.0,
           "wait_output_s": 0.5},
          {"name": "infer", "threads": 1, "items": n * loop // batch, "images": n * loop, "busy_s": 1.0,
           "busy_share": 0.99, "cpu_s": 1.0, "capacity_ips": 8.0, "wait_input_s": 0.0, "wait_output_s": 0.0}]
print(json.dumps({
    "schema": "gpulab.pipeline", "schema_version": 1, "model": opt("--model"), "backend": "cpu (reference backend)",
    "preprocess": "cpu", "preprocess_spec": "tf-slim: central crop 0.875, bilinear resize to 224x224 (TF1, no "
    "antialias), mean (0.502, 0.502, 0.502) std (0.502, 0.502, 0.502) of pixel/255", "decoder": "turbojpeg",
    "options": {"batch": batch, "decode_threads": int(opt("--decode-threads")), "queue_depth": 4, "loop": loop,
                "top_k": 5, "dct_scaling": True, "file_cache_bytes": 2147483648},
    "files": n, "passes": loop, "images": n * loop, "failed_images": 0, "wall_s": loop * n / 8.0,
    "first_pass_s": n / 8.0, "throughput_ips": 8.0, "warm_throughput_ips": 8.0, "files_cached_in_ram": True,
    "cached_bytes": 1000, "dct_scaled_images": 0, "decode_split": {"decode_s": 0.015, "stage_s": 0.005},
    "stages": stages, "limiting_stage": {"name": "infer", "capacity_ips": 8.0, "next_name": "decode", "margin": 50.0},
    "compute_only_ips": 8.0, "compute_only_source": "infer stage", "end_to_end_vs_compute": 1.0, "h2d_gb_s": None,
    "gpu_busy_share": None,
    "memory": {"rss_after_first_pass_bytes": 50000000, "rss_final_bytes": 50000000, "rss_peak_bytes": 60000000,
               "rss_growth_fraction": 0.0, "heap_after_first_pass_bytes": 20000000,
               "heap_before_last_pass_bytes": 20000000, "device_used_after_first_pass_bytes": None,
               "device_used_final_bytes": None, "device_used_peak_bytes": None},
    "errors": [],
    "predictions": [{"file": f, "top": [{"index": 7, "score": 1.0, "probability": 0.5}]} for f in files],
    "environment": {"gpulab_version": "0.1.0", "gpulab_commit": "stand-in", "command_line": " ".join(sys.argv),
                    "hardware_threads": 2}}, indent=2))
'''


@unittest.skipIf(MISSING, f"needs {', '.join(MISSING)} (Debian: /usr/bin/python3 with python3-torch, "
                 "python3-torchvision, python3-onnx)")
class ComparePipelineOnCpu(unittest.TestCase):
    def run_script(self, tmp, *extra, fail=False):
        gpulab = os.path.join(tmp, "gpulab")
        with open(os.path.join(tmp, "stand_in.py"), "w") as f:
            f.write(STAND_IN)
        with open(gpulab, "w") as f:
            f.write(f'#!/bin/sh\nexec "{sys.executable}" "{os.path.join(tmp, "stand_in.py")}" "$@"\n')
        os.chmod(gpulab, 0o755)
        out = os.path.join(tmp, "pipeline.json")
        env = dict(os.environ, GPULAB_GIT_COMMIT="abc1234")
        env.pop("FAKE_PIPELINE_FAIL", None)
        if fail:
            env["FAKE_PIPELINE_FAIL"] = "1"
        proc = subprocess.run(
            [sys.executable, os.path.join(BENCH, "compare_pipeline.py"), MODEL, "--device", "cpu",
             "--images", *PHOTOS, "--batch", "2", "--loop", "1", "--workers", "1", "--decode-threads", "1",
             "--gpulab", gpulab, "--json", out, *extra],
            capture_output=True, text=True, env=env, timeout=240)
        with open(out) as f:
            return proc, json.load(f)

    def test_all_modes_on_the_cpu(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc, doc = self.run_script(tmp)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(doc["schema"], "gpulab.compare_pipeline")
        self.assertEqual(doc["schema_version"], 1)
        self.assertEqual((doc["files"], doc["batch"], doc["loop"], doc["precision"]), (4, 2, 1, "fp32"))
        self.assertEqual(doc["environment"]["GPULAB_GIT_COMMIT"], "abc1234")
        self.assertIn("compare_pipeline.py", doc["environment"]["command_line"])
        # The bundled MobileNetV2 names TF-Slim's preprocessing in its metadata, as gpulab reads it.
        self.assertEqual(doc["preprocess"]["name"], "tf-slim")
        self.assertAlmostEqual(doc["preprocess"]["mean"][0], 128 / 255, places=6)
        results = doc["results"]
        self.assertEqual(list(results), ["gpulab", "dataloader", "nvjpeg"])

        g = results["gpulab"]
        self.assertEqual(g["status"], "ok", g)
        self.assertEqual(g["ips"], 8.0)
        self.assertEqual(g["limiting"], "infer")
        self.assertEqual(g["stages"], {"read": 4000.0, "decode": 400.0, "infer": 8.0})
        self.assertEqual(g["memory"]["rss_peak_bytes"], 60000000)
        self.assertNotIn("predictions", g["details"]["pipeline"])
        # --loop 1 timed pass after a warm-up one: gpulab runs 2 passes; the files go last.
        cmd = g["command"]
        self.assertEqual(cmd[cmd.index("--loop") + 1], "2")
        self.assertEqual(cmd[cmd.index("--device") + 1], "cpu")
        self.assertEqual(cmd[-1], "<4 files>")
        self.assertEqual(g["details"]["pipeline"]["files"], 4)

        d = results["dataloader"]
        self.assertEqual(d["status"], "ok", d)
        self.assertGreater(d["ips"], 0)
        self.assertEqual(d["images"], 4)
        self.assertGreater(d["compute_only_ips"], 0)
        self.assertEqual(set(d["stages"]), {"loader", "compute"})
        self.assertIn(d["limiting"], d["stages"])
        self.assertEqual(d["details"]["num_workers"], 1)
        self.assertIn("CentralCrop(0.875)", d["details"]["transform"])
        self.assertEqual(d["details"]["top1_compared"], 4)  # against the stand-in's made-up class 7
        for key in ("rss_start_bytes", "rss_after_warmup_bytes", "rss_end_bytes", "workers_rss_end_bytes",
                    "children_max_rss_bytes"):
            self.assertGreater(d["memory"][key], 0, key)
        self.assertIsNone(d["memory"]["device_used_end_bytes"])

        n = results["nvjpeg"]
        self.assertEqual(n["status"], "n/a")
        self.assertIn("CUDA", n["error"])
        self.assertAlmostEqual(doc["vs_dataloader"]["gpulab"], 8.0 / d["ips"])
        self.assertIn("dataloader ok", proc.stdout)
        self.assertIn("nvjpeg     n/a", proc.stdout)

    def test_failing_gpulab_is_recorded_and_exits_1(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc, doc = self.run_script(tmp, "--modes", "gpulab,dataloader", fail=True)
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        g = doc["results"]["gpulab"]
        self.assertEqual(g["status"], "failed")
        self.assertIn("exited with 3", g["error"])
        self.assertIn("no such file", g["error"])
        self.assertEqual(g["command"][1:3], ["pipeline", "--json"])  # what ran is kept with the failure
        self.assertEqual(doc["results"]["dataloader"]["status"], "ok")  # the other mode still ran
        self.assertNotIn("nvjpeg", doc["results"])
        self.assertIn("compare_pipeline: failed: gpulab", proc.stderr)


@unittest.skipIf(MISSING, f"needs {', '.join(MISSING)}")
class TensorPreprocess(unittest.TestCase):
    """The nvJPEG mode's torch-op preprocessing, on the CPU, against the references gpulab's own
    presets are tested with (tests/fixtures/make_image_goldens.py): torchvision's PIL transform,
    and the numpy TF-Slim (TF1 resize) one."""

    def test_presets(self):
        sys.path.insert(0, BENCH)
        sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
        import compare_pipeline as cpl  # noqa: PLC0415
        import make_image_goldens as goldens  # noqa: PLC0415
        import torch  # noqa: PLC0415
        from PIL import Image  # noqa: PLC0415
        import torchvision.transforms.functional as TF  # noqa: PLC0415

        with Image.open(PHOTOS[2]) as img:  # parrot.jpg, 512x929: a portrait photo
            rgb = img.convert("RGB")
        pixels = TF.pil_to_tensor(rgb)
        out = torch.empty(1, 3, 224, 224)

        torchvision = cpl.Preset("torchvision", 224, cpl.IMAGENET_MEAN, cpl.IMAGENET_STD)
        got = cpl.tensor_preprocess([pixels], torchvision, out)[0]
        want = torch.from_numpy(goldens.torchvision_tensor(rgb))
        self.assertTrue(torch.equal(want, cpl.pil_transform(torchvision)(rgb)))  # the DataLoader's transform
        # PIL rounds its resize to uint8; torch's antialiased bilinear keeps floats.
        self.assertLess((got - want).abs().mean().item(), 0.01)

        tf_slim = cpl.Preset("tf-slim", 224, [0.5] * 3, [0.5] * 3)
        got = cpl.tensor_preprocess([pixels], tf_slim, out)[0]
        want = torch.from_numpy(goldens.tfslim_tensor(rgb))
        self.assertLess((got - want).abs().max().item(), 1e-4)
        # The DataLoader's PIL resize antialiases (TF1's does not): close on average only.
        self.assertLess((cpl.pil_transform(tf_slim)(rgb) - want).abs().mean().item(), 0.1)


@unittest.skipIf(MISSING, f"needs {', '.join(MISSING)}")
class NvjpegModeOnCpu(unittest.TestCase):
    """run_nvjpeg's batching, non-JPEG and refused-file fallbacks, stages and results, on the CPU: the
    batched GPU decoder is stood in for by torchvision's CPU decode_jpeg over the list, which refuses
    one file as nvJPEG may."""

    def test_run_nvjpeg(self):
        sys.path.insert(0, BENCH)
        import compare_pipeline as cpl  # noqa: PLC0415
        import torchvision.io  # noqa: PLC0415

        calls = []

        def decode(blobs, mode, device):
            self.assertIsInstance(blobs, list)
            self.assertEqual(device, "cpu")
            calls.append(len(blobs))
            if any(b.numel() == refused_size for b in blobs):
                raise RuntimeError("nvjpeg: unsupported")
            return [torchvision.io.decode_jpeg(b, mode=mode) for b in blobs]

        args = cpl.parse_args([MODEL, "--device", "cpu", "--images", *PHOTOS, "--batch", "3", "--loop", "2",
                               "--workers", "0"])
        self.assertIsNone(cpl.prepare(args))
        refused_size = os.path.getsize(PHOTOS[1])  # owl.jpg
        model = cpl.TorchModel(args, cpl.torch.device("cpu"))
        r = cpl.ModeResult("nvjpeg")
        cpl.run_nvjpeg(args, model, decode, r)
        self.assertEqual(r.images, 8)  # 2 timed passes over 4 files, in batches of 3 and 1
        self.assertGreater(r.ips, 0)
        self.assertEqual(set(r.stages), {"decode", "compute"})
        self.assertIn("1 of 4 files are not JPEGs", r.details["note"])  # cat.bmp
        self.assertIn("nvJPEG refused 1 files", r.details["note"])
        self.assertEqual(len(r.details["nvjpeg_refused"]), 1)
        self.assertIn("owl.jpg", r.details["nvjpeg_refused"][0])
        self.assertNotIn("wait_input_s", r.details)
        self.assertGreater(r.memory["rss_end_bytes"], 0)
        self.assertIn(1, calls)  # the refused batch was retried one file at a time


if __name__ == "__main__":
    unittest.main()
