"""The 4 -> 3 -> 5 job that the batch-policy and sharded-state tests
resize: four policy_worker.py trainers, held at step 3 while one drains,
then at step 6 while two join. The holds make the resizes land at known
steps instead of racing the training."""

import os

from test_elastic import Harness

# Bounds the waits that include trainers starting (importing torch takes
# seconds, and much longer on a loaded machine); events end them sooner.
START_BOUND_S = 180

POLICY_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "policy_worker.py")
HOLDS = ["--hold", "3:1", "--hold", "6:2"]  # where the job is resized: a drain at step 3, two joins at step 6


def holding(lines, generation):
    """The workers holding in generation."""
    return {d["worker"] for d in lines if d.get("event") == "hold" and d["generation"] == generation}


def run_4_3_5(test, port, args, steps, exit_within=90):
    """Runs the job to steps; returns its Harness once every trainer exited
    0 (the drained one too)."""
    args = list(args) + HOLDS
    h = Harness(test, port=port)
    ws = [h.add(args=args, worker=POLICY_WORKER, steps=steps) for _ in range(4)]
    h.job.commit(ws)
    h.wait("4 ranks to hold at step 3", lambda ls: len(holding(ls, 1)) == 4, START_BOUND_S)
    h.sidecars["w3"].drain("SIGTERM")
    h.wait("w3 to drain", lambda _: "drain: stopped" in h.log("w3"))
    h.job.commit(ws[:3], reason="w3 drained")
    h.wait("3 ranks to hold at step 6", lambda ls: len(holding(ls, 2)) == 3)
    new = [h.add(args=args, worker=POLICY_WORKER, steps=steps) for _ in range(2)]
    h.job.commit(ws[:3] + new, reason="join")
    for w in ws + new:
        test.assertEqual(h.procs[w].wait(exit_within + START_BOUND_S), 0, h.log(w))
    return h


def steps_by(lines):
    """{(generation, step): [the committed step's line of each rank]}."""
    out = {}
    for d in lines:
        if "sum_ok" in d:
            out.setdefault((d["generation"], d["step"]), []).append(d)
    return out


def plans(lines):
    """{(generation, rank): the plan line the rank printed}."""
    return {(d["generation"], d["rank"]): d for d in lines if d.get("event") == "plan"}


def check_steps(test, lines, world_of, global_of, same_params=True):
    """Every step all ranks of a generation committed trained global_of
    that generation's samples in all (and, with same_params, left the same
    parameters on every rank); at least 8 such steps."""
    full = 0
    for (gen, step), ds in steps_by(lines).items():
        if len(ds) != world_of[gen]:
            continue  # a step some rank had not committed when its generation ended
        full += 1
        test.assertEqual(sum(d["n"] for d in ds), global_of[gen], "generation %d step %d" % (gen, step))
        if same_params:
            test.assertEqual(len({d["checksum"] for d in ds}), 1, "ranks disagree at step %d" % step)
    test.assertGreaterEqual(full, 8)
