"""Encoders: every one is a flax.linen.Module called as ``encoder(x_BLD, mask_BL,
deterministic=True) -> EncoderOutput``. See docs/architecture.md."""
from longtext_jax.encoders.base import EncoderOutput
from longtext_jax.encoders.bilstm import LSTM, BiLSTM
from longtext_jax.encoders.transformer import Transformer
from longtext_jax.encoders.ran import RAN

# Config name -> class. ``config.model.encoder.name`` picks one; its other fields are the
# class's dataclass fields. A new encoder joins by adding one line here.
ENCODERS = {
    "transformer": Transformer,
    "bilstm": BiLSTM,
    "lstm": LSTM,
    "ran": RAN,
}

__all__ = ["EncoderOutput", "Transformer", "BiLSTM", "LSTM", "RAN", "ENCODERS"]
