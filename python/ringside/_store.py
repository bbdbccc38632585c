"""The key-value store a generation's process group forms on: a small TCP
server in rank 0's trainer and a torch.distributed.Store client in every
rank, written in Python.

Why not torch's TCPStore: in torch 1.13 every TCPStore client runs a
background thread that calls std::terminate when its connection is reset,
and the sidecar resets every connection to a dead member's address (so
that collectives blocked on it fail at once) - killing every survivor when
the dead member hosted the store. Here an error on the store's connections
is a Python exception in the thread that made the call; clients close their
connection once the group has formed (reconnecting if asked again), and
blocking waits give up as soon as a newer generation is announced.

Who may use it: the server binds the member's advertised address only
(never every address), and with the generation's store token (a secret the
sidecar hands out with the rendezvous) it admits only clients that prove
they hold it: on connecting, the server sends a random challenge, the
client answers with HMAC-SHA256(token, challenge), and a wrong or missing
answer closes the connection before any request is read. The token never
crosses the wire.
"""

import base64
import datetime
import errno
import hashlib
import hmac
import json
import logging
import os
import socket
import socketserver
import struct
import threading
import time

log = logging.getLogger("ringside")

_HEADER = struct.Struct(">I")
# A client has this long to answer the challenge.
_HANDSHAKE_S = 5.0
# How long a server waits for its port to come free: the same generation
# formed again reuses its port, and the last server closes in the background.
_BIND_RETRY_S = 2.0
# Addresses that would serve the store to every network of the pod.
_WILDCARD = {"", "0.0.0.0", "::", "[::]", "*"}
_MAX_MESSAGE = 64 << 20
# A blocking wait is asked of the server in slices this long, so the
# client checks between them whether to give up.
_SLICE_S = 0.1
# How often a client tries again while rank 0's server is not up yet: every
# rank waits for its connection before the group can form.
_CONNECT_RETRY_S = 0.002


class StoreError(RuntimeError):
    """The store did not answer, or answered with an error."""


def _send(sock, doc):
    body = json.dumps(doc).encode()
    sock.sendall(_HEADER.pack(len(body)) + body)


def _recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the store closed the connection")
        buf += chunk
    return bytes(buf)


def _recv(sock):
    (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    if n > _MAX_MESSAGE:
        raise StoreError("store message of %d bytes is larger than %d" % (n, _MAX_MESSAGE))
    return json.loads(_recv_exact(sock, n))


def _key(token):
    """The HMAC key of a store token: the bytes its hex stands for."""
    if not token:
        return None
    try:
        return bytes.fromhex(token)
    except ValueError:
        return token.encode()


def _answer(key, challenge):
    return hmac.new(key, b"ringside-store/1:" + bytes.fromhex(challenge), hashlib.sha256).hexdigest()


def _admit(sock, key):
    """The server's side of the handshake: True once the client proved it
    holds key (always, without a key)."""
    challenge = os.urandom(16).hex() if key is not None else None
    _send(sock, {"hello": 1, "challenge": challenge})
    if key is None:
        return True
    sock.settimeout(_HANDSHAKE_S)
    try:
        reply = _recv(sock)
    finally:
        sock.settimeout(None)
    got = reply.get("auth") if isinstance(reply, dict) else None
    if not isinstance(got, str) or not hmac.compare_digest(got, _answer(key, challenge)):
        _send(sock, {"error": "refused: this store admits only the ranks of its generation (a wrong or missing "
                              "store token)"})
        return False
    _send(sock, {"ok": True})
    return True


def _greet(sock, key, where):
    """The client's side of the handshake."""
    hello = _recv(sock)
    challenge = hello.get("challenge") if isinstance(hello, dict) else None
    if challenge is None:
        return
    if key is None:
        raise StoreError("the store at %s asks for the generation's store token, and this rank has none (a "
                         "sidecar older than the store's?)" % where)
    _send(sock, {"auth": _answer(key, challenge)})
    resp = _recv(sock)
    if not resp.get("ok"):
        raise StoreError("the store at %s refused this rank: %s" % (where, resp.get("error", "no reason given")))


def _b64(v):
    if isinstance(v, str):
        v = v.encode()
    return base64.b64encode(bytes(v)).decode()


class _Data:
    """The server's keys, values and waiters."""

    def __init__(self):
        self.cond = threading.Condition()
        self.kv = {}

    def handle(self, req):
        op = req.get("op")
        with self.cond:
            if op == "set":
                self.kv[req["k"]] = base64.b64decode(req["v"])
                self.cond.notify_all()
                return {}
            if op == "get":
                if not self._await([req["k"]], req.get("t", 0)):
                    return {"missing": True}
                return {"v": _b64(self.kv[req["k"]])}
            if op == "mget":
                if not self._await(req["ks"], req.get("t", 0)):
                    return {"missing": True}
                return {"vs": [_b64(self.kv[k]) for k in req["ks"]]}
            if op == "wait":
                return {} if self._await(req["ks"], req.get("t", 0)) else {"missing": True}
            if op == "add":
                v = int(self.kv.get(req["k"], b"0") or b"0") + int(req["n"])
                self.kv[req["k"]] = str(v).encode()
                self.cond.notify_all()
                return {"n": v}
            if op == "cas":
                cur = self.kv.get(req["k"])
                expected = base64.b64decode(req["e"])
                if (cur is None and expected == b"") or cur == expected:
                    cur = self.kv[req["k"]] = base64.b64decode(req["v"])
                    self.cond.notify_all()
                return {"v": _b64(cur if cur is not None else expected)}
            if op == "check":
                return {"ok": all(k in self.kv for k in req["ks"])}
            if op == "delete":
                return {"ok": self.kv.pop(req["k"], None) is not None}
            if op == "num":
                return {"n": len(self.kv)}
            if op == "append":
                self.kv[req["k"]] = self.kv.get(req["k"], b"") + base64.b64decode(req["v"])
                self.cond.notify_all()
                return {}
        return {"error": "unknown store operation %r" % op}

    def _await(self, keys, seconds):
        deadline = time.monotonic() + float(seconds)
        while not all(k in self.kv for k in keys):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.cond.wait(left)
        return True


class Server:
    """Serves the store on host:port (host: this member's advertised
    address, never a wildcard) from daemon threads until close(). With
    token (the generation's store token, hex), only clients holding it are
    served."""

    def __init__(self, host, port, token=None):
        if host in _WILDCARD:
            raise StoreError("the store serves this member's advertised address only, and the rendezvous names "
                             "none (%r): give the sidecar its pod address (--addr)" % host)
        data = _Data()
        key = _key(token)

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                sock = self.request
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    if not _admit(sock, key):
                        log.warning("the store refused a client from %s: it did not hold the generation's store "
                                    "token", self.client_address[0])
                        return
                    while True:
                        req = _recv(sock)
                        try:
                            resp = data.handle(req)
                        except (KeyError, ValueError, TypeError) as e:
                            resp = {"error": "bad store request: %s" % e}
                        _send(sock, resp)
                except (OSError, ValueError, StoreError):
                    return  # the client went away or was reset

        family = socket.AF_INET6 if ":" in host else socket.AF_INET

        class TCPServer(socketserver.ThreadingTCPServer):
            address_family = family
            allow_reuse_address = True
            daemon_threads = True
            # Every rank connects at once: with socketserver's default
            # backlog of 5 the kernel drops SYNs, and a dropped SYN is
            # retried only after a second.
            request_queue_size = 1024

        deadline = time.monotonic() + _BIND_RETRY_S
        while True:
            try:
                self._srv = TCPServer((host.strip("[]"), port), Handler)
                break
            except OSError as e:
                if e.errno == errno.EADDRINUSE and time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
                raise StoreError("serve the store on this member's address %s:%d: %s (only that address is "
                                 "bound)" % (host, port, e)) from e
        self._thread = threading.Thread(target=self._srv.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="ringside-store", daemon=True)
        self._thread.start()

    def close(self):
        """Stops serving without waiting for the serving thread to notice
        (up to its poll interval): the next group does not wait for it."""
        srv = self._srv

        def stop():
            srv.shutdown()
            srv.server_close()

        threading.Thread(target=stop, name="ringside-store-close", daemon=True).start()


def make_client(host, port, timeout_s, interrupted=lambda: False, token=None):
    """A torch.distributed.Store talking to the server at host:port, proving
    it holds token (the generation's store token) when the server asks.
    interrupted is polled during blocking waits: once it returns true they
    raise StoreError."""
    key = _key(token)
    import torch.distributed as dist

    class Client(dist.Store):
        def __init__(self):
            super().__init__()
            self._addr = (host, port)
            self._lock = threading.Lock()
            self._sock = None
            self._interrupted = interrupted
            self.set_timeout(datetime.timedelta(seconds=timeout_s))

        # Connection.

        def connect(self, deadline):
            """Connects, retrying until deadline (monotonic seconds): rank
            0's server may come up after this rank."""
            while True:
                try:
                    with self._lock:
                        self._connect()
                    return
                except OSError as e:
                    if self._interrupted():
                        raise StoreError("a newer generation was announced while connecting to the store") from e
                    if time.monotonic() > deadline:
                        raise StoreError("the store at %s:%d did not answer: %s" % (host, port, e)) from e
                    time.sleep(_CONNECT_RETRY_S)

        def _connect(self):
            if self._sock is None:
                s = socket.create_connection(self._addr, timeout=2.0)
                try:
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    _greet(s, key, "%s:%d" % (host, port))
                except BaseException:
                    s.close()
                    raise
                self._sock = s

        def close(self):
            """Closes the connection; the next call opens another."""
            with self._lock:
                if self._sock is not None:
                    self._sock.close()
                    self._sock = None

        def _call(self, req, wait_s=0.0):
            with self._lock:
                try:
                    self._connect()
                    self._sock.settimeout(wait_s + 10.0)
                    _send(self._sock, req)
                    resp = _recv(self._sock)
                except (OSError, ValueError) as e:
                    if self._sock is not None:
                        self._sock.close()
                        self._sock = None
                    raise StoreError("store at %s:%d: %s" % (host, port, e)) from e
            if "error" in resp:
                raise StoreError("store at %s:%d: %s" % (host, port, resp["error"]))
            return resp

        def _blocking(self, req, timeout):
            """Asks in slices until the keys exist, the timeout passes or a
            newer generation is announced."""
            t = self.timeout if timeout is None else timeout
            limit = t.total_seconds() if isinstance(t, datetime.timedelta) else float(t)
            deadline = time.monotonic() + (limit if limit > 0 else 1e9)
            while True:
                resp = self._call(dict(req, t=_SLICE_S), _SLICE_S)
                if not resp.get("missing"):
                    return resp
                if self._interrupted():
                    raise StoreError("a newer generation was announced while waiting for %s" % req.get("k", req.get("ks")))
                if time.monotonic() > deadline:
                    raise StoreError("timed out after %.0fs waiting for %s in the store" % (limit, req.get("k", req.get("ks"))))

        # torch.distributed.Store.

        def set(self, key, value):
            self._call({"op": "set", "k": key, "v": _b64(value)})

        def get(self, key):
            return base64.b64decode(self._blocking({"op": "get", "k": key}, None)["v"])

        def add(self, key, amount):
            return int(self._call({"op": "add", "k": key, "n": int(amount)})["n"])

        def compare_set(self, key, expected, desired):
            return base64.b64decode(self._call({"op": "cas", "k": key, "e": _b64(expected), "v": _b64(desired)})["v"])

        def wait(self, keys, timeout=None):
            self._blocking({"op": "wait", "ks": list(keys)}, timeout)

        def check(self, keys):
            return bool(self._call({"op": "check", "ks": list(keys)})["ok"])

        def delete_key(self, key):
            return bool(self._call({"op": "delete", "k": key})["ok"])

        def num_keys(self):
            return int(self._call({"op": "num"})["n"])

        # torch 1.13's trampoline looks the C++ names up (a PrefixStore,
        # which torch wraps every store in, calls these).
        deleteKey = delete_key
        getNumKeys = num_keys

        def clone(self):
            """A new client of the same server, with its own connection
            (torch 2.x clones the store for its own threads)."""
            return make_client(host, port, self.timeout.total_seconds(), self._interrupted, token)

        def append(self, key, value):
            self._call({"op": "append", "k": key, "v": _b64(value)})

        def multi_get(self, keys):
            """Every key's value, in one request that waits until all exist."""
            return [base64.b64decode(v) for v in self._blocking({"op": "mget", "ks": list(keys)}, None)["vs"]]

        def multi_set(self, keys, values):
            for k, v in zip(keys, values):
                self.set(k, v)

    return Client()
