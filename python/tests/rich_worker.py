"""A live-mode trainer with what a ported DDP script holds: AdamW, a
LambdaLR scheduler, a GradScaler, dropout and data drawn from the global
random generators, committing every --commit-every steps; with --sampler,
its batches come from a ringside ElasticSampler through a DataLoader with
workers, and every step prints the dataset indices it trained. One JSON
line per step on stdout, as worker.py."""

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from ringside import elastic  # noqa: E402
from worker import COLLECTIVE_TIMEOUT_S, emit, run_reporting, setup_process  # noqa: E402


class Indexed(Dataset):
    """Item i is (i, features of i): the step can print what it trained."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return i, torch.randn(8, generator=g)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--step-time", type=float, default=0.02)
    p.add_argument("--commit-every", type=int, default=1)
    p.add_argument("--sampler", action="store_true")
    p.add_argument("--dataset", type=int, default=0)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--loader-workers", type=int, default=0)
    p.add_argument("--loader", choices=("batches", "sampler", "single"), default="batches",
                   help="batches: DataLoader(batch_sampler=sampler.batches(B)); sampler: DataLoader(sampler=sampler, "
                        "batch_size=B); single: DataLoader(sampler=sampler, batch_size=None), one index per step")
    p.add_argument("--shuffle", type=int, default=1)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--checkpoint-dir", default=None)
    p.add_argument("--checkpoint-every", type=int, default=1)
    a = p.parse_args()
    setup_process()
    # The same seed on every rank, as DDP scripts do: every rank draws the
    # same numbers, so a joiner that takes the sender's generators is where
    # the rank it replaces was.
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Dropout(0.25), nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=0.02)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.9 ** s)  # a lambda: not picklable
    scaler = torch.cuda.amp.GradScaler(enabled=torch.cuda.is_available())
    fields = dict(scheduler=sched, scaler=scaler, epoch=0)
    sampler = None
    if a.sampler:
        sampler = elastic.ElasticSampler(a.dataset, shuffle=bool(a.shuffle), seed=a.seed)
        fields["sampler"] = sampler
    state = elastic.State(model, opt, **fields)
    w_true = torch.linspace(-1, 1, 8).unsqueeze(1)

    def step_on(ddp, x, step, extra):
        loss = nn.functional.mse_loss(ddp(x), x @ w_true)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        if sampler is not None:
            sampler.record_batch(a.batch)
        time.sleep(a.step_time)
        state.step = step
        emit(step=step, generation=state.generation, rank=state.rank, world=state.world_size, sum_ok=True,
             loss=loss.item(), lr=opt.param_groups[0]["lr"], checksum=state.checksum(), **extra)
        if step % a.commit_every == 0:
            state.commit()

    def train_plain(state):
        emit(event="ring", generation=state.generation, rank=state.rank, world=state.world_size,
             step=state.step, checksum=state.checksum())
        ddp = DistributedDataParallel(state.model)
        while state.step < a.steps:
            x = torch.randn(16, 8) * (1 + 0.1 * random.random() + 0.1 * float(np.random.rand()))
            step_on(ddp, x, state.step + 1, {})
        return state.step

    def train_sampler(state):
        emit(event="ring", generation=state.generation, rank=state.rank, world=state.world_size,
             step=state.step, checksum=state.checksum(), epoch=sampler.epoch)
        ddp = DistributedDataParallel(state.model)
        if a.loader == "batches":
            loader = DataLoader(Indexed(a.dataset), batch_sampler=sampler.batches(a.batch),
                                num_workers=a.loader_workers, collate_fn=elastic.collate_allow_empty())
        else:
            loader = DataLoader(Indexed(a.dataset), sampler=sampler, num_workers=a.loader_workers,
                                batch_size=None if a.loader == "single" else a.batch)
        while sampler.epoch < a.epochs:
            for batch in loader:
                idx, x = batch if batch is not None else (torch.zeros(0, dtype=torch.int64), torch.zeros(0, 8))
                if a.loader == "single":
                    idx, x = torch.tensor([idx]), x.unsqueeze(0)
                emit(event="batch", generation=state.generation, rank=state.rank, step=state.step + 1,
                     epoch=sampler.epoch, indices=idx.tolist())
                step_on(ddp, x, state.step + 1, {"epoch": sampler.epoch})
            sampler.set_epoch(sampler.epoch + 1)
            state.commit()
        return state.step

    return run_reporting(train_sampler if a.sampler else train_plain, state, socket=a.socket, connect_timeout=10,
                         reform_after=2.0, form_timeout=20.0, timeout=COLLECTIVE_TIMEOUT_S,
                         checkpoint_dir=a.checkpoint_dir, checkpoint_every=a.checkpoint_every)


if __name__ == "__main__":
    sys.exit(main())
