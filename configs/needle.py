"""Needle long-document classification: the label is written once, anywhere in a long
document of distractor symbols (the class symbols occur in the filler too, so only the symbol
after the marker counts). With ``data.needle_min_pos=512`` the evidence always lies beyond
the first 512 tokens, where a truncating model cannot see it.

Launch (arg = encoder name, optionally ',tiny' for a seconds-long CPU run):
  python -m longtext_jax.main --config=configs/needle.py:transformer --workdir=runs/needle
  python -m longtext_jax.main --config=configs/needle.py:transformer,tiny --workdir=/tmp/nd
"""
from longtext_jax.config import base_config, encoder_config
from longtext_jax.data import synthetic

ENCODERS = {
    "transformer": dict(num_layers=2, num_heads=4, dropout_rate=0.0,
                        position="rotary", max_len=4096, pooling="max"),
    "bilstm": dict(num_layers=1, pooling="max"),
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
  c.task.num_classes = 4  # Class symbols after the marker.
  c.data.name = "needle"
  c.data.seq_len = 2048  # Longest document.
  c.data.min_len = 1024  # Shortest document.
  c.data.needle_min_pos = 512  # Evidence always after token 512.
  c.data.num_train = 20000
  c.data.num_eval = 1000
  c.data.batch_size = 16
  c.data.eval_batch_size = 32
  c.data.pad_multiple = 256  # Pad to a multiple of a windowed model's window.
  c.data.bucket_batches = 8
  c.model.vocab_size = synthetic.NEEDLE_VOCAB
  c.model.d_model = 64
  c.model.encoder = encoder_config(encoder, **ENCODERS[encoder])
  c.optim.learning_rate = 1e-3
  c.optim.warmup_steps = 200
  c.train.num_steps = 3000
  c.train.eval_every = 500
  c.train.checkpoint_every = 500
  c.train.best_metric = "accuracy"
  if tiny:  # Seconds on a CPU: for tests and smoke runs.
    c.data.seq_len = 96
    c.data.min_len = 48
    c.data.needle_min_pos = 40
    c.data.num_train = 256
    c.data.num_eval = 64
    c.data.pad_multiple = 32
    c.data.bucket_batches = 4
    c.model.d_model = 32
    c.model.encoder.num_layers = 1
    c.optim.warmup_steps = 5
    c.train.num_steps = 40
    c.train.log_every = 10
    c.train.eval_every = 20
    c.train.checkpoint_every = 20
  return c
