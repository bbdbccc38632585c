"""A Hugging Face Trainer job, elastic under ringside's live mode: start one
per pod next to its sidecar (or with `ringside exec --live -- python
train.py`); the job resizes in place. Needs transformers and accelerate.

    python examples/hf/train.py --steps 200
"""

import argparse

import torch
from transformers import Trainer, TrainingArguments

import ringside.elastic as elastic
from ringside.hf import RingsideCallback


class Regression(torch.nn.Module):
    """A model the Trainer can train: forward returns the loss."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 1)

    def forward(self, x, y):
        return {"loss": torch.nn.functional.mse_loss(self.fc(x), y)}


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(8, generator=g)
        return {"x": x, "y": x.sum(0, keepdim=True)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    a = p.parse_args()
    torch.manual_seed(0)
    state = elastic.State(Regression())

    def train(state):
        args = TrainingArguments("hf-out", per_device_train_batch_size=16, max_steps=a.steps, learning_rate=0.01,
                                 report_to=[], save_strategy="no", use_cpu=not torch.cuda.is_available())
        trainer = Trainer(model=state.model, args=args, train_dataset=Data(), callbacks=[RingsideCallback(state)])
        trainer.train()
        elastic.log.info("done\n%s", state.summary())
        return state.step

    elastic.run(train, state)


if __name__ == "__main__":
    main()
