"""Document-level classification kinds: one class, a binary decision, a set of classes, and
sentence pairs (NLI)."""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from longtext_jax.tasks import base, losses
from longtext_jax.tasks.heads import PooledHead


def _pooled_head(config, num_outputs: int) -> PooledHead:
  return PooledHead(num_outputs, config.head_hidden_dim,
                    config.head_dropout)


@dataclasses.dataclass(frozen=True)
class Classification(base.Task):
  """Single-label classification: softmax cross-entropy; accuracy, macro-F1 and Matthews
  correlation.

  Labels: ``label`` int32[B]. Head: pooled -> (MLP) -> ``logits`` float[B, C].
  ``decode``: ``{"label": name or id, "probabilities": float[C]}`` per example.
  """
  name = "classification"
  label_fields = {"label": "int32"}
  label_layout = "label"
  base_metric_names = ("loss", "accuracy", "macro_f1", "mcc")

  def head(self):
    return _pooled_head(self.config, self.config.num_classes)

  def loss(self, outputs, batch):
    w_B = losses.example_weight(batch)
    ce_B = losses.softmax_cross_entropy_with_integer_labels(
        outputs["logits"].astype(jnp.float32), batch["label"])
    return jnp.sum(ce_B * w_B), jnp.sum(w_B)

  def metrics(self, outputs, batch):
    sums = super().metrics(outputs, batch)
    w_B = losses.example_weight(batch)
    correct_B = (jnp.argmax(outputs["logits"], -1) == batch["label"]).astype(jnp.float32)
    sums.update(correct=jnp.sum(correct_B * w_B), count=jnp.sum(w_B))
    # Confusion counts [gold, predicted] (additive) for the Matthews correlation.
    num_classes = outputs["logits"].shape[-1]
    gold_BC = jax.nn.one_hot(batch["label"], num_classes) * w_B[:, None]
    pred_BC = jax.nn.one_hot(jnp.argmax(outputs["logits"], -1), num_classes)
    sums["confusion"] = gold_BC.T @ pred_BC
    return sums

  def summarize(self, sums):
    out = super().summarize(sums)
    out["accuracy"] = losses.ratio(sums["correct"], sums["count"])
    if "confusion" in sums:
      out["macro_f1"] = losses.macro_f1_from_confusion(sums["confusion"])
      out["mcc"] = losses.matthews_corrcoef(sums["confusion"])
    return out

  def validate(self, batch, example_ids=None):
    valid = np.asarray(batch["mask"]).any(-1)
    base.check_int_labels(batch["label"], valid, self.config.num_classes, "label",
                          example_ids)

  def decode(self, outputs, label_names=None, batch=None):
    probs_BC = losses.softmax_np(outputs["logits"])
    return [{"label": base.name_of(np.argmax(p_C), label_names), "probabilities": p_C}
            for p_C in probs_BC]


def threshold_logit(task_config) -> float:
  """``task.threshold`` (the probability above which a class is predicted) as a logit, the
  one rule of the metrics, ``decode`` and inference's per-class scores."""
  p = float(task_config.threshold)
  if not 0.0 < p < 1.0:
    raise ValueError(f"config.task.threshold={p} must be in (0, 1)")
  return math.log(p / (1.0 - p))


@dataclasses.dataclass(frozen=True)
class Binary(base.Task):
  """Binary classification with one logit: sigmoid BCE; accuracy, F1 of class 1 and macro-F1
  (mean of both classes' F1), class 1 predicted above ``config.threshold`` (default 0.5).

  Labels: ``label`` int32[B] in {0, 1}. Head: pooled -> ``logits`` float[B, 1].
  ``decode``: ``{"label": name or id, "probabilities": float[2]}`` ([P(0), P(1)]).
  """
  name = "binary"
  label_fields = {"label": "int32"}
  label_layout = "label"
  base_metric_names = ("loss", "accuracy", "f1", "macro_f1")

  @property
  def num_label_classes(self) -> int:
    return 2

  def head(self):
    return _pooled_head(self.config, 1)

  def loss(self, outputs, batch):
    w_B = losses.example_weight(batch)
    bce_B = losses.sigmoid_binary_cross_entropy(
        outputs["logits"][:, 0].astype(jnp.float32), batch["label"].astype(jnp.float32))
    return jnp.sum(bce_B * w_B), jnp.sum(w_B)

  def metrics(self, outputs, batch):
    sums = super().metrics(outputs, batch)
    w_B = losses.example_weight(batch)
    pred_B = (outputs["logits"][:, 0] > threshold_logit(self.config)).astype(jnp.float32)
    gold_B = batch["label"].astype(jnp.float32)
    sums.update(correct=jnp.sum((pred_B == gold_B) * w_B), count=jnp.sum(w_B))
    sums.update(losses.f1_counts(pred_B[:, None], gold_B[:, None], w_B))
    return sums

  def summarize(self, sums):
    out = super().summarize(sums)
    out["accuracy"] = losses.ratio(sums["correct"], sums["count"])
    out["f1"] = losses.f1_summary(sums)["micro_f1"]
    # Class 0's counts: its true positives are the true negatives of class 1.
    tp, fp, fn = (float(np.sum(sums[k])) for k in ("tp", "fp", "fn"))
    tn = float(sums["count"]) - tp - fp - fn
    negative = losses.f1_summary({"tp": [tn], "fp": [fn], "fn": [fp]})["micro_f1"]
    out["macro_f1"] = 0.5 * (out["f1"] + negative)
    return out

  def validate(self, batch, example_ids=None):
    valid = np.asarray(batch["mask"]).any(-1)
    base.check_int_labels(batch["label"], valid, 2, "label", example_ids)

  def decode(self, outputs, label_names=None, batch=None):
    logits_B = np.asarray(outputs["logits"])[:, 0]
    p1_B = losses.sigmoid_np(logits_B)
    cut = threshold_logit(self.config)
    return [{"label": base.name_of(int(z > cut), label_names),
             "probabilities": np.array([1.0 - p1, p1])} for z, p1 in zip(logits_B, p1_B)]


@dataclasses.dataclass(frozen=True)
class MultiLabel(base.Task):
  """Multi-label classification: per-class sigmoid BCE; micro/macro F1 and exact match, a
  class predicted above ``config.threshold`` (default 0.5).

  Labels: ``labels`` multi-hot float32[B, C]. Head: pooled -> ``logits`` float[B, C].
  ``decode``: ``{"labels": [names or ids with P > threshold], "probabilities": float[C]}``
  (the metrics' threshold).
  """
  name = "multilabel"
  label_fields = {"labels": "float32"}
  label_layout = "multi_hot"
  base_metric_names = ("loss", "micro_f1", "macro_f1", "exact_match")

  def head(self):
    return _pooled_head(self.config, self.config.num_classes)

  def loss(self, outputs, batch):
    w_B = losses.example_weight(batch)
    bce_B = jnp.mean(losses.sigmoid_binary_cross_entropy(
        outputs["logits"].astype(jnp.float32), batch["labels"].astype(jnp.float32)), -1)
    return jnp.sum(bce_B * w_B), jnp.sum(w_B)

  def metrics(self, outputs, batch):
    sums = super().metrics(outputs, batch)
    w_B = losses.example_weight(batch)
    pred_BC = (outputs["logits"] > threshold_logit(self.config)).astype(jnp.float32)
    gold_BC = batch["labels"].astype(jnp.float32)
    exact_B = jnp.all(pred_BC == gold_BC, -1).astype(jnp.float32)
    sums.update(losses.f1_counts(pred_BC, gold_BC, w_B))
    sums.update(exact=jnp.sum(exact_B * w_B), count=jnp.sum(w_B))
    return sums

  def summarize(self, sums):
    out = super().summarize(sums)
    out.update(losses.f1_summary(sums))
    out["exact_match"] = losses.ratio(sums["exact"], sums["count"])
    return out

  def validate(self, batch, example_ids=None):
    labels = np.asarray(batch["labels"])
    num_classes = self.config.num_classes
    if labels.shape[-1] != num_classes:
      raise ValueError(f"multi-label targets have {labels.shape[-1]} classes, the task "
                       f"has num_classes={num_classes}")
    bad = ~np.isin(labels, (0, 1))
    if np.any(bad):
      row = int(np.argwhere(bad)[0][0])
      raise ValueError(f"{base.example_name(example_ids, row)}: multi-hot labels must be 0/1")

  def decode(self, outputs, label_names=None, batch=None):
    logits_BC = np.asarray(outputs["logits"])
    probs_BC = losses.sigmoid_np(logits_BC)
    cut = threshold_logit(self.config)
    return [{"labels": [base.name_of(i, label_names) for i in np.flatnonzero(z_C > cut)],
             "probabilities": p_C} for z_C, p_C in zip(logits_BC, probs_BC)]


@dataclasses.dataclass(frozen=True)
class PairClassification(Classification):
  """Sentence-pair classification (e.g. NLI) with one shared encoder.

  Batch: ``input_ids`` holds the premise then the hypothesis, ``token_type_ids`` is 0 on the
  premise and 1 on the hypothesis, ``mask`` covers both, ``label`` int32[B]. ``pairs`` makes
  ``build_model`` return ``longtext_jax.pair_model.PairModel``: it encodes each sentence
  separately and feeds ``[y1, y2, |y1 - y2|, y1 * y2]`` to this task's pooled head (give it
  ``head_hidden_dim`` for the MLP). Loss, metrics and ``decode`` as :class:`Classification`.
  """
  name = "pair_classification"
  pairs = True
  extra_batch_keys = ("token_type_ids",)

  def validate(self, batch, example_ids=None):
    super().validate(batch, example_ids)
    if "token_type_ids" not in batch:
      raise ValueError("pair_classification needs 'token_type_ids' (0 premise, 1 hypothesis)")
    tt = np.asarray(batch["token_type_ids"])
    mask = np.asarray(batch["mask"])
    bad = mask & ~np.isin(tt, (0, 1))
    # The hypothesis must follow the premise: no 0 after a 1 among real tokens.
    bad |= mask & (tt == 0) & (np.cumsum(mask & (tt == 1), axis=-1) > 0)
    if np.any(bad):
      row = int(np.argwhere(bad)[0][0])
      raise ValueError(f"{base.example_name(example_ids, row)}: token_type_ids must be 0 on "
                       "the premise then 1 on the hypothesis")
