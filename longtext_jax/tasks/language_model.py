"""Language-modelling kinds: masked LM (bidirectional) and next-token LM (causal)."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from longtext_jax.tasks import base, losses
from longtext_jax.tasks.heads import LanguageModelHead


@dataclasses.dataclass(frozen=True)
class MaskedLM(base.Task):
  """Masked language modelling: cross-entropy over the positions in ``mlm_mask`` only.

  Batch: ``input_ids`` (already corrupted), ``mlm_targets`` int32[B, L] (original ids),
  ``mlm_mask`` bool[B, L] (positions that were selected for prediction). Head: tied LM head
  -> ``logits`` float[B, L, V].
  ``decode``: ``{"tokens": ids (or names) of the real tokens}``: the argmax at every
  position, or, when ``batch`` has ``input_ids`` and ``mlm_mask``, the input with the
  selected positions filled in.
  """
  name = "mlm"
  label_fields = {"mlm_targets": "int32", "mlm_mask": "bool"}
  extra_batch_keys = ("input_ids",)
  label_layout = "mlm"
  predicts_tokens = True
  base_metric_names = ("loss", "perplexity", "accuracy")

  def head(self):
    return LanguageModelHead(self.config.vocab_size, self.config.tie_embeddings)

  def _weights(self, batch):
    return (batch["mlm_mask"] & batch["mask"]).astype(jnp.float32)

  def loss(self, outputs, batch):
    w_BL = self._weights(batch)
    ce_BL = losses.softmax_cross_entropy_with_integer_labels(
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
    out["accuracy"] = losses.ratio(sums["correct"], sums["count"])
    return out

  def validate(self, batch, example_ids=None):
    base.check_int_labels(batch["mlm_targets"], np.asarray(batch["mlm_mask"]),
                          self.config.vocab_size, "mlm_target", example_ids)

  def decode(self, outputs, label_names=None, batch=None):
    tokens_BL = np.argmax(np.asarray(outputs["logits"]), -1)
    if batch is not None and "input_ids" in batch and "mlm_mask" in batch:
      tokens_BL = np.where(np.asarray(batch["mlm_mask"]), tokens_BL,
                           np.asarray(batch["input_ids"]))
    lengths_B = base.real_lengths(batch, *tokens_BL.shape)
    return [{"tokens": [base.name_of(t, label_names) for t in tokens_L[:n]]}
            for tokens_L, n in zip(tokens_BL, lengths_B)]


@dataclasses.dataclass(frozen=True)
class CausalLM(MaskedLM):
  """Next-token prediction: logits at t predict ``input_ids[t + 1]``; needs a causal encoder.

  An optional ``target_mask`` bool[B, L] restricts the loss and accuracy to the tokens it
  marks (e.g. the answer of a recall task); without it every real next token counts.
  ``decode`` (needs ``batch`` with ``input_ids``): ``{"token_log_likelihood": float[n - 1]``
  (log p of each real token after the first), ``"log_likelihood": their sum}``.
  """
  name = "lm"
  label_fields = {}
  label_layout = "none"
  needs_causal_encoder = True

  def _targets_and_weights(self, outputs, batch):
    ids_BL, mask_BL = batch["input_ids"], batch["mask"]
    logits_BLV = outputs["logits"][:, :-1].astype(jnp.float32)
    w_BL = mask_BL[:, 1:] & mask_BL[:, :-1]
    if "target_mask" in batch:  # Optional: only these tokens are targets (e.g. the answer).
      w_BL = w_BL & batch["target_mask"][:, 1:]
    return logits_BLV, ids_BL[:, 1:], w_BL.astype(jnp.float32)

  def loss(self, outputs, batch):
    logits_BLV, targets_BL, w_BL = self._targets_and_weights(outputs, batch)
    ce_BL = losses.softmax_cross_entropy_with_integer_labels(logits_BLV, targets_BL)
    return jnp.sum(ce_BL * w_BL), jnp.sum(w_BL)

  def metrics(self, outputs, batch):
    loss_sum, weight = self.loss(outputs, batch)
    logits_BLV, targets_BL, w_BL = self._targets_and_weights(outputs, batch)
    correct = jnp.argmax(logits_BLV, -1) == targets_BL
    return {"loss_sum": loss_sum, "loss_weight": weight,
            "correct": jnp.sum(correct * w_BL), "count": jnp.sum(w_BL)}

  def validate(self, batch, example_ids=None):
    base.check_int_labels(batch["input_ids"], np.asarray(batch["mask"]),
                          self.config.vocab_size, "input_id", example_ids)

  def decode(self, outputs, label_names=None, batch=None):
    del label_names
    if batch is None or "input_ids" not in batch:
      raise ValueError("task 'lm' decodes the log-likelihood of given tokens: pass "
                       "batch={'input_ids': ..., 'mask': ...}")
    logp_BLV = losses.log_softmax_np(np.asarray(outputs["logits"])[:, :-1])
    ids_BL = np.asarray(batch["input_ids"])
    ll_BL = np.take_along_axis(logp_BLV, ids_BL[:, 1:, None], -1)[..., 0]
    lengths_B = base.real_lengths(batch, *ids_BL.shape)
    out = []
    for ll_L, n in zip(ll_BL, lengths_B):
      ll_n = ll_L[:max(int(n) - 1, 0)]
      out.append({"token_log_likelihood": ll_n, "log_likelihood": float(ll_n.sum())})
    return out
