"""Regression of real-valued targets from the pooled vector."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from longtext_jax.tasks import base, losses
from longtext_jax.tasks.heads import PooledHead


@dataclasses.dataclass(frozen=True)
class Regression(base.Task):
  """Regression of ``target`` float32[B, Y] from the pooled vector; MSE (mean over Y).

  Head: pooled -> ``predictions`` float[B, Y] (``config.num_outputs`` = Y).
  ``decode``: ``{"value": float[Y]}`` per example.
  """
  name = "regression"
  output_key = "predictions"
  label_fields = {"target": "float32"}
  label_layout = "targets"
  base_metric_names = ("loss", "mse")

  def head(self):
    return PooledHead(self.config.num_outputs, self.config.head_hidden_dim,
                      self.config.head_dropout)

  def loss(self, outputs, batch):
    w_B = losses.example_weight(batch)
    se_B = jnp.mean(jnp.square(outputs["predictions"].astype(jnp.float32)
                               - batch["target"].astype(jnp.float32)), -1)
    return jnp.sum(se_B * w_B), jnp.sum(w_B)

  def summarize(self, sums):
    return {"loss": losses.ratio(sums["loss_sum"], sums["loss_weight"]),
            "mse": losses.ratio(sums["loss_sum"], sums["loss_weight"])}

  def validate(self, batch, example_ids=None):
    target = np.asarray(batch["target"])
    if target.shape[-1] != self.config.num_outputs:
      raise ValueError(f"target has {target.shape[-1]} outputs, the task has "
                       f"num_outputs={self.config.num_outputs}")
    bad = ~np.isfinite(target).all(-1)
    if np.any(bad):
      row = int(np.argwhere(bad)[0][0])
      raise ValueError(f"{base.example_name(example_ids, row)}: target is not finite")

  def decode(self, outputs, label_names=None, batch=None):
    del label_names, batch
    return [{"value": v_Y} for v_Y in np.asarray(outputs["predictions"], np.float64)]
