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


class ByteTokenizer:
  """UTF-8 bytes as ids: byte b has id ``b + BYTE_OFFSET``, past the fixed special ids.

  Needs no training or files, so every loader (local files, TFDS) works out of the box;
  documents get about 4x longer than with subwords, which is what long-range models are for.
  Decoding replaces byte sequences that are not valid UTF-8 with U+FFFD.
  """
  BYTE_OFFSET = len(SPECIAL_IDS)

  def __init__(self):
    self.vocab_size = self.BYTE_OFFSET + 256
    self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
        SPECIAL_IDS[k] for k in ("pad", "unk", "cls", "sep", "mask"))

  def encode(self, text: str) -> np.ndarray:
    raw = np.frombuffer(text.encode("utf-8", errors="replace"), np.uint8)
    return raw.astype(np.int32) + self.BYTE_OFFSET

  def decode(self, ids) -> str:
    ids = np.asarray(ids, np.int64)
    raw = ids[ids >= self.BYTE_OFFSET] - self.BYTE_OFFSET
    return raw.astype(np.uint8).tobytes().decode("utf-8", errors="replace")


# kind -> (module, what to build); SentencePiece and WordPiece load lazily so that a missing
# optional module only fails when it is asked for.
TOKENIZER_KINDS = ("byte", "sentencepiece", "wordpiece")


def load_tokenizer(tokenizer_config) -> Tokenizer:
  """The tokenizer described by ``config.data.tokenizer``.

  Args:
    tokenizer_config: has ``kind`` ('byte' | 'sentencepiece' | 'wordpiece'), ``path``
      (SentencePiece: the ``.model`` file; WordPiece: a model folder, a ``tokenizer.json``
      or a ``vocab.txt``) and ``lowercase`` (WordPiece ``vocab.txt`` only).

  Returns:
    An object satisfying :class:`Tokenizer`.
  """
  kind = tokenizer_config.kind
  path = tokenizer_config.path
  if kind == "byte":
    return ByteTokenizer()
  if kind not in TOKENIZER_KINDS:
    raise ValueError(f"unknown tokenizer kind {kind!r}; choose one of {TOKENIZER_KINDS}")
  if not path:
    raise ValueError(f"config.data.tokenizer.path is empty; a {kind} tokenizer needs its "
                     "model file or folder")
  import importlib  # pylint: disable=import-outside-toplevel
  import os  # pylint: disable=import-outside-toplevel
  module_name = f"longtext_jax.data.{kind}_tokenizer"
  try:
    module = importlib.import_module(module_name)
  except ModuleNotFoundError as e:
    if e.name != module_name:
      raise
    raise ValueError(f"tokenizer kind {kind!r} needs {module_name}, which is not in this "
                     "checkout") from None
  if kind == "sentencepiece":
    return module.SentencePieceTokenizer(path)
  if os.path.isdir(path):
    return module.WordPieceTokenizer.from_pretrained(path)
  if path.endswith(".json"):
    return module.WordPieceTokenizer.from_tokenizer_json(path)
  return module.WordPieceTokenizer.from_vocab(path, lowercase=tokenizer_config.lowercase)
