"""Heads: flax modules mapping an :class:`EncoderOutput` to what a task's loss reads.

Every head is called as ``head(enc, deterministic=True, embed=None)``; ``embed`` is the
model's input module when the inputs are token embeddings (the LM heads tie to it).
"""
from __future__ import annotations

from typing import Any

import flax.linen as nn

from longtext_jax.encoders.base import EncoderOutput
from longtext_jax.layers import crf as crf_lib
from longtext_jax.layers.partitioning import dense_inits, named, norm_inits


class PooledHead(nn.Module):
  """Optional MLP then Dense(num_outputs) on the pooled vector: float[B, D] -> float[B, O].

  Attributes:
    num_outputs: O, the width of the output (classes, 1 logit, regression targets).
    hidden_dim: width of the GELU hidden layer; 0 for none.
    dropout_rate: dropout before each Dense.
  """
  num_outputs: int
  hidden_dim: int = 0
  dropout_rate: float = 0.0

  @nn.compact
  def __call__(self, enc: EncoderOutput, deterministic: bool = True, embed: Any = None):
    """logits float[B, O] from ``enc.pooled`` float[B, D]."""
    del embed
    h_BD = enc.pooled
    if self.hidden_dim:
      h_BD = nn.Dropout(self.dropout_rate)(h_BD, deterministic=deterministic)
      h_BD = nn.gelu(nn.Dense(self.hidden_dim, name="hidden",
                              **dense_inits(("embed", "mlp")))(h_BD))
    h_BD = nn.Dropout(self.dropout_rate)(h_BD, deterministic=deterministic)
    in_axis = "mlp" if self.hidden_dim else "embed"
    return nn.Dense(self.num_outputs, name="out", **dense_inits((in_axis, "classes")))(h_BD)


class TokenHead(nn.Module):
  """Dense(num_outputs) per token on the sequence states: float[B, L, D] -> float[B, L, C]."""
  num_outputs: int
  dropout_rate: float = 0.0

  @nn.compact
  def __call__(self, enc: EncoderOutput, deterministic: bool = True, embed: Any = None):
    """logits float[B, L, C] from ``enc.sequence`` float[B, L, D]."""
    del embed
    h_BLD = nn.Dropout(self.dropout_rate)(enc.sequence, deterministic=deterministic)
    return nn.Dense(self.num_outputs, name="out", **dense_inits(("embed", "classes")))(h_BLD)


class LanguageModelHead(nn.Module):
  """Dense -> GELU -> LayerNorm -> tied input embedding (``embed.attend``) + bias.

  Maps the sequence float[B, L, D] to vocabulary logits float[B, L, V]. With
  ``tie_embeddings`` it needs ``embed`` (token inputs).
  """
  vocab_size: int
  tie_embeddings: bool = True

  @nn.compact
  def __call__(self, enc: EncoderOutput, deterministic: bool = True, embed: Any = None):
    """logits float[B, L, V] from ``enc.sequence`` float[B, L, D]."""
    del deterministic
    d_model = enc.sequence.shape[-1]
    h_BLD = nn.gelu(nn.Dense(d_model, name="transform",
                             **dense_inits(("embed", "mlp")))(enc.sequence))
    h_BLD = nn.LayerNorm(name="ln", **norm_inits(("mlp",)))(h_BLD)
    if self.tie_embeddings:
      if embed is None:
        raise ValueError("tied LM head needs token inputs (config.model.input='tokens')")
      logits_BLV = embed.attend(h_BLD)
    else:
      logits_BLV = nn.Dense(self.vocab_size, use_bias=False, name="decoder",
                            **dense_inits(("embed", "vocab")))(h_BLD)
    bias_V = self.param("bias", named(nn.initializers.zeros, ("vocab",)), (self.vocab_size,))
    return logits_BLV + bias_V[None, None]


class CrfHead(nn.Module):
  """Per-token emissions (Dense) plus the CRF's transition/start/end scores.

  Returns ``{"emissions": float[B, L, C], "transitions": float[C, C], "start": float[C],
  "end": float[C]}``.
  """
  num_tags: int
  dropout_rate: float = 0.0

  @nn.compact
  def __call__(self, enc: EncoderOutput, deterministic: bool = True, embed: Any = None):
    """Emissions float[B, L, C] and the CRF scores, from ``enc.sequence`` float[B, L, D]."""
    del embed
    h_BLD = nn.Dropout(self.dropout_rate)(enc.sequence, deterministic=deterministic)
    transitions_CC, start_C, end_C = crf_lib.CRF(self.num_tags, name="crf")()
    return {"emissions": nn.Dense(self.num_tags, name="out",
                                  **dense_inits(("embed", "classes")))(h_BLD),
            "transitions": transitions_CC, "start": start_C, "end": end_C}
