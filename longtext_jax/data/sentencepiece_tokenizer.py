"""SentencePiece tokenizer with the project's fixed special-token ids.

Train a model from text files or any iterable of strings (:func:`train_sentencepiece`, or the CLI
``python -m longtext_jax.tokenize train ...``), then load it with
:class:`SentencePieceTokenizer`, which implements the :class:`~longtext_jax.data.tokenizers.
Tokenizer` protocol. Models trained here always have ``<pad>``=0, ``<unk>``=1, ``<s>``=2,
``</s>``=3, ``<mask>``=4 (``tokenizers.SPECIAL_IDS``); loading a model with other ids raises.
"""
from __future__ import annotations

import io
import math
import os
import pathlib
import random
from typing import Iterable, Iterator

import numpy as np
import sentencepiece as spm

from longtext_jax.data.tokenizers import SPECIAL_IDS, SPECIAL_PIECES, build_inputs

WORD_START = "\u2581"  # '▁': SentencePiece's mark of a piece that starts a word.


def sample_lines(lines: Iterable[str], k: int, seed: int = 0) -> tuple[list[str], int]:
  """A uniform random sample of ``k`` lines, in their input order, from one pass over ``lines``.

  Reservoir sampling (Li's "Algorithm L"): memory holds at most ``k`` lines, ``lines`` may be
  any iterable (a generator over a huge corpus is read once), and each line is kept with
  probability ``k / n``. The sample depends only on ``lines``, ``k`` and ``seed``.

  Args:
    lines: the lines to sample from.
    k: sample size (>= 1).
    seed: seeds the sample (``random.Random(seed)``).

  Returns:
    ``(sample, n)``: the sample in the order of ``lines`` (all of them, unchanged, when
    ``n <= k``) and ``n``, the number of lines read.
  """
  if k < 1:
    raise ValueError(f"sample size k must be >= 1, got {k}")
  rng = random.Random(seed)

  def log_u() -> float:  # log of a uniform draw in (0, 1)
    return math.log(1.0 - rng.random())

  def skip(log_w: float) -> int:  # lines passed over before the next one kept
    return math.floor(log_u() / math.log(-math.expm1(log_w))) if log_w < 0 else 0

  sample: list[str] = []
  index: list[int] = []  # the input position of each sampled line
  n = 0
  log_w = next_i = 0
  for n, line in enumerate(lines, 1):
    i = n - 1
    if i < k:
      sample.append(line)
      index.append(i)
      if i == k - 1:
        log_w = log_u() / k
        next_i = k + skip(log_w)
    elif i == next_i:
      j = rng.randrange(k)
      sample[j], index[j] = line, i
      log_w += log_u() / k
      next_i = i + 1 + skip(log_w)
  if n > k:
    order = sorted(range(k), key=index.__getitem__)
    sample = [sample[j] for j in order]
  return sample, n


def _drain(items: list[str]) -> Iterator[str]:
  """Yields ``items`` in order, dropping each from the list (SentencePiece keeps its copy)."""
  items.reverse()
  while items:
    yield items.pop()


def train_sentencepiece(texts: Iterable[str], vocab_size: int, output_prefix: str | None = None,
                        model_type: str = "unigram", character_coverage: float = 1.0,
                        max_sentences: int = 2_000_000, seed_sentencepieces: int | None = None,
                        num_threads: int = 1, seed: int = 0) -> bytes:
  """Trains a SentencePiece model whose special tokens have the fixed project ids.

  The same arguments and lines give the same model, byte for byte (with ``num_threads=1``).

  Args:
    texts: training sentences/lines (an iterable of str, read once; blank lines are dropped;
      files: see :func:`read_lines`).
    vocab_size: target vocabulary size including the 5 special tokens. On a corpus too small
      for it the vocabulary is smaller (``hard_vocab_limit=False``); check ``vocab_size`` of
      the loaded tokenizer.
    output_prefix: if given, writes ``<prefix>.model`` and ``<prefix>.vocab``.
    model_type: 'unigram' (default), 'bpe', 'word' or 'char'.
    character_coverage: 1.0 for small alphabets; ~0.9995 for Chinese/Japanese.
    max_sentences: train on at most this many lines (0: all; else more than 100, as
      SentencePiece requires). A corpus with more is sampled uniformly, in its own order and
      drawn from ``seed`` (:func:`sample_lines`), before SentencePiece sees it; with fewer,
      every line is used and ``seed`` plays no part.
    seed_sentencepieces: unigram seed vocabulary size (default: SentencePiece's).
    num_threads: trainer threads (1 keeps the result reproducible).
    seed: seed of the sample of ``max_sentences`` lines.

  Returns:
    The serialized model proto.
  """
  if vocab_size <= len(SPECIAL_IDS):
    raise ValueError(f"vocab_size must exceed the {len(SPECIAL_IDS)} special tokens, got "
                     f"{vocab_size}")
  if max_sentences < 0 or 0 < max_sentences <= 100:
    raise ValueError(f"max_sentences must be 0 (all lines) or more than 100, got "
                     f"{max_sentences}")
  texts = (t for t in texts if t.strip())
  # SentencePiece's own sampling (input_sentence_size < lines, shuffle_input_sentence) is
  # unseeded, so the sample is drawn here. Below the cap SentencePiece gets the options it
  # always had (they are stored in the model), which then keep every line in order.
  input_sentence_size, shuffle = max_sentences, True
  if max_sentences:
    sample, num_lines = sample_lines(texts, max_sentences, seed)
    if num_lines > max_sentences:
      input_sentence_size, shuffle = 0, False  # 0: all of the sample, as given
    texts = _drain(sample)
  model = io.BytesIO()
  kwargs = dict(
      sentence_iterator=texts, model_writer=model, vocab_size=vocab_size,
      model_type=model_type, character_coverage=character_coverage,
      pad_id=SPECIAL_IDS["pad"], unk_id=SPECIAL_IDS["unk"], bos_id=SPECIAL_IDS["cls"],
      eos_id=SPECIAL_IDS["sep"], pad_piece=SPECIAL_PIECES["pad"],
      unk_piece=SPECIAL_PIECES["unk"], bos_piece=SPECIAL_PIECES["cls"],
      eos_piece=SPECIAL_PIECES["sep"], user_defined_symbols=[SPECIAL_PIECES["mask"]],
      hard_vocab_limit=False, input_sentence_size=input_sentence_size,
      shuffle_input_sentence=shuffle, num_threads=num_threads, minloglevel=2,
      max_sentence_length=16384)
  if seed_sentencepieces:
    kwargs["seed_sentencepiece_size"] = seed_sentencepieces
  spm.SentencePieceTrainer.train(**kwargs)
  proto = model.getvalue()
  if output_prefix:
    prefix = pathlib.Path(output_prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    tmp = prefix.with_name(prefix.name + f".model.tmp{os.getpid()}")
    tmp.write_bytes(proto)
    os.replace(tmp, prefix.with_name(prefix.name + ".model"))  # atomic for concurrent users
    tok = SentencePieceTokenizer(proto)
    prefix.with_name(prefix.name + ".vocab").write_text(
        "".join(f"{tok.sp.id_to_piece(i)}\t{tok.sp.get_score(i)}\n"
                for i in range(tok.vocab_size)), encoding="utf-8")
  return proto


def read_lines(paths: Iterable[str], pattern: str = "*.txt") -> Iterable[str]:
  """Lines of text files; a folder contributes its files matching ``pattern`` (recursive)."""
  for path in paths:
    p = pathlib.Path(path)
    files = [p] if p.is_file() else sorted(p.rglob(pattern))
    if not files:
      raise ValueError(f"no text files at {path!r}")
    for f in files:
      with open(f, encoding="utf-8", errors="replace") as fh:
        for line in fh:
          yield line.rstrip("\n")


class SentencePieceTokenizer:
  """A trained SentencePiece model behind the project's ``Tokenizer`` protocol.

  Args:
    model: path of a ``.model`` file, or the serialized model proto (bytes).
  """

  def __init__(self, model: str | os.PathLike | bytes):
    self.sp = spm.SentencePieceProcessor()
    if isinstance(model, (bytes, bytearray)):
      self.sp.LoadFromSerializedProto(bytes(model))
      self.path = None
    else:
      if not os.path.exists(model):
        raise ValueError(f"SentencePiece model {str(model)!r} does not exist; train one with "
                         "`python -m longtext_jax.tokenize train`")
      self.sp.Load(str(model))
      self.path = str(model)
    for name, want in SPECIAL_IDS.items():
      got = self.sp.piece_to_id(SPECIAL_PIECES[name])
      if got != want or self.sp.id_to_piece(want) != SPECIAL_PIECES[name]:
        raise ValueError(
            f"SentencePiece model {self.path or '<bytes>'}: {SPECIAL_PIECES[name]} has id "
            f"{got}, this project needs {want}; train it with longtext_jax.tokenize")
    self.vocab_size = int(self.sp.get_piece_size())
    self.pad_id = SPECIAL_IDS["pad"]
    self.unk_id = SPECIAL_IDS["unk"]
    self.cls_id = SPECIAL_IDS["cls"]
    self.sep_id = SPECIAL_IDS["sep"]
    self.mask_id = SPECIAL_IDS["mask"]
    self.special_ids = tuple(sorted(SPECIAL_IDS.values()))
    # Ids whose piece starts a new word ('▁...'); used by whole-word masking.
    self._word_start_V = np.array(
        [self.sp.id_to_piece(i).startswith(WORD_START) for i in range(self.vocab_size)])
    self._word_start_V[list(self.special_ids)] = True

  def encode(self, text: str) -> np.ndarray:
    """int32[n] ids of ``text``, no special token added."""
    return np.asarray(self.sp.encode(text, out_type=int), np.int32)

  def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
    """``encode`` of each text: a list of int32[n_i]."""
    return [np.asarray(ids, np.int32) for ids in self.sp.encode(list(texts), out_type=int)]

  def decode(self, ids) -> str:
    """Text of ``ids``; pad, <s>, </s> and <mask> are dropped (unknowns read ' ⁇ ')."""
    drop = {self.pad_id, self.cls_id, self.sep_id, self.mask_id}
    return self.sp.decode([int(i) for i in np.asarray(ids).reshape(-1) if int(i) not in drop])

  def pieces(self, ids) -> list[str]:
    """The piece string of each id of ``ids``."""
    return [self.sp.id_to_piece(int(i)) for i in np.asarray(ids).reshape(-1)]

  def word_starts(self, ids) -> np.ndarray:
    """bool[...]: True where the id begins a word (its piece starts with '▁') or is special."""
    return self._word_start_V[np.asarray(ids)]

  def encode_pair(self, text_a: str, text_b: str | None = None,
                  max_len: int | None = None) -> np.ndarray:
    """``<s> A </s>`` or ``<s> A </s> B </s>`` (the S-LSTM paper's sentence-pair input).

    Args:
      text_a: the first text.
      text_b: the second text, or None for a single text.
      max_len: None keeps everything; else the longer text is cut first
        (:func:`~longtext_jax.data.tokenizers.truncate_longest_first`) so that the result
        has at most ``max_len`` ids.

    Returns:
      int32[L] ids (the loaders' ``input_ids`` of the same texts; they add ``token_type_ids``).
    """
    extra = 2 if text_b is None else 3
    if max_len is not None and max_len < extra:
      raise ValueError(f"max_len {max_len} cannot hold the {extra} special tokens")
    ids, _, _ = build_inputs(self, self.encode(text_a),
                             None if text_b is None else self.encode(text_b), max_len or 0)
    return ids
