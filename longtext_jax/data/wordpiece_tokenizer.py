"""WordPiece tokenizer of pretrained BERTs (``tokenizer.json`` or ``vocab.txt``).

Implements :class:`longtext_jax.data.tokenizers.Tokenizer` through the ``tokenizers`` library.
``encode`` returns word pieces only: no [CLS]/[SEP], no truncation, no padding (a
``tokenizer.json`` may carry a truncation/padding setting, e.g. all-MiniLM-L6-v2's 128; it is
switched off). Encoders add the special tokens they need (see ``docs/chunkbert.md``).
"""
from __future__ import annotations

import json
import os

import numpy as np
import tokenizers


class WordPieceTokenizer:
  """A BERT WordPiece tokenizer with the special-token ids of its own vocabulary.

  Attributes:
    vocab_size: number of ids.
    pad_id, unk_id, cls_id, sep_id, mask_id: ids of [PAD], [UNK], [CLS], [SEP], [MASK].
  """

  def __init__(self, tokenizer: tokenizers.Tokenizer):
    tokenizer.no_truncation()
    tokenizer.no_padding()
    self._tok = tokenizer
    self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    ids = {}
    for key, piece in (("pad", "[PAD]"), ("unk", "[UNK]"), ("cls", "[CLS]"), ("sep", "[SEP]"),
                       ("mask", "[MASK]")):
      i = tokenizer.token_to_id(piece)
      if i is None:
        raise ValueError(f"WordPiece vocabulary has no {piece} token")
      ids[key] = i
    self.pad_id, self.unk_id, self.cls_id = ids["pad"], ids["unk"], ids["cls"]
    self.sep_id, self.mask_id = ids["sep"], ids["mask"]

  @classmethod
  def from_tokenizer_json(cls, path: str) -> "WordPieceTokenizer":
    """From a Hugging Face ``tokenizer.json`` file."""
    return cls(tokenizers.Tokenizer.from_file(path))

  @classmethod
  def from_vocab(cls, path: str, lowercase: bool = True) -> "WordPieceTokenizer":
    """From a BERT ``vocab.txt`` (one piece per line) with BERT's normalizer and splitting."""
    from tokenizers.implementations import BertWordPieceTokenizer  # pylint: disable=import-outside-toplevel
    wrapper = BertWordPieceTokenizer(path, lowercase=lowercase)
    return cls(wrapper._tokenizer)  # pylint: disable=protected-access

  @classmethod
  def from_pretrained(cls, folder: str) -> "WordPieceTokenizer":
    """From a HF model folder: ``tokenizer.json`` if present, else ``vocab.txt`` (lowercased
    unless ``tokenizer_config.json`` says ``do_lower_case: false``)."""
    tj = os.path.join(folder, "tokenizer.json")
    if os.path.exists(tj):
      return cls.from_tokenizer_json(tj)
    vocab = os.path.join(folder, "vocab.txt")
    if not os.path.exists(vocab):
      raise FileNotFoundError(f"no tokenizer.json or vocab.txt in {folder}")
    lowercase = True
    tc = os.path.join(folder, "tokenizer_config.json")
    if os.path.exists(tc):
      with open(tc) as f:
        lowercase = bool(json.load(f).get("do_lower_case", True))
    return cls.from_vocab(vocab, lowercase=lowercase)

  def encode(self, text: str) -> np.ndarray:
    """int32[n] word-piece ids of ``text`` without special tokens."""
    return np.asarray(self._tok.encode(text, add_special_tokens=False).ids, np.int32)

  def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
    """``encode`` for many texts (parallel in the Rust library)."""
    return [np.asarray(e.ids, np.int32)
            for e in self._tok.encode_batch(texts, add_special_tokens=False)]

  def decode(self, ids) -> str:
    """Text of ``ids`` (special tokens dropped)."""
    return self._tok.decode([int(i) for i in np.asarray(ids).reshape(-1)],
                            skip_special_tokens=True)

  def id_to_token(self, i: int) -> str | None:
    """The word piece of id ``i`` (None when the id is not in the vocabulary)."""
    return self._tok.id_to_token(int(i))
