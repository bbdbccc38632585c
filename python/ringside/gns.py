"""The gradient noise scale, measured as Pollux (Qiao et al., OSDI '21)
measures it, for the autoscaler's goodput: how large a batch can grow
before a larger one stops buying progress per step.

Each data-parallel step gives two gradients of the same step: this rank's
local gradient g (its batch of b samples) and the all-reduced mean G over
the M ranks (M*b samples). With G* the true gradient and tr(S) the trace of
the per-sample gradient covariance,

    E|g|^2 = |G*|^2 + tr(S)/b        E|G|^2 = |G*|^2 + tr(S)/(M*b)

so that, unbiased,

    |G*|^2 ~ (M*|G|^2 - |g|^2) / (M - 1)
    tr(S)  ~ M*b*(|g|^2 - |G|^2) / (M - 1)

and the noise scale is B_noise = tr(S) / |G*|^2, in samples. One step's
estimates are noisy (either may come out negative), so both are smoothed
by an exponential moving average (bias-corrected, as Adam's moments) before
the ratio is taken, as Pollux does. It needs M >= 2: a step of one rank
gives no estimate. The measurement takes the squared norm of each gradient
bucket before and after DDP's all-reduce, in a DDP communication hook that
otherwise does what DDP's default hook does.

Use: `state.measure_gns(ddp)` in train_fn after building the DDP module
(every generation builds its own). The value then travels in the heartbeats
(field gns) and the sidecar stores it in the member's status."""

import math
from typing import Any, Optional


class GradientNoiseScale:
    """Smoothed estimates of |G*|^2 and tr(S), fed step by step."""

    def __init__(self, smoothing: float = 0.9) -> None:
        if not 0.0 <= smoothing < 1.0:
            raise ValueError("smoothing must be in [0, 1), got %r" % (smoothing,))
        self.smoothing = smoothing
        self._grad_sq = 0.0  # EMA of |G*|^2 estimates
        self._noise = 0.0  # EMA of tr(S) estimates
        self._weight = 0.0  # the EMAs' total weight, for the bias correction
        # Squared norms summed over the buckets of the steps since the last
        # fold, kept as device tensors (no host sync per bucket).
        self._local = None
        self._total = None
        self._world = 1
        self._at = None  # (step, samples) at the last fold

    def observe(self, local_sq: float, total_sq: float, world_size: int, batch_size: float) -> None:
        """Folds one step's squared norms in: local_sq of this rank's
        gradient (batch_size samples), total_sq of the mean over
        world_size ranks."""
        m, b = int(world_size), float(batch_size)
        if m < 2 or b <= 0 or not (math.isfinite(local_sq) and math.isfinite(total_sq)):
            return
        grad_sq = (m * total_sq - local_sq) / (m - 1)
        noise = m * b * (local_sq - total_sq) / (m - 1)
        a = self.smoothing
        self._grad_sq = a * self._grad_sq + (1 - a) * grad_sq
        self._noise = a * self._noise + (1 - a) * noise
        self._weight = a * self._weight + (1 - a)

    def value(self) -> Optional[float]:
        """The gradient noise scale in samples; None while there is no
        estimate (no step of two ranks or more yet, or no signal measured).
        Finite and not negative: a negative noise estimate reads as 0."""
        if self._weight <= 0 or self._grad_sq <= 0:
            return None
        v = max(0.0, self._noise) / self._grad_sq  # the bias corrections cancel
        return v if math.isfinite(v) else None

    # The DDP side.

    def attach(self, ddp: Any) -> None:
        """Registers the measuring hook on a DistributedDataParallel module."""
        ddp.register_comm_hook(None, self._hook)

    def _hook(self, _state, bucket):  # unannotated: DDP checks a hook's annotations against its own types
        import torch.distributed as dist

        t = bucket.buffer()
        from . import _current

        world = _current.rank_world()[1]
        local = t.detach().float().pow(2).sum()
        t.div_(world)
        token = _current.collective_began()
        fut = dist.all_reduce(t, async_op=True).get_future()

        def done(f: Any) -> Any:
            out = f.value()[0]
            _current.collective_ended(token)
            total = out.detach().float().pow(2).sum()
            self._local = local if self._local is None else self._local + local
            self._total = total if self._total is None else self._total + total
            self._world = world
            return out

        return fut.then(done)

    def fold(self, step: int, samples: int, batch_size: Optional[float] = None) -> None:
        """Folds the norms the hook summed since the last fold in (one host
        sync), at step with samples trained so far: this rank's batch per
        step is batch_size, or else the samples per step between the two
        folds. A step that went back (a restore) starts over."""
        local, total = self._local, self._total
        self._local = self._total = None
        last, self._at = self._at, (step, samples)
        if last is None or local is None or total is None or step <= last[0]:
            return
        steps = step - last[0]
        b = batch_size if batch_size is not None else (samples - last[1]) / steps
        self.observe(float(local) / steps, float(total) / steps, self._world, b)
