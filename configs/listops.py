"""LRA ListOps (Tay et al. 2021): the value (0-9) of a nested MAX/MIN/MED/SM expression.

Expressions up to 2,000 tokens, operators nested up to 10 deep, up to 10 arguments each;
10-way classification; chance is about 10-20% (the label distribution is skewed). Sequences
are padded per batch to a multiple of ``data.pad_multiple`` (set it to a windowed encoder's
window size).

Launch (arg = encoder name, optionally ',tiny' for a seconds-long CPU run):
  python -m longtext_jax.main --config=configs/listops.py:transformer --workdir=runs/listops
  python -m longtext_jax.main --config=configs/listops.py:transformer,tiny --workdir=/tmp/lo
"""
from longtext_jax.config import base_config, encoder_config
from longtext_jax.data import synthetic

ENCODERS = {
    "transformer": dict(num_layers=4, num_heads=4, dropout_rate=0.1,
                        position="rotary", max_len=2048, pooling="mean"),
    "bilstm": dict(num_layers=1, pooling="mean"),
}


def get_config(arg: str = "transformer"):
  """arg: '<encoder>[,tiny]'."""
  parts = arg.split(",")
  encoder, tiny = parts[0], "tiny" in parts[1:]
  if encoder not in ENCODERS or set(parts[1:]) - {"tiny"}:
    raise ValueError(f"config arg {arg!r}: expected one of {sorted(ENCODERS)} "
                     "optionally followed by ',tiny'")
  c = base_config()
  c.task.name = "classification"
  c.task.num_classes = 10  # Values 0..9.
  c.data.name = "listops"
  c.data.seq_len = 2000  # Longest expression (LRA: 2,000).
  c.data.min_len = 500  # Shortest expression (LRA's generator: 500).
  c.data.listops_max_depth = 10  # LRA: 10.
  c.data.listops_max_args = 10  # LRA: 10.
  c.data.num_train = 96000  # LRA: 96k training expressions.
  c.data.num_eval = 2000  # LRA: 2k evaluation expressions.
  c.data.batch_size = 32
  c.data.eval_batch_size = 32
  c.data.pad_multiple = 128  # Dynamic padding to a multiple of 128 tokens.
  c.data.bucket_batches = 16  # Length bucketing: less padding per batch.
  c.model.vocab_size = synthetic.LISTOPS_VOCAB  # 5 special ids + 10 digits + 4 ops + ']'.
  c.model.d_model = 128
  c.model.encoder = encoder_config(encoder, **ENCODERS[encoder])
  c.optim.learning_rate = 5e-4
  c.optim.warmup_steps = 1000
  c.train.num_steps = 5000
  c.train.eval_every = 1000
  c.train.checkpoint_every = 1000
  c.train.best_metric = "accuracy"
  if tiny:  # Seconds on a CPU: for tests and smoke runs.
    c.data.seq_len = 64
    c.data.min_len = 8
    c.data.listops_max_depth = 3
    c.data.listops_max_args = 4
    c.data.num_train = 256
    c.data.num_eval = 64
    c.data.batch_size = 16
    c.data.eval_batch_size = 32
    c.data.pad_multiple = 16
    c.data.bucket_batches = 4
    c.model.d_model = 32
    c.model.encoder.num_layers = 1
    if encoder == "transformer":
      c.model.encoder.max_len = 64
    c.optim.warmup_steps = 5
    c.train.num_steps = 40
    c.train.log_every = 10
    c.train.eval_every = 20
    c.train.checkpoint_every = 20
  return c
