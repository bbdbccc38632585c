"""ringside: the trainer side of ringside's elastic training.

- ringside.client: the sidecar's trainer API (rendezvous, events,
  heartbeat, failure, leave), standard library only.
- ringside.elastic: live elastic PyTorch training: State (commit, restore,
  sync, save, load), run(train_fn, state) and ElasticSampler. torch is
  imported only when used.
- ringside.batch: what the global batch and the learning rate become on
  a resize (KeepGlobalBatch, KeepPerRankBatch).
- ringside.shards: sharded state (ZeroRedundancyOptimizer, FSDP2) kept
  per rank and resharded on a resize (State.shard).
- ringside.hf, ringside.lightning: a Hugging Face Trainer callback and
  Lightning plugins; their libraries are imported only when used.
"""

from ._version import __version__
from .client import API_VERSION, Client, Event, Member, Rendezvous
from .errors import (CheckpointFailed, CollectiveFailed, IncompatibleSidecar, RingsideError, SidecarError, SidecarLost,
                     SidecarUnreachable, StateCorrupt)


def save(obj, path):
    """Writes obj to path atomically: a reader sees the previous file or
    this one, never a part (a temporary file in the same directory, written,
    fsynced, renamed over path, the directory fsynced). obj is a
    ringside.elastic.State (its last commit) or plain data and tensors
    (dicts, lists, numbers, strings, a model's state_dict()); the file holds
    no pickle, so load() runs no code. Raises CheckpointFailed when the
    write fails, leaving any previous file at path as it was."""
    from .state import State, write_checkpoint

    if isinstance(obj, State):
        obj.save(path)
    else:
        write_checkpoint(path, obj, kind="object")


def load(path):
    """What save() wrote to path (for a State: its commit, which
    State.load(path) restores). Raises StateCorrupt for a damaged file."""
    from .state import read_checkpoint

    return read_checkpoint(path, kind=None)

__all__ = [
    "API_VERSION", "Client", "Event", "Member", "Rendezvous", "RingsideError", "SidecarUnreachable",
    "IncompatibleSidecar", "SidecarError", "SidecarLost", "StateCorrupt", "CollectiveFailed", "CheckpointFailed", "save", "load",
    "__version__",
]
