"""A fake ringside sidecar for unit tests: the trainer API (v1) on a unix
socket, driven by the test. A FakeJob holds the generation that several
FakeSidecars (one per member) serve, each from its member's point of view,
as the real sidecars do.

Every answer and event is built from the golden fixtures the real sidecar's
tests produce (contract.py): the fake fills in the values, the fixtures give
the shape, so the fake cannot drift from the sidecar."""

import json
import os
import secrets
import socketserver
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler

import contract


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class FakeJob:
    """The job's generations. commit(members) publishes generation n+1 with
    members (ids, one slot each) in ring order at master port 29500+n%16."""

    def __init__(self, master_port=29500, addrs=None, store_tokens=True):
        # Each generation's store token, as the sidecar hands it out.
        self.store_tokens = store_tokens
        self.tokens = {}
        self.lock = threading.Condition()
        self.number = 0
        self.members = []
        self.master_port = master_port
        self.addrs = addrs or {}
        self.sidecars = []
        self.paused = False

    def commit(self, members, reason="test", paused=False):
        with self.lock:
            self.number += 1
            self.members = list(members)
            self.paused = paused
            self.reason = reason
            self.lock.notify_all()
            # Published under the lock a new subscriber takes for its
            # snapshot, so each stream sees this generation exactly once.
            for s in list(self.sidecars):
                s.publish(_generation_event(s.rendezvous_doc()))
            return self.number

    def addr(self, member):
        return self.addrs.get(member, "127.0.0.1")

    def doc_for(self, member, api_version="v1"):
        with self.lock:
            placed = member in self.members
            d = contract.rendezvous(("paused" if self.paused else "active") if placed else "excluded")
            d.pop("nccl", None)  # no netopt behind the fake: NCCL keeps its defaults
            shape = d["members"][0]
            members = [dict(shape, id=m, addr=self.addr(m), rank=i, slots=1) for i, m in enumerate(self.members)]
            d.update(
                api_version=api_version, generation=self.number, member=member, world_size=len(self.members),
                num_groups=len(self.members), master_addr=self.addr(self.members[0]) if self.members else "",
                master_port=self.master_port + self.number % 16, members=members, reason=getattr(self, "reason", ""),
            )
            if self.store_tokens:
                d["store_token"] = self.tokens.setdefault(self.number, secrets.token_hex(32))
            if placed:
                i = self.members.index(member)
                d.update(rank=i, ranks=[i], local_world_size=1, group_rank=i)
            return d


def _generation_event(doc):
    return dict(contract.event("generation"), time=_now(), generation=doc)


def _error(msg):
    return dict(contract.load("error_not_found.json"), error=msg)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # a trainer that was killed mid-request


class FakeSidecar:
    """Serves member's view of job on a unix socket at path."""

    def __init__(self, path, job=None, member="w0", api_version="v1"):
        self.path = path
        self.job = job or FakeJob()
        self.member = member
        self.api_version = api_version
        self.heartbeats = []
        self.failures = []
        self.leaves = 0
        self.restarts = []
        self.requests = []
        self.tokens = []  # the API token header of each request (None: absent)
        self._subs = []
        self._lock = threading.Lock()
        self._draining = None
        self.job.sidecars.append(self)
        if os.path.exists(path):
            os.remove(path)
        self._server = _Server(path, self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        with self._lock:
            subs, self._subs = self._subs, []
        for q in subs:
            q.put(None)
        self._server.shutdown()
        self._server.server_close()
        if self in self.job.sidecars:
            self.job.sidecars.remove(self)
        if os.path.exists(self.path):
            os.remove(self.path)

    def rendezvous_doc(self):
        return self.job.doc_for(self.member, self.api_version)

    def publish(self, event):
        with self._lock:
            subs = list(self._subs)
        for q in subs:
            q.put(event)

    def drain(self, reason="SIGTERM"):
        e = dict(contract.event("drain"), time=_now(), reason=reason, deadline=_now())
        with self.job.lock:
            self._draining = e
            self.publish(e)

    def member_dead(self, member):
        self.publish(dict(contract.event("member_dead"), time=_now(), member=member))

    def _handler(self):
        sc = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def address_string(self):
                return "unix"

            def _json(self, code, doc):
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _body(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                return json.loads(raw) if raw else None

            def do_GET(self):
                u = urllib.parse.urlsplit(self.path)
                sc.tokens.append(self.headers.get("X-Ringside-Token"))
                q = dict(urllib.parse.parse_qsl(u.query))
                sc.requests.append(("GET", u.path, q))
                if not u.path.startswith("/" + sc.api_version + "/"):
                    return self._json(404, _error("no such endpoint %s; this sidecar serves API %s under /%s/"
                                                  % (u.path, sc.api_version, sc.api_version)))
                p = u.path.split("/", 2)[2]
                if p == "readyz":
                    answer = "readyz.json" if sc.job.number else "readyz_not_ready.json"
                    return self._json(contract.status_of(answer), contract.load(answer))
                if p == "rendezvous":
                    after = int(q.get("after", 0))
                    wait = float(q.get("timeout", "30s").rstrip("s"))
                    deadline = time.monotonic() + wait
                    with sc.job.lock:
                        while sc.job.number <= after:
                            left = deadline - time.monotonic()
                            if left <= 0:
                                break
                            sc.job.lock.wait(left)
                        ready = sc.job.number > after
                    if not ready:
                        self.send_response(204)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    return self._json(200, sc.rendezvous_doc())
                if p == "events":
                    return self._events()
                return self._json(404, _error("no such endpoint"))

            def _events(self):
                import queue

                q = queue.Queue()
                # The snapshot and the subscription are one step, as in the
                # sidecar: nothing published is missed or sent twice.
                first = []
                with sc.job.lock:
                    with sc._lock:
                        sc._subs.append(q)
                    if sc.job.number > 0:
                        first.append(_generation_event(sc.rendezvous_doc()))
                    if sc._draining:
                        first.append(sc._draining)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for e in first:
                        self._chunk(e)
                    while True:
                        e = q.get()
                        if e is None:
                            break
                        self._chunk(e)
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass
                finally:
                    with sc._lock:
                        if q in sc._subs:
                            sc._subs.remove(q)
                self.close_connection = True

            def _chunk(self, e):
                line = (json.dumps(e) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()

            def do_POST(self):
                u = urllib.parse.urlsplit(self.path)
                sc.requests.append(("POST", u.path, None))
                sc.tokens.append(self.headers.get("X-Ringside-Token"))
                body = self._body()
                if u.path == "/v1/heartbeat":
                    unknown = set(body or {}) - set(contract.load("heartbeat_request.json"))
                    if unknown:
                        return self._json(400, _error("bad JSON body: unknown fields %s" % sorted(unknown)))
                    sc.heartbeats.append(body)
                    self.send_response(204)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if u.path == "/v1/failure":
                    if not body or not body.get("peer"):
                        return self._json(400, _error("failure: peer is empty; name the member whose collective failed"))
                    sc.failures.append(body)
                    golden = contract.load("failure_accepted.json")
                    golden["status"] = golden["status"].replace(contract.load("failure_request.json")["peer"], body["peer"])
                    return self._json(contract.status_of("failure_accepted.json"), golden)
                if u.path == "/v1/leave":
                    sc.leaves += 1
                    sc.drain("leave requested by the trainer")
                    return self._json(contract.status_of("leave_accepted.json"), contract.load("leave_accepted.json"))
                if u.path == "/v1/restart":
                    sc.restarts.append(body)
                    return self._json(contract.status_of("restart_accepted.json"), contract.load("restart_accepted.json"))
                return self._json(404, _error("no such endpoint %s" % u.path))

        return Handler
