"""bench/grid.py without a GPU: cells run through fake_compare.py (CTest: bench_grid_test)."""
import ast
import glob
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import grid  # noqa: E402

FAKE = os.path.join(HERE, "fake_compare.py")


def wait_gone(pid: int) -> bool:
    """Whether process `pid` ends within 5 s (a kill takes a moment to be delivered)."""
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


class GridTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.results = os.path.join(self.tmp.name, "results")
        self.model = os.path.join(self.tmp.name, "m.onnx")
        open(self.model, "w").close()

    def tearDown(self):
        self.tmp.cleanup()

    def run_grid(self, *extra, batches="1,8", modes="eager,graph,gpulab"):
        argv = ["run", "--model", f"m={self.model}", "--precision", "fp16,bf16", "--batch", batches,
                "--modes", modes, "--results", self.results, "--compare-script", FAKE, "--label", "t1",
                *extra]
        out = io.StringIO()
        with redirect_stdout(out):
            rc = grid.main(argv)
        return rc, out.getvalue()

    def cell(self, name):
        with open(os.path.join(self.results, name + ".json")) as f:
            return json.load(f)

    def test_every_cell_runs_once_and_a_second_run_skips_them(self):
        rc, out = self.run_grid("--", "--iters", "7")
        self.assertEqual(rc, 0)
        self.assertIn("4 cells, 0 already done, 4 to run", out)
        doc = self.cell("m_bf16_b8")
        self.assertEqual(doc["status"], "ok")
        self.assertEqual(doc["modes"], ["eager", "graph", "gpulab"])
        self.assertEqual(doc["label"], "t1")
        row = doc["compare"]["rows"][0]
        self.assertEqual((row["batch"], row["precision"]), (8, "bf16"))
        self.assertAlmostEqual(row["cells"]["gpulab"]["ms"], 1.0)
        self.assertEqual(doc["compare"]["environment"]["iters"], 7)  # arguments after -- reach it
        self.assertEqual(sorted(os.path.basename(p) for p in glob.glob(os.path.join(self.results, "*.json"))),
                         ["m_bf16_b1.json", "m_bf16_b8.json", "m_fp16_b1.json", "m_fp16_b8.json"])
        rc, out = self.run_grid()
        self.assertIn("4 cells, 4 already done, 0 to run", out)

    def test_a_cell_without_a_column_asked_for_runs_again_whole(self):
        self.run_grid()
        rc, out = self.run_grid(modes="eager,graph,compile,gpulab")
        self.assertIn("0 already done, 4 to run", out)
        cells = self.cell("m_fp16_b1")["compare"]["rows"][0]["cells"]
        self.assertEqual(sorted(cells), ["compile", "eager", "gpulab", "graph"])

    def test_a_timeout_ends_the_run_and_its_children_and_says_where_it_was(self):
        pid_file = os.path.join(self.tmp.name, "child.pid")
        os.environ["FAKE_CHILD_PID_FILE"] = pid_file
        try:
            start = time.monotonic()
            rc, out = self.run_grid("--cell-timeout-s", "3", "--min-start-s", "0", batches="999")
            self.assertLess(time.monotonic() - start, 30)
        finally:
            del os.environ["FAKE_CHILD_PID_FILE"]
        self.assertEqual(rc, 0)  # a timeout is a result, not a failure of the grid
        doc = self.cell("m_fp16_b999")
        self.assertEqual(doc["status"], "timeout")
        self.assertIn("gpulab: plan build", doc["last_progress"])
        with open(pid_file) as f:
            child = int(f.read())
        self.assertTrue(wait_gone(child), "the timed-out run's child process is still running")
        # A timed-out cell is not done: the next run tries it again, given more time than it had,
        # and passes over it otherwise.
        self.assertFalse(grid.is_done(doc, ["eager"]))
        self.assertIn("timeout after", grid.table_row("fp16", 999, doc))
        rc, out = self.run_grid("--cell-timeout-s", "3", "--min-start-s", "0", batches="999")
        self.assertEqual(rc, 0)
        self.assertIn("m_fp16_b999 not retried: it ran out of 3 s before and would get 3 s", out)
        self.assertIn("2 not retried", out)
        self.assertEqual(self.cell("m_fp16_b999")["seconds"], doc["seconds"])  # the file is left as it was

    def test_a_column_without_a_time_is_na_and_its_cell_runs_again(self):
        rc, out = self.run_grid(batches="7")
        self.assertEqual(rc, 0)
        doc = self.cell("m_fp16_b7")
        self.assertEqual(doc["status"], "ok")
        self.assertFalse(grid.is_done(doc, ["eager", "graph", "gpulab"]))
        self.assertTrue(grid.is_done(doc, ["eager", "graph"]))
        self.assertEqual(grid.table_row("fp16", 7, doc), "| FP16 | 7 | 3.500 | 2.625 | – | n/a |  | – | – | t1 |")
        rc, out = self.run_grid(batches="7")
        self.assertIn("0 already done, 2 to run", out)

    def test_a_signal_to_the_grid_ends_the_run_in_flight(self):
        pid_file = os.path.join(self.tmp.name, "child.pid")
        env = dict(os.environ, FAKE_CHILD_PID_FILE=pid_file)
        grid_py = os.path.join(os.path.dirname(HERE), "grid.py")
        proc = subprocess.Popen([sys.executable, grid_py, "run", "--model", f"m={self.model}", "--precision", "fp16",
                                 "--batch", "999", "--results", self.results, "--compare-script", FAKE],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for _ in range(200):
            if os.path.exists(pid_file) and os.path.getsize(pid_file) > 0:
                break
            time.sleep(0.05)
        else:
            proc.kill()
            self.fail("the stand-in never started")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 128 + signal.SIGTERM, out)
        self.assertIn("stopped by signal", out)
        with open(pid_file) as f:
            child = int(f.read())
        self.assertTrue(wait_gone(child), "the run in flight's child process is still running")
        self.assertFalse(os.path.exists(os.path.join(self.results, "m_fp16_b999.json")))

    def test_cells_spread_over_the_gpus_given(self):
        self.run_grid("--gpus", "0,1")
        seen = {self.cell(f"m_{p}_b{b}")["compare"]["environment"]["cuda_visible_devices"]
                for p in ("fp16", "bf16") for b in (1, 8)}
        self.assertTrue(seen <= {"0", "1"})
        self.assertEqual(len(seen), 2)

    def test_no_cell_starts_without_budget_left(self):
        rc, out = self.run_grid("--budget-s", "10", "--min-start-s", "60")
        self.assertIn("4 not started", out)
        self.assertEqual(glob.glob(os.path.join(self.results, "*.json")), [])

    def test_the_table_shows_each_cell_once_with_the_ratio_to_pytorchs_fastest(self):
        self.run_grid(modes="eager,graph,compile,gpulab")
        with open(os.path.join(self.results, "notes.json"), "w") as f:
            f.write("not json")  # another file in the folder is passed over
        text = grid.table(grid.load_results(self.results), "m")
        lines = text.splitlines()
        self.assertEqual(len(lines), 2 + 4)
        # FP16 before BF16; batch 8: eager 4, graph 3, compile 2, gpulab 1 ms.
        self.assertEqual(lines[3],
                         "| FP16 | 8 | 4.000 | 3.000 | 2.000 | **1.000** | 8.0k | 2.00x (compile) | 2.5e-04 | t1 |")
        self.assertTrue(lines[4].startswith("| BF16 | 1 |"))
        for line in lines:
            self.assertEqual(line.count("|"), 11, line)
        self.assertIn("not measured", grid.table_row("fp32", 1, None))

    def test_the_precisions_are_compare_pytorchs(self):
        # grid.py (and torchvision_bench.py through it) check precision names without importing torch:
        # the list must stay the one compare_pytorch.py runs, read here from its source.
        with open(os.path.join(os.path.dirname(HERE), "compare_pytorch.py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        found = [ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "PRECISIONS" for t in node.targets)]
        self.assertEqual(found, [grid.PRECISIONS])

    def test_bad_arguments_are_refused(self):
        for argv in (["run", "--model", f"m={self.model}", "--precision", "fp64", "--results", "r"],
                     ["run", "--model", f"m={self.model}", "--batch", "0", "--results", "r"],
                     ["run", "--model", "no-equals-sign", "--results", "r"],
                     ["run", "--model", "m=/no/such.onnx", "--results", "r"],
                     ["run", "--model", f"m={self.model}", "--results", self.model]):  # a file, not a folder
            with self.assertRaises(SystemExit, msg=argv), redirect_stdout(io.StringIO()), \
                    redirect_stderr(io.StringIO()):
                grid.parse_args(argv)


if __name__ == "__main__":
    unittest.main()
