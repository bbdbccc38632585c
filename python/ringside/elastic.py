"""Live elastic training: run(train_fn, state) keeps a PyTorch job training
through crashes, preemptions and scale-ups without restarting the process.

    import ringside.elastic as elastic

    state = elastic.State(model, optimizer, epoch=0)

    def train(state):                     # called once per generation
        ddp = state.ddp()                 # DistributedDataParallel(state.model)
        while state.step < total_steps:
            ...forward, backward, optimizer.step()...
            state.step += 1
            state.commit()                # cheap; raises to re-form the group

    elastic.run(train, state)             # socket: RINGSIDE_SOCKET by default

run() asks the sidecar for the rendezvous, forms the process group (gloo on
CPU, NCCL on CUDA) at the ranks, master address and port of the
generation, syncs the state from the rank with the newest commit, and calls
train_fn(state). A watcher thread follows the sidecar's events: when a new
generation is announced (a member died, drained or joined) it aborts the
group, so a collective blocked on a dead or departing peer fails at once;
run() then restores the last commit, destroys the group, forms the next one
and goes on. On a drain (SIGTERM of the pod, a node taint, or SIGTERM of
this process) the trainer stops after its next commit, waits for the
generation without its member, and run() returns None: nothing committed
is lost, because the others go on from the same commit.
"""

import gc
import logging
import os
import re
import signal
import sys
import threading
import time
from typing import Any, Callable, Optional

from . import _checkpoint
from . import _current
from . import _failure
from . import _group
from . import _watcher
from ._watcher import Heartbeats, Watcher
from .client import ACTIVE, Client
from .errors import (CheckpointFailed, IncompatibleSidecar, RingsideError, SidecarError, SidecarLost, SidecarUnreachable,
                     StateCorrupt)
from .state import DrainRequested, GenerationChanged, Interrupted, State

__all__ = ["run", "State", "Interrupted", "GenerationChanged", "DrainRequested", "StateCorrupt", "ElasticSampler",
           "collate_allow_empty", "KeepGlobalBatch", "KeepPerRankBatch", "log"]


def __getattr__(name):
    if name in ("KeepGlobalBatch", "KeepPerRankBatch"):
        from . import batch

        return getattr(batch, name)
    # The sampler is a torch Sampler: torch is imported when it is asked for.
    if name in ("ElasticSampler", "collate_allow_empty"):
        from . import sampler

        return getattr(sampler, name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))

_log = logging.getLogger("ringside")


class _MainLog(logging.LoggerAdapter):
    """A logger that writes on rank 0 of the current group only, each line
    prefixed with the generation: elastic.log.info(...) in a
    train_fn logs once per job, not once per rank."""

    def isEnabledFor(self, level):
        try:
            rank = _current.rank_world()[0]
        except _current.NoGroup:
            return False
        return rank == 0 and self.logger.isEnabledFor(level)

    def process(self, msg, kwargs):
        g = _current.group()
        return ("[generation %d] %s" % (g.generation, msg) if g is not None else msg), kwargs


log = _MainLog(logging.getLogger("ringside.train"), {})

# A peer's address in a failed collective's message: only a hint of whom
# to name to the sidecar, never how the failure is recognised (_failure).
_PEER_ADDR = re.compile(r"\[([0-9a-fA-F:.]+)\]:\d+")


class _Session:
    """What State needs from run() while it trains: the watcher's flags and
    the heartbeat sender."""

    def __init__(self, watcher, beats, checkpointer=None):
        self.watcher = watcher
        self.beats = beats
        self.checkpointer = checkpointer

    def check(self, generation, drain=True):
        w = self.watcher
        if w.lost is not None:
            raise w.lost
        if drain and w.draining:
            raise DrainRequested(w.drain_reason or "drain")
        if w.newer_than(generation):
            raise GenerationChanged("generation %d announced" % w.latest)

    def aborted(self, generation):
        """Whether the group of generation was aborted (or is about to be):
        a step that ended after that may hold the result of an aborted
        collective, and is never committed."""
        g = _current.group()
        return (g is not None and g.aborted) or self.watcher.newer_than(generation) or self.watcher.lost is not None

    def committed(self, state, step_time_s, steps=1):
        gns = state._fold_gns()
        waited = _current.take_waited()
        compute = wait = None
        if waited is not None:
            # The wait in collectives is the rank's share of the step spent
            # on its peers; the rest is its own compute.
            wait = min(waited / max(steps, 1), step_time_s)
            compute = step_time_s - wait
        if self.beats is not None:
            self.beats.post(state.step, state.samples, step_time_s, state.generation, gns, compute, wait,
                            state.stats["skipped_steps"])
        if self.checkpointer is not None and state._shards is not None:
            state._checkpoint_shard(self.checkpointer.directory, self.checkpointer.every)
        if self.checkpointer is not None and state.rank == 0:
            try:
                self.checkpointer.committed(state)
            finally:
                state.stats["checkpoint_failures"] = self.checkpointer.failures


class _Drained(Exception):
    pass


# How long the leave request of a trainer whose train_fn raised may take:
# the error is on its way to the user and waits for it.
_LEAVE_TIMEOUT_S = 1.0


def run(train_fn: Callable[["State"], Any], state: "State", socket: Optional[str] = None, *,
        backend: Optional[str] = None, local_rank: Optional[int] = None, connect_timeout: float = 30.0,
        timeout: float = 60.0, form_timeout: float = 60.0, reform_after: float = 5.0,
        stuck_restart_after: Optional[float] = 3.0, handle_sigterm: bool = True, max_retries: int = 10,
        checkpoint_dir: Optional[str] = None, checkpoint_every: int = 50) -> Any:
    """Trains with train_fn(state) in every generation this member is
    active in, until train_fn returns (run returns its value) or this
    member is drained out of the job (run returns None).

    socket is the sidecar's API: a unix socket path or an http:// URL
    (default RINGSIDE_SOCKET). backend is "gloo" or "nccl" (default: NCCL
    when CUDA is available). local_rank is which of the member's slots this
    process is (default LOCAL_RANK, else 0). connect_timeout bounds how long
    the sidecar may be unreachable (at start, where it may come up after the
    trainer, and later); timeout is each collective's limit in seconds: the
    last resort for a silent peer nobody declared dead, and for gloo (torch
    1.13) missing the failure of an operation posted just as its connection
    went down, which it then gives up only at this timeout. A rank that
    waits longer than timeout for a slow peer in a collective is taken for
    a broken group: the group re-forms from the last commit. When a
    collective stays blocked that way stuck_restart_after seconds after the
    group was aborted, with the process idle, the trainer re-executes
    itself (same interpreter, same arguments, same pid): it rejoins the
    generation the others are forming and syncs from them, so nothing
    committed is lost, in seconds rather than the collective timeout
    (None turns this off);
    form_timeout bounds the wait for the peers of a new group; a group that
    broke without a new generation is formed again after reform_after
    seconds. With handle_sigterm (main thread only), a SIGTERM drains this
    member instead of killing the process; a second one exits.

    A failed collective (the group broke: a peer died, the sidecar
    announced a new generation) is recognised by what happened, never by
    the words of its message (see _failure): then run() restores the last
    commit and re-forms. Anything else that train_fn raises propagates at
    once with its traceback, after the sidecar is told that this member
    leaves the job (the others re-form without it). A group that breaks
    more than max_retries times with no commit newer than at its previous
    break raises RingsideError, however often it was formed and synced in
    between.

    With checkpoint_dir, rank 0 writes the last commit there every
    checkpoint_every committed steps (in the background, atomically), every
    rank offers its last commit when run returns (the file keeps the
    newest), and every trainer starts from the
    checkpoint when it is newer than its own commit: a job that lost every
    member resumes from disk. A trainer that cannot read the directory
    starts from its own commit, and the sync brings it the newest.

    Raises SidecarUnreachable or IncompatibleSidecar at start, SidecarLost
    when the sidecar goes away for good, StateCorrupt when a sync finds
    differing state, and whatever train_fn raises that is not a failed
    collective.
    """
    if not isinstance(state, State):
        raise TypeError("run() needs a ringside.elastic.State, got %s" % type(state).__name__)
    client = Client(socket)
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    _await_sidecar(client, connect_timeout)
    watcher = Watcher(client, connect_timeout, local_rank)
    watcher.start()
    beats = Heartbeats(client) if local_rank == 0 else None
    checkpointer = None
    if checkpoint_dir is not None:
        checkpointer = _checkpoint.Checkpointer(checkpoint_dir, checkpoint_every)
        checkpointer.load_into(state)
    state._session = _Session(watcher, beats, checkpointer)
    state.local_rank = local_rank
    _current.enter()
    restore_signals = _drain_on_sigterm(client, watcher) if handle_sigterm else (lambda: None)
    trainer = _Trainer(client, watcher, state, train_fn, local_rank, backend, timeout, form_timeout,
                       reform_after, connect_timeout, stuck_restart_after, max_retries)
    # Each generation ends with a collection (DDP's reducer holds the old
    # group in a cycle); with the objects alive now (torch, the model) set
    # aside, it looks at that generation's garbage only: ms, not 100s of ms.
    gc.freeze()
    failed = False
    try:
        return trainer.loop()
    except BaseException as e:
        failed = True
        if not isinstance(e, (SidecarLost, SidecarUnreachable, IncompatibleSidecar)):
            _leave(client, e)
        raise
    finally:
        restore_signals()
        if checkpointer is not None:
            try:
                # Every rank: when the whole job drains at once its ranks
                # may have left one commit apart; the newest one stays.
                checkpointer.committed(state, force=True)
                checkpointer.close()
            except CheckpointFailed:
                state.stats["checkpoint_failures"] = checkpointer.failures
                if not failed:  # else the error in flight goes first; the log has this one
                    raise
        state._session = None
        _current.leave()
        watcher.stop()
        if beats is not None:
            beats.stop()


class _Trainer:
    def __init__(self, client, watcher, state, train_fn, local_rank, backend, timeout, form_timeout,
                 reform_after, connect_timeout, stuck_restart_after, max_retries):
        self.client = client
        self.watcher = watcher
        self.state = state
        self.train_fn = train_fn
        self.local_rank = local_rank
        self.backend = backend
        self.timeout = timeout
        self.form_timeout = form_timeout
        self.reform_after = reform_after
        self.connect_timeout = connect_timeout
        self.stuck_restart_after = stuck_restart_after
        self.max_retries = max_retries
        # Broken groups since the job last committed past the step it was
        # at when one broke: a successful sync is no progress.
        self.failures = 0
        self.failed_at = -1

    def loop(self):
        after, limit = 0, None
        while True:
            try:
                r = self.await_generation(after, limit)
                if r is None:
                    _log.info("no new generation after the group broke; forming generation %d again", after)
                    r = self.await_generation(after - 1, None)
            except _Drained:
                return None
            after, limit = r.generation, None
            if r.state != ACTIVE:
                if self.watcher.draining:
                    _log.info("drained: generation %d leaves this member out (step %d)", r.generation, self.state.committed_step)
                    return None
                _log.info("not training in generation %d (%s%s); waiting for the next", r.generation, r.state,
                         ", " + r.reason if r.reason else "")
                continue
            if self.watcher.draining:
                _log.info("draining: not training in generation %d; waiting for the one without this member", r.generation)
                continue
            if self.local_rank >= r.local_world_size:
                raise ValueError("LOCAL_RANK %d, but member %s has %d slots: start one trainer per slot with LOCAL_RANK 0 "
                                 "to %d, or raise the sidecar's --slots" % (self.local_rank, r.member, r.local_world_size,
                                                                           r.local_world_size - 1))
            done, result, limit = self.train_generation(r)
            if done:
                return result

    def await_generation(self, after, limit):
        """The first generation above after; None once limit seconds passed
        without one. Raises _Drained when the sidecar of a draining member
        has gone, SidecarLost when an active member's sidecar stays away."""
        deadline = None if limit is None else time.monotonic() + limit
        failing_since = None
        while True:
            if self.watcher.lost is not None:
                if self.watcher.draining:
                    raise _Drained()
                raise self.watcher.lost
            r = self.watcher.announced(after)
            if r is not None:  # the event stream brought it: no poll needed
                return r
            wait = 30.0
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return None
            try:
                t0 = time.monotonic()
                r = self.client.rendezvous(after=after, timeout=wait, local_rank=self.local_rank)
                _log.debug("rendezvous after %d: %s in %.3fs", after, r.generation if r else None, time.monotonic() - t0)
            except SidecarUnreachable as e:
                if self.watcher.draining:
                    _log.info("drained: the sidecar has gone (%s)", e)
                    raise _Drained() from None
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > self.connect_timeout:
                    raise SidecarLost("the sidecar at %s did not answer for %.0fs: %s" % (self.client.address,
                                                                                      self.connect_timeout, e)) from e
                self.watcher.wait(0.1)
                continue
            failing_since = None
            if r is not None:
                return r

    def train_generation(self, r):
        """Forms r's group, syncs and trains. Returns (done, result, limit):
        done when train_fn returned; else limit is how long to wait for a
        newer generation before forming r again (None: no limit)."""
        state, watcher = self.state, self.watcher
        stop = lambda: watcher.interrupted(r.generation)  # noqa: E731
        t0 = time.monotonic()
        try:
            group = _group.form(r, self.local_rank, self.backend, self.timeout, self.form_timeout, stop,
                                hello=state._hello())
        except _group.FormationAborted as e:
            _log.info("generation %d: %s", r.generation, e)
            return False, None, None
        except _group.FormationFailed as e:
            return False, None, self.broken(r, e)
        group.stuck_after, group.on_stuck = self.stuck_restart_after, lambda g: _leave_stuck(g, watcher.draining, watcher)
        _current.set_group(group)
        watcher.attach(group, [m.id for m in r.members])
        state.rank, state.world_size, state.generation, state.member = group.rank, group.world_size, r.generation, r.member
        await_drain = True
        try:
            try:
                state._shards = None  # the last group's adapter: train_fn attaches this one's (State.shard)
                src = state._sync(group.hellos)
                group.formed()
                _log.info("generation %d: rank %d of %d, formed and synced from rank %d at step %d in %.3fs",
                         r.generation, group.rank, group.world_size, src, state.step, time.monotonic() - t0)
                state.check()
                state._enter_generation()
                state._committed_at = time.monotonic()
                _current.take_waited()  # the sync's collectives are no step's wait
                return True, self.train_fn(state), None
            except GenerationChanged:
                return False, None, None
            except DrainRequested:
                # The others block in their next collective until the
                # generation without this member aborts it; this group
                # stays up till then so they do not see a broken one.
                _log.info("drain: stopped after the commit of step %d; waiting to be left out", state.committed_step)
                return False, None, None
            except (StateCorrupt, SidecarLost, IncompatibleSidecar):
                await_drain = False
                raise
            except Exception as e:
                why = _failure.collective_failure(e, group, watcher, r.generation, state._committed_at, self.timeout)
                if why is None:
                    await_drain = False
                    _log.error("generation %d: train_fn raised %s (not a failed collective); this member leaves the "
                              "job", r.generation, type(e).__name__)
                    raise
                state.restore()
                if group.aborted or watcher.interrupted(r.generation):
                    _log.info("generation %d ended (%s): %s", r.generation, why, _first_line(e))
                    return False, None, None if watcher.newer_than(r.generation) else self.reform_after
                self.report(r, e, group.broken_links())
                return False, None, self.broken(r, e, why)
            except BaseException:
                await_drain = False
                raise
        finally:
            watcher.detach()
            _current.clear_group(group)
            if await_drain and watcher.draining and not watcher.newer_than(r.generation) and watcher.lost is None:
                while not watcher.newer_than(r.generation) and watcher.lost is None:
                    watcher.wait(0.5)
            group.destroy()

    def broken(self, r, err, why="the group could not be formed"):
        step = self.state.committed_step
        if step > self.failed_at:
            self.failures = 0
        self.failed_at = max(self.failed_at, step)
        self.failures += 1
        if self.failures > self.max_retries:
            raise RingsideError("the group broke %d times without a commit past step %d (generation %d, last: %s: %s)"
                                % (self.failures, self.failed_at, r.generation, why, _first_line(err))) from err
        _log.warning("generation %d: the group broke (%s: %s); waiting for the next generation", r.generation, why,
                    _first_line(err))
        return self.reform_after

    def report(self, r, err, down=()):
        """Tells the sidecar which member the failed collective was with, so
        it checks that member now instead of waiting for gossip: the peers
        of the group's connections that went down (down), else the member
        whose address the error names; else the ring neighbours: gloo's
        ring collectives fail first on a link to a neighbour."""
        others = [m for m in r.members if m.id != r.member]
        by_addr = {m.addr: m.id for m in others}
        peers = sorted({by_addr[h] for h in down if h in by_addr})
        for addr in [] if peers else _PEER_ADDR.findall(str(err)):
            peer = by_addr.get(addr) or by_addr.get(addr.replace("::ffff:", ""))
            if peer is not None:
                peers = [peer]
                break
        if not peers and r.group_rank >= 0 and len(r.members) > 1:
            n = len(r.members)
            peers = sorted({r.members[(r.group_rank - 1) % n].id, r.members[(r.group_rank + 1) % n].id} - {r.member})
        for peer in peers:
            try:
                self.client.failure(peer, _first_line(err))
            except RingsideError as e:
                _log.warning("could not report the failed collective with %s: %s", peer, e)
        if peers:
            _log.info("reported the failed collective to the sidecar, naming %s", ", ".join(peers))


def _leave_stuck(group, draining, watcher=None):
    """The way out of a collective gloo will not fail. A member that drains
    has nothing left to do there (its steps are committed and the others
    train on without it), so the process exits 0 as a drained trainer does;
    re-executing it would only wait for a sidecar that has left. Any other
    member re-executes and rejoins."""
    if not draining:
        _reexec(group, watcher)
        return
    _log.info("drained: leaving the blocked collective of generation %d by exiting", group.generation)
    _flush()
    os._exit(0)


def _flush():
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    logging.shutdown()


def _reexec(group, watcher=None):
    """Replaces this process with a fresh run of the same command. The
    sidecar keeps the member in the job, as the watcher's event stream stays
    open across the exec; the new process rejoins the current generation
    and syncs."""
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable] + sys.argv)
    _log.warning("re-executing this trainer to leave the blocked collective of generation %d: %s",
                group.generation, " ".join(argv))
    _flush()
    if watcher is not None:
        watcher.hand_over()
    try:
        os.execv(sys.executable, argv)
    except OSError as e:
        os.environ.pop(_watcher.HANDOVER_ENV, None)
        _log.error("could not re-execute %s: %s; the collective ends at its timeout", sys.executable, e)


def _leave(client, err):
    """Tells the sidecar that this member leaves the job because err ends
    its trainer, so the others re-form without it at once."""
    try:
        Client(client.address, timeout=_LEAVE_TIMEOUT_S).leave()
        _log.info("told the sidecar this member leaves the job (%s)", type(err).__name__)
    except RingsideError as e:
        _log.warning("could not tell the sidecar this member leaves: %s", e)


def _first_line(e):
    s = str(e).strip().splitlines()
    return (s[0] if s else type(e).__name__)[:300]


def _await_sidecar(client, connect_timeout):
    """Waits until the sidecar answers, at most connect_timeout seconds (in a
    pod the sidecar may start after the trainer); an incompatible sidecar
    fails at once."""
    deadline = time.monotonic() + connect_timeout
    while True:
        try:
            client.ready()
            return
        except SidecarUnreachable as e:
            if time.monotonic() >= deadline:
                raise SidecarUnreachable(client.address, cause=e.cause, waited=connect_timeout) from None
            time.sleep(0.1)
        except SidecarError:
            return  # it answers; the rendezvous says the rest


def _drain_on_sigterm(client, watcher):
    """Turns the first SIGTERM (or SIGINT) into a drain; a second one ends
    the process. Returns a function restoring the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {}
    asked = []

    def leave():
        try:
            client.leave()
        except RingsideError as e:
            _log.warning("asked to stop, but the sidecar did not take the leave request: %s", e)

    def handler(signum, frame):
        if asked:
            raise SystemExit(128 + signum)
        asked.append(signum)
        _log.info("%s: draining this member", signal.Signals(signum).name)
        threading.Thread(target=leave, name="ringside-leave", daemon=True).start()

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, handler)

    def restore():
        for sig, h in previous.items():
            signal.signal(sig, h)

    return restore
