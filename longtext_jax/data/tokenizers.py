"""The one tokenizer interface every loader encodes through.

Concrete tokenizers: bytes (:class:`ByteTokenizer`, no files), words (:class:`WordTokenizer`,
a vocabulary of the most frequent words), SentencePiece
(``longtext_jax.data.sentencepiece_tokenizer``, trained by ``python -m longtext_jax.tokenize
train ...``) and WordPiece for pretrained BERTs (``longtext_jax.data.wordpiece_tokenizer``).
Loaders only use this protocol. A 'sentencepiece' or 'word' tokenizer without a file is
trained on the training texts by :func:`train_tokenizer` (``longtext_jax.train.prepare``
caches it in the run's workdir).

SentencePiece models trained by this project reserve fixed ids for the special tokens
(``SPECIAL_IDS``); WordPiece vocabularies keep their own ids (BERT: [PAD]=0, [UNK]=100,
[CLS]=101, [SEP]=102, [MASK]=103) and expose them through the same attributes.
"""
from __future__ import annotations

import collections
import os
import re
from typing import Iterable, Protocol, Sequence, runtime_checkable

import numpy as np

from longtext_jax import fileio

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
    """int32[n] ids of the UTF-8 bytes of ``text`` (no special token added)."""
    raw = np.frombuffer(text.encode("utf-8", errors="replace"), np.uint8)
    return raw.astype(np.int32) + self.BYTE_OFFSET

  def decode(self, ids) -> str:
    """Text of ``ids``: special ids dropped, invalid UTF-8 replaced by U+FFFD."""
    ids = np.asarray(ids, np.int64)
    raw = ids[ids >= self.BYTE_OFFSET] - self.BYTE_OFFSET
    return raw.astype(np.uint8).tobytes().decode("utf-8", errors="replace")


class WordTokenizer:
  """Whole words (lowercased) as ids: the special ids, then a fixed word list.

  A word is a run of letters/digits/underscores or a single other non-space character
  (punctuation), after lowercasing. Words outside the list map to ``unk_id``. The file is
  plain text: one word per line in id order after the 5 special tokens (line ``i`` is id
  ``i + 5``), written by :func:`train_word_vocab`.

  Args:
    words: the words in id order (specials excluded), or the path of a vocabulary file.
  """
  PATTERN = re.compile(r"\w+|[^\w\s]")

  def __init__(self, words: Sequence[str] | str | os.PathLike):
    self.path = None
    if isinstance(words, (str, os.PathLike)):
      self.path = str(words)
      if not os.path.exists(self.path):
        raise ValueError(f"word vocabulary {self.path!r} does not exist")
      with open(self.path, encoding="utf-8") as f:
        words = [line.rstrip("\n") for line in f if line.rstrip("\n")]
    self.words = list(words)
    offset = len(SPECIAL_IDS)
    self._ids = {w: i + offset for i, w in enumerate(self.words)}
    if len(self._ids) != len(self.words):
      raise ValueError(f"word vocabulary {self.path or '<list>'}: words are not unique")
    self.vocab_size = offset + len(self.words)
    self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
        SPECIAL_IDS[k] for k in ("pad", "unk", "cls", "sep", "mask"))

  @classmethod
  def split(cls, text: str) -> list[str]:
    """The words of ``text`` (lowercased; punctuation marks are words of their own)."""
    return cls.PATTERN.findall(text.lower())

  def encode(self, text: str) -> np.ndarray:
    """int32[n] ids of the words of ``text`` (unknown words: ``unk_id``)."""
    return np.asarray([self._ids.get(w, self.unk_id) for w in self.split(text)], np.int32)

  def decode(self, ids) -> str:
    """The words of ``ids`` joined by spaces (special ids dropped, unknowns '<unk>')."""
    offset = len(SPECIAL_IDS)
    out = []
    for i in np.asarray(ids, np.int64).reshape(-1):
      if i == self.unk_id:
        out.append(SPECIAL_PIECES["unk"])
      elif i >= offset:
        out.append(self.words[i - offset])
    return " ".join(out)


def train_word_vocab(texts: Iterable[str], vocab_size: int, path: str | None = None,
                     min_count: int = 2) -> WordTokenizer:
  """The ``vocab_size - 5`` most frequent words of ``texts`` (ties: alphabetical).

  Args:
    texts: the training texts.
    vocab_size: ids in all, the 5 special tokens included (> 5).
    path: if given, the vocabulary file is written there (atomically).
    min_count: words seen fewer times are left out (they would be noise).

  Returns:
    The :class:`WordTokenizer`.
  """
  if vocab_size <= len(SPECIAL_IDS):
    raise ValueError(f"vocab_size must exceed the {len(SPECIAL_IDS)} special tokens, got "
                     f"{vocab_size}")
  counts = collections.Counter(w for t in texts for w in WordTokenizer.split(t))
  ranked = sorted((w for w, n in counts.items() if n >= min_count),
                  key=lambda w: (-counts[w], w))
  words = ranked[:vocab_size - len(SPECIAL_IDS)]
  if path:
    fileio.write_text_atomic(path, "".join(w + "\n" for w in words))
    return WordTokenizer(path)
  return WordTokenizer(words)


# Kinds that can be trained on the training texts when no file is given.
TRAINABLE_KINDS = ("sentencepiece", "word")
TOKENIZER_KINDS = ("byte", "word", "sentencepiece", "wordpiece")


def train_tokenizer(kind: str, texts: Sequence[str], vocab_size: int, path: str) -> Tokenizer:
  """Trains a tokenizer of ``kind`` on ``texts`` and writes it to ``path``.

  Args:
    kind: 'sentencepiece' (a unigram model, ``path`` ends in ``.model``) or 'word'
      (a word list, :func:`train_word_vocab`).
    texts: the training documents.
    vocab_size: ids in all, special tokens included. SentencePiece makes fewer on a corpus
      too small for it (check the result's ``vocab_size``).
    path: the file to write.

  Returns:
    The trained tokenizer, loaded from ``path``.
  """
  if kind == "word":
    return train_word_vocab(texts, vocab_size, path)
  if kind != "sentencepiece":
    raise ValueError(f"config.data.tokenizer.kind={kind!r} cannot be trained here; "
                     f"trainable kinds: {TRAINABLE_KINDS}")
  # pylint: disable=import-outside-toplevel
  from longtext_jax.data import corpus as corpus_lib
  from longtext_jax.data import sentencepiece_tokenizer as spm_lib
  if not path.endswith(".model"):
    raise ValueError(f"a SentencePiece model path must end in .model, got {path!r}")
  spm_lib.train_sentencepiece(corpus_lib.iter_lines(texts), vocab_size,
                              path[:-len(".model")])
  return spm_lib.SentencePieceTokenizer(path)


def build_tokenizer(tokenizer_config) -> Tokenizer:
  """The one tokenizer factory: the tokenizer described by ``config.data.tokenizer``.

  SentencePiece and WordPiece are imported lazily, so a missing optional package only fails
  when its kind is asked for.

  Args:
    tokenizer_config: has ``kind`` ('byte' | 'word' | 'sentencepiece' | 'wordpiece'),
      ``path`` (word: the word list; SentencePiece: the ``.model`` file; WordPiece: a model
      folder, a ``tokenizer.json`` or a ``vocab.txt``) and ``lowercase`` (WordPiece
      ``vocab.txt`` only).

  Returns:
    An object satisfying :class:`Tokenizer`.

  Raises:
    ValueError: an unknown kind (naming the choices), or an empty / missing path.
  """
  kind = tokenizer_config.kind
  path = tokenizer_config.path
  if kind == "byte":
    return ByteTokenizer()
  if kind not in TOKENIZER_KINDS:
    raise ValueError(f"config.data.tokenizer.kind: unknown tokenizer kind {kind!r}; choose "
                     f"one of {TOKENIZER_KINDS}")
  if not path:
    trained = (" (or leave it empty and train through longtext_jax.train.train_and_evaluate"
               ", which trains one on the training texts)" if kind in TRAINABLE_KINDS else "")
    raise ValueError(f"config.data.tokenizer.path is empty; a {kind} tokenizer needs its "
                     f"model file or folder{trained}")
  if kind == "word":
    return WordTokenizer(path)
  import importlib  # pylint: disable=import-outside-toplevel
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


# The former name of build_tokenizer, kept so that callers written before the rename work.
load_tokenizer = build_tokenizer


def truncate_longest_first(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
  """Lengths of two texts cut longest-first to fit ``budget`` tokens together.

  Hugging Face's ``truncation="longest_first"`` (the Rust tokenizers that transformers' BERT
  tokenizers run): only the longer text is cut while the shorter fits in half the budget;
  when both must be cut, the shorter keeps ``budget // 2`` tokens and the longer the rest
  (the first text counts as the shorter on ties). As a loop: remove one token at a time from
  the longer text, and on a tie from the text that was the shorter at the start (the first
  when they started equal). In O(1). Every pair loader (local files, TFDS, the pydoc pairs,
  ``SentencePieceTokenizer.encode_pair``, ``WordPieceTokenizer.batch_encode``) truncates
  through this function. (Google's original BERT code, ``_truncate_seq_pair``, cuts the
  second text on every tie, so it gives the first text the odd token even when it was the
  shorter: the two differ by that one token.)

  Args:
    len_a, len_b: token counts of the first and second text (>= 0).
    budget: tokens available to both texts (special tokens already subtracted), >= 0.

  Returns:
    (new_len_a, new_len_b), each no longer than before, summing to at most ``budget``.
  """
  if budget < 0:
    raise ValueError(f"truncate_longest_first: budget must be >= 0, got {budget}")
  if len_a + len_b <= budget:
    return len_a, len_b
  if len_a <= len_b:
    new_a = min(len_a, max(budget // 2, budget - len_b))
    return new_a, budget - new_a
  new_b = min(len_b, max(budget // 2, budget - len_a))
  return budget - new_b, new_b


def build_inputs(tokenizer: Tokenizer, ids_a, ids_b=None, max_tokens: int = 0,
                 add_special_tokens: bool = True
                 ) -> tuple[np.ndarray, np.ndarray | None, bool]:
  """Model inputs of one text or a text pair: ``[CLS] a [SEP]`` / ``[CLS] a [SEP] b [SEP]``.

  Args:
    tokenizer: gives ``cls_id`` / ``sep_id``.
    ids_a: int[n_a] ids of the first text (no special tokens).
    ids_b: int[n_b] ids of the second text, or None for a single text.
    max_tokens: 0 keeps everything; > 0 cuts the text(s) longest-first
      (:func:`truncate_longest_first`) so that the result, special tokens included, has at
      most this many ids.
    add_special_tokens: False leaves out [CLS] and [SEP] (then a pair is just a + b).

  Returns:
    (input_ids int32[L], token_type_ids int32[L] (0 on [CLS] a [SEP], 1 on b [SEP]) or None
    for a single text, whether the text(s) were truncated).
  """
  a = np.asarray(ids_a, np.int32)
  b = None if ids_b is None else np.asarray(ids_b, np.int32)
  specials = 0 if not add_special_tokens else 2 if b is None else 3
  total = len(a) + (0 if b is None else len(b)) + specials
  truncated = bool(max_tokens) and total > max_tokens
  if truncated:
    budget = max_tokens - specials
    if budget < 0:
      raise ValueError(f"max_tokens={max_tokens} cannot hold the {specials} special tokens")
    la, lb = truncate_longest_first(len(a), 0 if b is None else len(b), budget)
    a = a[:la]
    b = None if b is None else b[:lb]
  cls_ = [tokenizer.cls_id] if add_special_tokens else []
  sep = [tokenizer.sep_id] if add_special_tokens else []
  first = np.concatenate([np.asarray(cls_, np.int32), a, np.asarray(sep, np.int32)])
  if b is None:
    return first, None, truncated
  second = np.concatenate([b, np.asarray(sep, np.int32)])
  types = np.concatenate([np.zeros(len(first), np.int32), np.ones(len(second), np.int32)])
  return np.concatenate([first, second]), types, truncated
