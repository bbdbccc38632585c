#!/usr/bin/env python3
"""A small but real PyTorch DDP job under ringside.

An MLP learns a fixed random "teacher" MLP from data this script generates
deterministically (a batch is a function of the step and the rank), with
DistributedDataParallel over gloo (NCCL on CUDA).

Live mode (default): ringside.elastic.run keeps the process training through
crashes, drains and scale-ups; the group re-forms in place.

    RINGSIDE_SOCKET=/var/run/ringside/ringside.sock python3 train.py

Restart mode: an unmodified torchrun-style script under `ringside exec`,
which restarts it on every generation; it reads RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT and checkpoints to a file so restarts go on.

    ringside exec -- python3 train.py --mode restart --checkpoint /shared/ckpt.pt

Every committed step (in live mode; every completed one in restart mode) prints
one JSON line on stdout,

    {"step": 12, "generation": 3, "rank": 1, "world": 3, "sum_ok": true, "t": 1767225600.12,
     "loss": 0.0412, "checksum": "5f2c..."}

(checksum: of the parameters after the step; equal on every rank), and every
group formed prints {"event": "ring", "generation", "rank", "world", "step",
"checksum", "t"}. Logs go to stderr. Exit codes: 0 once --steps is reached or
after a drain; 1 on an error; 3 when the sidecar cannot be reached or speaks
another API version; 4 when a sync found corrupt state.
"""

import argparse
import json
import logging
import os
import signal
import sys
import time


def _import_ringside():
    """ringside from the installed package, else from this checkout."""
    try:
        import ringside  # noqa: F401
    except ImportError:
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(here, "..", "..", "python"))


_import_ringside()

EXIT_FAILED, EXIT_NO_SIDECAR, EXIT_CORRUPT = 1, 3, 4
IN, HIDDEN = 16, 64


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="An MLP trained with DDP under ringside (live or restart mode).")
    p.add_argument("--mode", choices=("live", "restart"), default="live",
                   help="live: ringside.elastic.run re-forms the group in place; restart: torchrun's environment under `ringside exec`")
    p.add_argument("--socket", default=os.environ.get("RINGSIDE_SOCKET"),
                   help="the sidecar's API socket or http:// URL (live mode; env RINGSIDE_SOCKET)")
    p.add_argument("--steps", type=int, default=0, help="stop once the job reaches this step (0: until drained)")
    p.add_argument("--step-time", type=float, default=0.05,
                   help="seconds of extra compute per step, simulated by a sleep (keeps many trainers on few cores)")
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0, help="seeds the model, the teacher and the data")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--connect-timeout", type=float, default=30.0,
                   help="seconds the sidecar may be unreachable before exiting with 3")
    p.add_argument("--collective-timeout", type=float, default=60.0,
                   help="seconds one collective may take; the group re-forms after (live mode)")
    p.add_argument("--lines-dir", default=os.environ.get("TRAIN_LINES_DIR", ""),
                   help="also append every stdout line to DIR/<pid>.jsonl (for tests; env TRAIN_LINES_DIR)")
    p.add_argument("--measure-gns", action="store_true",
                   help="live mode: measure the gradient noise scale (state.measure_gns) for the heartbeats")
    p.add_argument("--stats-dir", default="",
                   help="live mode: append what each group's sync moved and what commits took so far to "
                        "DIR/<member>-<pid>.jsonl, one line per group formed (for `ringside bench recovery`)")
    p.add_argument("--checkpoint", default="", help="restart mode: the checkpoint file rank 0 writes and every rank reads")
    p.add_argument("--checkpoint-dir", default="",
                   help="live mode: the directory rank 0 writes the last commit to (every --checkpoint-every steps and "
                        "when drained) and every trainer starts from, so a job that lost every member (suspended by a "
                        "queue, all pods preempted) resumes from its last commit")
    p.add_argument("--checkpoint-every", type=int, default=1, help="steps between checkpoints")
    p.add_argument("--log-level", default=os.environ.get("RINGSIDE_LOG_LEVEL", "info"))
    a = p.parse_args(argv)
    if a.steps < 0 or a.step_time < 0 or a.batch < 1 or a.checkpoint_every < 1:
        p.error("--steps and --step-time must be >= 0, --batch and --checkpoint-every >= 1")
    return a


_copy = None


def emit(**kv):
    kv["t"] = round(time.time(), 6)
    line = json.dumps(kv) + "\n"
    sys.stdout.write(line)
    sys.stdout.flush()
    if _copy is not None:
        _copy.write(line)
        _copy.flush()


class Job:
    """The model, the teacher and the data, the same in both modes."""

    def __init__(self, a):
        import torch
        import torch.nn as nn

        self.torch, self.nn, self.a = torch, nn, a
        torch.set_num_threads(a.threads)
        torch.manual_seed(a.seed + 1)
        self.teacher = nn.Sequential(nn.Linear(IN, 32), nn.Tanh(), nn.Linear(32, 1)).requires_grad_(False)
        torch.manual_seed(a.seed)
        self.model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                                   nn.Linear(HIDDEN, 1))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=a.lr, momentum=0.9)

    def batch(self, step, rank):
        g = self.torch.Generator().manual_seed(self.a.seed * 1_000_003 + step * 4099 + rank)
        x = self.torch.randn(self.a.batch, IN, generator=g)
        return x, self.teacher(x)

    def step(self, ddp, step, rank, device):
        x, y = self.batch(step, rank)
        loss = self.nn.functional.mse_loss(ddp(x.to(device)), y.to(device))
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        if self.a.step_time:
            time.sleep(self.a.step_time)
        return loss.item()


def device_for(local_rank):
    import torch

    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def run_live(a, log):
    from ringside import elastic
    from ringside.errors import IncompatibleSidecar, SidecarLost, SidecarUnreachable

    job = Job(a)
    dev = device_for(int(os.environ.get("LOCAL_RANK", "0") or 0))
    job.model.to(dev)
    state = elastic.State(job.model, job.opt)

    def train(state):
        emit(event="ring", generation=state.generation, rank=state.rank, world=state.world_size,
             step=state.step, checksum=state.checksum(), member=state.member)
        if a.stats_dir:
            st = state.stats
            with open(os.path.join(a.stats_dir, "%s-%d.jsonl" % (state.member, os.getpid())), "a") as f:
                f.write(json.dumps({"member": state.member, "generation": state.generation,
                                    "sync_bytes": st["last_sync_bytes"], "commits": st["commits"],
                                    "commit_s": st["commit_s"]}) + "\n")
        ddp = state.ddp(device_ids=[dev.index] if dev.type == "cuda" else None)
        if a.measure_gns:
            state.measure_gns(ddp, batch_size=a.batch)  # times the all-reduce too
        else:
            state.measure_wait(ddp)  # compute and wait apart, for the leader's straggler check
        while a.steps == 0 or state.step < a.steps:
            step = state.step + 1
            loss = job.step(ddp, step, state.rank, dev)
            state.step, state.samples = step, state.samples + a.batch
            # A step whose generation ended as it finished is not committed
            # (commit raises) and is trained again: print committed steps only.
            state.commit()
            emit(step=step, generation=state.generation, rank=state.rank, world=state.world_size, sum_ok=True,
                 loss=round(loss, 6), checksum=state.checksum(), member=state.member)
        return state.step

    try:
        done = elastic.run(train, state, socket=a.socket, connect_timeout=a.connect_timeout,
                           timeout=a.collective_timeout, checkpoint_dir=a.checkpoint_dir or None,
                           checkpoint_every=a.checkpoint_every)
    except (SidecarUnreachable, IncompatibleSidecar, SidecarLost) as e:
        log.error("%s", e)
        return EXIT_NO_SIDECAR
    except elastic.StateCorrupt as e:
        log.error("%s", e)
        return EXIT_CORRUPT
    log.info("%s at step %d", "reached --steps" if done is not None else "drained", state.step)
    return 0


def die_with_parent():
    """Restart mode: end with the launcher (`ringside exec`), as a pod's
    processes end together."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            os._exit(EXIT_FAILED)
    except (OSError, AttributeError):
        pass


def run_restart(a, log):
    import datetime

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    import ringside

    die_with_parent()
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]
    if missing:
        log.error("restart mode needs %s in the environment: run it under `ringside exec` (or torchrun)", ", ".join(missing))
        return EXIT_FAILED
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    generation = int(os.environ.get("RINGSIDE_GENERATION") or os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)
    job = Job(a)
    dev = device_for(int(os.environ.get("LOCAL_RANK", "0") or 0))
    job.model.to(dev)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=60))
    step = 0
    box = [None]
    if rank == 0 and a.checkpoint and os.path.exists(a.checkpoint):
        box[0] = ringside.load(a.checkpoint)
    dist.broadcast_object_list(box, src=0)
    if box[0] is not None:
        job.model.load_state_dict(box[0]["model"])
        job.opt.load_state_dict(box[0]["optimizer"])
        step = box[0]["step"]
    from ringside.state import tensors_digest

    checksum = lambda: tensors_digest(job.model.state_dict().items()).hex()[:16]  # noqa: E731
    member = os.environ.get("RINGSIDE_MEMBER", "")
    emit(event="ring", generation=generation, rank=rank, world=world, step=step, checksum=checksum(), member=member)
    ddp = DistributedDataParallel(job.model, device_ids=[dev.index] if dev.type == "cuda" else None)
    while a.steps == 0 or step < a.steps:
        step += 1
        loss = job.step(ddp, step, rank, dev)
        emit(step=step, generation=generation, rank=rank, world=world, sum_ok=True, loss=round(loss, 6),
             checksum=checksum(), member=member)
        if rank == 0 and a.checkpoint and step % a.checkpoint_every == 0:
            # Atomic (a temporary file, fsync, rename): a restart's stop,
            # which may come at any moment, never leaves half a file.
            ringside.save({"step": step, "model": job.model.state_dict(), "optimizer": job.opt.state_dict()},
                          a.checkpoint)
    dist.destroy_process_group()
    return 0


def main(argv=None):
    a = parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("train")
    if a.lines_dir:
        global _copy
        os.makedirs(a.lines_dir, exist_ok=True)
        _copy = open(os.path.join(a.lines_dir, "%d.jsonl" % os.getpid()), "a")
    try:
        import torch  # noqa: F401
        import torch.distributed as dist
    except ImportError:
        log.error("torch is not importable by %s: install PyTorch (Debian: apt-get install python3-torch)", sys.executable)
        return EXIT_FAILED
    if not dist.is_available():
        log.error("this torch has no torch.distributed")
        return EXIT_FAILED
    return run_live(a, log) if a.mode == "live" else run_restart(a, log)


if __name__ == "__main__":
    sys.exit(main())
