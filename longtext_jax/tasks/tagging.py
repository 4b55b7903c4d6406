"""Token tagging kinds: per-token softmax, with CoNLL span F1, and with a linear-chain CRF."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from longtext_jax import metrics_conll
from longtext_jax.layers import crf as crf_lib
from longtext_jax.tasks import base, losses
from longtext_jax.tasks.heads import CrfHead, TokenHead

Array = jax.Array

_SPAN_METRICS = ("span_precision", "span_recall", "span_f1")


def label_mask(batch: Mapping[str, Any]):
  """bool[B, L]: the positions that carry a tag. Text loaders mark each word's first token
  (``tag_mask``): a word split into several tokens is one label, as in CoNLL's scoring;
  without ``tag_mask`` (generated data, one token per word) every real token."""
  if "tag_mask" in batch:
    return batch["mask"] & batch["tag_mask"]
  return batch["mask"]


def word_tags(tags_BL: np.ndarray, batch: Mapping[str, Any] | None) -> np.ndarray:
  """Host side: every token given its word's tag (the tag at the word's first token), so
  that a token-level view of a prediction is the word-level one."""
  if batch is None or "tag_mask" not in batch:
    return tags_BL
  first_BL = np.asarray(batch["tag_mask"], bool)
  first_BL = first_BL | (np.cumsum(first_BL, -1) == 0)  # Tokens before any word start.
  pos_BL = np.where(first_BL, np.arange(tags_BL.shape[1]), 0)
  return np.take_along_axis(tags_BL, np.maximum.accumulate(pos_BL, -1), -1)


def _words_first(batch: Mapping[str, Any], *ids_BL: Array) -> tuple[Array, ...]:
  """The tag sequences over words: each row's labelled positions (:func:`label_mask`)
  moved to the front in order, and the mask of the result (a prefix per row)."""
  keep_BL = label_mask(batch)
  if "tag_mask" not in batch:
    return ids_BL + (keep_BL,)
  order_BL = jnp.argsort(~keep_BL, axis=-1, stable=True)
  moved = tuple(jnp.take_along_axis(x, order_BL, axis=-1) for x in ids_BL)
  n_B = jnp.sum(keep_BL, -1)
  return moved + (jnp.arange(keep_BL.shape[1])[None, :] < n_B[:, None],)


def span_sums(pred_BL: Array, batch: Mapping[str, Any], scheme) -> dict[str, Array]:
  """CoNLL chunk counts over words (``tag_mask``), with the gold chunks a cut at
  ``max_tokens`` removed (``gold_spans_cut``, ``gold_span_open``) counted as missed."""
  pred_BL, gold_BL, mask_BL = _words_first(batch, pred_BL, batch["tags"])
  sums = metrics_conll.span_counts(pred_BL, gold_BL, mask_BL, scheme,
                                   open_end_B=batch.get("gold_span_open"))
  if "gold_spans_cut" in batch:
    sums["span_gold"] = sums["span_gold"] + jnp.sum(batch["gold_spans_cut"]).astype(
        jnp.float32)
  return sums


@dataclasses.dataclass(frozen=True)
class Tagging(base.Task):
  """Token tagging: per-token cross-entropy and token accuracy over the tagged positions.

  Labels: ``tags`` int32[B, L] and, from text loaders, ``tag_mask`` bool[B, L] (each word's
  first token; the others are not labels). Head: sequence -> ``logits`` float[B, L, C].
  ``decode``: ``{"tags": [name or id per real token]}`` (a word's later tokens repeat its
  first token's tag; every position without ``batch``).
  """
  name = "tagging"
  label_fields = {"tags": "int32"}
  # Optional, from text loaders: each word's first token, and what a cut removed.
  extra_batch_keys = ("tag_mask", "gold_spans_cut", "gold_span_open")
  label_layout = "tags"
  base_metric_names = ("loss", "token_accuracy")

  def head(self):
    return TokenHead(self.config.num_classes, self.config.head_dropout)

  def loss(self, outputs, batch):
    keep_BL = label_mask(batch)
    w_BL = keep_BL.astype(jnp.float32)
    ce_BL = losses.softmax_cross_entropy_with_integer_labels(
        outputs["logits"].astype(jnp.float32), jnp.where(keep_BL, batch["tags"], 0))
    return jnp.sum(ce_BL * w_BL), jnp.sum(w_BL)

  def metrics(self, outputs, batch):
    sums = super().metrics(outputs, batch)
    w_BL = label_mask(batch).astype(jnp.float32)
    correct_BL = (jnp.argmax(outputs["logits"], -1) == batch["tags"]).astype(jnp.float32)
    sums.update(correct=jnp.sum(correct_BL * w_BL), count=jnp.sum(w_BL))
    return sums

  def summarize(self, sums):
    out = super().summarize(sums)
    out["token_accuracy"] = losses.ratio(sums["correct"], sums["count"])
    return out

  def validate(self, batch, example_ids=None):
    base.check_int_labels(batch["tags"], np.asarray(label_mask(batch)),
                          self.config.num_classes, "tag", example_ids)

  def cut_fields(self, tags: Sequence[int], kept: int) -> dict[str, np.ndarray]:
    """What a document whose word tag ids are ``tags``, cut after ``kept`` words, loses from
    the gold (the data loader's hook, ``TextEncoder.cut_fields``): nothing without spans."""
    del tags, kept
    return {}

  def predicted_tags(self, outputs: Mapping[str, Any], batch: Mapping[str, Any] | None
                     ) -> np.ndarray:
    """Host-side best tags int[B, L] (argmax at each word's first token, for the word)."""
    return word_tags(np.argmax(np.asarray(outputs["logits"]), -1), batch)

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
      sums.update(span_sums(jnp.argmax(outputs["logits"], -1), batch, scheme))
    return sums

  def cut_fields(self, tags: Sequence[int], kept: int) -> dict[str, np.ndarray]:
    """``gold_spans_cut`` int32 (gold chunks that start past the cut) and ``gold_span_open``
    bool (a gold chunk runs across it, so its kept part is no match): span F1 then scores
    a cut document as conlleval scores the whole one, the cut tail predicted ``O``."""
    scheme = span_scheme(self.config)
    if scheme is None:
      return {}
    lost, open_end = 0, False
    if kept < len(tags):
      for _, first, last in metrics_conll.chunks([scheme.names[t] for t in tags]):
        lost += first >= kept
        open_end |= first < kept <= last
    return {"gold_spans_cut": np.int32(lost), "gold_span_open": np.bool_(open_end)}

  def summarize(self, sums):
    out = super().summarize(sums)
    out.update(_span_summary(sums))
    return out


@dataclasses.dataclass(frozen=True)
class CrfTagging(SpanTagging):
  """Tagging with a linear-chain CRF (``layers/crf.py``) on top of any encoder.

  Outputs (key ``crf``): ``emissions`` float[B, L, C] and the CRF scores. The chain runs over
  the tagged positions (:func:`label_mask`: each word's first token), so transitions link
  words. The loss is the negative log-likelihood of the gold path, summed over sentences and
  divided by the number of words; metrics use the Viterbi path (token accuracy and, with
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
    """Viterbi tags int32[B, L] (0 at pads) of the CRF outputs, given ``mask`` bool[B, L];
    with ``config.tag_names`` and ``config.constrained_decoding``, the best well-formed
    BIO/IOBES path (``metrics_conll.allowed_transitions``)."""
    out = outputs["crf"]
    allowed = None
    if span_scheme(self.config) is not None and self.config.constrained_decoding:
      allowed = metrics_conll.allowed_transitions(tuple(self.config.tag_names))
    return crf_lib.crf_viterbi(out["emissions"], mask_BL, *self._crf_args(out),
                               allowed=allowed)[0]

  def loss(self, outputs, batch):
    out = outputs["crf"]
    keep_BL = label_mask(batch)
    ll_B = crf_lib.crf_log_likelihood(out["emissions"], batch["tags"], keep_BL,
                                      *self._crf_args(out))
    return -jnp.sum(ll_B), jnp.sum(keep_BL.astype(jnp.float32))

  def metrics(self, outputs, batch):
    loss_sum, weight = self.loss(outputs, batch)
    keep_BL = label_mask(batch)
    pred_BL = self.viterbi(outputs, keep_BL)
    w_BL = keep_BL.astype(jnp.float32)
    sums = {"loss_sum": loss_sum, "loss_weight": weight,
            "correct": jnp.sum((pred_BL == batch["tags"]) * w_BL), "count": jnp.sum(w_BL)}
    scheme = span_scheme(self.config)
    if scheme is not None:
      sums.update(span_sums(pred_BL, batch, scheme))
    return sums

  def predicted_tags(self, outputs, batch):
    """Host-side Viterbi tags int[B, L] over the words (every position real when ``batch``
    is None), each word's tag repeated on its later tokens."""
    emissions_BLC = np.asarray(outputs["crf"]["emissions"])
    mask_BL = (np.ones(emissions_BLC.shape[:2], bool) if batch is None
               else np.asarray(label_mask(batch)))
    return word_tags(np.asarray(self.viterbi(outputs, jnp.asarray(mask_BL))), batch)
