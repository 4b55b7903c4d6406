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


@jax.custom_jvp
def max_over_length(x_BLD: Array) -> Array:
  """``max(x, axis=-2)`` whose gradient goes to the position chosen in the forward pass.

  ``jnp.max``'s gradient finds the maximal positions again by comparing the input with the
  result (``x == max``). Under ``jit`` XLA may recompute the input inside a backward fusion
  instead of reading the buffer the forward reduced, and a recomputed LayerNorm (a fused
  reduction) can differ from the forward's in the last bit: the comparison then fails and
  the gradient is silently wrong. Measured: the Star-Transformer with its scan over cycles
  unrolled got satellite LayerNorm and output-projection gradients off by up to 100%
  (docs/benchmarks.md, "Unrolling the Star-Transformer's cycles"). Here, when
  differentiated, the forward also picks the position (``argmax``, an integer result) and
  the derivative takes the whole tangent/gradient from it, so no float is compared twice.
  The value is ``jnp.max``'s (undifferentiated calls run ``jnp.max`` alone); the gradient
  is the same except on exact ties, where it goes to the first maximal position (as
  PyTorch's ``max(dim)`` does) instead of being split evenly. A ``custom_jvp``: forward mode
  (``jax.jvp``, Hessian-vector products) works too, and the reverse mode is the transpose
  of a masked sum, an elementwise select.
  """
  return jnp.max(x_BLD, axis=-2)


@max_over_length.defjvp
def _max_over_length_jvp(primals, tangents):
  (x_BLD,), (t_BLD,) = primals, tangents
  out_BD = jnp.max(x_BLD, axis=-2)
  idx_BD = jnp.argmax(x_BLD, axis=-2)
  length = x_BLD.shape[-2]
  pos_1L1 = jnp.arange(length).reshape((1,) * (idx_BD.ndim - 1) + (length, 1))
  at_max_BLD = pos_1L1 == idx_BD[..., None, :]
  return out_BD, jnp.sum(jnp.where(at_max_BLD, t_BLD, 0), axis=-2).astype(t_BLD.dtype)


def masked_max(x_BLD: Array, mask_BL: Array) -> Array:
  """Max over real positions; 0 for a row without any real position.

  The gradient goes to the (first) maximal real position (:func:`max_over_length`).
  """
  neg = jnp.finfo(x_BLD.dtype).min
  out_BD = max_over_length(jnp.where(mask_BL[..., None], x_BLD, neg))
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
