"""The gradient noise scale: Pollux's estimator against a known noise scale,
the DDP hook's norms and all-reduce against a direct computation in two
real gloo processes, and the heartbeat's validation."""

import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import unittest

from fakesidecar import FakeJob, FakeSidecar
from torchreq import require_torch

from ringside.client import Client
from ringside.gns import GradientNoiseScale

HERE = os.path.dirname(os.path.abspath(__file__))


class EstimatorTest(unittest.TestCase):
    def test_it_finds_the_noise_scale_of_synthetic_gradients(self):
        # Per-sample gradients G* + N(0, sigma^2 I) in d dimensions: tr(S) =
        # d sigma^2, so B_noise = d sigma^2 / |G*|^2 = 20 * 4 / 8 = 10.
        rnd = random.Random(1)
        d, sigma, m, b = 20, 2.0, 4, 2
        true = [(8.0 / d) ** 0.5] * d
        est = GradientNoiseScale(smoothing=0.995)
        for _ in range(3000):
            locals_ = [[true[i] + sum(rnd.gauss(0, sigma) for _ in range(b)) / b for i in range(d)] for _ in range(m)]
            mean = [sum(g[i] for g in locals_) / m for i in range(d)]
            est.observe(sum(x * x for x in locals_[0]), sum(x * x for x in mean), m, b)
        self.assertAlmostEqual(est.value(), 10.0, delta=2.0)

    def test_no_estimate_from_one_rank_or_before_a_step(self):
        est = GradientNoiseScale()
        self.assertIsNone(est.value())
        est.observe(5.0, 5.0, 1, 32)
        self.assertIsNone(est.value())
        est.observe(2.0, 3.0, 2, 32)  # noise estimate below 0: no noise measured
        self.assertEqual(est.value(), 0.0)

    def test_fold_averages_the_steps_since_the_last_and_takes_the_batch_from_the_samples(self):
        est = GradientNoiseScale(smoothing=0.0)
        est._world = 2
        est._local, est._total = 9.0, 9.0
        est.fold(10, 320)  # the first fold only marks where counting starts
        self.assertIsNone(est.value())
        # Two steps of 32 samples, per step |g|^2 = 5 and |G|^2 = 3: |G*|^2 =
        # (2*3 - 5)/1 = 1, tr(S) = 2*32*(5 - 3)/1 = 128.
        est._local, est._total = 10.0, 6.0
        est.fold(12, 384)
        self.assertAlmostEqual(est.value(), 128.0)
        est._local, est._total = 10.0, 6.0
        est.fold(5, 160)  # a restore went back: nothing folded
        self.assertAlmostEqual(est.value(), 128.0)

    def test_smoothing_out_of_range_is_refused(self):
        with self.assertRaises(ValueError):
            GradientNoiseScale(smoothing=1.0)


class HeartbeatTest(unittest.TestCase):
    def setUp(self):
        d = tempfile.mkdtemp(prefix="ringside-gns-")
        self.sc = FakeSidecar(os.path.join(d, "s.sock"), FakeJob(addrs={"w0": "127.0.0.2"}), member="w0")
        self.addCleanup(self.sc.close)
        self.c = Client(os.path.join(d, "s.sock"))

    def test_the_noise_scale_travels_only_when_measured_and_valid(self):
        self.c.heartbeat(1, 32, 0.1, 1)
        self.c.heartbeat(2, 64, 0.1, 1, gns=512.25)
        self.assertNotIn("gns", self.sc.heartbeats[0])
        self.assertEqual(self.sc.heartbeats[1]["gns"], 512.25)
        for bad in (float("nan"), float("inf"), -1.0):
            with self.assertRaisesRegex(ValueError, "gns"):
                self.c.heartbeat(3, 96, 0.1, 1, gns=bad)


HOOK_WORKER = r"""
import json, os, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from ringside.gns import GradientNoiseScale
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=rank, world_size=2)
torch.manual_seed(0)
model = torch.nn.Linear(6, 1)
plain = torch.nn.Linear(6, 1)
plain.load_state_dict(model.state_dict())
ddp = DistributedDataParallel(model)
gns = GradientNoiseScale()
gns.attach(ddp)
torch.manual_seed(10 + rank)
x, y = torch.randn(8, 6), torch.randn(8, 1)
torch.nn.functional.mse_loss(ddp(x), y).backward()
torch.nn.functional.mse_loss(plain(x), y).backward()
local = [p.grad.clone() for p in plain.parameters()]
mean = [g.clone() for g in local]
for g in mean:
    dist.all_reduce(g)
    g.div_(2)
print(json.dumps({
    "hook_local": float(gns._local), "hook_total": float(gns._total),
    "local": sum(float(g.pow(2).sum()) for g in local), "total": sum(float(g.pow(2).sum()) for g in mean),
    "ddp_grads_are_the_mean": all(torch.allclose(p.grad, g, atol=1e-6) for p, g in zip(model.parameters(), mean)),
}), flush=True)
dist.destroy_process_group()
"""


@require_torch
class HookTest(unittest.TestCase):
    def test_the_hook_measures_local_and_all_reduced_norms_and_still_averages(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."))
        procs = [subprocess.Popen([sys.executable, "-c", HOOK_WORKER, str(r), port], stdout=subprocess.PIPE, env=env)
                 for r in range(2)]
        outs = [p.communicate(timeout=120)[0] for p in procs]
        for p in procs:
            self.assertEqual(p.returncode, 0)
        for out in outs:
            d = json.loads(out.decode().strip().splitlines()[-1])
            self.assertTrue(d["ddp_grads_are_the_mean"], d)
            self.assertAlmostEqual(d["hook_local"], d["local"], places=5)
            self.assertAlmostEqual(d["hook_total"], d["total"], places=5)


if __name__ == "__main__":
    unittest.main()
