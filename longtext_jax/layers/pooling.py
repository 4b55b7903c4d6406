"""Masked pooling over the length axis: padding never contributes."""
from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def masked_sum(x_BLD: Array, mask_BL: Array) -> Array:
  """Sum over real positions: float[..., L, D], bool[..., L] -> float[..., D]."""
  return jnp.sum(jnp.where(mask_BL[..., None], x_BLD, 0), axis=-2)


def masked_mean(x_BLD: Array, mask_BL: Array) -> Array:
  """Mean over real positions; 0 for a row without any real position."""
  count_B1 = jnp.sum(mask_BL, axis=-1, keepdims=True).astype(x_BLD.dtype)
  return masked_sum(x_BLD, mask_BL) / jnp.maximum(count_B1, 1)


def masked_max(x_BLD: Array, mask_BL: Array) -> Array:
  """Max over real positions; 0 for a row without any real position."""
  neg = jnp.finfo(x_BLD.dtype).min
  out_BD = jnp.max(jnp.where(mask_BL[..., None], x_BLD, neg), axis=-2)
  return jnp.where(jnp.any(mask_BL, axis=-1, keepdims=True), out_BD, 0)


def masked_first(x_BLD: Array, mask_BL: Array) -> Array:
  """The first position's state (a [CLS]-style summary), 0 when it is padding."""
  return jnp.where(mask_BL[:, :1], x_BLD[:, 0], 0)


POOLINGS = {"mean": masked_mean, "max": masked_max, "sum": masked_sum,
            "first": masked_first}


def pool(kind: str, x_BLD: Array, mask_BL: Array) -> Array:
  """Masked pooling by name: one of ``mean``, ``max``, ``sum``, ``first``."""
  if kind not in POOLINGS:
    raise ValueError(f"unknown pooling {kind!r}; choose one of {sorted(POOLINGS)}")
  return POOLINGS[kind](x_BLD, mask_BL)
