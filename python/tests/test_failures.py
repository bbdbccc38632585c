"""How run() tells a broken group from an error of the training code, and
that a state payload can never run code: real multi-process PyTorch next
to fake sidecars, and the classification itself on fakes."""

import os
import pickle
import tempfile
import threading
import time
import types
import unittest
from unittest import mock

from test_elastic import Harness
from torchreq import require_torch

from ringside import _current, _failure


class FakeGroup:
    def __init__(self, aborted=False, down=()):
        self.aborted = aborted
        self.down = list(down)
        self.asked = 0

    def broken_links(self):
        self.asked += 1
        return self.down


class FakeWatcher:
    def __init__(self, newer=False):
        self.lost = None
        self.newer = newer
        self.cond = threading.Event()
        self.waits = 0

    def newer_than(self, generation):
        return self.newer

    def wait(self, timeout):
        self.waits += 1
        self.cond.wait(timeout)


class ClassificationTest(unittest.TestCase):
    def classify(self, err, group=None, watcher=None, since=None, grace=0.2):
        return _failure.collective_failure(err, group or FakeGroup(), watcher or FakeWatcher(), 3,
                                           time.monotonic() if since is None else since, 60.0, grace=grace)

    def test_a_users_error_is_never_a_broken_group(self):
        for err in (KeyError("datastore_path"), ValueError("bad"), TypeError("x"), AttributeError("y")):
            # Not even while the group is aborted or a generation comes.
            for group, watcher in ((FakeGroup(), FakeWatcher()), (FakeGroup(aborted=True), FakeWatcher(newer=True))):
                self.assertIsNone(self.classify(err, group, watcher, grace=3600), err)
                self.assertEqual((group.asked, watcher.waits), (0, 0), "a %r waited for evidence" % err)

    def test_words_in_a_message_prove_nothing(self):
        # wandb's ConnectionError, a DataLoader timeout, a store-ish message.
        for err in (ConnectionError("connection refused by api.wandb.ai socket"),
                    RuntimeError("DataLoader timed out after 30 seconds"), RuntimeError("datastore timeout c10d")):
            group = FakeGroup()
            self.assertIsNone(self.classify(err, group), err)
            self.assertGreater(group.asked, 0, "a %r was not checked against the group" % err)

    def test_what_happened_makes_a_broken_group(self):
        err = RuntimeError("anything at all")
        self.assertIn("aborted", self.classify(err, FakeGroup(aborted=True)))
        self.assertIn("newer generation", self.classify(err, watcher=FakeWatcher(newer=True)))
        self.assertIn("10.0.0.7", self.classify(err, FakeGroup(down=["10.0.0.7"])))
        self.assertIn("collective timeout", self.classify(err, since=time.monotonic() - 61))

    def test_a_link_that_goes_down_during_the_grace_counts(self):
        g = FakeGroup()
        threading.Timer(0.1, lambda: g.down.append("10.0.0.8")).start()
        self.assertIn("10.0.0.8", self.classify(RuntimeError("x"), g, grace=2.0))

    @require_torch
    def test_ringsides_own_store_and_sync_errors_count(self):
        from ringside._store import StoreError
        from ringside.errors import CollectiveFailed

        self.assertIn("StoreError", self.classify(StoreError("x")))
        self.assertIn("CollectiveFailed", self.classify(CollectiveFailed("x")))

    def test_interrupts_are_not_exceptions(self):
        from ringside.state import DrainRequested, GenerationChanged, Interrupted

        for t in (Interrupted, GenerationChanged, DrainRequested):
            self.assertFalse(issubclass(t, Exception), "%s is caught by `except Exception:`" % t.__name__)


@require_torch
class CollectiveStartTest(unittest.TestCase):
    """The collective timeout counts from the start of the collective, not
    from the last commit."""

    def setUp(self):
        _current.set_group(types.SimpleNamespace(rank=0, world_size=2, backend="gloo", aborted=False))
        self.addCleanup(_current.clear_group)

    def failed_hook_collective(self):
        """Runs ringside's DDP hook on a bucket whose all-reduce fails at
        once; returns the error the step gets."""
        import torch

        from ringside.gns import GradientNoiseScale

        fut = torch.futures.Future()
        fut.set_exception(RuntimeError("Connection reset by peer"))
        bucket = types.SimpleNamespace(buffer=lambda: torch.ones(4))
        with mock.patch("torch.distributed.all_reduce", lambda t, async_op: types.SimpleNamespace(get_future=lambda: fut)):
            out = GradientNoiseScale()._hook(None, bucket)
        with self.assertRaises(RuntimeError) as cm:
            out.wait()
        return cm.exception

    def test_a_long_computation_before_a_collective_that_fails_at_once_did_not_wait_the_timeout(self):
        committed = time.monotonic() - 61  # the step computed longer than the timeout
        err = self.failed_hook_collective()
        why = _failure.collective_failure(err, FakeGroup(), FakeWatcher(), 3, committed, 60.0, grace=0.05)
        self.assertIsNone(why, "a collective that failed at once was taken for one that waited the timeout")

    def test_a_collective_that_waited_the_timeout_is_a_broken_group(self):
        committed = time.monotonic() - 120
        with mock.patch.object(_current.time, "monotonic", lambda: committed + 1):  # it began right after the commit
            err = self.failed_hook_collective()
        why = _failure.collective_failure(err, FakeGroup(), FakeWatcher(), 3, committed, 60.0, grace=0.05)
        self.assertIn("collective timeout", why or "")


@require_torch
class UserErrorTest(unittest.TestCase):
    def test_a_user_error_propagates_at_once_with_its_traceback(self):
        h = Harness(self, port=29390)
        h.add()
        h.add(env={"TEST_USER_ERROR": "6"})
        h.job.commit(["w0", "w1"])
        lines = h.wait("w1 to report its error", lambda ls: any(d.get("event") == "error" for d in ls))
        raised = [d for d in lines if d.get("event") == "raising" and d["worker"] == "w1"][0]
        err = [d for d in lines if d.get("event") == "error"][0]
        self.assertEqual((err["worker"], err["type"]), ("w1", "KeyError"))
        self.assertLess(err["t"] - raised["t"], 1.0, "the error took %.2fs to propagate" % (err["t"] - raised["t"]))
        self.assertEqual(h.procs["w1"].wait(20), 3)
        log = h.log("w1")
        self.assertIn("Traceback", log)
        self.assertIn("KeyError: 'datastore_path'", log)
        self.assertIn('config["datastore_path"]', log, "the traceback does not reach the user's line")
        self.assertEqual(h.sidecars["w1"].leaves, 1, "the sidecar was not told that w1 leaves")
        self.assertNotIn("the group broke", log)
        self.assertFalse([d for d in lines if d.get("event") == "swallowed"])

        # w0 took its failed collective for a broken group and goes on.
        self.assertIsNone(h.procs["w0"].poll(), h.log("w0"))
        t0 = time.time()
        h.job.commit(["w0"], reason="w1 left")
        h.all_step(["w0"], 2, since=t0)
        self.assertNotIn("KeyError", h.log("w0"))

    def test_retries_are_bounded_across_syncs(self):
        # Every group forms and syncs, then breaks before a commit: the
        # count is not reset by the successful syncs in between.
        h = Harness(self, port=29410)
        h.add(env={"TEST_STORE_ERROR": "1"}, args=["--reform-after", "0.3", "--max-retries", "3"])
        h.job.commit(["w0"])
        self.assertEqual(h.procs["w0"].wait(30), 3, h.log("w0"))
        err = [d for d in h.lines if d.get("event") == "error"][0]
        self.assertEqual(err["type"], "RingsideError")
        self.assertIn("broke 4 times", err["message"])
        self.assertEqual(len([d for d in h.lines if d.get("event") == "ring"]), 4)


@require_torch
class UntrustedPayloadTest(unittest.TestCase):
    def test_a_malicious_pickle_in_a_sync_payload_is_refused(self):
        marker = os.path.join(tempfile.mkdtemp(), "pwned")
        # w0 trains alone, then sends its state to the joiner w1 as a pickle.
        h = Harness(self, port=29430)
        h.add(env={"TEST_CORRUPT": "pickle", "TEST_PWNED": marker})
        h.job.commit(["w0"])
        h.all_step(["w0"], 1, min_step=3)
        h.add()
        h.job.commit(["w0", "w1"])
        codes = [h.procs[w].wait(60) for w in ("w0", "w1")]
        self.assertEqual(codes, [4, 4], "\n".join(h.log(w) for w in ("w0", "w1")))
        self.assertIn("was refused", h.log("w1"))
        self.assertFalse(os.path.exists(marker), "the payload ran code")
        self.assertFalse([d for d in h.lines if "sum_ok" in d and d["generation"] == 2], "a rank trained on a refused state")

    def test_decoding_never_unpickles(self):
        import io

        import torch

        from ringside import state as state_mod
        from ringside.errors import StateCorrupt

        marker = os.path.join(tempfile.mkdtemp(), "pwned")

        class Evil:
            def __reduce__(self):
                return (os.system, ("touch %s" % marker,))

        buf = io.BytesIO()
        torch.save({"step": 1, "model": Evil()}, buf)
        for payload in (pickle.dumps(Evil()), buf.getvalue()):
            with self.assertRaises(StateCorrupt):
                state_mod._deserialize(payload)
        self.assertFalse(os.path.exists(marker))

    def test_a_tampered_dtype_cannot_reach_a_function(self):
        from ringside import _codec

        import torch

        payload = _codec.encode({"w": torch.ones(2)})
        bad = payload.replace(b'"dt":"float32"', b'"dt":"load"   ')
        with self.assertRaises(ValueError):
            _codec.decode(bad)


if __name__ == "__main__":
    unittest.main()
