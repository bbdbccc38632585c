"""A commit never keeps a step whose collectives may have been aborted
(issue point 2), an abort touches only its own generation's group and never
torch's registry, and every rank/world read inside run() goes through the
group run() formed (point 3)."""

import threading
import types
import unittest
from unittest import mock

from torchreq import require_torch

from ringside import _current, _group


class FakeWatcher:
    def __init__(self):
        self.latest = 1
        self.draining = False
        self.drain_reason = None
        self.lost = None

    def newer_than(self, generation):
        return self.latest > generation


@require_torch
class CommitOrderTest(unittest.TestCase):
    def setUp(self):
        import torch

        from ringside.elastic import State, _Session

        self.torch = torch
        self.model = torch.nn.Linear(4, 2)
        self.state = State(self.model, torch.optim.SGD(self.model.parameters(), lr=0.1))
        self.watcher = FakeWatcher()
        self.state._session = _Session(self.watcher, None)
        self.state.generation = 1
        self.addCleanup(_current.clear_group)

    def test_a_step_after_a_newer_generation_was_announced_is_not_committed(self):
        from ringside.state import GenerationChanged

        self.state.step = 1
        self.state.commit()
        self.assertEqual(self.state.committed_step, 1)
        self.state.step = 2
        self.watcher.latest = 2  # the watcher aborted the group meanwhile
        with self.assertRaises(GenerationChanged):
            self.state.commit()
        self.assertEqual(self.state.committed_step, 1, "the step of an aborted group was committed")

    def test_a_copy_taken_while_the_group_was_aborted_is_dropped(self):
        from ringside.state import GenerationChanged

        g = types.SimpleNamespace(aborted=False, rank=0, world_size=2, backend="gloo")
        _current.set_group(g)
        self.state.step = 1
        self.state.commit()
        real = self.model.state_dict

        def aborting_state_dict(*a, **kw):  # the watcher aborts during the copy
            g.aborted = True
            return real(*a, **kw)

        self.state.step = 2
        with mock.patch.object(self.model, "state_dict", aborting_state_dict):
            with self.assertRaises(GenerationChanged):
                self.state.commit()
        self.assertEqual(self.state.committed_step, 1, "a copy taken during the abort was kept")
        self.state.restore()
        self.assertEqual(self.state.step, 1)

    def test_a_drain_still_commits_the_step(self):
        from ringside.state import DrainRequested

        self.state.step = 1
        self.watcher.draining = True
        with self.assertRaises(DrainRequested):
            self.state.commit()
        self.assertEqual(self.state.committed_step, 1)


class NativeAbortTest(unittest.TestCase):
    def test_aborts_only_the_generation_s_own_group_object(self):
        try:
            from torch.distributed import distributed_c10d as c10d
        except ImportError:
            self.skipTest("no torch")
        called = []
        pg = types.SimpleNamespace(abort=lambda: called.append("pg.abort"))
        with mock.patch.object(c10d, "_abort_process_group", lambda *a: called.append("registry"), create=True), \
                mock.patch.object(c10d, "_get_default_group", lambda: called.append("default")):
            self.assertTrue(_group._native_abort("nccl", pg))
            self.assertFalse(_group._native_abort("nccl", None))
        self.assertEqual(called, ["pg.abort"])

    def test_the_native_abort_runs_outside_the_group_lock_and_destroy_waits_for_it(self):
        inside, release = threading.Event(), threading.Event()
        seen = []

        def slow_abort():
            inside.set()
            seen.append(g._lock.locked())
            release.wait(5)

        g = _group.Group(generation=3, rank=0, world_size=2, backend="nccl", server=None,
                         store=types.SimpleNamespace(close=lambda: None), before=set(), master_port=1, timeout_s=5,
                         pg=types.SimpleNamespace(abort=slow_abort))
        t = threading.Thread(target=g.abort, args=("test",))
        t.start()
        self.assertTrue(inside.wait(5))
        self.assertEqual(seen, [False], "the native abort ran under the group's lock")
        done = threading.Event()
        d = threading.Thread(target=lambda: (g.destroy(), done.set()))
        d.start()
        self.assertFalse(done.wait(0.3), "destroy() did not wait for the running abort")
        release.set()
        t.join(5)
        self.assertTrue(done.wait(5))
        d.join(5)


def free_elsewhere(lock):
    """Whether another thread can take lock now (it is released at once)."""
    got = []

    def take():
        ok = lock.acquire(blocking=False)
        if ok:
            lock.release()
        got.append(ok)
    t = threading.Thread(target=take)
    t.start()
    t.join(5)
    return got == [True]


class AbortOutsideLocksTest(unittest.TestCase):
    """No native abort or socket shutdown runs under a lock that another
    thread (the training thread, the watcher) may need meanwhile."""

    def test_a_group_aborted_before_formed_shuts_its_sockets_down_outside_its_lock(self):
        g = _group.Group(generation=3, rank=0, world_size=2, backend="gloo", server=None,
                         store=types.SimpleNamespace(close=lambda: None), before=set(), master_port=1, timeout_s=5)
        g.abort("test")  # before its sockets are known: formed() shuts them down
        free = []

        def shutdown(inodes):
            free.append(free_elsewhere(g._lock))
            return len(inodes)

        with mock.patch.object(_group._sockets, "supported", lambda: True), \
                mock.patch.object(_group._sockets, "group_sockets", lambda *a, **kw: {101: "10.0.0.2"}), \
                mock.patch.object(_group._sockets, "shutdown", shutdown):
            g.formed()
        self.assertEqual(free, [True], "the sockets were shut down under the group's lock")

    def test_the_watcher_aborts_outside_its_lock(self):
        from ringside._watcher import Watcher

        w = Watcher(client=None)
        free = []
        g = types.SimpleNamespace(generation=1, abort=lambda why: free.append(free_elsewhere(w._cond)))
        ev = types.SimpleNamespace
        w.attach(g, ["m1"])
        w._handle(ev(type="generation", generation=ev(generation=2)))  # a newer generation
        w.attach(g, ["m1"])  # one known already
        w.latest = 0
        w._handle(ev(type="member_dead", member="m1"))
        w._fail(RuntimeError("lost"))
        self.assertEqual(free, [True] * 4)


@require_torch
class SessionRankTest(unittest.TestCase):
    def test_inside_run_the_sampler_reads_the_session_not_the_registry(self):
        from ringside import sampler as sampler_mod

        s = sampler_mod.ElasticSampler(100, shuffle=False)
        _current.enter()
        self.addCleanup(_current.leave)
        g = types.SimpleNamespace(rank=1, world_size=4, aborted=False, backend="gloo")
        _current.set_group(g)
        with mock.patch("torch.distributed.is_initialized", lambda: False):
            self.assertEqual(list(s.batches(2))[0], [2, 3])  # rank 1 of 4, not rank 0 of 1
            s.record_batch(2)
            self.assertEqual(s.consumed, 8)
        _current.clear_group(g)
        with self.assertRaises(_current.NoGroup):
            s.record_batch(2)  # between groups: an error, never a world of one
        self.assertEqual(s.consumed, 8)


if __name__ == "__main__":
    unittest.main()
