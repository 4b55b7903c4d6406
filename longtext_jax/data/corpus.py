"""Raw text corpora for tokenizer training and MLM pretraining (no downloads).

* :func:`pydoc_topics`: the English text of Python's own documentation topics
  (``pydoc_data.topics``, ~80 documents, ~0.5 MB), present wherever CPython is installed; the
  demo and test corpus. Its exact content follows the Python version.
* :func:`text_folder`: every ``*.txt`` file under a folder (one document per file, or one per
  non-empty line with ``one_per_line=True``).
* :func:`tfds_text`: a TFDS text dataset already prepared on disk (wikipedia, c4, lm1b, ...);
  never downloads.

Every function returns a list of documents (str) in a deterministic order.
"""
from __future__ import annotations

import pathlib
from typing import Iterable, Iterator, Sequence


def pydoc_topics() -> list[str]:
  """The distinct documentation topics shipped with Python, sorted by topic name."""
  try:
    from pydoc_data.topics import topics  # pylint: disable=g-import-not-at-top
  except ImportError as e:  # Some minimal Python builds strip pydoc_data.
    raise ValueError("this Python has no pydoc_data.topics; use a text folder instead "
                     "(config.data.text_dir)") from e
  docs = [topics[name] for name in sorted(topics)]
  return list(dict.fromkeys(docs))  # some topics are aliases with identical text


def text_folder(path: str, pattern: str = "*.txt", one_per_line: bool = False) -> list[str]:
  """Documents from the text files under ``path`` matching ``pattern`` (recursive, sorted).

  Args:
    path: a folder (or a single file).
    pattern: glob of the files to read.
    one_per_line: each non-empty line is a document (e.g. one sentence or review per line).

  Returns:
    The documents; raises ValueError when nothing matches.
  """
  root = pathlib.Path(path)
  files = [root] if root.is_file() else sorted(root.rglob(pattern))
  if not files:
    raise ValueError(f"no files matching {pattern!r} under {path!r}")
  docs = []
  for f in files:
    text = f.read_text(encoding="utf-8", errors="replace")
    if one_per_line:
      docs.extend(line.strip() for line in text.splitlines() if line.strip())
    elif text.strip():
      docs.append(text)
  return docs


def tfds_text(name: str, split: str = "train", data_dir: str | None = None,
              text_key: str = "text", max_documents: int | None = None) -> list[str]:
  """Documents of a TFDS text dataset that is already prepared in ``data_dir``.

  Args:
    name: e.g. 'wikipedia/20230601.en', 'c4/en', 'lm1b'.
    split: TFDS split (slicing allowed, e.g. 'train[:1%]').
    data_dir: the TFDS data folder (default: TFDS's own default).
    text_key: the feature holding the text.
    max_documents: read at most this many.

  Returns:
    The documents; raises ValueError if the dataset is not prepared (nothing is downloaded).
    Reading goes through ``as_data_source`` (no TensorFlow), so the dataset must have been
    prepared in the ``array_record`` file format.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  builder = tfds.builder(name, data_dir=data_dir)
  if not builder.is_prepared():
    raise ValueError(f"TFDS dataset {name!r} is not prepared in {builder.data_dir}; "
                     "prepare it beforehand (this project never downloads at run time)")
  source = builder.as_data_source(split=split)
  n = len(source) if max_documents is None else min(len(source), max_documents)
  docs = []
  for i in range(n):
    text = source[i][text_key]
    docs.append(text.decode("utf-8") if isinstance(text, bytes) else str(text))
  return docs


def iter_lines(documents: Iterable[str], max_chars: int = 4000) -> Iterator[str]:
  """Non-empty lines of the documents, long lines cut to ``max_chars`` (tokenizer training)."""
  for doc in documents:
    for line in doc.splitlines():
      line = line.strip()
      while line:
        yield line[:max_chars]
        line = line[max_chars:]


def split_documents(documents: Sequence[str], eval_every: int = 10
                    ) -> tuple[list[str], list[str]]:
  """Deterministic train/eval split: every ``eval_every``-th document goes to eval."""
  if eval_every < 2:
    raise ValueError(f"eval_every must be >= 2, got {eval_every}")
  train = [d for i, d in enumerate(documents) if i % eval_every]
  evaluation = [d for i, d in enumerate(documents) if not i % eval_every]
  if not train or not evaluation:
    raise ValueError(f"{len(documents)} documents are too few to split 1 in {eval_every}")
  return train, evaluation
