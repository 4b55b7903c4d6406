"""TextCNN (Kim 2014): parallel 1-D convolutions, ReLU, masked max-over-time, dropout, linear.

Pads never count: inputs are zeroed at pads before the convolutions, so a window that reaches
past the end of a document sees zeros whether the row has 0 or 1000 pads (the same zeros
'SAME' padding puts beyond the end), and the max runs over real positions only. The result
is independent of the padded length and of whatever the pad positions hold.
"""
from __future__ import annotations

from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax.layers.partitioning import dense_inits
from longtext_jax.layers.pooling import masked_max

Array = jax.Array


class TextCNN(nn.Module):
  """Kim (2014) CNN over token states.

  Attributes:
    kernel_sizes: widths of the convolutions (one bank of ``num_filters`` per width).
    num_filters: filters per width.
    dropout_rate: dropout on the pooled features.
    num_outputs: width of the final linear layer; 0 returns the pooled features
      (float[B, len(kernel_sizes) * num_filters], after dropout) so that a task head can
      supply the linear layer.
    dtype: compute dtype.
    param_dtype: parameter dtype.
  """
  kernel_sizes: Sequence[int] = (3, 4, 5)
  num_filters: int = 100
  dropout_rate: float = 0.1
  num_outputs: int = 0
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x_BLD: Array, mask_BL: Array, deterministic: bool = True) -> Array:
    """Returns float[B, num_outputs] (or the pooled features when num_outputs == 0)."""
    if x_BLD.ndim != 3 or mask_BL.shape != x_BLD.shape[:2]:
      raise ValueError(f"TextCNN: x must be [B, L, D] and mask [B, L], got {x_BLD.shape} "
                       f"and {mask_BL.shape}")
    if not self.kernel_sizes or min(self.kernel_sizes) < 1:
      raise ValueError(f"TextCNN: kernel_sizes must be positive, got {self.kernel_sizes}")
    x_BLD = jnp.where(mask_BL[..., None], x_BLD, 0).astype(self.dtype)
    pooled = []
    for k in self.kernel_sizes:
      h_BLF = nn.Conv(self.num_filters, (k,), padding=[((k - 1) // 2, k // 2)],
                      dtype=self.dtype, param_dtype=self.param_dtype, name=f"conv_{k}",
                      **dense_inits(("conv_window", "embed", "filters")))(x_BLD)
      pooled.append(masked_max(nn.relu(h_BLF), mask_BL))
    f_BF = jnp.concatenate(pooled, axis=-1)
    f_BF = nn.Dropout(self.dropout_rate)(f_BF, deterministic=deterministic)
    if self.num_outputs:
      f_BF = nn.Dense(self.num_outputs, dtype=self.dtype, param_dtype=self.param_dtype,
                      **dense_inits(("filters", "classes")),
                      name="out")(f_BF)
    return f_BF
