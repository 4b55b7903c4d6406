"""Dynamic loss scaling for float16 training (``config.optim.loss_scale``).

float16 has 10 mantissa bits and no exponent below 2^-24: gradients of a float16
computation smaller than that flush to zero, silently (a trained model that learned less).
The step multiplies the loss by ``scale`` before differentiating, so the float16
cotangents sit ``scale`` times higher, and divides the float32 gradients by ``scale``
before the optimizer. A step whose scaled gradient overflows (Inf/NaN while the loss is
finite) is skipped: parameters and optimizer state stay, ``scale`` halves, the step count
and the data advance. After :data:`GROWTH_INTERVAL` finite steps in a row ``scale``
doubles, so it settles just below the overflow point. At :data:`MIN_SCALE` a non-finite
gradient is a real failure and stops the run as in float32/bfloat16.

bfloat16 has float32's exponent range and needs none of this ('auto' scales only float16
computations); float32 and bfloat16 runs keep no loss scale in their state (checkpoints
unchanged).
"""
from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp

INITIAL_SCALE = 2.0 ** 15  # float16's largest power of two is 2^15.
GROWTH_INTERVAL = 2000  # Finite steps in a row before the scale doubles.
FACTOR = 2.0
MIN_SCALE = 1.0
MAX_SCALE = 2.0 ** 24

CHOICES = ("auto", "dynamic", "none")


@flax.struct.dataclass
class LossScale:
  """The scale and its history (a part of the TrainState, checkpointed with it).

  Attributes:
    scale: float32 scalar, what the loss is multiplied by.
    good_steps: int32 scalar, finite steps since the scale last changed.
  """
  scale: jax.Array
  good_steps: jax.Array


def enabled(config) -> bool:
  """Whether a run of ``config`` scales its loss: 'dynamic', or 'auto' with a float16
  compute dtype (``model.encoder.dtype``)."""
  choice = config.optim.loss_scale
  if choice not in CHOICES:
    raise ValueError(f"config.optim.loss_scale must be one of {'|'.join(CHOICES)}, got "
                     f"{choice!r}")
  if choice == "auto":
    return str(config.model.encoder.get("dtype", "float32")) == "float16"
  return choice == "dynamic"


def initial(scale: float = INITIAL_SCALE) -> LossScale:
  """A new run's loss scale."""
  return LossScale(scale=jnp.asarray(scale, jnp.float32),
                   good_steps=jnp.zeros((), jnp.int32))


def adjust(state: LossScale, finite: jax.Array, growth_interval: int = GROWTH_INTERVAL
           ) -> LossScale:
  """The scale for the next step: halved after a non-finite gradient (not below
  :data:`MIN_SCALE`), doubled after ``growth_interval`` finite ones (not above
  :data:`MAX_SCALE`)."""
  good = state.good_steps + 1
  grow = good >= growth_interval
  up = jnp.where(grow, jnp.minimum(state.scale * FACTOR, MAX_SCALE), state.scale)
  scale = jnp.where(finite, up, jnp.maximum(state.scale / FACTOR, MIN_SCALE))
  good_steps = jnp.where(finite & ~grow, good, 0).astype(jnp.int32)
  return LossScale(scale=scale.astype(jnp.float32), good_steps=good_steps)
