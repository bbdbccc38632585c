"""Hugging Face Trainer under elastic.run: a TrainerCallback that commits
the State after every optimizer step and leaves trainer.train() when the
group must re-form. transformers is imported only when the callback is
built.

    import ringside.elastic as elastic
    from ringside.hf import RingsideCallback

    state = elastic.State(model)                  # the bare model

    def train(state):                             # every generation
        args = TrainingArguments("out", per_device_train_batch_size=8, max_steps=1000)
        trainer = Trainer(model=state.model, args=args, train_dataset=ds,
                          callbacks=[RingsideCallback(state)])
        trainer.train()                           # a re-form leaves it by GenerationChanged
        return state.step

    elastic.run(train, state)

Build TrainingArguments and the Trainer inside train_fn: both cache the
world size (accelerate's PartialState), which changes with every
generation; the callback resets accelerate's shared state when it is
built. At the start of training it adopts the Trainer's optimizer and
scheduler into the State (State.adopt: restored from the last commit, or
committed with it in the first generation) and sets the Trainer's global
step to the State's; after every optimizer step it commits. The
data order is the Trainer's own sampler: with the data in an
ElasticSampler (pass it through a DataLoader of your own) a resize trains
each sample exactly once; with the Trainer's default sampler the epoch
restarts its order at every generation.
"""

from typing import Any

__all__ = ["RingsideCallback"]


def _transformers():
    try:
        import transformers
    except ImportError as e:
        raise ImportError("ringside.hf needs the transformers package (pip install transformers); the rest of "
                          "ringside works without it") from e
    return transformers


def RingsideCallback(state: Any) -> Any:  # noqa: N802 (a class to its users)
    """A transformers.TrainerCallback committing state (a ringside.elastic
    State whose model is the Trainer's model) after each optimizer step."""
    transformers = _transformers()
    _reset_accelerate()

    class _Callback(transformers.TrainerCallback):
        def on_train_begin(self, args, hf_state, control, **kw):
            state.adopt(kw.get("optimizer"), lr_scheduler=kw.get("lr_scheduler"))
            hf_state.global_step = state.step
            return control

        def on_step_end(self, args, hf_state, control, **kw):
            state.step = int(hf_state.global_step)
            state.commit()  # raises GenerationChanged or DrainRequested out of trainer.train()
            return control

    return _Callback()


def _reset_accelerate():
    """Forgets accelerate's process-wide state (its world size), so that the
    next Trainer reads the current generation's group."""
    try:
        from accelerate.state import AcceleratorState, PartialState
    except ImportError:
        return
    AcceleratorState._reset_state(True)
    PartialState._reset_state()
