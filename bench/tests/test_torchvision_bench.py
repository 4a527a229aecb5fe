"""bench/torchvision_bench.py's torch-free parts on made-up results: --table, resume, the results file,
argument checks (CTest: bench_torchvision_bench_test). torch is never imported: where the script asks
torch only for a device's kind (is_done), a stand-in answers."""
import io
import json
import os
import sys
import tempfile
import types
import unittest
from contextlib import redirect_stderr, redirect_stdout
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import torchvision_bench as tb  # noqa: E402

# torch.device(spec).type for "cpu", "cuda" and "cuda:N", and a torch without a GPU.
FAKE_TORCH = types.SimpleNamespace(device=lambda spec: types.SimpleNamespace(type=spec.split(":")[0]),
                                   cuda=types.SimpleNamespace(is_available=lambda: False), __version__="stand-in")


def cell(precision, batch, ms, torch_ms, timed=True):
    ratio = torch_ms / ms if ms and torch_ms else None
    return {"precision": precision, "batch": batch, "timed": timed, "ms": ms, "torch_ms": torch_ms, "ratio": ratio}


def entry(model, status="ok", reason="", device="cuda", **extra):
    """A model's result as bench_model() writes it."""
    e = {"model": model, "status": status, "reason": reason, "device": device, "gpulab": "build/gpuhost/gpulab",
         "gpulab_version": "gpulab 0.9.0", "commit": "0123456789abcdef0123", "check_images": 4, "errors": {},
         "errors_ok": {}, "torch_errors": {}, "cells": [], "profiles": [], "failures": [], "slower": []}
    e.update(extra)
    return e


def results_doc(*models) -> dict:
    return {"schema": tb.SCHEMA, "schema_version": 1, "method": tb.METHOD, "tolerance": {"fp32": 1e-4, "fp16": 1e-2},
            "environment": {"gpu": "NVIDIA H100 80GB HBM3", "driver": "550.54.15", "torch": "2.11.0",
                            "torchvision": "0.26.0", "gpulab_version": "gpulab 0.9.0",
                            "commit": "0123456789abcdef0123-dirty", "device": "cuda"},
            "models": list(models)}


RESNET18 = entry("resnet18", errors={"fp32": 3.2e-6, "fp16": 4.1e-3}, errors_ok={"fp32": True, "fp16": True},
                 cells=[cell("fp16", 1, 0.25, 0.5), cell("fp16", 256, 12.345, 24.69), cell("fp32", 1, 0.4, 0.6),
                        cell("fp32", 256, 150.0, 180.0)])
MOBILENET = entry("mobilenet_v2", errors={"fp32": 2.5e-3, "fp16": 4.0e-2}, errors_ok={"fp32": False, "fp16": False},
                  cells=[cell("fp16", 1, 0.5, 0.4), cell("fp16", 256, 8.0, 10.0)], slower=["fp16 b1"],
                  profiles=[{"precision": "fp16", "batch": 1, "json": "tv-profiles/mobilenet_v2_fp16_b1.profile.json",
                             "failure": None}])
SWIN = entry("swin_t", status="unsupported", reason="op Einsum | not lowered\nby the GPU engine",
             inspect={"supported": False, "reason": "op Einsum | not lowered\nby the GPU engine"})
VIT = entry("vit_b_16", status="failed", reason="gpulab fp16 b256: out of memory",
            errors={"fp32": 5e-6}, errors_ok={"fp32": True}, cells=[cell("fp16", 1, 0.9, 1.8), cell("fp16", 256, None, 30.0)],
            failures=["gpulab fp16 b256: out of memory"])


def row_of(text: str, model: str) -> list:
    """The cells of `model`'s table row."""
    line = next(l for l in text.splitlines() if l.startswith(f"| {model} |"))
    return [c.strip() for c in line.strip().strip("|").split(" | ")]


class TableTest(unittest.TestCase):
    def test_one_set_of_columns_per_batch_and_one_row_per_model(self):
        text = tb.table(results_doc(RESNET18, MOBILENET, SWIN, VIT))
        lines = text.splitlines()
        self.assertEqual(lines[0], "| model | FP32 err | FP16 err | b1 gpulab ms | b1 torch graph ms | b1 ratio | "
                                   "b256 gpulab ms | b256 torch graph ms | b256 ratio | notes |")
        self.assertEqual(lines[1], "|" + "---|" * 10)
        table_lines = [l for l in lines if l.startswith("|")]
        self.assertEqual([l.split(" | ")[0] for l in table_lines[2:]],
                         ["| resnet18", "| mobilenet_v2", "| swin_t", "| vit_b_16"])  # the file's order
        for line in table_lines:
            self.assertEqual(line.count("|") - line.count("\\|"), 11, line)
        # FP16 is timed, so the table shows FP16's times; ms below 100 with 3 decimals; ratio = torch / gpulab.
        self.assertEqual(row_of(text, "resnet18"),
                         ["resnet18", "3.2e-06", "4.1e-03", "0.250", "0.500", "2.00x", "12.345", "24.690", "2.00x", ""])

    def test_the_batches_are_those_timed_in_the_tables_precision(self):
        doc = results_doc(entry("alexnet", cells=[cell("fp16", 8, 1.0, 1.5), cell("fp16", 64, 4.0, 5.0),
                                                  cell("fp16", 4, 2.0, None, timed=False)]))
        head = tb.table(doc).splitlines()[0]
        self.assertIn("| b8 gpulab ms | b8 torch graph ms | b8 ratio | b64 gpulab ms |", head)
        self.assertNotIn("b4 ", head)  # an untimed cell (error only) has no columns
        self.assertEqual(head.count("gpulab ms"), 2)

    def test_the_tables_precision_is_fp16_when_timed_else_the_one_asked_for_or_timed(self):
        doc = results_doc(RESNET18)
        self.assertIn("Times: FP16,", tb.table(doc))
        text = tb.table(doc, "fp32")
        self.assertIn("Times: FP32,", text)
        # 100 ms and more with one decimal.
        self.assertEqual(row_of(text, "resnet18")[3:9], ["0.400", "0.600", "1.50x", "150.0", "180.0", "1.20x"])
        only_fp32 = results_doc(entry("resnet18", cells=[cell("fp32", 1, 0.4, 0.6)]))
        self.assertEqual(tb.table_precision(only_fp32, None), "fp32")
        self.assertEqual(tb.table_precision(results_doc(), None), "fp16")

    def test_an_error_above_its_tolerance_is_marked_and_noted(self):
        text = tb.table(results_doc(RESNET18, MOBILENET))
        row = row_of(text, "mobilenet_v2")
        self.assertEqual(row[1:3], ["2.5e-03 !", "4.0e-02 !"])
        self.assertIn("gpulab's logits off the FP32/FP16 tolerance", row[-1])
        self.assertEqual(row_of(text, "resnet18")[1:3], ["3.2e-06", "4.1e-03"])  # within: no mark
        self.assertIn("'!' above 0.0001 (FP32) or 0.01 (FP16)", text)
        # Only the precision off its tolerance is marked.
        one_off = entry("m", errors={"fp32": 1e-6, "fp16": 2e-2}, errors_ok={"fp32": True, "fp16": False})
        self.assertEqual(tb.fmt_err(one_off, "fp32"), "1.0e-06")
        self.assertEqual(tb.fmt_err(one_off, "fp16"), "2.0e-02 !")
        self.assertEqual(tb.fmt_err(one_off, "bf16"), "–")
        self.assertIn("off the FP16 tolerance", tb.notes(one_off))
        one_off["torch_errors"] = {"fp16": 2.5e-2}
        self.assertIn("off the FP16 tolerance (PyTorch's own: FP16 2.5e-02)", tb.notes(one_off))
        self.assertNotIn("FP32", tb.notes(one_off))

    def test_slower_than_pytorch_is_bold_and_noted_with_its_profile(self):
        row = row_of(tb.table(results_doc(MOBILENET)), "mobilenet_v2")
        self.assertEqual(row[3:9], ["0.500", "0.400", "**0.80x**", "8.000", "10.000", "1.25x"])
        self.assertIn("slower than PyTorch at fp16 b1", row[-1])
        self.assertIn("profile fp16 b1: `tv-profiles/mobilenet_v2_fp16_b1.profile.json`", row[-1])
        self.assertEqual(tb.fmt_ratio(1.0), "1.00x")  # as fast: not slower
        self.assertEqual(tb.fmt_ratio(0.999), "**1.00x**")
        self.assertEqual(tb.fmt_ratio(None), "–")
        # A profile that failed (no JSON kept) is not listed.
        failed_profile = dict(MOBILENET, profiles=[{"precision": "fp16", "batch": 1, "json": None,
                                                    "failure": "exit code 1"}])
        self.assertNotIn("profile", tb.notes(failed_profile))

    def test_unsupported_and_failed_models_say_why_and_keep_what_they_measured(self):
        text = tb.table(results_doc(RESNET18, SWIN, VIT))
        swin = row_of(text, "swin_t")
        self.assertEqual(swin[1:9], ["–"] * 8)
        # '|' escaped and the line break dropped, so that the row stays one Markdown row.
        self.assertEqual(swin[9], "unsupported: op Einsum \\| not lowered by the GPU engine")
        vit = row_of(text, "vit_b_16")
        self.assertEqual(vit[1:9], ["5.0e-06", "–", "0.900", "1.800", "2.00x", "–", "30.000", "–"])
        self.assertEqual(vit[9], "failed: gpulab fp16 b256: out of memory")
        unavailable = entry("nosuchnet", status="unavailable", reason="not in torchvision 0.14.1")
        self.assertEqual(tb.notes(unavailable), "unavailable: not in torchvision 0.14.1")
        self.assertLessEqual(len(tb.notes(entry("m", status="failed", reason="x" * 1000))), 200)

    def test_cpu_runs_without_gpulab_and_unknown_verdicts_are_noted(self):
        cpu = entry("squeezenet1_1", device="cpu", gpulab=None, cells=[cell("fp32", 1, None, 12.0)])
        self.assertEqual(tb.notes(cpu), "gpulab not run; CPU: PyTorch eager, not a CUDA graph")
        no_plan_library = entry("resnet18", inspect={"supported": None, "reason": "no verdict (no plan library)"})
        self.assertEqual(tb.notes(no_plan_library), "inspect: no verdict (no plan library)")
        self.assertEqual(tb.notes(entry("resnet18", inspect={"supported": True, "reason": ""})), "")

    def test_the_footnote_names_the_environment_images_and_commits(self):
        text = tb.table(results_doc(RESNET18))
        foot = text.splitlines()[-1]
        self.assertEqual(text.splitlines()[-2], "")
        for want in ("first 4 images of gpulab bench's input", "NVIDIA H100 80GB HBM3, driver 550.54.15",
                     "torch 2.11.0, torchvision 0.26.0, gpulab 0.9.0, commit 0123456789ab-dirty."):
            self.assertIn(want, foot)
        two_commits = results_doc(RESNET18, dict(MOBILENET, commit="fedcba9876543210", check_images=8))
        foot = tb.table(two_commits).splitlines()[-1]
        self.assertIn("first 4/8 images", foot)
        self.assertIn("(the models come from 2 commits: see each model's in the JSON).", foot)
        bare = tb.table({"schema": tb.SCHEMA, "models": []})
        self.assertIn("b1 gpulab ms", bare.splitlines()[0])  # no results: batch 1 and 256
        self.assertIn("b256 ratio", bare.splitlines()[0])
        self.assertIn("driver ?, torch ?, torchvision ?, no gpulab, commit ?.", bare)

    def test_table_on_the_command_line_prints_the_results_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "tv.json")
            tb.write_results(path, results_doc(RESNET18, SWIN))
            with redirect_stdout(io.StringIO()) as out:
                self.assertEqual(tb.main(["--results", path, "--table", "--table-precision", "fp32"]), 0)
        self.assertEqual(out.getvalue(), tb.table(results_doc(RESNET18, SWIN), "fp32") + "\n")


class ResumeTest(unittest.TestCase):
    """Which models a rerun skips (is_done); torch.device is a stand-in."""

    def setUp(self):
        patcher = mock.patch.object(tb, "torch", FAKE_TORCH)
        patcher.start()
        self.addCleanup(patcher.stop)

    def args(self, *extra, device="cuda"):
        return tb.parse_args(["--results", "tv.json", "--device", device, *extra])

    def test_ok_and_unsupported_are_skipped_on_the_same_device_kind(self):
        for status in ("ok", "unsupported"):
            with self.subTest(status=status):
                self.assertTrue(tb.is_done(entry("m", status=status, device="cuda"), self.args()))
                self.assertTrue(tb.is_done(entry("m", status=status, device="cuda"), self.args(device="cuda:1")))
                self.assertTrue(tb.is_done(entry("m", status=status, device="cpu"), self.args(device="cpu")))

    def test_a_result_of_another_device_kind_is_run_again(self):
        self.assertFalse(tb.is_done(entry("m", device="cpu"), self.args(device="cuda")))
        self.assertFalse(tb.is_done(entry("m", status="unsupported", device="cpu"), self.args(device="cuda:0")))
        self.assertFalse(tb.is_done(entry("m", device="cuda"), self.args(device="cpu")))

    def test_failed_unavailable_and_missing_models_are_run_again(self):
        self.assertFalse(tb.is_done(entry("m", status="failed"), self.args()))
        self.assertFalse(tb.is_done(entry("m", status="unavailable"), self.args()))
        self.assertFalse(tb.is_done(None, self.args()))
        self.assertFalse(tb.is_done({"model": "m"}, self.args()))  # no status

    def test_retry_unsupported_asks_again_but_keeps_ok_models(self):
        args = self.args("--retry-unsupported")
        self.assertFalse(tb.is_done(entry("m", status="unsupported"), args))
        self.assertTrue(tb.is_done(entry("m", status="ok"), args))

    def test_a_rerun_result_replaces_the_models_entry_and_keeps_the_others(self):
        doc = results_doc(entry("resnet18", status="failed"), entry("alexnet"))
        self.assertEqual(tb.find_entry(doc, "resnet18")["status"], "failed")
        self.assertIsNone(tb.find_entry(doc, "vgg11_bn"))
        tb.put_entry(doc, entry("resnet18", status="ok"))
        tb.put_entry(doc, entry("vgg11_bn"))
        self.assertEqual([m["model"] for m in doc["models"]], ["alexnet", "resnet18", "vgg11_bn"])
        self.assertEqual(tb.find_entry(doc, "resnet18")["status"], "ok")
        self.assertTrue(tb.is_done(tb.find_entry(doc, "resnet18"), self.args()))


class ResultsFileTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.path = os.path.join(self.tmp.name, "tv.json")

    def write_text(self, text: str) -> None:
        with open(self.path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)

    def test_write_then_read_gives_the_same_document_with_the_header_keys_first(self):
        doc = results_doc(RESNET18, SWIN)
        shuffled = {"models": doc["models"], "environment": doc["environment"], "extra": 1,
                    **{k: v for k, v in doc.items() if k not in ("models", "environment")}}
        tb.write_results(self.path, shuffled)
        back = tb.read_results(self.path)
        self.assertEqual(back, shuffled)
        self.assertEqual(list(back)[:6], ["schema", "schema_version", "method", "tolerance", "environment", "models"])
        self.assertEqual(os.listdir(self.tmp.name), ["tv.json"])  # no temporary file left
        tb.write_results(self.path, results_doc(VIT))  # replaces the file
        self.assertEqual([m["model"] for m in tb.read_results(self.path)["models"]], ["vit_b_16"])

    def test_a_write_that_fails_halfway_leaves_the_last_whole_file(self):
        tb.write_results(self.path, results_doc(RESNET18))
        broken = results_doc(RESNET18, entry("alexnet", cells={1, 2}))  # a set: json.dump fails mid-file
        with self.assertRaises(TypeError):
            tb.write_results(self.path, broken)
        self.assertEqual(tb.read_results(self.path), json.loads(json.dumps(results_doc(RESNET18))))

    def test_no_file_yet_is_an_empty_results_document(self):
        self.assertEqual(tb.read_results(self.path), {"schema": tb.SCHEMA, "schema_version": 1, "models": []})

    def test_a_foreign_or_corrupt_file_is_refused(self):
        cases = {"foreign": json.dumps({"schema": "gpulab.compare_pytorch", "rows": []}),
                 "no schema": json.dumps([{"model": "resnet18"}]),
                 "corrupt": '{"schema": "gpulab.torchvision_bench", "models": [',
                 "empty": ""}
        for name, text in cases.items():
            with self.subTest(name):
                self.write_text(text)
                with self.assertRaises(ValueError):
                    tb.read_results(self.path)

    def test_table_of_a_foreign_corrupt_or_missing_file_exits_2_with_the_reason(self):
        cases = [(json.dumps({"schema": "gpulab.grid_cell"}), f"is not a {tb.SCHEMA} results file"),
                 ("not json", f"is not a {tb.SCHEMA} results file: Expecting value"),
                 ("\udcff", "codec can't decode"),  # not UTF-8
                 (None, "no results file")]
        for text, want in cases:
            with self.subTest(want=want):
                if text is None:
                    os.unlink(self.path)
                else:
                    self.write_text(text)
                with redirect_stdout(io.StringIO()) as out, redirect_stderr(io.StringIO()) as err:
                    self.assertEqual(tb.main(["--results", self.path, "--table"]), 2)
                self.assertEqual(out.getvalue(), "")
                self.assertTrue(err.getvalue().startswith("torchvision_bench: "), err.getvalue())
                self.assertIn(want, err.getvalue())
                self.assertIn(self.path, err.getvalue())


class ArgumentsTest(unittest.TestCase):
    def refused(self, *argv) -> str:
        """parse_args's message for `argv`, after checking that it exits with 2."""
        with redirect_stderr(io.StringIO()) as err, redirect_stdout(io.StringIO()):
            with self.assertRaises(SystemExit) as stop:
                tb.parse_args(list(argv))
        self.assertEqual(stop.exception.code, 2, argv)
        return err.getvalue()

    def test_defaults(self):
        args = tb.parse_args(["--results", "out/tv.json"])
        self.assertEqual(args.batches, [1, 256])
        self.assertEqual(args.precisions, ["fp16", "fp32"])
        self.assertEqual(args.models, ",".join(tb.DEFAULT_MODELS))
        self.assertEqual(args.profile_dir, "out/tv-profiles")  # beside --results
        self.assertEqual(args.budget_s, float("inf"))
        args = tb.parse_args(["--results", "r.json", "--batch", " 1, 8,256 ", "--precision", "bf16,tf32",
                              "--device", "cuda:1", "--timing-cache", "tv.cache"])
        self.assertEqual((args.batches, args.precisions, args.gpulab_timing_cache), ([1, 8, 256], ["bf16", "tf32"],
                                                                                    "tv.cache"))

    def test_the_model_estimate_follows_the_slowest_model_timed_up_to_the_limit(self):
        self.assertEqual(tb.model_estimate(300, []), 300)
        self.assertEqual(tb.model_estimate(300, [61.0, 102.0]), 153.0)
        self.assertEqual(tb.model_estimate(300, [61.0, 250.0]), 300)

    def test_bad_batches_exit_2_with_a_message(self):
        self.assertIn("--batch: [0] (at least 1)", self.refused("--results", "r.json", "--batch", "1,0"))
        self.assertIn("--batch: [-4] (at least 1)", self.refused("--results", "r.json", "--batch", "-4"))
        self.assertIn("--batch: '1,x' is not a comma-separated list",
                      self.refused("--results", "r.json", "--batch", "1,x"))
        self.assertIn("--batch: empty", self.refused("--results", "r.json", "--batch", ","))

    def test_an_empty_precision_list_exits_2_with_a_message(self):
        self.assertIn("--precision: empty", self.refused("--results", "r.json", "--precision", " , "))

    def test_an_unknown_precision_exits_2_with_a_message(self):
        self.assertIn("--precision: ['fp64'] not in ['fp32', 'tf32', 'fp16', 'bf16']",
                      self.refused("--results", "r.json", "--precision", "fp16,fp64"))

    def test_other_bad_arguments_exit_2(self):
        self.assertIn("--iters and --check-images must be at least 1",
                      self.refused("--results", "r.json", "--iters", "0"))
        self.assertIn("--iters and --check-images", self.refused("--results", "r.json", "--check-images", "0"))
        self.assertIn("--warmup at least 0", self.refused("--results", "r.json", "--warmup", "-1"))
        self.assertIn("--device: 'tpu' is not cpu, cuda or cuda:N", self.refused("--results", "r.json", "--device", "tpu"))
        self.assertIn("--results", self.refused("--table"))  # required


if __name__ == "__main__":
    unittest.main()
