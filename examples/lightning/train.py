"""A Lightning job, elastic under ringside's live mode: one process per
member (or per slot with `ringside exec --live -- python train.py`); the
job resizes in place. Needs lightning.

    python examples/lightning/train.py --steps 200
"""

import argparse

import lightning as L
import torch

import ringside.elastic as elastic
from ringside.lightning import RingsideCallback, RingsideEnvironment


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 1)

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.fc(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    a = p.parse_args()
    torch.manual_seed(0)
    x = torch.randn(4096, 8)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    state = elastic.State(Regression())

    def train(state):
        trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=1, num_nodes=state.world_size,
                            max_steps=a.steps - state.step, plugins=[RingsideEnvironment()],
                            callbacks=[RingsideCallback(state)], enable_checkpointing=False, logger=False)
        trainer.fit(state.model, torch.utils.data.DataLoader(data, batch_size=16))
        elastic.log.info("done\n%s", state.summary())
        return state.step

    elastic.run(train, state)


if __name__ == "__main__":
    main()
