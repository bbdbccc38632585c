"""run() with real multi-process PyTorch (gloo on CPU), each trainer next
to a fake sidecar that the test drives as the job's leader would."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from fakesidecar import FakeJob, FakeSidecar
from torchreq import require_torch

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
# Typically well under a second; the bound allows for 2 loaded cores and
# for the collective timeout (worker.COLLECTIVE_TIMEOUT_S), which ends the
# rare collective gloo leaves blocked after a connection failure.
RESUME_BOUND_S = 20.0


class Harness:
    """Trainer processes, each with its own fake sidecar and loopback
    address, and the JSON lines they print."""

    def __init__(self, test, port):
        self.test = test
        self.dir = tempfile.mkdtemp(prefix="ringside-elastic-")
        self.job = FakeJob(master_port=port)
        self.lines = []
        self.cond = threading.Condition()
        self.procs = {}
        self.sidecars = {}
        self.n = 0
        test.addCleanup(self.close)

    def add(self, env=None, steps=0, args=(), worker=WORKER):
        wid = "w%d" % self.n
        self.job.addrs[wid] = "127.0.0.%d" % (self.n + 2)
        self.n += 1
        sock = os.path.join(self.dir, wid + ".sock")
        self.sidecars[wid] = FakeSidecar(sock, self.job, member=wid)
        with open(os.path.join(self.dir, wid + ".log"), "w") as err:
            p = subprocess.Popen([sys.executable, worker, "--socket", sock, "--steps", str(steps)] + list(args),
                                 stdout=subprocess.PIPE, stderr=err, env=dict(os.environ, **(env or {})), text=True)
        self.procs[wid] = p
        threading.Thread(target=self._read, args=(wid, p), daemon=True).start()
        return wid

    def _read(self, wid, p):
        for line in p.stdout:
            try:
                d = json.loads(line)
            except ValueError:
                continue
            d["worker"] = wid
            with self.cond:
                self.lines.append(d)
                self.cond.notify_all()

    def log(self, wid):
        with open(os.path.join(self.dir, wid + ".log")) as f:
            return f.read()

    def wait(self, what, pred, timeout=60):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred(self.lines):
                left = deadline - time.monotonic()
                if left <= 0:
                    for p in self.procs.values():
                        if p.poll() is None:
                            p.send_signal(signal.SIGUSR1)  # stacks into the log
                    time.sleep(0.5)
                    logs = "\n".join("--- %s\n%s" % (w, self.log(w)[-6000:]) for w in self.procs)
                    self.test.fail("timed out waiting for %s (logs in %s)\n%s" % (what, self.dir, logs))
                self.cond.wait(min(left, 0.1))  # some predicates look at the clock
            return list(self.lines)

    def all_step(self, workers, generation, min_step=1, since=0.0, timeout=60):
        """Waits until every worker stepped in generation at or past
        min_step after since; returns the time of the last first step."""
        def ok(lines):
            firsts = {}
            for d in lines:
                if d.get("generation") == generation and "sum_ok" in d and d["step"] >= min_step and d["t"] >= since:
                    firsts.setdefault(d["worker"], d["t"])
            return set(workers) <= set(firsts) and firsts
        lines = self.wait("%s to step in generation %d" % (sorted(workers), generation), ok, timeout)
        return max(t for w, t in ok(lines).items() if w in workers)

    def last_step(self, wid):
        with self.cond:
            steps = [d["step"] for d in self.lines if d["worker"] == wid and "sum_ok" in d]
        return max(steps) if steps else 0

    def close(self):
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                except OSError:
                    pass
            p.wait()
            p.stdout.close()
        for s in self.sidecars.values():
            s.close()
        if not os.environ.get("RINGSIDE_KEEP_LOGS"):
            shutil.rmtree(self.dir, ignore_errors=True)


@require_torch
class ElasticTest(unittest.TestCase):
    def test_trains_through_kill_stop_join_and_drain(self):
        h = Harness(self, port=29300)
        ws = [h.add() for _ in range(4)]
        h.job.commit(ws)
        h.all_step(ws, 1, min_step=5)

        # SIGKILL of the last rank: the survivors' collective fails at once.
        os.kill(h.procs["w3"].pid, signal.SIGKILL)
        t0 = time.time()
        h.job.commit(["w0", "w1", "w2"], reason="w3 dead")
        self.assertLess(h.all_step(["w0", "w1", "w2"], 2, since=t0) - t0, RESUME_BOUND_S)

        # SIGSTOP of rank 0 (the store's host): nothing fails by itself; the
        # new generation aborts the blocked collective.
        os.kill(h.procs["w0"].pid, signal.SIGSTOP)
        t0 = time.time()
        h.job.commit(["w1", "w2"], reason="w0 dead")
        self.assertLess(h.all_step(["w1", "w2"], 3, since=t0) - t0, RESUME_BOUND_S)
        os.kill(h.procs["w0"].pid, signal.SIGKILL)

        # Scale-up: the newcomer syncs to the others' step.
        w4 = h.add()
        before = max(h.last_step("w1"), h.last_step("w2"))
        h.job.commit(["w1", "w2", w4], reason="join")
        h.all_step(["w1", "w2", w4], 4, min_step=before)

        # Drain of w2: it stops after a commit; the next generation leaves it out.
        h.sidecars["w2"].drain("SIGTERM")
        h.wait("w2 to stop stepping", lambda _: self._quiet(h, "w2"))
        last = {w: h.last_step(w) for w in ("w1", "w2", w4)}
        h.job.commit(["w1", w4], reason="w2 drained")
        h.all_step(["w1", w4], 5)
        self.assertEqual(h.procs["w2"].wait(20), 0, h.log("w2"))
        lines = h.wait("steps in generation 5", lambda ls: len([d for d in ls if d.get("generation") == 5]) > 10)

        first5 = {w: min(d["step"] for d in lines if d["worker"] == w and d.get("generation") == 5 and "sum_ok" in d)
                  for w in ("w1", w4)}
        for w, s in first5.items():
            self.assertLessEqual(s, last["w2"] + 1, "drain: %s went on from step %d, after w2's last %d" % (w, s, last["w2"]))
            self.assertGreaterEqual(s, last["w2"], "drain lost steps: %s went on from %d" % (w, s))
        self.check_consistent(lines)

    def _quiet(self, h, wid):
        with h.cond:
            ts = [d["t"] for d in h.lines if d["worker"] == wid and "sum_ok" in d]
        return ts and time.time() - ts[-1] > 0.5

    def check_consistent(self, lines):
        # Every rank of a generation holds the same parameters at the same
        # step, and after each sync all ranks start from the same state.
        by = {}
        for d in lines:
            if "sum_ok" in d:
                by.setdefault((d["generation"], d["step"]), set()).add(d["checksum"])
        bad = {k: v for k, v in by.items() if len(v) > 1}
        self.assertFalse(bad, "ranks disagree on the parameters at (generation, step): %s" % bad)
        rings = {}
        for d in lines:
            if d.get("event") == "ring":
                rings.setdefault(d["generation"], set()).add((d["step"], d["checksum"]))
        for g, v in rings.items():
            self.assertEqual(len(v), 1, "generation %d synced to different states: %s" % (g, v))
        # The step counter never goes back past a commit: a rank's next step
        # is later, except in a new generation, which may train again the
        # one step a rank finished as the generation was announced (a step
        # that ended after the announcement is never committed: its
        # collectives may have been aborted); a rank that was a step behind
        # when its group broke jumps ahead to the others'.
        per = {}
        for d in lines:
            if "sum_ok" in d:
                per.setdefault(d["worker"], []).append((d["generation"], d["step"]))
        for w, steps in per.items():
            for (ga, a), (gb, b) in zip(steps, steps[1:]):
                self.assertTrue(b == a + 1 or (gb > ga and b >= a), "%s stepped from %d to %d" % (w, a, b))
        losses = [d["loss"] for d in lines if "sum_ok" in d]
        early, late = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
        self.assertLess(late, early, "the loss did not go down")

    def test_corrupt_sync_payload_is_detected_on_every_rank(self):
        # w1 joins w0, which trained alone: only w1 is sent the state.
        h = Harness(self, port=29330)
        h.add()
        h.job.commit(["w0"])
        h.all_step(["w0"], 1, min_step=3)
        h.add(env={"TEST_CORRUPT": "payload"})
        h.job.commit(["w0", "w1"])
        codes = [h.procs[w].wait(60) for w in ("w0", "w1")]
        self.assertEqual(codes, [4, 4], "\n".join(h.log(w) for w in ("w0", "w1")))
        self.assertIn("arrived corrupt", h.log("w1"))
        self.assertIn("StateCorrupt", h.log("w0"))
        self.assertFalse([d for d in h.lines if "sum_ok" in d and d["generation"] == 2], "a rank trained on corrupt state")

    def test_differing_parameters_after_sync_are_detected(self):
        h = Harness(self, port=29350)
        h.add()
        h.add(env={"TEST_CORRUPT": "params"})
        h.job.commit(["w0", "w1"])
        codes = [h.procs[w].wait(60) for w in ("w0", "w1")]
        self.assertEqual(codes, [4, 4], "\n".join(h.log(w) for w in ("w0", "w1")))
        self.assertIn("ranks [1] hold parameters that differ", h.log("w0"))

    def test_training_to_the_end_returns_train_fns_value(self):
        h = Harness(self, port=29370)
        ws = [h.add(steps=15), h.add(steps=15)]
        h.job.commit(ws)
        for w in ws:
            self.assertEqual(h.procs[w].wait(60), 0, h.log(w))
        exits = [d for d in h.lines if d.get("event") == "exit"]
        self.assertEqual(sorted(d["result"] for d in exits), [15, 15])
        self.assertTrue(h.sidecars["w0"].heartbeats, "no heartbeats reached the sidecar")
        hb = h.sidecars["w0"].heartbeats[-1]
        self.assertEqual((hb["step"], hb["samples"]), (15, 15 * 32))
        self.assertGreater(hb["step_time_s"], 0)


@require_torch
class BadInputTest(unittest.TestCase):
    def state(self):
        import torch

        from ringside import elastic

        m = torch.nn.Linear(2, 1)
        return elastic.State(m, torch.optim.SGD(m.parameters(), lr=0.1))

    def test_no_sidecar_fails_at_once_naming_the_socket(self):
        from ringside import elastic
        from ringside.errors import SidecarUnreachable

        path = os.path.join(tempfile.mkdtemp(), "absent.sock")
        with self.assertRaises(SidecarUnreachable) as cm:
            elastic.run(lambda s: None, self.state(), socket=path, connect_timeout=0.2)
        # It gave up after the connect timeout it was given (not the default 30 s).
        self.assertIn("tried for 0.2s", str(cm.exception))
        self.assertIn(path, str(cm.exception))
        self.assertIn("ringside sidecar --socket", str(cm.exception))

    def test_sidecar_of_another_api_version_fails_at_once(self):
        from ringside import elastic
        from ringside.errors import IncompatibleSidecar

        path = os.path.join(tempfile.mkdtemp(), "v2.sock")
        sc = FakeSidecar(path, api_version="v2")
        self.addCleanup(sc.close)
        sc.job.commit(["w0"])
        with self.assertRaises(IncompatibleSidecar) as cm:
            elastic.run(lambda s: None, self.state(), socket=path, connect_timeout=1)
        self.assertIn("same API version", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
