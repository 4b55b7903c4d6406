"""Position-wise feed-forward block."""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax.layers import partitioning

ACTIVATIONS = {"gelu": nn.gelu, "relu": nn.relu, "swish": nn.swish, "tanh": jnp.tanh}


class Mlp(nn.Module):
  """Dense(hidden) -> activation -> dropout -> Dense(out)."""
  hidden_dim: int
  out_dim: int | None = None
  activation: str = "gelu"
  dropout_rate: float = 0.0
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  kernel_init: Any = nn.initializers.xavier_uniform()
  # Name parameter axes ('embed', 'mlp') always; False names them only inside
  # ``partitioning.logical_axis_names()`` (as the trainer does).
  logical_axes: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, deterministic: bool = True) -> jax.Array:
    out_dim = self.out_dim or x.shape[-1]
    names = lambda init, n: partitioning.named(init, n, force=self.logical_axes)

    def dense(n, name, axes):
      return nn.Dense(n, dtype=self.dtype, param_dtype=self.param_dtype,
                      kernel_init=names(self.kernel_init, axes),
                      bias_init=names(nn.initializers.zeros_init(), axes[1:]), name=name)

    h = ACTIVATIONS[self.activation](dense(self.hidden_dim, "wi", ("embed", "mlp"))(x))
    h = nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)
    return dense(out_dim, "wo", ("mlp", "embed"))(h)
