"""The :class:`Task` contract: everything one task kind knows, in one object.

A task kind is a frozen dataclass holding ``config.task``. The class says, as class
attributes, what the rest of the library asks it:

* ``name``: the registry name (``config.task.name``);
* ``label_fields``: batch key -> dtype of the labels it reads (``label_keys`` lists them,
  ``batch_keys`` adds ``mask`` and the inputs it reads besides labels);
* ``label_layout``: what a data loader must produce, one of :data:`LAYOUTS`; ``pairs``:
  whether examples are sentence pairs (``token_type_ids``; the model encodes each side);
* ``needs_causal_encoder`` and ``predicts_tokens`` (the head scores the model's vocabulary):
  checked by ``model.build_model``;
* ``output_key``: the key of the head's output in the model's output dict.

and implements ``head()``, ``loss(outputs, batch) -> (loss_sum, weight_sum)``,
``metrics(outputs, batch)`` (additive sums), ``summarize(sums)`` (whose keys are
``metric_names``), ``validate(batch, example_ids)`` (host-side label checks) and
``decode(outputs, label_names=None, batch=None)`` (host-side, per example, for a user).

Padding never counts: an example without any real token (``mask.any(-1)`` false, e.g. the
filler rows of a last evaluation batch) has weight 0, and token-level tasks only count real
tokens.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping, Sequence

import flax.linen as nn
import jax
import numpy as np

from longtext_jax.tasks import losses

Array = jax.Array
Batch = Mapping[str, Any]

# What a data loader produces for a task kind (``Task.label_layout``).
LAYOUTS = {
    "label": "one class id per example: label int32[B]",
    "multi_hot": "a set of classes per example: labels float32[B, C] (0/1)",
    "targets": "real-valued targets per example: target float32[B, Y]",
    "tags": "one tag id per token: tags int32[B, L] (a word's later pieces continue its tag)",
    "mlm": "masked tokens: input_ids corrupted, mlm_targets int32[B, L], mlm_mask bool[B, L]",
    "none": "no labels: the text itself is the target",
}


@dataclasses.dataclass(frozen=True)
class Task:
  """Base class of the task kinds; a subclass sets the class attributes and methods.

  Attributes:
    config: the ``config.task`` ConfigDict (``num_classes``, ``num_outputs``,
      ``vocab_size``, ``head_hidden_dim``, ``head_dropout``, ``tag_names`` ... as the kind
      reads them).
  """
  config: Any

  name: ClassVar[str] = ""
  output_key: ClassVar[str] = "logits"
  label_fields: ClassVar[Mapping[str, str]] = {}
  extra_batch_keys: ClassVar[tuple[str, ...]] = ()
  label_layout: ClassVar[str] = "none"
  pairs: ClassVar[bool] = False
  needs_causal_encoder: ClassVar[bool] = False
  predicts_tokens: ClassVar[bool] = False
  base_metric_names: ClassVar[tuple[str, ...]] = ("loss",)

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    if cls.label_layout not in LAYOUTS:
      raise TypeError(f"{cls.__name__}.label_layout={cls.label_layout!r} is not one of "
                      f"{sorted(LAYOUTS)}")

  # ------------------------------------------------------------------ what the kind reads
  @property
  def label_keys(self) -> tuple[str, ...]:
    """The batch keys holding this task's labels (e.g. ``('label',)``)."""
    return tuple(self.label_fields)

  @property
  def batch_keys(self) -> tuple[str, ...]:
    """Every batch key the loss and metrics read: ``mask``, the labels and extra inputs."""
    return ("mask",) + self.label_keys + tuple(self.extra_batch_keys)

  @property
  def num_label_classes(self) -> int:
    """Size of the label set a loader maps names onto (0 when the kind has no classes)."""
    return int(self.config.num_classes) if self.label_layout in (
        "label", "multi_hot", "tags") else 0

  @property
  def metric_names(self) -> tuple[str, ...]:
    """The keys of :meth:`summarize`'s result (valid ``config.train.best_metric`` values)."""
    return self.base_metric_names

  # ------------------------------------------------------------------ model side
  def head(self) -> nn.Module:
    """The flax head module on top of the encoder."""
    raise NotImplementedError

  # ------------------------------------------------------------------ loss and metrics
  def loss(self, outputs: Mapping[str, Array], batch: Batch) -> tuple[Array, Array]:
    """``(loss_sum, weight_sum)`` over the batch's real units; the objective is their ratio.

    Args:
      outputs: the model's output dict (``outputs[self.output_key]`` is the head's output).
      batch: the batch (``mask`` bool[B, L] and the keys in :attr:`batch_keys`).
    """
    raise NotImplementedError

  def metrics(self, outputs: Mapping[str, Array], batch: Batch) -> dict[str, Array]:
    """Additive statistics (sums and counts) of one batch, summed across batches/devices."""
    loss_sum, weight = self.loss(outputs, batch)
    return {"loss_sum": loss_sum, "loss_weight": weight}

  def summarize(self, sums: Mapping[str, Any]) -> dict[str, float]:
    """Final numbers from summed :meth:`metrics`; the keys are :attr:`metric_names`."""
    return {"loss": losses.ratio(sums["loss_sum"], sums["loss_weight"])}

  def validate(self, batch: Mapping[str, np.ndarray], example_ids: Any = None) -> None:
    """Host-side label checks; raises a ValueError naming the offending example.

    Args:
      batch: numpy arrays of stacked examples (``mask`` bool[B, L] and the labels).
      example_ids: per-row names used in the message (default: the row number).
    """
    del batch, example_ids

  # ------------------------------------------------------------------ for a user
  def decode(self, outputs: Mapping[str, Any], label_names: Sequence[str] | None = None,
             batch: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """What the model predicts, per example, in plain numpy/Python values (host side).

    Args:
      outputs: the model's output dict for B examples.
      label_names: class / tag / token names in id order; ids are returned without them.
      batch: the inputs, for kinds whose prediction depends on them (``mask`` trims
        token-level outputs to the real tokens; ``lm`` needs ``input_ids``).

    Returns:
      B dicts (their keys are documented on each kind).
    """
    raise NotImplementedError(f"task {self.name!r} has no decode()")


def name_of(i: int, label_names: Sequence[str] | None) -> Any:
  """``label_names[i]`` when names are given, else the id ``i`` as an int."""
  return label_names[int(i)] if label_names is not None else int(i)


def real_lengths(batch: Mapping[str, Any] | None, batch_size: int, length: int) -> np.ndarray:
  """int[B]: real tokens per row from ``batch['mask']`` (every position when no batch)."""
  if batch is None or "mask" not in batch:
    return np.full(batch_size, length, np.int64)
  return np.asarray(batch["mask"]).sum(-1).astype(np.int64)


def example_name(example_ids: Any, row: int) -> str:
  """How error messages name row ``row``: its example id, or the batch row."""
  if example_ids is None:
    return f"example at batch row {row}"
  ex_id = example_ids[row]
  ex_id = ex_id.item() if hasattr(ex_id, "item") else ex_id
  return f"example {ex_id!r}"


def check_int_labels(labels: Any, valid: Any, num_classes: int, key: str,
                     example_ids: Any) -> None:
  """Raises a ValueError naming the first valid position whose id is outside [0, C).

  Args:
    labels: int[B] or int[B, L] ids.
    valid: bool, same shape: positions to check (real examples / tokens).
    num_classes: C.
    key: the label's name in the message.
    example_ids: see :func:`example_name`.
  """
  labels = np.asarray(labels)
  bad = valid & ((labels < 0) | (labels >= num_classes))
  if np.any(bad):
    first = tuple(np.argwhere(bad)[0])
    raise ValueError(
        f"{example_name(example_ids, int(first[0]))}: {key}={labels[first]} "
        f"is outside the label set [0, {num_classes})")
