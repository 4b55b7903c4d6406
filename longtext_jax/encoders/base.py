"""The encoder contract shared by every architecture in longtext_jax.

Every encoder is a ``flax.linen.Module`` called as::

    out = encoder(x_BLD, mask_BL, deterministic=True)

with ``x_BLD: float[B, L, D]`` (already embedded) and ``mask_BL: bool[B, L]`` (True on
real tokens, which come first in each row: right padding, as the data pipeline pads; the
Transformer, (Bi)LSTM, S-LSTM, Star-Transformer, RAN and windowed attention also accept any
mask, while the BERT family reads a row's first ``sum(mask)`` positions, and checks it
when the mask is a concrete array: :func:`check_prefix_mask`), returning
:class:`EncoderOutput` with ``sequence: float32[B, L, D]`` (zero on padding) and
``pooled: float32[B, P]`` (a summary that never sees padding). ``P = D`` for every encoder
but two: :class:`~longtext_jax.encoders.BertRandom` concatenates two pooler outputs (``P =
2 x hidden_size``) and :class:`~longtext_jax.encoders.ChunkBert` returns its TextCNN's
features (``P = len(kernel_sizes) x num_filters``); ``jax.eval_shape`` tells any encoder's
``P`` without computing. Both outputs are float32 whatever the encoder's compute ``dtype``
(bfloat16, float16; float64 under x64 stays float64: :func:`encoder_output`), so heads,
losses and a user's code see one dtype.

Two call contracts share the registry, and every encoder class says which one it follows
in the class attribute ``input_kind`` (one of :data:`INPUT_KINDS`):

* ``"embeddings"``: ``encoder(x_BLD, mask_BL, deterministic)``, the model's ``Inputs``
  embeds ``input_ids`` (or projects ``features``) first;
* ``"ids"``: ``encoder(input_ids_BL, mask_BL, deterministic)`` for encoders that own their
  embeddings (the BERT family); ``config.model.input`` must then be ``'ids'``.

Naming convention used across the library: a tensor's name ends with its shape letters,
``x_BLD``, ``mask_BL``, ``att_BHLL`` (B batch, L length, D width, H heads, K head width,
W window (or chunk, segment), N windows, C classes, V vocabulary;
the full list is in docs/architecture.md, "Naming").
"""
from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

# Encoder call contracts (the class attribute ``input_kind``): what the first argument is.
INPUT_KINDS = ("embeddings", "ids")


def input_kind(encoder_cls: type) -> str:
  """The call contract an encoder class declares (``encoder_cls.input_kind``).

  Raises:
    TypeError: the class does not declare ``input_kind`` or declares an unknown one.
  """
  kind = getattr(encoder_cls, "input_kind", None)
  if kind not in INPUT_KINDS:
    raise TypeError(f"encoder class {encoder_cls.__name__} must set the class attribute "
                    f"input_kind to one of {INPUT_KINDS}, got {kind!r}")
  return kind


@flax.struct.dataclass
class EncoderOutput:
  """What every encoder returns.

  Attributes:
    sequence: float32[B, L, D], contextual token states; exactly zero at padded positions.
    pooled: float32[B, P], one vector per document computed from real tokens only (``P =
      D`` but for BertRandom and ChunkBert: module docstring).
  """
  sequence: Array
  pooled: Array


def encoder_output(sequence_BLD: Array, pooled_BP: Array) -> EncoderOutput:
  """The contract's :class:`EncoderOutput`, each array at least float32: every encoder
  returns through it, so a bfloat16 encoder hands float32 to heads and losses as the
  Transformer's float32 final LayerNorm always did (before, the windowed, S-LSTM,
  Star-Transformer and BERT-family encoders returned their compute dtype, ToBERT one of
  each). Wider types (float64 under ``jax_enable_x64``) are kept."""
  up = lambda x: x.astype(jnp.promote_types(x.dtype, jnp.float32))
  return EncoderOutput(sequence=up(sequence_BLD), pooled=up(pooled_BP))


def check_encoder_inputs(x_BLD: Any, mask_BL: Any, name: str) -> None:
  """Raises a clear ValueError when inputs do not follow the encoder contract."""
  if x_BLD.ndim != 3:
    raise ValueError(f"{name}: x must be float[B, L, D], got shape {x_BLD.shape}")
  if x_BLD.shape[1] == 0:
    raise ValueError(f"{name}: x has length 0 (shape {x_BLD.shape}); give at least one "
                     "position (a row may be all padding)")
  if mask_BL.shape != x_BLD.shape[:2]:
    raise ValueError(
        f"{name}: mask must be bool[B, L] = {x_BLD.shape[:2]}, got {mask_BL.shape}")
  if mask_BL.dtype != jnp.bool_:
    raise ValueError(f"{name}: mask must be bool, got {mask_BL.dtype}")


def check_prefix_mask(mask_BL: Any, name: str) -> None:
  """Raises a ValueError naming the first row whose mask is not True-then-False (left
  padding, a hole), for encoders that read a row's first ``sum(mask)`` positions. Under
  ``jit`` the mask is abstract and nothing is checked (the data pipeline pads on the
  right); called eagerly (``init``, an un-jitted ``apply``) it is."""
  if isinstance(mask_BL, jax.core.Tracer):
    return
  m = np.asarray(mask_BL, bool)
  bad = np.flatnonzero(np.any(m[..., 1:] & ~m[..., :-1], axis=-1).reshape(-1))
  if bad.size:
    raise ValueError(f"{name}: row {int(bad[0])} of the mask has a True after a False; "
                     "this encoder needs each row's real tokens first (right padding)")
