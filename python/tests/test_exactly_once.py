"""Exactly-once data through random kills, joins and drains: a pure-Python
simulation of the sampler/state protocol across generations (no processes,
no collectives), driving the real ElasticSampler, the real State.commit,
restore and check, and the real sync plan (state.plan_sync).

Each rank runs the documented training loop as a generator that yields at
each step's all-reduce. The driver interleaves the ranks and injects, at
random steps, a kill (each survivor's all-reduce either completed before
the peer died or failed), a join and a drain (each rank sees the
announcement at its next commit or only at its next collective, which the
abort fails). A rank whose group was aborted also loses torch's
process-group registry, as the native abort of the default group does on
torch >= 2.6. The property: in the committed history, every index of every
epoch is trained exactly once."""

import random
import types
import unittest
from unittest import mock

from test_commit_abort import FakeWatcher
from test_live_features import assert_each_index_once
from torchreq import require_torch

SCHEDULES = int(__import__("os").environ.get("RINGSIDE_SCHEDULES", "200"))


# Iterated directly (DataLoader(sampler=...)), every rank runs the same
# number of steps when the dataset's length is a multiple of the batch and
# the batch is at least the world size (see ElasticSampler): the schedules
# keep to that (batch 6 to 9, at most 6 ranks).
MAX_WORLD = 6


class Announced(Exception):
    """The step's collective failed: the group was aborted."""


class Registry:
    """torch.distributed's registry as each simulated rank sees it."""

    def __init__(self):
        self.current = None  # the Rank running now

    def is_initialized(self):
        return self.current is not None and self.current.registry

    def get_rank(self):
        if not self.is_initialized():
            raise ValueError("Default process group has not been initialized")
        return self.current.rank

    def get_world_size(self):
        if not self.is_initialized():
            raise ValueError("Default process group has not been initialized")
        return self.current.world


class Rank:
    def __init__(self, name, n, shuffle, sampler_batch, model_seed):
        import torch

        from ringside.elastic import State, _Session
        from ringside.sampler import ElasticSampler

        self.name = name
        self.sampler = ElasticSampler(n, shuffle=shuffle, seed=3, batch_size=sampler_batch)
        torch.manual_seed(model_seed)
        self.state = State(torch.nn.Linear(1, 1), None, rng=False, sampler=self.sampler)
        self.watcher = FakeWatcher()
        self.watcher.latest = 0
        self.state._session = _Session(self.watcher, None)
        self.gen = None
        self.rank, self.world, self.registry = 0, 1, False
        self.group = None


def loader(rank, mode, batch):
    s = rank.sampler
    if mode == "batches":  # DataLoader(batch_sampler=sampler.batches(b))
        return list(s.batches(batch))
    # DataLoader(sampler=sampler, batch_size=b): the loader cuts the
    # sampler's stream into batches of b.
    idx = list(s)
    return [idx[i:i + batch] for i in range(0, len(idx), batch)]


def train(rank, mode, batch, epochs):
    """The documented loop, yielding each step's batch at its all-reduce
    (which may raise Announced)."""
    s, state = rank.sampler, rank.state
    while s.epoch < epochs:
        for b in loader(rank, mode, batch):
            yield ("step", s.epoch, state.step + 1, b)
            s.record_batch(batch)
            state.step += 1
            state.commit()
        s.set_epoch(s.epoch + 1)
        state.commit()
    yield ("done",)


class Sim:
    def __init__(self, rnd, registry, n, batch, epochs, mode, shuffle, sampler_batch):
        self.rnd, self.reg = rnd, registry
        self.n, self.batch, self.epochs, self.mode = n, batch, epochs, mode
        self.shuffle, self.sampler_batch = shuffle, sampler_batch
        self.generation = 0
        self.names = 0
        self.trained = {}  # step -> {rank name: (epoch, indices)} of the formation that last trained it
        self.formations = []  # (start step, {step: {name: (epoch, idx)}})

    def new_rank(self):
        self.names += 1
        return Rank("w%d" % self.names, self.n, self.shuffle, self.sampler_batch, 0)

    def run_in(self, r, fn, *args):
        from ringside import _current

        self.reg.current = r
        _current.set_group(r.group)
        try:
            return fn(*args)
        finally:
            _current.clear_group()
            self.reg.current = None

    def form(self, members):
        from ringside.state import _codec, commit_digest, plan_sync, tensors_digest  # noqa: F401

        self.generation += 1
        W = len(members)
        for i, r in enumerate(members):
            r.gen, r.rank, r.world, r.registry = self.generation, i, W, True
            r.group = types.SimpleNamespace(rank=i, world_size=W, aborted=False, backend="gloo")
            r.watcher.latest = self.generation
            r.state.generation = self.generation
            r.state.restore()
        entries = [(r.state.committed_step, r.state.digest(), commit_digest(r.state._snapshot)) for r in members]
        src, behind = plan_sync(entries)
        payload = _codec.encode(members[src].state._snapshot)
        for i in behind:
            members[i].state._replace(_codec.decode(payload))
            members[i].state.restore()
        start = members[src].state.committed_step
        steps = {}
        self.formations.append((start, steps))
        gens = {r.name: train(r, self.mode, self.batch, self.epochs) for r in members}
        return W, gens, steps

    def advance(self, r, gen, failed):
        """Runs r to its next yield; failed: the collective it is in raises."""
        try:
            if failed:
                return self.run_in(r, gen.throw, Announced())
            return self.run_in(r, next, gen)
        except Exception as e:  # the group broke or a new generation: run() restores
            from ringside import _current

            if not isinstance(e, (Announced, _current.NoGroup)):
                raise
            self.run_in(r, r.state.restore)
            return None
        except BaseException as e:
            from ringside.state import Interrupted

            if not isinstance(e, Interrupted):
                raise
            return None

    def generation_of(self, members):
        """Trains members until the job ends (True) or a fault ends the
        generation; returns the next generation's members."""
        W, gens, steps = self.form(members)
        at = {r.name: self.advance(r, gens[r.name], False) for r in members}
        while True:
            live = [r for r in members if at[r.name] is not None]
            if len(live) == len(members) and all(at[r.name][0] == "done" for r in members):
                return None
            kinds = {at[r.name][0] for r in live}
            assert len(live) == len(members), "a rank left the generation by itself"
            assert kinds == {"step"}, "ranks ran different numbers of steps: %s" % {r.name: at[r.name] for r in members}
            step = {at[r.name][2] for r in members}
            assert len(step) == 1, "ranks at different steps: %s" % step
            step = step.pop()
            steps[step] = {r.name: (at[r.name][1], at[r.name][3]) for r in members}
            fault = self.rnd.random()
            if fault < 0.04 and len(members) > 1:
                return self.kill(members, gens, at)
            if fault < 0.07 and len(members) < MAX_WORLD:
                joiners = [self.new_rank() for _ in range(self.rnd.randint(1, min(2, MAX_WORLD - len(members))))]
                return self.announce(members, gens, at, members + joiners)
            if fault < 0.10 and len(members) > 1:
                gone = self.rnd.choice(members)
                gone.watcher.draining = True
                return self.announce(members, gens, at, [r for r in members if r is not gone], drained=gone)
            for r in members:
                at[r.name] = self.advance(r, gens[r.name], False)

    def kill(self, members, gens, at):
        dead = self.rnd.choice(members)
        survivors = [r for r in members if r is not dead]
        for r in survivors:
            r.watcher.latest = self.generation + 1
            r.group.aborted = True
            r.registry = self.rnd.random() < 0.5  # torch >= 2.6 clears it when aborting the default group
            completed = self.rnd.random() < 0.4  # the all-reduce finished here before the peer died
            out = self.advance(r, gens[r.name], not completed)
            while out is not None:  # the next collective of an aborted group fails
                out = self.advance(r, gens[r.name], True)
        return survivors

    def announce(self, members, gens, at, nxt, drained=None):
        for r in members:
            seen_now = self.rnd.random() < 0.5  # the watcher's event arrived before this rank's commit
            if r is not drained and seen_now:
                r.watcher.latest = self.generation + 1
            out = self.advance(r, gens[r.name], False)  # the step's all-reduce completes
            if out is not None and r is not drained:
                r.watcher.latest = self.generation + 1
                r.group.aborted = True
                r.registry = self.rnd.random() < 0.5
                while out is not None:
                    out = self.advance(r, gens[r.name], True)
        if drained is not None:
            drained.watcher.draining = False
        return [r for r in nxt if r is not drained]

    def run(self, start):
        members = [self.new_rank() for _ in range(start)]
        for _ in range(400):
            nxt = self.generation_of(members)
            if nxt is None:
                return
            members = nxt
        raise AssertionError("the job did not finish")

    def committed(self):
        """{epoch: [indices]} over the committed history: a formation's
        steps up to the step the next formation started from."""
        per = {}
        for i, (start, steps) in enumerate(self.formations):
            end = self.formations[i + 1][0] if i + 1 < len(self.formations) else 10 ** 9
            for step, by in steps.items():
                if step <= end:
                    for epoch, idx in by.values():
                        per.setdefault(epoch, []).extend(idx)
        return per


@require_torch
class ExactlyOnceSimTest(unittest.TestCase):
    def check(self, seed, mode, shuffle, sampler_batch):
        import torch.distributed as dist

        rnd = random.Random(seed)
        batch = rnd.randint(6, 9)
        n = batch * rnd.randint(4, 20) if mode != "batches" else rnd.randint(1, 160)
        epochs = rnd.randint(1, 3)
        reg = Registry()
        sim = Sim(rnd, reg, n, batch, epochs, mode, shuffle, batch if sampler_batch else None)
        with mock.patch.object(dist, "is_initialized", reg.is_initialized), \
                mock.patch.object(dist, "get_rank", reg.get_rank), \
                mock.patch.object(dist, "get_world_size", reg.get_world_size), \
                mock.patch.object(dist, "is_available", lambda: True):
            sim.run(rnd.randint(1, MAX_WORLD))
        per = sim.committed()
        what = "schedule %d (%s, shuffle=%s, sampler batch_size=%s, n=%d, batch=%d, %d epochs, %d generations)" % (
            seed, mode, shuffle, sampler_batch, n, batch, epochs, sim.generation)
        assert_each_index_once(self, per, n, epochs, what)

    def test_random_schedules(self):
        from ringside import _current

        _current.enter()  # inside run(), as the trainer is
        self.addCleanup(_current.leave)
        variants = [("batches", True, None), ("batches", False, None), ("sampler", True, None),
                    ("sampler", False, None), ("sampler", True, "batch")]
        for seed in range(SCHEDULES):
            mode, shuffle, sb = variants[seed % len(variants)]
            with self.subTest(seed=seed):
                self.check(seed, mode, shuffle, sb)


if __name__ == "__main__":
    unittest.main()
