"""Checkpoints that never lie: the step is recorded once the file is on
disk, a failed write is an error the trainer sees (and counted), the
previous checkpoint stays loadable, and ringside.save is the same atomic
write as a one-liner."""

import os
import tempfile
import threading
import unittest
from unittest import mock

from torchreq import require_torch


@require_torch
class CheckpointerTest(unittest.TestCase):
    def setUp(self):
        import torch

        from ringside import _checkpoint
        from ringside.elastic import State

        self.torch, self.ck = torch, _checkpoint
        self.dir = tempfile.mkdtemp(prefix="ringside-ckpt-")
        self.model = torch.nn.Linear(3, 1)
        self.state = State(self.model, None)
        self.c = _checkpoint.Checkpointer(self.dir, 1)
        self.addCleanup(lambda: self.c.close() if not self.c._stop else None)

    def commit(self, step):
        self.state.step = step
        self.state.commit(check=False)

    def wait_saved(self, step):
        for _ in range(200):
            if self.c.saved_step == step:
                return
            threading.Event().wait(0.02)
        self.fail("saved_step never became %d (it is %s)" % (step, self.c.saved_step))

    def test_the_step_is_recorded_once_the_file_is_written(self):
        release = threading.Event()
        real = self.ck.write_checkpoint

        def slow(path, snap):
            release.wait(5)
            real(path, snap)

        with mock.patch.object(self.ck, "write_checkpoint", slow):
            self.commit(1)
            self.c.committed(self.state)
            self.assertIsNone(self.c.saved_step, "saved_step was set before the write finished")
            release.set()
            self.wait_saved(1)
        from ringside.state import read_checkpoint

        self.assertEqual(read_checkpoint(self.c.path)["step"], 1)

    def test_a_failed_write_is_an_error_and_the_previous_file_still_loads(self):
        from ringside.errors import CheckpointFailed
        from ringside.state import read_checkpoint

        self.commit(1)
        self.c.committed(self.state)
        self.wait_saved(1)
        real_replace = os.replace

        def full_disk(src, dst):
            raise OSError(28, "No space left on device")

        with mock.patch.object(os, "replace", full_disk):
            self.commit(2)
            self.c.committed(self.state)
            for _ in range(200):
                if self.c.failures:
                    break
                threading.Event().wait(0.02)
        self.assertEqual(self.c.failures, 1)
        self.assertEqual(self.c.saved_step, 1)
        self.assertEqual(read_checkpoint(self.c.path)["step"], 1, "the previous checkpoint does not load")
        self.assertEqual([f for f in os.listdir(self.dir) if f not in (self.ck.FILE_NAME, self.ck.LOCK_NAME)], [],
                         "a temporary file was left")
        self.commit(3)
        with self.assertRaises(CheckpointFailed) as cm:
            self.c.committed(self.state)
        self.assertIn("No space left", str(cm.exception))
        self.assertIs(os.replace, real_replace)
        self.c.committed(self.state)  # reported once; the write is tried again
        self.wait_saved(3)

    def test_the_file_only_moves_forward(self):
        # A whole job drained at once: rank 1 committed step 30, rank 0 saw
        # the new generation first and left at step 29. Both offer their
        # last commit when they leave, rank 0's last.
        from ringside.state import checkpoint_step, read_checkpoint

        self.commit(30)
        self.c.committed(self.state, force=True)
        self.c.close()
        other = self.ck.Checkpointer(self.dir, 1)
        behind = type(self.state)(self.model, None)
        behind.step = 29
        behind.commit(check=False)
        other.committed(behind, force=True)
        other.close()
        self.assertEqual(read_checkpoint(self.c.path)["step"], 30, "an older commit replaced a newer one")
        self.assertEqual(checkpoint_step(self.c.path), 30)
        self.assertEqual(other.saved_step, 30, "the writer does not know what the file holds")
        self.assertEqual(sorted(os.listdir(self.dir)), sorted([self.ck.FILE_NAME, self.ck.LOCK_NAME]))
        self.commit(31)
        again = self.ck.Checkpointer(self.dir, 1)
        again.committed(self.state, force=True)
        again.close()
        self.assertEqual(checkpoint_step(self.c.path), 31, "a newer commit was not written")


@require_torch
class SaveTest(unittest.TestCase):
    def test_save_and_load_are_atomic_one_liners(self):
        import torch

        import ringside
        from ringside.errors import CheckpointFailed

        d = tempfile.mkdtemp(prefix="ringside-save-")
        path = os.path.join(d, "model.ckpt")
        model = torch.nn.Linear(2, 2)
        ringside.save({"model": model.state_dict(), "epoch": 3}, path)
        got = ringside.load(path)
        self.assertEqual(got["epoch"], 3)
        self.assertTrue(torch.equal(got["model"]["weight"], model.state_dict()["weight"]))
        with mock.patch.object(os, "fsync", side_effect=OSError(5, "Input/output error")):
            with self.assertRaises(CheckpointFailed):
                ringside.save({"epoch": 4}, path)
        self.assertEqual(ringside.load(path)["epoch"], 3)
        self.assertEqual(os.listdir(d), ["model.ckpt"])

        from ringside.elastic import State

        s = State(model, None)
        s.step = 5
        s.commit(check=False)
        ringside.save(s, path)
        self.assertEqual(ringside.load(path)["step"], 5)


if __name__ == "__main__":
    unittest.main()
