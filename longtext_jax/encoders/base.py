"""The encoder contract shared by every architecture in longtext_jax.

Every encoder is a ``flax.linen.Module`` called as::

    out = encoder(x_BLD, mask_BL, deterministic=True)

with ``x_BLD: float[B, L, D]`` (already embedded) and ``mask_BL: bool[B, L]`` (True on
real tokens), returning :class:`EncoderOutput` with ``sequence: float[B, L, D]`` (zero on
padding) and ``pooled: float[B, D]`` (a summary that never sees padding).

Naming convention used across the library: a tensor's name ends with its shape letters,
``x_BLD``, ``mask_BL``, ``att_BHLL`` (B batch, L length, D width, H heads, K head width,
W window, N windows, C classes, V vocabulary).
"""
from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp

Array = jax.Array


@flax.struct.dataclass
class EncoderOutput:
  """What every encoder returns.

  Attributes:
    sequence: float[B, L, D], contextual token states; exactly zero at padded positions.
    pooled: float[B, D], one vector per document computed from real tokens only.
  """
  sequence: Array
  pooled: Array


def check_encoder_inputs(x_BLD: Any, mask_BL: Any, name: str) -> None:
  """Raises a clear ValueError when inputs do not follow the encoder contract."""
  if x_BLD.ndim != 3:
    raise ValueError(f"{name}: x must be float[B, L, D], got shape {x_BLD.shape}")
  if mask_BL.shape != x_BLD.shape[:2]:
    raise ValueError(
        f"{name}: mask must be bool[B, L] = {x_BLD.shape[:2]}, got {mask_BL.shape}")
  if mask_BL.dtype != jnp.bool_:
    raise ValueError(f"{name}: mask must be bool, got {mask_BL.dtype}")
