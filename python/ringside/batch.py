"""What the global batch and the learning rate become when the job resizes.

A user picks one policy and gives it to State(batch_policy=...):

- KeepGlobalBatch(global_batch, micro_batch=None): every optimizer step
  trains global_batch samples whatever the world size. Each rank's share
  is global_batch / world (the remainder spread one sample each over the
  first ranks); with micro_batch, a share larger than it is trained in
  accum_steps micro-batches of at most micro_batch samples, their
  gradients accumulated before the step. The learning rate stays.
- KeepPerRankBatch(batch_size, lr_scaling="linear", base_world=None):
  every rank trains batch_size samples per step, so the global batch is
  world * batch_size, and the learning rate is scaled by
  lr_scaling(world / base_world): "linear" (Goyal et al., 2017), "sqrt"
  (for adaptive optimizers, Krizhevsky 2014), "none", or any callable of
  that ratio. base_world (default: the first generation's world size) is
  where the optimizer's own learning rate holds.

run() applies the policy at each generation boundary, after the sync and
before train_fn, in one place: the plan (state.batch), the samplers'
rounds and the optimizers' learning rates (and schedulers' base_lrs)
change together, and the policy's own state (the LR factor in force) is
committed with the step counter, the optimizer and the sampler. A
generation that breaks before its first commit restores all of them to the
last commit's, so no step ever trains with the batch of one world and the
learning rate of another.
"""

import math
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Union

__all__ = ["BatchPlan", "KeepGlobalBatch", "KeepPerRankBatch", "LR_RULES"]


def share(total, world, rank):
    """(offset, size) of rank's contiguous share of total items over world
    ranks, the remainder one each to the first ranks."""
    base, extra = divmod(total, world)
    return rank * base + min(rank, extra), base + (1 if rank < extra else 0)


LR_RULES = {
    "linear": lambda ratio: ratio,
    "sqrt": math.sqrt,
    "none": lambda ratio: 1.0,
}


class BatchPlan(NamedTuple):
    """One generation's batch and learning-rate plan, seen from one rank."""

    world_size: int
    rank: int
    global_batch: int  # samples per optimizer step, all ranks together
    batch_size: int  # this rank's samples per optimizer step
    accum_steps: int  # micro-batches per optimizer step (1: no accumulation)
    lr_scale: float  # the factor on the optimizer's base learning rate

    def micro_batches(self, batch: Sequence) -> List[Sequence]:
        """batch (this rank's samples of one step, a list or a tensor's first
        dimension) cut into accum_steps contiguous micro-batches, as even as
        they go."""
        n = len(batch)
        out = []
        for i in range(self.accum_steps):
            off, size = share(n, self.accum_steps, i)
            out.append(batch[off:off + size])
        return out

    def loss_weight(self, n: int) -> float:
        """The factor on the mean loss of a micro-batch of n samples that
        makes the gradient, after accumulation and DDP's average over the
        ranks, the mean over the global batch: n * world / global_batch
        (1.0 for even shares without accumulation)."""
        return n * self.world_size / float(self.global_batch)

    def describe(self) -> str:
        return ("world %d: global batch %d, rank %d trains %d per step in %d micro-batch%s, lr x%.4g"
                % (self.world_size, self.global_batch, self.rank, self.batch_size, self.accum_steps,
                   "" if self.accum_steps == 1 else "es", self.lr_scale))


class _Policy:
    """What both policies share: the LR factor in force, committed, and its
    application to optimizers and schedulers."""

    def __init__(self):
        self.lr_scale = 1.0  # the factor the optimizers' learning rates carry now
        self.base_world = None

    def plan(self, rank: int, world: int) -> BatchPlan:
        raise NotImplementedError

    def state_dict(self):
        return {"lr_scale": self.lr_scale, "base_world": self.base_world}

    def load_state_dict(self, sd):
        self.lr_scale = float(sd["lr_scale"])
        self.base_world = None if sd.get("base_world") is None else int(sd["base_world"])

    def apply(self, rank: int, world: int, optimizers=(), schedulers=(), samplers=()) -> BatchPlan:
        """The plan for (rank, world), put in force: the learning rates of
        optimizers and the base_lrs of schedulers rescaled from the factor
        in force to the plan's, the samplers' rounds set to the plan's."""
        plan = self.plan(rank, world)
        ratio = plan.lr_scale / self.lr_scale
        if ratio != 1.0:
            for opt in optimizers:
                for g in opt.param_groups:
                    g["lr"] = g["lr"] * ratio
                    if "initial_lr" in g:
                        g["initial_lr"] = g["initial_lr"] * ratio
            for s in schedulers:
                s.base_lrs = [lr * ratio for lr in s.base_lrs]
                if hasattr(s, "_last_lr"):
                    s._last_lr = [lr * ratio for lr in s._last_lr]
        self.lr_scale = plan.lr_scale
        for sm in samplers:
            self._set_rounds(sm, plan)
        return plan

    def _set_rounds(self, sampler, plan):
        raise NotImplementedError


def _positive(name, v):
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError("%s must be a positive integer, got %r" % (name, v))
    return v


class KeepGlobalBatch(_Policy):
    """The global batch stays global_batch samples per step at every world
    size; each rank's share (and with micro_batch, the accumulation steps)
    follows the world size. A world larger than global_batch is refused:
    some rank would train nothing."""

    def __init__(self, global_batch: int, micro_batch: Optional[int] = None):
        super().__init__()
        self.global_batch = _positive("KeepGlobalBatch: global_batch", global_batch)
        self.micro_batch = None if micro_batch is None else _positive("KeepGlobalBatch: micro_batch", micro_batch)

    def plan(self, rank, world):
        if world > self.global_batch:
            raise ValueError("KeepGlobalBatch: a world of %d ranks cannot share a global batch of %d samples; raise "
                             "global_batch or cap the job's size at it" % (world, self.global_batch))
        _, mine = share(self.global_batch, world, rank)
        largest = share(self.global_batch, world, 0)[1]
        accum = 1 if self.micro_batch is None else -(-largest // self.micro_batch)
        return BatchPlan(world, rank, self.global_batch, mine, accum, 1.0)

    def _set_rounds(self, sampler, plan):
        sampler.set_rounds(global_batch=plan.global_batch)


class KeepPerRankBatch(_Policy):
    """Each rank trains batch_size samples per step; the global batch is
    world * batch_size and the learning rate is scaled by
    lr_scaling(world / base_world)."""

    def __init__(self, batch_size: int, lr_scaling: Union[str, Callable[[float], float]] = "linear",
                 base_world: Optional[int] = None):
        super().__init__()
        self.batch_size = _positive("KeepPerRankBatch: batch_size", batch_size)
        if isinstance(lr_scaling, str):
            if lr_scaling not in LR_RULES:
                raise ValueError("KeepPerRankBatch: lr_scaling %r is not one of %s, nor a callable of world/base_world"
                                 % (lr_scaling, ", ".join(sorted(LR_RULES))))
            self.rule = LR_RULES[lr_scaling]
        elif callable(lr_scaling):
            self.rule = lr_scaling
        else:
            raise TypeError("KeepPerRankBatch: lr_scaling must be a rule's name or a callable, got %s"
                            % type(lr_scaling).__name__)
        self.base_world = None if base_world is None else _positive("KeepPerRankBatch: base_world", base_world)

    def plan(self, rank, world):
        if self.base_world is None:
            self.base_world = world  # the first generation's: committed from then on
        scale = float(self.rule(world / float(self.base_world)))
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError("KeepPerRankBatch: lr_scaling(%d/%d) gave %r; it must be a positive finite factor"
                             % (world, self.base_world, scale))
        return BatchPlan(world, rank, world * self.batch_size, self.batch_size, 1, scale)

    def _set_rounds(self, sampler, plan):
        sampler.set_rounds(batch_size=plan.batch_size)


def apply_to_state(policy: Any, state: Any) -> BatchPlan:
    """Puts policy in force for state's current group: its optimizer (and
    its sharded one, State.shard) and every registered optimizer, scheduler
    and ElasticSampler."""
    optimizers = [o for o in (state.optimizer, getattr(state._shards, "optimizer", None))
                  if o is not None and hasattr(o, "param_groups")]
    schedulers, samplers = [], []
    for obj in state._objects.values():
        if obj is policy:
            continue
        if hasattr(obj, "param_groups") and obj not in optimizers:
            optimizers.append(obj)
        elif hasattr(obj, "base_lrs"):
            schedulers.append(obj)
        elif callable(getattr(obj, "set_rounds", None)):
            samplers.append(obj)
    return policy.apply(state.rank, state.world_size, optimizers, schedulers, samplers)
