"""Batching: Grain pipelines whose iterator state is checkpointed with the model.

Examples are dicts of numpy arrays; an in-memory split is a dict of stacked arrays with a
leading example axis (see :class:`ArraySource`). Training batches come from a Grain
``MapDataset`` (seeded shuffle, reshuffled every epoch, sharded per process, batched); its
iterator's ``get_state()`` is a small JSON dict saved inside every checkpoint, so a resumed
run sees exactly the batches an uninterrupted run would have seen.
"""
from __future__ import annotations

import functools
import os
import signal
from typing import Any, Iterator, Mapping, Sequence

from absl import logging
import grain
import numpy as np

# How many batches the training iterator prepares ahead, and with how many threads. Grain's
# defaults (16 threads, 500 elements) are sized for a TPU host's many cores and small
# elements; an element here is a whole padded batch, which the step needs only one ahead
# of the device (the trainer dispatches step s+1 before it reads step s's metrics). 500
# batches of long documents would hold hundreds of MB of host memory, and 16 threads cost a
# 2-core machine more than they save (one iterator restore: 4.8 -> 0.4 CPU-s).
READ_OPTIONS = grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)

# Keys whose second axis is the sequence axis (padded with zeros / False when collating).
SEQUENCE_KEYS = ("input_ids", "features", "mask", "tags", "tag_mask", "mlm_targets",
                 "mlm_mask", "token_type_ids", "target_mask")


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


def padded_length(n: int, pad_multiple: int = 1, pad_offset: int = 0) -> int:
  """The shortest batch length >= ``n`` of the form ``k * pad_multiple - pad_offset``
  (k >= 1): with ``pad_offset`` 0 a multiple of ``pad_multiple``; ChunkBERT's split layout
  takes offset 2, so that the [CLS]/[SEP] it adds complete whole chunks (254 word pieces +
  2 = 2 chunks of 128, where 256 would need a third)."""
  m = max(int(pad_multiple), 1)
  if not 0 <= pad_offset < m:
    raise ValueError(f"pad_offset={pad_offset} must be in [0, pad_multiple={m})")
  return max(-(-(int(n) + pad_offset) // m), 1) * m - pad_offset


def collate(examples: list[Mapping[str, np.ndarray]], pad_multiple: int = 1,
            length: int | None = None, pad_offset: int = 0) -> dict[str, np.ndarray]:
  """Stacks examples, padding sequence keys to the longest one (or to ``length``, e.g. the
  longest of the global batch) rounded up to :func:`padded_length`."""
  longest = max(len(ex["mask"]) for ex in examples)
  if length is not None and length < longest:
    raise ValueError(f"collate: length={length} is shorter than an example ({longest})")
  length = longest if length is None else length
  length = padded_length(length, pad_multiple, pad_offset)
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


def shuffle_seed(seed: int) -> int:
  """The seed handed to Grain's example shuffle for ``config.seed`` = ``seed``.

  Grain shuffles epoch ``e`` with ``seed + e``, so consecutive seeds passed as they are share
  their orders an epoch apart (seed 1's epoch 0 was seed 0's epoch 1, and so on: on one
  training set, two seeds of a 12-epoch run drew 11 of the same epoch orders). A hash of the
  seed spreads the seeds over Grain's [0, 2**32), so no two small seeds' epochs meet."""
  if seed < 0:
    raise ValueError(f"config.seed must be >= 0 for the data order, got {seed}")
  return int(np.random.SeedSequence([int(seed), 0x5EED]).generate_state(1, np.uint32)[0])


def train_iterator(source: ArraySource, global_batch_size: int, seed: int,
                   process_index: int = 0, process_count: int = 1, pad_multiple: int = 1,
                   num_workers: int = 0, bucket_batches: int = 0, pad_offset: int = 0
                   ) -> "TrainBatches":
  """Infinite iterator of this process's share of each global training batch.

  Args:
    source: random-access examples (``ArraySource`` or ``text.ExampleSource``).
    global_batch_size: examples per step over all processes.
    seed: fixes the order (a new shuffle every epoch, the same on every run; Grain's shuffle
      gets :func:`shuffle_seed` of it).
    process_index, process_count: this process's share of each global batch.
    pad_multiple, pad_offset: batch lengths are rounded up to ``k * pad_multiple -
      pad_offset`` (:func:`padded_length`; the window/chunk size).
    num_workers: Grain worker processes (0: in this process); the state stays exact.
    bucket_batches: > 0 turns on length bucketing: each epoch's shuffled order is cut into
      windows of ``bucket_batches`` global batches, each window sorted by length and cut into
      batches, and the batches shuffled; every process pads to its global batch's longest
      example so shapes agree. A source longer than its stored rows (``MaskedLMSource``:
      ``copies`` maskings of each row) reads copy ``e % copies`` of every row in epoch ``e``.

  Returns:
    A :class:`TrainBatches` whose ``get_state()``/``set_state()`` resume the exact order.
  """
  if global_batch_size % process_count:
    raise ValueError(f"batch_size {global_batch_size} is not divisible by the "
                     f"{process_count} processes")
  local = global_batch_size // process_count
  if local > len(source):
    raise ValueError(f"per-process batch {local} is larger than the {len(source)} "
                     "training examples")
  variable = hasattr(source, "lengths")  # Variable-length examples (text.ExampleSource).
  if variable and process_count > 1 and not bucket_batches:
    # Every process must pad to the same length: build global batches (sorted within each
    # batch only) and pad to the global longest. These batches differ from one process's
    # example shuffle, so the saved state names its sampler (TrainBatches).
    bucket_batches = 1
  if bucket_batches:
    lengths = source_lengths(source)
    if lengths is None:
      raise ValueError("length bucketing (data.bucket_batches > 0), and variable-length "
                       "examples over several processes, need an in-memory source whose "
                       "lengths are known; this one is read lazily (set data.max_examples)")
    if global_batch_size > len(lengths):
      raise ValueError(f"batch {global_batch_size} is larger than the {len(lengths)} "
                       "training examples")
    copies, rest = divmod(len(source), len(lengths))
    if rest:
      raise ValueError(f"the training source has {len(source)} examples but {len(lengths)} "
                       "stored lengths (not a whole number of copies): length bucketing "
                       "cannot index it; set data.bucket_batches=0")

  def build(sampler: str) -> Iterator[dict[str, np.ndarray]]:
    if sampler == "bucketed":
      batches = BucketedBatches(lengths, global_batch_size, seed, bucket_batches, copies)
      ds = grain.MapDataset.source(batches).map(functools.partial(
          _collate_share, source, lengths, process_index, local, pad_multiple, pad_offset))
    else:  # 'shuffle' (the raw seed: checkpoints written before 2 Dec 2026) or 'shuffle_hashed'.
      grain_seed = seed if sampler == "shuffle" else shuffle_seed(seed)
      ds = grain.MapDataset.source(source).shuffle(seed=grain_seed).repeat(None)
      ds = ds[process_index::process_count]
      ds = ds.batch(local, drop_remainder=True,
                    batch_fn=functools.partial(_collate_list, pad_multiple=pad_multiple,
                                               pad_offset=pad_offset))
    ds = ds.to_iter_dataset(READ_OPTIONS)
    if num_workers:
      from absl import flags  # pylint: disable=import-outside-toplevel
      if not flags.FLAGS.is_parsed():  # Grain reads its absl flags (tests, notebooks).
        flags.FLAGS.mark_as_parsed()
      ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers),
                          worker_init_fn=_worker_leaves_signals_to_the_trainer)
    return iter(ds)

  sampler = "bucketed" if bucket_batches else "shuffle_hashed"
  return TrainBatches(build(sampler), num_workers, sampler, bucket_batches, process_count,
                      rebuild=build)


def _worker_leaves_signals_to_the_trainer(worker_index: int, worker_count: int) -> None:
  """A Grain worker leaves Ctrl-C and SIGTERM to the trainer while the trainer lives.

  A terminal sends Ctrl-C (SIGINT) to the whole process group, and a scheduler often sends
  SIGTERM to every process of a job: the workers died of it (a KeyboardInterrupt traceback
  each; a spawned worker re-imports the CLI's module and printed its "SIGTERM before
  training started" message; their shared memory was reported leaked) while the trainer
  finished its step and saved it (``train.loop.Preemption``), and a trainer that fetched
  its next batch just then could have found its workers gone. Now the trainer stops them
  when it exits, as after any run. A SIGTERM that finds the trainer gone (this worker was
  orphaned, e.g. by a SIGKILL) ends the worker, so nothing is left running.
  """
  del worker_index, worker_count
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  trainer = os.getppid()

  def on_sigterm(signum, frame):
    del frame
    if os.getppid() != trainer:  # Orphaned: no trainer will stop this worker.
      os._exit(128 + signum)  # pylint: disable=protected-access

  signal.signal(signal.SIGTERM, on_sigterm)


def _collate_list(examples, pad_multiple, pad_offset):
  return collate(list(examples), pad_multiple, pad_offset=pad_offset)


def _collate_share(source, lengths, process_index, local, pad_multiple, pad_offset, indices):
  mine = indices[process_index * local:(process_index + 1) * local]
  return collate([source[int(i)] for i in mine], pad_multiple,
                 length=int(lengths[indices % len(lengths)].max()), pad_offset=pad_offset)


def source_lengths(source) -> np.ndarray | None:
  """int[N] stored lengths of a source's examples, or None when not known up front (stacked
  arrays: every row has the arrays' width, so bucketing them changes nothing). N counts the
  stored rows: a ``MaskedLMSource`` is ``copies`` times longer (each row masked anew)."""
  if hasattr(source, "lengths"):
    return source.lengths()
  mask = np.asarray(source.arrays["mask"])
  return np.full(len(mask), mask.shape[1], np.int64)


class BucketedBatches(Sequence):
  """Global batches of example indices, grouped by length; item i is batch i of the endless
  stream (epoch i // batches_per_epoch), so a Grain iterator over it restores exactly.

  Each epoch: a seeded permutation, cut into windows of ``bucket_batches`` batches, each
  window sorted by length (ties keep the shuffled order) and cut into batches, then the
  epoch's batches shuffled. Examples left over by the last incomplete batch are dropped for
  that epoch only (a different remainder each epoch).

  With ``copies`` > 1 the source holds ``copies`` versions of each of the N rows (index
  ``c * N + i``: ``MaskedLMSource``'s maskings); epoch ``e`` reads version ``e % copies``, so
  a row is masked anew every epoch, as the unbucketed shuffle over all versions does.
  """
  EPOCHS = 1 << 30

  def __init__(self, lengths: np.ndarray, batch_size: int, seed: int, bucket_batches: int,
               copies: int = 1):
    self.lengths = np.asarray(lengths)
    self.batch_size = batch_size
    self.seed = seed
    self.bucket_batches = bucket_batches
    self.copies = copies
    self.per_epoch = len(self.lengths) // batch_size
    self._cache: tuple[int, np.ndarray] | None = None

  def __len__(self) -> int:
    return self.per_epoch * self.EPOCHS

  def epoch(self, e: int) -> np.ndarray:
    """int[batches_per_epoch, batch_size] example indices of epoch ``e``."""
    if self._cache is not None and self._cache[0] == e:
      return self._cache[1]
    rng = np.random.default_rng([self.seed, e])
    order = rng.permutation(len(self.lengths))[:self.per_epoch * self.batch_size]
    window = self.bucket_batches * self.batch_size
    for start in range(0, len(order), window):
      chunk = order[start:start + window]
      order[start:start + window] = chunk[np.argsort(self.lengths[chunk], kind="stable")]
    batches = order.reshape(self.per_epoch, self.batch_size)[rng.permutation(self.per_epoch)]
    self._cache = (e, batches)
    return batches

  def __getitem__(self, i: int) -> np.ndarray:
    e, j = divmod(int(i), self.per_epoch)
    return self.epoch(e)[j] + (e % self.copies) * len(self.lengths)


def _worker_counts(position: int, num_workers: int) -> list[int]:
  """Batches each of ``num_workers`` Grain workers has yielded after ``position`` batches
  (``mp_prefetch`` reads worker ``w``'s slice ``[w::num_workers]`` in turn)."""
  return [max(position - w + num_workers - 1, 0) // num_workers for w in range(num_workers)]


def _grain_position(state: Mapping[str, Any]) -> int:
  """The batches taken, read from a Grain iterator state of :func:`train_iterator` with or
  without worker processes.

  Raises:
    ValueError: the state has neither form (another Grain version, or not such a state).
  """
  try:
    if "iterators_in_use_states" not in state:
      return int(state["next_index"])
    counts = [int(s["next_index"]) for s in state["iterators_in_use_states"]]
    workers, position = len(counts), sum(counts)
    if (workers and counts == _worker_counts(position, workers)
        and list(state["iterators_in_use_indices"]) == list(range(workers))
        and int(state["next_index_in_datasets"]) == workers
        and int(state["next_index_in_cycle"]) == position % workers
        and not any(state["exhausted"]) and not state["future_states"]):
      return position
  except (KeyError, TypeError, ValueError):
    pass
  raise ValueError(f"cannot read the data iterator state {state!r}: it is not a state of "
                   "train_iterator's Grain pipelines (with or without data.num_workers); "
                   "resume with the library and Grain versions that wrote it")


def _grain_state(position: int, num_workers: int) -> dict[str, Any]:
  """The Grain state of :func:`train_iterator` after ``position`` batches, read by
  ``num_workers`` worker processes (0: in this process)."""
  if not num_workers:
    return {"next_index": position}
  return {"next_index_in_cycle": position % num_workers, "next_index_in_datasets": num_workers,
          "iterators_in_use_indices": list(range(num_workers)),
          "iterators_in_use_states": [{"next_index": c}
                                      for c in _worker_counts(position, num_workers)],
          "exhausted": [0] * num_workers, "future_states": {}}


class TrainBatches:
  """The training iterator of :func:`train_iterator`: Grain's, with a state of its own.

  ``get_state()`` is ``{'next_index': n, 'sampler': ..., 'bucket_batches': k,
  'process_count': P}``: ``n`` batches were taken (the same on every process and for any
  ``data.num_workers``: ``set_state`` rebuilds the Grain state of the workers it runs with),
  and the sampler that ordered them: ``'shuffle_hashed'`` (Grain's seeded shuffle of
  :func:`shuffle_seed`; its global batches do not depend on the process count) or
  ``'bucketed'`` with its window ``k`` (:class:`BucketedBatches`, the same for every process
  count). A state of ``'shuffle'`` (Grain's shuffle of the raw seed, written before 2 Dec
  2026) or one written before the sampler was recorded (``{'next_index': n}``, or Grain's
  state over worker processes) switches an example-shuffle run back to the raw seed
  (``rebuild``), so it resumes the order it started with.
  """

  def __init__(self, iterator: grain.DatasetIterator, num_workers: int, sampler: str,
               bucket_batches: int, process_count: int, rebuild=None):
    self._it = iterator
    self.num_workers = num_workers
    self.sampler = {"sampler": sampler, "bucket_batches": int(bucket_batches)}
    self.process_count = process_count
    self._rebuild = rebuild  # sampler name -> a fresh iterator of that sampler.

  def __iter__(self) -> "TrainBatches":
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    return next(self._it)

  def close(self) -> None:
    """Stops Grain's worker processes and prefetch threads."""
    close = getattr(self._it, "close", None)
    if close is not None:
      close()

  def get_state(self) -> dict[str, Any]:
    """The position and sampler, a small JSON dict (see the class docstring)."""
    native = self._it.get_state()
    info = {**self.sampler, "process_count": self.process_count}
    try:
      return {"next_index": _grain_position(native), **info}
    except ValueError:  # A Grain version with another state: keep it, for these workers.
      return {"grain_state": native, "num_workers": self.num_workers, **info}

  def set_state(self, state: Mapping[str, Any]) -> None:
    """Continues after the batches ``state`` records (exactly the uninterrupted order).

    Raises:
      ValueError: the state was drawn by another sampler under another process count
        (a variable-length source with ``data.bucket_batches=0``), or it cannot be read.
    """
    if (self.sampler["sampler"] == "shuffle_hashed" and self._rebuild is not None
        and state.get("sampler", "shuffle") == "shuffle"):
      # Drawn with the raw seed (before 2 Dec 2026): continue that order, not a new one.
      self.close()
      self._it = self._rebuild("shuffle")
      self.sampler = {"sampler": "shuffle", "bucket_batches": 0}
      logging.info("data: the checkpoint's batches were shuffled with the raw seed (before "
                   "2 Dec 2026); this run continues that order")
    self._check_sampler(state)
    if "grain_state" in state:
      if int(state["num_workers"]) != self.num_workers:
        raise ValueError(
            f"the data iterator state was saved in Grain's own form by "
            f"data.num_workers={state['num_workers']}; resume with that data.num_workers "
            f"(this run has {self.num_workers})")
      self._it.set_state(state["grain_state"])
      return
    self._it.set_state(_grain_state(_grain_position(state), self.num_workers))

  def _check_sampler(self, state: Mapping[str, Any]) -> None:
    if "sampler" not in state:  # Written before samplers were recorded.
      return
    saved = {"sampler": state["sampler"], "bucket_batches": int(state["bucket_batches"])}
    if saved == self.sampler:
      return

    def describe(s):
      if s["sampler"] == "bucketed":
        return f"bucketed sampler (windows of {s['bucket_batches']} batches)"
      return "example shuffle"

    processes = int(state.get("process_count", self.process_count))
    if processes == self.process_count:  # data.bucket_batches changed, and was allowed.
      logging.warning("The checkpoint's batches were drawn by the %s, this run's by the %s "
                      "(data.bucket_batches changed): the run continues at batch %s of "
                      "another order", describe(saved), describe(self.sampler),
                      state.get("next_index"))
      return
    raise ValueError(
        f"the checkpoint's data position was written by {processes} process(es) drawing "
        f"batches with the {describe(saved)}, and this run ({self.process_count} "
        f"process(es)) draws them with the {describe(self.sampler)}: resuming would "
        "continue another order, seeing some examples of the epoch twice and others not at "
        "all. A variable-length (text) source with data.bucket_batches=0 is shuffled "
        "example by example on one process but cut into global batches (as with "
        "data.bucket_batches=1) on several, so the process count changed its order. Resume "
        f"with {processes} process(es); a text run that may move between process counts "
        "needs data.bucket_batches >= 1 from its start (its order is then the same for "
        "every process count)")


def eval_batches(source: ArraySource, global_batch_size: int, process_index: int = 0,
                 process_count: int = 1, pad_multiple: int = 1, pad_offset: int = 0
                 ) -> Iterator[dict[str, np.ndarray]]:
  """One pass in order; every process yields the same number of equally shaped batches, the
  last ones completed with filler rows (mask False) that no loss or metric counts.

  Global batch b is examples ``[b * G, (b + 1) * G)`` (``G`` = ``process_count`` times the
  per-process batch), process p taking every ``process_count``-th of them from p. Every
  process pads its rows of batch b to the longest example of the whole global batch (as
  :func:`train_iterator` does), so ``sharding.to_global`` sees one shape on all processes:
  the other processes' lengths come from :func:`source_lengths`, or for a lazily read source
  from reading their examples too.
  """
  local = global_batch_size // process_count
  whole = local * process_count
  lengths = source_lengths(source) if process_count > 1 else None
  num_batches = -(-len(source) // whole)
  for b in range(num_batches):
    rows = np.arange(b * whole, min((b + 1) * whole, len(source)))
    idx = rows[process_index::process_count]
    examples = [source[int(i)] for i in idx]
    others = rows[(rows % process_count) != process_index]
    if lengths is not None:
      other_lengths = [int(n) for n in lengths[others]]
    else:  # One process (no others), or a lazy source: read the other processes' rows.
      other_lengths = [len(source[int(i)]["mask"]) for i in others]
    length = max([len(ex["mask"]) for ex in examples] + other_lengths)
    # No rows of its own (the last batch): filler shaped like the global batch's first example.
    batch = collate(examples or [source[int(rows[0])]], pad_multiple, length=length,
                    pad_offset=pad_offset)
    if not examples:
      batch = filler_like(batch, 0)
    if len(examples) < local:
      filler = filler_like(batch, local - len(examples))
      batch = {k: np.concatenate([batch[k], filler[k]]) for k in batch}
    yield batch
