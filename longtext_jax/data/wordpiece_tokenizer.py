"""WordPiece tokenizer of pretrained BERTs (``tokenizer.json`` or ``vocab.txt``).

Implements :class:`longtext_jax.data.tokenizers.Tokenizer` through the ``tokenizers`` library.
``encode`` returns word pieces only: no [CLS]/[SEP], no truncation, no padding (a
``tokenizer.json`` may carry a truncation/padding setting, e.g. all-MiniLM-L6-v2's 128; it is
switched off). Encoders add the special tokens they need (see ``docs/chunkbert.md``).

For using a pretrained BERT directly, :meth:`WordPieceTokenizer.batch_encode` (also
``tokenizer(texts)``) is the Hugging Face-style batch call: ``[CLS] a [SEP]`` (``b [SEP]``
for pairs), cut longest-first to ``max_length`` (default the folder's ``model_max_length``,
else 512), padded to the batch's longest row, as numpy arrays.
"""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np
import tokenizers

from longtext_jax.data import tokenizers as tokenizers_lib

DEFAULT_MAX_LENGTH = 512  # BERT's position table, when the folder does not say.
# tokenizer_config.json tokenizer_class values whose vocab.txt is read with BERT's normalizer
# and splitting (the DistilBERT/ELECTRA classes are BERT's; BertJapaneseTokenizer, e.g., is not).
VOCAB_TOKENIZER_CLASSES = ("BertTokenizer", "DistilBertTokenizer", "ElectraTokenizer")


class WordPieceTokenizer:
  """A BERT WordPiece tokenizer with the special-token ids of its own vocabulary.

  Attributes:
    vocab_size: number of ids.
    pad_id, unk_id, cls_id, sep_id, mask_id: ids of [PAD], [UNK], [CLS], [SEP], [MASK].
    model_max_length: the longest input of the model the tokenizer came with
      (``tokenizer_config.json``'s ``model_max_length`` for :meth:`from_pretrained`, else
      512); the default cut of :meth:`batch_encode`.
  """

  def __init__(self, tokenizer: tokenizers.Tokenizer,
               model_max_length: int = DEFAULT_MAX_LENGTH):
    self.model_max_length = int(model_max_length)
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
  def from_vocab(cls, path: str, lowercase: bool = True, strip_accents: bool | None = None,
                 tokenize_chinese_chars: bool = True) -> "WordPieceTokenizer":
    """From a BERT ``vocab.txt`` (one piece per line) with BERT's normalizer and splitting.

    Args:
      path: the ``vocab.txt``.
      lowercase: lowercase the text (HF ``do_lower_case``).
      strip_accents: remove accents; None: when lowercasing (HF's rule).
      tokenize_chinese_chars: split around every CJK character.
    """
    from tokenizers.implementations import BertWordPieceTokenizer  # pylint: disable=import-outside-toplevel
    wrapper = BertWordPieceTokenizer(path, lowercase=lowercase, strip_accents=strip_accents,
                                     handle_chinese_chars=tokenize_chinese_chars)
    return cls(wrapper._tokenizer)  # pylint: disable=protected-access

  @classmethod
  def from_pretrained(cls, folder: str) -> "WordPieceTokenizer":
    """From a HF model folder: ``tokenizer.json`` if present, else ``vocab.txt`` with
    ``tokenizer_config.json``'s settings as HF's ``BertTokenizer`` reads them:
    ``do_lower_case`` (default true), ``strip_accents`` (default: as ``do_lower_case``) and
    ``tokenize_chinese_chars`` (default true).

    Raises:
      FileNotFoundError: neither file; ValueError: a ``vocab.txt`` whose
        ``tokenizer_class`` is not BERT's WordPiece (e.g. ``BertJapaneseTokenizer``), or a
        vocabulary without [PAD]/[UNK]/[CLS]/[SEP]/[MASK] (naming the file).
    """
    settings = {}
    tc = os.path.join(folder, "tokenizer_config.json")
    if os.path.exists(tc):
      with open(tc) as f:
        settings = json.load(f)
    tj = os.path.join(folder, "tokenizer.json")
    vocab = os.path.join(folder, "vocab.txt")
    if os.path.exists(tj):
      source = tj
    elif os.path.exists(vocab):
      source = vocab
      kind = settings.get("tokenizer_class")
      if kind and kind.removesuffix("Fast") not in VOCAB_TOKENIZER_CLASSES:
        raise ValueError(f"{tc} says tokenizer_class={kind!r}: only BERT's WordPiece "
                         f"({', '.join(VOCAB_TOKENIZER_CLASSES)}) is read from {vocab}")
    else:
      raise FileNotFoundError(f"no tokenizer.json or vocab.txt in {folder}")
    try:
      if source == tj:
        tok = cls.from_tokenizer_json(tj)
      else:
        strip = settings.get("strip_accents")
        tok = cls.from_vocab(
            vocab, lowercase=bool(settings.get("do_lower_case", True)),
            strip_accents=None if strip is None else bool(strip),
            tokenize_chinese_chars=bool(settings.get("tokenize_chinese_chars", True)))
    except ValueError as e:  # E.g. no [CLS] in the vocabulary: name the file.
      raise ValueError(f"{source}: {e}") from e
    longest = settings.get("model_max_length")
    # HF writes a huge sentinel (1e30) when the length is unknown.
    if isinstance(longest, (int, float)) and 0 < longest < 1e6:
      tok.model_max_length = int(longest)
    return tok

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

  def batch_encode(self, texts: Sequence[str], pairs: Sequence[str] | None = None,
                   max_length: int | None = None, pad_multiple: int = 1,
                   add_special_tokens: bool = True) -> dict[str, np.ndarray]:
    """Model inputs of a batch: ``[CLS] a [SEP]`` (``b [SEP]``), cut and padded.

    Args:
      texts: B texts.
      pairs: B second texts (sentence pairs), or None.
      max_length: ids per row at most, special tokens included (cut longest-first as the
        data loaders cut); None: :attr:`model_max_length`; 0: no cut.
      pad_multiple: the padded length is a multiple of this.
      add_special_tokens: False leaves out [CLS] and [SEP].

    Returns:
      ``input_ids`` int32[B, L] (``pad_id`` after each row), ``token_type_ids`` int32[B, L]
      (0 on ``[CLS] a [SEP]``, 1 on ``b [SEP]``), ``mask`` bool[B, L] (True on real ids),
      ``truncated`` bool[B] (the row was cut).

    Raises:
      ValueError: no texts, or ``pairs`` of another length.
    """
    texts = list(texts)
    if not texts:
      raise ValueError("batch_encode: no texts")
    if pairs is not None and len(pairs) != len(texts):
      raise ValueError(f"batch_encode: {len(texts)} texts but {len(pairs)} pairs")
    limit = self.model_max_length if max_length is None else int(max_length)
    first = self.encode_batch(texts)
    second = self.encode_batch(list(pairs)) if pairs is not None else [None] * len(texts)
    rows = [tokenizers_lib.build_inputs(self, a, b, limit, add_special_tokens)
            for a, b in zip(first, second)]
    length = max(len(ids) for ids, _, _ in rows)
    length = -(-length // max(pad_multiple, 1)) * max(pad_multiple, 1)
    ids_BL = np.full((len(rows), length), self.pad_id, np.int32)
    types_BL = np.zeros((len(rows), length), np.int32)
    mask_BL = np.zeros((len(rows), length), bool)
    for i, (ids, types, _) in enumerate(rows):
      ids_BL[i, :len(ids)] = ids
      mask_BL[i, :len(ids)] = True
      if types is not None:
        types_BL[i, :len(types)] = types
    return {"input_ids": ids_BL, "token_type_ids": types_BL, "mask": mask_BL,
            "truncated": np.array([t for _, _, t in rows], bool)}

  __call__ = batch_encode


def special_ids(folder: str) -> dict[str, int]:
  """``cls_id`` and ``sep_id`` (the BERT encoders' fields) of a HF folder's own vocabulary:
  101 and 102 only in BERT's uncased vocabulary and its relatives (PubMedBERT's, e.g., puts
  [CLS] at 2).

  Raises:
    FileNotFoundError: the folder has no tokenizer; ValueError: no [CLS] or [SEP] in it.
  """
  tok = WordPieceTokenizer.from_pretrained(folder)
  return {"cls_id": tok.cls_id, "sep_id": tok.sep_id}
