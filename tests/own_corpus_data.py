"""A small generated corpus in the format of docs/own_corpus.md (no downloads), for the tests.

Each class has its own topic words (made-up syllable words); a document mixes common filler
words with words of its class (and, for multi-label documents, of a second class), so a
bag of words separates the classes and a few training steps make progress.
"""
from __future__ import annotations

import json
import os

import numpy as np

CLASSES = ("arts", "business", "health", "science", "sport")
_SYLLABLES = ("ka", "lo", "mi", "ru", "te", "va", "no", "si", "pe", "du", "ba", "fo")


def _words(rng: np.random.Generator, n: int, length: int = 3) -> list[str]:
  out: list[str] = []
  while len(out) < n:
    w = "".join(rng.choice(_SYLLABLES, length))
    if w not in out:
      out.append(w)
  return out


def documents(n_per_class: int, seed: int = 0, min_words: int = 40, max_words: int = 120,
              multilabel: bool = False) -> list[dict]:
  """Generated documents ``{'text', 'label'}`` (a list of labels when ``multilabel``), the
  classes interleaved.

  Args:
    n_per_class: documents per class.
    seed: the generator's seed.
    min_words, max_words: length range in words.
    multilabel: give each document a list of labels (its class, and every third one a
      second class whose words it also holds).

  Returns:
    The documents as JSON-able dicts.
  """
  rng = np.random.default_rng(seed)
  vocab_rng = np.random.default_rng(1234)  # The same words for every split.
  filler = _words(vocab_rng, 60, 2)
  topics = {c: _words(vocab_rng, 12, 3) for c in CLASSES}
  docs = []
  for i in range(n_per_class):
    for k, c in enumerate(CLASSES):
      n = int(rng.integers(min_words, max_words + 1))
      labels = [c]
      if multilabel and (i + k) % 3 == 0:
        labels.append(CLASSES[(k + 1 + i % 4) % len(CLASSES)])
      pool = [w for lab in labels for w in topics[lab]]
      words = [str(rng.choice(pool)) if rng.random() < 0.3 else str(rng.choice(filler))
               for _ in range(n)]
      text = " ".join(words).capitalize() + "."
      docs.append({"text": text, "label": labels if multilabel else c})
  return docs


def write_jsonl(path: str, rows: list[dict]) -> str:
  """Writes ``rows`` one JSON object per line; returns ``path``."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    for row in rows:
      f.write(json.dumps(row) + "\n")
  return path


def write_corpus(folder: str, n_train: int = 16, n_test: int = 4, **kwargs) -> dict[str, str]:
  """train.jsonl and test.jsonl under ``folder`` (``n_*`` documents per class)."""
  return {"train": write_jsonl(os.path.join(folder, "train.jsonl"),
                               documents(n_train, seed=1, **kwargs)),
          "test": write_jsonl(os.path.join(folder, "test.jsonl"),
                              documents(n_test, seed=2, **kwargs))}
