"""Forming, aborting and destroying one generation's torch process group.

Works on torch 1.13 and 2.x alike: every version-specific call is looked up
with getattr and has a fallback.

- Formation does what init_process_group(init_method="tcp://...") does, in
  steps that can give up when a newer generation arrives meanwhile: the
  store (on rank 0's member, at the generation's master port), a presence
  count on it, then init_process_group on that store.
- Gloo binds to the member's own address (the pod IP the sidecar advertises)
  instead of whatever the hostname resolves to, so collectives run between
  the members' addresses and a failed collective names its peer.
- abort() makes a collective blocked in this group fail now: the native
  abort where torch has one (NCCL in torch 2.x), and for gloo a shutdown of
  the group's own TCP sockets (see _sockets).
"""

import atexit
import datetime
import gc
import logging
import os
import threading
import time

from . import _sockets
from . import _store as _store_mod
from .errors import RingsideError

log = logging.getLogger("ringside")


# A process that was runnable (on a CPU, or waiting for one) less than
# this share of the time its training thread stayed in an aborted group is
# blocked, not computing.
_IDLE_CPU_SHARE = 0.1


def _cpu_seconds():
    t = os.times()
    return t.user + t.system


def _run_queue_waits():
    """{thread id: seconds it waited for a CPU while runnable}, from
    /proc/self/task/*/schedstat (empty where there is none): on a crowded
    node a computing process gets little CPU, but it waits for it."""
    waits = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return waits
    for tid in tids:
        try:
            with open("/proc/self/task/%s/schedstat" % tid) as f:
                waits[tid] = int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            pass
    return waits


def _busy_since(cpu0, waits0):
    """Seconds this process was runnable since _cpu_seconds() read cpu0 and
    _run_queue_waits() read waits0: its CPU time, plus the waits for a CPU
    of the threads alive at both reads."""
    waits = _run_queue_waits()
    waited = sum(w - waits0[t] for t, w in waits.items() if t in waits0)
    return _cpu_seconds() - cpu0 + max(0.0, waited)


class FormationAborted(RingsideError):
    """A newer generation (or a drain) arrived while the group formed."""


class FormationFailed(RingsideError):
    """The group could not be formed: a peer did not come, or the store's
    port is taken. The generation may be re-formed or replaced."""


def _td(seconds):
    return datetime.timedelta(seconds=float(seconds))


def default_backend():
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


class Group:
    """A formed process group: the default group of torch.distributed."""

    def __init__(self, generation, rank, world_size, backend, server, store, before, master_port, timeout_s,
                 peers=None, pg=None):
        self.generation = generation
        self.timeout_s = timeout_s
        # After an abort: on_stuck(group) is called once the training
        # thread has stayed blocked in the group for stuck_after seconds.
        self.stuck_after = None
        self.on_stuck = None
        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.master_port = master_port
        self._server = server
        self._store = store
        self._before = before
        self._peers = peers
        self._pg = pg  # the process group object this Group aborts, never a later one
        self.hellos = None  # every rank's hello at formation, in rank order (see form)
        self._sockets = {}  # {inode: peer host}
        self._lock = threading.Lock()
        self._abort_done = threading.Event()  # set once an abort has run
        self.aborted = False
        self.destroyed = False

    def formed(self):
        """Call once the group is formed and synced on this rank: closes
        this rank's store connection (a later call reconnects: gloo may
        connect lazily in torch 2.x) and records the group's TCP sockets,
        those this process opened since formation began less the store's."""
        self._store.close()
        if self.backend != "gloo" or not _sockets.supported():
            return
        found = _sockets.group_sockets(self._before, exclude_port=self.master_port, peers=self._peers)
        log.debug("generation %d: the group's connections: %s", self.generation, sorted(found.values()))
        with self._lock:
            self._sockets = found
            late = self.aborted and not self.destroyed
        if late:  # aborted before its sockets were known; shut down outside the lock, as abort() does
            _sockets.shutdown(found)

    def broken_links(self):
        """The peer hosts of this group's connections that went down (see
        _sockets.broken); empty where the links are not known (NCCL, or
        before formed())."""
        with self._lock:
            links = dict(self._sockets)
        return _sockets.broken(links) if links else []

    def abort(self, why=""):
        """Makes any collective blocked in this group fail at once. Safe from
        any thread, more than once. Only this generation's own group object
        is aborted (never torch's default-group registry), and torch's
        native abort runs outside the lock: it may block while NCCL tears
        its communicators down, and destroy() waits for it instead of
        racing it."""
        with self._lock:
            if self.aborted or self.destroyed:
                return
            self.aborted = True
            pg, sockets = self._pg, set(self._sockets)
        try:
            native = _native_abort(self.backend, pg)
            n = _sockets.shutdown(sockets) if sockets else 0
        finally:
            self._abort_done.set()
        log.info("aborted the process group of generation %d (%s): native abort %s, %d sockets shut down",
                 self.generation, why or "asked", "used" if native else "not available", n)
        threading.Thread(target=self._watch_abort, name="ringside-abort", daemon=True).start()

    def _watch_abort(self):
        """Calls on_stuck when the training thread has not come back from
        the aborted group within stuck_after seconds while the process sat
        idle (a thread that computes uses the CPU, or waits for one on a
        crowded node; one blocked in a collective does neither): gloo (torch 1.13, and gloo in 2.x) does not
        fail a send that was being written when its connection went down,
        and gives it up only at the collective timeout."""
        if self.stuck_after is None:
            return
        while True:
            cpu0, waits0, deadline = _cpu_seconds(), _run_queue_waits(), time.monotonic() + self.stuck_after
            while time.monotonic() < deadline:
                time.sleep(0.05)
                with self._lock:
                    if self.destroyed:
                        return
            if _busy_since(cpu0, waits0) < _IDLE_CPU_SHARE * self.stuck_after:
                break
        log.warning("generation %d: a collective is still blocked %.1fs after the abort (gloo missed the failure of "
                    "its connection and would wait for the collective timeout, %.0fs)", self.generation,
                    self.stuck_after, self.timeout_s)
        if self.on_stuck is not None:
            self.on_stuck(self)

    def destroy(self):
        """Destroys the group; call it from the thread that trained in it,
        after the collectives have returned (an abort makes them return)."""
        with self._lock:
            if self.destroyed:
                return
            self.destroyed = True
            aborting = self.aborted
        if aborting and not self._abort_done.wait(_ABORT_WAIT_S):
            log.warning("generation %d: the abort of the group has not returned after %.0fs; destroying it anyway",
                        self.generation, _ABORT_WAIT_S)
        import torch.distributed as dist

        # The group object itself goes last, in a thread of its own (see
        # _release): its only reference is in held once torch forgot it.
        held = [self._pg]
        self._pg = None
        t0 = time.monotonic()
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception as e:  # a group that broke half-way
            log.warning("destroying the process group of generation %d: %s", self.generation, e)
        self._store.close()
        if self._server is not None:
            self._server.close()
        self._store = self._server = None
        t = threading.Thread(target=_release, args=(held,), name="ringside-release", daemon=True)
        with _releasing_lock:
            _releasing.add(t)
        t.start()
        log.debug("generation %d: group destroyed in %.3fs", self.generation, time.monotonic() - t0)


# How long destroy() waits for an abort running in another thread.
_ABORT_WAIT_S = 30.0

# The threads that destruct groups (see _release), waited for at exit: a
# group destructed while the process exits aborts it.
_releasing = set()
_releasing_lock = threading.Lock()
_RELEASE_AT_EXIT_S = 10.0


def _release(held):
    """Drops the last reference to a destroyed group: its destructor runs
    here, not in the training thread, which forms the next group meanwhile.
    A gloo group's destructor waits for its connection loop to tick once per
    connection it closes (up to 10 ms each in torch 1.13: ~30 ms at 7 ranks),
    and torch releases the GIL while a group is destructed. The collection
    first lets go of the references DDP's reducer holds in a cycle (the
    training thread meanwhile mostly waits on sockets, without the GIL)."""
    gc.collect()
    held.clear()
    with _releasing_lock:
        _releasing.discard(threading.current_thread())


@atexit.register
def _await_releases():
    deadline = time.monotonic() + _RELEASE_AT_EXIT_S
    with _releasing_lock:
        pending = list(_releasing)
    for t in pending:
        t.join(max(0.0, deadline - time.monotonic()))


def _default_group():
    try:
        from torch.distributed import distributed_c10d as c10d

        return c10d._get_default_group()
    except Exception:
        return None


def _native_abort(backend, pg):
    """Calls torch's own abort of pg, the group formed for this generation,
    where torch has one (not for gloo: aborting a gloo group is what the
    socket shutdown does). Only pg's own abort, or its NCCL backend's: never
    c10d._abort_process_group, which on torch >= 2.6 aborts the default
    group through the registry and clears it while the training thread may
    still be inside a collective, and never whatever group is the default
    now (a later generation's)."""
    if backend == "gloo" or pg is None:
        return False
    try:
        import torch
    except ImportError:
        return False
    candidates = [pg]
    get_backend = getattr(pg, "_get_backend", None)
    if get_backend is not None:
        try:
            candidates.insert(0, get_backend(torch.device("cuda")))
        except Exception:
            pass
    for obj in candidates:
        for name in ("abort", "_abort"):
            fn = getattr(obj, name, None)
            if fn is None:
                continue
            try:
                fn()
                return True
            except Exception as e:
                log.debug("%s.%s: %s", type(obj).__name__, name, e)
    return False


def _gloo_bound_to(addr):
    """A ProcessGroupGloo subclass whose device binds to addr, or None when
    torch cannot build one (then gloo picks its device as usual)."""
    if not addr or os.environ.get("RINGSIDE_GLOO_BIND", "1") == "0" or os.environ.get("GLOO_SOCKET_IFNAME"):
        return None
    try:
        from torch.distributed import distributed_c10d as c10d

        base = c10d.ProcessGroupGloo
        base.create_device(hostname=addr)  # fails early if addr does not resolve
        base._Options  # noqa: B018 - present in 1.13 and 2.x
    except Exception as e:
        log.debug("gloo stays on its default device: %s", e)
        return None

    class BoundGloo(base):
        def __init__(self, store, rank, size, *args, **kwargs):
            timeout = kwargs.pop("timeout", args[0] if args else None)
            opts = base._Options()
            if timeout is not None:
                opts._timeout = timeout
            opts._devices = [base.create_device(hostname=addr)]
            super().__init__(store, rank, size, opts)

    BoundGloo.__name__ = BoundGloo.__qualname__ = "ProcessGroupGloo"
    return BoundGloo


def _store(r, rank, form_timeout, should_stop):
    """Rank 0 serves the store at the generation's master port; every rank
    connects to it, retrying while rank 0's server comes up."""
    server = None
    if rank == 0:
        try:
            server = _store_mod.Server(r.master_addr, r.master_port, token=r.store_token)
        except _store_mod.StoreError as e:
            raise FormationFailed(str(e)) from e
    client = _store_mod.make_client(r.master_addr, r.master_port, form_timeout, should_stop, token=r.store_token)
    try:
        client.connect(time.monotonic() + form_timeout)
    except _store_mod.StoreError as e:
        if server is not None:
            server.close()
        if should_stop():
            raise FormationAborted(str(e)) from e
        raise FormationFailed(str(e)) from e
    return server, client


def _await_peers(store, prefix, rank, world_size, form_timeout, hello=b""):
    """Returns every rank's hello (what each rank tells the others as it
    arrives: its commit, see State.sync), in rank order, once every rank
    arrived: one set and one wait for all the keys, which the server
    answers as the last arrives. The waits give up when a newer generation
    arrives."""
    keys = ["%s/hello/%d" % (prefix, r) for r in range(world_size)]
    store.set(keys[rank], hello)
    try:
        return store.multi_get(keys)
    except _store_mod.StoreError as e:
        n = sum(1 for k in keys if store.check([k]))
        raise FormationFailed("%d of %d ranks arrived within %.0fs: %s" % (n, world_size, form_timeout, e)) from e


def _no_barrier(rank, store, timeout):
    """torch 1.13's store-based barrier after init_process_group, left out
    as torch 2.x leaves it out by default (TORCH_DIST_INIT_BARRIER=0):
    the ranks already met at the store (_await_peers), gloo's group has
    connected to every peer when its constructor returns, and a rank that
    goes on first waits in its first collective for the others."""


def _barrier_patch(c10d):
    """The replacement for c10d._store_based_barrier where it has torch
    1.13's signature, else None (newer torch barriers differently)."""
    import inspect

    fn = getattr(c10d, "_store_based_barrier", None)
    if fn is None or not hasattr(c10d, "STORE_BASED_BARRIER_PREFIX") or not hasattr(c10d, "_group_count"):
        return None
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    return _no_barrier if params == ["rank", "store", "timeout"] else None


def form(r, local_rank, backend=None, timeout=60.0, form_timeout=60.0, should_stop=lambda: False, hello=b""):
    """Forms generation r's group as the default process group and returns
    it. timeout is every collective's limit (gloo's and NCCL's own), in
    seconds; form_timeout bounds the wait for the peers. hello is what this
    rank tells the others as it arrives; the group's hellos hold every
    rank's."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    backend = backend or default_backend()
    rank = r.rank + local_rank
    extra = {}
    if backend == "nccl":
        apply_nccl_env(r.nccl)
        extra = _cuda_device(local_rank, c10d)
    if dist.is_initialized():
        dist.destroy_process_group()
    before = set(_sockets.fd_inodes())
    t0 = time.monotonic()
    server, store = _store(r, rank, form_timeout, should_stop)
    t1 = time.monotonic()
    bound = _gloo_bound_to(r.addr) if backend == "gloo" else None
    orig = getattr(c10d, "ProcessGroupGloo", None)
    barrier, orig_barrier = _barrier_patch(c10d), getattr(c10d, "_store_based_barrier", None)
    try:
        name = "ringside/%d" % r.generation
        prefix = dist.PrefixStore(name, store)
        hellos = _await_peers(store, name, rank, r.world_size, form_timeout, hello)
        t2 = time.monotonic()
        if bound is not None:
            c10d.ProcessGroupGloo = bound
        if barrier is not None:
            c10d._store_based_barrier = barrier
        dist.init_process_group(backend, store=prefix, rank=rank, world_size=r.world_size, timeout=_td(timeout), **extra)
        log.debug("generation %d: store %.3fs, peers %.3fs, init_process_group %.3fs", r.generation, t1 - t0, t2 - t1,
                  time.monotonic() - t2)
    except Exception as e:
        store.close()
        if server is not None:
            server.close()
        if isinstance(e, (FormationAborted, FormationFailed)):
            raise
        if should_stop():
            raise FormationAborted("a newer generation was announced while the group formed") from e
        raise FormationFailed("forming generation %d (rank %d of %d, store %s:%d): %s"
                              % (r.generation, rank, r.world_size, r.master_addr, r.master_port, e)) from e
    finally:
        if bound is not None:
            c10d.ProcessGroupGloo = orig
        if barrier is not None:
            c10d._store_based_barrier = orig_barrier
    peers = {m.addr for m in r.members if m.addr}
    group = Group(r.generation, rank, r.world_size, backend, server, store, before, r.master_port, timeout,
                  peers=peers or None, pg=_default_group())
    group.hellos = hellos
    return group


# What NCCL needs so that a failed or timed-out collective raises in the
# training thread, and the process lives on for ringside to re-form:
# - torch >= 2.2: TORCH_NCCL_ASYNC_ERROR_HANDLING=2 (CleanUpOnly: the
#   watchdog aborts the communicators and the error surfaces at the next
#   wait; 1 would tear the whole process down, 0 never raises on a
#   timeout at all);
# - torch 2.0 and 2.1: the same mode under its older name,
#   NCCL_ASYNC_ERROR_HANDLING=2;
# - torch 1.x: no such mode; NCCL_BLOCKING_WAIT=1 makes wait() raise at
#   the collective timeout instead, and async handling stays off.
# A value the user set is kept.
def nccl_error_handling(version=None):
    """The variables above for a torch version string (default: the
    installed torch's)."""
    if version is None:
        try:
            import torch

            version = torch.__version__
        except ImportError:
            version = "0"
    parts = []
    for p in str(version).split("+")[0].split(".")[:2]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits or 0))
    major, minor = (parts + [0, 0])[:2]
    if (major, minor) >= (2, 2):
        return {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}
    if major >= 2:
        return {"NCCL_ASYNC_ERROR_HANDLING": "2"}
    return {"NCCL_ASYNC_ERROR_HANDLING": "0", "NCCL_BLOCKING_WAIT": "1"}


NCCL_ERROR_HANDLING = {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT"}


# The NCCL variables ringside set, and to what: a later generation's
# settings replace them (a new member set may need another interface), and
# one it no longer names is removed; a variable the user set is never
# touched. Torch reads its TORCH_NCCL_* variables at every group it makes;
# NCCL itself keeps some of its own from the first communicator of the
# process on.
_applied_nccl = {}


def apply_nccl_env(settings):
    """Sets the NCCL environment of a new generation, before its
    init_process_group: its settings (netopt's, through the sidecar) and
    NCCL_ERROR_HANDLING, less what an earlier generation set and this one
    does not."""
    want = dict(nccl_error_handling())
    want.update(settings or {})
    for k in [k for k in _applied_nccl if k not in want]:
        if os.environ.get(k) == _applied_nccl.pop(k):
            del os.environ[k]
    for k, v in want.items():
        cur = os.environ.get(k)
        if cur is not None and _applied_nccl.get(k) != cur:
            if k not in NCCL_ERROR_HANDLING and cur != v:
                log.debug("keeping %s=%s from the environment (the generation suggests %s)", k, cur, v)
            continue
        os.environ[k] = v
        _applied_nccl[k] = v


def _cuda_device(local_rank, c10d):
    """Selects this slot's GPU (cuda:LOCAL_RANK) before NCCL starts and
    returns init_process_group's device_id argument where torch has one (it
    binds the communicator to that GPU and forms it eagerly)."""
    import inspect

    import torch

    if not torch.cuda.is_available():
        return {}
    n = torch.cuda.device_count()
    if local_rank >= n:
        raise FormationFailed("LOCAL_RANK %d, but this process sees %d GPUs (CUDA_VISIBLE_DEVICES=%s)"
                              % (local_rank, n, os.environ.get("CUDA_VISIBLE_DEVICES", "unset")))
    torch.cuda.set_device(local_rank)
    try:
        if "device_id" in inspect.signature(c10d.init_process_group).parameters:
            return {"device_id": torch.device("cuda", local_rank)}
    except (TypeError, ValueError):
        pass
    return {}
