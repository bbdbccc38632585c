"""A live-mode trainer under a batch policy (ringside.batch): a linear model
trained with Adam on an indexed dataset through an ElasticSampler whose
rounds the policy sets, with gradient accumulation over the plan's
micro-batches and the skip-step guard. It prints, per generation, the
plan and the learning rate in force, and per committed step this rank's
samples and its share of the global mean loss (their sum over the ranks
is the step's global loss). --nan-at STEP makes rank 1 train a NaN input
at that step (once); --no-guard trains without the guard."""

import argparse
import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from ringside import batch as batch_mod  # noqa: E402
from ringside import elastic  # noqa: E402
from worker import COLLECTIVE_TIMEOUT_S, emit, run_reporting, setup_process  # noqa: E402

FEATURES = 6


def sample(i):
    """Item i of the dataset: its features and target, the same everywhere."""
    g = torch.Generator().manual_seed(1000 + i)
    x = torch.randn(FEATURES, generator=g)
    return x, (x * torch.linspace(-1, 1, FEATURES)).sum(0, keepdim=True) + 0.1


def build(lr):
    """The model and its optimizer, the same on every rank (and in a test's
    reference run)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))
    return model, torch.optim.Adam(model.parameters(), lr=lr)


@contextlib.contextmanager
def no_sync(net):
    """Gradients accumulate locally inside: DDP's no_sync, FSDP2's switch."""
    if hasattr(net, "no_sync"):
        with net.no_sync():
            yield
        return
    net.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        net.set_requires_gradient_sync(True)


def fsdp2(state, a):
    """This generation's FSDP2 model (a fresh one, sharded over the new
    group) and optimizer, given their shards of the last commit."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch 2.2-2.5
        from torch.distributed._composable.fsdp import fully_shard
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (state.world_size,))
    model, _ = build(a.lr)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    state.shard(model, opt, replicas=a.replicas)
    return model, opt


def policy_of(a):
    if a.policy == "global":
        return batch_mod.KeepGlobalBatch(a.global_batch, micro_batch=a.micro_batch)
    return batch_mod.KeepPerRankBatch(a.batch, lr_scaling=a.lr_scaling)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--policy", choices=("global", "perrank"), default="global")
    p.add_argument("--global-batch", type=int, default=60)
    p.add_argument("--micro-batch", type=int, default=None)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr-scaling", default="linear")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--dataset", type=int, default=100000)
    p.add_argument("--nan-at", type=int, default=0)
    p.add_argument("--no-guard", action="store_true")
    p.add_argument("--zero", action="store_true", help="shard the optimizer state (ZeroRedundancyOptimizer)")
    p.add_argument("--hold", action="append", default=[], metavar="STEP:GENERATION",
                   help="at STEP in GENERATION, wait for the next generation (or a drain) before training on")
    p.add_argument("--fsdp2", action="store_true", help="shard the model and its optimizer with FSDP2 (torch >= 2.2)")
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--checkpoint-every", type=int, default=2)
    a = p.parse_args()
    setup_process()
    model, opt = build(a.lr)
    sampler = elastic.ElasticSampler(a.dataset, shuffle=True, seed=5)
    state = elastic.State(model, None if a.zero else opt, batch_policy=policy_of(a), sampler=sampler, nan_done=False)

    holds = {tuple(int(x) for x in h.split(":")) for h in a.hold}

    def hold(state):
        # The test resizes the job here: nothing is trained meanwhile.
        if (state.step, state.generation) in holds:
            emit(event="hold", generation=state.generation, rank=state.rank, step=state.step)
            while True:
                state.check()
                time.sleep(0.02)

    def train(state):
        nonlocal opt
        if a.zero:
            from torch.distributed.optim import ZeroRedundancyOptimizer

            opt = ZeroRedundancyOptimizer(state.model.parameters(), torch.optim.Adam, lr=a.lr)
            state.shard(opt, replicas=a.replicas)
            emit(event="shard", generation=state.generation, rank=state.rank, step=state.step,
                 owned=sorted({int(p.name.split("/")[0]) for p in state._shard["pieces"]}),
                 restores=state.stats["shard_restores"])
        if a.fsdp2:
            net, opt = fsdp2(state, a)
        else:
            net = DistributedDataParallel(state.model)
        plan = state.batch
        emit(event="plan", generation=state.generation, rank=state.rank, world=state.world_size, step=state.step,
             global_batch=plan.global_batch, batch_size=plan.batch_size, accum_steps=plan.accum_steps,
             lr_scale=plan.lr_scale, lr=opt.param_groups[0]["lr"])
        elastic.log.info("generation %d: %s", state.generation, plan.describe())
        while a.steps == 0 or state.step < a.steps:
            for idx in sampler.batches():
                hold(state)
                xs, ys = zip(*(sample(i) for i in idx))
                x, y = torch.stack(xs), torch.stack(ys)
                if a.nan_at and state.step + 1 == a.nan_at and state.rank == 1 and not state.nan_done:
                    x[0, 0] = float("nan")
                    state.nan_done = True  # a field: rolled back with the step, so kept aside below
                micro = list(zip(plan.micro_batches(x), plan.micro_batches(y)))
                share = 0.0
                opt.zero_grad()
                for j, (mx, my) in enumerate(micro):
                    w = plan.loss_weight(len(mx))
                    if j < len(micro) - 1:
                        with no_sync(net):
                            loss = nn.functional.mse_loss(net(mx), my)
                            (loss * w).backward()
                    else:
                        loss = nn.functional.mse_loss(net(mx), my)
                        (loss * w).backward()
                    share += loss.item() * len(mx) / plan.global_batch
                nan_done = state.nan_done
                stepped = a.no_guard or state.guard(loss)
                state.nan_done = nan_done
                if stepped:
                    opt.step()
                    state.step += 1
                sampler.record_batch()
                state.samples += len(idx)
                state.commit()
                committed_finite = all(bool(torch.isfinite(t).all()) for t in state._snapshot["model"].values())
                emit(step=state.step, generation=state.generation, rank=state.rank, world=state.world_size,
                     n=len(idx), stepped=stepped, loss_share=share, lr=opt.param_groups[0]["lr"],
                     committed_finite=committed_finite, skipped=state.stats["skipped_steps"], sum_ok=True,
                     checksum="" if a.fsdp2 else state.checksum())
                if a.steps and state.step >= a.steps:
                    break
            else:
                sampler.set_epoch(sampler.epoch + 1)
        emit(event="summary", rank=state.rank, text=state.summary())
        return state.step

    return run_reporting(train, state, socket=a.socket, connect_timeout=10, reform_after=2.0, form_timeout=20.0,
                         timeout=COLLECTIVE_TIMEOUT_S, checkpoint_dir=a.checkpoint_dir,
                         checkpoint_every=a.checkpoint_every)


if __name__ == "__main__":
    sys.exit(main())
