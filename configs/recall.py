"""Copy and associative recall for causal language models: the loss counts only the answer
(``target_mask``): the copied half ('copy'), or the value of the queried key ('associative').

Launch (arg = 'copy' or 'associative', optionally ',tiny'):
  python -m longtext_jax.main --config=configs/recall.py:associative --workdir=runs/recall
  python -m longtext_jax.main --config=configs/recall.py:copy,tiny --workdir=/tmp/copy
"""
from longtext_jax.config import base_config, encoder_config
from longtext_jax.data import synthetic


def get_config(arg: str = "associative"):
  """arg: 'copy|associative[,tiny]'."""
  parts = arg.split(",")
  kind, tiny = parts[0], "tiny" in parts[1:]
  if kind not in ("copy", "associative") or set(parts[1:]) - {"tiny"}:
    raise ValueError(f"config arg {arg!r}: expected copy|associative optionally followed by "
                     "',tiny'")
  c = base_config()
  c.task.name = "lm"
  c.data.name = "recall"
  c.data.recall_kind = kind
  c.data.recall_vocab = 32  # Symbols (keys; values use another 32).
  c.data.seq_len = 256  # Whole sequence, prompt and answer.
  c.data.num_train = 20000
  c.data.num_eval = 1000
  c.data.batch_size = 32
  c.model.vocab_size = synthetic.FIRST_ID + 2 * c.data.recall_vocab
  c.task.vocab_size = c.model.vocab_size
  c.model.d_model = 64
  c.model.encoder = encoder_config("transformer", num_layers=2, num_heads=4, causal=True,
                                   dropout_rate=0.0, position="rotary", max_len=1024)
  c.optim.learning_rate = 1e-3
  c.optim.warmup_steps = 200
  c.train.num_steps = 3000
  c.train.eval_every = 500
  c.train.checkpoint_every = 500
  if tiny:  # Seconds on a CPU: for tests and smoke runs.
    c.data.recall_vocab = 8
    c.data.seq_len = 20
    c.model.vocab_size = synthetic.FIRST_ID + 2 * c.data.recall_vocab
    c.task.vocab_size = c.model.vocab_size
    c.data.num_train = 256
    c.data.num_eval = 64
    c.data.batch_size = 16
    c.model.d_model = 32
    c.optim.warmup_steps = 5
    c.train.num_steps = 40
    c.train.log_every = 10
    c.train.eval_every = 20
    c.train.checkpoint_every = 20
  return c
