import unittest

from torchreq import require_torch


@require_torch
class StateTest(unittest.TestCase):
    def setUp(self):
        import torch

        from ringside.elastic import State

        torch.manual_seed(0)
        self.torch = torch
        self.model = torch.nn.Linear(4, 2)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=0.1)
        self.state = State(self.model, self.opt, epoch=0, history=[])

    def train_step(self):
        x = self.torch.randn(8, 4)
        loss = self.model(x).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()

    def test_restore_goes_back_to_the_last_commit(self):
        self.train_step()
        self.state.step, self.state.epoch = 1, 1
        self.state.history.append("one")
        self.state.commit()
        committed = self.state.checksum()
        exp_avg = self.opt.state_dict()["state"][0]["exp_avg"].clone()

        self.train_step()
        self.state.step, self.state.epoch = 2, 2
        self.state.history.append("two")
        self.assertNotEqual(self.state.checksum(), committed)

        self.state.restore()
        self.assertEqual(self.state.checksum(), committed)
        self.assertEqual((self.state.step, self.state.epoch, self.state.history), (1, 1, ["one"]))
        self.assertTrue(self.torch.equal(self.opt.state_dict()["state"][0]["exp_avg"], exp_avg))

    def test_the_commit_is_a_copy_training_does_not_change(self):
        self.state.commit()
        self.state.restore()
        self.train_step()  # updates the optimizer state in place
        self.train_step()
        self.state.restore()
        self.state.restore()
        self.assertEqual(self.state.committed_step, 0)
        self.assertFalse(self.opt.state_dict()["state"], "the optimizer state of the commit was updated in place")

    def test_checksum_tracks_the_parameters(self):
        a = self.state.checksum()
        self.assertEqual(a, self.state.checksum())
        with self.torch.no_grad():
            self.model.bias[0] += 1e-6
        self.assertNotEqual(a, self.state.checksum())

    def test_reserved_field_names_are_refused(self):
        from ringside.elastic import State

        with self.assertRaises(ValueError):
            State(self.model, self.opt, rank=3)

    def test_commit_without_run_does_not_check(self):
        self.state.commit()  # no sidecar: no GenerationChanged, no heartbeat
        self.state.check()


@require_torch
class StatefulTest(unittest.TestCase):
    def setUp(self):
        import torch

        torch.manual_seed(0)
        self.torch = torch
        self.model = torch.nn.Linear(4, 2)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=0.1)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: 0.5 ** s)

    def step(self):
        loss = self.model(self.torch.randn(8, 4)).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.sched.step()

    def test_a_scheduler_is_restored_in_place_and_steps_the_live_optimizer(self):
        from ringside.elastic import State

        state = State(self.model, self.opt, scheduler=self.sched)
        self.assertIs(state.scheduler, self.sched)
        self.step()
        state.commit()
        lr = self.opt.param_groups[0]["lr"]
        self.step()
        self.step()
        state.restore()
        self.assertIs(state.scheduler, self.sched, "the scheduler was replaced by a copy")
        self.assertEqual(self.sched.last_epoch, 1)
        self.assertEqual(self.opt.param_groups[0]["lr"], lr)
        self.step()  # the restored scheduler moves the live optimizer's LR
        self.assertEqual(self.opt.param_groups[0]["lr"], lr * 0.5)

    def test_objects_with_state_dict_and_registered_ones_round_trip(self):
        from ringside.elastic import State

        class Counter:
            def __init__(self):
                self.n = 0

            def state_dict(self):
                return {"n": self.n}

            def load_state_dict(self, sd):
                self.n = sd["n"]

        scaler = self.torch.cuda.amp.GradScaler(enabled=False)
        c, later = Counter(), Counter()
        state = State(self.model, self.opt, scaler=scaler, counter=c)
        state.register("later", later)
        c.n, later.n = 3, 4
        state.commit()
        c.n, later.n = 9, 9
        state.restore()
        self.assertEqual((c.n, later.n), (3, 4))
        with self.assertRaises(TypeError):
            state.register("x", object())

    def test_a_field_that_is_neither_plain_data_nor_stateful_is_refused(self):
        from ringside.elastic import State

        class Loader:
            pass

        with self.assertRaises(TypeError) as cm:
            State(self.model, self.opt, loader=Loader())
        self.assertIn("loader", str(cm.exception))
        self.assertIn("state_dict", str(cm.exception))

    def test_random_generators_are_committed_and_restored(self):
        import random

        import numpy as np

        from ringside.elastic import State

        state = State(self.model, self.opt)
        state.commit()
        first = (random.random(), float(np.random.rand()), self.torch.rand(3).tolist())
        state.restore()
        again = (random.random(), float(np.random.rand()), self.torch.rand(3).tolist())
        self.assertEqual(first, again)

    def test_save_and_load_round_trip_and_refuse_a_damaged_file(self):
        import os
        import tempfile

        from ringside.elastic import State
        from ringside.errors import StateCorrupt

        state = State(self.model, self.opt, scheduler=self.sched, epoch=2)
        self.step()
        state.step = 7
        state.commit()
        path = os.path.join(tempfile.mkdtemp(), "sub", "state.ckpt")
        state.save(path)
        self.assertEqual(os.listdir(os.path.dirname(path)), ["state.ckpt"], "a temporary file was left behind")

        m2 = self.torch.nn.Linear(4, 2)
        o2 = self.torch.optim.AdamW(m2.parameters(), lr=0.1)
        s2 = self.torch.optim.lr_scheduler.LambdaLR(o2, lambda s: 0.5 ** s)
        other = State(m2, o2, scheduler=s2, epoch=0)
        other.load(path)
        self.assertEqual((other.step, other.epoch, s2.last_epoch), (7, 2, 1))
        self.assertEqual(other.checksum(), state.checksum())
        self.assertEqual(o2.param_groups[0]["lr"], self.opt.param_groups[0]["lr"])

        with open(path, "r+b") as f:
            f.seek(40)
            b = f.read(1)
            f.seek(40)
            f.write(bytes([b[0] ^ 1]))
        with self.assertRaises(StateCorrupt):
            other.load(path)


@require_torch
class CodecTest(unittest.TestCase):
    def test_what_a_commit_holds_round_trips_exactly(self):
        import collections

        import numpy as np
        import torch

        from ringside import _codec

        value = {
            "od": collections.OrderedDict([("b", torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)), ("a", 1)]),
            0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(4)[::2]},
            "groups": [{"betas": (0.9, 0.999), "params": [0, 1], "foreach": None, "nan": float("inf")}],
            "rng": (3, tuple(range(5)), None),
            "np": np.arange(4, dtype=np.uint32), "scalar": np.float32(1.5), "n": np.int64(4),
            "size": torch.Size([2, 3]), "dtype": torch.float16, "bytes": b"\x00\xff", "bool": torch.tensor([True, False]),
            "empty": torch.zeros(0, 3),
        }
        out = _codec.decode(_codec.encode(value))
        self.assertIsInstance(out["od"], collections.OrderedDict)
        self.assertEqual(list(out["od"]), ["b", "a"])
        self.assertTrue(torch.equal(out["od"]["b"], value["od"]["b"]))
        self.assertEqual(out["od"]["b"].dtype, torch.bfloat16)
        self.assertTrue(torch.equal(out[0]["exp_avg"], value[0]["exp_avg"]))
        self.assertEqual(out["groups"][0]["betas"], (0.9, 0.999))
        self.assertEqual(out["rng"], (3, (0, 1, 2, 3, 4), None))
        self.assertTrue(np.array_equal(out["np"], value["np"]))
        self.assertEqual(out["np"].dtype, np.uint32)
        self.assertEqual((out["scalar"], out["n"]), (1.5, 4))
        self.assertEqual((out["size"], out["dtype"], out["bytes"]), (torch.Size([2, 3]), torch.float16, b"\x00\xff"))
        self.assertEqual(out["empty"].shape, (0, 3))
        self.assertEqual(out["groups"][0]["nan"], float("inf"))

    def test_truncated_payloads_are_refused(self):
        import torch

        from ringside import _codec

        payload = _codec.encode({"w": torch.ones(100)})
        for cut in (5, len(_codec.MAGIC) + 3, len(payload) - 1):
            with self.assertRaises(ValueError):
                _codec.decode(payload[:cut])


if __name__ == "__main__":
    unittest.main()
