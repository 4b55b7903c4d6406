"""Masked-LM pretraining data: text -> SentencePiece -> fixed-length rows -> masked batches.

Every document is tokenized and cut into rows of ``<s> up to L-2 pieces </s>``; rows never
mix documents (no packing without segment masks), a document's last row is shorter and padded.

Masking is dynamic: :class:`MaskedLMSource` exposes ``copies`` virtual epochs of the rows
(length ``copies * N``) and masks row ``j % N`` on the fly in ``__getitem__`` with the rng
``default_rng([seed, j])``. Grain shuffles the ``copies * N`` indices, so each of the copies
of a row gets its own masking (BERT's "dupe factor", RoBERTa's dynamic masking) at no memory
cost, deterministically: a resumed run sees the same masks. The evaluation split is masked
once (seeded), so its loss is comparable across steps and runs.

Sources (``config.data.name``): ``pydoc_mlm`` (Python's documentation topics, present
everywhere) and ``text_mlm`` (``*.txt`` files under ``config.data.text_dir``). The tokenizer
is ``config.data.tokenizer.path`` (a ``.model`` file); when it is empty, or names a file that does
not exist yet, one is trained on the training documents with
``config.data.tokenizer_vocab_size`` pieces and written there (or to a cache keyed by the
corpus and the settings).
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
from typing import Sequence

from absl import logging
import numpy as np

from longtext_jax import fileio
from longtext_jax.data import corpus as corpus_lib
from longtext_jax.data import pipeline as pipeline_lib
from longtext_jax.data import text as text_lib
from longtext_jax.data.masking import mask_example
from longtext_jax.data.pipeline import ArraySource
from longtext_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer, train_sentencepiece


def rows_from_documents(documents: Sequence[str], tokenizer, seq_len: int,
                        min_tokens: int = 2) -> dict[str, np.ndarray]:
  """``input_ids`` int32[N, L], ``mask`` bool[N, L]: each document cut into
  ``<s> chunk </s>`` rows (chunks of at most L-2 pieces, at least ``min_tokens``)."""
  if seq_len < 3:
    raise ValueError(f"seq_len must be >= 3 (<s>, a token, </s>), got {seq_len}")
  body = seq_len - 2
  rows = []
  for doc in documents:
    ids = tokenizer.encode(doc)
    for start in range(0, len(ids), body):
      chunk = ids[start:start + body]
      if len(chunk) >= min_tokens:
        rows.append(np.concatenate([[tokenizer.cls_id], chunk, [tokenizer.sep_id]]))
  if not rows:
    raise ValueError("the documents gave no rows (empty text?)")
  input_ids = np.full((len(rows), seq_len), tokenizer.pad_id, np.int32)
  mask = np.zeros((len(rows), seq_len), bool)
  for r, row in enumerate(rows):
    input_ids[r, :len(row)] = row
    mask[r, :len(row)] = True
  return {"input_ids": input_ids, "mask": mask}


class MaskedLMSource(ArraySource):
  """Rows of token ids, masked on the fly; ``copies`` virtual epochs with distinct masks.

  ``arrays`` holds the unmasked rows with ``mlm_targets`` = ids and ``mlm_mask`` = all real
  tokens, so label validation checks every id that could become a target.
  """

  def __init__(self, rows: dict[str, np.ndarray], tokenizer, seed: int, copies: int = 1000,
               mask_prob: float = 0.15, whole_word: bool = False):
    arrays = dict(rows)
    arrays["mlm_targets"] = rows["input_ids"]
    arrays["mlm_mask"] = rows["mask"]
    super().__init__(arrays)
    if copies < 1:
      raise ValueError(f"copies must be >= 1, got {copies}")
    self.num_rows = len(rows["input_ids"])
    self.copies = copies
    self.seed = seed
    self.whole_word = whole_word
    self.word_starts = tokenizer.word_starts(rows["input_ids"]) if whole_word else None
    self.mask_kwargs = dict(mask_id=tokenizer.mask_id, vocab_size=tokenizer.vocab_size,
                            special_ids=tokenizer.special_ids, mask_prob=mask_prob)

  def __len__(self) -> int:
    return self.num_rows * self.copies

  def __getitem__(self, j: int) -> dict[str, np.ndarray]:
    j = int(j)
    if not 0 <= j < len(self):
      raise IndexError(j)
    i = j % self.num_rows
    ids, mask = self.arrays["input_ids"][i], self.arrays["mask"][i]
    out = mask_example(ids, mask, np.random.default_rng([self.seed, j]),
                       word_starts_L=None if self.word_starts is None else self.word_starts[i],
                       **self.mask_kwargs)
    out["mask"] = mask
    out["example_id"] = self.arrays["example_id"][i]
    return out

  def static(self, copy: int = 0) -> dict[str, np.ndarray]:
    """The rows masked as copy ``copy`` (stacked arrays; used for the evaluation split)."""
    exs = [self[copy * self.num_rows + i] for i in range(self.num_rows)]
    return {k: np.stack([ex[k] for ex in exs]) for k in exs[0]}


class MaskedExamples(text_lib.ExampleSource):
  """Variable-length token examples (a generated task's inputs) masked on the fly.

  :class:`MaskedLMSource` for examples that keep their own lengths (batches padded per batch
  and length-bucketed, as the task's own classification batches are): ``copies`` virtual
  epochs of the ``N`` examples, example ``j % N`` masked with the rng
  ``default_rng([seed, j])`` on access; :meth:`lengths` are the ``N`` stored examples', so
  length bucketing reads copy ``e % copies`` in epoch ``e`` (``pipeline.train_iterator``).
  Only ``input_ids`` and ``mask`` are read: labels are dropped, so pretraining on a task's
  training split (self-pretraining) sees its inputs and nothing else.
  """

  def __init__(self, examples: Sequence[dict[str, np.ndarray]], seed: int, copies: int,
               mask_id: int, vocab_size: int, special_ids: Sequence[int],
               mask_prob: float = 0.15):
    if copies < 1:
      raise ValueError(f"copies must be >= 1, got {copies}")
    rows = [{"input_ids": np.asarray(ex["input_ids"], np.int32),
             "mask": np.asarray(ex["mask"], bool)} for ex in examples]
    super().__init__(rows)
    self.num_rows = len(rows)
    self.copies = copies
    self.seed = seed
    self._len = self.num_rows * copies
    self.mask_kwargs = dict(mask_id=mask_id, vocab_size=vocab_size,
                            special_ids=tuple(special_ids), mask_prob=mask_prob)

  def __getitem__(self, j: int) -> dict[str, np.ndarray]:
    j = int(j)
    if not 0 <= j < len(self):
      raise IndexError(j)
    i = j % self.num_rows
    row = self.examples[i]
    out = mask_example(row["input_ids"], row["mask"], np.random.default_rng([self.seed, j]),
                       **self.mask_kwargs)
    out["mask"] = row["mask"]
    out["example_id"] = np.int64(i)
    return out

  def validate(self, task, chunk: int = 256) -> None:
    """Validates every example once, with every real token as a target (any may be
    selected)."""
    for start in range(0, self.num_rows, chunk):
      rows = [{**r, "mlm_targets": r["input_ids"], "mlm_mask": r["mask"],
               "example_id": np.int64(i)}
              for i, r in enumerate(self.examples[start:start + chunk], start)]
      batch = pipeline_lib.collate(rows)
      task.validate(batch, batch["example_id"])


def _cache_dir() -> pathlib.Path:
  return pathlib.Path(os.environ.get("LONGTEXT_JAX_CACHE",
                                     pathlib.Path.home() / ".cache" / "longtext_jax"))


def spm_path(data_config) -> str:
  """The SentencePiece model path of ``config.data.tokenizer`` ('' = train one and cache it)."""
  tok = data_config.tokenizer
  if tok.kind != "sentencepiece":
    raise ValueError(f"this source needs a SentencePiece tokenizer; config.data.tokenizer.kind "
                     f"is {tok.kind!r} (set it to 'sentencepiece')")
  return tok.path


def _documents_digest(documents: Sequence[str], vocab_size: int, model_type: str) -> str:
  digest = hashlib.sha256()
  for doc in documents:
    digest.update(doc.encode("utf-8"))
  digest.update(f"{vocab_size}/{model_type}".encode())
  return digest.hexdigest()


def _trained_on_path(model_path: str) -> str:
  return model_path[:-len(".model")] + ".trained_on.json"


def get_tokenizer(path: str, documents: Sequence[str], vocab_size: int,
                  model_type: str = "unigram") -> SentencePieceTokenizer:
  """Loads ``path``; trains it on ``documents`` first when it is empty or missing.

  A tokenizer a run trained at a given ``path`` gets ``<path>.trained_on.json`` (document
  count, digest); a later run loading it for other documents is warned (a ',tiny' smoke
  test trains on its own small corpus, and the full run would otherwise reuse that
  tokenizer without a word). Tokenizers made otherwise (``longtext_jax.tokenize train``)
  have no such record and load silently."""
  if path and os.path.exists(path):
    record = _trained_on_path(path)
    if path.endswith(".model") and os.path.isfile(record):
      with open(record, encoding="utf-8") as f:
        trained_on = json.load(f)
      if trained_on.get("sha256") != _documents_digest(documents, vocab_size, model_type):
        logging.warning(
            "config.data.tokenizer.path=%s was trained by an earlier run on other documents "
            "(%s documents, vocab %s; e.g. a ',tiny' run's corpus) and is used as it is; "
            "delete it (and %s) to train one on this run's documents, or make one with "
            "python -m longtext_jax.tokenize train", path, trained_on.get("documents"),
            trained_on.get("vocab_size"), record)
    return SentencePieceTokenizer(path)
  if not path:
    digest = _documents_digest(documents, vocab_size, model_type)
    path = str(_cache_dir() / "spm" / f"{digest[:16]}.model")
    if os.path.exists(path):
      return SentencePieceTokenizer(path)
    return _train(path, documents, vocab_size, model_type)
  if not path.endswith(".model"):
    raise ValueError(f"config.data.tokenizer.path must be a .model path, got {path!r}")
  tokenizer = _train(path, documents, vocab_size, model_type)
  fileio.write_text_atomic(_trained_on_path(path), json.dumps({
      "documents": len(documents), "vocab_size": vocab_size, "model_type": model_type,
      "sha256": _documents_digest(documents, vocab_size, model_type)}) + "\n")
  return tokenizer


def _train(path: str, documents: Sequence[str], vocab_size: int,
           model_type: str) -> SentencePieceTokenizer:
  train_sentencepiece(corpus_lib.iter_lines(documents), vocab_size, path[:-len(".model")],
                      model_type=model_type)
  return SentencePieceTokenizer(path)


def mlm_splits(config, documents: Sequence[str]) -> dict[str, ArraySource]:
  """Train (dynamic masking) and eval (masked once) sources from raw documents."""
  d = config.data
  train_docs, eval_docs = corpus_lib.split_documents(documents, d.eval_one_in)
  tokenizer = get_tokenizer(spm_path(d), train_docs,
                            d.tokenizer_vocab_size or config.model.vocab_size)
  if tokenizer.vocab_size > config.model.vocab_size:
    raise ValueError(f"the tokenizer has {tokenizer.vocab_size} pieces but "
                     f"config.model.vocab_size={config.model.vocab_size}; set it (and "
                     "config.task.vocab_size) to at least the tokenizer's size")
  kwargs = dict(mask_prob=d.mask_prob, whole_word=d.whole_word_mask)
  train = MaskedLMSource(rows_from_documents(train_docs, tokenizer, d.seq_len), tokenizer,
                         seed=config.seed, copies=d.mask_copies, **kwargs)
  evaluation = MaskedLMSource(rows_from_documents(eval_docs, tokenizer, d.seq_len), tokenizer,
                              seed=config.seed + 1, copies=1, **kwargs)
  out = {"train": train, "eval": ArraySource(evaluation.static())}
  # The tokenizer actually used (a trained one is cached outside the config's empty path),
  # recorded in the run's data_info.json: a fine-tuning warm start is checked against it.
  for source in out.values():
    source.tokenizer_info = text_lib.tokenizer_info(tokenizer)
  return out


def pydoc_mlm(config) -> dict[str, ArraySource]:
  """MLM on Python's documentation topics (``pydoc_data.topics``)."""
  return mlm_splits(config, corpus_lib.pydoc_topics())


def text_mlm(config) -> dict[str, ArraySource]:
  """MLM on the ``config.data.text_pattern`` files under ``config.data.text_dir``."""
  d = config.data
  return mlm_splits(config, corpus_lib.text_folder(d.text_dir, d.text_pattern,
                                                   d.one_per_line))


def tfds_mlm(config) -> dict[str, ArraySource]:
  """MLM on a TFDS text dataset already prepared on disk (``config.data.tfds_name``, e.g.
  'wikipedia/20230601.en', 'c4/en', 'lm1b'); nothing is downloaded."""
  d = config.data
  if not d.tfds_name:
    raise ValueError("data source 'tfds_mlm' needs config.data.tfds_name")
  docs = corpus_lib.tfds_text(d.tfds_name, d.tfds_split,
                              d.tfds_data_dir or None,
                              d.tfds_text_key, d.max_documents or None)
  return mlm_splits(config, docs)
