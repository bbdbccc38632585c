"""Sharded state across resizes: each rank commits only its own shard, and
a new group gets a consistent state without any rank ever holding the
whole of it.

A shard is a set of pieces: rows [start, stop) of a named tensor of a
global shape (the first dimension is the one cut; a tensor held whole is
rows [0, rows)). An adapter knows one way of sharding:

- ZeroAdapter: torch's ZeroRedundancyOptimizer (torch 1.13 and 2.x), whose
  optimizer state is cut by parameter: each rank holds the whole state of
  the parameters it owns, for a partition that depends on the world size;
  the model itself is replicated (DDP).
- DTensorAdapter: the model and optimizer state dicts of FSDP2
  (fully_shard, torch >= 2.2), DTensors sharded on their first dimension
  over a 1-D mesh, as torch.distributed.checkpoint.state_dict gives them.

State.shard(adapter_or_object) attaches one in train_fn, every
generation, once the group and the sharded object are built. A commit then
keeps a host copy of this rank's pieces, with the step (and, with
replicas, of its neighbours' pieces: never the whole state).
At a new generation, shard() reshards: every rank tells every other rank
which pieces it holds of the commit the group synced to, every rank names
the rows its new layout needs, and the rows move from the holders to the
ranks that need them, point to point, each pair in one message of tensors
and plain data (no pickle). A rank only ever holds its old shard (with
its replicas) and its new one.

With replicas=k (State.shard; default 1) every commit also hands this
rank's pieces to the next k ranks of the ring, which keep them: a rank
that leaves (a drain, or up to k neighbours lost) takes no piece with it.
Without a replica it takes its pieces with it. When some rank of the
generation that committed the synced step is represented by no rank of
the new group, the group goes back to the last
sharded checkpoint (checkpoint_dir, every rank's shard in its own file):
every rank loads the replicated state and the rows it needs from it, the
step counter goes back to the checkpoint's, and a warning and
state.stats["shard_restores"] say which steps were lost. Without such a
checkpoint, ShardLost is raised, naming the rows that were lost.
"""

import json
import os
import re

from . import _codec
from .errors import RingsideError, StateCorrupt

__all__ = ["ShardLost", "ZeroAdapter", "DTensorAdapter", "adapter_for"]


class ShardLost(RingsideError):
    """Rows of the sharded state were held only by ranks that left, and no
    sharded checkpoint holds them."""


class Piece:
    """Rows [start, stop) of the tensor name, whose global shape is shape."""

    __slots__ = ("name", "start", "stop", "shape", "dtype", "tensor")

    def __init__(self, name, start, stop, shape, tensor=None, dtype=None):
        self.name, self.start, self.stop, self.shape, self.tensor = name, int(start), int(stop), tuple(shape), tensor
        self.dtype = dtype if dtype is not None else (str(tensor.dtype).replace("torch.", "") if tensor is not None
                                                      else None)

    def meta(self):
        return [self.name, self.start, self.stop, list(self.shape), self.dtype]

    @classmethod
    def of(cls, meta, tensor=None):
        name, start, stop, shape, dtype = meta
        return cls(name, start, stop, shape, tensor, dtype)


def rows_of(shape):
    return shape[0] if shape else 1


# Adapters.

class ZeroAdapter:
    """torch.distributed.optim.ZeroRedundancyOptimizer: the state of
    parameter i (its global index) is pieces "i/<key>" held whole by the
    parameter's owner; the param groups' hyperparameters are replicated."""

    def __init__(self, zero):
        self.zero = self.optimizer = zero

    def _owned(self):
        z = self.zero
        index = z._param_to_index
        return {index[p]: p for g in z._partition_parameters()[z.rank] for p in g["params"]}

    def replicated(self):
        return [{k: v for k, v in g.items() if k != "params"} for g in self.zero.param_groups]

    def load_replicated(self, groups):
        for g, saved in zip(self.zero.param_groups, groups):
            g.update(saved)
        self.zero._sync_param_groups(self.zero.param_groups, self.zero.optim.param_groups)

    def pieces(self):
        out = []
        for i, p in sorted(self._owned().items()):
            for key, v in sorted(self.zero.optim.state.get(p, {}).items()):
                t = v if _is_tensor(v) else _scalar_tensor(v)
                shape = tuple(t.shape)
                out.append(Piece("%d/%s" % (i, key), 0, rows_of(shape), shape, t))
        return out

    def needs(self, inventory):
        """The pieces this rank's partition needs, given every piece the
        group holds (name -> Piece)."""
        owned = self._owned()
        out = []
        for name, held in sorted(inventory.items()):
            if int(name.split("/", 1)[0]) in owned:
                out.append(Piece(name, 0, rows_of(held.shape), held.shape, dtype=held.dtype))
        return out

    def load(self, got):
        owned = self._owned()
        state = {}
        for name, t in got.items():
            i, key = name.split("/", 1)
            p = owned[int(i)]
            state.setdefault(p, {})[key] = t.to(p.device) if t.dim() > 0 else t
        opt = self.zero.optim
        opt.state.clear()
        for p, s in state.items():
            opt.state[p] = s


class DTensorAdapter:
    """The state dicts of an FSDP2 model (fully_shard, torch >= 2.2) and its
    optimizer, through torch.distributed.checkpoint.state_dict: every
    DTensor sharded on dimension 0 over a 1-D mesh (FSDP2's layout), rank r
    holding the rows torch.chunk gives it; anything else (plain tensors,
    numbers, the param groups) is replicated, and committed with the rest
    of the commit. Nested names are joined with "/", a list's items as
    "#i"."""

    covers_model = True  # the model's state is in the shards: the State's commit leaves it out

    def __init__(self, model, optimizer=None):
        self.model, self.optimizer = model, optimizer
        self._replicated = None
        self._shapes = {}  # {name: global shape} of the pieces pieces() and needs() named

    def _state_dicts(self):
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

        if self.optimizer is None:
            return {"model": get_model_state_dict(self.model)}
        msd, osd = get_state_dict(self.model, self.optimizer)
        return {"model": msd, "optim": osd}

    def _flat(self):
        out = {}

        def walk(prefix, v):
            if isinstance(v, dict):
                for k, x in v.items():
                    walk("%s/%s" % (prefix, k), x)
            elif isinstance(v, list):
                for k, x in enumerate(v):
                    walk("%s/#%d" % (prefix, k), x)
            else:
                out[prefix] = v

        for k, sd in self._state_dicts().items():
            walk(k, sd)
        return out

    def _mesh(self):
        for p in self.model.parameters():
            if _is_dtensor(p):
                return p.device_mesh
        raise ValueError("sharded state: the model has no DTensor parameters (is it fully_shard()ed?)")

    @staticmethod
    def _chunk(rows, world, rank):
        c = -(-rows // world) if rows else 0
        start = min(rows, rank * c)
        return start, min(rows, start + c)

    def replicated(self):
        return {k: v for k, v in self._flat().items() if not _is_dtensor(v)}

    def load_replicated(self, values):
        self._replicated = values
        flat = self._flat()
        flat.update(values)
        self._load_flat(flat)

    def pieces(self):
        out = []
        for name, v in sorted(self._flat().items()):
            if _is_dtensor(v):
                mesh = v.device_mesh
                if mesh.ndim != 1 or len(v.placements) != 1 or not (v.placements[0].is_shard()
                                                                  and v.placements[0].dim == 0):
                    raise ValueError("sharded state: %s is placed %s on %s; only Shard(0) over a 1-D mesh (FSDP2's "
                                     "layout) is supported" % (name, v.placements, mesh))
                shape = tuple(v.shape)
                start, stop = self._chunk(rows_of(shape), mesh.size(), mesh.get_local_rank())
                self._shapes[name] = shape
                out.append(Piece(name, start, stop, shape, v.to_local()))
        return out

    def needs(self, inventory):
        mesh = self._mesh()
        out = []
        for name, held in sorted(inventory.items()):
            start, stop = self._chunk(rows_of(held.shape), mesh.size(), mesh.get_local_rank())
            self._shapes[name] = held.shape
            out.append(Piece(name, start, stop, held.shape, dtype=held.dtype))
        return out

    def load(self, got):
        """Loads this rank's rows (got: {name: rows}, of the layout needs()
        or pieces() gave) as DTensors, merged into the current state dicts
        with the replicated values loaded last."""
        try:
            from torch.distributed.tensor import DTensor, Shard
        except ImportError:  # torch < 2.5
            from torch.distributed._tensor import DTensor, Shard

        mesh = self._mesh()
        flat = self._flat()
        flat.update(self._replicated or {})
        for name, t in got.items():
            full = self._shapes[name]
            flat[name] = DTensor.from_local(t.to(mesh.device_type), mesh, [Shard(0)], run_check=False, shape=full,
                                            stride=_contiguous_stride(full))
        self._load_flat(flat)

    def _load_flat(self, flat):
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

        sds = {}
        for name, v in flat.items():
            _put(sds, name, v)
        if self.optimizer is None or "optim" not in sds:
            set_model_state_dict(self.model, sds.get("model", {}))
        else:
            set_state_dict(self.model, self.optimizer, model_state_dict=sds["model"], optim_state_dict=sds["optim"])


def _contiguous_stride(shape):
    stride, acc = [], 1
    for n in reversed(shape):
        stride.append(acc)
        acc *= max(1, n)
    return tuple(reversed(stride))


def _put(root, name, v):
    """Sets v at the "/"-joined path name in nested dicts and lists ("#i")."""
    parts = name.split("/")
    node = root
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        nxt = None if last else ([] if parts[i + 1].startswith("#") else {})
        if part.startswith("#"):
            k = int(part[1:])
            while len(node) <= k:
                node.append(None)
            if last:
                node[k] = v
            else:
                if node[k] is None:
                    node[k] = nxt
                node = node[k]
        else:
            if last:
                node[part] = v
            else:
                node = node.setdefault(part, nxt)


def _is_dtensor(v):
    return type(v).__name__ == "DTensor"


def adapter_for(obj, optimizer=None):
    """The adapter of obj: an adapter itself, a ZeroRedundancyOptimizer, or
    an FSDP2 model (with its optimizer)."""
    if hasattr(obj, "pieces") and hasattr(obj, "needs"):
        return obj
    if type(obj).__name__ == "ZeroRedundancyOptimizer":
        return ZeroAdapter(obj)
    if _has_dtensors(obj):
        return DTensorAdapter(obj, optimizer)
    raise TypeError("State.shard() takes a ZeroRedundancyOptimizer, an FSDP2 (fully_shard) model with its optimizer, "
                    "or a shards adapter; got %s" % type(obj).__name__)


def _has_dtensors(model):
    params = getattr(model, "parameters", None)
    return callable(params) and any(_is_dtensor(p) for p in params())


def _is_tensor(v):
    return _codec._is_tensor(v)


def _scalar_tensor(v):
    import torch

    return torch.tensor(v)


# Commits of a shard.

def capture(adapter, step, rank, world):
    """A host copy of this rank's pieces, with the step, the rank and the
    world size they are of; "copies" will hold the replicas of other
    ranks' pieces (replicate)."""
    pieces = []
    for p in adapter.pieces():
        t = p.tensor.detach().to("cpu", copy=True)
        pieces.append(Piece(p.name, p.start, p.stop, p.shape, t))
    return {"step": int(step), "rank": int(rank), "world": int(world), "pieces": pieces, "copies": {}}


def _send_bytes(payload, dst, dev):
    import torch
    import torch.distributed as dist

    from .state import _collective

    n = torch.tensor([len(payload)], dtype=torch.int64, device=dev)
    _collective(dist.send, n, dst)
    if payload:
        _collective(dist.send, torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(dev), dst)


def _recv_bytes(src, dev):
    import torch
    import torch.distributed as dist

    from .state import _collective

    n = torch.zeros(1, dtype=torch.int64, device=dev)
    _collective(dist.recv, n, src)
    if int(n.item()) == 0:
        return b""
    buf = torch.empty(int(n.item()), dtype=torch.uint8, device=dev)
    _collective(dist.recv, buf, src)
    return bytes(buf.cpu().numpy().tobytes())


def _encode_pieces(pieces):
    return _codec.encode([[*p.meta(), p.tensor] for p in pieces])


def _decode_pieces(payload, src):
    try:
        return [Piece.of(m[:5], m[5]) for m in _codec.decode(payload)]
    except (ValueError, TypeError, KeyError, OverflowError) as e:
        raise StateCorrupt("the sharded state from rank %d was refused: %s" % (src, e)) from None


def replicate(shard, replicas, dev):
    """Gives the next replicas ranks of the ring a copy of this rank's
    pieces and keeps a copy of the previous replicas ranks' (a collective
    of the whole group, at a commit): a rank that leaves then takes no
    piece with it that another rank does not hold."""
    rank, world = shard["rank"], shard["world"]
    copies = {}
    mine = _encode_pieces(shard["pieces"])
    for k in range(1, min(replicas, world - 1) + 1):
        dst, src = (rank + k) % world, (rank - k) % world
        # Even ranks send first, odd ones receive first: in a ring of an
        # odd size the one pair of the same parity waits only until its
        # sender's own send was taken, which never waits on it.
        if rank % 2 == 0:
            _send_bytes(mine, dst, dev)
            got = _recv_bytes(src, dev)
        else:
            got = _recv_bytes(src, dev)
            _send_bytes(mine, dst, dev)
        copies[src] = _decode_pieces(got, src)
    shard["copies"] = copies


# The reshard.

def _all_gather_bytes(b, dev):
    import torch
    import torch.distributed as dist

    from .state import _collective, _session_group

    world = _session_group()[1]
    n = torch.tensor([len(b)], dtype=torch.int64, device=dev)
    sizes = [torch.zeros_like(n) for _ in range(world)]
    _collective(dist.all_gather, sizes, n)
    top = max(int(s.item()) for s in sizes)
    buf = torch.zeros(top, dtype=torch.uint8, device=dev)
    if b:
        buf[:len(b)] = torch.frombuffer(bytearray(b), dtype=torch.uint8).to(dev)
    out = [torch.zeros_like(buf) for _ in range(world)]
    _collective(dist.all_gather, out, buf)
    return [bytes(o[:int(s.item())].cpu().numpy().tobytes()) for o, s in zip(out, sizes)]


def plan_moves(held, needs):
    """The moves that give each rank the rows it needs. held[r] and
    needs[r] are rank r's pieces (metadata only). Returns ({(src, dst):
    [(name, start, stop)]}, missing) where missing lists the needed
    (rank, name, start, stop) that no rank holds."""
    by_name = {}
    for r, ps in enumerate(held):
        for p in ps:
            by_name.setdefault(p.name, []).append((p.start, p.stop, r))
    moves, missing = {}, []
    for dst, ps in enumerate(needs):
        for p in ps:
            at = p.start
            for s, e, src in sorted(by_name.get(p.name, []), key=lambda x: (x[0], x[2] != dst, x[2])):
                if e <= at or s >= p.stop:
                    continue
                if s > at:
                    missing.append((dst, p.name, at, s))
                lo, hi = max(at, s), min(p.stop, e)
                moves.setdefault((src, dst), []).append((p.name, lo, hi))
                at = hi
                if at >= p.stop:
                    break
            if at < p.stop:
                missing.append((dst, p.name, at, p.stop))
    return moves, missing


def reshard(adapter, shard, step, dev):
    """Gives this rank the rows of step's sharded state its adapter's new
    layout needs, from the ranks that hold them; loads them. Raises
    ShardLost (on every rank alike) when rows are held by nobody."""
    from .state import _session_group

    rank = _session_group()[0]
    mine, origins = [], []
    if shard is not None and shard["step"] == step:
        mine = list(shard["pieces"])
        origins = [[shard["rank"], shard["world"]]]
        for r, ps in sorted(shard["copies"].items()):
            mine.extend(ps)
            origins.append([r, shard["world"]])
    metas = _all_gather_bytes(json.dumps({"pieces": [p.meta() for p in mine], "origins": origins}).encode(), dev)
    decoded = [json.loads(b) for b in metas]
    held = [[Piece.of(m) for m in d["pieces"]] for d in decoded]
    # Every rank of the generation that committed step must be represented
    # (by its own shard or a copy): else its pieces left with it.
    present = {tuple(o) for d in decoded for o in d["origins"]}
    worlds = {w for _, w in present}
    gone = sorted(set(range(max(worlds))) - {r for r, _ in present}) if len(worlds) == 1 else None
    if gone is None or gone:
        raise ShardLost("the shards of step %d of rank(s) %s left with their ranks" % (
            step, gone if gone else "of several world sizes (%s)" % sorted(worlds)) if worlds else
            "no rank holds a shard of step %d" % step)
    inventory = {p.name: p for ps in held for p in ps}
    need = adapter.needs(inventory)
    needs_all = [[Piece.of(m) for m in json.loads(b)] for b in
                 _all_gather_bytes(json.dumps([p.meta() for p in need]).encode(), dev)]
    moves, missing = plan_moves(held, needs_all)
    if missing:
        raise ShardLost("%d piece(s) of the sharded state of step %d are held by no rank of this group (first: rank "
                        "%d needs rows %d-%d of %s)" % (len(missing), step, missing[0][0], missing[0][2],
                                                        missing[0][3], missing[0][1]))
    local = {}
    for p in mine:
        local.setdefault(p.name, []).append(p)

    def rows(name, lo, hi):
        for p in local[name]:
            if p.start <= lo and hi <= p.stop:
                return p.tensor[lo - p.start:hi - p.start] if p.shape else p.tensor
        raise KeyError(name)

    parts = {}  # name -> [(start, tensor rows)]
    for (src, dst) in sorted(moves):
        items = moves[(src, dst)]
        if src == dst == rank:
            for name, lo, hi in items:
                parts.setdefault(name, []).append((lo, rows(name, lo, hi)))
            continue
        if rank not in (src, dst):
            continue
        if rank == src:
            _send_bytes(_codec.encode([[name, lo, rows(name, lo, hi)] for name, lo, hi in items]), dst, dev)
        else:
            try:
                got = _codec.decode(_recv_bytes(src, dev))
            except (ValueError, TypeError, KeyError, OverflowError) as e:
                raise StateCorrupt("the sharded state from rank %d was refused: %s" % (src, e)) from None
            for name, lo, t in got:
                parts.setdefault(name, []).append((lo, t))
    adapter.load(_assemble(need, parts))
    return len(need)


def _assemble(need, parts):
    """{name: this rank's rows} from parts ({name: [(start, rows)]})."""
    import torch

    out = {}
    for p in need:
        rows = sorted(parts.get(p.name, []), key=lambda x: x[0])
        if not rows:  # none of its rows are this rank's
            out[p.name] = torch.empty((0,) + tuple(p.shape[1:]), dtype=getattr(torch, p.dtype))
        elif len(rows) == 1:
            out[p.name] = rows[0][1].clone()
        else:
            out[p.name] = torch.cat([t for _, t in rows])
    return out


# Sharded checkpoints: every rank its own file per step.

SHARD_DIR = "ringside-shards"
_SHARD_FILE = re.compile(r"^step-(\d+)\.rank-(\d+)-of-(\d+)\.ckpt$")
_MAIN_FILE = re.compile(r"^step-(\d+)\.main\.ckpt$")


def shard_path(directory, step, rank, world):
    return os.path.join(directory, SHARD_DIR, "step-%d.rank-%d-of-%d.ckpt" % (step, rank, world))


def main_path(directory, step):
    return os.path.join(directory, SHARD_DIR, "step-%d.main.ckpt" % step)


def write_main(directory, snapshot, keep=2):
    """Rank 0: the replicated commit of a sharded checkpoint's step."""
    from .state import write_checkpoint

    write_checkpoint(main_path(directory, snapshot["step"]), snapshot)
    d = os.path.join(directory, SHARD_DIR)
    mains = sorted((int(m.group(1)), f) for f in os.listdir(d) for m in [_MAIN_FILE.match(f)] if m)
    for _, f in mains[:-keep]:
        try:
            os.remove(os.path.join(d, f))
        except OSError:
            pass


def write_shard(directory, shard, rank, world, keep=2):
    """Writes this rank's shard of its commit, then removes its own files
    of older steps but the keep newest."""
    from .state import write_checkpoint

    path = shard_path(directory, shard["step"], rank, world)
    write_checkpoint(path, {"step": shard["step"], "pieces": [[*p.meta(), p.tensor] for p in shard["pieces"]]},
                     kind="object")
    d = os.path.dirname(path)
    mine = []
    for f in os.listdir(d):
        m = _SHARD_FILE.match(f)
        if m and int(m.group(2)) == rank:
            mine.append((int(m.group(1)), f))
    for _, f in sorted(mine)[:-keep]:
        try:
            os.remove(os.path.join(d, f))
        except OSError:
            pass


def complete_steps(directory):
    """{step: world} of the steps whose every rank's shard file is there."""
    d = os.path.join(directory, SHARD_DIR)
    try:
        names = os.listdir(d)
    except OSError:
        return {}
    seen = {}
    for f in names:
        m = _SHARD_FILE.match(f)
        if m:
            seen.setdefault((int(m.group(1)), int(m.group(3))), set()).add(int(m.group(2)))
    return {step: world for (step, world), ranks in seen.items() if ranks == set(range(world))}


def load_from_files(adapter, directory, step, world):
    """Loads the rows this rank's layout needs from the shard files of
    step (written by world ranks). The
    files are read one at a time, twice: first what they hold, then only
    the rows this rank needs are kept, so no rank holds more than one old
    shard besides its new one."""
    import torch

    from .state import read_checkpoint

    def read(r):
        return read_checkpoint(shard_path(directory, step, r, world), kind=None)

    held = []
    for r in range(world):
        f = read(r)
        held.append([Piece.of(m[:5]) for m in f["pieces"]])
        del f
    need = adapter.needs({p.name: p for ps in held for p in ps})
    moves, missing = plan_moves(held, [need])
    if missing:
        raise ShardLost("the sharded checkpoint of step %d lacks rows %d-%d of %s" % (step, missing[0][2],
                                                                                      missing[0][3], missing[0][1]))
    parts = {}
    for (src, _), items in sorted(moves.items()):
        pieces = {m[0]: (m[1], m[5]) for m in read(src)["pieces"]}
        for name, lo, hi in items:
            s, t = pieces[name]
            parts.setdefault(name, []).append((lo, (t[lo - s:hi - s] if t.dim() else t).clone()))
        del pieces
    adapter.load(_assemble(need, parts))
