"""ChunkBERT (Jaiswal & Milios 2023): BERT on fixed-size chunks, concatenated, then a TextCNN.

The ids are cut into chunks of ``chunk_size`` W word pieces; BERT encodes every chunk on its
own (attention never crosses a chunk border, so memory is quadratic in W and linear in the
number of chunks); each token's state is the mean of BERT's last ``num_last_layers`` (5)
hidden states; the chunks' states are concatenated back to the document's length L; a
TextCNN aggregates them across chunks.

Chunk layout (``layout``), for content ids w_1..w_n (no special tokens in the batch):

* ``'split'`` (default, the paper's Appendix B): the document is wrapped once,
  ``[CLS] w_1 .. w_n [SEP]``, padded to a multiple of W and split. Only the first chunk starts
  with [CLS] and only the last real chunk holds [SEP]; the other chunks are bare word pieces.
* ``'wrap'``: every chunk is ``[CLS] + (W - 2) word pieces + [SEP]`` (the last one shorter),
  so that each chunk looks like a BERT pre-training input.

In both layouts the [CLS]/[SEP] states are dropped: ``sequence`` has the input's length L
(zero at pads) and the TextCNN reads word-piece states only. Chunks made only of padding
are masked out entirely (their states are zero and never reach the TextCNN).

Modes (``mode``): ``'vectorized'`` moves the chunks into the batch dimension and runs BERT
once on [B * N, W]; ``'sequential'`` runs BERT on one [B, W] chunk column at a time with
``nn.scan`` (rematerialized, so training stores one chunk's activations at a time). Both give
the same result with the same params (param tree ``bert/...``, ``textcnn/...``).

Any length works at inference; during training (``deterministic=False``) BERT reads at most
``max_train_length`` positions (the paper's 4096 cap), counted as whole chunks with their
[CLS]/[SEP] (``max_train_length // chunk_size`` chunks; :meth:`ChunkBert.train_cap` word
pieces); later positions get zero states.
"""
from __future__ import annotations

import functools
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax.encoders.base import EncoderOutput, encoder_output
from longtext_jax.encoders.bert import BertEncoderBase, with_specials
from longtext_jax.layers.textcnn import TextCNN

Array = jax.Array


def train_cap(max_train_length: int, chunk_size: int, layout: str) -> int:
  """Word pieces ChunkBERT encodes while training (0: all): those of ``max_train_length //
  chunk_size`` whole chunks (at least one). Counting the specials keeps the cap from adding
  a chunk: with the 'split' layout, 256 word pieces are 258 positions, 3 chunks of 128. A
  config reads this many pieces per document (``data.max_tokens``) to train on all of them."""
  if not max_train_length:
    return 0
  num_chunks = max(1, max_train_length // chunk_size)
  if layout == "split":
    return num_chunks * chunk_size - 2
  return num_chunks * (chunk_size - 2)


def padding(chunk_size: int, layout: str) -> tuple[int, int]:
  """``(data.pad_multiple, data.pad_offset)`` whose padded lengths fill whole chunks: with
  the 'split' layout a batch of ``k * chunk_size - 2`` word pieces plus [CLS]/[SEP] is k
  chunks (``chunk_size`` multiples would add a chunk of padding: 256 pieces are 3 chunks of
  128); with 'wrap' each chunk holds ``chunk_size - 2`` pieces."""
  if layout == "split":
    return chunk_size, 2
  return chunk_size - 2, 0


class ChunkBert(BertEncoderBase):
  """ChunkBERT encoder: ``encoder(input_ids_BL, mask_BL, deterministic=True) -> EncoderOutput``.

  ``sequence`` float[B, L, D]: mean of the last ``num_last_layers`` hidden states of each word
  piece within its chunk (zero at pads). ``pooled`` float[B, len(kernel_sizes) *
  num_filters]: the TextCNN's max-pooled features after dropout; the task head (Dense) is the
  TextCNN's final linear layer.

  Attributes (besides the Bert fields of ``BertEncoderBase``):
    chunk_size: C, word pieces per chunk including any [CLS]/[SEP] (paper: 128).
    mode: 'vectorized' (one BERT call) or 'sequential' (one chunk at a time).
    layout: 'split' (paper) or 'wrap' (see the module docstring).
    num_last_layers: hidden states averaged per token (paper: 5; the embedding output counts
      as one, as in HF's ``hidden_states``).
    kernel_sizes, num_filters, cnn_dropout_rate: the TextCNN.
    max_train_length: cap on BERT positions while training, [CLS]/[SEP] included: the
      first ``max_train_length // chunk_size`` chunks' word pieces are encoded (0: none).
  """
  chunk_size: int = 128
  mode: str = "vectorized"
  layout: str = "split"
  num_last_layers: int = 5
  kernel_sizes: Sequence[int] = (3, 4, 5)
  num_filters: int = 32
  cnn_dropout_rate: float = 0.1
  max_train_length: int = 4096

  def _check(self):
    if self.mode not in ("vectorized", "sequential"):
      raise ValueError(f"ChunkBert.mode must be 'vectorized' or 'sequential', got "
                       f"{self.mode!r}")
    if self.layout not in ("split", "wrap"):
      raise ValueError(f"ChunkBert.layout must be 'split' or 'wrap', got {self.layout!r}")
    if not 3 <= self.chunk_size <= self.max_position_embeddings:
      raise ValueError(f"ChunkBert.chunk_size={self.chunk_size} must be in [3, "
                       f"max_position_embeddings={self.max_position_embeddings}]")
    if not 1 <= self.num_last_layers <= self.num_layers + 1:
      raise ValueError(f"ChunkBert.num_last_layers={self.num_last_layers} must be in [1, "
                       f"num_layers + 1 = {self.num_layers + 1}]")

  def train_cap(self) -> int:
    """Word pieces encoded while training (0: all); see :func:`train_cap`."""
    return train_cap(self.max_train_length, self.chunk_size, self.layout)

  def batch_padding(self) -> tuple[int, int]:
    """``(pad_multiple, pad_offset)`` of batches of whole chunks (:func:`padding`): the
    Predictor's length buckets use it whatever the run's ``config.data`` says."""
    return padding(self.chunk_size, self.layout)

  def chunk(self, ids_BL: Array, mask_BL: Array) -> tuple[Array, Array]:
    """The chunks of the layout: (ids int[B, N, W], mask bool[B, N, W], W = chunk_size); :meth:`unchunk`
    inverts it on the chunks' states."""
    batch, length = ids_BL.shape
    size = self.chunk_size
    if self.layout == "split":
      total = -(-(length + 2) // size) * size
      ids_BT, mask_BT = with_specials(ids_BL, mask_BL, self.cls_id, self.sep_id, total)
      return ids_BT.reshape(batch, -1, size), mask_BT.reshape(batch, -1, size)
    body = size - 2
    num_chunks = max(1, -(-length // body))
    pad = num_chunks * body - length
    body_ids = jnp.pad(ids_BL, ((0, 0), (0, pad))).reshape(batch * num_chunks, body)
    body_mask = jnp.pad(mask_BL, ((0, 0), (0, pad))).reshape(batch * num_chunks, body)
    ids_BNW, mask_BNW = with_specials(body_ids, body_mask, self.cls_id, self.sep_id, size)
    return ids_BNW.reshape(batch, num_chunks, size), mask_BNW.reshape(batch, num_chunks, size)

  def unchunk(self, states_BNWD: Array, length: int) -> Array:
    """Word-piece states float[B, L, D] from chunk states (see :meth:`chunk`)."""
    batch, _, size, d_model = states_BNWD.shape
    if self.layout == "split":
      return states_BNWD.reshape(batch, -1, d_model)[:, 1:1 + length]
    return states_BNWD[:, :, 1:size - 1].reshape(batch, -1, d_model)[:, :length]

  def _token_states(self, bert, ids_BW: Array, mask_BW: Array, deterministic: bool) -> Array:
    out = bert(ids_BW, mask_BW, deterministic=deterministic, output_hidden_states=True)
    # A running sum, not a stack: no [K, B, W, D] buffer, each state can be freed early.
    last = out.hidden_states[-self.num_last_layers:]
    h_BWD = functools.reduce(jnp.add, last) / len(last)
    return jnp.where(mask_BW[..., None], h_BWD, 0)

  @nn.compact
  def __call__(self, input_ids_BL: Array, mask_BL: Array, deterministic: bool = True
               ) -> EncoderOutput:
    """Encodes a batch of word-piece ids without [CLS]/[SEP] (this encoder adds them).

    Args:
      input_ids_BL: int[B, L] content word pieces, right-padded.
      mask_BL: bool[B, L], True on real word pieces, which come first in each row.
      deterministic: False turns dropout on (needs a 'dropout' RNG) and encodes only the
        first ``train_cap()`` positions (the rest get zero states).

    Returns:
      ``EncoderOutput``: ``sequence`` float32[B, L, hidden_size], zero at pads (and beyond
      the training cap);
      ``pooled`` float32[B, len(kernel_sizes) x num_filters]: the TextCNN's max-pooled
      features (not hidden_size wide).
    """
    self.check_ids(input_ids_BL, mask_BL, "ChunkBert")
    self._check()
    full_length = input_ids_BL.shape[1]
    cap = self.train_cap()
    if not deterministic and cap and full_length > cap:
      input_ids_BL = input_ids_BL[:, :cap]
      mask_BL = mask_BL[:, :cap]
    batch, length = input_ids_BL.shape

    ids_BNW, mask_BNW = self.chunk(input_ids_BL, mask_BL)
    num_chunks, size = ids_BNW.shape[1:]
    bert = self.make_bert(use_pooler=False)
    if self.mode == "vectorized":
      h_XWD = self._token_states(bert, ids_BNW.reshape(-1, size), mask_BNW.reshape(-1, size),
                                 deterministic)
      h_BNWD = h_XWD.reshape(batch, num_chunks, size, -1)
    else:
      def step(module, carry, xs):
        ids_BW, mask_BW = xs
        return carry, self._token_states(module, ids_BW, mask_BW, deterministic)
      step = nn.remat(step, prevent_cse=False)
      scan = nn.scan(step, variable_broadcast="params",
                     split_rngs={"params": False, "dropout": True}, in_axes=0, out_axes=0)
      _, h_NBWD = scan(bert, None, (jnp.swapaxes(ids_BNW, 0, 1), jnp.swapaxes(mask_BNW, 0, 1)))
      h_BNWD = jnp.swapaxes(h_NBWD, 0, 1)
    seq_BLD = jnp.where(mask_BL[..., None], self.unchunk(h_BNWD, length), 0)
    pooled = TextCNN(tuple(self.kernel_sizes), self.num_filters, self.cnn_dropout_rate,
                     num_outputs=0, dtype=self.dtype, param_dtype=self.param_dtype,
                     name="textcnn")(seq_BLD, mask_BL, deterministic)
    if full_length > length:  # Positions beyond the training cap: zero states.
      seq_BLD = jnp.pad(seq_BLD, ((0, 0), (0, full_length - length), (0, 0)))
    return encoder_output(seq_BLD, pooled)
