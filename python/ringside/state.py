"""State: what a live elastic trainer keeps across generations, in the
pattern of Horovod's elastic State (commit, restore, sync), for PyTorch.

    state = State(model, optimizer, scheduler=sched, scaler=scaler, epoch=0)
    ...
    state.step += 1
    state.commit()        # a copy in memory; raises to re-form the group
                          # when the sidecar announced a new generation or a drain

A commit is a copy on the CPU of the model's and the optimizer's
state_dict, the step counter, the samples count, the state_dict of every
registered object (schedulers, GradScalers, extra optimizers, samplers:
any keyword field with state_dict() and load_state_dict(), or
State.register(name, obj)), the plain-data fields, and the random number
generators' states (Python's, numpy's when numpy is imported, torch's CPU
and CUDA ones). restore() goes back to it in place: the objects are the
same objects (a scheduler keeps stepping the live optimizer), loaded from
the commit. sync() makes every rank of a new group hold the same commit:
the rank with the newest commit broadcasts it in a format of tensors and
plain data only (decoding it cannot run code, unlike a pickle), every
receiver verifies its SHA-256, and every rank's committed parameters are
checksummed and compared; any difference raises StateCorrupt. A rank that
already held a commit of the same step keeps its own random states, so
per-rank streams go on; a rank behind takes the sender's.

save(path) and load(path) keep the commit on disk in the same format.
"""

import copy
import hashlib
import logging
import os
import random
import struct
import sys
import threading
import time
from typing import Any, Optional

from . import _codec
from .errors import CollectiveFailed, StateCorrupt

_log = logging.getLogger("ringside")


class Interrupted(BaseException):
    """Raised by State.commit() and State.check() to leave train_fn: run()
    catches it. A BaseException, as KeyboardInterrupt is, so a train_fn's
    `except Exception:` cannot swallow it."""


class GenerationChanged(Interrupted):
    """The sidecar announced a new generation: the group re-forms."""


class DrainRequested(Interrupted):
    """This member is being drained: it stops after its last commit."""


_RESERVED = {"model", "optimizer", "step", "samples", "rank", "world_size", "local_rank", "generation", "member",
             "register", "commit", "restore", "sync", "check", "save", "load", "digest", "checksum", "measure_gns", "gns",
             "batch", "batch_policy", "is_main", "summary", "guard", "stats", "commit_every", "committed_step",
             "shard", "adopt"}


def is_stateful(obj):
    """Whether obj is restored in place through state_dict/load_state_dict."""
    return (not isinstance(obj, type) and callable(getattr(obj, "state_dict", None))
            and callable(getattr(obj, "load_state_dict", None)))


def _clone_cpu(obj):
    """A deep copy of obj with every tensor copied to the CPU."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        try:
            out = type(obj)()  # keeps an OrderedDict ordered
        except TypeError:
            out = {}
        for k, v in obj.items():
            out[k] = _clone_cpu(v)
        return out
    if isinstance(obj, list):
        return [_clone_cpu(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_clone_cpu(v) for v in obj)
    if isinstance(obj, (int, float, str, bool, bytes, type(None))):
        return obj
    return copy.deepcopy(obj)


def _copy_cpu(obj, into, copies):
    """_clone_cpu into the buffers of into (the last capture, of the same
    shape) wherever they fit, so a commit writes into memory it already
    has instead of allocating (and faulting in) a model's worth per step.
    A tensor on a GPU goes into pinned memory through copies (_HostCopies)."""
    import torch

    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        if (isinstance(into, torch.Tensor) and into.shape == t.shape and into.dtype == t.dtype
                and into.device.type == "cpu" and into.is_contiguous() and into.is_pinned() == t.is_cuda):
            dst = into
        else:
            dst = torch.empty(t.shape, dtype=t.dtype, pin_memory=t.is_cuda)
        if t.is_cuda:
            copies.copy(dst, t)
        else:
            dst.copy_(t)
        return dst
    if isinstance(obj, dict):
        try:
            out = type(obj)()
        except TypeError:
            out = {}
        sub = into if isinstance(into, dict) else {}
        for k, v in obj.items():
            out[k] = _copy_cpu(v, sub.get(k), copies)
        return out
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        sub = into if type(into) is type(obj) and len(into) == len(obj) else [None] * len(obj)
        out = [_copy_cpu(v, d, copies) for v, d in zip(obj, sub)]
        return out if isinstance(obj, list) else tuple(out)
    return _clone_cpu(obj)


def _gpu_devices(obj):
    """The GPUs holding the tensors in obj (nested dicts, lists, tuples)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return {obj.device} if obj.is_cuda else set()
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return set().union(*(_gpu_devices(v) for v in obj)) if obj else set()
    return set()


class _HostCopies:
    """The device-to-host copies of commits, off the compute stream. settle
    records an event on each device's current (compute) stream at the end
    of the step and waits for that event only; the copies then run on a
    side stream of the device (one per device, kept), ordered after the
    event, and finish waits for the side streams: a commit is taken once
    its copies landed, and nothing queued on the compute stream waits
    behind them. cuda is torch.cuda."""

    def __init__(self, cuda):
        self._cuda = cuda
        self._side = {}  # {device: side stream}
        self._used = []  # the devices of this commit's copies

    def settle(self, devices):
        cuda = self._cuda
        self._used = sorted(devices, key=str)
        for dev in self._used:
            ev = cuda.Event()
            ev.record(cuda.current_stream(dev))
            if dev not in self._side:
                self._side[dev] = cuda.Stream(device=dev)
            self._side[dev].wait_event(ev)
            ev.synchronize()

    def copy(self, dst, src):
        with self._cuda.stream(self._side[src.device]):
            dst.copy_(src, non_blocking=True)

    def finish(self):
        for dev in self._used:
            self._side[dev].synchronize()
        self._used = []


def _tensor_bytes(t):
    t = t.detach().to("cpu").contiguous().reshape(-1)
    if t.numel() == 0:
        return b""
    import torch

    return t.view(torch.uint8).numpy().tobytes()


def tensors_digest(named_tensors):
    """SHA-256 over (name, dtype, shape, raw bytes) of each tensor, in order."""
    h = hashlib.sha256()
    for name, t in named_tensors:
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(_tensor_bytes(t))
    return h.digest()


def _serialize(snapshot):
    return _codec.encode(snapshot)


def _deserialize(payload):
    """The snapshot in payload; StateCorrupt for anything else (a pickle
    among them: it is refused, never unpickled)."""
    try:
        snap = _codec.decode(payload)
    except (ValueError, TypeError, KeyError, OverflowError) as e:
        raise StateCorrupt("refused the state payload: %s" % e) from None
    if not isinstance(snap, dict) or "step" not in snap or "model" not in snap:
        raise StateCorrupt("refused the state payload: it is not a ringside commit")
    return snap


def _received(payload):
    """The bytes a receiver got; tests replace this to corrupt them."""
    return payload


def _collective(fn, *args):
    """Runs one of sync's collectives; its failure is the group's, never the
    training code's (CollectiveFailed)."""
    from . import _current

    token = _current.collective_began()
    try:
        out = fn(*args)
    except Exception as e:
        raise CollectiveFailed("the sync's %s failed: %s" % (getattr(fn, "__name__", "collective"), e)) from e
    _current.collective_ended(token)
    return out


class _Waiting:
    """State.waiting(): marks a collective of the user's in flight."""

    def __enter__(self):
        from . import _current

        self._token = _current.collective_began()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:  # a failed collective stays in flight until the group changes
            from . import _current

            _current.collective_ended(self._token)
        return False


def _timed_allreduce(_state, bucket):  # unannotated: DDP checks a hook's annotations against its own types
    """DDP's default all-reduce (the mean of the bucket over the ranks),
    timed as a collective in flight (State.measure_wait)."""
    import torch.distributed as dist

    from . import _current

    t = bucket.buffer()
    t.div_(_current.rank_world()[1])
    token = _current.collective_began()
    fut = dist.all_reduce(t, async_op=True).get_future()

    def done(f):
        _current.collective_ended(token)
        return f.value()[0]

    return fut.then(done)


# Python's, numpy's and torch's random number generators.

def _rng_capture():
    import torch

    out = {"python": random.getstate(), "torch": torch.get_rng_state()}
    np = sys.modules.get("numpy")
    if np is not None:
        out["numpy"] = np.random.get_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def _rng_apply(rng):
    import torch

    if not rng:
        return
    if "python" in rng:
        v = rng["python"]
        random.setstate((v[0], tuple(v[1]), v[2]))
    if "torch" in rng:
        torch.set_rng_state(rng["torch"])
    np = sys.modules.get("numpy")
    if np is not None and "numpy" in rng:
        np.random.set_state(tuple(rng["numpy"]))
    if "cuda" in rng and torch.cuda.is_available():
        states = rng["cuda"]
        if len(states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states)


# A checkpoint file: the encoded commit, then its SHA-256.
_DIGEST_LEN = 32
# A sync moves its payload in pieces of this many bytes (a receiver on a
# GPU never holds more of it there at once).
SYNC_CHUNK = 64 << 20


class State:
    """The trainer's state across generations.

    model and optimizer are the bare module (not its DistributedDataParallel
    wrapper, which train_fn builds for every generation; for torch.compile,
    the module before compiling) and its optimizer. Keyword fields become
    attributes: an object with state_dict() and load_state_dict() (an LR
    scheduler, a GradScaler, another optimizer, a sampler such as
    ringside.elastic.ElasticSampler) is registered and restored in place;
    anything else must be plain data (numbers, strings, lists, dicts,
    tensors), committed by value. step counts the job's completed steps
    and samples this member's samples; both are committed. With rng
    (default), the random generators' states are committed too.

    A commit copies into one set of host buffers, reused from commit to
    commit (pinned for tensors on a GPU, where the copies run on a side
    stream after the step's work: see _HostCopies); only a change of
    shapes or dtypes, or a checkpoint still being written from them, makes
    it allocate. The copy overwrites the last commit only once the step's
    work is done and its group was not aborted. With commit_every=k,
    commit() keeps a copy only every k steps (it still checks for a new
    generation every time): cheaper, and up to k-1 steps are trained again
    after a failure. stats holds what commits and syncs cost.

    While run() trains, rank, world_size, local_rank, generation and member
    describe the current group.

    batch_policy (ringside.batch.KeepGlobalBatch or KeepPerRankBatch) says
    what the global batch and the learning rate become when the world size
    changes; run() puts it in force at each generation boundary and
    state.batch is the plan in force (a ringside.batch.BatchPlan).
    """

    def __init__(self, model: Any, optimizer: Any = None, *, rng: bool = True, commit_every: int = 1,
                 batch_policy: Any = None, **fields: Any) -> None:
        for k in fields:
            if k in _RESERVED or k.startswith("_"):
                raise ValueError("State field %r is reserved; pick another name" % k)
        self.model = model
        self.optimizer = optimizer
        self.step = 0
        self.samples = 0
        self._rng = rng
        if int(commit_every) < 1:
            raise ValueError("commit_every must be at least 1, got %r" % (commit_every,))
        self.commit_every = int(commit_every)
        self._buffers = None  # the last capture: the host buffers the next one copies into
        self._copies = None  # a _HostCopies once a commit copied from a GPU
        self._params_sha = None  # of the last commit's model, once a sync asked for it
        self._gns = None  # a GradientNoiseScale once measure_gns was called
        self._gns_batch = None
        self.stats = {"commits": 0, "commit_s": 0.0, "last_commit_s": 0.0, "sync_bytes": 0, "last_sync_bytes": 0,
                      "skipped_steps": 0, "generations": 0, "shard_restores": 0}
        self._fields = []
        self._objects = {}
        self.batch_policy = batch_policy
        self.batch = None  # the BatchPlan in force, once run() formed a group
        if batch_policy is not None:
            if not (is_stateful(batch_policy) and callable(getattr(batch_policy, "apply", None))):
                raise TypeError("State(batch_policy=...) needs a ringside.batch policy (KeepGlobalBatch, "
                                "KeepPerRankBatch), got %s" % type(batch_policy).__name__)
            self._objects["batch_policy"] = batch_policy
        for k, v in fields.items():
            if is_stateful(v):
                self._objects[k] = v
            else:
                _codec.check(v, "State field %r" % k)
                self._fields.append(k)
            setattr(self, k, v)
        self.rank = 0
        self.world_size = 1
        self.local_rank = 0
        self.generation = 0
        self.member = ""
        self._session = None
        self._synced_generation = None  # the generation whose group the last sync completed in
        self._snapshot = None
        self._shards = None  # the shards adapter attached in this generation (shard())
        self._shard = None  # its last capture: this rank's pieces (see ringside.shards)
        self._shard_saved = -1  # the step of this rank's newest sharded checkpoint
        self._replicas = 0  # copies of this rank's shard the next ranks keep (shard(replicas=))
        self._committed_at = time.monotonic()
        self._saver = None
        self.commit(check=False)

    def register(self, name: str, obj: Any) -> None:
        """Adds obj (with state_dict and load_state_dict) to what is
        committed and restored in place, as the attribute name; it is in
        the next commit."""
        if name in _RESERVED or name.startswith("_") or name in self._fields:
            raise ValueError("State field %r is reserved or taken; pick another name" % name)
        if not is_stateful(obj):
            raise TypeError("State.register(%r, ...) needs an object with state_dict() and load_state_dict(), "
                            "got %s" % (name, type(obj).__name__))
        self._objects[name] = obj
        setattr(self, name, obj)

    # Commits.

    @property
    def committed_step(self) -> int:
        return self._snapshot["step"]

    def _gather(self):
        """What a commit holds, its tensors still the live ones (nothing is
        copied yet): everything that could raise comes before the copy."""
        sharded = self._snapshot.get("sharded") if self._snapshot is not None else None
        if self._shards is not None:
            policy = self.batch_policy
            sharded = {"replicated": _clone_cpu(self._shards.replicated()),
                       "lr_scale": policy.lr_scale if policy is not None else 1.0}
        return {
            "step": int(self.step),
            "samples": int(self.samples),
            "sharded": sharded,
            "model": {} if getattr(self._shards, "covers_model", False) else self.model.state_dict(),
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            "objects": {k: o.state_dict() for k, o in self._objects.items()},
            "fields": copy.deepcopy({k: getattr(self, k) for k in self._fields}),
            "rng": _rng_capture() if self._rng else None,
        }

    def _copy(self, live, devices):
        """live (from _gather) copied into the host buffers of the last
        capture; devices are the GPUs its tensors are on, settled."""
        into = self._buffers or {}
        copies = self._copies
        snap = dict(live)
        for k in ("model", "optimizer"):
            snap[k] = _copy_cpu(live[k], into.get(k), copies)
        snap["objects"] = {k: _copy_cpu(sd, (into.get("objects") or {}).get(k), copies)
                           for k, sd in live["objects"].items()}
        if devices:
            copies.finish()
        self._snapshot = self._buffers = snap
        self._params_sha = None

    def _lend(self):
        """The last commit, for a reader that keeps it (a checkpoint being
        written): the next commit does not copy into its buffers."""
        if self._buffers is self._snapshot:
            self._buffers = None
        return self._snapshot

    def _apply(self, snap):
        if snap["model"] or snap.get("sharded") is None:
            self.model.load_state_dict(snap["model"])
        shard = self._shard
        if self._shards is not None and shard is not None and shard["step"] == snap["step"]:
            self._shards.load({p.name: p.tensor.clone() for p in shard["pieces"]})
            if snap.get("sharded"):
                self._shards.load_replicated(copy.deepcopy(snap["sharded"]["replicated"]))
        if self.optimizer is not None and snap["optimizer"] is not None:
            # A copy: the optimizer keeps CPU tensors it is given, and
            # updates them in place.
            self.optimizer.load_state_dict(_clone_cpu(snap["optimizer"]))
        # After the optimizer: a scheduler's state is its counters, the
        # learning rate itself lives in the optimizer's param groups.
        for k, sd in (snap.get("objects") or {}).items():
            obj = self._objects.get(k)
            if obj is not None:
                obj.load_state_dict(_clone_cpu(sd))
        for k, v in copy.deepcopy(snap["fields"]).items():
            setattr(self, k, v)
        self.step = snap["step"]
        self.samples = snap["samples"]
        if self._rng:
            _rng_apply(snap.get("rng"))

    def commit(self, check: bool = True, force: bool = False) -> None:
        """Keeps the current state as the one to go back to (every
        commit_every steps, or with force), reports the step to the sidecar
        (in the background), then, with check, raises GenerationChanged or
        DrainRequested when the group must re-form or this member leave.
        Call it after each step. With check, a newer generation is looked
        for before the copy, and a copy taken while the group was aborted
        is dropped: a step whose collectives may have been aborted is never
        committed (a drain still commits the step first)."""
        prev = self._snapshot["step"] if self._snapshot is not None else self.step
        session = self._session
        if check and session is not None:
            # Before the copy: a step that ended after a newer generation was
            # announced (its collectives may have been aborted: on NCCL an
            # aborted all-reduce can return without raising) is never
            # committed, so it can never be synced to the others.
            session.check(self.generation, drain=False)
        if force or self.commit_every == 1 or self.step - prev >= self.commit_every or self.step < prev:
            t0 = time.perf_counter()
            live = self._gather()
            devices = _gpu_devices([live["model"], live["optimizer"], live["objects"]])
            if devices:
                import torch

                if self._copies is None:
                    self._copies = _HostCopies(torch.cuda)
                self._copies.settle(devices)
            if check and session is not None and session.aborted(self.generation):
                # The group was aborted before the step's work was done: the
                # step may hold an aborted collective's result. The last
                # commit stays (its buffers are not written yet); an abort
                # that comes later cannot touch the step's finished work.
                session.check(self.generation, drain=False)
                raise GenerationChanged("the group of generation %d was aborted during the commit" % self.generation)
            self._copy(live, devices)
            if self._shards is not None:
                from . import shards

                self._shard = shards.capture(self._shards, self.step, self.rank, self.world_size)
                if self._replicas:
                    shards.replicate(self._shard, self._replicas, _device())
            took = time.perf_counter() - t0
            st = self.stats
            st["commits"] += 1
            st["commit_s"] += took
            st["last_commit_s"] = took
            now = time.monotonic()
            if session is not None and self.step > prev:
                session.committed(self, (now - self._committed_at) / (self.step - prev), self.step - prev)
            self._committed_at = now
        if check:
            self.check()

    def check(self) -> None:
        """Raises GenerationChanged or DrainRequested when the sidecar asked
        for it; returns at once otherwise (no I/O)."""
        if self._session is not None:
            self._session.check(self.generation)

    def restore(self) -> None:
        """Goes back to the last commit."""
        self._apply(self._snapshot)

    # The generation boundary and the everyday helpers.

    def _enter_generation(self):
        """Called by run() once a new group holds the synced commit, before
        train_fn: puts the batch policy in force for the new world."""
        self.stats["generations"] += 1
        self._shards = None  # built for the last group: train_fn attaches this one's (shard())
        self._apply_policy()
        if self.batch is not None and self.is_main:
            _log.info("generation %d: %s", self.generation, self.batch.describe())

    def _apply_policy(self):
        if self.batch_policy is not None:
            from .batch import apply_to_state

            self.batch = apply_to_state(self.batch_policy, self)

    def shard(self, obj: Any, optimizer: Any = None, *, replicas: int = 1) -> None:
        """Attaches sharded state for this generation and gives this rank
        its shard of the last commit (a collective: every rank calls it at
        the same point of train_fn, after building obj for the new group).
        obj is a ZeroRedundancyOptimizer (torch 1.13 and 2.x; give State
        no optimizer then), an FSDP2 model (fully_shard, torch >= 2.2) with
        its optimizer, or an adapter of ringside.shards. From then on a
        commit keeps a host copy of this rank's shard only; see
        ringside.shards for the reshard on a resize and what happens when
        a shard left with its rank. With replicas=k (default 1), every
        commit also sends this rank's shard to the next k ranks of the ring
        (and keeps the previous k ranks'): a drain, or the loss of up to k
        neighbouring ranks, then loses no step; 0 keeps no copy (a lost
        shard then comes back from the sharded checkpoint)."""
        if int(replicas) < 0:
            raise ValueError("State.shard: replicas must be 0 or more, got %r" % (replicas,))
        replicas = int(replicas)
        from . import shards

        adapter = shards.adapter_for(obj, optimizer)
        if getattr(adapter, "covers_model", False):
            self.model = adapter.model  # this generation's sharded module
        dev = _device()
        step = self.committed_step
        if self._snapshot.get("sharded") is None:
            # Nothing was committed sharded yet (the synced commit says so
            # alike on every rank): the new object's fresh state is the shard.
            self._shards, self._replicas = adapter, replicas
            self._shard = shards.capture(adapter, step, self.rank, self.world_size)
            return
        try:
            shards.reshard(adapter, self._shard, step, dev)
        except shards.ShardLost as e:
            self._restore_shards(adapter, e)
        sharded = self._snapshot.get("sharded")
        if sharded is not None:
            policy = self.batch_policy
            ratio = (policy.lr_scale if policy is not None else 1.0) / sharded["lr_scale"]
            adapter.load_replicated(_scale_lr(copy.deepcopy(sharded["replicated"]), ratio))
        self._shards, self._replicas = adapter, replicas
        self._shard = shards.capture(adapter, self.committed_step, self.rank, self.world_size)
        if replicas:
            shards.replicate(self._shard, replicas, dev)

    def _restore_shards(self, adapter, lost):
        """The group lost rows of the sharded state with a rank: every rank
        goes back to the newest sharded checkpoint complete on disk."""
        from . import shards

        session = self._session
        directory = getattr(getattr(session, "checkpointer", None), "directory", None)
        done = shards.complete_steps(directory) if directory else {}
        mains = {s for s in done if os.path.exists(shards.main_path(directory, s))}
        if not mains:
            raise shards.ShardLost("%s; no sharded checkpoint to go back to (run(checkpoint_dir=...) writes them)"
                                   % lost) from None
        step = max(mains)
        lost_from = self.committed_step
        self._replace(read_checkpoint(shards.main_path(directory, step)))
        self._shard = None
        self._apply(self._snapshot)
        self._apply_policy()  # the policy's state went back too: the plan of this world again
        shards.load_from_files(adapter, directory, step, done[step])
        self.stats["shard_restores"] += 1
        _log.warning("event shard_restored: %s; went back to the sharded checkpoint of step %d in %s: steps %d-%d are "
                     "trained again", lost, step, directory, step + 1, lost_from)

    def _checkpoint_shard(self, directory, every):
        """Writes this rank's shard (rank 0 also the replicated commit) when
        the committed step passed a multiple of every."""
        from . import shards

        step = self.committed_step
        if self._shard is None or self._shard["step"] != step or step // every <= self._shard_saved // every:
            return
        shards.write_shard(directory, self._shard, self.rank, self.world_size)
        if self.rank == 0:
            shards.write_main(directory, self._snapshot)
        self._shard_saved = step

    def adopt(self, optimizer: Any = None, **objects: Any) -> None:
        """Takes the optimizer and objects (schedulers, scalers) that a
        framework built inside train_fn (a Hugging Face Trainer, a
        Lightning Trainer) as this State's: when the last commit holds
        their state, they are restored from it (a later generation goes
        on where the job was); else it is committed now with them."""
        if optimizer is not None:
            self.optimizer = optimizer
        for name, obj in objects.items():
            if obj is not None:
                self.register(name, obj)
        snap = self._snapshot
        if (optimizer is None or snap.get("optimizer") is not None) and all(
                k in (snap.get("objects") or {}) for k, o in objects.items() if o is not None):
            self.restore()
        else:
            self.commit(check=False, force=True)

    @property
    def is_main(self) -> bool:
        """Whether this process is rank 0 of the current group (the one that
        logs, prints and writes the files meant once per job)."""
        return self.rank == 0

    def guard(self, loss: Any = None) -> bool:
        """The skip-step guard: call it after backward(), before the
        optimizer's step. True when the loss (if given) and every gradient
        of the model are finite on every rank; the ranks agree through one
        small all-reduce, so they all step or all skip. Otherwise the step
        is rolled back: the model, the optimizer, the registered objects
        (schedulers, scalers), the fields and the random generators go back
        to the last commit and the gradients are cleared, so the non-finite
        values never reach a commit; samplers keep their progress (the
        skipped batch counts as seen, as a loss scaler skips an overflowing
        step). It returns False then: skip optimizer.step() and the step
        counter, then record the batch and commit as usual.
        stats["skipped_steps"] counts the skips."""
        import torch

        what = None
        if loss is not None and not bool(torch.isfinite(torch.as_tensor(loss).detach()).all()):
            what = "loss"
        else:
            for p in self.model.parameters():
                g = p.grad.to_local() if type(p.grad).__name__ == "DTensor" else p.grad
                if g is not None and not bool(torch.isfinite(g).all()):
                    what = "gradient"
                    break
        bad = what is not None
        if self._session is not None or _distributed():
            import torch.distributed as dist

            flag = torch.tensor([1.0 if bad else 0.0], device=_device())
            _collective(dist.all_reduce, flag, dist.ReduceOp.MAX)
            bad = bool(flag.item() > 0)
        if not bad:
            return True
        keep = {k: o.state_dict() for k, o in self._objects.items() if callable(getattr(o, "set_rounds", None))}
        self.restore()
        self._apply_policy()  # the commit may predate this generation's plan: the plan stays in force
        for k, sd in keep.items():
            self._objects[k].load_state_dict(sd)
        for p in self.model.parameters():
            p.grad = None
        self.stats["skipped_steps"] += 1
        _log.warning("skipped a step with a non-finite %s: rolled back to the commit of step %d (%d skipped so far)",
                     what or "value on another rank", self.committed_step, self.stats["skipped_steps"])
        return False

    def summary(self) -> str:
        """A few lines for the user's log: where the job is, the group, the
        batch and learning rate in force, and what commits, syncs and skips
        cost so far."""
        st = self.stats
        lines = ["step %d (committed %d), %d samples on this member; generation %d, rank %d of %d%s"
                 % (self.step, self.committed_step, self.samples, self.generation, self.rank, self.world_size,
                    " (member %s)" % self.member if self.member else "")]
        if self.batch is not None:
            lines.append("batch: " + self.batch.describe())
        opt = self.optimizer if self.optimizer is not None else getattr(self._shards, "optimizer", None)
        lrs = sorted({g["lr"] for g in getattr(opt, "param_groups", []) if "lr" in g})
        if lrs:
            lines.append("learning rate: %s" % ", ".join("%.6g" % lr for lr in lrs))
        per = st["commit_s"] / st["commits"] if st["commits"] else 0.0
        lines.append("commits: %d, %.2f ms each; syncs moved %d bytes; %d generations joined; %d steps skipped "
                     "(non-finite)" % (st["commits"], per * 1e3, st["sync_bytes"], st["generations"],
                                       st["skipped_steps"]))
        if st["shard_restores"]:
            lines.append("sharded state: went back to a sharded checkpoint %d time(s) (shards lost with their ranks)"
                         % st["shard_restores"])
        if "checkpoint_failures" in st:
            lines.append("checkpoint failures: %d" % st["checkpoint_failures"])
        return "\n".join(lines)

    # On disk.

    def save(self, path: str) -> None:
        """Writes the last commit to path, atomically: a reader sees the
        previous file or this one, never a part (a temporary file in the
        same directory, flushed to disk, renamed over path)."""
        write_checkpoint(path, self._lend())

    def load(self, path: str) -> None:
        """Makes the commit in path (written by save) the last commit and
        restores it. Raises StateCorrupt when the file is damaged or is not
        a ringside checkpoint (nothing in it is ever unpickled)."""
        self._replace(read_checkpoint(path))
        self.restore()

    def _replace(self, snap):
        """Makes snap (decoded, from a peer or a file) the last commit; the
        next commit copies into the buffers of the last capture still."""
        self._snapshot = snap
        self._params_sha = None

    def _params_digest(self):
        """SHA-256 of the parameters and buffers of the last commit, as a
        sync sends them: the host copy is hashed, never the model on its
        device, and once per commit however many syncs ask."""
        if self._params_sha is None:
            self._params_sha = tensors_digest(self._snapshot["model"].items())
        return self._params_sha

    # Consistency across ranks.

    def digest(self) -> bytes:
        """SHA-256 of the model's parameters and buffers (bytes)."""
        return tensors_digest(self.model.state_dict().items())

    def measure_gns(self, ddp: Any, *, batch_size: Optional[float] = None, smoothing: float = 0.9) -> None:
        """Opts in to measuring the gradient noise scale (see ringside.gns):
        registers a communication hook on ddp, a DistributedDataParallel
        module (call it in train_fn for every one built, each generation),
        and from then on every commit's heartbeat carries the noise scale
        for the autoscaler. batch_size is this rank's samples per step
        (default: what state.samples grew by per step). The measurement
        keeps across generations; it replaces DDP's default hook with one
        that does the same all-reduce."""
        from .gns import GradientNoiseScale

        if self._gns is None:
            self._gns = GradientNoiseScale(smoothing)
        self._gns_batch = batch_size
        self._gns.attach(ddp)

    def ddp(self, **kwargs: Any) -> Any:
        """DistributedDataParallel(state.model, **kwargs) for this
        generation's group, built without DDP's own start-up collectives
        (its parameter shape check and its broadcast of rank 0's
        parameters and buffers): the generation's sync has just made every
        rank hold the same commit and compared their digests, so those
        collectives would only repeat it, on every resize. Call it in
        train_fn, once per generation, where you would build DDP; outside a
        synced generation it builds DDP as usual."""
        from torch.nn.parallel import DistributedDataParallel

        from . import _current

        group = _current.group()
        if group is None or group.generation != self._synced_generation:
            return DistributedDataParallel(self.model, **kwargs)
        return _ddp_without_startup_sync(DistributedDataParallel, self.model, kwargs)

    def measure_wait(self, ddp: Any) -> None:
        """Opts in to reporting this rank's wait in DDP's gradient
        all-reduce apart from its compute: registers a communication hook
        on ddp (call it in train_fn for every DistributedDataParallel module
        built, each generation) that does what DDP's default hook does and
        times it. From then on every heartbeat splits the step's time into
        compute and wait, and the leader can name this member a straggler
        when it computes for longer than the others. measure_gns times the
        all-reduce too: use one or the other. Collectives of your own are
        timed with `with state.waiting(): ...`."""
        if self._gns is not None:
            raise ValueError("measure_gns already times the all-reduce (DDP takes one communication hook): "
                             "call measure_gns or measure_wait, not both")
        ddp.register_comm_hook(None, _timed_allreduce)

    def waiting(self) -> Any:
        """A context manager around a collective of your own (an
        all_reduce, a barrier): its time counts as this rank's wait for its
        peers in the heartbeats, not as its compute."""
        return _Waiting()

    @property
    def gns(self) -> Optional[float]:
        """The gradient noise scale measured so far (samples); None without
        measure_gns or before an estimate."""
        return None if self._gns is None else self._gns.value()

    def _fold_gns(self) -> Optional[float]:
        if self._gns is None:
            return None
        self._gns.fold(self.step, self.samples, self._gns_batch)
        return self._gns.value()

    def checksum(self) -> str:
        """A short hex checksum of the model's parameters and buffers: equal
        on every rank that holds the same model."""
        return self.digest().hex()[:16]

    def _hello(self) -> bytes:
        """Goes back to the last commit and returns what this rank tells the
        others as the next group forms: the commit's step, its parameter
        digest and its commit digest (see sync), packed."""
        self.restore()
        return self._commit_entry()

    def _commit_entry(self) -> bytes:
        """The last commit's step, parameter digest and commit digest, packed."""
        return _ENTRY.pack(self._snapshot["step"], self._params_digest(), commit_digest(self._snapshot))

    def sync(self) -> int:
        """Makes every rank of the current group hold the same state. First
        every rank learns every rank's commit (its step and the digest of
        its parameters and buffers as a sync sends them, the host copy) in
        one collective: when all are equal, that is all. Else the lowest
        rank holding the newest commit (rank 0 when all agree) sends it to
        the ranks whose commit is older (joiners, a rank a step behind), in
        pieces of SYNC_CHUNK bytes; ranks holding the newest commit already
        receive nothing (when most ranks need it, it is broadcast instead).
        Then every rank's committed parameters are checksummed and compared
        (a receiver's as it received them). Raises StateCorrupt when a
        payload arrives corrupt, is refused, or ranks hold different
        parameters afterwards, and CollectiveFailed when one of its
        collectives fails. Returns the source rank;
        stats["last_sync_bytes"] says how many bytes the group moved."""
        return self._sync(None)

    def _sync(self, hellos) -> int:
        """sync; hellos, when every rank's _hello came with the formation
        (every rank holds the same list), stand for the first collective:
        a re-formed group whose ranks all hold the same commit then syncs
        without any collective."""
        import torch
        import torch.distributed as dist

        rank, world, backend = _session_group()
        dev = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
        # One collective tells every rank every rank's step, the digest of
        # the parameters of its commit (hashed on the host, once per commit:
        # the model on the device is never read back) and the digest of
        # the rest of that commit (samplers, schedulers, fields: what decides
        # which data the next steps train). When all are equal (a member
        # left: the survivors hold the same commit) that is the whole sync.
        entries = _entries(hellos, world)
        if entries is None:
            self.restore()
            entries = _entries(self._gather_hellos(world, dev), world)
        restored = self._params_digest()
        src, behind = plan_sync(entries)
        if not behind and all(e == entries[src] for e in entries):
            self.stats["last_sync_bytes"] = 0
            self._synced_generation = self.generation
            return src
        broadcast = len(behind) > (world - 1) // 2 and len(behind) > 1

        problem, got_bytes, got = None, 0, None
        if behind:
            payload = None
            header = torch.zeros(33, dtype=torch.int64, device=dev)
            steps = [e[0] for e in entries]
            if rank == src:
                payload = _serialize(self._snapshot)
                header = torch.tensor([len(payload)] + list(hashlib.sha256(payload).digest()), dtype=torch.int64,
                                      device=dev)
            if broadcast or rank == src or rank in behind:
                got = self._transfer(header, payload, src, behind, broadcast, dev)
            if got is not None:
                got_bytes = len(got)
                size, digest = int(header[0].item()), bytes(int(x) for x in header[1:].tolist())
                problem = self._accept(_received(got), size, digest, src, steps[src])
        if got is not None and problem is None:
            self.restore()
        # Every rank learns every rank's parameter digest (and how many
        # bytes it received), so all of them agree on whether to go on; a
        # rank whose payload was corrupt sends zeros.
        own = bytes(32) if problem else restored if got is None else self._params_digest()
        mine_t = torch.tensor(list(own) + [got_bytes], dtype=torch.int64, device=dev)
        all_t = [torch.zeros_like(mine_t) for _ in range(world)]
        _collective(dist.all_gather, all_t, mine_t)
        moved = sum(int(t[32].item()) for t in all_t)
        self.stats["last_sync_bytes"] = moved
        self.stats["sync_bytes"] += moved
        want = all_t[src][:32]
        bad = [r for r, t in enumerate(all_t) if not torch.equal(t[:32], want)]
        if problem or bad:
            raise StateCorrupt(
                "after the sync of generation %d from rank %d (step %d), ranks %s hold parameters that differ from "
                "rank %d's%s; not training on them" % (self.generation, src, self._snapshot["step"], bad, src,
                                                       ": " + problem if problem else ""))
        self._synced_generation = self.generation
        return src

    def _gather_hellos(self, world, dev):
        """Every rank's _hello, in one all-gather of the current group (what
        the formation's exchange gives run() without a collective)."""
        import torch
        import torch.distributed as dist

        mine = torch.tensor(list(self._commit_entry()), dtype=torch.uint8, device=dev)
        all_t = [torch.zeros_like(mine) for _ in range(world)]
        _collective(dist.all_gather, all_t, mine)
        return [bytes(t.cpu().tolist()) for t in all_t]

    def _transfer(self, header, payload, src, behind, broadcast, dev):
        """Moves the header and the payload from src to the ranks behind
        (all of them with broadcast); returns the bytes received (None on
        src)."""
        import torch
        import torch.distributed as dist

        rank = _session_group()[0]
        if broadcast:
            _collective(dist.broadcast, header, src)
        elif rank == src:
            for r in behind:
                _collective(dist.send, header, r)
        else:
            _collective(dist.recv, header, src)
        size = int(header[0].item())
        buf = bytearray(payload) if rank == src else bytearray(size)
        for off in range(0, size, SYNC_CHUNK):
            n = min(SYNC_CHUNK, size - off)
            if rank == src:
                chunk = torch.frombuffer(buf, dtype=torch.uint8, count=n, offset=off).to(dev)
            else:
                chunk = torch.empty(n, dtype=torch.uint8, device=dev)
            if broadcast:
                _collective(dist.broadcast, chunk, src)
            elif rank == src:
                for r in behind:
                    _collective(dist.send, chunk, r)
            else:
                _collective(dist.recv, chunk, src)
            if rank != src:
                buf[off:off + n] = chunk.cpu().numpy().tobytes()
        return None if rank == src else bytes(buf)

    def _accept(self, got, size, digest, src, src_step):
        """Makes the payload got from src this rank's commit; the problem
        with it, or None."""
        if len(got) != size or hashlib.sha256(got).digest() != digest:
            return "the state from rank %d arrived corrupt or partial (%d of %d bytes, SHA-256 %s, want %s)" % (
                src, len(got), size, hashlib.sha256(got).hexdigest()[:16], digest.hex()[:16])
        try:
            snap = _deserialize(got)
        except StateCorrupt as e:
            return "the state from rank %d was refused: %s" % (src, e)
        if snap["step"] == self._snapshot["step"] and self._snapshot.get("rng") is not None:
            snap["rng"] = self._snapshot["rng"]  # this rank's own streams go on
        self._replace(snap)
        return None


def _scale_lr(replicated, ratio):
    """The replicated values of a sharded optimizer with every learning rate
    times ratio (param groups as a list of dicts, or flat names ending in
    /lr)."""
    if ratio == 1.0:
        return replicated
    if isinstance(replicated, list):
        return [dict(g, lr=g["lr"] * ratio) if "lr" in g else g for g in replicated]
    return {k: v * ratio if k.endswith("/lr") else v for k, v in replicated.items()}


def _device():
    """Where the current group's collectives take their tensors."""
    import torch

    backend = _session_group()[2]
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


def _distributed():
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and dist.is_initialized()


def _session_group():
    """(rank, world size, backend) of the group run() trains in (see
    _current); outside run(), torch's default group."""
    from . import _current

    g = _current.group()
    if g is not None:
        return g.rank, g.world_size, g.backend
    import torch.distributed as dist

    rank, world = _current.rank_world()
    return rank, world, dist.get_backend()


_ddp_patch_lock = threading.Lock()


def _ddp_without_startup_sync(cls, model, kwargs):
    """Builds cls(model, **kwargs) without its start-up collectives: with
    init_sync=False where DDP takes it (torch >= 2.4), else with torch's
    two start-up helpers replaced for the construction (torch 1.13 to 2.3
    look them up in torch.nn.parallel.distributed); as usual where neither
    is there."""
    import inspect

    import torch.nn.parallel.distributed as ddp_mod

    if "init_sync" in inspect.signature(cls.__init__).parameters:
        kwargs.setdefault("init_sync", False)
        return cls(model, **kwargs)
    names = ("_verify_param_shape_across_processes", "_sync_module_states")
    if not all(callable(getattr(ddp_mod, n, None)) for n in names):
        return cls(model, **kwargs)
    with _ddp_patch_lock:
        saved = {n: getattr(ddp_mod, n) for n in names}
        try:
            for n in names:
                setattr(ddp_mod, n, lambda *a, **k: None)
            return cls(model, **kwargs)
        finally:
            for n, f in saved.items():
                setattr(ddp_mod, n, f)


# A rank's commit as the formation exchanges it: step, parameter digest,
# commit digest.
_ENTRY = struct.Struct(">q32s32s")


def _entries(hellos, world):
    """The (step, parameter digest, commit digest) of every rank from the
    formation's hellos; None when they are missing or not all well formed
    (every rank sees the same hellos, so all decide alike and fall back
    to the collective together)."""
    if not hellos or len(hellos) != world or any(len(h) != _ENTRY.size for h in hellos):
        return None
    return [_ENTRY.unpack(h) for h in hellos]


def commit_digest(snapshot):
    """SHA-256 of what a commit holds besides the model and the optimizer:
    the registered objects' states (samplers, schedulers, scalers) and the
    plain fields. Ranks of one step must agree on it as on the parameters:
    a sampler's state decides which indices the next steps train."""
    return hashlib.sha256(_codec.encode({"objects": snapshot.get("objects") or {},
                                         "fields": snapshot.get("fields") or {}})).digest()


def plan_sync(entries):
    """Which rank sends its commit and which ranks take it, given every
    rank's (step, parameter digest, commit digest): the lowest rank holding
    the newest step sends; a rank receives when its step or its commit
    digest differs from the sender's. A rank of the same step and commit
    digest whose parameters differ receives nothing (the comparison after
    the sync reports it)."""
    steps = [e[0] for e in entries]
    src = steps.index(max(steps))
    behind = [r for r, e in enumerate(entries) if e[0] != entries[src][0] or e[2] != entries[src][2]]
    return src, behind


def write_checkpoint(path, snapshot, kind="commit"):
    """Writes snapshot (a commit; with kind "object", any plain data and
    tensors) to path atomically: a temporary file in the same directory,
    written and fsynced, renamed over path, the directory fsynced. Raises
    CheckpointFailed when any of it fails; a previous file at path is then
    untouched."""
    from .errors import CheckpointFailed

    try:
        payload = _codec.encode(snapshot if kind == "commit" else {"$ringside-object": snapshot})
    except _codec.Unsupported as e:
        raise CheckpointFailed("not writing %s: %s" % (path, e)) from None
    d = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(d, ".%s.tmp-%d-%d" % (os.path.basename(path), os.getpid(), threading.get_ident()))
    try:
        os.makedirs(d, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(payload)
            f.write(hashlib.sha256(payload).digest())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself
        finally:
            os.close(fd)
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise CheckpointFailed("could not write the checkpoint %s: %s (the previous file, if any, is unchanged)"
                               % (path, e)) from e
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def checkpoint_step(path):
    """The step of the commit in the checkpoint at path, read from the
    payload's skeleton alone (its tensors and SHA-256 unchecked); None when
    there is no file or it holds no commit."""
    try:
        with open(path, "rb") as f:
            skeleton = _codec.read_skeleton(f)
    except (OSError, ValueError):
        return None
    if isinstance(skeleton, dict) and skeleton.get("$") == "d" and isinstance(skeleton.get("v"), list):
        for pair in skeleton["v"]:
            if isinstance(pair, list) and len(pair) == 2 and pair[0] == "step" and type(pair[1]) is int:
                return pair[1]
    return None


def read_checkpoint(path, kind="commit"):
    """The commit in the checkpoint at path; StateCorrupt when damaged.
    With kind None, whatever ringside.save wrote (a commit or an object)."""
    with open(path, "rb") as f:
        raw = f.read()
    payload, digest = raw[:-_DIGEST_LEN], raw[-_DIGEST_LEN:]
    if len(raw) <= _DIGEST_LEN or hashlib.sha256(payload).digest() != digest:
        raise StateCorrupt("the checkpoint %s is damaged (its SHA-256 does not match); not loading it" % path)
    if kind is None:
        try:
            obj = _codec.decode(payload)
        except (ValueError, TypeError, KeyError, OverflowError) as e:
            raise StateCorrupt("the checkpoint %s: refused: %s" % (path, e)) from None
        if isinstance(obj, dict) and set(obj) == {"$ringside-object"}:
            return obj["$ringside-object"]
        return obj
    try:
        return _deserialize(payload)
    except StateCorrupt as e:
        raise StateCorrupt("the checkpoint %s: %s" % (path, e)) from None
