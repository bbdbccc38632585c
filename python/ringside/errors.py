"""Exceptions of the ringside client; callers branch on these types."""


class RingsideError(Exception):
    """Base class of every error this package raises on purpose."""


class SidecarUnreachable(RingsideError):
    """The sidecar's API does not answer at the configured address.

    The message names the socket (or URL) and what to start or set.
    """

    def __init__(self, address, cause=None, waited=None):
        import os
        import stat

        self.address = address
        self.cause = cause
        tcp = address.startswith(("http://", "https://"))
        how = address if tcp else "unix socket %s" % address
        msg = "no ringside sidecar answers at %s" % how
        if waited:
            msg += " (tried for %gs)" % waited
        if not tcp:
            try:
                if not stat.S_ISSOCK(os.stat(address).st_mode):
                    cause = "%s exists but is not a socket" % address
            except OSError:
                pass
        if cause is not None:
            msg += ": %s" % (cause,)
        if tcp:
            msg += ("; start the sidecar with `ringside sidecar --http-addr HOST:PORT` matching %s, or point "
                    "RINGSIDE_SOCKET (or socket=) at its unix socket" % address)
        else:
            msg += ("; start `ringside sidecar --socket %s` next to this trainer, or point "
                    "RINGSIDE_SOCKET (or socket=) at the socket it serves" % address)
        super().__init__(msg)


class IncompatibleSidecar(RingsideError):
    """The sidecar speaks another version of the trainer API."""


class SidecarError(RingsideError):
    """The sidecar answered with an error status; .status and .message hold it."""

    def __init__(self, method, path, status, message):
        self.status = status
        self.message = message
        super().__init__("%s %s: sidecar answered %d: %s" % (method, path, status, message))


class StateCorrupt(RingsideError):
    """A state broadcast during sync arrived corrupt or partial, or ranks hold
    different parameters after it. Training never goes on from such a state."""


class SidecarLost(RingsideError):
    """The sidecar stopped answering for longer than the connect timeout: a
    trainer without its sidecar is out of the job (its lease runs out) and
    must not train on by itself."""


class CollectiveFailed(RingsideError):
    """A collective of ringside's own (the sync of a new group) failed: the
    group broke while it formed. run() re-forms; train_fn never sees it."""


class CheckpointFailed(RingsideError):
    """A checkpoint could not be written (a full disk, a read-only
    directory). The previous checkpoint file is untouched and still loads;
    run() raises this from the next commit of the rank that writes."""
