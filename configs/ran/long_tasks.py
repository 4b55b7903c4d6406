"""RAN on the generated long-document tasks of ``longtext_jax.data.long_tasks``.

The answer lies far from the start (e.g. a label decided by a token in the document's last
window), so a model must carry information across windows. Tasks and the task heads:

  last_window  multi-class classification (4 classes, label set in the last window)
  binary       binary classification (sigmoid/BCE head)
  multilabel   multi-label classification (which marker classes occur anywhere)
  tagging      NER-style token tagging with window_size=64: tag = latest marker so far
  mlm          masked-LM pretraining on repeated-phrase documents
  lm           causal LM (mask_type='causal') on the same documents

Launch (arg = '<task>[,tiny]'; ',tiny' is a seconds-long CPU run):
  python -m longtext_jax.main --config=configs/ran/long_tasks.py:last_window \
      --workdir=runs/ran_last_window
  python -m longtext_jax.main --config=configs/ran/long_tasks.py:lm,tiny --workdir=/tmp/ran_lm
  # Compare with the Transformer on the same data:
  python -m longtext_jax.main --config=configs/ran/long_tasks.py:last_window \
      (a Transformer config reading the same data: configs/needle.py and configs/ran/demo.py's
  # docstring)
"""
from longtext_jax.config import base_config, encoder_config

TASKS = {  # task -> (config.task.name, number of classes)
    "last_window": ("classification", 4),
    "binary": ("binary", 2),
    "multilabel": ("multilabel", 6),
    "tagging": ("tagging", 4),  # tags 0 (no marker yet) + 3 marker classes
    "mlm": ("mlm", 0),
    "lm": ("lm", 0),
}


def ran_encoder(**overrides):
  """The RAN encoder fields shared by the configs in configs/ran/ (paper defaults where
  they fit a CPU: 2 layers, max pooling, rotary, GPC residual, memory review)."""
  enc = dict(
      name="ran",
      num_layers=2,  # Paper default (Sec. 4.2).
      num_heads=4,  # Paper: 12 heads of width 64 at D=768; 4 fits D=64.
      window_size=64,  # W tokens per window (paper: 256 for TC/LM, 64 for NER).
      mask_type="bidirectional",  # 'causal' for LM, 'prefix' for seq2seq.
      impl="parallel",  # Parallel GPC formulation (same values as 'scan').
      layer_mode="stacked",  # Each layer runs over all windows (official code).
      pooling="max",  # Eq. 11.
      gpc_residual="paper",  # Eq. 6.
      memory_review=True,  # Eq. 7-9.
      review_residual="add",  # O = O^w + review (Eq. 9 alone: 'none').
      dropout_rate=0.1,  # On G'_i and the layer outputs.
  )
  enc.update(overrides)
  return encoder_config(enc.pop("name"), **enc)


def get_config(arg: str = "last_window"):
  """arg: '<task>[,tiny]' with task in last_window|binary|multilabel|tagging|mlm|lm."""
  parts = arg.split(",")
  task, tiny = parts[0], "tiny" in parts[1:]
  if task not in TASKS or set(parts[1:]) - {"tiny"}:
    raise ValueError(f"config arg {arg!r}: expected one of {sorted(TASKS)} optionally "
                     "followed by ',tiny'")
  c = base_config()
  c.task.name, num_classes = TASKS[task]
  c.task.num_classes = max(num_classes, 2)  # Marker classes (classification tasks).
  c.data.name = "long_tasks"  # longtext_jax.data.long_tasks.source
  c.data.task = task  # The generator in longtext_jax.data.long_tasks.
  c.data.seq_len = 1024  # Padded document length L (16 windows of 64).
  c.data.min_len = 512  # Shortest document: lengths vary, so padding matters.
  c.data.window = 64  # last_window/binary: the label token lies in the last 64 tokens.
  c.data.vocab_size = 64  # Ids 0-4 special, then markers, then fillers.
  c.data.num_train = 8192
  c.data.num_eval = 512
  c.data.batch_size = 32
  c.model.input = "tokens"
  c.model.vocab_size = c.data.vocab_size  # Must equal data.vocab_size.
  c.model.d_model = 64
  c.model.encoder = ran_encoder(mask_type="causal" if task == "lm" else "bidirectional")
  c.task.vocab_size = c.model.vocab_size  # build_model checks they agree.
  c.optim.learning_rate = 1e-3
  c.optim.warmup_steps = 100
  c.train.num_steps = 2000
  c.train.eval_every = 500
  c.train.checkpoint_every = 500
  c.train.best_metric = {"classification": "accuracy", "binary": "accuracy",
                         "multilabel": "micro_f1", "tagging": "accuracy",
                         "mlm": "loss", "lm": "loss"}[c.task.name]
  c.train.best_mode = "min" if task in ("mlm", "lm") else "max"
  if tiny:  # Seconds on a CPU: for tests and smoke runs.
    c.data.seq_len = 64
    c.data.min_len = 40
    c.data.window = 8
    c.data.vocab_size = c.model.vocab_size = c.task.vocab_size = 24
    c.data.num_train = 512
    c.data.num_eval = 64
    c.data.batch_size = 16
    c.data.eval_batch_size = 32
    c.model.d_model = 32
    c.model.encoder.window_size = 8
    c.model.encoder.num_heads = 2
    c.model.encoder.dropout_rate = 0.0
    c.optim.learning_rate = 3e-3
    c.optim.warmup_steps = 10
    c.train.num_steps = 150
    c.train.log_every = 25
    c.train.eval_every = 75
    c.train.checkpoint_every = 75
  return c
