"""State: what a live elastic trainer keeps across generations, in the
pattern of Horovod's elastic State (commit, restore, sync), for PyTorch.

    state = State(model, optimizer, epoch=0)
    ...
    state.step += 1
    state.commit()        # a cheap copy in memory; raises to re-form the group
                          # when the sidecar announced a new generation or a drain

A commit is a deep copy on the CPU of the model's and the optimizer's
state_dict, the step counter, the samples count and the user fields.
restore() goes back to it. sync() makes every rank of a new group hold the
same commit: the rank with the newest commit broadcasts it, every receiver
verifies its SHA-256, and every rank's parameters are checksummed and
compared; any difference raises StateCorrupt.
"""

import copy
import hashlib
import io
import time

from .errors import RingsideError, StateCorrupt


class Interrupted(RingsideError):
    """Raised by State.commit() and State.check() to leave train_fn: run()
    catches it. A train_fn must let it through."""


class GenerationChanged(Interrupted):
    """The sidecar announced a new generation: the group re-forms."""


class DrainRequested(Interrupted):
    """This member is being drained: it stops after its last commit."""


_RESERVED = {"model", "optimizer", "step", "samples", "rank", "world_size", "local_rank", "generation", "member"}


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
    import torch

    buf = io.BytesIO()
    torch.save(snapshot, buf)
    return buf.getvalue()


def _deserialize(payload):
    import torch

    buf = io.BytesIO(payload)
    try:
        return torch.load(buf, map_location="cpu", weights_only=False)
    except TypeError:  # torch without weights_only
        buf.seek(0)
        return torch.load(buf, map_location="cpu")


def _received(payload):
    """The bytes a receiver got; tests replace this to corrupt them."""
    return payload


class State:
    """The trainer's state across generations.

    model and optimizer are the bare module (not its DistributedDataParallel
    wrapper, which train_fn builds for every generation) and its optimizer;
    keyword arguments become attributes that are committed, restored and
    synced with them. step counts the job's completed steps and samples
    this member's samples; both are committed.

    While run() trains, rank, world_size, local_rank, generation and member
    describe the current group.
    """

    def __init__(self, model, optimizer=None, **fields):
        for k in fields:
            if k in _RESERVED or k.startswith("_"):
                raise ValueError("State field %r is reserved; pick another name" % k)
        self.model = model
        self.optimizer = optimizer
        self.step = 0
        self.samples = 0
        self._fields = list(fields)
        for k, v in fields.items():
            setattr(self, k, v)
        self.rank = 0
        self.world_size = 1
        self.local_rank = 0
        self.generation = 0
        self.member = ""
        self._session = None
        self._snapshot = None
        self._committed_at = time.monotonic()
        self.commit(check=False)

    # Commits.

    @property
    def committed_step(self):
        return self._snapshot["step"]

    def _capture(self):
        return {
            "step": int(self.step),
            "samples": int(self.samples),
            "model": _clone_cpu(self.model.state_dict()),
            "optimizer": _clone_cpu(self.optimizer.state_dict()) if self.optimizer is not None else None,
            "fields": copy.deepcopy({k: getattr(self, k) for k in self._fields}),
        }

    def _apply(self, snap):
        self.model.load_state_dict(snap["model"])
        if self.optimizer is not None and snap["optimizer"] is not None:
            # A copy: the optimizer keeps CPU tensors it is given, and
            # updates them in place.
            self.optimizer.load_state_dict(_clone_cpu(snap["optimizer"]))
        for k, v in copy.deepcopy(snap["fields"]).items():
            setattr(self, k, v)
        self.step = snap["step"]
        self.samples = snap["samples"]

    def commit(self, check=True):
        """Keeps the current state as the one to go back to, reports the
        step to the sidecar (in the background), then, with check, raises
        GenerationChanged or DrainRequested when the group must re-form or
        this member leave. Call it after each step (or every few)."""
        prev = self._snapshot["step"] if self._snapshot is not None else self.step
        self._snapshot = self._capture()
        now = time.monotonic()
        if self._session is not None and self.step > prev:
            self._session.committed(self, (now - self._committed_at) / (self.step - prev))
        self._committed_at = now
        if check:
            self.check()

    def check(self):
        """Raises GenerationChanged or DrainRequested when the sidecar asked
        for it; returns at once otherwise (no I/O)."""
        if self._session is not None:
            self._session.check(self.generation)

    def restore(self):
        """Goes back to the last commit."""
        self._apply(self._snapshot)

    # Consistency across ranks.

    def digest(self):
        """SHA-256 of the model's parameters and buffers (bytes)."""
        return tensors_digest(self.model.state_dict().items())

    def checksum(self):
        """A short hex checksum of the model's parameters and buffers: equal
        on every rank that holds the same model."""
        return self.digest().hex()[:16]

    def sync(self):
        """Makes every rank of the current group hold the same state: the
        lowest rank holding the newest commit (rank 0 when all agree)
        broadcasts it. Raises StateCorrupt when a payload arrives corrupt
        or ranks hold different parameters afterwards. Returns the source
        rank."""
        import torch
        import torch.distributed as dist

        rank, world = dist.get_rank(), dist.get_world_size()
        dev = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
        steps = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in range(world)]
        dist.all_gather(steps, torch.tensor([self._snapshot["step"]], dtype=torch.int64, device=dev))
        steps = [int(t.item()) for t in steps]
        src = steps.index(max(steps))

        header = torch.zeros(33, dtype=torch.int64, device=dev)
        if rank == src:
            payload = _serialize(self._snapshot)
            header = torch.tensor([len(payload)] + list(hashlib.sha256(payload).digest()), dtype=torch.int64, device=dev)
        dist.broadcast(header, src)
        size, digest = int(header[0].item()), bytes(int(x) for x in header[1:].tolist())
        if rank == src:
            data = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(dev)
        else:
            data = torch.empty(size, dtype=torch.uint8, device=dev)
        dist.broadcast(data, src)

        problem = None
        if rank != src:
            got = _received(data.cpu().numpy().tobytes())
            if len(got) != size or hashlib.sha256(got).digest() != digest:
                problem = "the state from rank %d arrived corrupt or partial (%d of %d bytes, SHA-256 %s, want %s)" % (
                    src, len(got), size, hashlib.sha256(got).hexdigest()[:16], digest.hex()[:16])
            else:
                self._snapshot = _deserialize(got)
        if problem is None:
            self.restore()
        # Every rank learns every rank's parameter digest, so all of them
        # agree on whether to go on; a rank whose payload was corrupt sends
        # zeros.
        own = bytes(32) if problem else self.digest()
        mine_t = torch.tensor(list(own), dtype=torch.int64, device=dev)
        all_t = [torch.zeros_like(mine_t) for _ in range(world)]
        dist.all_gather(all_t, mine_t)
        want = all_t[src]
        bad = [r for r, t in enumerate(all_t) if not torch.equal(t, want)]
        if problem or bad:
            raise StateCorrupt(
                "after the sync of generation %d from rank %d (step %d), ranks %s hold parameters that differ from "
                "rank %d's%s; not training on them" % (self.generation, src, self._snapshot["step"], bad, src,
                                                       ": " + problem if problem else ""))
        return src
