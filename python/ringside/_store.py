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
"""

import base64
import datetime
import json
import socket
import socketserver
import struct
import threading
import time

_HEADER = struct.Struct(">I")
_MAX_MESSAGE = 64 << 20
# A blocking wait is asked of the server in slices this long, so the
# client checks between them whether to give up.
_SLICE_S = 0.1


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
    """Serves the store on host:port (all addresses if host cannot be bound)
    from daemon threads until close()."""

    def __init__(self, host, port):
        data = _Data()

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                sock = self.request
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
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

        try:
            self._srv = TCPServer((host, port), Handler)
        except OSError:
            TCPServer.address_family = socket.AF_INET6
            try:
                self._srv = TCPServer(("::", port), Handler)
            except OSError as e:
                raise StoreError("serve the store on port %d: %s" % (port, e)) from e
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


def make_client(host, port, timeout_s, interrupted=lambda: False):
    """A torch.distributed.Store talking to the server at host:port.
    interrupted is polled during blocking waits: once it returns true they
    raise StoreError."""
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
                    time.sleep(0.01)

        def _connect(self):
            if self._sock is None:
                s = socket.create_connection(self._addr, timeout=2.0)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
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

        def append(self, key, value):
            self._call({"op": "append", "k": key, "v": _b64(value)})

        def multi_get(self, keys):
            return [self.get(k) for k in keys]

        def multi_set(self, keys, values):
            for k, v in zip(keys, values):
                self.set(k, v)

    return Client()
