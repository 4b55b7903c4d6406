"""Batching: Grain pipelines whose iterator state is checkpointed with the model.

Examples are dicts of numpy arrays; an in-memory split is a dict of stacked arrays with a
leading example axis (see :class:`ArraySource`). Training batches come from a Grain
``MapDataset`` (seeded shuffle, reshuffled every epoch, sharded per process, batched); its
iterator's ``get_state()`` is a small JSON dict saved inside every checkpoint, so a resumed
run sees exactly the batches an uninterrupted run would have seen.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping

import grain
import numpy as np

# Keys whose second axis is the sequence axis (padded with zeros / False when collating).
SEQUENCE_KEYS = ("input_ids", "features", "mask", "tags", "mlm_targets", "mlm_mask",
                 "token_type_ids")


class ArraySource:
  """Random-access source over a dict of stacked arrays; example i is ``{k: v[i]}`` plus
  its ``example_id`` (the row index unless the split carries its own ids)."""

  def __init__(self, arrays: Mapping[str, np.ndarray]):
    sizes = {k: len(v) for k, v in arrays.items()}
    if len(set(sizes.values())) != 1:
      raise ValueError(f"arrays of one split must have one length, got {sizes}")
    self.arrays = dict(arrays)
    self.arrays.setdefault("example_id", np.arange(next(iter(sizes.values()))))
    self._len = next(iter(sizes.values()))
    if self._len == 0:
      raise ValueError("empty split: no examples")

  def __len__(self) -> int:
    return self._len

  def __getitem__(self, i: int) -> dict[str, np.ndarray]:
    return {k: v[i] for k, v in self.arrays.items()}


def collate(examples: list[Mapping[str, np.ndarray]], pad_multiple: int = 1
            ) -> dict[str, np.ndarray]:
  """Stacks examples, padding sequence keys to the longest one rounded up to pad_multiple."""
  length = max(len(ex["mask"]) for ex in examples)
  length = -(-length // pad_multiple) * pad_multiple
  out = {}
  for key in examples[0]:
    if key in SEQUENCE_KEYS:
      rows = []
      for ex in examples:
        v = np.asarray(ex[key])
        pad = [(0, length - v.shape[0])] + [(0, 0)] * (v.ndim - 1)
        rows.append(np.pad(v, pad))
      out[key] = np.stack(rows)
    else:
      out[key] = np.stack([np.asarray(ex[key]) for ex in examples])
  return out


def filler_like(batch: Mapping[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
  """``rows`` filler examples shaped like ``batch``: all zeros, mask False (weight 0)."""
  return {k: np.zeros((rows,) + v.shape[1:], v.dtype) for k, v in batch.items()}


def train_iterator(source: ArraySource, global_batch_size: int, seed: int,
                   process_index: int = 0, process_count: int = 1, pad_multiple: int = 1
                   ) -> grain.DatasetIterator:
  """Infinite iterator of this process's share of each global training batch."""
  if global_batch_size % process_count:
    raise ValueError(f"batch_size {global_batch_size} is not divisible by the "
                     f"{process_count} processes")
  local = global_batch_size // process_count
  if local > len(source):
    raise ValueError(f"per-process batch {local} is larger than the {len(source)} "
                     "training examples")
  ds = grain.MapDataset.source(source).shuffle(seed=seed).repeat(None)
  ds = ds[process_index::process_count]
  ds = ds.batch(local, drop_remainder=True,
                batch_fn=lambda exs: collate(exs, pad_multiple))
  return iter(ds.to_iter_dataset())


def eval_batches(source: ArraySource, global_batch_size: int, process_index: int = 0,
                 process_count: int = 1, pad_multiple: int = 1
                 ) -> Iterator[dict[str, np.ndarray]]:
  """One pass in order; every process yields the same number of equally shaped batches, the
  last ones completed with filler rows (mask False) that no loss or metric counts."""
  local = global_batch_size // process_count
  indices = np.arange(process_index, len(source), process_count)
  num_batches = -(-len(source) // (local * process_count))
  for b in range(num_batches):
    idx = indices[b * local:(b + 1) * local]
    if len(idx):
      batch = collate([source[int(i)] for i in idx], pad_multiple)
    else:
      batch = filler_like(collate([source[0]], pad_multiple), 0)
    if len(idx) < local:
      filler = filler_like(batch if len(idx) else collate([source[0]], pad_multiple),
                           local - len(idx))
      batch = {k: np.concatenate([batch[k], filler[k]]) for k in batch}
    yield batch


def iterator_state(it: Any) -> dict[str, Any]:
  return it.get_state()


def restore_iterator_state(it: Any, state: Mapping[str, Any]) -> None:
  it.set_state(dict(state))
