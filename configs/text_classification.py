"""Text classification from TFDS (no TensorFlow) or local files, byte-level by default.

arg = '<dataset>[,tiny][,encoder=<name>]' with dataset in imdb | ag_news | sst2 | local.
'local' reads ``--config.data.train_path`` / ``--config.data.eval_path`` (JSONL/CSV/TSV/text
folder; see docs/data.md) and needs ``--config.task.num_classes``. Documents are kept whole
and padded per batch to a multiple of ``data.pad_multiple`` with length bucketing.

Launch:
  python -m longtext_jax.main --config=configs/text_classification.py:imdb --workdir=runs/imdb
  python -m longtext_jax.main --config=configs/text_classification.py:local --workdir=runs/hp \
      --config.data.train_path=hp/train.jsonl --config.data.eval_path=hp/dev.jsonl \
      --config.task.num_classes=2
"""
from configs import common
from longtext_jax.config import encoder_config
from longtext_jax.data import tokenizers

DATASETS = {  # name -> (tfds name, eval split, classes)
    "imdb": ("imdb_reviews", "test", 2),
    "ag_news": ("ag_news_subset", "test", 4),
    "sst2": ("glue/sst2", "validation", 2),
    "local": ("", "", 2),
}


def get_config(arg: str = "imdb"):
  """arg: '<dataset>[,tiny][,encoder=<name>]'."""
  args = common.parse_arg(arg, [common.Positional("dataset", DATASETS, "imdb")])
  dataset = args["dataset"]
  tfds_name, eval_split, classes = DATASETS[dataset]
  c = common.experiment(
      task=dict(name="classification", num_classes=classes),
      data=dict(name="local" if dataset == "local" else "tfds", tfds_name=tfds_name,
                tfds_eval_split=eval_split or "test",
                max_examples=0,  # 0: all examples (TFDS splits are read lazily).
                pad_multiple=256,  # Window/chunk multiple.
                batch_size=16, eval_batch_size=32),
      model=dict(vocab_size=tokenizers.ByteTokenizer().vocab_size, d_model=128),
      optim=dict(learning_rate=5e-4, warmup_steps=500),
      train=common.steps(10000, 1000, best_metric="accuracy"))
  c.data.tokenizer.kind = "byte"  # No tokenizer file needed; see data.tokenizer.*.
  c.model.encoder = encoder_config("transformer", num_layers=2, num_heads=4,
                                   dropout_rate=0.1, position="rotary", max_len=8192,
                                   pooling="mean")
  if args["tiny"]:
    common.tiny(c, 40, 20, data__max_examples=256,  # Encoded up front; enables bucketing.
                data__bucket_batches=4, data__max_tokens=256, data__pad_multiple=64,
                model__d_model=32, model__encoder__num_layers=1)
  common.apply_encoder_option(c, args)
  return c
