"""bench/tables.py on made-up records (CTest: bench_tables_test)."""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import tables  # noqa: E402


def compare_doc(model: str, rows) -> dict:
    """compare_pytorch.py's JSON with rows (precision, batch, {mode: ms})."""
    return {"schema": "gpulab.compare_pytorch", "schema_version": 1, "model": model,
            "rows": [{"batch": b, "precision": p, "cells": {m: {"ms": ms} for m, ms in cells.items()}}
                     for p, b, cells in rows]}


def grid_cell(model: str, precision: str, batch: int, status: str, cells) -> dict:
    compare = compare_doc("x.onnx", [(precision, batch, cells)]) if cells else None
    return {"schema": "gpulab.grid_cell", "schema_version": 1,
            "cell": {"model": model, "precision": precision, "batch": batch}, "status": status,
            "compare": compare}


class TablesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.results = os.path.join(self.tmp.name, "results")
        os.makedirs(self.results)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, relpath: str, doc) -> None:
        path = os.path.join(self.results, relpath)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f)

    def unrecorded(self, *cells) -> None:
        self.write("unrecorded.json", {"about": "test", "cells": list(cells)})

    def md(self, text: str) -> str:
        path = os.path.join(self.tmp.name, "doc.md")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def test_a_later_record_replaces_an_unrecorded_number_and_each_row_says_where_it_came_from(self):
        self.unrecorded(
            {"model": "r18", "precision": "fp16", "batch": 256, "eager_ms": 5.0, "graph_ms": 4.0, "compile_ms": None,
             "gpulab_ms": 2.0, "measured": "2026-12-03", "commit": "aaaaaaa"},
            {"model": "r18", "precision": "fp16", "batch": 1, "eager_ms": 1.0, "graph_ms": 0.3, "compile_ms": None,
             "gpulab_ms": 0.15, "measured": "2026-12-03", "commit": "aaaaaaa"})
        self.write("2026-12-09-bbbbbbb/compare_resnet18.json",
                   compare_doc("build/gpuhost/fixtures/resnet18.onnx",
                               [("fp16", 256, {"eager": 5.5, "graph": 5.4, "compile": 3.0, "gpulab": 1.5})]))
        text = tables.all_tables(self.results)["grid-r18"]
        rows = [l for l in text.split("\n") if l.startswith("| FP16")]
        self.assertEqual(len(rows), 2)
        self.assertIn("| FP16 | 1 | 1.000 | 0.300 | – | **0.150** | 6.7k | 2.00x (graph) | "
                      "2026-12-03 at aaaaaaa, no raw record kept |", rows[0])
        self.assertIn("| FP16 | 256 | 5.500 | 5.400 | 3.000 | **1.500** | 170.7k | 2.00x (compile) | "
                      "[2026-12-09-bbbbbbb](../bench/results/2026-12-09-bbbbbbb/compare_resnet18.json) |", rows[1])

    def test_each_row_names_the_card_it_ran_on(self):
        self.write("unrecorded.json", {"about": "test", "gpu": "NVIDIA H200", "cells": [
            {"model": "r18", "precision": "fp16", "batch": 1, "eager_ms": 1.0, "graph_ms": 0.3, "compile_ms": None,
             "gpulab_ms": 0.15, "measured": "2026-12-03", "commit": "aaaaaaa"}]})
        doc = compare_doc("build/gpuhost/fixtures/resnet18.onnx", [("fp16", 256, {"eager": 5.5, "gpulab": 1.5})])
        doc["environment"] = {"gpu": "NVIDIA H100 80GB HBM3"}
        self.write("2026-12-09-bbbbbbb/compare_resnet18.json", doc)
        self.write("2026-12-09-bbbbbbb/r18_fp16_b8.json",
                   grid_cell("r18", "fp16", 8, "ok", {"eager": 1.0, "gpulab": 0.5}))
        text = tables.all_tables(self.results)["grid-r18"]
        self.assertIn("| 2026-12-03 at aaaaaaa (H200), no raw record kept |", text)
        self.assertIn("(../bench/results/2026-12-09-bbbbbbb/compare_resnet18.json) (H100) |", text)
        self.assertIn("(../bench/results/2026-12-09-bbbbbbb/r18_fp16_b8.json) |", text)  # no card recorded

    def test_an_older_record_does_not_replace_a_newer_unrecorded_number(self):
        self.unrecorded({"model": "mnv2", "precision": "bf16", "batch": 8, "eager_ms": 3.0, "graph_ms": 0.7,
                         "compile_ms": None, "gpulab_ms": 0.5, "measured": "2026-12-05", "commit": "ccccccc"})
        self.write("2026-12-04-ddddddd/mnv2_bf16_b8.json",
                   grid_cell("mnv2", "bf16", 8, "ok", {"eager": 3.0, "graph": 0.7, "gpulab": 0.9}))
        text = tables.all_tables(self.results)["grid-mnv2"]
        self.assertIn("**0.500**", text)
        self.assertNotIn("0.900", text)

    def test_a_timed_out_cell_has_no_times_and_leaves_the_measurement_before_it(self):
        self.unrecorded({"model": "r18", "precision": "fp32", "batch": 256, "eager_ms": 25.0, "graph_ms": 24.0,
                         "compile_ms": None, "gpulab_ms": 22.0, "measured": "2026-12-03", "commit": "aaaaaaa"})
        self.write("2026-12-04-ddddddd/r18_fp32_b256.json", grid_cell("r18", "fp32", 256, "timeout", None))
        text = tables.all_tables(self.results)["grid-r18"]
        self.assertIn("**22.000**", text)
        self.assertIn("2026-12-03 at aaaaaaa", text)

    def test_write_replaces_only_the_marked_tables_and_check_then_passes(self):
        self.unrecorded({"model": "r18", "precision": "fp16", "batch": 1, "eager_ms": 1.0, "graph_ms": 0.3,
                         "compile_ms": 0.4, "gpulab_ms": 0.15, "measured": "2026-12-03", "commit": "aaaaaaa"})
        doc = self.md("# Title\n\nprose 1.23 ms\n\n<!-- tables.py: grid-r18 -->\n| stale |\n"
                      "<!-- tables.py: end -->\n\nafter\n")
        with redirect_stderr(io.StringIO()) as err:
            self.assertEqual(tables.main(["--results", self.results, "--check", doc]), 1)
        self.assertIn("--write", err.getvalue())
        self.assertEqual(tables.main(["--results", self.results, "--write", doc]), 0)
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        self.assertTrue(text.startswith("# Title\n\nprose 1.23 ms\n\n<!-- tables.py: grid-r18 -->\n| precision |"))
        self.assertTrue(text.endswith("no raw record kept |\n<!-- tables.py: end -->\n\nafter\n"))
        self.assertNotIn("stale", text)
        self.assertEqual(tables.main(["--results", self.results, "--check", doc]), 0)

    def test_a_changed_record_makes_check_fail(self):
        self.write("2026-12-09-bbbbbbb/c.json", compare_doc("resnet18.onnx", [("fp16", 1, {"gpulab": 0.2})]))
        doc = self.md("<!-- tables.py: grid-r18 -->\n<!-- tables.py: end -->\n")
        self.assertEqual(tables.main(["--results", self.results, "--write", doc]), 0)
        self.write("2026-12-09-bbbbbbb/c.json", compare_doc("resnet18.onnx", [("fp16", 1, {"gpulab": 0.3})]))
        with redirect_stderr(io.StringIO()):
            self.assertEqual(tables.main(["--results", self.results, "--check", doc]), 1)

    def test_bad_markers_and_bad_records_are_refused_with_the_reason(self):
        cases = [("<!-- tables.py: grid-r18 -->\nno end\n", "has no"),
                 ("<!-- tables.py: nosuch -->\n<!-- tables.py: end -->\n", "unknown table 'nosuch'")]
        for text, want in cases:
            with self.subTest(want=want), redirect_stderr(io.StringIO()) as err:
                self.assertEqual(tables.main(["--results", self.results, "--check", self.md(text)]), 2)
                self.assertIn(want, err.getvalue())
        os.makedirs(os.path.join(self.results, "latest"))
        with redirect_stderr(io.StringIO()) as err:
            self.assertEqual(tables.main(["--results", self.results]), 2)
        self.assertIn("<YYYY-MM-DD>-<short commit>", err.getvalue())


if __name__ == "__main__":
    unittest.main()
