"""Text classification from TFDS (no TensorFlow) or local files, byte-level by default.

arg: '<dataset>[,tiny]' with dataset in imdb | ag_news | sst2 | local. 'local' reads
``--config.data.train_path`` / ``--config.data.eval_path`` (JSONL/CSV/TSV/text folder; see
docs/data.md) and needs ``--config.task.num_classes``. Documents are kept whole and padded per
batch to a multiple of ``data.pad_multiple`` with length bucketing.

Launch:
  python -m longtext_jax.main --config=configs/text_classification.py:imdb --workdir=runs/imdb
  python -m longtext_jax.main --config=configs/text_classification.py:local --workdir=runs/hp \
      --config.data.train_path=hp/train.jsonl --config.data.eval_path=hp/dev.jsonl \
      --config.task.num_classes=2
"""
from longtext_jax.config import base_config, encoder_config
from longtext_jax.data import tokenizers

DATASETS = {  # name -> (tfds name, eval split, classes)
    "imdb": ("imdb_reviews", "test", 2),
    "ag_news": ("ag_news_subset", "test", 4),
    "sst2": ("glue/sst2", "validation", 2),
    "local": ("", "", 2),
}


def get_config(arg: str = "imdb"):
  """arg: '<dataset>[,tiny]'."""
  parts = arg.split(",")
  dataset, tiny = parts[0], "tiny" in parts[1:]
  if dataset not in DATASETS or set(parts[1:]) - {"tiny"}:
    raise ValueError(f"config arg {arg!r}: expected one of {sorted(DATASETS)} optionally "
                     "followed by ',tiny'")
  tfds_name, eval_split, classes = DATASETS[dataset]
  c = base_config()
  c.task.name = "classification"
  c.task.num_classes = classes
  c.data.name = "local" if dataset == "local" else "tfds"
  c.data.tfds_name = tfds_name
  c.data.tfds_eval_split = eval_split or "test"
  c.data.tokenizer.kind = "byte"  # No tokenizer file needed; see data.tokenizer.*.
  c.data.max_examples = 0  # 0: all examples (TFDS splits are read lazily).
  c.data.pad_multiple = 256  # Window/chunk multiple.
  c.data.batch_size = 16
  c.data.eval_batch_size = 32
  c.model.vocab_size = tokenizers.ByteTokenizer().vocab_size
  c.model.d_model = 128
  c.model.encoder = encoder_config("transformer", num_layers=2, num_heads=4,
                                   dropout_rate=0.1, position="rotary", max_len=8192,
                                   pooling="mean")
  c.optim.learning_rate = 5e-4
  c.optim.warmup_steps = 500
  c.train.num_steps = 10000
  c.train.eval_every = 1000
  c.train.checkpoint_every = 1000
  c.train.best_metric = "accuracy"
  if tiny:  # Seconds on a CPU: for tests and smoke runs.
    c.data.max_examples = 256  # Encoded up front; enables bucketing.
    c.data.bucket_batches = 4
    c.data.max_tokens = 256
    c.data.pad_multiple = 64
    c.model.d_model = 32
    c.model.encoder.num_layers = 1
    c.optim.warmup_steps = 5
    c.train.num_steps = 40
    c.train.log_every = 10
    c.train.eval_every = 20
    c.train.checkpoint_every = 20
  return c
