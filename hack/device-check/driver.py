#!/usr/bin/env python3
"""The device check's parts, each bounded in time, summarised as one JSON
line on stdout (see run.sh). A part that cannot run here says why in
"skipped"; it never counts as passed.

Parts: the Python test suite; the live chaos at N workers on gloo (kill,
join, drain) with every epoch's indices checked exactly once; recovery with
real sidecars (`ringside bench recovery --trainer pytorch`); netopt's view
of this machine (`ringside netopt detect`, `ringside netopt env`); a 1-rank
NCCL group formed, used, aborted and destroyed across 3 generations with
netopt's settings, through ringside's own group code; commits and a restore
of a 1 GiB model on the GPU."""

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(cmd, timeout, logfile, env=None, cwd=ROOT):
    t0 = time.monotonic()
    with open(logfile, "w") as f:
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, timeout=timeout, env=env, cwd=cwd, text=True)
            return p.returncode, p.stdout, time.monotonic() - t0
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            return 124, out, time.monotonic() - t0


def tail(path, n=2000):
    try:
        with open(path) as f:
            return f.read()[-n:]
    except OSError:
        return ""


def part_python_suite(a, budget):
    lf = os.path.join(a.logs, "python-tests.log")
    env = dict(os.environ, CI="true")
    rc, _, took = run([sys.executable, "-m", "unittest", "discover", "-s", "tests"], budget, lf, env=env,
                      cwd=os.path.join(ROOT, "python"))
    summary = [l for l in tail(lf, 4000).splitlines() if l.startswith(("Ran ", "OK", "FAILED"))]
    out = {"ok": rc == 0, "seconds": round(took, 1), "summary": summary}
    if rc != 0:
        out["log_tail"] = tail(lf, 1500)
    return out


def part_chaos(a, budget):
    """N live trainers (rich_worker.py, an ElasticSampler with DataLoader
    workers) next to fake sidecars: a kill, a join and a drain, then every
    epoch's committed indices checked exactly once."""
    import signal
    import unittest

    from test_elastic import Harness
    from test_live_features import RICH, check_exactly_once

    n_workers, n, epochs = a.workers, 1200, 2
    result = {}
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the workers' environment: gloo on the CPU (see cpu_env)

    class Chaos(unittest.TestCase):
        def runTest(self):
            args = ["--sampler", "--loader", "sampler", "--dataset", str(n), "--batch", "8", "--epochs", str(epochs),
                    "--step-time", "0.01", "--loader-workers", "1", "--seed", "3"]
            h = Harness(self, port=29710)
            ws = [h.add(worker=RICH, args=args) for _ in range(n_workers)]
            t0 = time.time()
            h.job.commit(ws)
            h.all_step(ws, 1, min_step=3, timeout=budget)
            os.kill(h.procs[ws[-1]].pid, signal.SIGKILL)
            t1 = time.time()
            ring = ws[:-1]
            h.job.commit(ring, reason="kill")
            result["kill_to_train_s"] = round(h.all_step(ring, 2, since=t1, timeout=budget) - t1, 3)
            new = h.add(worker=RICH, args=args)
            ring = ring + [new]
            t2 = time.time()
            h.job.commit(ring, reason="join")
            result["join_to_train_s"] = round(h.all_step(ring, 3, since=t2, timeout=budget) - t2, 3)
            gone = ring[1]
            h.sidecars[gone].drain("SIGTERM")
            h.wait("the drained worker to stop", lambda ls: time.time() - max(
                d["t"] for d in ls if d["worker"] == gone) > 0.5, timeout=budget)
            ring = [w for w in ring if w != gone]
            h.job.commit(ring, reason="drain")
            for w in ring + [gone]:
                self.assertEqual(h.procs[w].wait(budget), 0, h.log(w)[-3000:])
            order = check_exactly_once(self, h.lines, n, epochs)
            result["generations"] = len({g for g, _ in order})
            result["train_s"] = round(time.time() - t0, 1)

    r = unittest.TextTestRunner(stream=open(os.path.join(a.logs, "chaos.log"), "w"), verbosity=2).run(Chaos())
    out = {"ok": r.wasSuccessful(), "workers": n_workers, "dataset": n, "epochs": epochs, "backend": "gloo",
           "harness": "fake sidecars (python/tests), real torch processes", "exactly_once_checked": True}
    out.update(result)
    if not r.wasSuccessful():
        out["error"] = "".join(str(x[1])[-1500:] for x in r.failures + r.errors)
    return out


def part_recovery(a, budget):
    if not os.path.exists(os.path.join(a.bin, "ringside")):
        return {"ok": False, "skipped": "no bin/ringside(.gz): run `make device-check` (it builds them)"}
    lf = os.path.join(a.logs, "bench-recovery.log")
    cmd = [os.path.join(a.bin, "ringside"), "bench", "recovery", "--trainer", "pytorch", "--workers", str(a.workers),
           "--kills", "2", "--python", sys.executable, "--trainer-script",
           os.path.join(ROOT, "examples", "pytorch", "train.py"), "--timeout", "%ds" % max(30, int(budget) - 10),
           "--json"]
    rc, out, took = run(cmd, budget, lf, env=cpu_env())
    res = {"ok": rc == 0, "seconds": round(took, 1), "workers": a.workers}
    try:
        res["result"] = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        res["log_tail"] = tail(lf, 1500)
    return res


def netopt_env(a):
    """netopt's NCCL settings for this machine, from the real sysfs."""
    rc, out, _ = run([os.path.join(a.bin, "ringside"), "netopt", "env"], 30, os.path.join(a.logs, "netopt-env.log"))
    env = {}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("export "):
            line = line[len("export "):]
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            env[k.strip()] = v.strip().strip("'\"")
    return rc, env


def part_netopt(a, budget):
    if not os.path.exists(os.path.join(a.bin, "ringside")):
        return {"ok": False, "skipped": "no bin/ringside(.gz)"}
    rc1, out, _ = run([os.path.join(a.bin, "ringside"), "netopt", "detect", "--json"], 30,
                      os.path.join(a.logs, "netopt-detect.log"))
    rc2, env = netopt_env(a)
    res = {"ok": rc1 == 0 and rc2 == 0, "nccl_env": env}
    try:
        h = json.loads(out)
        res["detected"] = {k: (len(v) if isinstance(v, list) else v) for k, v in h.items()
                           if isinstance(v, (list, int, str, bool))}
        res["warnings"] = h.get("warnings") or h.get("Warnings")
    except ValueError:
        res["detect_log_tail"] = tail(os.path.join(a.logs, "netopt-detect.log"), 800)
    rc3, report, _ = run([os.path.join(a.bin, "ringside"), "netopt", "detect"], 30,
                         os.path.join(a.logs, "netopt-report.log"))
    res["report"] = report[-3000:]
    return res


def gpu_skip(a):
    if a.cpu_only:
        return "CPU_ONLY=1"
    try:
        import torch
    except ImportError:
        return "no torch"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is false (torch %s)" % torch.__version__
    return None


def part_nccl(a, budget):
    why = gpu_skip(a)
    if why:
        return {"ok": False, "skipped": why}
    import types

    import torch
    import torch.distributed as dist

    from ringside import _group

    env = netopt_env(a)[1] if os.path.exists(os.path.join(a.bin, "ringside")) else {}
    gens = []
    for g in range(1, 4):
        t0 = time.monotonic()
        r = types.SimpleNamespace(rank=0, world_size=1, local_world_size=1, generation=g, master_addr="127.0.0.1",
                                  master_port=29800 + g, store_token="ab" * 16, addr="127.0.0.1", nccl=env,
                                  members=[types.SimpleNamespace(id="w0", addr="127.0.0.1")], member="w0")
        group = _group.form(r, 0, "nccl", timeout=30, form_timeout=30)
        t1 = time.monotonic()
        x = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        ok = bool(x[0].item() == 1.0)
        group.formed()
        t2 = time.monotonic()
        group.abort("device check")
        t3 = time.monotonic()
        group.destroy()
        t4 = time.monotonic()
        gens.append({"generation": g, "form_s": round(t1 - t0, 3), "all_reduce_ok": ok,
                     "abort_s": round(t3 - t2, 3), "destroy_s": round(t4 - t3, 3),
                     "initialized_after_destroy": dist.is_initialized()})
    applied = {k: os.environ.get(k) for k in sorted(set(env) | set(_group.NCCL_ERROR_HANDLING))}
    return {"ok": all(x["all_reduce_ok"] and not x["initialized_after_destroy"] for x in gens), "torch": torch.__version__,
            "generations": gens, "nccl_env_applied": applied}


def part_commit(a, budget):
    why = gpu_skip(a)
    if why:
        return {"ok": False, "skipped": why}
    import torch

    from ringside.elastic import State

    n = (1 << 30) // 4  # 1 GiB of float32
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.randn(n, device="cuda"))
    state = State(model, None, rng=False)
    first = state._snapshot["model"]["w"]
    times = []
    for step in range(1, 6):
        with torch.no_grad():
            model.w.add_(1.0)
        state.step = step
        t0 = time.perf_counter()
        state.commit(check=False)  # returns once its copies landed
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    want = state.checksum()
    with torch.no_grad():
        model.w.zero_()
    t0 = time.perf_counter()
    state.restore()
    torch.cuda.synchronize()
    restore_s = time.perf_counter() - t0
    return {"ok": state.checksum() == want, "bytes": n * 4, "commit_s": [round(t, 4) for t in times],
            "commit_s_median": round(sorted(times)[len(times) // 2], 4), "restore_s": round(restore_s, 4),
            "pinned_host_buffers": bool(state._snapshot["model"]["w"].is_pinned()),
            "one_buffer_set": state._snapshot["model"]["w"] is first}


def cpu_env(**extra):
    """The environment of the CPU parts' processes: no GPU in sight, so each
    of N trainers on one machine uses gloo on the CPU (N ranks cannot share
    one GPU under NCCL)."""
    return dict(os.environ, CUDA_VISIBLE_DEVICES="", **extra)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--logs", required=True)
    p.add_argument("--cpu-only", action="store_true")
    p.add_argument("--budget", type=float, default=290)
    p.add_argument("--workers", type=int, default=int(os.environ.get("DEVICE_CHECK_WORKERS", "0")))
    a = p.parse_args()
    if not a.workers:
        a.workers = 8 if (os.cpu_count() or 1) >= 8 else 4
    t_start = time.monotonic()
    deadline = t_start + a.budget
    summary = {"check": "ringside device-check", "python": sys.version.split()[0], "cpus": os.cpu_count(),
               "cpu_only": a.cpu_only, "parts": {}}
    try:
        import torch

        summary["torch"] = torch.__version__
        summary["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception as e:
        summary["torch"] = "unavailable: %s" % e

    # The suite runs in the background while the other parts run.
    suite_log = os.path.join(a.logs, "python-tests.log")
    suite = subprocess.Popen([sys.executable, "-m", "unittest", "discover", "-s", "tests"], cwd=os.path.join(ROOT, "python"),
                             stdout=subprocess.DEVNULL, stderr=open(suite_log, "w"), env=cpu_env(CI="true"))
    suite_t0 = time.monotonic()
    parts = [("netopt", part_netopt, 40), ("nccl_generations", part_nccl, 60), ("commit_1gib", part_commit, 60),
             ("chaos_exactly_once", part_chaos, 120), ("recovery_real_sidecars", part_recovery, 90)]
    for name, fn, share in parts:
        left = deadline - time.monotonic()
        if left < 15:
            summary["parts"][name] = {"ok": False, "skipped": "out of time (%.0fs left of %.0fs)" % (left, a.budget)}
            continue
        t0 = time.monotonic()
        try:
            res = fn(a, min(share, left - 10))
        except Exception as e:
            res = {"ok": False, "error": "%s: %s" % (type(e).__name__, e), "traceback": traceback.format_exc()[-1500:]}
        res.setdefault("seconds", round(time.monotonic() - t0, 1))
        summary["parts"][name] = res
        log("%s: %s" % (name, "ok" if res.get("ok") else ("skipped: " + res["skipped"]) if "skipped" in res else "FAILED"))
    try:
        rc = suite.wait(max(5, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        suite.kill()
        rc = 124
    lines = [l for l in tail(suite_log, 6000).splitlines() if l.startswith(("Ran ", "OK", "FAILED"))]
    res = {"ok": rc == 0, "seconds": round(time.monotonic() - suite_t0, 1), "summary": lines}
    if rc != 0:
        res["log_tail"] = tail(suite_log, 2500)
    summary["parts"]["python_tests"] = res
    ran = {k: v for k, v in summary["parts"].items() if "skipped" not in v}
    summary["skipped"] = sorted(k for k, v in summary["parts"].items() if "skipped" in v)
    summary["ok"] = bool(ran) and all(v.get("ok") for v in ran.values())
    summary["seconds"] = round(time.monotonic() - t_start, 1)
    print(json.dumps(summary, sort_keys=True), flush=True)
    with open(os.path.join(a.logs, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
