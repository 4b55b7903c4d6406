"""Full-attention Transformer encoder (pre-LN): the papers' attention baseline."""
from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax.encoders.base import EncoderOutput, encoder_output, check_encoder_inputs
from longtext_jax.layers.attention import (IMPLEMENTATIONS, MultiHeadAttention,
                                          causal_mask, padding_mask)
from longtext_jax.layers.mlp import Mlp
from longtext_jax.layers.partitioning import constrain, named, norm_inits
from longtext_jax.layers.pooling import pool
from longtext_jax.layers.remat import remat_policy

Array = jax.Array


class TransformerBlock(nn.Module):
  """x + Attn(LN(x)); x + MLP(LN(x)). Returns (x, None) so it can be scanned."""
  num_heads: int
  head_dim: int | None
  mlp_dim: int
  dropout_rate: float
  use_rotary: bool
  deterministic: bool
  dtype: Any
  param_dtype: Any
  attention_impl: str | None = None

  @nn.compact
  def __call__(self, x_BLD: Array, mask_B1LL: Array, positions_BL: Array):
    norm = lambda name: nn.LayerNorm(dtype=jnp.float32, param_dtype=self.param_dtype,
                                     name=name, **norm_inits())
    x_BLD = constrain(x_BLD)
    h_BLD = norm("ln_attn")(x_BLD).astype(self.dtype)
    h_BLD = MultiHeadAttention(
        num_heads=self.num_heads, head_dim=self.head_dim, use_rotary=self.use_rotary,
        dtype=self.dtype, param_dtype=self.param_dtype,
        implementation=self.attention_impl, name="attn")(
            h_BLD, h_BLD, mask_B1LL, positions_BL, positions_BL)
    x_BLD = x_BLD + nn.Dropout(self.dropout_rate)(h_BLD, deterministic=self.deterministic)
    h_BLD = norm("ln_mlp")(x_BLD).astype(self.dtype)
    h_BLD = Mlp(self.mlp_dim, dropout_rate=self.dropout_rate, dtype=self.dtype,
                param_dtype=self.param_dtype, name="mlp")(
                    h_BLD, self.deterministic)
    x_BLD = x_BLD + nn.Dropout(self.dropout_rate)(h_BLD, deterministic=self.deterministic)
    return constrain(x_BLD), None


class Transformer(nn.Module):
  """Pre-LN Transformer encoder with full (O(L^2)) attention.

  Attributes:
    num_layers: depth.
    num_heads: attention heads.
    head_dim: width per head (default D // num_heads).
    mlp_dim: feed-forward width (default 4 D).
    dropout_rate: residual and feed-forward dropout.
    position: 'rotary' (default), 'learned' (absolute, up to ``max_len``) or 'none'.
    max_len: table size for learned positions; longer inputs raise an error.
    causal: causal self-attention (for language modelling).
    pooling: 'mean', 'max', 'sum' or 'first' (masked).
    scan_layers: run the layers through ``nn.scan`` (one compiled block, stacked params).
    remat: 'none' or a policy name from ``longtext_jax.layers.remat.REMAT_POLICIES``.
    scan_unroll: with ``scan_layers``, layers per iteration of the compiled loop over
      layers (``nn.scan``'s ``unroll``; ``num_layers``: no loop). Same parameters, values
      and gradients (to float rounding). Measured on a CPU (docs/benchmarks.md, "Unrolling
      the Transformer's layers"): no loop runs the forward 0.81-0.97x as fast as the loop,
      and the gradient 0.82-1.58x as fast (1.16-2.08x with ``train.cpu_scheduler='memory'``,
      with less memory), so the default keeps the loop (1). Leave it at 1 with ``remat``:
      unrolled, XLA merges the recomputation with the forward and the remat saves nothing.
    attention_impl: attention implementation (``layers.attention.IMPLEMENTATIONS``): None
      (on CPU 'heads_major', or 'blocked' for large logits; JAX's choice elsewhere),
      'heads_major', 'blocked', 'xla' or 'cudnn'.
    dtype: compute dtype (e.g. bfloat16); norms and softmax stay float32.
    param_dtype: parameter dtype.
  """
  input_kind = "embeddings"  # Called as encoder(x_BLD, mask_BL) (encoders/base.py).
  num_layers: int = 2
  num_heads: int = 4
  head_dim: int | None = None
  mlp_dim: int | None = None
  dropout_rate: float = 0.1
  position: str = "rotary"
  max_len: int = 4096
  causal: bool = False
  pooling: str = "mean"
  scan_layers: bool = True
  remat: str = "none"
  scan_unroll: int = 1
  attention_impl: str | None = None
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x_BLD: Array, mask_BL: Array, deterministic: bool = True
               ) -> EncoderOutput:
    """Encodes a batch of embedded documents.

    Args:
      x_BLD: float[B, L, D] embeddings (the model's ``Inputs``; cast to ``dtype``).
      mask_BL: bool[B, L], True on real tokens (any pattern).
      deterministic: False turns dropout on (needs a 'dropout' RNG).

    Returns:
      ``EncoderOutput``: ``sequence`` float32[B, L, D], zero at pads; ``pooled``
      float32[B, D]: the masked ``pooling`` of ``sequence``.
    """
    check_encoder_inputs(x_BLD, mask_BL, "Transformer")
    if self.scan_unroll < 1:
      raise ValueError(f"Transformer.scan_unroll must be >= 1, got {self.scan_unroll}")
    if self.position not in ("rotary", "learned", "none"):
      raise ValueError(f"Transformer.position must be rotary|learned|none, got "
                       f"{self.position!r}")
    if self.attention_impl not in IMPLEMENTATIONS:
      raise ValueError(f"Transformer.attention_impl must be one of {IMPLEMENTATIONS}, got "
                       f"{self.attention_impl!r}")
    batch, length, d_model = x_BLD.shape
    positions_BL = jnp.broadcast_to(jnp.arange(length)[None], (batch, length))
    if self.position == "learned":
      if length > self.max_len:
        raise ValueError(f"Transformer: length {length} exceeds max_len={self.max_len} "
                         "of the learned position table")
      pos_LD = self.param("pos_embedding", named(nn.initializers.normal(0.02),
                                                 ("position", "embed")),
                          (self.max_len, d_model), self.param_dtype)[:length]
      x_BLD = x_BLD + pos_LD[None].astype(x_BLD.dtype)
    mask_B1LL = padding_mask(mask_BL, mask_BL)
    if self.causal:
      mask_B1LL = mask_B1LL & causal_mask(length)

    block = TransformerBlock
    if self.remat != "none":
      block = nn.remat(block, policy=remat_policy(self.remat), prevent_cse=not self.scan_layers)
    kwargs = dict(num_heads=self.num_heads, head_dim=self.head_dim,
                  mlp_dim=self.mlp_dim or 4 * d_model, dropout_rate=self.dropout_rate,
                  use_rotary=self.position == "rotary", deterministic=deterministic,
                  dtype=self.dtype, param_dtype=self.param_dtype,
                  attention_impl=self.attention_impl)
    x_BLD = x_BLD.astype(self.dtype)
    if self.scan_layers:
      stack = nn.scan(block, variable_axes={"params": 0},
                      split_rngs={"params": True, "dropout": True},
                      in_axes=(nn.broadcast, nn.broadcast), length=self.num_layers,
                      unroll=self.scan_unroll, metadata_params={nn.PARTITION_NAME: "layers"})
      x_BLD, _ = stack(name="layers", **kwargs)(x_BLD, mask_B1LL, positions_BL)
    else:
      for i in range(self.num_layers):
        x_BLD, _ = block(name=f"layers_{i}", **kwargs)(x_BLD, mask_B1LL, positions_BL)
    x_BLD = nn.LayerNorm(dtype=jnp.float32, param_dtype=self.param_dtype,
                         name="ln_final", **norm_inits())(x_BLD)
    x_BLD = jnp.where(mask_BL[..., None], x_BLD, 0)
    return encoder_output(x_BLD, pool(self.pooling, x_BLD, mask_BL))
