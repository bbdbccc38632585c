"""The Python client against the sidecar's golden answers: every fixture in
trainer/api/testdata (which the Go tests produce from the real handlers) is
served byte for byte, and the client must read it; the client's request
bodies must equal the golden requests the real sidecar accepts."""

import dataclasses
import http.server
import json
import threading
import unittest
import urllib.parse

import contract

from ringside import client as rc
from ringside.errors import IncompatibleSidecar


class _GoldenSidecar:
    """Answers every request with one exchange's golden answer."""

    def __init__(self):
        self.exchange = None
        self.bodies = []
        gs = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _answer(self):
                ex = gs.exchange
                path = urllib.parse.urlsplit(self.path).path
                n = int(self.headers.get("Content-Length") or 0)
                gs.bodies.append((self.command, path, json.loads(self.rfile.read(n)) if n else None))
                body = contract.raw(ex["answer"]) if ex.get("answer") else b""
                self.send_response(ex["status"])
                self.send_header("Content-Type", "application/x-ndjson" if ex["path"] == "/v1/events" else "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]

    def serving(self, answer=None, request=None):
        """Serves the exchange with this answer (or request) file; returns it."""
        for ex in contract.exchanges():
            if (answer and ex.get("answer") == answer) or (request and ex.get("request") == request):
                self.exchange = ex
                return ex
        raise KeyError(answer or request)

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def _member_dicts(doc):
    return [dict({"incarnation": 0}, **m) for m in doc.get("members") or []]


class ContractTest(unittest.TestCase):
    def setUp(self):
        self.sc = _GoldenSidecar()
        self.addCleanup(self.sc.close)
        self.c = rc.Client(self.sc.url)

    def assertRendezvous(self, r, doc):
        self.assertEqual(
            (r.api_version, r.generation, r.member, r.state, r.rank, r.ranks, r.local_world_size, r.world_size,
             r.group_rank, r.num_groups, r.master_addr, r.master_port, r.nccl, r.reason),
            (doc["api_version"], doc["generation"], doc["member"], doc["state"], doc["rank"], doc.get("ranks", []),
             doc["local_world_size"], doc["world_size"], doc["group_rank"], doc["num_groups"], doc["master_addr"],
             doc["master_port"], doc.get("nccl", {}), doc.get("reason", "")),
        )
        self.assertEqual([dataclasses.asdict(m) for m in r.members], _member_dicts(doc))
        self.assertEqual(r.store_token, doc.get("store_token", ""))

    def test_every_rendezvous_answer_is_read_in_full(self):
        answers = [ex["answer"] for ex in contract.exchanges() if ex["path"] == "/v1/rendezvous"]
        states = set()
        for answer in answers:
            with self.subTest(answer=answer):
                self.sc.serving(answer=answer)
                doc = contract.load(answer)
                r = self.c.rendezvous(after=0, timeout=1)
                self.assertRendezvous(r, doc)
                states.add(r.state)
        self.assertEqual(states, {rc.ACTIVE, rc.STANDBY, rc.PAUSED, rc.EXCLUDED})

    def test_event_stream_lines_are_read_in_full(self):
        self.sc.serving(answer="events.ndjson")
        want = contract.lines("events.ndjson")
        with self.c.events() as stream:
            got = list(stream)
        self.assertEqual([e.type for e in got], [d["type"] for d in want])
        self.assertEqual({e.type for e in got}, {"generation", "drain", "member_dead", "job_stopped"})
        for e, d in zip(got, want):
            with self.subTest(event=d["type"]):
                self.assertEqual((e.time, e.member, e.reason, e.deadline),
                                 (d["time"], d.get("member", ""), d.get("reason", ""), d.get("deadline", "")))
                if "generation" in d:
                    self.assertRendezvous(e.generation, d["generation"])
                else:
                    self.assertIsNone(e.generation)

    def test_request_bodies_equal_the_golden_requests(self):
        hb = contract.load("heartbeat_request.json")
        failure = contract.load("failure_request.json")
        restart = contract.load("restart_request.json")
        calls = [
            ("heartbeat_request.json", lambda: self.c.heartbeat(hb["step"], hb["samples"], hb["step_time_s"], hb["generation"], hb["gns"],
                                                                  hb["compute_time_s"], hb["wait_time_s"], hb["skipped_steps"]), hb),
            ("failure_request.json", lambda: self.c.failure(failure["peer"], failure["error"]), failure),
            ("restart_request.json", lambda: self.c.restart(restart["error"]), restart),
        ]
        for name, call, want in calls:
            with self.subTest(request=name):
                ex = self.sc.serving(request=name)
                del self.sc.bodies[:]
                call()
                self.assertEqual(self.sc.bodies, [(ex["method"], ex["path"], want)])

    def test_accepted_and_health_answers(self):
        self.sc.serving(answer="leave_accepted.json")
        self.c.leave()
        self.sc.serving(answer="readyz.json")
        self.assertTrue(self.c.ready())
        self.sc.serving(answer="readyz_not_ready.json")
        self.assertFalse(self.c.ready())

    def test_error_answer_carries_the_sidecars_message(self):
        self.sc.serving(answer="error_not_found.json")
        with self.assertRaises(IncompatibleSidecar) as cm:
            self.c.rendezvous(timeout=0)
        self.assertIn(contract.load("error_not_found.json")["error"], str(cm.exception))


if __name__ == "__main__":
    unittest.main()
