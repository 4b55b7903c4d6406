"""Position-wise feed-forward block."""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

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

  @nn.compact
  def __call__(self, x: jax.Array, deterministic: bool = True) -> jax.Array:
    out_dim = self.out_dim or x.shape[-1]
    dense = lambda n, name: nn.Dense(n, dtype=self.dtype, param_dtype=self.param_dtype,
                                     kernel_init=self.kernel_init, name=name)
    h = ACTIVATIONS[self.activation](dense(self.hidden_dim, "wi")(x))
    h = nn.Dropout(self.dropout_rate)(h, deterministic=deterministic)
    return dense(out_dim, "wo")(h)
