"""Client of the ringside sidecar's trainer API (HTTP on a unix socket, or a
TCP URL), standard library only.

    from ringside.client import Client
    c = Client()                      # RINGSIDE_SOCKET, else the default socket
    r = c.rendezvous(after=0)         # blocks until a generation exists
    for e in c.events(): ...          # "generation", "drain", "member_dead"

Every call raises SidecarUnreachable (naming the socket) when nothing
listens there, IncompatibleSidecar when the sidecar speaks another API
version, and SidecarError for an error answer.
"""

import http.client
import json
import math
import os
import socket
import urllib.parse
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional

from .errors import IncompatibleSidecar, SidecarError, SidecarUnreachable

API_VERSION = "v1"
DEFAULT_SOCKET = "/var/run/ringside/ringside.sock"

# The trainer API accepts only the pod's own trainer on every endpoint but
# its health checks: a caller with the sidecar's uid on the unix socket, or
# one that sends the token the sidecar writes next to its socket
# (<socket>.token, in the shared emptyDir) in this header. A sidecar that
# writes no token file asks for none. RINGSIDE_API_TOKEN_FILE names the
# file for a sidecar on TCP (or anywhere else).
TOKEN_HEADER = "X-Ringside-Token"
TOKEN_SUFFIX = ".token"
TOKEN_FILE_ENV = "RINGSIDE_API_TOKEN_FILE"

# Member states in a rendezvous.
ACTIVE, STANDBY, PAUSED, EXCLUDED = "active", "standby", "paused", "excluded"

# The sidecar caps a long poll at 5 minutes.
MAX_POLL_S = 300.0


@dataclass
class Member:
    """A member of a generation, in ring order."""

    id: str
    addr: str
    rank: int
    slots: int
    incarnation: int = 0


@dataclass
class Rendezvous:
    """What a trainer needs to join a generation's process group."""

    generation: int
    member: str
    state: str
    rank: int
    ranks: List[int]
    local_world_size: int
    world_size: int
    group_rank: int
    num_groups: int
    master_addr: str
    master_port: int
    members: List[Member]
    nccl: Dict[str, str] = field(default_factory=dict)
    reason: str = ""
    api_version: str = API_VERSION
    # The generation's secret for its store (hex): rank 0's store admits
    # only clients that hold it. Empty from a sidecar that sends none.
    store_token: str = field(default="", repr=False)

    @classmethod
    def from_json(cls, d, address="the sidecar"):
        version = d.get("api_version")
        if version != API_VERSION:
            raise IncompatibleSidecar(
                "the sidecar at %s speaks trainer API %r, this client %r: run a ringside "
                "sidecar and a ringside Python package of the same API version" % (address, version, API_VERSION)
            )
        try:
            return cls(
                generation=int(d["generation"]),
                member=str(d["member"]),
                state=str(d["state"]),
                rank=int(d.get("rank", -1)),
                ranks=[int(x) for x in d.get("ranks") or []],
                local_world_size=int(d.get("local_world_size", 0)),
                world_size=int(d.get("world_size", 0)),
                group_rank=int(d.get("group_rank", -1)),
                num_groups=int(d.get("num_groups", 0)),
                master_addr=str(d.get("master_addr", "")),
                master_port=int(d.get("master_port", 0)),
                members=[
                    Member(id=m["id"], addr=m.get("addr", ""), rank=int(m.get("rank", 0)),
                           slots=int(m.get("slots", 1)), incarnation=int(m.get("incarnation", 0)))
                    for m in d.get("members") or []
                ],
                nccl=dict(d.get("nccl") or {}),
                reason=str(d.get("reason", "")),
                api_version=version,
                store_token=str(d.get("store_token") or ""),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise IncompatibleSidecar("the sidecar at %s sent a malformed rendezvous (%s): %r" % (address, e, d)) from None

    @property
    def addr(self):
        """This member's address: where its trainers' collectives listen."""
        for m in self.members:
            if m.id == self.member:
                return m.addr
        return ""


@dataclass
class Event:
    """One line of the sidecar's event stream."""

    type: str
    time: str = ""
    generation: Optional[Rendezvous] = None
    member: str = ""
    reason: str = ""
    deadline: str = ""


class _UnixConnection(http.client.HTTPConnection):
    """HTTPConnection over a unix socket."""

    def __init__(self, path, timeout=None):
        super().__init__("sidecar", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


class EventStream:
    """An open GET /v1/events stream; iterate for events. close() may be
    called from another thread and ends the iteration."""

    def __init__(self, conn, resp, address):
        self._conn = conn
        self._resp = resp
        self._address = address

    def __iter__(self) -> Iterator[Event]:
        while True:
            try:
                line = self._resp.readline()
            except (OSError, ValueError, AttributeError, http.client.HTTPException):
                return  # closed under us (by close()), or the sidecar went away
            if not line:
                return
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if not isinstance(d, dict) or "type" not in d:
                continue
            gen = d.get("generation")
            yield Event(
                type=str(d["type"]),
                time=str(d.get("time", "")),
                generation=Rendezvous.from_json(gen, self._address) if gen else None,
                member=str(d.get("member", "")),
                reason=str(d.get("reason", "")),
                deadline=str(d.get("deadline", "") or ""),
            )

    def fileno(self):
        """The stream's socket, or None once closed."""
        sock = self._conn.sock
        return sock.fileno() if sock is not None else None

    def close(self):
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def normalize_address(address):
    """The sidecar address in its canonical form: a unix socket path (from
    PATH, unix:PATH or unix://PATH) or an http(s)://host:port[/prefix] URL
    (a query string or fragment dropped)."""
    address = address.strip()
    if address.startswith("unix://"):
        return address[len("unix://"):] or "/"
    if address.startswith("unix:"):
        return address[len("unix:"):]
    if address.startswith(("http://", "https://")):
        u = urllib.parse.urlsplit(address)
        return urllib.parse.urlunsplit((u.scheme, u.netloc, u.path.rstrip("/"), "", ""))
    return address


class Client:
    """Talks to one sidecar. address is a unix socket path (or unix://PATH)
    or an http:// URL; None reads RINGSIDE_SOCKET, else DEFAULT_SOCKET.
    timeout bounds every call but the long poll (which adds its own wait)
    and the event stream."""

    def __init__(self, address: Optional[str] = None, timeout: float = 10.0):
        self.address = normalize_address(address or os.environ.get("RINGSIDE_SOCKET") or DEFAULT_SOCKET)
        self.timeout = timeout
        if self.address.startswith(("http://", "https://")):
            u = urllib.parse.urlsplit(self.address)
            try:
                port = u.port
            except ValueError as e:
                raise ValueError("sidecar address %r: %s" % (self.address, e)) from None
            if not u.hostname:
                raise ValueError("sidecar address %r names no host: use http://HOST:PORT" % self.address)
            self._tcp = (u.scheme, u.hostname, port, u.path.rstrip("/"))
        else:
            self._tcp = None

    def token_file(self) -> Optional[str]:
        """Where the API token is read from: RINGSIDE_API_TOKEN_FILE, else
        the unix socket's path plus TOKEN_SUFFIX; None for a TCP sidecar without
        the variable."""
        path = os.environ.get(TOKEN_FILE_ENV)
        if path:
            return path
        if self._tcp is None:
            return self.address + TOKEN_SUFFIX
        return None

    def _auth_headers(self):
        """The headers that authenticate a call: TOKEN_HEADER with
        the token file's content, read on every call (the sidecar may
        rotate it), or none where there is no such file."""
        path = self.token_file()
        if not path:
            return {}
        try:
            with open(path) as f:
                token = f.read().strip()
        except OSError:
            return {}
        return {TOKEN_HEADER: token} if token else {}

    def __repr__(self):
        return "Client(%r)" % self.address

    def _connection(self, timeout):
        if self._tcp is None:
            return _UnixConnection(self.address, timeout=timeout), ""
        scheme, host, port, prefix = self._tcp
        cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        return cls(host, port, timeout=timeout), prefix

    def _open(self, method, path, body=None, timeout=None):
        """Sends a request and returns (connection, response)."""
        conn, prefix = self._connection(self.timeout if timeout is None else timeout)
        headers = self._auth_headers()
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, prefix + path, body=data, headers=headers)
            return conn, conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise SidecarUnreachable(self.address, cause=_describe(e)) from e

    def _call(self, method, path, body=None, timeout=None):
        """Returns (status, decoded JSON or None); raises on an error status."""
        conn, resp = self._open(method, path, body, timeout)
        try:
            raw = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise SidecarUnreachable(self.address, cause=_describe(e)) from e
        finally:
            conn.close()
        doc = None
        if raw:
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = None
        if resp.status >= 400:
            self._raise(method, path, resp.status, doc, raw)
        return resp.status, doc

    def _raise(self, method, path, status, doc, raw):
        msg = doc.get("error") if isinstance(doc, dict) else None
        if msg is None:
            msg = raw.decode(errors="replace").strip() or http.client.responses.get(status, "")
        if status == 404 and path.startswith("/" + API_VERSION + "/"):
            raise IncompatibleSidecar(
                "the sidecar at %s does not serve %s (%s): this client speaks trainer API %s; run a "
                "ringside sidecar and a ringside Python package of the same API version" % (self.address, path, msg, API_VERSION)
            )
        raise SidecarError(method, path, status, msg)

    def ready(self):
        """True once the sidecar holds a generation; False while it has none."""
        try:
            self._call("GET", "/v1/readyz")
            return True
        except SidecarError as e:
            if e.status == 503:
                return False
            raise

    def rendezvous(self, after=0, timeout=30.0, local_rank=None):
        """Waits up to timeout seconds for the first generation numbered above
        after; returns its Rendezvous, or None when the wait ran out.
        local_rank names the slot this process trains (see events)."""
        timeout = max(0.0, min(float(timeout), MAX_POLL_S))
        params = {"after": int(after), "timeout": "%.3fs" % timeout}
        if local_rank is not None:
            params["local_rank"] = int(local_rank)
        q = urllib.parse.urlencode(params)
        status, doc = self._call("GET", "/v1/rendezvous?" + q, timeout=timeout + self.timeout)
        if status == 204:
            return None
        if not isinstance(doc, dict):
            raise IncompatibleSidecar("the sidecar at %s answered the rendezvous with %r, not a JSON object" % (self.address, doc))
        return Rendezvous.from_json(doc, self.address)

    def events(self, local_rank=None):
        """Opens the event stream: the current generation (and a drain under
        way) first, then events as they happen. The stream has no read
        timeout; close() it from another thread to stop reading.

        An open stream is the trainer's presence. With local_rank it stands
        for that slot's process only: the sidecar then keeps its member in
        the ring only while every slot's process holds a stream, so the
        member leaves the ring when one of its processes dies, and enters it
        again once the process is back."""
        path = "/v1/events" if local_rank is None else "/v1/events?local_rank=%d" % int(local_rank)
        conn, resp = self._open("GET", path, timeout=self.timeout)
        if resp.status != 200:
            try:
                raw = resp.read()
            finally:
                conn.close()
            try:
                doc = json.loads(raw) if raw else None
            except ValueError:
                doc = None
            self._raise("GET", "/v1/events", resp.status, doc, raw)
        if conn.sock is not None:
            conn.sock.settimeout(None)  # idle streams are normal
        return EventStream(conn, resp, self.address)

    def heartbeat(self, step, samples, step_time_s, generation=None, gns=None, compute_time_s=None,
                  wait_time_s=None, skipped_steps=0):
        """Reports a completed step: the job's step counter, this member's
        samples so far, and the step's seconds; gns, when measured, is the
        gradient noise scale (samples; finite, not negative); compute_time_s
        and wait_time_s, when measured, split the step's seconds into this
        rank's own work and its wait in the collectives for its peers (the
        leader compares compute times to find a straggler); skipped_steps
        how many steps this process rolled back as non-finite so far."""
        body = {"step": int(step), "samples": int(samples), "step_time_s": float(step_time_s)}
        if generation:
            body["generation"] = int(generation)
        for name, v in (("compute_time_s", compute_time_s), ("wait_time_s", wait_time_s)):
            if v is None:
                continue
            v = float(v)
            if not 0 <= v <= 86400:  # NaN fails too
                raise ValueError("%s must be between 0 and 86400 seconds, got %r; pass None when it is not measured"
                                 % (name, v))
            if v > 0:
                body[name] = v
        if gns is not None:
            gns = float(gns)
            if not math.isfinite(gns) or gns < 0:
                raise ValueError("gns (the gradient noise scale) must be finite and not negative, got %r; "
                                 "pass None when it is not measured" % gns)
            body["gns"] = gns
        if skipped_steps:
            if int(skipped_steps) < 0:
                raise ValueError("skipped_steps must not be negative, got %r" % (skipped_steps,))
            body["skipped_steps"] = int(skipped_steps)
        self._call("POST", "/v1/heartbeat", body)

    def failure(self, peer, error=""):
        """Tells the sidecar that a collective with member peer failed; it
        checks the peer at once instead of waiting for gossip."""
        self._call("POST", "/v1/failure", {"peer": peer, "error": error[:2000]})

    def leave(self):
        """Asks the sidecar to drain this member out of the job."""
        self._call("POST", "/v1/leave")

    def restart(self, error=""):
        """Restart mode: the trainer crashed; the job re-forms around it."""
        self._call("POST", "/v1/restart", {"error": error[:2000]} if error else None)


def _describe(e):
    if isinstance(e, FileNotFoundError):
        return "the socket file does not exist"
    if isinstance(e, ConnectionRefusedError):
        return "connection refused (a stale socket: its sidecar has exited)"
    if isinstance(e, socket.timeout):
        return "timed out"
    return "%s: %s" % (type(e).__name__, e)
