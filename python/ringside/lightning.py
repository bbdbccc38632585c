"""Lightning under elastic.run: a ClusterEnvironment that gives Lightning
the ranks of the group run() formed, and a Callback that commits the State
after every optimizer step. lightning (or pytorch_lightning) is imported
only when one of them is built.

    import lightning as L
    import ringside.elastic as elastic
    from ringside.lightning import RingsideCallback, RingsideEnvironment

    state = elastic.State(module)                 # the LightningModule

    def train(state):                             # every generation
        trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=1,
                            num_nodes=state.world_size, max_steps=1000 - state.step,
                            plugins=[RingsideEnvironment()],
                            callbacks=[RingsideCallback(state)])
        trainer.fit(state.model, loader)
        return state.step

    elastic.run(train, state)

Build the Trainer inside train_fn (its strategy keeps the world size):
num_nodes is the generation's world size with one process per member, as
`ringside exec --live` starts them. The environment reports the group's
rank and world size and tells Lightning that the processes are started
externally and the group exists already, so Lightning neither spawns nor
initialises anything. The callback adopts the Trainer's optimizer into
the State when training starts (State.adopt: restored from the last
commit, or committed with it in the first generation), and commits after
each optimizer step (a re-form leaves trainer.fit by
GenerationChanged, which run() catches).
"""

from typing import Any

__all__ = ["RingsideEnvironment", "RingsideCallback"]


def _lightning():
    try:
        import lightning.pytorch as pl
    except ImportError:
        try:
            import pytorch_lightning as pl
        except ImportError as e:
            raise ImportError("ringside.lightning needs lightning (pip install lightning) or pytorch_lightning; the "
                              "rest of ringside works without it") from e
    return pl


def RingsideEnvironment() -> Any:  # noqa: N802 (a class to its users)
    """A lightning ClusterEnvironment over the group run() formed."""
    pl = _lightning()
    from . import _current

    class _Environment(pl.plugins.environments.ClusterEnvironment):
        @property
        def creates_processes_externally(self):
            return True

        @property
        def main_address(self):
            import os

            return os.environ.get("MASTER_ADDR", "127.0.0.1")

        @property
        def main_port(self):
            import os

            return int(os.environ.get("MASTER_PORT", "29500"))

        @staticmethod
        def detect():
            return True

        def world_size(self):
            return _current.rank_world()[1]

        def set_world_size(self, size):
            pass  # the generation decides it

        def global_rank(self):
            return _current.rank_world()[0]

        def set_global_rank(self, rank):
            pass

        def local_rank(self):
            return 0

        def node_rank(self):
            return _current.rank_world()[0]

    return _Environment()


def RingsideCallback(state: Any) -> Any:  # noqa: N802
    """A lightning Callback committing state after each optimizer step."""
    pl = _lightning()

    class _Callback(pl.Callback):
        base = 0  # the State's step when this Trainer's count began

        def on_train_start(self, trainer, module):
            opts = trainer.optimizers
            state.adopt(opts[0] if opts else None)
            self.base = state.step - int(trainer.global_step)

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            state.step = self.base + int(trainer.global_step)
            state.commit()

    return _Callback()
