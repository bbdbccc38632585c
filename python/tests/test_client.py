import os
import socket
import tempfile
import threading
import time
import unittest

from fakesidecar import FakeJob, FakeSidecar

from ringside.client import Client, Rendezvous
from ringside.errors import IncompatibleSidecar, SidecarError, SidecarUnreachable


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ringside-client-")
        self.path = os.path.join(self.dir, "s.sock")
        self.job = FakeJob(addrs={"w0": "127.0.0.2", "w1": "127.0.0.3"})
        self.sc = FakeSidecar(self.path, self.job, member="w1")
        self.addCleanup(self.sc.close)
        self.c = Client(self.path)

    def test_rendezvous_returns_the_members_view(self):
        self.job.commit(["w0", "w1"])
        r = self.c.rendezvous(after=0, timeout=1)
        self.assertEqual((r.generation, r.member, r.state, r.rank, r.world_size), (1, "w1", "active", 1, 2))
        self.assertEqual((r.master_addr, r.addr), ("127.0.0.2", "127.0.0.3"))
        self.assertEqual([m.id for m in r.members], ["w0", "w1"])

    def test_rendezvous_long_polls_and_returns_none_on_timeout(self):
        self.job.commit(["w0"])
        t0 = time.monotonic()
        self.assertIsNone(self.c.rendezvous(after=1, timeout=0.3))
        self.assertGreaterEqual(time.monotonic() - t0, 0.25)
        threading.Timer(0.1, lambda: self.job.commit(["w0", "w1"])).start()
        r = self.c.rendezvous(after=1, timeout=5)
        self.assertEqual(r.generation, 2)

    def test_a_slot_process_names_its_slot_on_its_stream_and_polls(self):
        # The sidecar keeps a member with several slots in the ring only
        # while every slot's process holds its stream.
        self.job.commit(["w0", "w1"])
        self.c.rendezvous(after=0, timeout=1, local_rank=1)
        self.c.events(local_rank=1).close()
        self.c.events().close()
        got = [(path, q.get("local_rank")) for _, path, q in self.sc.requests if path in ("/v1/rendezvous", "/v1/events")]
        self.assertEqual(got, [("/v1/rendezvous", "1"), ("/v1/events", "1"), ("/v1/events", None)])

    def test_events_stream_generations_and_drains(self):
        self.job.commit(["w1"])
        stream = self.c.events()
        got = []
        done = threading.Event()

        def read():
            for e in stream:
                got.append(e)
                if e.type == "drain":
                    done.set()

        t = threading.Thread(target=read, daemon=True)
        t.start()
        self.job.commit(["w0", "w1"])
        self.sc.member_dead("w0")
        self.sc.drain("SIGTERM")
        self.assertTrue(done.wait(5))
        stream.close()
        t.join(5)
        self.assertFalse(t.is_alive(), "close() did not end the iteration")
        self.assertEqual([e.type for e in got], ["generation", "generation", "member_dead", "drain"])
        self.assertEqual(got[1].generation.generation, 2)
        self.assertEqual((got[2].member, got[3].reason), ("w0", "SIGTERM"))

    def test_heartbeat_failure_leave(self):
        self.c.heartbeat(step=3, samples=96, step_time_s=0.05, generation=2)
        self.c.failure("w0", "Connection closed by peer [127.0.0.2]:1234")
        self.c.leave()
        self.assertEqual(self.sc.heartbeats, [{"step": 3, "samples": 96, "step_time_s": 0.05, "generation": 2}])
        self.assertEqual(self.sc.failures[0]["peer"], "w0")
        self.assertEqual(self.sc.leaves, 1)

    def test_heartbeat_splits_compute_and_wait_and_refuses_bad_times(self):
        self.c.heartbeat(step=4, samples=128, step_time_s=0.25, compute_time_s=0.2, wait_time_s=0.05)
        self.assertEqual(self.sc.heartbeats[-1], {"step": 4, "samples": 128, "step_time_s": 0.25,
                                                  "compute_time_s": 0.2, "wait_time_s": 0.05})
        for bad in (-0.1, float("nan"), float("inf"), 86401):
            with self.subTest(compute_time_s=bad), self.assertRaises(ValueError) as cm:
                self.c.heartbeat(step=5, samples=160, step_time_s=0.25, compute_time_s=bad)
            self.assertIn("compute_time_s", str(cm.exception))
        self.assertEqual(len(self.sc.heartbeats), 1, "a refused heartbeat was sent")

    def test_error_answers_carry_the_sidecars_message(self):
        with self.assertRaises(SidecarError) as cm:
            self.c.failure("")
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("peer is empty", str(cm.exception))

    def test_ready(self):
        self.assertFalse(self.c.ready())
        self.job.commit(["w1"])
        self.assertTrue(self.c.ready())


class BadSidecarTest(unittest.TestCase):
    def test_missing_socket_names_it_and_says_what_to_start(self):
        path = os.path.join(tempfile.mkdtemp(), "nothing.sock")
        with self.assertRaises(SidecarUnreachable) as cm:
            Client(path).rendezvous(timeout=0)
        msg = str(cm.exception)
        self.assertIn(path, msg)
        self.assertIn("ringside sidecar --socket", msg)
        self.assertIn("does not exist", msg)

    def test_stale_socket(self):
        import socket

        path = os.path.join(tempfile.mkdtemp(), "stale.sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        s.close()  # the file stays, nobody listens
        with self.assertRaises(SidecarUnreachable) as cm:
            Client(path).ready()
        self.assertIn("refused", str(cm.exception))

    def test_other_api_version_is_refused(self):
        for version in ("v2", None):
            with self.subTest(version=version):
                d = {"api_version": version, "generation": 1, "member": "w0", "state": "active"}
                with self.assertRaises(IncompatibleSidecar) as cm:
                    Rendezvous.from_json(d, "/x.sock")
                self.assertIn("same API version", str(cm.exception))

    def test_sidecar_serving_another_version_is_refused(self):
        path = os.path.join(tempfile.mkdtemp(), "v2.sock")
        sc = FakeSidecar(path, api_version="v2")
        self.addCleanup(sc.close)
        sc.job.commit(["w0"])
        with self.assertRaises(IncompatibleSidecar) as cm:
            Client(path).rendezvous(timeout=0)
        self.assertIn("v1", str(cm.exception))

    def test_tcp_url(self):
        import http.server

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                body = b'{"status":"ready"}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)  # cleanups run last first: shut down, then close
        self.addCleanup(srv.shutdown)
        self.assertTrue(Client("http://127.0.0.1:%d" % srv.server_address[1]).ready())



class AddressTest(unittest.TestCase):
    def test_the_forms_of_an_address(self):
        from ringside.client import normalize_address

        for given, want in (("/run/r.sock", "/run/r.sock"), ("unix:///run/r.sock", "/run/r.sock"),
                            ("unix:/run/r.sock", "/run/r.sock"), ("http://127.0.0.1:8080/?x=1#f", "http://127.0.0.1:8080"),
                            ("http://10.0.0.1:80/api/?q", "http://10.0.0.1:80/api")):
            self.assertEqual(normalize_address(given), want)

    def test_a_path_that_is_not_a_socket_is_named_as_such(self):
        from ringside import Client
        from ringside.errors import SidecarUnreachable

        path = os.path.join(tempfile.mkdtemp(), "plain-file")
        open(path, "w").close()
        with self.assertRaises(SidecarUnreachable) as cm:
            Client(path).ready()
        self.assertIn("exists but is not a socket", str(cm.exception))

    def test_a_tcp_sidecar_gets_tcp_advice(self):
        from ringside import Client
        from ringside.errors import SidecarUnreachable

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        with self.assertRaises(SidecarUnreachable) as cm:
            Client("http://127.0.0.1:%d" % port, timeout=1).ready()
        self.assertIn("--http-addr", str(cm.exception))


class TokenTest(unittest.TestCase):
    def test_calls_carry_the_token_file_beside_the_socket(self):
        from ringside import Client

        d = tempfile.mkdtemp()
        sock = os.path.join(d, "ringside.sock")
        sc = FakeSidecar(sock)
        self.addCleanup(sc.close)
        c = Client("unix://" + sock)
        c.leave()  # no token file: no header
        with open(sock + ".token", "w") as f:
            f.write("s3cret\n")
        c.heartbeat(1, 32, 0.1)
        c.ready()
        self.assertEqual(sc.tokens, [None, "s3cret", "s3cret"])


if __name__ == "__main__":
    unittest.main()
