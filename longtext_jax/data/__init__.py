"""Data: sources (synthetic tasks, local arrays) -> Grain pipelines -> batches.

``build_splits(config)`` returns ``{'train': ArraySource, 'eval': ArraySource}`` for the
source named ``config.data.name``; a new source joins by adding one function to ``SOURCES``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from longtext_jax.data import long_tasks, synthetic
from longtext_jax.data.pipeline import ArraySource, eval_batches, train_iterator


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


SOURCES: dict[str, Callable] = {
    "masked_summation": _masked_summation,
    "npz": _npz,
    "long_tasks": long_tasks.source,
}


def build_splits(config, task) -> dict[str, ArraySource]:
  """Builds the train/eval sources and validates every label before training starts."""
  name = config.data.name
  if name not in SOURCES:
    raise ValueError(f"unknown data source {name!r}; choose one of {sorted(SOURCES)}")
  splits = {}
  for split, arrays in SOURCES[name](config).items():
    source = ArraySource(arrays)
    try:
      task.validate(source.arrays, source.arrays["example_id"])
    except ValueError as e:
      raise ValueError(f"{split} split: {e}") from None
    splits[split] = source
  return splits


__all__ = ["ArraySource", "SOURCES", "build_splits", "eval_batches", "train_iterator"]
