"""Telling a collective that failed (the group broke) from an error of the
training code, by what happened rather than by the words of a message:

- the watcher aborted the group (the sidecar announced a newer generation
  or a death in the group), or the sidecar was lost;
- torch raised one of its distributed error types (torch 2.x), or ringside's
  own sync or store failed;
- one of the group's own connections went down (a peer's process died, or
  its group was aborted and its sockets shut down): asked of the sockets;
- the collective waited a whole collective timeout: a silent peer. The
  wait counts from the start of the oldest collective ringside saw begin
  since the last commit and not end (a sync's, the DDP hook's of
  State.measure_gns: see _current), else from the last commit: a step
  that computed longer than the timeout before a collective that failed
  at once did not wait it.

Only RuntimeError and OSError (torch's distributed errors derive from
RuntimeError) can be a broken collective: anything else, and one of those
without any of the evidence above, is the training code's own error (a
KeyError, a shape mismatch, a DataLoader worker that died, a logger's
ConnectionError): run() re-raises it. For an error of the kinds a broken collective raises
(RuntimeError, OSError) the sidecar gets GRACE_S to announce a generation
first, as a peer's death shows in the sidecar a moment after it shows here.
"""

import time

from . import _current
from ._store import StoreError
from .errors import CollectiveFailed

# How long an otherwise unexplained RuntimeError or OSError waits for the
# evidence of a broken group (a link down, an announcement): a killed
# peer's connections fail within milliseconds and a sidecar told of the
# failure checks the peer at once; a user's error waits no longer than this.
GRACE_S = 0.5


def _dist_types():
    types = [StoreError, CollectiveFailed]
    try:
        import torch.distributed as dist
    except ImportError:
        return tuple(types)
    for name in ("DistError", "DistBackendError", "DistNetworkError", "DistStoreError"):
        t = getattr(dist, name, None)
        if isinstance(t, type):
            types.append(t)
    return tuple(types)


def _chain(e):
    seen = []
    while e is not None and len(seen) < 16 and not any(e is s for s in seen):
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def collective_failure(err, group, watcher, generation, since, timeout, grace=GRACE_S):
    """Why err, raised while training in group (generation), is a broken
    collective, as a short phrase; None when it is the training code's own
    error. since is when the training thread was last seen making progress
    (its last commit); timeout is the collective timeout in seconds,
    counted from the start of the oldest collective in flight that began
    after since where one is known."""
    dist_types = _dist_types()
    for e in _chain(err):
        if isinstance(e, dist_types):
            return "torch.distributed raised %s" % type(e).__name__
    if not any(isinstance(e, (RuntimeError, OSError)) for e in _chain(err)):
        return None  # what a collective raises is never a KeyError, a TypeError, ...
    why = _announced(group, watcher, generation)
    if why:
        return why
    began = _current.collective_since(since)
    if time.monotonic() - (since if began is None else began) >= timeout:
        return "the step waited the collective timeout (%.0fs)" % timeout
    deadline = time.monotonic() + grace
    while True:
        down = group.broken_links()
        if down:
            return "the group's connection with %s went down" % ", ".join(down)
        why = _announced(group, watcher, generation)
        if why:
            return why
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        watcher.wait(min(left, 0.05))


def _announced(group, watcher, generation):
    if group.aborted:
        return "the group was aborted"
    if watcher.lost is not None:
        return "the sidecar was lost"
    if watcher.newer_than(generation):
        return "a newer generation was announced"
    return None
