"""The (Bi)LSTM as it was before 2 Dec 2026 (commit b512595): flax's ``nn.RNN`` with
``seq_lengths``, which reads a row's first ``sum(mask)`` positions (right padding only). The
reference of tests/test_baselines.py and experiments/recurrent_speed.py (``--encoders=bilstm``)
for the masked recurrence that replaced it; same parameter tree."""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax.encoders.base import (EncoderOutput, check_encoder_inputs, check_prefix_mask,
                                        encoder_output)
from longtext_jax.layers.partitioning import constrain, named
from longtext_jax.layers.pooling import pool

Array = jax.Array


class BiLSTM(nn.Module):
  """Stacked (bi)directional LSTM encoder.

  The backward direction starts at each document's last real token (``nn.RNN`` with
  ``seq_lengths``), so outputs do not depend on how much padding follows. Each direction has
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
      mask_BL: bool[B, L], True on real tokens; each row's real tokens first
        (right padding: the recurrence reads a row's first ``sum(mask)`` positions, checked when
        the mask is concrete).
      deterministic: False turns dropout on (needs a 'dropout' RNG).

    Returns:
      ``EncoderOutput``: ``sequence`` float32[B, L, D], zero at pads; ``pooled``
      float32[B, D]: the last states of both directions for ``pooling='last'``, else the
      masked ``pooling`` of ``sequence``.
    """
    check_encoder_inputs(x_BLD, mask_BL, type(self).__name__)
    check_prefix_mask(mask_BL, type(self).__name__)  # seq_lengths = sum(mask).
    d_model = x_BLD.shape[-1]
    if self.bidirectional and d_model % 2:
      raise ValueError(f"BiLSTM needs an even width to split over two directions, "
                       f"got {d_model}")
    units = d_model // 2 if self.bidirectional else d_model
    lengths_B = jnp.sum(mask_BL, axis=-1).astype(jnp.int32)
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
      fwd = nn.RNN(cell(f"fwd_{i}"), return_carry=True, name=f"rnn_fwd_{i}")
      (_, h_fwd_BU), out_fwd = fwd(h_BLD, seq_lengths=lengths_B)
      finals = [h_fwd_BU]
      outs = [out_fwd]
      if self.bidirectional:
        bwd = nn.RNN(cell(f"bwd_{i}"), return_carry=True, reverse=True, keep_order=True,
                     name=f"rnn_bwd_{i}")
        (_, h_bwd_BU), out_bwd = bwd(h_BLD, seq_lengths=lengths_B)
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
