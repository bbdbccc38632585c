"""What a commit costs on the host (issue point 5): one set of host
buffers reused from commit to commit, device-to-host copies on a side
stream after the step's work, and a sync that hashes the commit as it
sends it, once per commit, never the model on its device."""

import contextlib
import types
import unittest
from unittest import mock

from torchreq import require_torch

from ringside import _current


@require_torch
class BufferReuseTest(unittest.TestCase):
    def setUp(self):
        import torch

        from ringside.elastic import State

        torch.manual_seed(0)
        self.torch = torch
        self.model = torch.nn.Linear(4, 2)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=0.1)
        self.state = State(self.model, self.opt)

    def train_step(self):
        loss = self.model(self.torch.randn(8, 4)).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.state.step += 1

    def buffers(self):
        snap = self.state._snapshot
        return [snap["model"]["weight"], snap["model"]["bias"], snap["optimizer"]["state"][0]["exp_avg"]]

    def test_every_commit_copies_into_the_same_host_buffers(self):
        self.train_step()
        self.state.commit()
        first = self.buffers()
        for _ in range(3):
            self.train_step()
            self.state.commit()
            self.assertTrue(all(a is b for a, b in zip(self.buffers(), first)), "a commit allocated new buffers")
        self.assertTrue(self.torch.equal(first[0], self.model.weight), "the buffer does not hold the last step")
        self.assertTrue(self.torch.equal(first[2], self.opt.state[self.model.weight]["exp_avg"]))

    def test_a_new_shape_gets_a_new_buffer(self):
        self.train_step()
        self.state.commit()
        weight, bias = self.buffers()[:2]
        self.model.weight = self.torch.nn.Parameter(self.torch.zeros(3, 4))
        self.state.step += 1
        self.state.commit()
        self.assertIsNot(self.state._snapshot["model"]["weight"], weight)
        self.assertEqual(tuple(self.state._snapshot["model"]["weight"].shape), (3, 4))
        self.assertIs(self.state._snapshot["model"]["bias"], bias)

    def test_a_commit_being_written_to_disk_is_never_overwritten(self):
        self.train_step()
        self.state.commit()
        lent = self.state._lend()
        kept = lent["model"]["weight"].clone()
        self.train_step()
        self.state.commit()
        self.assertTrue(self.torch.equal(lent["model"]["weight"], kept), "the next commit wrote into a lent commit")
        again = self.buffers()
        self.train_step()
        self.state.commit()
        self.assertTrue(all(a is b for a, b in zip(self.buffers(), again)))


class _FakeCuda:
    """torch.cuda's stream and event calls, logged; the copies are real."""

    def __init__(self):
        self.log = []
        self.streams = 0
        fake = self

        class Event:
            def record(self, stream):
                fake.log.append(("record", stream.name))

            def synchronize(self):
                fake.log.append(("event waited",))

        class Stream:
            def __init__(self, device=None, name="side"):
                self.name = name
                if name == "side":
                    fake.streams += 1

            def wait_event(self, event):
                fake.log.append(("waits for the event", self.name))

            def synchronize(self):
                fake.log.append(("synchronized", self.name))

        self.Event, self.Stream = Event, Stream

    def current_stream(self, device=None):
        return self.Stream(device, name="compute")

    @contextlib.contextmanager
    def stream(self, s):
        self.log.append(("enter", s.name))
        yield
        self.log.append(("leave", s.name))


@require_torch
class SideStreamTest(unittest.TestCase):
    def test_the_copies_run_on_a_side_stream_after_the_steps_work(self):
        import torch

        from ringside.state import _HostCopies

        cuda = _FakeCuda()
        copies = _HostCopies(cuda)
        src, dst = torch.arange(6.0), torch.zeros(6)
        for i in range(2):
            cuda.log.clear()
            copies.settle({src.device})
            copies.copy(dst, src + i)
            copies.finish()
            self.assertEqual(cuda.log, [("record", "compute"), ("waits for the event", "side"), ("event waited",),
                                        ("enter", "side"), ("leave", "side"), ("synchronized", "side")])
            self.assertTrue(torch.equal(dst, src + i))
        self.assertEqual(cuda.streams, 1, "a side stream was made for every commit")


@require_torch
class SyncDigestTest(unittest.TestCase):
    def setUp(self):
        import torch

        from ringside.elastic import State

        self.torch = torch
        self.model = torch.nn.Linear(4, 2)
        self.state = State(self.model, torch.optim.SGD(self.model.parameters(), lr=0.1))
        _current.set_group(types.SimpleNamespace(rank=0, world_size=1, backend="gloo", aborted=False))
        self.addCleanup(_current.clear_group)

    def test_a_sync_hashes_the_commit_as_it_sends_it_once_per_commit(self):
        from ringside import state as state_mod

        hashed = []

        def digest(named):
            named = list(named)
            hashed.append(named)
            return real(named)

        def unread(*a, **kw):
            raise AssertionError("the sync read the model on its device")

        def gather(out, t):
            out[0].copy_(t)

        real = state_mod.tensors_digest
        self.state.step = 1
        self.state.commit()
        sent = state_mod._deserialize(state_mod._serialize(self.state._snapshot))["model"]
        with mock.patch.object(state_mod, "tensors_digest", digest), \
                mock.patch.object(self.model, "state_dict", unread), \
                mock.patch("torch.distributed.all_gather", gather):
            self.state.sync()
            self.state.sync()
        self.assertEqual(len(hashed), 1, "the same commit was hashed again")
        self.assertEqual([n for n, _ in hashed[0]], list(sent))
        self.assertTrue(all(self.torch.equal(t, sent[n]) for n, t in hashed[0]), "what was hashed is not what is sent")
        self.state.step = 2
        self.state.commit()
        with mock.patch.object(state_mod, "tensors_digest", digest), mock.patch("torch.distributed.all_gather", gather):
            self.state.sync()
        self.assertEqual(len(hashed), 2, "a new commit was not hashed")


if __name__ == "__main__":
    unittest.main()
