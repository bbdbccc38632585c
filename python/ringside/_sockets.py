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


def _dup_socket(fd, inode=None):
    """A socket object on a duplicate of fd (closing it leaves fd open), or
    None; with inode, None unless fd still holds that socket: another
    thread may have closed fd since it was listed, and the number been
    given to a new descriptor (a DataLoader's connection to its worker)."""
    try:
        dup = os.dup(fd)
    except OSError:
        return None
    try:
        if inode is not None and os.fstat(dup).st_ino != inode:
            os.close(dup)
            return None
        return socket.socket(fileno=dup)
    except OSError:
        os.close(dup)
        return None


def _is_tcp(s):
    return s.family in (socket.AF_INET, socket.AF_INET6) and s.type == socket.SOCK_STREAM


def endpoints(fd):
    """(local_port, remote_port, remote_host) of fd if it is a connected TCP
    socket, else None. Asked of the socket itself: /proc/net/tcp can skip
    entries while the table changes."""
    s = _dup_socket(fd)
    if s is None:
        return None
    try:
        if not _is_tcp(s):
            return None
        peer = s.getpeername()
        return s.getsockname()[1], peer[1], peer[0]
    except OSError:
        return None  # listening or not connected: gloo's and the store's
        # loops treat an error on their listener as fatal
    finally:
        s.close()


# tcpi_state of a connection both ends still hold (linux/tcp_states.h).
_TCP_ESTABLISHED = 1


def _tcp_state(fd, inode):
    s = _dup_socket(fd, inode)
    if s is None:
        return None
    try:
        return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
    except OSError:
        return None
    finally:
        s.close()


def broken(links):
    """The peer hosts of links ({inode: peer host}, from group_sockets) whose
    connection is no longer established: closed here (gloo closes a pair
    that failed), or closed or reset by the peer. That a collective failed
    because a link went down is known from the link, not from the words of
    the error."""
    fds = fd_inodes()
    out = []
    for ino, host in links.items():
        fd = fds.get(ino)
        state = _tcp_state(fd, ino) if fd is not None else None
        if state != _TCP_ESTABLISHED:
            out.append(host)
    return sorted(set(out))


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


def _loopback(host):
    return host.startswith("127.") or host == "::1"


def _listening_port(fd):
    s = _dup_socket(fd)
    if s is None:
        return None
    try:
        if not _is_tcp(s):
            return None
        if not s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            return None
        return s.getsockname()[1]
    except OSError:
        return None
    finally:
        s.close()


def group_sockets(before, exclude_port, peers=None):
    """The connected TCP sockets this process opened since before (a set of
    inodes from fd_inodes()), less those whose local or remote port is
    exclude_port (the store's), as {inode: peer host}. With peers (a set of
    hosts), only the group's own connections count: those to one of the
    peers, and those accepted on a port this process started listening on
    since before (gloo's); a socket the training code opened meanwhile (a
    logger, a download) is left alone."""
    fds = {ino: fd for ino, fd in fd_inodes().items() if ino not in before}
    listening = {p for p in (_listening_port(fd) for fd in fds.values()) if p is not None}
    # A job on one host's loopback addresses (tests, a local run): the
    # kernel picks 127.0.0.1 as the source of a connection to 127.0.0.x,
    # so a peer's connection does not come from its member address.
    local = peers is not None and any(_loopback(h) for h in peers)
    out = {}
    for ino, fd in fds.items():
        ends = endpoints(fd)
        if ends is None or exclude_port in ends[:2]:
            continue
        host = ends[2]
        if host.startswith("::ffff:"):
            host = host[7:]
        if peers is not None and host not in peers and ends[0] not in listening and not (local and _loopback(host)):
            continue
        out[ino] = host
    return out


def shutdown(inodes):
    """Shuts down (SHUT_RDWR) this process's sockets among inodes; returns
    how many. Safe to call from any thread: it works on duplicates of the
    descriptors, so nothing is closed under their owner."""
    fds = fd_inodes()
    n = 0
    for ino in inodes:
        fd = fds.get(ino)
        s = _dup_socket(fd, ino) if fd is not None else None
        if s is None:
            continue
        try:
            s.shutdown(socket.SHUT_RDWR)
            n += 1
        except OSError:
            pass  # not connected, or already shut down
        finally:
            s.close()
    return n
