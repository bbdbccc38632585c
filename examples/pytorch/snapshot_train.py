#!/usr/bin/env python3
"""A torchrun-style DDP script, written as the public tutorials write them:
it reads RANK, LOCAL_RANK and WORLD_SIZE from the environment, saves a
snapshot with a plain torch.save at the end of every epoch and loads it at
start. Nothing in it knows of ringside; run it unmodified under
`ringside exec`, which restarts it on every generation:

    ringside exec --preload torch -- python3 -u snapshot_train.py 50 1 --snapshot /shared/snapshot.pt

(torchrun runs the same script: `torchrun --nnodes 1:3 ... snapshot_train.py 50 1`.)

Under `--preload torch` the plain torch.save is safe for a restart to
stop: exec's interpreter writes it aside and renames it over the path, and
holds a stop until the save returns (docs/python.md, "What a stop means
for a script's files").
"""

import argparse
import os
import time

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class RandomDataset(Dataset):
    """size random (input, target) pairs, the same on every rank."""

    def __init__(self, size):
        g = torch.Generator().manual_seed(0)
        self.inputs = torch.rand(size, 20, generator=g)
        self.targets = torch.rand(size, 1, generator=g)

    def __len__(self):
        return len(self.inputs)

    def __getitem__(self, i):
        return self.inputs[i], self.targets[i]


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path, batch_time):
        self.rank = int(os.environ["RANK"])
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        cuda = torch.cuda.is_available()
        self.device = torch.device("cuda", self.local_rank) if cuda else torch.device("cpu")
        self.model = model.to(self.device)
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.batch_time = batch_time
        self.epochs_run = 0
        if os.path.exists(snapshot_path):
            print(f"[RANK{self.rank}] Loading snapshot")
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model, device_ids=[self.local_rank] if cuda else None)

    def _load_snapshot(self, path):
        snapshot = torch.load(path, map_location=self.device)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"[RANK{self.rank}] Resuming training from snapshot at Epoch {self.epochs_run}")

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        time.sleep(self.batch_time)  # stands for a real model's compute
        self.optimizer.step()

    def _run_epoch(self, epoch):
        steps = len(self.train_data)
        print(f"[RANK{self.rank}] Epoch {epoch} | Batchsize: {self.train_data.batch_size} | Steps: {steps} | World: {self.world}")
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source.to(self.device), targets.to(self.device))

    def _save_snapshot(self, epoch):
        snapshot = {
            "MODEL_STATE": self.model.module.state_dict(),
            "OPTIMIZER_STATE": self.optimizer.state_dict(),
            "EPOCHS_RUN": epoch + 1,
        }
        torch.save(snapshot, self.snapshot_path)
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}")

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def main():
    p = argparse.ArgumentParser(description="A torchrun-style DDP job that snapshots every epoch.")
    p.add_argument("total_epochs", type=int, help="how many epochs to train")
    p.add_argument("save_every", type=int, help="how often to save a snapshot, in epochs")
    p.add_argument("--batch_size", type=int, default=32, help="input batch size on each rank")
    p.add_argument("--dataset_size", type=int, default=2048, help="samples in the dataset")
    p.add_argument("--snapshot", default="snapshot.pt", help="the snapshot's path, shared by every rank")
    p.add_argument("--batch_time", type=float, default=0.02,
                   help="seconds of simulated compute per batch, as a bigger model would take")
    args = p.parse_args()

    torch.set_num_threads(1)
    init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    dataset = RandomDataset(args.dataset_size)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=False, sampler=DistributedSampler(dataset))
    Trainer(model, loader, optimizer, args.save_every, args.snapshot, args.batch_time).train(args.total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    main()
