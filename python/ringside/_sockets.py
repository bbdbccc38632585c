"""This process's TCP sockets, found through /proc/self/fd, and a way to shut
them down.

Gloo has no abort (torch 1.13, and gloo in 2.x): a rank blocked in a
collective on a silent peer waits for the group's timeout. Shutting down
the group's own TCP sockets makes the blocked collective fail at once, and
the group can be destroyed afterwards without hanging (destroying it while
the collective is still pending hangs). The group's sockets are the ones
that appeared while it formed, less the TCPStore's: shutting down the
store server's listening socket terminates the process (torch 1.13).
"""

import os
import socket


def endpoints(fd):
    """(local_port, remote_port) of fd if it is a connected TCP socket,
    else None. Asked of the socket itself: /proc/net/tcp can skip entries
    while the table changes."""
    try:
        dup = os.dup(fd)
    except OSError:
        return None
    try:
        s = socket.socket(fileno=dup)
    except OSError:
        os.close(dup)
        return None
    try:
        if s.family not in (socket.AF_INET, socket.AF_INET6) or s.type != socket.SOCK_STREAM:
            return None
        return s.getsockname()[1], s.getpeername()[1]
    except OSError:
        return None  # listening or not connected: gloo's and the store's
        # loops treat an error on their listener as fatal
    finally:
        s.close()


def fd_inodes():
    """Returns {socket inode: fd} for this process's open sockets."""
    out = {}
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            try:
                out[int(target[8:-1])] = int(fd)
            except ValueError:
                continue
    return out


def supported():
    """Whether this platform lists a process's descriptors in /proc."""
    return os.path.isdir("/proc/self/fd")


def group_sockets(before, exclude_port):
    """The connected TCP sockets (inodes) this process opened since before
    (a set of inodes from fd_inodes()), less those whose local or remote
    port is exclude_port (the TCPStore's)."""
    out = set()
    for ino, fd in fd_inodes().items():
        if ino in before:
            continue
        ports = endpoints(fd)
        if ports is None or exclude_port in ports:
            continue
        out.add(ino)
    return out


def shutdown(inodes):
    """Shuts down (SHUT_RDWR) this process's sockets among inodes; returns
    how many. Safe to call from any thread: it works on duplicates of the
    descriptors, so nothing is closed under their owner."""
    fds = fd_inodes()
    n = 0
    for ino in inodes:
        fd = fds.get(ino)
        if fd is None:
            continue
        try:
            dup = os.dup(fd)
        except OSError:
            continue
        try:
            s = socket.socket(fileno=dup)
        except OSError:
            os.close(dup)
            continue
        try:
            s.shutdown(socket.SHUT_RDWR)
            n += 1
        except OSError:
            pass  # not connected, or already shut down
        finally:
            s.close()
    return n
