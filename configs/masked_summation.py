"""Masked summation (Star-Transformer paper, Sec. 5.1): sum the rows whose mask bit is 1.

Inputs X in R^{n x d}: column 0 is a 0/1 mask with exactly k ones, columns 1..d-1 are
uniform in [0, 1); the target is the (d-1)-vector sum of the masked rows; loss MSE. Always
guessing k/2 gives MSE k/12 (0.83 for k=10).

Launch (arg = encoder name, optionally ',tiny' for a seconds-long CPU run):
  python -m longtext_jax.main --config=configs/masked_summation.py:transformer \
      --workdir=runs/msum_transformer
  python -m longtext_jax.main --config=configs/masked_summation.py:bilstm,tiny \
      --workdir=/tmp/msum --config.train.num_steps=50
"""
from longtext_jax.config import base_config, encoder_config

ENCODERS = {
    "transformer": dict(num_layers=2, num_heads=4, dropout_rate=0.0, position="learned",
                        max_len=1024, pooling="mean"),
    "bilstm": dict(num_layers=1, pooling="mean"),
    "lstm": dict(num_layers=1, pooling="mean"),
}


def get_config(arg: str = "transformer"):
  """arg: '<encoder>[,tiny]' with encoder in transformer|bilstm|lstm."""
  parts = arg.split(",")
  encoder, tiny = parts[0], "tiny" in parts[1:]
  if encoder not in ENCODERS or set(parts[1:]) - {"tiny"}:
    raise ValueError(f"config arg {arg!r}: expected one of {sorted(ENCODERS)} "
                     "optionally followed by ',tiny'")
  c = base_config()
  c.task.name = "regression"
  c.task.num_outputs = 9  # d - 1
  c.data.name = "masked_summation"
  c.data.seq_len = 200  # n
  c.data.num_masked = 10  # k
  c.data.feature_dim = 10  # d
  c.data.num_train = 8192
  c.data.num_eval = 1024
  c.data.batch_size = 64
  c.model.input = "features"
  c.model.d_model = 64
  c.model.encoder = encoder_config(encoder, **ENCODERS[encoder])
  c.optim.learning_rate = 3e-3
  c.optim.warmup_steps = 100
  c.optim.weight_decay = 0.0
  c.train.num_steps = 1500
  c.train.log_every = 50
  c.train.eval_every = 500
  c.train.checkpoint_every = 500
  c.train.best_metric = "mse"
  c.train.best_mode = "min"
  if tiny:  # Seconds on a CPU: for tests and smoke runs.
    c.data.seq_len = 24
    c.data.num_masked = 3
    c.data.feature_dim = 4
    c.task.num_outputs = 3
    c.data.num_train = 256
    c.data.num_eval = 64
    c.data.batch_size = 16
    c.data.eval_batch_size = 32
    c.model.d_model = 32
    c.optim.warmup_steps = 5
    c.train.num_steps = 60
    c.train.log_every = 10
    c.train.eval_every = 30
    c.train.checkpoint_every = 30
  return c
