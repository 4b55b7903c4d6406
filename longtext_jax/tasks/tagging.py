"""Token tagging kinds: per-token softmax, with CoNLL span F1, and with a linear-chain CRF."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from longtext_jax import metrics_conll
from longtext_jax.layers import crf as crf_lib
from longtext_jax.tasks import base, losses
from longtext_jax.tasks.heads import CrfHead, TokenHead

Array = jax.Array

_SPAN_METRICS = ("span_precision", "span_recall", "span_f1")


@dataclasses.dataclass(frozen=True)
class Tagging(base.Task):
  """Token tagging: per-token cross-entropy and token accuracy over real tokens.

  Labels: ``tags`` int32[B, L]. Head: sequence -> ``logits`` float[B, L, C].
  ``decode``: ``{"tags": [name or id per real token]}`` (every position without ``batch``).
  """
  name = "tagging"
  label_fields = {"tags": "int32"}
  label_layout = "tags"
  base_metric_names = ("loss", "token_accuracy")

  def head(self):
    return TokenHead(self.config.num_classes, self.config.head_dropout)

  def loss(self, outputs, batch):
    w_BL = batch["mask"].astype(jnp.float32)
    ce_BL = losses.softmax_cross_entropy_with_integer_labels(
        outputs["logits"].astype(jnp.float32), jnp.where(batch["mask"], batch["tags"], 0))
    return jnp.sum(ce_BL * w_BL), jnp.sum(w_BL)

  def metrics(self, outputs, batch):
    sums = super().metrics(outputs, batch)
    w_BL = batch["mask"].astype(jnp.float32)
    correct_BL = (jnp.argmax(outputs["logits"], -1) == batch["tags"]).astype(jnp.float32)
    sums.update(correct=jnp.sum(correct_BL * w_BL), count=jnp.sum(w_BL))
    return sums

  def summarize(self, sums):
    out = super().summarize(sums)
    out["token_accuracy"] = losses.ratio(sums["correct"], sums["count"])
    return out

  def validate(self, batch, example_ids=None):
    base.check_int_labels(batch["tags"], np.asarray(batch["mask"]), self.config.num_classes,
                          "tag", example_ids)

  def predicted_tags(self, outputs: Mapping[str, Any], batch: Mapping[str, Any] | None
                     ) -> np.ndarray:
    """Host-side best tags int[B, L] (argmax per token)."""
    del batch
    return np.argmax(np.asarray(outputs["logits"]), -1)

  def decode(self, outputs, label_names=None, batch=None):
    tags_BL = self.predicted_tags(outputs, batch)
    lengths_B = base.real_lengths(batch, *tags_BL.shape)
    return [{"tags": [base.name_of(t, label_names) for t in tags_L[:n]]}
            for tags_L, n in zip(tags_BL, lengths_B)]


def span_scheme(config) -> metrics_conll.TagScheme | None:
  """The TagScheme of ``config.tag_names`` (tag strings in id order), or None."""
  names = tuple(config.tag_names)
  if not names:
    return None
  if len(names) != config.num_classes:
    raise ValueError(f"task.tag_names has {len(names)} tags but num_classes="
                     f"{config.num_classes}")
  return metrics_conll.TagScheme.from_names(names)


def _span_summary(sums) -> dict[str, float]:
  if "span_correct" not in sums:
    return {}
  out = metrics_conll.f1_from_counts(sums["span_correct"], sums["span_pred"],
                                     sums["span_gold"])
  return {"span_precision": out["precision"], "span_recall": out["recall"],
          "span_f1": out["f1"]}


@dataclasses.dataclass(frozen=True)
class SpanTagging(Tagging):
  """Per-token softmax tagging plus CoNLL span precision/recall/F1 of the argmax tags.

  ``config.tag_names`` (e.g. ``('O', 'B-PER', 'I-PER', ...)`` in id order) turns on the
  span metrics; without it this is :class:`Tagging`.
  """
  name = "span_tagging"

  @property
  def metric_names(self) -> tuple[str, ...]:
    extra = _SPAN_METRICS if span_scheme(self.config) is not None else ()
    return self.base_metric_names + extra

  def metrics(self, outputs, batch):
    sums = super().metrics(outputs, batch)
    scheme = span_scheme(self.config)
    if scheme is not None:
      pred_BL = jnp.argmax(outputs["logits"], -1)
      sums.update(metrics_conll.span_counts(pred_BL, batch["tags"], batch["mask"], scheme))
    return sums

  def summarize(self, sums):
    out = super().summarize(sums)
    out.update(_span_summary(sums))
    return out


@dataclasses.dataclass(frozen=True)
class CrfTagging(SpanTagging):
  """Tagging with a linear-chain CRF (``layers/crf.py``) on top of any encoder.

  Outputs (key ``crf``): ``emissions`` float[B, L, C] and the CRF scores. The loss is the
  negative log-likelihood of the gold path, summed over sentences and divided by the number
  of real tokens; metrics use the Viterbi path (token accuracy and, with
  ``config.tag_names``, CoNLL span F1). ``decode`` gives the Viterbi tags.
  """
  name = "crf_tagging"
  output_key = "crf"

  @staticmethod
  def _crf_args(out):
    return out["transitions"], out["start"], out["end"]

  def head(self):
    return CrfHead(self.config.num_classes, self.config.head_dropout)

  def viterbi(self, outputs: Mapping[str, Any], mask_BL: Array) -> Array:
    """Viterbi tags int32[B, L] (0 at pads) of the CRF outputs, given ``mask`` bool[B, L]."""
    out = outputs["crf"]
    return crf_lib.crf_viterbi(out["emissions"], mask_BL, *self._crf_args(out))[0]

  def loss(self, outputs, batch):
    out = outputs["crf"]
    ll_B = crf_lib.crf_log_likelihood(out["emissions"], batch["tags"], batch["mask"],
                                      *self._crf_args(out))
    return -jnp.sum(ll_B), jnp.sum(batch["mask"].astype(jnp.float32))

  def metrics(self, outputs, batch):
    loss_sum, weight = self.loss(outputs, batch)
    pred_BL = self.viterbi(outputs, batch["mask"])
    w_BL = batch["mask"].astype(jnp.float32)
    sums = {"loss_sum": loss_sum, "loss_weight": weight,
            "correct": jnp.sum((pred_BL == batch["tags"]) * w_BL), "count": jnp.sum(w_BL)}
    scheme = span_scheme(self.config)
    if scheme is not None:
      sums.update(metrics_conll.span_counts(pred_BL, batch["tags"], batch["mask"], scheme))
    return sums

  def predicted_tags(self, outputs, batch):
    """Host-side Viterbi tags int[B, L] (every position real when ``batch`` is None)."""
    emissions_BLC = np.asarray(outputs["crf"]["emissions"])
    mask_BL = (np.ones(emissions_BLC.shape[:2], bool) if batch is None
               else np.asarray(batch["mask"]))
    return np.asarray(self.viterbi(outputs, jnp.asarray(mask_BL)))
