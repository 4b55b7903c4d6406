"""Encoders: every one is a flax.linen.Module returning an ``EncoderOutput``, called as
``encoder(x_BLD, mask_BL, deterministic=True)`` (``input_kind = "embeddings"``) or, for the
BERT family that owns its embeddings, ``encoder(input_ids_BL, mask_BL, deterministic=True)``
(``input_kind = "ids"``). See encoders/base.py and docs/architecture.md.

Importing this package imports flax and jax only (no optax, orbax, grain, TFDS, trainer).
"""
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
           "WindowedAttention", "ENCODERS"]
