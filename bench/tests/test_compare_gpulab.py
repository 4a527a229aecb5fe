"""compare_pytorch.py's check of gpulab's logits, on the CPU with a stand-in gpulab binary
(fake_gpulab.py). Needs torch, onnx and numpy (Debian's python3-torch has them); skipped without."""
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
HAVE_TORCH = all(importlib.util.find_spec(m) for m in ("torch", "onnx", "numpy"))


@unittest.skipUnless(HAVE_TORCH, "needs torch, onnx and numpy (Debian: python3-torch, python3-onnx)")
class CompareChecksGpulab(unittest.TestCase):
    def compare(self, scale):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "compare.json")
            # The stand-in runs with this interpreter (the one that has torch), whatever is on PATH.
            gpulab = os.path.join(tmp, "gpulab")
            with open(gpulab, "w") as f:
                f.write(f'#!/bin/sh\nexec "{sys.executable}" "{os.path.join(HERE, "fake_gpulab.py")}" "$@"\n')
            os.chmod(gpulab, 0o755)
            env = dict(os.environ, FAKE_GPULAB_SCALE=str(scale))
            proc = subprocess.run(
                [sys.executable, os.path.join(BENCH, "compare_pytorch.py"), MODEL, "--device", "cpu",
                 "--modes", "eager,gpulab", "--batch", "1,2", "--precision", "fp32", "--iters", "1",
                 "--warmup", "0", "--check-batch", "2", "--gpulab", gpulab,
                 "--json", out],
                capture_output=True, text=True, env=env, timeout=300)
            with open(out) as f:
                return proc, json.load(f)

    def test_matching_logits_pass(self):
        proc, doc = self.compare(1.0)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for row in doc["rows"]:
            self.assertTrue(row["gpulab_agreement_ok"], row)
            self.assertLess(row["cells"]["gpulab"]["rel_error"], 1e-5)
        self.assertIn("gpulab err", proc.stdout)

    def test_logits_off_by_ten_percent_fail_the_run(self):
        proc, doc = self.compare(1.1)
        self.assertEqual(proc.returncode, 1)
        for row in doc["rows"]:
            self.assertFalse(row["gpulab_agreement_ok"], row)
            self.assertAlmostEqual(row["cells"]["gpulab"]["rel_error"], 0.1, places=4)
        self.assertIn("gpulab's output disagrees", proc.stderr)
        self.assertIn(" !", proc.stdout)


if __name__ == "__main__":
    unittest.main()
