"""ringside: the trainer side of ringside's elastic training.

- ringside.client: the sidecar's trainer API (rendezvous, events,
  heartbeat, failure, leave), standard library only.
- ringside.elastic: live elastic PyTorch training: State (commit, restore,
  sync) and run(train_fn, state). torch is imported only when used.
"""

from .client import API_VERSION, Client, Event, Member, Rendezvous
from .errors import IncompatibleSidecar, RingsideError, SidecarError, SidecarLost, SidecarUnreachable, StateCorrupt

__all__ = [
    "API_VERSION", "Client", "Event", "Member", "Rendezvous", "RingsideError", "SidecarUnreachable",
    "IncompatibleSidecar", "SidecarError", "SidecarLost", "StateCorrupt",
]
__version__ = "0.1.0"
