"""RAN with the paper's table settings (Tables 1-3): runs when the dataset is present.

AG News and CoNLL-2003 are read from prepared TFDS data (``tfds.data_source``, no
TensorFlow); the others from local files converted as docs/data.md describes (set
``--config.data.train_path`` / ``--config.data.eval_path``; empty paths are an error that
says so). Tokens are UTF-8 bytes by default (no tokenizer file needed); for the paper's
subword setting train one (``python -m longtext_jax.tokenize train ...``) and pass
``--config.data.tokenizer.kind=sentencepiece --config.data.tokenizer.path=<.model>``. Settings from the paper (Sec. 4.2) and the
authors' notes (../shared/reference/official-implementations.md Sec. 1): 2 RAN layers,
window 256 for classification and LM and 64 for NER, 12 heads, width 768, Adam, lr 3e-4
from scratch (2e-5 when fine-tuning a pretrained RAN: --config.optim.learning_rate=2e-5
--config.init_from.path=<MLM run>).

Launch (arg = dataset):
  python -m longtext_jax.main --config=configs/ran/paper.py:arxiv --workdir=runs/ran_arxiv \
      --config.data.train_path=/data/arxiv/train --config.data.eval_path=/data/arxiv/test
  python -m longtext_jax.main --config=configs/ran/paper.py:conll2003 --workdir=runs/ran_conll
"""
from longtext_jax.config import base_config

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from long_tasks import ran_encoder  # pylint: disable=g-import-not-at-top,wrong-import-position

# dataset -> (task, classes or tags, max tokens L, window W, metric, paper's Table)
DATASETS = {
    "agnews": ("classification", 4, 512, 256, "accuracy"),  # Table 1, short texts
    "20newsgroups": ("classification", 20, 4096, 256, "accuracy"),  # Table 1
    "arxiv": ("classification", 11, 4096, 256, "accuracy"),  # Table 1 (He et al. 2019)
    "book_summary": ("multilabel", 227, 4096, 256, "micro_f1"),  # Table 1 (Park et al.)
    "eurlex57k": ("multilabel", 4271, 4096, 256, "micro_f1"),  # Table 1
    "hyperpartisan": ("binary", 2, 4096, 256, "accuracy"),  # Table 1
    "wikitext103": ("lm", 0, 2048, 256, "loss"),  # Table 2 (perplexity = exp(loss))
    "conll2003": ("tagging", 9, 512, 64, "accuracy"),  # Table 3 (BIO tags; F1 by conlleval)
    "ontonotes5": ("tagging", 37, 512, 64, "accuracy"),  # Table 3
}

# dataset -> where its data comes from: ('tfds', TFDS name) or ('local', file format).
SOURCES = {
    "agnews": ("tfds", "ag_news_subset"),
    "conll2003": ("tfds", "conll2003"),
    "20newsgroups": ("local", "jsonl"),
    "arxiv": ("local", "text_dir"),  # One sub-folder per subject class.
    "book_summary": ("local", "jsonl"),
    "eurlex57k": ("local", "jsonl"),
    "hyperpartisan": ("local", "jsonl"),
    "wikitext103": ("local", "text_dir"),  # One article per file.
    "ontonotes5": ("local", "conll"),
}


def get_config(arg: str = "arxiv"):
  """arg: a dataset name from DATASETS."""
  if arg not in DATASETS:
    raise ValueError(f"config arg {arg!r}: expected one of {sorted(DATASETS)}")
  task, classes, max_len, window, metric = DATASETS[arg]
  c = base_config()
  c.task.name = task
  c.task.num_classes = max(classes, 2)  # Labels / tags.
  kind, where = SOURCES[arg]
  c.data.name = kind
  if kind == "tfds":
    c.data.tfds_name = where  # Fields preset in longtext_jax.data.tfds_source.PRESETS.
  else:
    c.data.format = where  # Files from the docs/data.md recipes; set train_path/eval_path.
  c.data.seq_len = max_len  # Documents truncated/padded to L tokens.
  c.data.batch_size = 16
  c.model.input = "tokens"
  c.model.vocab_size = 32000  # >= the tokenizer's (bytes: 261; a SentencePiece model: its size).
  c.task.vocab_size = c.model.vocab_size  # build_model checks they agree.
  c.model.d_model = 768  # Paper: hidden 768.
  c.model.embed_dropout = 0.1
  c.model.encoder = ran_encoder(
      num_heads=12,  # Paper Sec. 4.2.
      window_size=window,  # 256 (TC, LM) or 64 (NER).
      mask_type="causal" if task == "lm" else "bidirectional")
  c.optim.learning_rate = 3e-4  # Paper: non-pretrained RAN.
  c.optim.weight_decay = 0.0  # Adam.
  c.optim.warmup_steps = 1000
  c.train.num_steps = 50_000
  c.train.eval_every = 2000
  c.train.checkpoint_every = 2000
  c.train.best_metric = metric
  c.train.best_mode = "min" if metric == "loss" else "max"
  return c
