"""A small live-mode trainer for the tests: an MLP under
DistributedDataParallel through ringside.elastic.run, one JSON line per
step on stdout. TEST_CORRUPT=payload|params|pickle makes this rank's sync
go wrong on purpose (pickle: this rank sends a malicious pickle, which
would create the file TEST_PWNED if it were ever unpickled).
TEST_USER_ERROR=STEP makes train_fn raise a KeyError at that step;
TEST_STORE_ERROR=1 makes it raise a ringside StoreError (taken for a broken
group) as it starts."""

import argparse
import faulthandler
import json
import logging
import os
import signal
import sys
import pickle
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from ringside import elastic  # noqa: E402
from ringside import state as state_mod  # noqa: E402


# Bounds a rank's wait when gloo misses a connection's failure (see run()).
COLLECTIVE_TIMEOUT_S = 8.0


def setup_process():
    """What every test worker does first: stacks to its log on SIGUSR1
    (a test that times out asks for them), logs to stderr, one thread."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.basicConfig(level=os.environ.get("TEST_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(1)


def emit(**kv):
    kv["t"] = time.time()
    sys.stdout.write(json.dumps(kv) + "\n")
    sys.stdout.flush()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--socket", required=True)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--step-time", type=float, default=0.02)
    p.add_argument("--connect-timeout", type=float, default=10)
    p.add_argument("--reform-after", type=float, default=2.0)
    p.add_argument("--max-retries", type=int, default=10)
    a = p.parse_args()
    setup_process()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    state = elastic.State(model, opt, epoch=0)
    w_true = torch.linspace(-1, 1, 8).unsqueeze(1)

    corrupt = os.environ.get("TEST_CORRUPT")
    if corrupt == "payload":
        state_mod._received = lambda b: b[:-1] + bytes([b[-1] ^ 0xFF])
    elif corrupt == "pickle":
        class Evil:
            def __reduce__(self):
                return (os.system, ("touch %s" % os.environ["TEST_PWNED"],))

        state_mod._serialize = lambda snap: pickle.dumps({"step": 0, "model": Evil()})
    elif corrupt == "params":  # a commit of the same step as the others' whose parameters differ
        with torch.no_grad():
            next(state.model.parameters()).add_(1e-3)
        state.commit(check=False)

    user_error = int(os.environ.get("TEST_USER_ERROR", "0"))

    def train(state):
        emit(event="ring", generation=state.generation, rank=state.rank, world=state.world_size,
             step=state.step, checksum=state.checksum())
        if os.environ.get("TEST_STORE_ERROR"):
            from ringside._store import StoreError
            raise StoreError("the store went away (on purpose)")
        ddp = state.ddp()  # DDP without its start-up collectives (rich_worker builds it plainly)
        while a.steps == 0 or state.step < a.steps:
            step = state.step + 1
            if step == user_error:
                emit(event="raising", step=step)
                config = {}
                config["datastore_path"]  # the user's own bug
            g = torch.Generator().manual_seed(step * 1000 + state.rank)
            x = torch.randn(32, 8, generator=g)
            loss = nn.functional.mse_loss(ddp(x), x @ w_true)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(a.step_time)
            state.step, state.samples = step, state.samples + 32
            emit(step=step, generation=state.generation, rank=state.rank, world=state.world_size, sum_ok=True,
                 loss=loss.item(), checksum=state.checksum())
            try:
                state.commit()
            except Exception:  # a user's catch-all must not swallow the re-form
                emit(event="swallowed")
        return state.step

    return run_reporting(train, state, socket=a.socket, connect_timeout=a.connect_timeout, reform_after=a.reform_after,
                         form_timeout=20.0, timeout=COLLECTIVE_TIMEOUT_S, max_retries=a.max_retries)


def run_reporting(train, state, **kw):
    """elastic.run(train, state, **kw) with the test workers' exit protocol:
    an "exit" line and 0; StateCorrupt on stderr and 4; any other error an
    "error" line and 3."""
    try:
        out = elastic.run(train, state, **kw)
    except elastic.StateCorrupt as e:
        print("StateCorrupt:", e, file=sys.stderr)
        return 4
    except Exception as e:
        emit(event="error", type=type(e).__name__, message=str(e))
        traceback.print_exc()
        return 3
    emit(event="exit", result=out, step=state.step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
