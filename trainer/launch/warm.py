# A warm process of `ringside exec --preload`: imports the modules named in
# argv[1], then waits for one JSON line on stdin, {"env": [...], "target":
# [...]}, and runs the target (a script and its arguments, or -m module and
# its arguments) as `python TARGET` would, in this process.
import functools
import json
import os
import runpy
import signal
import sys
import threading


def guard_saves(torch):
    """Makes torch.save safe for a restart to stop: a save to a path
    writes a temporary file in the same directory, fsyncs it and renames
    it over the path, so a reader sees the previous file or the new one
    whole, even after a SIGKILL; and a stop (SIGTERM, which kills Python at
    once) that arrives while torch.save writes from the main thread is held
    until the save returns, then ends the process as it would have.
    exec's --stop-timeout bounds the wait (SIGKILL follows). The handler is
    in place only during a save: elsewhere a SIGTERM kills at once, even a
    process blocked in a collective."""
    save = torch.save
    held = []

    def hold(signum, frame):
        held.append(signum)

    def atomic(obj, f, *args, **kwargs):
        if not isinstance(f, (str, os.PathLike)):
            return save(obj, f, *args, **kwargs)
        path = os.fspath(f)
        d, base = os.path.split(os.path.abspath(path))
        tmp = os.path.join(d, ".%s.%d.tmp" % (base, os.getpid()))
        try:
            save(obj, tmp, *args, **kwargs)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        try:
            fd = os.open(d, os.O_RDONLY)
        except OSError:
            return None
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
        return None

    @functools.wraps(save)
    def guarded(obj, f, *args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            return atomic(obj, f, *args, **kwargs)
        try:
            previous = signal.signal(signal.SIGTERM, hold)
        except (ValueError, OSError):  # signals cannot be handled here
            return atomic(obj, f, *args, **kwargs)
        if previous is hold:  # a save inside a save
            return atomic(obj, f, *args, **kwargs)
        try:
            return atomic(obj, f, *args, **kwargs)
        finally:
            signal.signal(signal.SIGTERM, previous)
            if held:
                del held[:]
                os.kill(os.getpid(), signal.SIGTERM)

    torch.save = guarded


def fast_store_connect():
    """Makes a rank's first connection to the job's store (rank 0's
    TCPStore at MASTER_ADDR:MASTER_PORT, in init_process_group) wait for
    the store in small steps: torch's client sleeps a whole second after a
    refused connection, and after a restart every rank starts at once, so
    most ranks other than 0 used to reach the store just before it
    listened and lose that second. Only the wait changes: the store and
    its timeout are torch's."""
    import importlib

    try:  # the module: torch.distributed.rendezvous is also a function's name
        rendezvous = importlib.import_module("torch.distributed.rendezvous")
    except ImportError:
        return
    create = getattr(rendezvous, "_create_c10d_store", None)
    if create is None:
        return

    @functools.wraps(create)
    def wrapped(hostname, port, rank, world_size, timeout, *args, **kwargs):
        if rank != 0:
            await_listening(hostname, port, timeout.total_seconds())
        return create(hostname, port, rank, world_size, timeout, *args, **kwargs)

    rendezvous._create_c10d_store = wrapped


def await_listening(host, port, timeout_s):
    """Returns once host:port accepts a connection, or after timeout_s, or
    at once on any other error (torch then reports it)."""
    import socket
    import time

    deadline = time.monotonic() + min(timeout_s, 600)
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except ConnectionRefusedError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.005)
        except OSError:
            return


def main():
    for name in filter(None, sys.argv[1].split(",")):
        try:
            __import__(name)
        except ImportError as e:
            print("ringside exec --preload: cannot import %s: %s" % (name, e), file=sys.stderr)
            return 3
    if "torch" in sys.modules:
        guard_saves(sys.modules["torch"])
        fast_store_connect()
    try:
        os.write(3, b"1")  # ready: exec waits for it before joining
        os.close(3)
    except OSError:
        pass
    line = sys.stdin.buffer.readline()
    if not line:
        return 0  # not needed after all
    spec = json.loads(line)
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    os.environ.clear()
    for kv in spec["env"]:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    target = spec["target"]
    if target[0] == "-m":
        sys.argv = target[1:]
        runpy.run_module(target[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(target)
        sys.path[0] = os.path.dirname(os.path.abspath(target[0]))
        runpy.run_path(target[0], run_name="__main__")
    return 0


sys.exit(main())
