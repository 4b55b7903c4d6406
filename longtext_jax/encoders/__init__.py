"""Encoders: every one is a flax.linen.Module called as ``encoder(x_BLD, mask_BL,
deterministic=True) -> EncoderOutput``. See docs/architecture.md."""
from longtext_jax.encoders.base import EncoderOutput
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
# class's dataclass fields. A new encoder joins by adding one line here.
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

__all__ = ["EncoderOutput", "Transformer", "BiLSTM", "LSTM", "RAN", "SLSTM", "StarTransformer",
           "Bert", "ChunkBert", "BertFirst", "BertRandom", "ToBert",
           "WindowedAttention", "ENCODERS"]
