"""Generated long-document token tasks whose answer lies far from the start (no downloads).

Every task draws documents of ``min_len .. seq_len`` filler tokens (right-padded to
``seq_len``) and plants *marker* tokens; what must be predicted depends on where the markers
are. Ids 0-4 are the special tokens of ``longtext_jax.data.tokenizers.SPECIAL_IDS`` (0 = pad,
4 = mask), markers are ``5 .. 5 + num_classes - 1`` and fillers the ids above.

Tasks (``config.data.task``):

* ``last_window``: one marker among the document's last ``window`` tokens; ``label`` = its
  class. A model that reads only the first window is at chance.
* ``binary``: ``last_window`` with two classes (``label`` in {0, 1}).
* ``multilabel``: each marker class occurs (anywhere) with probability 1/2; ``labels``
  multi-hot float[C].
* ``tagging``: markers (``num_classes - 1`` kinds) at random positions, about one per
  ``window`` tokens; ``tags[t]`` = 1 + class of the latest marker at or before t (0 before
  the first): state that must be carried across windows.
* ``mlm``: documents made of a repeated random phrase with 15% of the tokens replaced by
  <mask> (``mlm_targets``, ``mlm_mask``): a masked token is recoverable from other repeats.
* ``lm``: the same repeated-phrase documents for causal LM (only ``input_ids``/``mask``).
"""
from __future__ import annotations

import numpy as np

NUM_SPECIAL = 5
MASK_ID = 4
TASKS = ("last_window", "binary", "multilabel", "tagging", "mlm", "lm")


def _lengths(rng, n, min_len, seq_len):
  return rng.integers(min_len, seq_len + 1, size=n)


def generate(task: str, num_examples: int, seq_len: int, min_len: int, window: int,
             vocab_size: int, num_classes: int, seed: int) -> dict[str, np.ndarray]:
  """Arrays of one split of a generated task.

  Args:
    task: one of :data:`TASKS`.
    num_examples: N.
    seq_len: padded length L (documents are ``min_len .. L`` tokens).
    min_len: shortest document.
    window: ``last_window``/``binary``: the marker lies in the last ``window`` tokens.
    vocab_size: V; fillers are ids ``5 + num_classes .. V - 1``.
    num_classes: C marker classes (``tagging``: C tag values, i.e. C - 1 markers).
    seed: the same seed gives the same arrays.

  Returns:
    ``input_ids`` int32[N, L], ``mask`` bool[N, L] and the task's labels.
  """
  if task not in TASKS:
    raise ValueError(f"unknown long task {task!r}; choose one of {TASKS}")
  if task == "binary":
    num_classes = 2
  if task == "tagging":  # num_classes counts the tag values: 'no marker yet' + markers
    num_classes -= 1
  if num_classes < 1:
    raise ValueError(f"long task {task!r} needs at least one marker class")
  first_filler = NUM_SPECIAL + num_classes
  if vocab_size <= first_filler + 1:
    raise ValueError(f"vocab_size {vocab_size} leaves no filler ids (need > {first_filler + 1})")
  if not 0 < min_len <= seq_len or not 0 < window <= min_len:
    raise ValueError(f"need 0 < window <= min_len <= seq_len, got window={window}, "
                     f"min_len={min_len}, seq_len={seq_len}")
  rng = np.random.default_rng(seed)
  n, length = num_examples, seq_len
  lens = _lengths(rng, n, min_len, length)
  pos = np.arange(length)[None]
  mask = pos < lens[:, None]
  ids = rng.integers(first_filler, vocab_size, size=(n, length))
  rows = np.arange(n)
  out: dict[str, np.ndarray] = {}
  if task in ("last_window", "binary"):
    label = rng.integers(0, num_classes, size=n)
    where = lens - 1 - rng.integers(0, window, size=n)
    ids[rows, where] = NUM_SPECIAL + label
    out["label"] = label.astype(np.int32)
  elif task == "multilabel":
    present = rng.random((n, num_classes)) < 0.5
    for c in range(num_classes):
      where = (rng.random(n) * lens).astype(np.int64)
      ids[rows[present[:, c]], where[present[:, c]]] = NUM_SPECIAL + c
    out["labels"] = present.astype(np.float32)
  elif task == "tagging":
    is_marker = rng.random((n, length)) < 1.0 / window  # about one per window
    cls = rng.integers(0, num_classes, size=(n, length))
    ids = np.where(is_marker, NUM_SPECIAL + cls, ids)
    tags = np.zeros((n, length), np.int64)
    current = np.zeros(n, np.int64)
    for t in range(length):
      current = np.where(is_marker[:, t], cls[:, t] + 1, current)
      tags[:, t] = current
    out["tags"] = np.where(mask, tags, 0).astype(np.int32)
  else:  # mlm, lm: a random phrase repeated
    phrase_len = max(2, window // 2)
    phrase = rng.integers(first_filler, vocab_size, size=(n, phrase_len))
    ids = np.take_along_axis(phrase, pos.repeat(n, 0) % phrase_len, axis=1)
    if task == "mlm":
      chosen = (rng.random((n, length)) < 0.15) & mask
      out["mlm_targets"] = np.where(chosen, ids, 0).astype(np.int32)
      out["mlm_mask"] = chosen
      ids = np.where(chosen, MASK_ID, ids)
  out["input_ids"] = np.where(mask, ids, 0).astype(np.int32)
  out["mask"] = mask
  return out


def source(config) -> dict[str, dict[str, np.ndarray]]:
  """The ``long_tasks`` data source: ``config.data`` fields ``task``, ``seq_len``,
  ``min_len``, ``window``, ``vocab_size``, ``num_train``, ``num_eval`` and
  ``config.task.num_classes``."""
  d = config.data
  make = lambda num, split_seed: generate(
      d.task, num, d.seq_len, d.min_len, d.window, d.vocab_size,
      config.task.num_classes,
      seed=np.random.SeedSequence([config.seed, split_seed]).generate_state(1)[0])
  return {"train": make(d.num_train, 1), "eval": make(d.num_eval, 2)}
