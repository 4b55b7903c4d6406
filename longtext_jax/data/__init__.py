"""Data: sources (synthetic tasks, local arrays, local text files, TFDS) -> Grain pipelines
-> batches.

``build_splits(config, task)`` returns ``{'train': source, 'eval': source}`` for the source
named ``config.data.name``; a new source joins by adding one function to ``SOURCES``. A
source function is called as ``source(config, task)`` (``task``: the
:class:`longtext_jax.tasks.Task`, asked for its ``label_layout``; sources that need only the
config are wrapped in ``_config_only``) and returns, per split, stacked arrays (a dict), an
``ArraySource``, or a ``text.ExampleSource`` of variable-length examples (padded when
batched).

What a run needs to be used without its training data (the label vocabulary a loader
inferred, the tokenizer) is written to ``<workdir>/data_info.json`` by
:func:`save_data_info` and read back by :func:`load_data_info`.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from longtext_jax import fileio
from longtext_jax.data import (local_files, long_subset, long_tasks, mlm,
                               synthetic, text_classification, tfds_source, tokenizers)
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


def _listops(n, config, seed, train: bool = False):
  """``n`` expressions of ``data.min_len`` to ``data.seq_len`` tokens; a training split's
  (``train``) shortest is ``data.listops_train_min_len`` instead when that is set: shorter
  expressions mixed into training, the dev and test expressions unchanged."""
  d = config.data
  if not 0 <= d.listops_train_min_len <= d.seq_len:
    raise ValueError(f"config.data.listops_train_min_len={d.listops_train_min_len} must be in "
                     f"[0, data.seq_len={d.seq_len}] (0: data.min_len)")
  min_len = d.listops_train_min_len if train and d.listops_train_min_len else d.min_len
  return synthetic.listops(n, seed, min_len, d.seq_len, d.listops_max_depth,
                           d.listops_max_args)


def _listops_splits(config) -> dict[str, ExampleSource]:
  d = config.data
  return {"train": ExampleSource(_listops(d.num_train, config, _split_seed(config, 1), True)),
          "eval": ExampleSource(_listops(d.num_eval, config, _split_seed(config, 2)))}


def _listops_mlm(config) -> dict[str, ArraySource]:
  """Masked-LM on ListOps expressions: self-pretraining (Amos et al. 2024, "Never train from
  scratch"). The train split masks the ``listops`` source's training expressions (the same
  seed: the same expressions, labels dropped), the eval split its dev expressions (masked
  once); the test expressions of a study are never read."""
  d = config.data
  if d.whole_word_mask:
    raise ValueError("data source 'listops_mlm': config.data.whole_word_mask=True has no "
                     "meaning here (each ListOps token is a whole operator, digit or bracket; "
                     "there are no word pieces to group); set it to False")
  kwargs = dict(mask_id=tokenizers.SPECIAL_IDS["mask"], vocab_size=synthetic.LISTOPS_VOCAB,
                special_ids=tuple(tokenizers.SPECIAL_IDS.values()), mask_prob=d.mask_prob)
  return {"train": mlm.MaskedExamples(_listops(d.num_train, config, _split_seed(config, 1),
                                               train=True),
                                      seed=config.seed, copies=d.mask_copies, **kwargs),
          "eval": mlm.MaskedExamples(_listops(d.num_eval, config, _split_seed(config, 2)),
                                     seed=config.seed + 1, copies=1, **kwargs)}


def _needle(n, config, seed):
  d = config.data
  return synthetic.needle(n, seed, d.min_len, d.seq_len, config.task.num_classes,
                          d.needle_min_pos)


def _recall(n, config, seed):
  d = config.data
  return synthetic.recall(n, seed, d.recall_kind, d.seq_len, d.recall_vocab)


def _config_only(source: Callable) -> Callable:
  """A ``source(config)`` as a ``source(config, task)`` (the task does not change it)."""
  def call(config, task):
    del task
    return source(config)
  return call


SOURCES: dict[str, Callable] = {
    "masked_summation": _config_only(_masked_summation),
    "npz": _config_only(_npz),
    "local": local_files.local_source,  # JSONL/CSV/TSV/text folders/CoNLL (data.train_path).
    "tfds": tfds_source.tfds_source,  # tfds.data_source(data.tfds_name), no TensorFlow.
    "listops": _config_only(_listops_splits),  # LRA ListOps, 10 classes.
    # MLM on the listops source's expressions (self-pretraining before classification).
    "listops_mlm": _config_only(_listops_mlm),
    "needle": _config_only(_synthetic(_needle)),  # One needle anywhere in a long document.
    "recall": _config_only(_synthetic(_recall)),  # Copy / associative recall for causal LMs.
    # MLM on Python's documentation topics (dynamic masking).
    "pydoc_mlm": _config_only(mlm.pydoc_mlm),
    # MLM on the *.txt files under config.data.text_dir.
    "text_mlm": _config_only(mlm.text_mlm),
    # MLM on a prepared TFDS text dataset (config.data.tfds_name).
    "tfds_mlm": _config_only(mlm.tfds_mlm),
    # Alias of 'local' for configs with the former S-LSTM fields (train_file, text_a, ...).
    "local_text": local_files.local_text_source,
    # Next-chunk pairs from the pydoc corpus.
    "pydoc_pairs": _config_only(text_classification.pydoc_pairs),
    # RAN's generated long-document tasks (data.task).
    "long_tasks": _config_only(long_tasks.source),
}


def loader_options(config) -> dict[str, int]:
  """Keyword arguments of ``train_iterator`` set by ``config.data``."""
  d = config.data
  return {"num_workers": d.num_workers, "bucket_batches": d.bucket_batches,
          "pad_offset": d.pad_offset}


def build_splits(config, task) -> dict[str, ArraySource]:
  """Builds the train/eval sources and validates every label before training starts."""
  name = config.data.name
  if name not in SOURCES:
    raise ValueError(f"unknown data source {name!r}; choose one of {sorted(SOURCES)}")
  built = SOURCES[name](config, task)
  check_tag_order(config, task, built)  # Before the labels are validated one by one.
  splits = {}
  for split, arrays in built.items():
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


def check_tag_order(config, task, splits: Mapping[str, Any]) -> None:
  """Checks that the data's tag ids are in the order the span metric reads them.

  ``config.task.tag_names`` names the tag ids for span F1 (``span_scheme``); the loaders give
  ids in the order of their label names (local files: ``config.data.label_names``, else the
  sorted training tags; TFDS: ``config.data.label_names``, else the ClassLabel's order).
  Called by :func:`build_splits`, which every source passes through (training, and the
  ``evaluate`` command when it rebuilds a run's eval split).

  Args:
    config: the run's config (``task.tag_names``, ``data.name``).
    task: the Task (only label layout 'tags' is checked).
    splits: the sources by split, as a source function returns them; their
      ``label_names`` are read (None, or stacked arrays: integer ids, not checked).

  Raises:
    ValueError: a split's tag names differ from ``config.task.tag_names`` (order
      included), showing both orders and the fix.
  """
  tag_names = [str(n) for n in config.task.tag_names]
  if task.label_layout != "tags" or not tag_names:
    return
  for split, source in splits.items():
    names = getattr(source, "label_names", None)
    if names is None or [str(n) for n in names] == tag_names:
      continue
    raise ValueError(
        f"data {config.data.name!r}, {split} split: the tag ids follow {list(names)}, but "
        f"config.task.tag_names (the order span F1 reads the ids in) is {tag_names}; set "
        "config.data.label_names = config.task.tag_names so that the data's ids follow the "
        "task's order (local files without data.label_names take the sorted training tags; "
        "TFDS takes the ClassLabel's order)")


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
  return ExampleSource([source.examples[i] for i in keep], stats=source.stats, where=where,
                       label_names=source.label_names, tokenizer_info=source.tokenizer_info)


DATA_INFO_FILE = "data_info.json"
DATA_INFO_VERSION = 1


def data_info(splits: Mapping[str, Any] | Sequence[str] | None,
              tokenizer_config=None) -> dict[str, Any]:
  """What a trained run needs from its data, as a JSON-able dict.

  Args:
    splits: the sources of :func:`build_splits` (their ``label_names``, ``tokenizer_info``,
      sizes and ``stats`` are read; the train split's label names win), or the label names
      themselves (a sequence of str), or None.
    tokenizer_config: ``config.data.tokenizer`` (kind, path, lowercase), or None.

  Returns:
    ``{'version', 'label_names' (list[str] or None: labels are integer ids), 'tokenizer'
    ({'kind', 'path', 'lowercase', 'vocab_size'} or None), 'splits' ({name: {'examples',
    'stats'}, plus 'origin' for a dev split cut from the training file})}``; a tokenizer
    trained for the run (:mod:`longtext_jax.train.prepare`) lies in the workdir at ``path``. ``vocab_size`` is that of the tokenizer the loader used (None when the
    source did not tokenize text).
  """
  label_names, tok_info, split_info = None, None, {}
  if splits is not None and not isinstance(splits, Mapping):
    label_names = [str(x) for x in splits]
  elif splits is not None:
    for name in sorted(splits, key=lambda k: (k != "train", k)):
      source = splits[name]
      names = getattr(source, "label_names", None)
      if label_names is None and names is not None:
        label_names = [str(x) for x in names]
      tok_info = tok_info or getattr(source, "tokenizer_info", None)
      stats = getattr(source, "stats", None)
      split_info[name] = {"examples": len(source),
                          "stats": None if stats is None else dataclasses.asdict(stats)}
      if getattr(source, "origin", None) is not None:  # A dev split cut from 'train'.
        split_info[name]["origin"] = dict(source.origin)
  tokenizer = None
  if tokenizer_config is not None or tok_info is not None:
    tokenizer = {"kind": None, "path": "", "lowercase": None, "vocab_size": None}
    if tokenizer_config is not None:
      tokenizer.update(kind=tokenizer_config.kind, path=tokenizer_config.path,
                       lowercase=tokenizer_config.lowercase)
    if tok_info is not None:
      tokenizer.update({k: v for k, v in tok_info.items() if v not in (None, "")})
  return {"version": DATA_INFO_VERSION, "label_names": label_names, "tokenizer": tokenizer,
          "splits": split_info}


def save_data_info(workdir: str, splits: Mapping[str, Any] | Sequence[str] | None,
                   tokenizer_config=None, files: Mapping[str, Any] | None = None
                   ) -> dict[str, Any]:
  """Writes :func:`data_info` to ``<workdir>/data_info.json`` atomically (a temporary file
  in the same folder, then ``os.replace``), so a reader never sees a half-written file.

  Args:
    workdir: the run's folder (created if missing).
    splits, tokenizer_config: as in :func:`data_info`.
    files: recorded as ``data_files`` when given: the data files' digests by config field
      (``train/loop.py:data_file_digests``), against which a resume is checked.

  Returns:
    The dict written.
  """
  info = data_info(splits, tokenizer_config)
  if files:
    info["data_files"] = dict(files)
  fileio.write_text_atomic(os.path.join(workdir, DATA_INFO_FILE),
                           json.dumps(info, indent=1, ensure_ascii=False) + "\n")
  return info


def load_data_info(workdir: str) -> dict[str, Any]:
  """The dict :func:`save_data_info` wrote to ``<workdir>/data_info.json``.

  Raises:
    FileNotFoundError: the workdir has no data_info.json (a run from before it was written).
    ValueError: the file is not valid JSON or has an unknown version (naming the file).
  """
  path = os.path.join(workdir, DATA_INFO_FILE)
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path}: no data info (written at the start of training)")
  try:
    with open(path, encoding="utf-8") as f:
      info = json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}: not valid JSON ({e})") from None
  if not isinstance(info, dict) or info.get("version") != DATA_INFO_VERSION:
    raise ValueError(f"{path}: unknown data info version "
                     f"{info.get('version') if isinstance(info, dict) else info!r}; this "
                     f"code reads version {DATA_INFO_VERSION}")
  return info


__all__ = ["ArraySource", "ExampleSource", "SOURCES", "build_splits", "check_tag_order",
           "data_info", "eval_batches", "load_data_info", "loader_options", "save_data_info",
           "train_iterator"]
