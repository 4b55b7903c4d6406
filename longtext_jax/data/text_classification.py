"""Text classification from local files and a pair-classification demo on the shipped corpus.

Inputs are ``<s> A </s>`` or, for sentence pairs, ``<s> A </s> B </s>`` (no segment ids: the
S-LSTM paper's format), encoded by the one SentencePiece tokenizer of
``config.data.tokenizer.path`` (the pretraining one, so the fine-tuned encoder sees the same ids).

Sources (``config.data.name``):

* ``local_text``: train/eval files in TSV (with a header, or ``config.data.columns`` naming the
  columns of a headerless file such as GLUE's CoLA) or JSON lines (CLUE). Fields:
  ``text_a`` / ``text_b`` (empty: single text) / ``label``; ``label_names`` maps label strings
  to ids (empty: labels are integers). Files: ``config.data.train_file``,
  ``config.data.eval_file``. This covers GLUE (CoLA, SST-2, MRPC, QQP, MNLI, QNLI, RTE) and
  CLUE-style Chinese classification; see ``configs/slstm/finetune.py``.
* ``pydoc_pairs``: from Python's documentation topics, is B the chunk that follows A in the
  same document (label 1) or a chunk of another document (label 0)? A demo and test task
  present on every machine.
"""
from __future__ import annotations

import csv
import json
import pathlib
import sys

import numpy as np

from longtext_jax.data import corpus as corpus_lib
from longtext_jax.data import mlm
from longtext_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer


def encode_examples(tokenizer, texts_a, texts_b, labels, seq_len: int
                    ) -> dict[str, np.ndarray]:
  """``input_ids`` int32[N, L], ``mask`` bool[N, L], ``label`` int32[N]."""
  n = len(texts_a)
  input_ids = np.full((n, seq_len), tokenizer.pad_id, np.int32)
  mask = np.zeros((n, seq_len), bool)
  for r in range(n):
    ids = tokenizer.encode_pair(texts_a[r], None if texts_b is None else texts_b[r], seq_len)
    input_ids[r, :len(ids)] = ids
    mask[r, :len(ids)] = True
  return {"input_ids": input_ids, "mask": mask, "label": np.asarray(labels, np.int32)}


def read_records(path: str, columns: tuple[str, ...] = ()) -> list[dict[str, str]]:
  """Rows of a .tsv (header row, or ``columns`` for a headerless file) or .jsonl/.json file."""
  p = pathlib.Path(path)
  if not p.exists():
    raise ValueError(f"data file {path!r} does not exist")
  if p.suffix in (".jsonl", ".json"):
    with open(p, encoding="utf-8") as f:
      return [json.loads(line) for line in f if line.strip()]
  csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
  with open(p, encoding="utf-8", newline="") as f:
    reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
    rows = list(reader)
  if not columns:
    header, rows = rows[0], rows[1:]
  else:
    header = list(columns)
  return [dict(zip(header, row)) for row in rows if row]


def _labels(records, field, label_names, path):
  ids = []
  lookup = {name: i for i, name in enumerate(label_names)}
  for k, rec in enumerate(records):
    if field not in rec:
      raise ValueError(f"{path}: record {k} has no field {field!r} (fields: {sorted(rec)})")
    value = str(rec[field]).strip()
    if lookup:
      if value not in lookup:
        raise ValueError(f"{path}: record {k} has label {value!r}, not one of {label_names}")
      ids.append(lookup[value])
    else:
      ids.append(int(value))
  return ids


def _texts(records, field, path):
  if not field:
    return None
  out = []
  for k, rec in enumerate(records):
    if field not in rec:
      raise ValueError(f"{path}: record {k} has no field {field!r} (fields: {sorted(rec)})")
    value = rec[field]
    out.append(" ".join(value) if isinstance(value, list) else str(value))
  return out


def local_text(config) -> dict[str, dict[str, np.ndarray]]:
  """Train/eval splits from local TSV / JSON-lines files (see the module docstring)."""
  d = config.data
  tokenizer = SentencePieceTokenizer(mlm.spm_path(d))
  if tokenizer.vocab_size > config.model.vocab_size:
    raise ValueError(f"the tokenizer has {tokenizer.vocab_size} pieces but "
                     f"config.model.vocab_size={config.model.vocab_size}")
  columns = tuple(d.columns)
  label_names = tuple(d.label_names)
  splits = {}
  data_dir = d.data_dir
  for split, path in (("train", d.train_file), ("eval", d.eval_file)):
    if "{data_dir}" in path and not data_dir:
      raise ValueError(f"config.data.{split}_file={path!r} needs config.data.data_dir")
    path = path.format(data_dir=data_dir)
    records = read_records(path, columns)
    if d.skip_unlabeled:  # e.g. MNLI rows whose gold label is '-'
      records = [r for r in records if str(r.get(d.label, "")).strip() not in ("", "-")]
    if not records:
      raise ValueError(f"{path}: no labelled records")
    splits[split] = encode_examples(tokenizer, _texts(records, d.text_a, path),
                                    _texts(records, d.text_b, path),
                                    _labels(records, d.label, label_names, path), d.seq_len)
  return splits


def pydoc_pairs(config) -> dict[str, dict[str, np.ndarray]]:
  """Next-chunk prediction on Python's documentation topics (balanced, seeded)."""
  d = config.data
  train_docs, eval_docs = corpus_lib.split_documents(corpus_lib.pydoc_topics(),
                                                     d.eval_one_in)
  # The pretraining tokenizer: config.data.tokenizer, or the one cached for this corpus split.
  tokenizer = mlm.get_tokenizer(mlm.spm_path(d), train_docs,
                                d.tokenizer_vocab_size or config.model.vocab_size)
  chunk = d.chunk_words
  out = {}
  for split, docs, salt in (("train", train_docs, 1), ("eval", eval_docs, 2)):
    rng = np.random.default_rng([config.seed, salt])
    chunks = []  # (document, chunk text) in order
    for k, doc in enumerate(docs):
      words = doc.split()
      chunks.extend((k, " ".join(words[s:s + chunk])) for s in range(0, len(words) - chunk + 1,
                                                                      chunk))
    texts_a, texts_b, labels = [], [], []
    for i in range(len(chunks) - 1):
      if chunks[i][0] != chunks[i + 1][0]:
        continue
      if rng.random() < 0.5:
        j, label = i + 1, 1
      else:
        j = int(rng.integers(len(chunks)))
        while chunks[j][0] == chunks[i][0]:
          j = int(rng.integers(len(chunks)))
        label = 0
      texts_a.append(chunks[i][1])
      texts_b.append(chunks[j][1])
      labels.append(label)
    limit = d[f"num_{split}"]
    if limit and limit < len(labels):
      keep = np.sort(rng.choice(len(labels), limit, replace=False))
      texts_a = [texts_a[i] for i in keep]
      texts_b = [texts_b[i] for i in keep]
      labels = [labels[i] for i in keep]
    out[split] = encode_examples(tokenizer, texts_a, texts_b, labels, d.seq_len)
  return out
