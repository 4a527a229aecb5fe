"""bench/tactic_search_log.py on a made-up `-v` build log (CTest: bench_tactic_search_log_test)."""
import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import tactic_search_log  # noqa: E402

# Two layer searches: conv1 timed four candidates (the winner third), layer1 two (the winner first),
# with rejected candidates and other log lines between them.
LOG = """\
tactics: cuDNN candidates may use up to 20137 MiB of workspace
tactics: /conv1/Conv (fused): 11 cuDNN candidates
tactics: /conv1/Conv (unfused): 15 cuDNN candidates
debug: tactics: /conv1/Conv candidate 0 rejected when built: cuDNN build candidate 0: Deselecting execution plan
debug: tactics: /conv1/Conv candidate 1 cudnn:11;0=0,2=4;eng11_k2=4_k3=0 0.0400 ms
debug: tactics: /conv1/Conv candidate 2 cudnn:44;2=12,10=1;eng44_k2=12_k18=1 0.0600 ms
debug: tactics: /conv1/Conv candidate 0 cudnn-unfused:0;;eng0 0.0200 ms
debug: tactics: /conv1/Conv candidate 1 cudnn-unfused:11;;eng11 1.0000 ms
tactics: /conv1/Conv: wide search, 4 candidates timed
tactics: /layer1/Conv (fused): 3 cuDNN candidates
tactics: /layer1/Conv (unfused): 2 cuDNN candidates
debug: tactics: /layer1/Conv candidate 0 cudnn:1;;eng1 0.5000 ms
debug: tactics: /layer1/Conv candidate 1 cudnn:2;;eng2 0.7000 ms
build: 2 layers timed, 0 from the timing cache
"""


class TacticSearchLogTest(unittest.TestCase):
    def test_searches_and_caps(self):
        found = tactic_search_log.searches(io.StringIO(LOG))
        self.assertEqual([s["label"] for s in found], ["/conv1/Conv", "/layer1/Conv"])
        self.assertEqual(found[0]["timed"], [0.04, 0.06, 0.02, 1.0])
        self.assertEqual(found[1]["timed"], [0.5, 0.7])
        rows = {r["cap"]: r for r in tactic_search_log.cap_table(found, [1, 2, 3, 4])}
        # Cap 2: conv1 loses its winner (0.04 instead of 0.02); layer1 keeps 0.5.
        self.assertAlmostEqual(rows[2]["best_ratio"], (0.04 + 0.5) / (0.02 + 0.5))
        self.assertEqual(rows[2]["skipped"], 2)
        self.assertEqual(rows[2]["searches_losing_2pct"], 1)
        self.assertAlmostEqual(rows[2]["skipped_time_share"], 1.02 / 2.32)
        self.assertEqual(rows[3]["best_ratio"], 1.0)  # the winner is the third timed
        self.assertEqual(rows[4]["skipped"], 0)

    def test_command_line(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "build.log")
            with open(path, "w") as f:
                f.write(LOG)
            sys.argv = ["tactic_search_log.py", path, "--caps", "2,3"]
            out = io.StringIO()
            with redirect_stdout(out):
                self.assertEqual(tactic_search_log.main(), 0)
            self.assertIn("2 searches, 6 candidates timed", out.getvalue())
            self.assertIn("last 2", out.getvalue())
            empty = os.path.join(d, "empty.log")
            open(empty, "w").close()
            sys.argv = ["tactic_search_log.py", empty]
            with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
                self.assertEqual(tactic_search_log.main(), 1)
            sys.argv = ["tactic_search_log.py", os.path.join(d, "missing.log")]
            err = io.StringIO()
            with redirect_stderr(err):
                self.assertEqual(tactic_search_log.main(), 2)
            self.assertIn("cannot read", err.getvalue())
            sys.argv = ["tactic_search_log.py", path, "--caps", "x"]
            with redirect_stderr(io.StringIO()), self.assertRaises(SystemExit) as bad:
                tactic_search_log.main()
            self.assertEqual(bad.exception.code, 2)


if __name__ == "__main__":
    unittest.main()
