"""The one tokenizer interface every loader encodes through.

Concrete tokenizers: SentencePiece (``longtext_jax.data.sentencepiece_tokenizer``, trained by
``python -m longtext_jax.tokenize train ...``) and WordPiece for pretrained BERTs
(``longtext_jax.data.wordpiece_tokenizer``). Loaders only use this protocol.

SentencePiece models trained by this project reserve fixed ids for the special tokens
(``SPECIAL_IDS``); WordPiece vocabularies keep their own ids (BERT: [PAD]=0, [UNK]=100,
[CLS]=101, [SEP]=102, [MASK]=103) and expose them through the same attributes.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

# Fixed ids of the special tokens in SentencePiece models trained by this project.
SPECIAL_IDS = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
SPECIAL_PIECES = {"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>", "mask": "<mask>"}


@runtime_checkable
class Tokenizer(Protocol):
  """What loaders need from a tokenizer.

  Attributes:
    vocab_size: number of ids.
    pad_id, unk_id, cls_id, sep_id, mask_id: special token ids (cls = bos = <s>,
      sep = eos = </s>).
  """
  vocab_size: int
  pad_id: int
  unk_id: int
  cls_id: int
  sep_id: int
  mask_id: int

  def encode(self, text: str) -> np.ndarray:
    """int32[n] ids of ``text`` without any special token added."""

  def decode(self, ids) -> str:
    """Text of ``ids`` (special tokens dropped)."""
