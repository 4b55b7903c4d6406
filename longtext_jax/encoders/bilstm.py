"""Recurrent baselines: LSTM and BiLSTM encoders with exact padding handling."""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax.encoders.base import EncoderOutput, check_encoder_inputs, encoder_output
from longtext_jax.layers.partitioning import constrain, named
from longtext_jax.layers.pooling import pool

Array = jax.Array


def masked_recurrence(cell: nn.RNNCellBase, x_BLD: Array, mask_BL: Array, reverse: bool
                      ) -> tuple[Any, Array]:
  """Runs ``cell`` over the real tokens of each row, in order (``reverse``: last to first).

  At a masked position the carry passes through unchanged and the output is zero, so any mask
  (right or left padding, holes) reads exactly the real tokens, in their order, as if the
  row held nothing else; for right padding this is what ``nn.RNN`` with ``seq_lengths`` (and
  ``keep_order`` for the reverse direction) computed, with the same parameters: the cell is
  the caller's, so its variables sit where they did.

  Returns:
    (the carry after the row's last real token in the direction of travel (the initial,
    zero carry for an empty row), outputs float[B, L, U] in the input's order).
  """
  def step(cell, carry, xs):
    x_BD, m_B = xs
    new, y_BU = cell(carry, x_BD)
    keep = lambda a, b: jnp.where(m_B.reshape((-1,) + (1,) * (a.ndim - 1)), a, b)
    return jax.tree.map(keep, new, carry), keep(y_BU, jnp.zeros_like(y_BU))

  scan = nn.scan(step, variable_broadcast="params", split_rngs={"params": False},
                 in_axes=1, out_axes=1, reverse=reverse)
  carry = cell.initialize_carry(jax.random.key(0), x_BLD[:, 0].shape)
  return scan(cell, carry, (x_BLD, mask_BL))


class BiLSTM(nn.Module):
  """Stacked (bi)directional LSTM encoder.

  Each direction reads the real tokens only (:func:`masked_recurrence`: the carry passes
  through masked positions), so outputs do not depend on padding, wherever it is: the
  backward direction starts at each document's last real token. Each direction has
  D/2 units when bidirectional (D units otherwise), so ``sequence`` keeps width D.

  Attributes:
    num_layers: stacked layers; each takes the previous layer's outputs.
    bidirectional: False gives the unidirectional LSTM baseline.
    dropout_rate: dropout between layers.
    pooling: 'last' (final state(s) of each direction), 'mean', 'max' or 'sum' (masked).
  """
  input_kind = "embeddings"  # Called as encoder(x_BLD, mask_BL) (encoders/base.py).
  num_layers: int = 1
  bidirectional: bool = True
  dropout_rate: float = 0.0
  pooling: str = "last"
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x_BLD: Array, mask_BL: Array, deterministic: bool = True
               ) -> EncoderOutput:
    """Encodes a batch of embedded documents.

    Args:
      x_BLD: float[B, L, D] embeddings (the model's ``Inputs``).
      mask_BL: bool[B, L], True on real tokens (any pattern: masked positions are skipped).
      deterministic: False turns dropout on (needs a 'dropout' RNG).

    Returns:
      ``EncoderOutput``: ``sequence`` float32[B, L, D], zero at pads; ``pooled``
      float32[B, D]: the last states of both directions for ``pooling='last'``, else the
      masked ``pooling`` of ``sequence``.
    """
    check_encoder_inputs(x_BLD, mask_BL, type(self).__name__)
    d_model = x_BLD.shape[-1]
    if self.bidirectional and d_model % 2:
      raise ValueError(f"BiLSTM needs an even width to split over two directions, "
                       f"got {d_model}")
    units = d_model // 2 if self.bidirectional else d_model
    cell = lambda name: nn.OptimizedLSTMCell(
        units, dtype=self.dtype, param_dtype=self.param_dtype, name=name,
        kernel_init=named(nn.linear.default_kernel_init, ("embed", "hidden")),
        recurrent_kernel_init=named(nn.initializers.orthogonal(), ("recurrent", "hidden")),
        bias_init=named(nn.initializers.zeros_init(), ("hidden",)))
    h_BLD = x_BLD
    finals = None
    for i in range(self.num_layers):
      if i:
        h_BLD = nn.Dropout(self.dropout_rate)(h_BLD, deterministic=deterministic)
      (_, h_fwd_BU), out_fwd = masked_recurrence(cell(f"fwd_{i}"), h_BLD, mask_BL, False)
      finals = [h_fwd_BU]
      outs = [out_fwd]
      if self.bidirectional:
        (_, h_bwd_BU), out_bwd = masked_recurrence(cell(f"bwd_{i}"), h_BLD, mask_BL, True)
        finals.append(h_bwd_BU)
        outs.append(out_bwd)
      h_BLD = jnp.concatenate(outs, axis=-1)
      h_BLD = constrain(jnp.where(mask_BL[..., None], h_BLD, 0))
    if self.pooling == "last":
      pooled_BD = jnp.concatenate(finals, axis=-1)
      pooled_BD = jnp.where(jnp.any(mask_BL, -1, keepdims=True), pooled_BD, 0)
    else:
      pooled_BD = pool(self.pooling, h_BLD, mask_BL)
    return encoder_output(h_BLD, pooled_BD)


class LSTM(BiLSTM):
  """Unidirectional LSTM baseline (left to right)."""
  bidirectional: bool = False
