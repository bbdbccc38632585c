"""ringside: the trainer side of ringside's elastic training.

- ringside.client: the sidecar's trainer API (rendezvous, events,
  heartbeat, failure, leave), standard library only.
- ringside.elastic: live elastic PyTorch training: State (commit, restore,
  sync, save, load), run(train_fn, state) and ElasticSampler. torch is
  imported only when used.
"""

from ._version import __version__
from .client import API_VERSION, Client, Event, Member, Rendezvous
from .errors import (CollectiveFailed, IncompatibleSidecar, RingsideError, SidecarError, SidecarLost, SidecarUnreachable,
                     StateCorrupt)

__all__ = [
    "API_VERSION", "Client", "Event", "Member", "Rendezvous", "RingsideError", "SidecarUnreachable",
    "IncompatibleSidecar", "SidecarError", "SidecarLost", "StateCorrupt", "CollectiveFailed", "__version__",
]
