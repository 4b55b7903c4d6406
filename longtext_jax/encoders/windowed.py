"""Windowed attention: the floor RAN is measured against (docs/ran.md, docs/benchmarks.md).

RAN's token path without the global perception cell or memory review: per layer, LayerNorm,
q/k/v projections, multi-head attention restricted to non-overlapping windows of
``window_size`` tokens (rotary positions restarting in every window), output projection and
the parameter-free standardisation (SN) of RAN's Eq. 5. No information crosses a window
boundary, so this is also the "no recurrence" ablation of RAN on long-range tasks.

``pooled`` is the max over real tokens of the last layer's outputs before their dropout
(``pool_dropped`` for after); pads never reach it or ``sequence``.
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax.encoders.base import EncoderOutput, encoder_output, check_encoder_inputs
from longtext_jax.encoders.ran import HeadsIn, HeadsOut, blocked_window_attention, standardize
from longtext_jax.layers.partitioning import norm_inits
from longtext_jax.layers.pooling import masked_max
from longtext_jax.layers.rotary import apply_rotary

Array = jax.Array


class WindowedAttention(nn.Module):
  """Multi-head self-attention inside non-overlapping windows (the last one padded).

  Attributes:
    num_layers: stacked windowed-attention layers.
    num_heads: attention heads (head width = D / num_heads).
    window_size: W, tokens per window.
    attention_block: windows per attention call (0 = all at once; see
      ``ran.blocked_window_attention``).
    dropout_rate: dropout on each layer's output (training only).
    pool_dropped: max-pool the last layer's outputs after their dropout instead of before
      (default). Training only. The dropped zeros floor a training-time max at 0, which
      evaluation never sees (RAN's ``pool_dropped``, docs/ran.md).
  """
  input_kind = "embeddings"  # Called as encoder(x_BLD, mask_BL) (encoders/base.py).
  num_layers: int = 2
  num_heads: int = 4
  window_size: int = 64
  attention_block: int = 0
  dropout_rate: float = 0.0
  pool_dropped: bool = False
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x_BLD: Array, mask_BL: Array, deterministic: bool = True
               ) -> EncoderOutput:
    """Encodes a batch of embedded documents.

    Args:
      x_BLD: float[B, L, D] embeddings (the model's ``Inputs``).
      mask_BL: bool[B, L], True on real tokens (any pattern).
      deterministic: False turns dropout on (needs a 'dropout' RNG).

    Returns:
      ``EncoderOutput``: ``sequence`` float32[B, L, D], zero at pads; ``pooled``
      float32[B, D]: the masked max of the last layer's outputs (before their dropout
      unless ``pool_dropped``).
    """
    check_encoder_inputs(x_BLD, mask_BL, "WindowedAttention")  # Rank, shape, bool mask.
    b, length, d = x_BLD.shape
    w = self.window_size
    n = -(-length // w)
    x_BNWD = jnp.pad(x_BLD, ((0, 0), (0, n * w - length), (0, 0))).reshape(b, n, w, d)
    m_BNW = jnp.pad(mask_BL, ((0, 0), (0, n * w - length))).reshape(b, n, w)
    pos = jnp.arange(1, w + 1)[None, None]
    vis_BNWW = jnp.broadcast_to(m_BNW[:, :, None, :], (b, n, w, w))
    for i in range(self.num_layers):
      h = nn.LayerNorm(epsilon=1e-6, dtype=jnp.float32, param_dtype=self.param_dtype,
                       name=f"ln_{i}", **norm_inits())(x_BNWD).astype(self.dtype)
      q, k, v = (HeadsIn(self.num_heads, dtype=self.dtype, param_dtype=self.param_dtype,
                         name=f"{t}_{i}")(h) for t in "qkv")
      q, k = apply_rotary(q, pos), apply_rotary(k, pos)
      att = blocked_window_attention(q, k, v, vis_BNWW, self.attention_block)
      att = att.reshape((b, n, w) + q.shape[-2:])
      out = HeadsOut(dtype=self.dtype, param_dtype=self.param_dtype, name=f"o_{i}")(att, d)
      clean_BNWD = standardize(out, 1e-6).astype(self.dtype)
      x_BNWD = nn.Dropout(self.dropout_rate)(clean_BNWD, deterministic=deterministic)
    unwindow = lambda x: jnp.where(mask_BL[..., None], x.reshape(b, n * w, d)[:, :length], 0)
    seq = unwindow(x_BNWD)
    # Dropout off (evaluation, rate 0) hands back its input: nothing to unwindow twice.
    pool_in = seq if self.pool_dropped or clean_BNWD is x_BNWD else unwindow(clean_BNWD)
    self.sow("intermediates", "pool_input", pool_in)
    # masked_max: its gradient goes to the position its forward chose (layers/pooling.py).
    return encoder_output(seq, masked_max(pool_in, mask_BL))
