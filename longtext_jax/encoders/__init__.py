"""Encoders: every one is a flax.linen.Module returning an ``EncoderOutput``, called as
``encoder(x_BLD, mask_BL, deterministic=True)`` (``input_kind = "embeddings"``) or, for the
BERT family that owns its embeddings, ``encoder(input_ids_BL, mask_BL, deterministic=True)``
(``input_kind = "ids"``). See encoders/base.py and docs/architecture.md.

Importing this package imports flax and jax only (no optax, orbax, grain, TFDS, trainer).
"""
import dataclasses
from typing import Mapping

from longtext_jax.encoders.base import INPUT_KINDS, EncoderOutput, input_kind
from longtext_jax.encoders.bilstm import LSTM, BiLSTM
from longtext_jax.encoders.bert import Bert
from longtext_jax.encoders.bert_baselines import BertFirst, BertRandom, ToBert
from longtext_jax.encoders.chunk_bert import ChunkBert
from longtext_jax.encoders.slstm import SLSTM
from longtext_jax.encoders.star_transformer import StarTransformer
from longtext_jax.encoders.ran import RAN
from longtext_jax.encoders.transformer import Transformer
from longtext_jax.encoders.windowed import WindowedAttention

# Config name -> class. ``config.model.encoder.name`` picks one; its other fields are the
# class's dataclass fields. A new encoder joins by adding one line here (its class sets
# ``input_kind``).
ENCODERS = {
    "transformer": Transformer,
    "bilstm": BiLSTM,
    "lstm": LSTM,
    "ran": RAN,
    "windowed": WindowedAttention,
    "slstm": SLSTM,
    "star_transformer": StarTransformer,
    "chunk_bert": ChunkBert, "bert_first": BertFirst, "bert_random": BertRandom, "tobert": ToBert,
}

for _name, _cls in ENCODERS.items():  # Every entry declares its call contract.
  input_kind(_cls)

__all__ = ["EncoderOutput", "INPUT_KINDS", "input_kind", "Transformer", "BiLSTM", "LSTM", "RAN", "SLSTM", "StarTransformer",
           "Bert", "ChunkBert", "BertFirst", "BertRandom", "ToBert",
           "WindowedAttention", "ENCODERS", "is_causal", "causal_fix"]


def is_causal(encoder) -> bool:
  """Whether the encoder (an instance, or its config) is configured causal: ``causal``,
  ``mask_type='causal'`` (RAN) or ``bidirectional=False`` (the left-to-right LSTM)."""
  get = encoder.get if isinstance(encoder, Mapping) else (
      lambda k, d=None: getattr(encoder, k, d))
  return (bool(get("causal", False)) or get("mask_type", None) == "causal"
          or get("bidirectional", None) is False)


def causal_fix(encoder_name: str) -> str:
  """How to make encoder ``encoder_name`` causal, or which encoders can be."""
  cls = ENCODERS.get(encoder_name)
  fields = {f.name for f in dataclasses.fields(cls)} if cls is not None else set()
  if "causal" in fields:
    return "set config.model.encoder.causal=True"
  if "mask_type" in fields:
    return "set config.model.encoder.mask_type='causal'"
  if "bidirectional" in fields:
    return "set config.model.encoder.bidirectional=False (or use encoder 'lstm')"
  able = sorted(n for n, c in ENCODERS.items()
                if {"causal", "mask_type", "bidirectional"} & {f.name for f in
                                                               dataclasses.fields(c)})
  return f"encoder {encoder_name!r} cannot be causal; encoders that can: {able}"
