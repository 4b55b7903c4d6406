"""Optax optimizer from ``config.optim``: AdamW, warmup + decay, clipping, decay mask."""
from __future__ import annotations

from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
import optax

# Parameter names that never get weight decay: biases, normalisation scales/offsets, and the
# CRF's start/end scores (biases of the first and last tag; layers/crf.py). The CRF's
# transition matrix is decayed, as a kernel is.
NO_DECAY_NAMES = ("bias", "scale", "start", "end")


def learning_rate_schedule(optim_config, num_steps: int) -> optax.Schedule:
  """Linear warmup to the peak, then 'cosine', 'linear' or 'constant'.

  'constant' does not depend on ``num_steps`` (its warmup is ``warmup_steps`` even past the
  run's end), so a run extended by resuming with more steps continues on the same rates. A
  decaying schedule fits its warmup into the run: ``warmup_steps >= num_steps`` ramps over
  the whole run and never decays, which is logged as a warning.
  """
  peak = optim_config.learning_rate
  if optim_config.schedule == "constant":
    warmup = optim_config.warmup_steps
  else:
    warmup = min(optim_config.warmup_steps, num_steps)
    if optim_config.warmup_steps >= num_steps > 0:
      logging.warning("optim.warmup_steps=%d >= the run's %d steps: the %r learning rate "
                      "ramps up over the whole run and never decays; lower "
                      "optim.warmup_steps (or use optim.schedule='constant')",
                      optim_config.warmup_steps, num_steps, optim_config.schedule)
  end = peak * optim_config.end_lr_factor
  decay_steps = max(num_steps - warmup, 1)
  kind = optim_config.schedule
  if kind == "cosine":
    after = optax.cosine_decay_schedule(peak, decay_steps, alpha=optim_config.end_lr_factor)
  elif kind == "linear":
    after = optax.linear_schedule(peak, end, decay_steps)
  elif kind == "constant":
    after = optax.constant_schedule(peak)
  else:
    raise ValueError(f"config.optim.schedule must be cosine|linear|constant, got {kind!r}")
  if warmup == 0:
    return after
  return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), after], [warmup])


def decay_mask(params: Any) -> Any:
  """True for leaves that get weight decay (kernels, embeddings), False for biases/norms."""
  def keep(path, _):
    # The last dict key names the parameter (boxed params add a trailing '.value').
    keys = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
    return not keys or keys[-1] not in NO_DECAY_NAMES
  return jax.tree_util.tree_map_with_path(keep, params)


def make_optimizer(optim_config, num_steps: int
                   ) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """The optimizer of ``config.optim``: clipping, AdamW (no decay on biases and norm
  scales) and the learning-rate schedule.

  Args:
    optim_config: ``config.optim``.
    num_steps: the run's length (the schedule decays over it).

  Returns:
    ``(tx, schedule)``.

  Raises:
    ValueError: ``optim.mu_dtype`` is not float32|bfloat16.
  """
  schedule = learning_rate_schedule(optim_config, num_steps)
  parts = []
  if optim_config.clip_norm:
    parts.append(optax.clip_by_global_norm(optim_config.clip_norm))
  mu_dtype = {"float32": None, "bfloat16": jnp.bfloat16}.get(optim_config.mu_dtype, "bad")
  if mu_dtype == "bad":
    raise ValueError(f"config.optim.mu_dtype must be float32|bfloat16, got "
                     f"{optim_config.mu_dtype!r}")
  parts.append(optax.adamw(schedule, b1=optim_config.b1, b2=optim_config.b2,
                           eps=optim_config.eps, weight_decay=optim_config.weight_decay,
                           mask=decay_mask, mu_dtype=mu_dtype))
  return optax.chain(*parts), schedule
