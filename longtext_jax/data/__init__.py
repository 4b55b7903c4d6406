"""Data: sources (synthetic tasks, local arrays, local text files, TFDS) -> Grain pipelines
-> batches.

``build_splits(config)`` returns ``{'train': source, 'eval': source}`` for the source named
``config.data.name``; a new source joins by adding one function to ``SOURCES``. A source
function returns, per split, stacked arrays (a dict), an ``ArraySource``, or a
``text.ExampleSource`` of variable-length examples (padded when batched).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from longtext_jax.data import (local_files, long_subset, long_tasks, mlm, synthetic,
                               text_classification, tfds_source)
from longtext_jax.data.pipeline import ArraySource, eval_batches, train_iterator
from longtext_jax.data.text import ExampleSource


def _masked_summation(config) -> dict[str, dict[str, np.ndarray]]:
  d = config.data
  make = lambda n, split_seed: synthetic.masked_summation(
      n, d.seq_len, d.num_masked, d.feature_dim, seed=np.random.SeedSequence(
          [config.seed, split_seed]).generate_state(1)[0])
  return {"train": make(d.num_train, 1), "eval": make(d.num_eval, 2)}


def _npz(config) -> dict[str, dict[str, np.ndarray]]:
  """Local arrays: ``config.data.path`` is an .npz whose keys are '<split>/<field>'
  (e.g. 'train/input_ids', 'train/mask', 'train/label', 'eval/...')."""
  with np.load(config.data.path) as f:
    splits: dict[str, dict[str, np.ndarray]] = {}
    for key in f.files:
      split, _, field = key.partition("/")
      splits.setdefault(split, {})[field] = f[key]
  missing = {"train", "eval"} - set(splits)
  if missing:
    raise ValueError(f"{config.data.path}: no arrays for split(s) {sorted(missing)}")
  return splits


def _split_seed(config, split_seed: int) -> int:
  return int(np.random.SeedSequence([config.seed, split_seed]).generate_state(1)[0])


def _synthetic(generate: Callable) -> Callable:
  """A source from ``generate(num_examples, config, seed) -> list of examples``."""
  def source(config):
    d = config.data
    return {"train": ExampleSource(generate(d.num_train, config, _split_seed(config, 1))),
            "eval": ExampleSource(generate(d.num_eval, config, _split_seed(config, 2)))}
  return source


def _listops(n, config, seed):
  d = config.data
  return synthetic.listops(n, seed, d.min_len, d.seq_len, d.listops_max_depth,
                           d.listops_max_args)


def _needle(n, config, seed):
  d = config.data
  return synthetic.needle(n, seed, d.min_len, d.seq_len, config.task.num_classes,
                          d.needle_min_pos)


def _recall(n, config, seed):
  d = config.data
  return synthetic.recall(n, seed, d.recall_kind, d.seq_len, d.recall_vocab)


SOURCES: dict[str, Callable] = {
    "masked_summation": _masked_summation,
    "npz": _npz,
    "local": local_files.local_source,  # JSONL/CSV/TSV/text folders/CoNLL (data.train_path).
    "tfds": tfds_source.tfds_source,  # tfds.data_source(data.tfds_name), no TensorFlow.
    "listops": _synthetic(_listops),  # LRA ListOps, 10 classes.
    "needle": _synthetic(_needle),  # One needle anywhere in a long document.
    "recall": _synthetic(_recall),  # Copy / associative recall for causal LMs.
    "pydoc_mlm": mlm.pydoc_mlm,  # MLM on Python's documentation topics (dynamic masking).
    "text_mlm": mlm.text_mlm,  # MLM on the *.txt files under config.data.text_dir.
    "tfds_mlm": mlm.tfds_mlm,  # MLM on a prepared TFDS text dataset (config.data.tfds_name).
    "local_text": text_classification.local_text,  # GLUE/CLUE-style TSV or JSON-lines files.
    "pydoc_pairs": text_classification.pydoc_pairs,  # Next-chunk pairs from the pydoc corpus.
    "long_tasks": long_tasks.source,  # RAN's generated long-document tasks (data.task).
}


def loader_options(config) -> dict[str, int]:
  """Keyword arguments of ``train_iterator`` set by ``config.data``."""
  d = config.data
  return {"num_workers": d.num_workers, "bucket_batches": d.bucket_batches}


def build_splits(config, task) -> dict[str, ArraySource]:
  """Builds the train/eval sources and validates every label before training starts."""
  name = config.data.name
  if name not in SOURCES:
    raise ValueError(f"unknown data source {name!r}; choose one of {sorted(SOURCES)}")
  splits = {}
  for split, arrays in SOURCES[name](config).items():
    # A source function returns stacked arrays, or an ArraySource of its own (e.g. one that
    # masks on the fly).
    source = arrays if isinstance(arrays, ArraySource) else ArraySource(arrays)
    try:
      if isinstance(source, ExampleSource):
        source.validate(task)
      else:
        task.validate(source.arrays, source.arrays["example_id"])
    except ValueError as e:
      raise ValueError(f"{split} split: {e}") from None
    splits[split] = source
  threshold = config.data.long_threshold
  if threshold > 0:
    splits["eval_long"] = long_subset_of(splits["eval"], threshold)
  return splits


def long_subset_of(source: ArraySource, threshold: int) -> ArraySource:
  """The examples of ``source`` with more than ``threshold`` tokens (``num_pieces`` when the
  loader counted them before truncation, else the real tokens), e.g. the long-document
  benchmark's test documents beyond BERT's 510 word pieces."""
  if isinstance(source, ExampleSource):
    if not source.eager:
      raise ValueError("data.long_threshold needs an in-memory eval split (set "
                       "data.max_examples > 0 for TFDS)")
    counts = np.array([int(np.asarray(ex["num_pieces"])) if "num_pieces" in ex
                       else int(np.sum(ex["mask"])) for ex in source.examples])
  else:
    try:
      return ArraySource(long_subset.long_subset(source.arrays, threshold))
    except ValueError as e:
      raise ValueError(f"data.long_threshold: {e}") from None
  keep = np.flatnonzero(counts > threshold)
  if not len(keep):
    raise ValueError(f"data.long_threshold={threshold}: no eval example is longer "
                     f"(longest: {counts.max()} tokens)")
  where = [source.where[i] for i in keep] if source.where is not None else None
  return ExampleSource([source.examples[i] for i in keep], stats=source.stats, where=where)


__all__ = ["ArraySource", "ExampleSource", "SOURCES", "build_splits", "eval_batches",
           "loader_options", "train_iterator"]
