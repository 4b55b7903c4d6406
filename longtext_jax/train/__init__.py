"""Training: ``train_and_evaluate(config, workdir)`` and its named steps (see loop.py)."""
from longtext_jax.train.loop import (NonFiniteLossError, TrainState, build_data, build_state,
                                     final_eval, make_eval_step, make_train_step,
                                     restore_or_init, setup_workdir, train_and_evaluate,
                                     train_loop, write_config)

__all__ = ["NonFiniteLossError", "TrainState", "build_data", "build_state", "final_eval",
           "make_eval_step", "make_train_step", "restore_or_init", "setup_workdir",
           "train_and_evaluate", "train_loop", "write_config"]
