"""What a ported DDP script needs of run(), with real multi-process
PyTorch (gloo on CPU) next to fake sidecars: schedulers, scalers and random
generators restored bit for bit across a kill, ElasticSampler's exactly
once through kills, joins and drains, and a job that lost every member
resuming from disk."""

import os
import signal
import tempfile
import time
import unittest

from test_elastic import Harness
from torchreq import require_torch

RICH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rich_worker.py")


def by_step(lines, worker, generation=None):
    return {d["step"]: d for d in lines if d["worker"] == worker and "sum_ok" in d
            and (generation is None or d["generation"] == generation)}


def check_exactly_once(test, lines, n, epochs):
    """Asserts that in the committed history every index of each epoch was
    trained exactly once; returns the formations in order."""
    # A formation is (generation, k): the k-th time a worker formed that
    # generation (a group that broke without a new generation is formed
    # again). Its steps up to where the next formation went on from are
    # the committed history; the others were rolled back.
    formation, starts, seen = {}, {}, {}
    per_epoch = {}
    batches = []
    for d in lines:
        w = d["worker"]
        if d.get("event") == "ring":
            k = seen[(w, d["generation"])] = seen.get((w, d["generation"]), -1) + 1
            formation[w] = (d["generation"], k)
            starts.setdefault(formation[w], set()).add(d["step"])
        elif d.get("event") == "batch":
            batches.append((formation[w], d))
    test.assertTrue(all(len(v) == 1 for v in starts.values()), "ranks synced to different steps: %s" % starts)
    order = sorted(starts)
    kept = {f: next(iter(starts[order[i + 1]])) if i + 1 < len(order) else 10 ** 9 for i, f in enumerate(order)}
    for f, d in batches:
        if d["step"] <= kept[f]:
            per_epoch.setdefault(d["epoch"], []).extend(d["indices"])
    assert_each_index_once(test, per_epoch, n, epochs)
    return order


def assert_each_index_once(test, per_epoch, n, epochs, what="trained"):
    """Asserts that per_epoch ({epoch: [indices]}) holds epochs 0 to
    epochs-1, each with every index below n exactly once."""
    test.assertEqual(sorted(per_epoch), list(range(epochs)), what)
    for e, idx in per_epoch.items():
        counts = {}
        for i in idx:
            counts[i] = counts.get(i, 0) + 1
        dup = sorted(i for i, c in counts.items() if c > 1)
        missing = sorted(set(range(n)) - set(counts))
        test.assertFalse(dup or missing, "%s: epoch %d: %d trained twice %s, %d never %s" % (
            what, e, len(dup), dup[:20], len(missing), missing[:20]))


@require_torch
class RestoreTest(unittest.TestCase):
    def test_a_kill_and_a_replacement_train_bit_for_bit_as_an_undisturbed_run(self):
        args = ["--steps", "16", "--commit-every", "4", "--step-time", "0.05"]
        calm = Harness(self, port=29450)
        u = [calm.add(worker=RICH, args=args) for _ in range(2)]
        calm.job.commit(u)

        h = Harness(self, port=29470)
        ws = [h.add(worker=RICH, args=args) for _ in range(2)]
        h.job.commit(ws)
        h.wait("w1 at step 6", lambda ls: any(d["worker"] == "w1" and d.get("step") == 6 and "sum_ok" in d for d in ls))
        os.kill(h.procs["w1"].pid, signal.SIGKILL)
        w2 = h.add(worker=RICH, args=args)
        h.job.commit(["w0", w2], reason="w1 replaced")
        for w in ("w0", w2):
            self.assertEqual(h.procs[w].wait(60), 0, h.log(w))
        for w in u:
            self.assertEqual(calm.procs[w].wait(60), 0, calm.log(w))

        ring = [d for d in h.lines if d.get("event") == "ring" and d["generation"] == 2]
        self.assertEqual({d["step"] for d in ring}, {4}, "generation 2 did not go on from the commit of step 4: %s" % ring)
        first = by_step(h.lines, "w0", 1)
        self.assertGreater(max(first), 4, "nothing was rolled back, so nothing was re-trained")
        want = by_step(calm.lines, "u0" if "u0" in u else u[0])
        for w in ("w0", w2):
            got = by_step(h.lines, w, 2)
            self.assertEqual(sorted(got), list(range(5, 17)))
            for s in range(5, 17):
                a, b = got[s], want[s]
                self.assertEqual((a["loss"], a["lr"], a["checksum"]), (b["loss"], b["lr"], b["checksum"]),
                                 "%s step %d differs from the undisturbed run" % (w, s))


@require_torch
class SamplerTest(unittest.TestCase):
    def test_every_index_of_an_epoch_is_trained_once_through_kills_joins_and_drains(self):
        n, epochs = 150, 3
        args = ["--sampler", "--dataset", str(n), "--batch", "3", "--epochs", str(epochs), "--step-time", "0.04"]
        h = Harness(self, port=29490)
        ws = [h.add(worker=RICH, args=args + (["--loader-workers", "1"] if i < 2 else [])) for i in range(5)]
        h.job.commit(ws)
        h.all_step(ws, 1, min_step=4)

        os.kill(h.procs["w4"].pid, signal.SIGKILL)
        t0 = time.time()
        h.job.commit(ws[:4], reason="w4 dead")
        h.all_step(ws[:4], 2, since=t0, min_step=1)
        h.all_step(ws[:4], 2, since=t0 + 0.3)

        new = [h.add(worker=RICH, args=args) for _ in range(2)]
        ring = ws[:4] + new
        h.job.commit(ring, reason="join")
        h.all_step(ring, 3)

        h.sidecars["w1"].drain("SIGTERM")
        h.wait("w1 to stop", lambda ls: time.time() - max(d["t"] for d in ls if d["worker"] == "w1") > 0.5)
        ring = [w for w in ring if w != "w1"]
        h.job.commit(ring, reason="w1 drained")
        for w in ring:
            self.assertEqual(h.procs[w].wait(90), 0, h.log(w))
        self.assertEqual(h.procs["w1"].wait(20), 0, h.log("w1"))

        order = check_exactly_once(self, h.lines, n, epochs)
        self.assertGreater(len({g for g, _ in order}), 3)


    def test_a_kill_then_a_whole_epoch_at_the_new_size_with_a_dataloader_sampler(self):
        # DataLoader(sampler=sampler, batch_size=8) with a worker, a commit
        # every step, 2 epochs; one of 4 workers is killed in epoch 0, and
        # epoch 1 runs at world 3 with no fault in it.
        n, epochs = 960, 2
        args = ["--sampler", "--loader", "sampler", "--dataset", str(n), "--batch", "8", "--epochs", str(epochs),
                "--step-time", "0.01", "--loader-workers", "1", "--seed", "3"]
        h = Harness(self, port=29530)
        ws = [h.add(worker=RICH, args=args) for i in range(4)]
        h.job.commit(ws)
        h.all_step(ws, 1, min_step=3)
        os.kill(h.procs["w2"].pid, signal.SIGKILL)
        ring = ["w0", "w1", "w3"]
        h.job.commit(ring, reason="w2 dead")
        for w in ring:
            self.assertEqual(h.procs[w].wait(120), 0, h.log(w))
        check_exactly_once(self, h.lines, n, epochs)


@require_torch
class CheckpointTest(unittest.TestCase):
    def saved_step(self, ckpt, at_least, timeout=30):
        """The step of the checkpoint in ckpt once it is at least at_least
        (the writes run in the background, behind the training)."""
        from ringside._checkpoint import FILE_NAME
        from ringside.state import read_checkpoint

        path = os.path.join(ckpt, FILE_NAME)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(path):
                step = read_checkpoint(path)["step"]
                if step >= at_least:
                    return step
            time.sleep(0.05)
        self.fail("no checkpoint of step %d or later in %s within %ds" % (at_least, ckpt, timeout))

    def test_a_job_that_lost_every_member_resumes_from_disk(self):
        ckpt = tempfile.mkdtemp(prefix="ringside-ckpt-")
        args = ["--steps", "30", "--step-time", "0.03", "--checkpoint-dir", ckpt, "--checkpoint-every", "2"]
        h = Harness(self, port=29510)
        ws = [h.add(worker=RICH, args=args) for _ in range(2)]
        h.job.commit(ws)
        h.all_step(ws, 1, min_step=10)
        saved = self.saved_step(ckpt, at_least=8)
        for w in ws:
            os.kill(h.procs[w].pid, signal.SIGKILL)
        for w in ws:
            h.procs[w].wait(10)
        before = by_step(h.lines, "w0")

        fresh = [h.add(worker=RICH, args=args) for _ in range(2)]
        h.job.commit(fresh, reason="a new job")
        for w in fresh:
            self.assertEqual(h.procs[w].wait(60), 0, h.log(w))
        ring = [d for d in h.lines if d.get("event") == "ring" and d["worker"] in fresh]
        start = ring[0]["step"]
        self.assertGreaterEqual(start, saved, "resumed from step %d, not from the checkpoint" % start)
        self.assertEqual(start % 2, 0)
        self.assertEqual(ring[0]["checksum"], before[start]["checksum"], "the state on disk is not the one trained")
        self.assertIn("resumed from the checkpoint", h.log(fresh[0]))


if __name__ == "__main__":
    unittest.main()
