"""The abort watchdog and the re-execution it falls back to."""

import contextlib
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import unittest
from unittest import mock

from torchreq import require_torch

from ringside import _group

HERE = os.path.dirname(os.path.abspath(__file__))


def group(stuck_after):
    g = _group.Group(generation=7, rank=1, world_size=3, backend="gloo", server=None, store=None, before=set(),
                     master_port=29500, timeout_s=60)
    g.stuck_after = stuck_after
    stuck = threading.Event()
    g.on_stuck = lambda _: stuck.set()
    return g, stuck


@contextlib.contextmanager
def computing():
    """A thread computing (the training thread not blocked) while in the block."""
    done = threading.Event()

    def spin():
        while not done.is_set():
            sum(i * i for i in range(10000))

    t = threading.Thread(target=spin)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join()


class WatchdogTest(unittest.TestCase):
    def test_an_idle_process_blocked_after_the_abort_is_called_stuck(self):
        g, stuck = group(0.3)
        g.abort("test")
        self.assertTrue(stuck.wait(3), "on_stuck was not called for an idle process")

    def test_a_group_left_in_time_is_not_stuck(self):
        g, stuck = group(0.5)
        g.abort("test")
        time.sleep(0.1)
        g._store = type("S", (), {"close": lambda self: None})()
        g.destroy()
        self.assertFalse(stuck.wait(1.0), "on_stuck was called although the group was destroyed")

    def test_a_computing_process_is_not_stuck(self):
        g, stuck = group(0.3)
        with computing():
            g.abort("test")
            self.assertFalse(stuck.wait(1.2), "on_stuck was called while the process computed")
        self.assertTrue(stuck.wait(3), "on_stuck was not called once the process went idle")

    @unittest.skipUnless(hasattr(os, "sched_setaffinity") and os.path.exists("/proc/self/task"), "Linux only")
    def test_a_computing_process_starved_of_cpu_is_not_stuck(self):
        # A crowded node: this process and 15 busy ones share one CPU, so
        # its computing thread runs well under a tenth of the time.
        cpu = min(os.sched_getaffinity(0))
        mine = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpu})
        self.addCleanup(os.sched_setaffinity, 0, mine)
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(15)]
        for h in hogs:
            self.addCleanup(h.wait)
            self.addCleanup(h.kill)
        g, stuck = group(0.3)
        with computing():
            g.abort("test")
            self.assertFalse(stuck.wait(1.5), "on_stuck was called while the process computed on a crowded CPU")

    def test_off_when_stuck_after_is_none(self):
        g, stuck = group(None)
        g.abort("test")
        self.assertFalse(stuck.wait(0.5))


@require_torch
class NativeAbortTest(unittest.TestCase):
    """The abort APIs of torch 2.x, faked on whatever torch is installed."""

    def setUp(self):
        from torch.distributed import distributed_c10d as c10d

        self.c10d = c10d
        self.calls = []

    def patch(self, name, value):
        old = getattr(self.c10d, name, None)
        setattr(self.c10d, name, value)
        self.addCleanup(lambda: setattr(self.c10d, name, old) if old is not None else delattr(self.c10d, name))

    def test_gloo_never_uses_a_native_abort(self):
        self.patch("_abort_process_group", lambda group=None: self.calls.append("abort_process_group"))
        pg = type("PG", (), {"abort": lambda self: self.calls.append("pg.abort")})()
        self.assertFalse(_group._native_abort("gloo", pg))
        self.assertEqual(self.calls, [])

    def test_the_registry_wide_abort_is_never_used(self):
        # torch >= 2.6: _abort_process_group on the default group clears the
        # registry under the training thread; the group's own abort does not.
        calls = self.calls

        class PG:
            def abort(self):
                calls.append("pg.abort")

        self.patch("_abort_process_group", lambda group=None: calls.append("abort_process_group"))
        self.assertTrue(_group._native_abort("nccl", PG()))
        self.assertEqual(calls, ["pg.abort"])

    def test_the_nccl_backends_abort_on_older_2x(self):
        calls = self.calls

        class Backend:
            def abort(self):
                calls.append("backend.abort")

        class PG:
            def _get_backend(self, device):
                return Backend()

        self.assertTrue(_group._native_abort("nccl", PG()))
        self.assertEqual(calls, ["backend.abort"])

    def test_no_abort_on_1_13_nccl(self):
        self.assertFalse(_group._native_abort("nccl", object()))
        self.assertFalse(_group._native_abort("nccl", None))

    def test_the_abort_is_bound_to_the_group_it_was_formed_for(self):
        calls = self.calls

        class PG:
            def abort(self):
                calls.append(self)

        mine, later = PG(), PG()
        self.patch("_get_default_group", lambda: later)  # the next generation's, by now
        g = _group.Group(generation=7, rank=1, world_size=3, backend="nccl", server=None, store=None, before=set(),
                         master_port=29500, timeout_s=60, pg=mine)
        g.abort("test")
        self.assertEqual(len(calls), 1)
        self.assertIs(calls[0], mine)

    def test_an_abort_after_destroy_reaches_nothing(self):
        calls = self.calls
        pg = type("PG", (), {"abort": lambda self: calls.append(self)})()
        g = _group.Group(generation=7, rank=1, world_size=3, backend="nccl", server=None, store=None, before=set(),
                         master_port=29500, timeout_s=60, pg=pg)
        g._store = type("S", (), {"close": lambda self: None})()
        g.destroy()
        g.abort("late")
        self.assertEqual(calls, [])


class NcclEnvTest(unittest.TestCase):
    KEYS = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_NET_GDR_LEVEL", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
            "NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT")

    def setUp(self):
        saved = {k: os.environ.get(k) for k in self.KEYS}
        applied = dict(_group._applied_nccl)

        def restore():
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            _group._applied_nccl.clear()
            _group._applied_nccl.update(applied)
        self.addCleanup(restore)
        for k in self.KEYS:
            os.environ.pop(k, None)
        _group._applied_nccl.clear()

    def test_the_newest_generations_settings_apply_and_the_users_stay(self):
        os.environ["NCCL_IB_HCA"] = "=mlx5_9"  # the user's
        _group.apply_nccl_env({"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_HCA": "=mlx5_0"})
        self.assertEqual(os.environ["NCCL_SOCKET_IFNAME"], "=eth0")
        _group.apply_nccl_env({"NCCL_SOCKET_IFNAME": "=eth1"})
        self.assertEqual(os.environ["NCCL_SOCKET_IFNAME"], "=eth1", "a later generation's settings were ignored")
        self.assertEqual(os.environ["NCCL_IB_HCA"], "=mlx5_9")

    @require_torch
    def test_each_generation_forms_with_its_own_settings_and_not_the_last_ones(self):
        import types

        seen = []

        def init(*args, **kwargs):
            seen.append({k: os.environ.get(k) for k in ("NCCL_SOCKET_IFNAME", "NCCL_NET_GDR_LEVEL", "NCCL_IB_HCA")})

        def generation(n, nccl):
            return types.SimpleNamespace(generation=n, rank=0, world_size=1, nccl=nccl, members=[], addr="",
                                         master_addr="127.0.0.1", master_port=29500, store_token="")

        store = types.SimpleNamespace(close=lambda: None)
        os.environ["NCCL_IB_HCA"] = "=mlx5_9"  # the user's
        with mock.patch.object(_group, "_store", lambda *a: (None, store)), \
                mock.patch.object(_group, "_await_peers", lambda *a: None), \
                mock.patch("torch.distributed.PrefixStore", lambda prefix, s: s), \
                mock.patch("torch.distributed.init_process_group", init):
            _group.form(generation(1, {"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_NET_GDR_LEVEL": "PHB"}), 0, "nccl")
            _group.form(generation(2, {"NCCL_SOCKET_IFNAME": "=eth1", "NCCL_IB_HCA": "=mlx5_0"}), 0, "nccl")
        self.assertEqual(seen, [
            {"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_IB_HCA": "=mlx5_9"},
            {"NCCL_SOCKET_IFNAME": "=eth1", "NCCL_NET_GDR_LEVEL": None, "NCCL_IB_HCA": "=mlx5_9"},
        ], "a generation formed with another generation's NCCL settings")

    def test_nccl_failures_raise_on_every_torch_version(self):
        self.assertEqual(_group.nccl_error_handling("2.11.0+cu130"), {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"})
        self.assertEqual(_group.nccl_error_handling("2.2.1"), {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"})
        self.assertEqual(_group.nccl_error_handling("2.1.2"), {"NCCL_ASYNC_ERROR_HANDLING": "2"})
        self.assertEqual(_group.nccl_error_handling("1.13.1"), {"NCCL_ASYNC_ERROR_HANDLING": "0", "NCCL_BLOCKING_WAIT": "1"})
        with mock.patch.object(_group, "nccl_error_handling", lambda: {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}):
            _group.apply_nccl_env({})
            self.assertEqual(os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "2")
            os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"  # the user's choice stands
            _group._applied_nccl.clear()
            _group.apply_nccl_env({})
            self.assertEqual(os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1")


class ReexecTest(unittest.TestCase):
    def test_the_process_runs_its_command_again_with_the_same_pid(self):
        script = textwrap.dedent("""
            import os, sys
            sys.path.insert(0, %r)
            from ringside import elastic
            print("run", os.environ.get("RUNS", "1"), os.getpid(), sys.argv[1:], flush=True)
            if os.environ.get("RUNS") != "2":
                os.environ["RUNS"] = "2"
                elastic._reexec(type("G", (), {"generation": 3})())
        """ % os.path.dirname(HERE))
        out = subprocess.run([sys.executable, "-c", script, "--flag", "x"], capture_output=True, text=True, timeout=30)
        lines = [l.split() for l in out.stdout.splitlines()]
        self.assertEqual(len(lines), 2, out.stdout + out.stderr)
        self.assertEqual([l[1] for l in lines], ["1", "2"])
        self.assertEqual(lines[0][2], lines[1][2], "the pid changed")
        self.assertIn("re-executing this trainer", out.stderr)

    def test_the_event_stream_stays_open_across_the_exec(self):
        # The sidecar takes a closed stream for the trainer's end: the
        # re-executed process takes the stream over and closes it only
        # once its own is open.
        script = textwrap.dedent("""
            import os, sys
            sys.path.insert(0, %r)
            from ringside import elastic
            from ringside._watcher import Watcher
            if os.environ.get("RUNS") != "2":
                os.environ["RUNS"] = "2"
                fd = os.dup(int(os.environ["STREAM_FD"]))  # not inheritable, as a socket's fd is
                os.close(int(os.environ["STREAM_FD"]))
                w = Watcher(client=None)
                w._stream = type("S", (), {"fileno": lambda self: fd})()
                print("run 1", fd, flush=True)
                elastic._reexec(type("G", (), {"generation": 3})(), w)
            else:
                w = Watcher(client=None)
                fd = w._handed
                print("run 2", fd, os.environ.get("RINGSIDE_EVENTS_FD"), flush=True)
                w._release_handover()
                try:
                    os.fstat(fd)
                    print("still open", flush=True)
                except OSError:
                    print("released", flush=True)
        """ % os.path.dirname(HERE))
        a, b = socket.socketpair()
        try:
            first = subprocess.Popen([sys.executable, "-c", script, "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, pass_fds=[b.fileno()], env=dict(os.environ, STREAM_FD=str(b.fileno())))
            b.close()
            out, err = first.communicate(timeout=30)
        finally:
            a.close()
        lines = out.split("\n")
        self.assertTrue(lines[0].startswith("run 1 "), out + err)
        fd = lines[0].split()[2]
        self.assertEqual(lines[1:3], ["run 2 %s None" % fd, "released"], "the new process did not take the stream over:\n" + out + err)

    def test_a_draining_member_exits_instead(self):
        script = textwrap.dedent("""
            import logging, os, sys
            sys.path.insert(0, %r)
            logging.basicConfig(level=logging.INFO)
            from ringside import elastic
            print("run", os.environ.get("RUNS", "1"), flush=True)
            os.environ["RUNS"] = "2"
            elastic._leave_stuck(type("G", (), {"generation": 3})(), draining=True)
            print("still here", flush=True)
        """ % os.path.dirname(HERE))
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(), ["run", "1"], "the draining trainer ran again or went on")
        self.assertIn("drained: leaving the blocked collective", out.stderr)

    def test_an_active_member_runs_again(self):
        script = textwrap.dedent("""
            import os, sys
            sys.path.insert(0, %r)
            from ringside import elastic
            print("run", os.environ.get("RUNS", "1"), flush=True)
            if os.environ.get("RUNS") != "2":
                os.environ["RUNS"] = "2"
                elastic._leave_stuck(type("G", (), {"generation": 3})(), draining=False)
        """ % os.path.dirname(HERE))
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.stdout.split(), ["run", "1", "run", "2"], out.stderr)


if __name__ == "__main__":
    unittest.main()
