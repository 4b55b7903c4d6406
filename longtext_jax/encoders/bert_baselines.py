"""Baselines of the long-document benchmark (Park et al. 2022) that ChunkBERT is compared with.

All take content word pieces without special tokens, ``encoder(input_ids_BL, mask_BL,
deterministic=True) -> EncoderOutput`` (``config.model.input = 'ids'``), and own one
:class:`~longtext_jax.encoders.bert.Bert` under the param name ``bert``:

* :class:`BertFirst`: BERT on ``[CLS]`` + the first ``max_length - 2`` word pieces + ``[SEP]``;
  pooled = BERT's pooler output ([CLS]).
* :class:`BertRandom`: BERT+Random: the same first input plus a second 512-position input
  made of word pieces chosen from the rest of the document; the two pooler outputs are
  concatenated.
* :class:`ToBert`: ToBERT: overlapping segments (200 positions, 50 shared word pieces), each
  encoded by BERT (pooler output), a small Transformer over the segment vectors, and a mean over
  real segments only (the reference implementation also averages pad segments; not here).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax.encoders.base import EncoderOutput, encoder_output
from longtext_jax.encoders.bert import BertEncoderBase, with_specials
from longtext_jax.encoders.transformer import Transformer

Array = jax.Array


def _scatter_back(states_BKD: Array, positions_BK: Array, valid_BK: Array,
                  length: int) -> Array:
  """float[B, L, D] with row b's states written at ``positions`` (zero elsewhere)."""
  batch, _, d_model = states_BKD.shape
  out_BLD = jnp.zeros((batch, length, d_model), states_BKD.dtype)
  rows_BK = jnp.broadcast_to(jnp.arange(batch)[:, None], positions_BK.shape)
  safe_BK = jnp.where(valid_BK, positions_BK, length)  # Out of range: dropped.
  return out_BLD.at[rows_BK, safe_BK].set(states_BKD, mode="drop")


class BertFirst(BertEncoderBase):
  """BERT on the first ``max_length`` positions ([CLS] + first max_length - 2 pieces + [SEP]).

  ``sequence``: the last layer's states of the encoded word pieces (zero beyond them and at
  pads); ``pooled``: the pooler output, float[B, D].

  Attributes:
    max_length: BERT input length including [CLS]/[SEP] (512).
  """
  max_length: int = 512

  @nn.compact
  def __call__(self, input_ids_BL: Array, mask_BL: Array, deterministic: bool = True
               ) -> EncoderOutput:
    """Encodes a batch of word-piece ids without [CLS]/[SEP] (this encoder adds them).

    Args:
      input_ids_BL: int[B, L] content word pieces, right-padded.
      mask_BL: bool[B, L], True on real word pieces, which come first in each row.
      deterministic: False turns dropout on (needs a 'dropout' RNG).

    Returns:
      ``EncoderOutput``: ``sequence`` float32[B, L, hidden_size], zero at pads and beyond
      the first ``max_length - 2`` pieces;
      ``pooled`` float32[B, hidden_size]: the pooler output of [CLS]
      (zero for an empty row).
    """
    self.check_ids(input_ids_BL, mask_BL, "BertFirst")
    length = input_ids_BL.shape[1]
    total = min(length + 2, self.max_length)
    ids_BT, mask_BT = with_specials(input_ids_BL, mask_BL, self.cls_id, self.sep_id, total)
    out = self.make_bert(use_pooler=True)(ids_BT, mask_BT, deterministic=deterministic)
    kept = total - 2
    seq_BKD = out.sequence[:, 1:1 + kept]
    seq_BLD = jnp.pad(seq_BKD, ((0, 0), (0, length - kept), (0, 0)))
    seq_BLD = jnp.where(mask_BL[..., None], seq_BLD, 0)
    pooled_BD = jnp.where(jnp.any(mask_BL, -1, keepdims=True), out.pooled, 0)
    return encoder_output(seq_BLD, pooled_BD)


class BertRandom(BertEncoderBase):
  """BERT+Random: [CLS] first pieces [SEP] and [CLS] pieces chosen from the rest [SEP].

  The second input takes up to ``max_length - 2`` word pieces from after the first input's,
  in document order: chosen uniformly at random without replacement while training (the
  'dropout' RNG stream), evenly spaced at evaluation (deterministic). A document that fits
  the first input has an empty second input whose pooled vector is zero. Both inputs go
  through the same BERT; ``pooled`` = [pooler(first); pooler(second)], float[B, 2 D];
  ``sequence`` holds the first input's states (as :class:`BertFirst`) plus the second's at
  the positions it picked.

  Attributes:
    max_length: BERT input length of each input (512).
  """
  max_length: int = 512

  def second_positions(self, mask_BL: Array, deterministic: bool) -> tuple[Array, Array]:
    """(positions int[B, K], valid bool[B, K]) of the second input's word pieces."""
    batch, length = mask_BL.shape
    body = self.max_length - 2
    k = max(1, min(body, length - body))
    n_B1 = jnp.sum(mask_BL, -1, keepdims=True)
    rest_B1 = jnp.maximum(n_B1 - body, 0)
    count_B1 = jnp.minimum(rest_B1, k)
    i_K = jnp.arange(k)[None]
    valid_BK = i_K < count_B1
    if deterministic:
      pos_BK = body + (i_K * rest_B1) // jnp.maximum(count_B1, 1)
    else:
      pos_L = jnp.arange(length)[None]
      eligible_BL = mask_BL & (pos_L >= body)
      keys_BL = jax.random.uniform(self.make_rng("dropout"), (batch, length))
      keys_BL = jnp.where(eligible_BL, keys_BL, 2.0)
      chosen_BK = jnp.argsort(keys_BL, axis=-1)[:, :k]
      pos_BK = jnp.sort(jnp.where(valid_BK, chosen_BK, length), axis=-1)
    return jnp.where(valid_BK, pos_BK, 0), valid_BK

  @nn.compact
  def __call__(self, input_ids_BL: Array, mask_BL: Array, deterministic: bool = True
               ) -> EncoderOutput:
    """Encodes a batch of word-piece ids without [CLS]/[SEP] (this encoder adds them).

    Args:
      input_ids_BL: int[B, L] content word pieces, right-padded.
      mask_BL: bool[B, L], True on real word pieces, which come first in each row.
      deterministic: False turns dropout on and picks the second input's pieces at random
        (both from the 'dropout' RNG).

    Returns:
      ``EncoderOutput``: ``sequence`` float32[B, L, hidden_size], zero at pads and at
      pieces neither input holds;
      ``pooled`` float32[B, 2 x hidden_size]: the two inputs' pooler outputs,
      concatenated (the second zero when the document fits the first).
    """
    self.check_ids(input_ids_BL, mask_BL, "BertRandom")
    batch, length = input_ids_BL.shape
    bert = self.make_bert(use_pooler=True)
    total = min(length + 2, self.max_length)
    ids1_BT, mask1_BT = with_specials(input_ids_BL, mask_BL, self.cls_id, self.sep_id, total)
    out1 = bert(ids1_BT, mask1_BT, deterministic=deterministic)
    pos_BK, valid_BK = self.second_positions(mask_BL, deterministic)
    ids2_BK = jnp.take_along_axis(input_ids_BL, pos_BK, axis=1)
    ids2_BT, mask2_BT = with_specials(ids2_BK, valid_BK, self.cls_id, self.sep_id,
                                      pos_BK.shape[1] + 2)
    out2 = bert(ids2_BT, mask2_BT, deterministic=deterministic)
    kept = total - 2
    seq_BLD = jnp.pad(out1.sequence[:, 1:1 + kept], ((0, 0), (0, length - kept), (0, 0)))
    seq_BLD = seq_BLD + _scatter_back(out2.sequence[:, 1:-1], pos_BK, valid_BK, length)
    seq_BLD = jnp.where(mask_BL[..., None], seq_BLD, 0)
    pooled1_BD = jnp.where(jnp.any(mask_BL, -1, keepdims=True), out1.pooled, 0)
    pooled2_BD = jnp.where(jnp.any(valid_BK, -1, keepdims=True), out2.pooled, 0)
    return encoder_output(seq_BLD,
                          jnp.concatenate([pooled1_BD, pooled2_BD], axis=-1))


class ToBert(BertEncoderBase):
  """ToBERT (Pappagari et al. 2019): BERT on overlapping segments, Transformer over them.

  Segment j holds word pieces ``[j * s, j * s + segment_length - 2)`` with stride
  ``s = segment_length - 2 - overlap``, wrapped in [CLS]/[SEP]; all segments go through BERT
  in one batched call. Segment vectors (pooler outputs) of real segments feed a post-hoc
  Transformer (no positions, ``chunk_layers`` layers, ``chunk_heads`` heads, masked to real
  segments); ``pooled`` is the mean over real segments only, float[B, D]. ``sequence``: each
  word piece's state from segment ``pos // s`` (the first one holding it; the last
  real segment for the document's tail).

  Attributes:
    segment_length: BERT input length per segment including [CLS]/[SEP] (200).
    overlap: word pieces shared by consecutive segments (50).
    chunk_layers, chunk_heads, chunk_dropout_rate: the Transformer over segment vectors.
  """
  segment_length: int = 200
  overlap: int = 50
  chunk_layers: int = 1
  chunk_heads: int = 2
  chunk_dropout_rate: float = 0.1

  def num_segments(self, length: int) -> int:
    """Segments BERT encodes for ``length`` (padded) positions of word pieces."""
    body = self.segment_length - 2
    stride = body - self.overlap
    if stride < 1:
      raise ValueError(f"ToBert: overlap={self.overlap} must be < segment_length - 2 = {body}")
    return max(1, -(-max(length - self.overlap, 1) // stride))

  @nn.compact
  def __call__(self, input_ids_BL: Array, mask_BL: Array, deterministic: bool = True
               ) -> EncoderOutput:
    """Encodes a batch of word-piece ids without [CLS]/[SEP] (this encoder adds them).

    Args:
      input_ids_BL: int[B, L] content word pieces, right-padded.
      mask_BL: bool[B, L], True on real word pieces, which come first in each row.
      deterministic: False turns dropout on (needs a 'dropout' RNG).

    Returns:
      ``EncoderOutput``: ``sequence`` float32[B, L, hidden_size], zero at pads;
      ``pooled`` float32[B, hidden_size]: the mean over real segments of the
      Transformer over segment vectors.
    """
    self.check_ids(input_ids_BL, mask_BL, "ToBert")
    body = self.segment_length - 2
    stride = body - self.overlap
    batch, length = input_ids_BL.shape
    num_segments = self.num_segments(length)
    padded = (num_segments - 1) * stride + body
    ids_BP = jnp.pad(input_ids_BL, ((0, 0), (0, max(padded - length, 0))))
    mask_BP = jnp.pad(mask_BL, ((0, 0), (0, max(padded - length, 0))))
    idx_NW = (jnp.arange(num_segments) * stride)[:, None] + jnp.arange(body)[None]
    seg_ids_XW = ids_BP[:, idx_NW].reshape(batch * num_segments, body)
    seg_mask_XW = mask_BP[:, idx_NW].reshape(batch * num_segments, body)
    ids_XT, mask_XT = with_specials(seg_ids_XW, seg_mask_XW, self.cls_id, self.sep_id,
                                    body + 2)
    out = self.make_bert(use_pooler=True)(ids_XT, mask_XT, deterministic=deterministic)
    d_model = out.pooled.shape[-1]
    seg_BND = out.pooled.reshape(batch, num_segments, d_model)
    # Segment j is real when it holds a word piece that segment j - 1 does not (so the
    # segment count depends on the document, never on the padded length).
    n_B1 = jnp.sum(mask_BL, -1, keepdims=True)
    j_N = jnp.arange(num_segments)[None]
    seg_mask_BN = (n_B1 > 0) & ((j_N == 0) | (j_N * stride + self.overlap < n_B1))
    chunk_enc = Transformer(num_layers=self.chunk_layers, num_heads=self.chunk_heads,
                            dropout_rate=self.chunk_dropout_rate, position="none",
                            pooling="mean", dtype=self.dtype, param_dtype=self.param_dtype,
                            name="chunk_transformer")(seg_BND, seg_mask_BN, deterministic)
    # Word-piece states: from segment min(pos // stride, last real segment) at offset
    # pos - j * stride (always inside the segment's body).
    last_B1 = jnp.maximum(jnp.sum(seg_mask_BN, -1, keepdims=True) - 1, 0)
    seg_BL = jnp.minimum(jnp.arange(length)[None] // stride, last_B1)
    off_BL = 1 + jnp.arange(length)[None] - seg_BL * stride
    tok_BNWD = out.sequence.reshape(batch, num_segments, body + 2, d_model)
    seq_BLD = tok_BNWD[jnp.arange(batch)[:, None], seg_BL, jnp.clip(off_BL, 0, body)]
    seq_BLD = jnp.where(mask_BL[..., None], seq_BLD, 0)
    return encoder_output(seq_BLD, chunk_enc.pooled)
