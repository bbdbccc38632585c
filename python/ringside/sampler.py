"""ElasticSampler: a dataset's indices, exactly once per epoch, over
whatever ranks the job has from one generation to the next.

    sampler = ElasticSampler(len(dataset), shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_sampler=sampler.batches(32), num_workers=4)
    state = elastic.State(model, opt, sampler=sampler)

    def train(state):
        ddp = DistributedDataParallel(state.model)
        while sampler.epoch < epochs:
            for batch in loader:          # a new iterator in every generation
                ...forward, backward, optimizer.step()...
                sampler.record_batch(32)  # every rank, every step
                state.step += 1
                state.commit()
            sampler.set_epoch(sampler.epoch + 1)
            state.commit()

The guarantee: in the committed history, each index of an epoch is
trained exactly once, whatever kills, joins and drains happen. The epoch's
order is a permutation fixed by (seed, epoch). The sampler's state is the
epoch and how many indices of that order the job has consumed; it is a
State field, committed, restored and synced with the model, so steps rolled
back with the model are trained again and steps kept are never repeated.
An iterator lays the indices not yet consumed out in rounds, one round per
step: W ranks with batch size b take W*b indices per round, each rank a
contiguous share of it; record_batch(b) moves the consumed count past one
round. A new generation's iterator lays the rest out over its own ranks.

The epoch's end is not padded and nothing is dropped: when the indices
left are not a multiple of W*b, the last round is shared as evenly as it
goes (some ranks one index more), and a last round of fewer than W indices
is merged into the round before it, so every rank still runs the same
number of steps (DDP needs that). Only when a generation starts with fewer
indices left in the epoch than it has ranks (a scale-up during an epoch's
last round) do some ranks get an empty batch for that step: the
DataLoader's collate_fn then gets an empty list; collate_allow_empty()
wraps a collate_fn so that it yields None there, and the loop runs its
step on no data (the rank's gradients are zeros), still calling
record_batch.

With DataLoader workers, the sampler runs in the main process (only the
fetching runs in the workers), so prefetching does not count: only
record_batch does. Use batches(b) as the DataLoader's batch_sampler (the
round layout decides each batch). Iterating the sampler itself (as a
DataLoader's sampler= with batch_size=b) yields the same indices in the
same rounds, given batch_size here or a first record_batch; then the
DataLoader cuts the batches, which holds the same guarantee except at the
uneven end of an epoch, where a rank may get one batch more or less than
another.
"""

from typing import Optional

import torch
from torch.utils.data import Sampler

from . import _current
from .batch import share

__all__ = ["ElasticSampler", "collate_allow_empty"]


def _world():
    """This process's (rank, world size): the group run() formed, never
    torch's registry (see _current)."""
    return _current.rank_world()


def rounds(left, world, batch, global_batch=None):
    """The sizes of the rounds that lay left indices out over world ranks
    with batch indices each (or global_batch in all, when given): full
    rounds of world*batch, the rest shared by a last round, merged into the
    round before when fewer than world."""
    full = global_batch or world * batch
    k, m = divmod(left, full)
    out = [full] * k
    if m:
        if m >= world or k == 0:
            out.append(m)
        else:
            out[-1] += m
    return out


class ElasticSampler(Sampler):
    """Yields this rank's share of the epoch's indices not consumed yet
    (see the module's doc for the guarantee). dataset_len is the dataset's
    length; shuffle orders each epoch by a permutation seeded with
    seed + epoch, the same on every rank. batch_size is only needed when
    the sampler itself is iterated before the first record_batch."""

    def __init__(self, dataset_len: int, *, shuffle: bool = True, seed: int = 0, batch_size: Optional[int] = None):
        if dataset_len < 0:
            raise ValueError("ElasticSampler: dataset_len %d is negative" % dataset_len)
        self.dataset_len = int(dataset_len)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0
        self.consumed = 0
        self.batch_size = batch_size
        self.global_batch = None  # set by a KeepGlobalBatch policy: rounds of this many indices
        self._order_of = None

    # What run() commits.

    def state_dict(self):
        return {"dataset_len": self.dataset_len, "shuffle": self.shuffle, "seed": self.seed, "epoch": self.epoch,
                "consumed": self.consumed, "batch_size": self.batch_size, "global_batch": self.global_batch}

    def load_state_dict(self, sd):
        if int(sd["dataset_len"]) != self.dataset_len:
            raise ValueError("ElasticSampler: the commit is of a dataset of %d indices, this one has %d"
                             % (sd["dataset_len"], self.dataset_len))
        self.shuffle, self.seed = bool(sd["shuffle"]), int(sd["seed"])
        self.epoch, self.consumed = int(sd["epoch"]), int(sd["consumed"])
        self.batch_size = sd.get("batch_size")
        self.global_batch = sd.get("global_batch")

    def set_rounds(self, *, batch_size: Optional[int] = None, global_batch: Optional[int] = None) -> None:
        """How the rest of the epoch is laid out: rounds of batch_size
        indices per rank, or of global_batch indices shared by the ranks
        (ranks differ by one index at most). A batch policy
        (ringside.batch) calls it at each generation boundary."""
        if (batch_size is None) == (global_batch is None):
            raise ValueError("set_rounds: give batch_size or global_batch, one of them")
        for name, v in (("batch_size", batch_size), ("global_batch", global_batch)):
            if v is not None and int(v) <= 0:
                raise ValueError("set_rounds: %s must be positive, got %d" % (name, v))
        self.global_batch = None if global_batch is None else int(global_batch)
        if batch_size is not None:
            self.batch_size = int(batch_size)

    # The training loop's calls.

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch (from its first index); the current epoch again is
        a no-op, so a train_fn entered again after a re-form can call it."""
        if int(epoch) != self.epoch:
            self.epoch, self.consumed = int(epoch), 0

    def record_batch(self, batch_size: Optional[int] = None) -> None:
        """Counts one step of batch_size indices per rank as trained: call
        it on every rank after each optimizer step, before the commit.
        Under a batch policy (set_rounds), call it without batch_size: the
        round is the policy's."""
        if batch_size is not None:
            batch_size = int(batch_size)
            if batch_size <= 0:
                raise ValueError("record_batch: batch_size must be positive, got %d" % batch_size)
            if self.global_batch is None:
                self.batch_size = batch_size
        elif self.batch_size is None and self.global_batch is None:
            raise ValueError("record_batch: no batch_size given, and no batch policy set the rounds")
        _, world = _world()
        r = rounds(self.remaining(), world, self.batch_size or 1, self.global_batch)
        if r:
            self.consumed += r[0]

    def remaining(self) -> int:
        """How many indices of the epoch the job has not trained yet."""
        return max(0, self.dataset_len - self.consumed)

    def batches(self, batch_size: Optional[int] = None) -> "_Batches":
        """A batch sampler (a DataLoader's batch_sampler=) over this sampler:
        one list of indices per step, the same number of steps on every
        rank. Without batch_size, the rounds a batch policy set (see
        set_rounds), read at each new iterator."""
        return _Batches(self, None if batch_size is None else int(batch_size))

    # Iteration.

    def _order(self):
        if self._order_of is None or self._order_of[0] != (self.epoch, self.seed, self.shuffle):
            if self.shuffle:
                g = torch.Generator()
                g.manual_seed(self.seed + self.epoch)
                order = torch.randperm(self.dataset_len, generator=g).tolist()
            else:
                order = list(range(self.dataset_len))
            self._order_of = ((self.epoch, self.seed, self.shuffle), order)
        return self._order_of[1]

    def _layout(self, batch_size):
        """This rank's batches for the rest of the epoch, in order."""
        rank, world = _world()
        order, start = self._order(), self.consumed
        out = []
        for total in rounds(self.remaining(), world, batch_size, self.global_batch):
            off, size = share(total, world, rank)
            out.append(order[start + off:start + off + size])
            start += total
        return out

    def __iter__(self):
        for batch in self._layout(self.batch_size or 1):
            yield from batch

    def __len__(self):
        return sum(len(b) for b in self._layout(self.batch_size or 1))


class _Batches(Sampler):
    def __init__(self, sampler, batch_size):
        if batch_size is not None and batch_size <= 0:
            raise ValueError("batches: batch_size must be positive, got %d" % batch_size)
        self.sampler = sampler
        self._batch_size = batch_size

    @property
    def batch_size(self):
        s = self.sampler
        b = self._batch_size or s.batch_size
        if b is None and s.global_batch is None:
            raise ValueError("batches(): no batch_size given, and no batch policy set the rounds")
        return b or 1

    def __iter__(self):
        return iter(self.sampler._layout(self.batch_size))

    def __len__(self):
        s = self.sampler
        return len(rounds(s.remaining(), _world()[1], self.batch_size, s.global_batch))


def collate_allow_empty(collate_fn=None):
    """A collate_fn that gives None for an empty batch (see the module's doc)
    and collate_fn's result (default: torch's default_collate) otherwise."""
    if collate_fn is None:
        from torch.utils.data.dataloader import default_collate as collate_fn

    def collate(batch):
        return None if len(batch) == 0 else collate_fn(batch)

    return collate
