"""Training: ``train_and_evaluate(config, workdir)`` and its parts."""
from longtext_jax.train.loop import NonFiniteLossError, TrainState, train_and_evaluate

__all__ = ["NonFiniteLossError", "TrainState", "train_and_evaluate"]
