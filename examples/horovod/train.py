"""A Horovod elastic job whose hosts come from ringside: horovodrun asks
`ringside discover-hosts` (through discover-hosts.sh) for the members of
the job's current generation, and Horovod's elastic driver adds and
removes workers as the generations change. Needs horovod with PyTorch.

    horovodrun -np 4 --min-np 2 --max-np 8 \\
        --host-discovery-script examples/horovod/discover-hosts.sh \\
        python examples/horovod/train.py --steps 500
"""

import argparse

import horovod.torch as hvd
import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=500)
    a = p.parse_args()
    hvd.init()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    # Horovod's own linear LR rule: a step's global batch is size() * 16.
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size()),
                                   named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model=model, optimizer=opt, step=0)

    def on_reset():
        for g in opt.param_groups:
            g["lr"] = 0.01 * hvd.size()

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        while state.step < a.steps:
            g = torch.Generator().manual_seed(state.step * 1000 + hvd.rank())
            x = torch.randn(16, 8, generator=g)
            loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
            opt.zero_grad()
            loss.backward()
            opt.step()
            state.step += 1
            state.commit()  # Horovod's commit: the step survives a lost host
            if hvd.rank() == 0 and state.step % 50 == 0:
                print("step %d size %d loss %.4f" % (state.step, hvd.size(), loss.item()), flush=True)

    train(state)


if __name__ == "__main__":
    main()
