"""Tasks: the head on top of an encoder, its loss and its metrics.

A task is chosen by ``config.task.name``. Each task class provides

* ``head()``: a flax module mapping an :class:`EncoderOutput` to ``logits`` or
  ``predictions``;
* ``loss(outputs, batch) -> (loss_sum, weight_sum)``: summed over units (examples, tokens,
  masked positions), so gradient accumulation and data-parallel sums stay exact; the
  training objective is ``loss_sum / weight_sum``;
* ``metrics(outputs, batch) -> dict``: additive statistics (sums and counts) that can be added
  across batches and devices; ``summarize(sums)`` turns them into final numbers;
* ``validate(batch, example_ids)``: host-side checks of labels that raise a ValueError naming
  the offending example.

Padding never counts: an example without any real token (``mask.any(-1)`` false, e.g. the
filler rows of a last evaluation batch) has weight 0, and token-level tasks only count real
tokens.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from longtext_jax import metrics_conll
from longtext_jax.encoders.base import EncoderOutput
from longtext_jax.layers import crf as crf_lib
from longtext_jax.layers.partitioning import dense_inits, named, norm_inits

Array = jax.Array
Batch = Mapping[str, Any]


def example_weight(batch: Batch) -> Array:
  """float[B]: 1 for examples with at least one real token, 0 for filler rows."""
  return jnp.any(batch["mask"], axis=-1).astype(jnp.float32)


class PooledHead(nn.Module):
  """Optional MLP then Dense(num_outputs) on the pooled vector."""
  num_outputs: int
  hidden_dim: int = 0
  dropout_rate: float = 0.0

  @nn.compact
  def __call__(self, enc: EncoderOutput, deterministic: bool = True, embed=None):
    del embed
    h_BD = enc.pooled
    if self.hidden_dim:
      h_BD = nn.Dropout(self.dropout_rate)(h_BD, deterministic=deterministic)
      h_BD = nn.gelu(nn.Dense(self.hidden_dim, name="hidden",
                              **dense_inits(("embed", "mlp")))(h_BD))
    h_BD = nn.Dropout(self.dropout_rate)(h_BD, deterministic=deterministic)
    in_axis = "mlp" if self.hidden_dim else "embed"
    return nn.Dense(self.num_outputs, name="out", **dense_inits((in_axis, "classes")))(h_BD)


class TokenHead(nn.Module):
  """Dense(num_outputs) per token on the sequence states."""
  num_outputs: int
  dropout_rate: float = 0.0

  @nn.compact
  def __call__(self, enc: EncoderOutput, deterministic: bool = True, embed=None):
    del embed
    h_BLD = nn.Dropout(self.dropout_rate)(enc.sequence, deterministic=deterministic)
    return nn.Dense(self.num_outputs, name="out", **dense_inits(("embed", "classes")))(h_BLD)


class LanguageModelHead(nn.Module):
  """Dense -> GELU -> LayerNorm -> tied input embedding (``embed.attend``) + bias."""
  vocab_size: int
  tie_embeddings: bool = True

  @nn.compact
  def __call__(self, enc: EncoderOutput, deterministic: bool = True, embed=None):
    del deterministic
    d_model = enc.sequence.shape[-1]
    h_BLD = nn.gelu(nn.Dense(d_model, name="transform",
                             **dense_inits(("embed", "mlp")))(enc.sequence))
    h_BLD = nn.LayerNorm(name="ln", **norm_inits(("mlp",)))(h_BLD)
    if self.tie_embeddings:
      if embed is None:
        raise ValueError("tied LM head needs token inputs (config.model.input='tokens')")
      logits_BLV = embed.attend(h_BLD)
    else:
      logits_BLV = nn.Dense(self.vocab_size, use_bias=False, name="decoder",
                            **dense_inits(("embed", "vocab")))(h_BLD)
    bias_V = self.param("bias", named(nn.initializers.zeros, ("vocab",)), (self.vocab_size,))
    return logits_BLV + bias_V[None, None]


@dataclasses.dataclass(frozen=True)
class Task:
  """Base class; subclasses set ``output_key`` and implement the methods."""
  config: Any
  output_key = "logits"
  # Batch keys this task reads as labels (used by the data path and validation).
  label_keys: tuple[str, ...] = ()

  def head(self) -> nn.Module:
    raise NotImplementedError

  def loss(self, outputs: Mapping[str, Array], batch: Batch) -> tuple[Array, Array]:
    raise NotImplementedError

  def metrics(self, outputs: Mapping[str, Array], batch: Batch) -> dict[str, Array]:
    loss_sum, weight = self.loss(outputs, batch)
    return {"loss_sum": loss_sum, "loss_weight": weight}

  def summarize(self, sums: Mapping[str, Any]) -> dict[str, float]:
    return {"loss": _ratio(sums["loss_sum"], sums["loss_weight"])}

  def validate(self, batch: Mapping[str, np.ndarray], example_ids: Any = None) -> None:
    del batch, example_ids

  @property
  def _cfg(self):
    return self.config


def _ratio(num, den) -> float:
  num, den = float(num), float(den)
  return num / den if den else float("nan")


def _example_name(example_ids, row) -> str:
  if example_ids is None:
    return f"example at batch row {row}"
  ex_id = example_ids[row]
  ex_id = ex_id.item() if hasattr(ex_id, "item") else ex_id
  return f"example {ex_id!r}"


def _check_int_labels(labels, valid, num_classes, key, example_ids):
  labels = np.asarray(labels)
  bad = valid & ((labels < 0) | (labels >= num_classes))
  if np.any(bad):
    row = int(np.argwhere(bad)[0][0])
    raise ValueError(
        f"{_example_name(example_ids, row)}: {key}={labels[tuple(np.argwhere(bad)[0])]} "
        f"is outside the label set [0, {num_classes})")


@dataclasses.dataclass(frozen=True)
class Classification(Task):
  """Single-label classification: softmax cross-entropy, accuracy. Labels: ``label`` int[B]."""
  label_keys: tuple[str, ...] = ("label",)

  def head(self):
    return PooledHead(self.config.num_classes, self.config.head_hidden_dim,
                      self.config.head_dropout)

  def loss(self, outputs, batch):
    w_B = example_weight(batch)
    ce_B = optax.softmax_cross_entropy_with_integer_labels(
        outputs["logits"].astype(jnp.float32), batch["label"])
    return jnp.sum(ce_B * w_B), jnp.sum(w_B)

  def metrics(self, outputs, batch):
    sums = super().metrics(outputs, batch)
    w_B = example_weight(batch)
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
    out["accuracy"] = _ratio(sums["correct"], sums["count"])
    if "confusion" in sums:
      out["mcc"] = matthews_corrcoef(sums["confusion"])
    return out

  def validate(self, batch, example_ids=None):
    valid = np.asarray(batch["mask"]).any(-1)
    _check_int_labels(batch["label"], valid, self.config.num_classes, "label", example_ids)


def matthews_corrcoef(confusion) -> float:
  """Matthews correlation (Gorodkin's multi-class R_K; the usual MCC for two classes) of a
  confusion matrix ``confusion[gold, predicted]``; 0 when undefined (one class only)."""
  c = np.asarray(confusion, np.float64)
  total, correct = c.sum(), np.trace(c)
  gold, pred = c.sum(1), c.sum(0)
  num = correct * total - gold @ pred
  den = np.sqrt(total ** 2 - pred @ pred) * np.sqrt(total ** 2 - gold @ gold)
  return float(num / den) if den > 0 else 0.0


def _f1_counts(pred_BC, gold_BC, w_B):
  w_B1 = w_B[:, None]
  return {"tp": jnp.sum(pred_BC * gold_BC * w_B1, 0),
          "fp": jnp.sum(pred_BC * (1 - gold_BC) * w_B1, 0),
          "fn": jnp.sum((1 - pred_BC) * gold_BC * w_B1, 0)}


def _f1_summary(sums) -> dict[str, float]:
  tp, fp, fn = (np.asarray(sums[k], np.float64) for k in ("tp", "fp", "fn"))
  denom = 2 * tp + fp + fn
  micro = 2 * tp.sum() / denom.sum() if denom.sum() else 0.0
  per_class = np.where(denom > 0, 2 * tp / np.maximum(denom, 1e-12), 0.0)
  return {"micro_f1": float(micro), "macro_f1": float(per_class.mean())}


@dataclasses.dataclass(frozen=True)
class Binary(Task):
  """Binary classification with one logit: sigmoid BCE, accuracy and F1 at threshold 0.5."""
  label_keys: tuple[str, ...] = ("label",)

  def head(self):
    return PooledHead(1, self.config.head_hidden_dim,
                      self.config.head_dropout)

  def loss(self, outputs, batch):
    w_B = example_weight(batch)
    bce_B = optax.sigmoid_binary_cross_entropy(
        outputs["logits"][:, 0].astype(jnp.float32), batch["label"].astype(jnp.float32))
    return jnp.sum(bce_B * w_B), jnp.sum(w_B)

  def metrics(self, outputs, batch):
    sums = super().metrics(outputs, batch)
    w_B = example_weight(batch)
    pred_B = (outputs["logits"][:, 0] > 0).astype(jnp.float32)
    gold_B = batch["label"].astype(jnp.float32)
    sums.update(correct=jnp.sum((pred_B == gold_B) * w_B), count=jnp.sum(w_B))
    sums.update(_f1_counts(pred_B[:, None], gold_B[:, None], w_B))
    return sums

  def summarize(self, sums):
    out = super().summarize(sums)
    out["accuracy"] = _ratio(sums["correct"], sums["count"])
    out["f1"] = _f1_summary(sums)["micro_f1"]
    return out

  def validate(self, batch, example_ids=None):
    valid = np.asarray(batch["mask"]).any(-1)
    _check_int_labels(batch["label"], valid, 2, "label", example_ids)


@dataclasses.dataclass(frozen=True)
class MultiLabel(Task):
  """Multi-label classification: per-class sigmoid BCE; micro/macro F1 at threshold 0.5.

  Labels: ``labels`` multi-hot float[B, C].
  """
  label_keys: tuple[str, ...] = ("labels",)

  def head(self):
    return PooledHead(self.config.num_classes, self.config.head_hidden_dim,
                      self.config.head_dropout)

  def loss(self, outputs, batch):
    w_B = example_weight(batch)
    bce_B = jnp.mean(optax.sigmoid_binary_cross_entropy(
        outputs["logits"].astype(jnp.float32), batch["labels"].astype(jnp.float32)), -1)
    return jnp.sum(bce_B * w_B), jnp.sum(w_B)

  def metrics(self, outputs, batch):
    sums = super().metrics(outputs, batch)
    w_B = example_weight(batch)
    pred_BC = (outputs["logits"] > 0).astype(jnp.float32)
    gold_BC = batch["labels"].astype(jnp.float32)
    exact_B = jnp.all(pred_BC == gold_BC, -1).astype(jnp.float32)
    sums.update(_f1_counts(pred_BC, gold_BC, w_B))
    sums.update(exact=jnp.sum(exact_B * w_B), count=jnp.sum(w_B))
    return sums

  def summarize(self, sums):
    out = super().summarize(sums)
    out.update(_f1_summary(sums))
    out["exact_match"] = _ratio(sums["exact"], sums["count"])
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
      raise ValueError(f"{_example_name(example_ids, row)}: multi-hot labels must be 0/1")


@dataclasses.dataclass(frozen=True)
class Regression(Task):
  """Regression of ``target`` float[B, T] from the pooled vector; MSE (mean over T)."""
  output_key = "predictions"
  label_keys: tuple[str, ...] = ("target",)

  def head(self):
    return PooledHead(self.config.num_outputs, self.config.head_hidden_dim,
                      self.config.head_dropout)

  def loss(self, outputs, batch):
    w_B = example_weight(batch)
    se_B = jnp.mean(jnp.square(outputs["predictions"].astype(jnp.float32)
                               - batch["target"].astype(jnp.float32)), -1)
    return jnp.sum(se_B * w_B), jnp.sum(w_B)

  def summarize(self, sums):
    return {"loss": _ratio(sums["loss_sum"], sums["loss_weight"]),
            "mse": _ratio(sums["loss_sum"], sums["loss_weight"])}

  def validate(self, batch, example_ids=None):
    target = np.asarray(batch["target"])
    if target.shape[-1] != self.config.num_outputs:
      raise ValueError(f"target has {target.shape[-1]} outputs, the task has "
                       f"num_outputs={self.config.num_outputs}")
    bad = ~np.isfinite(target).all(-1)
    if np.any(bad):
      row = int(np.argwhere(bad)[0][0])
      raise ValueError(f"{_example_name(example_ids, row)}: target is not finite")


@dataclasses.dataclass(frozen=True)
class Tagging(Task):
  """Token tagging: per-token cross-entropy and token accuracy over real tokens.

  Labels: ``tags`` int[B, L].
  """
  label_keys: tuple[str, ...] = ("tags",)

  def head(self):
    return TokenHead(self.config.num_classes, self.config.head_dropout)

  def loss(self, outputs, batch):
    w_BL = batch["mask"].astype(jnp.float32)
    ce_BL = optax.softmax_cross_entropy_with_integer_labels(
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
    out["token_accuracy"] = _ratio(sums["correct"], sums["count"])
    return out

  def validate(self, batch, example_ids=None):
    _check_int_labels(batch["tags"], np.asarray(batch["mask"]), self.config.num_classes,
                      "tag", example_ids)


@dataclasses.dataclass(frozen=True)
class MaskedLM(Task):
  """Masked language modelling: cross-entropy over the positions in ``mlm_mask`` only.

  Batch: ``input_ids`` (already corrupted), ``mlm_targets`` int[B, L] (original ids),
  ``mlm_mask`` bool[B, L] (positions that were selected for prediction).
  """
  label_keys: tuple[str, ...] = ("mlm_targets", "mlm_mask")

  def head(self):
    return LanguageModelHead(self.config.vocab_size, self.config.tie_embeddings)

  def _weights(self, batch):
    return (batch["mlm_mask"] & batch["mask"]).astype(jnp.float32)

  def loss(self, outputs, batch):
    w_BL = self._weights(batch)
    ce_BL = optax.softmax_cross_entropy_with_integer_labels(
        outputs["logits"].astype(jnp.float32), batch["mlm_targets"])
    return jnp.sum(ce_BL * w_BL), jnp.sum(w_BL)

  def metrics(self, outputs, batch):
    sums = super().metrics(outputs, batch)
    w_BL = self._weights(batch)
    correct = (jnp.argmax(outputs["logits"], -1) == batch["mlm_targets"])
    sums.update(correct=jnp.sum(correct * w_BL), count=jnp.sum(w_BL))
    return sums

  def summarize(self, sums):
    out = super().summarize(sums)
    out["perplexity"] = float(np.exp(min(out["loss"], 50.0)))
    out["accuracy"] = _ratio(sums["correct"], sums["count"])
    return out

  def validate(self, batch, example_ids=None):
    _check_int_labels(batch["mlm_targets"], np.asarray(batch["mlm_mask"]),
                      self.config.vocab_size, "mlm_target", example_ids)


@dataclasses.dataclass(frozen=True)
class CausalLM(MaskedLM):
  """Next-token prediction: logits at t predict ``input_ids[t + 1]``; needs a causal encoder.

  An optional ``target_mask`` bool[B, L] restricts the loss and accuracy to the tokens it
  marks (e.g. the answer of a recall task); without it every real next token counts.
  """
  label_keys: tuple[str, ...] = ()

  def _targets_and_weights(self, outputs, batch):
    ids_BL, mask_BL = batch["input_ids"], batch["mask"]
    logits_BLV = outputs["logits"][:, :-1].astype(jnp.float32)
    w_BL = mask_BL[:, 1:] & mask_BL[:, :-1]
    if "target_mask" in batch:  # Optional: only these tokens are targets (e.g. the answer).
      w_BL = w_BL & batch["target_mask"][:, 1:]
    return logits_BLV, ids_BL[:, 1:], w_BL.astype(jnp.float32)

  def loss(self, outputs, batch):
    logits_BLV, targets_BL, w_BL = self._targets_and_weights(outputs, batch)
    ce_BL = optax.softmax_cross_entropy_with_integer_labels(logits_BLV, targets_BL)
    return jnp.sum(ce_BL * w_BL), jnp.sum(w_BL)

  def metrics(self, outputs, batch):
    loss_sum, weight = self.loss(outputs, batch)
    logits_BLV, targets_BL, w_BL = self._targets_and_weights(outputs, batch)
    correct = jnp.argmax(logits_BLV, -1) == targets_BL
    return {"loss_sum": loss_sum, "loss_weight": weight,
            "correct": jnp.sum(correct * w_BL), "count": jnp.sum(w_BL)}

  def validate(self, batch, example_ids=None):
    _check_int_labels(batch["input_ids"], np.asarray(batch["mask"]),
                      self.config.vocab_size, "input_id", example_ids)



# ----------------------- span F1, CRF tagging, sentence pairs -----------------------
# (Star-Transformer issue; reusable by every encoder.)


def _span_scheme(config):
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

  def metrics(self, outputs, batch):
    sums = super().metrics(outputs, batch)
    scheme = _span_scheme(self.config)
    if scheme is not None:
      pred_BL = jnp.argmax(outputs["logits"], -1)
      sums.update(metrics_conll.span_counts(pred_BL, batch["tags"], batch["mask"], scheme))
    return sums

  def summarize(self, sums):
    out = super().summarize(sums)
    out.update(_span_summary(sums))
    return out


class CrfHead(nn.Module):
  """Per-token emissions (Dense) plus the CRF's transition/start/end scores."""
  num_tags: int
  dropout_rate: float = 0.0

  @nn.compact
  def __call__(self, enc: EncoderOutput, deterministic: bool = True, embed=None):
    del embed
    h_BLD = nn.Dropout(self.dropout_rate)(enc.sequence, deterministic=deterministic)
    transitions_CC, start_C, end_C = crf_lib.CRF(self.num_tags, name="crf")()
    return {"emissions": nn.Dense(self.num_tags, name="out",
                                  **dense_inits(("embed", "classes")))(h_BLD),
            "transitions": transitions_CC, "start": start_C, "end": end_C}


@dataclasses.dataclass(frozen=True)
class CrfTagging(SpanTagging):
  """Tagging with a linear-chain CRF (``layers/crf.py``) on top of any encoder.

  Outputs (key ``crf``): ``emissions`` [B, L, C] and the CRF scores. The loss is the
  negative log-likelihood of the gold path, summed over sentences and divided by the number
  of real tokens; metrics use the Viterbi path (token accuracy and, with
  ``config.tag_names``, CoNLL span F1).
  """
  output_key = "crf"

  def head(self):
    return CrfHead(self.config.num_classes, self.config.head_dropout)

  @staticmethod
  def _crf_args(out):
    return out["transitions"], out["start"], out["end"]

  def decode(self, outputs, batch) -> Array:
    """Viterbi tags int32[B, L] (0 at pads)."""
    out = outputs["crf"]
    return crf_lib.crf_viterbi(out["emissions"], batch["mask"], *self._crf_args(out))[0]

  def loss(self, outputs, batch):
    out = outputs["crf"]
    ll_B = crf_lib.crf_log_likelihood(out["emissions"], batch["tags"], batch["mask"],
                                      *self._crf_args(out))
    return -jnp.sum(ll_B), jnp.sum(batch["mask"].astype(jnp.float32))

  def metrics(self, outputs, batch):
    loss_sum, weight = self.loss(outputs, batch)
    pred_BL = self.decode(outputs, batch)
    w_BL = batch["mask"].astype(jnp.float32)
    sums = {"loss_sum": loss_sum, "loss_weight": weight,
            "correct": jnp.sum((pred_BL == batch["tags"]) * w_BL), "count": jnp.sum(w_BL)}
    scheme = _span_scheme(self.config)
    if scheme is not None:
      sums.update(metrics_conll.span_counts(pred_BL, batch["tags"], batch["mask"], scheme))
    return sums


@dataclasses.dataclass(frozen=True)
class PairClassification(Classification):
  """Sentence-pair classification (e.g. NLI) with one shared encoder.

  Batch: ``input_ids`` holds the premise then the hypothesis, ``token_type_ids`` is 0 on the
  premise and 1 on the hypothesis, ``mask`` covers both, ``label`` int[B]. The model
  (``longtext_jax/pair_model.py``) encodes each sentence separately and feeds
  ``[y1, y2, |y1 - y2|, y1 * y2]`` to this task's pooled head (give it
  ``head_hidden_dim`` for the MLP).
  """
  label_keys: tuple[str, ...] = ("label",)

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
      raise ValueError(f"{_example_name(example_ids, row)}: token_type_ids must be 0 on the "
                       "premise then 1 on the hypothesis")

TASKS = {
    "classification": Classification,
    "binary": Binary,
    "multilabel": MultiLabel,
    "regression": Regression,
    "tagging": Tagging,
    "mlm": MaskedLM,
    "lm": CausalLM,
    "span_tagging": SpanTagging,
    "crf_tagging": CrfTagging,
    "pair_classification": PairClassification,
}


def get_task(task_config) -> Task:
  """The task named ``task_config.name`` (one of ``TASKS``)."""
  name = task_config.name
  if name not in TASKS:
    raise ValueError(f"unknown task {name!r}; choose one of {sorted(TASKS)}")
  return TASKS[name](task_config)
