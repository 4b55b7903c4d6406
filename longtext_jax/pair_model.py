"""Sentence-pair model (NLI): premise and hypothesis through ONE shared encoder.

Batch format (no change to the data path): ``input_ids`` (or ``features``) holds the
premise followed by the hypothesis, ``token_type_ids`` is 0 on the premise and 1 on the
hypothesis, ``mask`` is True on both. The model moves the hypothesis to the front of its
own row (an O(L) shift per row), encodes premises and hypotheses in one call of the encoder
on a [2B, L, D] batch, and feeds the Star-Transformer paper's features
``[y1, y2, |y1 - y2|, y1 * y2]`` (y = the encoder's ``pooled``) to the task's pooled head.

``model.build_model`` returns a :class:`PairModel` for task ``pair_classification``.
"""
from __future__ import annotations

from typing import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax.encoders.base import EncoderOutput

Array = jax.Array


def split_pair(x_BLD: Array, mask_BL: Array, token_type_BL: Array
               ) -> tuple[Array, Array, Array, Array]:
  """Premise and hypothesis, each starting at position 0 of its own row.

  Args:
    x_BLD: embedded premise-then-hypothesis rows.
    mask_BL: True on real tokens of both sentences.
    token_type_BL: 0 on the premise, 1 on the hypothesis.

  Returns:
    (x_premise_BLD, mask_premise_BL, x_hypothesis_BLD, mask_hypothesis_BL); the premise
    keeps its row (the hypothesis part masked out), the hypothesis is shifted left by the
    premise's length.
  """
  length = x_BLD.shape[1]
  prem_BL = mask_BL & (token_type_BL == 0)
  hyp_BL = mask_BL & (token_type_BL == 1)
  n_prem_B = jnp.sum(prem_BL, axis=-1).astype(jnp.int32)
  src_BL = jnp.arange(length)[None, :] + n_prem_B[:, None]
  inside_BL = src_BL < length
  src_BL = jnp.minimum(src_BL, length - 1)
  x_hyp_BLD = jnp.take_along_axis(x_BLD, src_BL[..., None], axis=1)
  hyp_mask_BL = jnp.take_along_axis(hyp_BL, src_BL, axis=1) & inside_BL
  x_hyp_BLD = jnp.where(hyp_mask_BL[..., None], x_hyp_BLD, 0)
  return x_BLD, prem_BL, x_hyp_BLD, hyp_mask_BL


def pair_features(y1_BD: Array, y2_BD: Array) -> Array:
  """[y1, y2, |y1 - y2|, y1 * y2]: float[B, 4 D]."""
  return jnp.concatenate([y1_BD, y2_BD, jnp.abs(y1_BD - y2_BD), y1_BD * y2_BD], axis=-1)


class PairModel(nn.Module):
  """Inputs -> shared encoder on both sentences -> pair features -> task head.

  Same submodule names as ``model.Model`` (``inputs``, ``encoder``, ``head``), so warm
  starts from a single-sentence run copy the encoder directly.
  """
  inputs: nn.Module
  encoder: nn.Module
  head: nn.Module
  output_key: str = "logits"

  def __call__(self, batch: Mapping[str, Array], train: bool = False) -> dict[str, Array]:
    if "token_type_ids" not in batch:
      raise ValueError("PairModel needs batch['token_type_ids'] (0 premise, 1 hypothesis)")
    x_BLD = self.inputs(batch, deterministic=not train)
    x1, m1, x2, m2 = split_pair(x_BLD, batch["mask"], batch["token_type_ids"])
    batch_size = x_BLD.shape[0]
    enc = self.encoder(jnp.concatenate([x1, x2], 0), jnp.concatenate([m1, m2], 0),
                       deterministic=not train)
    feats_BF = pair_features(enc.pooled[:batch_size], enc.pooled[batch_size:])
    seq_BLD = enc.sequence[:batch_size]
    out = self.head(EncoderOutput(sequence=seq_BLD, pooled=feats_BF),
                    deterministic=not train, embed=None)
    return {self.output_key: out, "sequence": seq_BLD, "pooled": feats_BF}
