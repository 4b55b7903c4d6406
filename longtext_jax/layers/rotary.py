"""Rotary position embeddings (Su et al., RoFormer), half-split layout."""
from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def apply_rotary(x_BLHK: Array, positions_BL: Array, base: float = 10_000.0) -> Array:
  """Rotates feature pairs (k, k + K/2) of each head by position-dependent angles.

  Args:
    x_BLHK: queries or keys, float[B, L, H, K] with K even.
    positions_BL: integer or float positions, [B, L] (or broadcastable, e.g. [1, L]).
    base: wavelength base.

  Returns:
    The rotated array, same shape and dtype. Computed in float32.
  """
  head_dim = x_BLHK.shape[-1]
  if head_dim % 2:
    raise ValueError(f"rotary embeddings need an even head width, got {head_dim}")
  half = head_dim // 2
  inv_freq_F = 1.0 / (base ** (jnp.arange(half, dtype=jnp.float32) / half))
  angles_BLF = jnp.einsum("...l,f->...lf", positions_BL.astype(jnp.float32), inv_freq_F)
  sin_BL1F = jnp.sin(angles_BLF)[..., None, :]
  cos_BL1F = jnp.cos(angles_BLF)[..., None, :]
  x = x_BLHK.astype(jnp.float32)
  x1, x2 = x[..., :half], x[..., half:]
  out = jnp.concatenate([x1 * cos_BL1F - x2 * sin_BL1F, x2 * cos_BL1F + x1 * sin_BL1F], -1)
  return out.astype(x_BLHK.dtype)
