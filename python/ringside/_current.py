"""The group the training thread trains in, as run() formed it: every read
of this process's rank and world size inside run() comes from here, never
from torch's process-group registry, which an abort may clear while the
training thread still runs (torch >= 2.6 clears it when the default group
is aborted). It also knows when the collectives ringside itself starts
(a sync's, the gradient noise scale's DDP hook) began, so that a failed
one is timed from its own start, and how long the training thread had one
in flight: its wait for its peers, which the heartbeats report apart from
its compute."""

import itertools
import threading
import time

_lock = threading.Lock()
_group = None  # the Group being trained in
_running = 0  # run() calls in progress
_collectives = {}  # {token: when it began (time.monotonic())} of the collectives in flight
_tokens = itertools.count()
_busy_since = None  # when the collectives in flight began to overlap (time.monotonic()); None when none
_waited = 0.0  # seconds with a collective in flight, summed since the last take_waited
_timed = False  # a collective completed since the last take_waited


class NoGroup(RuntimeError):
    """Rank and world size were asked for inside run() while no group is
    formed (between generations)."""


def enter():
    global _running
    with _lock:
        _running += 1


def leave():
    global _running, _group
    with _lock:
        _running = max(0, _running - 1)
        if _running == 0:
            _group = None


def set_group(group):
    global _group
    with _lock:
        _group = group
        _forget_collectives()


def clear_group(group=None):
    """Forgets group (any group when None) as the current one."""
    global _group
    with _lock:
        if group is None or _group is group:
            _group = None
            _forget_collectives()


def _forget_collectives():
    """Drops the collectives in flight (the group they ran in is gone) and
    the wait they began; called with _lock held."""
    global _busy_since, _waited, _timed
    _collectives.clear()
    _busy_since, _waited, _timed = None, 0.0, False


def collective_began():
    """Notes that a collective begins now; returns the token that
    collective_ended takes once it completed. One that fails is never
    ended: it stays in flight until the group changes."""
    global _busy_since
    token = next(_tokens)
    with _lock:
        now = time.monotonic()
        if not _collectives:
            _busy_since = now
        _collectives[token] = now
    return token


def collective_ended(token):
    global _busy_since, _waited, _timed
    with _lock:
        if _collectives.pop(token, None) is None or _collectives or _busy_since is None:
            return
        _waited += time.monotonic() - _busy_since
        _busy_since, _timed = None, True


def take_waited():
    """The seconds with a collective in flight since the last call (those
    that overlap count once), or None when no collective completed since:
    the trainer's wait is not measured then."""
    global _waited, _timed
    with _lock:
        waited, timed = _waited, _timed
        _waited, _timed = 0.0, False
    return waited if timed else None


def collective_since(after):
    """When the oldest collective in flight that began at or after `after`
    (time.monotonic()) began; None when there is none."""
    with _lock:
        starts = [t for t in _collectives.values() if t >= after]
    return min(starts) if starts else None


def group():
    with _lock:
        return _group


def rank_world():
    """(rank, world size) of the group run() trains in; outside run(), those
    of torch's default group when one is initialized, else (0, 1). Inside
    run() between groups, NoGroup: never a silent world of one."""
    with _lock:
        g, running = _group, _running
    if g is not None:
        return g.rank, g.world_size
    if running:
        raise NoGroup("no process group is formed right now (between generations): the rank and world size are "
                      "known only while train_fn runs")
    try:
        import torch.distributed as dist
    except ImportError:
        return 0, 1
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
