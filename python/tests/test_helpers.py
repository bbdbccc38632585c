"""The trainer's everyday helpers with real multi-process PyTorch: the
skip-step guard (an injected NaN never reaches a commit), the rank-0
logger and state.summary()."""

import os
import unittest

from test_elastic import Harness
from torchreq import require_torch

POLICY_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "policy_worker.py")


@require_torch
class GuardTest(unittest.TestCase):
    def run_job(self, port, *extra):
        h = Harness(self, port=port)
        args = ["--policy", "global", "--global-batch", "8", "--nan-at", "4"] + list(extra)
        ws = [h.add(args=args, worker=POLICY_WORKER, steps=8) for _ in range(2)]
        h.job.commit(ws)
        for w in ws:
            self.assertEqual(h.procs[w].wait(60), 0, h.log(w))
        return h, [d for d in h.lines if "sum_ok" in d]

    def test_an_injected_nan_never_reaches_a_commit(self):
        h, steps = self.run_job(29540)
        self.assertTrue(steps)
        for d in steps:
            self.assertTrue(d["committed_finite"], "a non-finite model was committed: %s" % d)
        # Both ranks skipped the same one step (rank 0's own values were
        # finite until DDP averaged rank 1's NaN in) and agree after it.
        skipped = [d for d in steps if not d["stepped"]]
        self.assertEqual(sorted((d["rank"], d["step"]) for d in skipped), [(0, 3), (1, 3)])
        self.assertEqual({d["skipped"] for d in steps if d["step"] == 8}, {1})
        by_step = {}
        for d in steps:
            by_step.setdefault(d["step"], set()).add(d["checksum"])
        self.assertEqual({s: len(v) for s, v in by_step.items() if len(v) > 1}, {})
        self.assertEqual(max(d["step"] for d in steps), 8)
        self.assertIn("skipped a step with a non-finite loss", h.log("w1"))
        self.assertIn("skipped a step with a non-finite gradient", h.log("w0"))
        # The summary, for the user's log.
        summary = [d["text"] for d in h.lines if d.get("event") == "summary" and d["rank"] == 0][0]
        self.assertIn("1 steps skipped (non-finite)", summary)
        self.assertIn("global batch 8", summary)
        self.assertIn("step 8 (committed 8)", summary)
        # elastic.log writes on rank 0 only.
        self.assertIn("ringside.train [generation 1] generation 1: world 2", h.log("w0"))
        self.assertNotIn("ringside.train", h.log("w1"))

    def test_without_the_guard_the_nan_is_committed(self):
        # The control: the same job without the guard commits the NaN.
        _, steps = self.run_job(29560, "--no-guard")
        self.assertTrue([d for d in steps if not d["committed_finite"]], "the injected NaN did not reach the model")


if __name__ == "__main__":
    unittest.main()
