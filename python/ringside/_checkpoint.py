"""Checkpoints to disk in live mode: rank 0 writes the last commit every few
steps from a background thread, and every rank offers its last commit when
it leaves, so a job that loses every member resumes from disk; every
trainer reads the newest checkpoint at start."""

import fcntl
import logging
import os
import threading

from .errors import CheckpointFailed, StateCorrupt
from .state import checkpoint_step, read_checkpoint, write_checkpoint

log = logging.getLogger("ringside")

FILE_NAME = "ringside-state.ckpt"
LOCK_NAME = ".ringside-state.lock"


class Checkpointer:
    """Writes commits to dir/FILE_NAME when their step passes a multiple of
    every (and at the end), at most one write at a time; a
    commit that comes while one is written waits in the slot, and a newer
    one replaces it (a slow disk never delays a step).

    The file only moves forward: under a lock on dir/LOCK_NAME, a commit
    is written only when it is newer than the file's. When a whole job
    drains at once, its ranks may leave one commit apart (a rank that saw
    the new generation before its commit drops that step, the others keep
    it); each offers its commit and the newest one stays."""

    def __init__(self, directory, every):
        if every is not None and every < 1:
            raise ValueError("checkpoint_every must be at least 1 step, got %r" % (every,))
        self.directory = directory
        self.path = os.path.join(directory, FILE_NAME)
        self.every = every or 1
        self.saved_step = None  # the step of the newest checkpoint on disk (written and renamed)
        self.failures = 0  # writes that failed
        self.error = None  # the last failed write's CheckpointFailed, until raised
        self._queued_step = None  # the step of the newest commit handed to the writer
        self._cond = threading.Condition()
        self._pending = None
        self._busy = False
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="ringside-checkpoint", daemon=True)
        self._thread.start()

    def load_into(self, state):
        """Makes the checkpoint state's last commit when it is newer than
        the one state holds; returns its step, or None."""
        if not os.path.exists(self.path):
            return None
        try:
            snap = read_checkpoint(self.path)
        except (OSError, StateCorrupt) as e:
            log.warning("not resuming from %s: %s", self.path, e)
            return None
        self.saved_step = snap["step"]
        if snap["step"] <= state.committed_step:
            return None
        state._replace(snap)
        state.restore()
        log.info("resumed from the checkpoint %s at step %d", self.path, snap["step"])
        return snap["step"]

    def committed(self, state, force=False):
        """Called on every commit of rank 0 (and at the end, with force, on
        every rank).
        Raises CheckpointFailed when an earlier write failed (once per
        failure): a checkpoint that silently stopped being written would
        lie about what a job that lost every member resumes from."""
        with self._cond:
            err, self.error = self.error, None
            queued = self._queued_step
        if err is not None:
            raise err
        step = state.committed_step
        last = queued if queued is not None else (self.saved_step if self.saved_step is not None else 0)
        # At each multiple of every that the commits pass (commits may skip
        # steps), and at the end.
        if step <= last and (queued is not None or self.saved_step is not None):
            return
        if not force and step // self.every <= last // self.every:
            return
        snap = state._lend()
        with self._cond:
            self._pending = snap
            self._queued_step = step
            self._cond.notify_all()

    def close(self, timeout=60.0):
        """Writes what is pending, then stops. Raises CheckpointFailed when
        a write failed and was not reported yet."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout)
        with self._cond:
            err, self.error = self.error, None
        if err is not None:
            raise err

    def _run(self):
        while True:
            with self._cond:
                while self._pending is None and not self._stop:
                    self._cond.wait()
                snap, self._pending = self._pending, None
                if snap is None:
                    return
            try:
                on_disk = self._forward(snap)
            except Exception as e:
                err = e if isinstance(e, CheckpointFailed) else CheckpointFailed(
                    "could not write the checkpoint %s: %s" % (self.path, e))
                log.error("%s", err)
                with self._cond:
                    self.failures += 1
                    self.error = err
                    # The next commit is written again, whatever its step.
                    self._queued_step = self.saved_step
                continue
            with self._cond:
                self.saved_step = on_disk  # on disk now, not before
            if on_disk == snap["step"]:
                log.debug("checkpoint of step %d written to %s", on_disk, self.path)
            else:
                log.info("not writing step %d to %s: it holds step %d, newer", snap["step"], self.path, on_disk)

    def _forward(self, snap):
        """Writes snap unless the file holds a newer commit; returns the
        step the file holds now."""
        os.makedirs(self.directory, exist_ok=True)
        with open(os.path.join(self.directory, LOCK_NAME), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed
            on_disk = checkpoint_step(self.path)
            if on_disk is not None and on_disk >= snap["step"]:
                return on_disk
            write_checkpoint(self.path, snap)
            return snap["step"]
