"""Losses and additive metric statistics shared by the task kinds (pure jnp/numpy, no optax).

Every loss here is per unit (example, token, class); the task kinds weight and sum them into
``(loss_sum, weight_sum)``. The two cross-entropies follow optax's formulas operation for
operation (``tests/test_tasks.py`` checks equality), so results do not depend on optax.
"""
from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
Batch = Mapping[str, Any]


def example_weight(batch: Batch) -> Array:
  """float[B]: 1 for examples with at least one real token, 0 for filler rows.

  Args:
    batch: a batch with ``mask`` bool[B, L].
  """
  return jnp.any(batch["mask"], axis=-1).astype(jnp.float32)


def softmax_cross_entropy_with_integer_labels(logits_XC: Array, labels_X: Array) -> Array:
  """Softmax cross-entropy with integer labels, ``logsumexp(x) - x[label]`` (optax's formula).

  Args:
    logits_XC: float[..., C] unnormalized log-probabilities.
    labels_X: int[...] class ids in [0, C).

  Returns:
    float[...]: the cross-entropy of each position.
  """
  label_logits_X = jnp.take_along_axis(logits_XC, labels_X[..., None], axis=-1)[..., 0]
  return jax.nn.logsumexp(logits_XC, axis=-1) - label_logits_X


def sigmoid_binary_cross_entropy(logits_X: Array, labels_X: Array) -> Array:
  """Element-wise sigmoid cross-entropy (optax's formula, stable for large logits).

  Args:
    logits_X: float[...] logits of the positive class.
    labels_X: [...] targets in {0, 1} (or probabilities), cast to the logits' dtype.

  Returns:
    float[...]: ``-y log sigmoid(x) - (1 - y) log sigmoid(-x)``.
  """
  labels_X = labels_X.astype(logits_X.dtype)
  return (-labels_X * jax.nn.log_sigmoid(logits_X)
          - (1.0 - labels_X) * jax.nn.log_sigmoid(-logits_X))


def ratio(num, den) -> float:
  """``num / den`` as a Python float; NaN when ``den`` is 0."""
  num, den = float(num), float(den)
  return num / den if den else float("nan")


def matthews_corrcoef(confusion) -> float:
  """Matthews correlation (Gorodkin's multi-class R_K; the usual MCC for two classes).

  Args:
    confusion: float[C, C] counts ``confusion[gold, predicted]``.

  Returns:
    The correlation; 0 when undefined (one class only).
  """
  c = np.asarray(confusion, np.float64)
  total, correct = c.sum(), np.trace(c)
  gold, pred = c.sum(1), c.sum(0)
  num = correct * total - gold @ pred
  den = np.sqrt(total ** 2 - pred @ pred) * np.sqrt(total ** 2 - gold @ gold)
  return float(num / den) if den > 0 else 0.0


def macro_f1_from_confusion(confusion) -> float:
  """Macro-averaged F1 over the classes of a confusion matrix.

  Args:
    confusion: float[C, C] counts ``confusion[gold, predicted]``.

  Returns:
    The mean of ``2 tp / (2 tp + fp + fn)`` over the classes that occur as gold or predicted
    labels (scikit-learn's ``f1_score(average='macro')``, whose labels are those present);
    0 when the matrix is empty.
  """
  c = np.asarray(confusion, np.float64)
  tp = np.diag(c)
  denom = c.sum(0) + c.sum(1)  # 2 tp + fp + fn.
  present = denom > 0
  if not present.any():
    return 0.0
  return float(np.mean(2 * tp[present] / denom[present]))


def f1_counts(pred_BC: Array, gold_BC: Array, w_B: Array) -> dict[str, Array]:
  """Per-class true/false positive and false negative counts (additive).

  Args:
    pred_BC: {0, 1} float[B, C] predictions.
    gold_BC: {0, 1} float[B, C] gold labels.
    w_B: float[B] example weights (0 for filler rows).

  Returns:
    ``{"tp", "fp", "fn"}``, each float[C].
  """
  w_B1 = w_B[:, None]
  return {"tp": jnp.sum(pred_BC * gold_BC * w_B1, 0),
          "fp": jnp.sum(pred_BC * (1 - gold_BC) * w_B1, 0),
          "fn": jnp.sum((1 - pred_BC) * gold_BC * w_B1, 0)}


def f1_summary(sums: Mapping[str, Any]) -> dict[str, float]:
  """Micro and macro F1 from summed :func:`f1_counts` (a class never seen nor predicted
  scores 0 in the macro mean)."""
  tp, fp, fn = (np.asarray(sums[k], np.float64) for k in ("tp", "fp", "fn"))
  denom = 2 * tp + fp + fn
  micro = 2 * tp.sum() / denom.sum() if denom.sum() else 0.0
  per_class = np.where(denom > 0, 2 * tp / np.maximum(denom, 1e-12), 0.0)
  return {"micro_f1": float(micro), "macro_f1": float(per_class.mean())}


def softmax_np(logits_XC: np.ndarray) -> np.ndarray:
  """Host-side softmax over the last axis (float64 for decoding): float[..., C]."""
  x = np.asarray(logits_XC, np.float64)
  x = np.exp(x - x.max(-1, keepdims=True))
  return x / x.sum(-1, keepdims=True)


def log_softmax_np(logits_XC: np.ndarray) -> np.ndarray:
  """Host-side log-softmax over the last axis (float64): float[..., C]."""
  x = np.asarray(logits_XC, np.float64)
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def sigmoid_np(logits_X: np.ndarray) -> np.ndarray:
  """Host-side logistic sigmoid (float64): float[...]."""
  x = np.asarray(logits_X, np.float64)
  return 0.5 * (1.0 + np.tanh(0.5 * x))
