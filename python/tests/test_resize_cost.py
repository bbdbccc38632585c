"""What a re-formation costs in collectives: the ranks tell each other
their commits through the store as they arrive, so survivors holding the
same commit sync without a collective, and state.ddp() builds DDP without
its start-up shape check and broadcast, which would only repeat the sync."""

import threading
import time
import types
import unittest
from unittest import mock

from torchreq import require_torch

from ringside import _current


class _Collective(Exception):
    pass


def _no_collective(*a, **kw):
    raise _Collective("a collective ran")


@require_torch
class FormationExchangeTest(unittest.TestCase):
    def test_multi_get_answers_once_every_key_is_there_in_one_request(self):
        from ringside import _store

        srv = _store.Server("127.0.0.1", 29611, token="ab" * 32)
        self.addCleanup(srv.close)
        a = _store.make_client("127.0.0.1", 29611, 5, token="ab" * 32)
        b = _store.make_client("127.0.0.1", 29611, 5, token="ab" * 32)
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        a.set("hello/0", b"zero")
        got, sent = [], []
        real = a._call

        def call(req, wait_s=0.0):
            sent.append(req["op"])
            return real(req, wait_s)

        a._call = call
        t = threading.Thread(target=lambda: got.append(a.multi_get(["hello/0", "hello/1"])))
        t.start()
        time.sleep(0.3)  # the answer must wait for hello/1, however long that takes
        self.assertEqual(got, [], "multi_get answered before every key existed")
        b.set("hello/1", b"one")
        t.join(5)
        self.assertEqual(got, [[b"zero", b"one"]])
        self.assertEqual(set(sent), {"mget"}, "multi_get asked for the keys one by one")


@require_torch
class SyncFromHellosTest(unittest.TestCase):
    def setUp(self):
        import torch

        from ringside.elastic import State

        torch.manual_seed(0)
        self.torch = torch
        self.model = torch.nn.Linear(4, 2)
        self.state = State(self.model, torch.optim.SGD(self.model.parameters(), lr=0.1))
        self.state.step = 3
        self.state.commit()
        self.state.generation = 7
        _current.set_group(types.SimpleNamespace(rank=0, world_size=2, backend="gloo", aborted=False, generation=7))
        self.addCleanup(_current.clear_group)

    def test_ranks_holding_the_same_commit_sync_without_a_collective(self):
        hello = self.state._hello()
        with mock.patch("torch.distributed.all_gather", _no_collective), \
                mock.patch("torch.distributed.broadcast", _no_collective):
            self.assertEqual(self.state._sync([hello, hello]), 0)
        self.assertEqual(self.state.stats["last_sync_bytes"], 0)

    def test_a_rank_behind_or_a_hello_not_understood_falls_back_to_the_collectives(self):
        from ringside import state as state_mod
        from ringside.errors import CollectiveFailed

        hello = self.state._hello()
        step, params, rest = state_mod._ENTRY.unpack(hello)
        behind = state_mod._ENTRY.pack(step - 1, params, rest)
        for hellos in ([hello, behind], [hello, b"short"], None):
            with mock.patch("torch.distributed.all_gather", _no_collective), \
                    mock.patch("torch.distributed.send", _no_collective), \
                    mock.patch("torch.distributed.broadcast", _no_collective):
                with self.assertRaises((_Collective, CollectiveFailed),
                                       msg="hellos %r synced without the collectives" % (hellos,)):
                    self.state._sync(hellos)

    def test_the_hello_goes_back_to_the_last_commit(self):
        committed = self.model.weight.detach().clone()
        with self.torch.no_grad():
            self.model.weight.add_(1.0)  # a step that never committed
        self.state._hello()
        self.assertTrue(self.torch.equal(self.model.weight, committed))


@require_torch
class DDPWithoutStartupSyncTest(unittest.TestCase):
    def setUp(self):
        import torch
        import torch.distributed as dist

        from ringside.elastic import State

        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        self.addCleanup(dist.destroy_process_group)
        self.torch, self.dist = torch, dist
        self.model = torch.nn.Linear(4, 2)
        self.state = State(self.model, torch.optim.SGD(self.model.parameters(), lr=0.1))
        self.state.generation = 2
        _current.set_group(types.SimpleNamespace(rank=0, world_size=1, backend="gloo", aborted=False, generation=2))
        self.addCleanup(_current.clear_group)

    def startup_collectives(self, build):
        ran = []

        def record(name, real):
            def f(*a, **kw):
                ran.append(name)
                return real(*a, **kw)
            return f

        with mock.patch.object(self.dist, "_broadcast_coalesced",
                               record("broadcast", self.dist._broadcast_coalesced)), \
                mock.patch.object(self.dist, "_verify_params_across_processes",
                                  record("verify", self.dist._verify_params_across_processes)):
            ddp = build()
        return ddp, ran

    def test_a_synced_generation_builds_ddp_without_its_startup_collectives(self):
        from torch.nn.parallel import DistributedDataParallel

        import torch.nn.parallel.distributed as ddp_mod

        helpers = ddp_mod._verify_param_shape_across_processes, ddp_mod._sync_module_states
        hello = self.state._hello()
        self.state._sync([hello])
        _, plain = self.startup_collectives(lambda: DistributedDataParallel(self.model))
        self.assertTrue(plain, "plain DDP ran no start-up collective here: this test shows nothing")
        ddp, ran = self.startup_collectives(self.state.ddp)
        self.assertEqual(ran, [], "state.ddp() repeated the sync")
        self.assertIsInstance(ddp, DistributedDataParallel)
        self.model(self.torch.randn(3, 4)).sum().backward()  # the wrapper trains
        ddp(self.torch.randn(3, 4)).sum().backward()
        self.assertEqual((ddp_mod._verify_param_shape_across_processes, ddp_mod._sync_module_states), helpers,
                         "torch's start-up helpers were not put back")

    def test_before_the_sync_it_is_plain_ddp(self):
        _, ran = self.startup_collectives(self.state.ddp)
        self.assertIn("broadcast", ran, "an unsynced generation skipped DDP's broadcast")


if __name__ == "__main__":
    unittest.main()
