"""Background threads of a live trainer: the event watcher, which knows the
newest generation and any drain and aborts the group being trained the
moment a newer generation (or the death of one of its members) is
announced, and the heartbeat sender."""

import logging
import os
import stat
import threading
import time

from .errors import IncompatibleSidecar, RingsideError, SidecarLost

log = logging.getLogger("ringside")

# The sidecar takes the close of a trainer's last event stream for the
# trainer's end (the member leaves the ring until it is back). A trainer
# that re-executes itself is not ending: it keeps its open stream across the
# exec, named by this variable, and the new process closes it once its own
# stream is open.
HANDOVER_ENV = "RINGSIDE_EVENTS_FD"


def _take_handover():
    """The stream fd an earlier run of this process handed over, or None."""
    value = os.environ.pop(HANDOVER_ENV, None)
    if not value:
        return None
    try:
        fd = int(value)
        if stat.S_ISSOCK(os.fstat(fd).st_mode):
            return fd
    except (ValueError, OSError):
        pass
    return None


class Watcher:
    """Follows the sidecar's event stream in a daemon thread, reconnecting
    when it breaks (a new stream starts with the current generation and any
    drain under way). After connect_timeout seconds without a stream, lost
    holds a SidecarLost error."""

    def __init__(self, client, connect_timeout=30.0, local_rank=None):
        self._client = client
        self._local_rank = local_rank  # the slot its stream stands for
        self._connect_timeout = connect_timeout
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._stream = None
        self._group = None
        self._group_members = ()
        self.latest = 0
        self._announced = None  # the Rendezvous of generation latest, as the stream announced it
        self.draining = False
        self.drain_reason = ""
        self.lost = None
        self._handed = _take_handover()
        self._thread = threading.Thread(target=self._run, name="ringside-events", daemon=True)

    def start(self):
        self._thread.start()

    def stop(self):
        self._stop.set()
        with self._cond:
            stream = self._stream
            self._cond.notify_all()
        if stream is not None:
            stream.close()
        self._thread.join(timeout=5)
        self._release_handover()

    def hand_over(self):
        """Keeps the open event stream open across an exec of this process
        (see HANDOVER_ENV); returns its fd, or None without a stream."""
        with self._cond:
            stream = self._stream
        fd = stream.fileno() if stream is not None else None
        if fd is None:
            return None
        os.set_inheritable(fd, True)
        os.environ[HANDOVER_ENV] = str(fd)
        return fd

    def _release_handover(self):
        fd, self._handed = self._handed, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    # Queries from the training thread.

    def newer_than(self, generation):
        with self._cond:
            return self.latest > generation

    def announced(self, after):
        """The announced Rendezvous of a generation above after, or None:
        what a rendezvous poll would answer at once, without asking."""
        with self._cond:
            r = self._announced
        return r if r is not None and r.generation > after else None

    def interrupted(self, generation):
        """Whether the group of generation should stop forming or training."""
        with self._cond:
            return self.latest > generation or self.draining or self.lost is not None

    def wait(self, timeout):
        """Sleeps up to timeout seconds, less if an event arrives."""
        with self._cond:
            self._cond.wait(timeout)

    def attach(self, group, members):
        """Registers the group being trained, so a newer generation aborts
        it; aborts it at once if one is known already."""
        with self._cond:
            self._group, self._group_members = group, frozenset(members)
            stale = self.latest > group.generation
        if stale:
            group.abort("a newer generation was announced while it formed")

    def detach(self):
        with self._cond:
            self._group, self._group_members = None, ()

    # The thread.

    def _run(self):
        failing_since = None
        backoff = 0.05
        while not self._stop.is_set():
            err = None
            try:
                stream = self._client.events(local_rank=self._local_rank)
            except IncompatibleSidecar as e:
                self._fail(e)
                return
            except RingsideError as e:
                err = e
            else:
                failing_since, backoff = None, 0.05
                with self._cond:
                    self._stream = stream
                self._release_handover()  # this run's own stream is open now
                if self._stop.is_set():
                    stream.close()
                    return
                try:
                    for e in stream:
                        self._handle(e)
                except IncompatibleSidecar as e:
                    self._fail(e)
                    return
                finally:
                    with self._cond:
                        self._stream = None
                    stream.close()
                err = "the event stream ended"
            if self._stop.is_set():
                return
            now = time.monotonic()
            failing_since = failing_since or now
            if now - failing_since > self._connect_timeout:
                self._fail(SidecarLost("the sidecar at %s did not answer for %.0fs (%s); a trainer without its "
                                       "sidecar is out of the job" % (self._client.address, self._connect_timeout, err)))
                return
            log.debug("sidecar event stream unavailable (%s); reconnecting", err)
            self._stop.wait(backoff)
            backoff = min(2 * backoff, 1.0)

    def _fail(self, err):
        with self._cond:
            self.lost = err
            group = self._group
            self._cond.notify_all()
        if group is not None:
            group.abort("lost the sidecar")

    def _handle(self, e):
        group = None
        with self._cond:
            if e.type == "generation" and e.generation is not None:
                if e.generation.generation > self.latest:
                    self.latest, self._announced = e.generation.generation, e.generation
                    if self._group is not None and self._group.generation < self.latest:
                        group, why = self._group, "generation %d announced" % self.latest
            elif e.type == "drain":
                if not self.draining:
                    log.info("drain announced (%s): stopping after the next commit", e.reason)
                self.draining, self.drain_reason = True, e.reason
            elif e.type == "member_dead":
                if self._group is not None and e.member in self._group_members:
                    group, why = self._group, "member %s declared dead" % e.member
            self._cond.notify_all()
        if group is not None:
            group.abort(why)


class Heartbeats:
    """Sends heartbeats from a daemon thread, so a step never waits on the
    sidecar; only the newest report is kept."""

    def __init__(self, client):
        self._client = client
        self._lock = threading.Lock()
        self._pending = None
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="ringside-heartbeats", daemon=True)
        self._thread.start()

    def post(self, step, samples, step_time_s, generation, gns=None, compute_time_s=None, wait_time_s=None,
             skipped_steps=0):
        with self._lock:
            self._pending = (step, samples, step_time_s, generation, gns, compute_time_s, wait_time_s, skipped_steps)
        self._wake.set()

    def stop(self):
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=5)

    def _run(self):
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                hb, self._pending = self._pending, None
            if hb is not None:
                try:
                    self._client.heartbeat(*hb)
                except (RingsideError, ValueError) as e:  # ValueError: a value the client refused to send
                    log.debug("heartbeat not taken: %s", e)
            if self._stop:
                return
