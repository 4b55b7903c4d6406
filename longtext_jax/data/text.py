"""Text examples -> model examples: tokenization, special tokens, truncation, label encoding.

Every text loader (local files, TFDS) produces *records*: plain dicts with

* ``text`` (str) and optionally ``text_pair`` (str), or ``words`` (list[str]) for tagging;
* ``label`` (one label), ``labels`` (a list of labels) or ``tags`` (one per word), as names
  (str) or integer ids;
* ``where``: a human-readable origin ("train.jsonl:17") used in every error message.

:class:`LabelVocab` maps label names to ids, :class:`TextEncoder` turns a record into the
arrays a batch needs (``input_ids``, ``mask``, ``token_type_ids`` for pairs, ``label`` int,
``labels`` multi-hot float[C] or ``tags`` int[n]), and :class:`ExampleSource` is the
random-access source the Grain pipelines read (eager: a list of encoded examples; lazy: records
encoded on access, e.g. a TFDS ``data_source``).

Bad input never crashes an epoch half-way: invalid UTF-8 is replaced when files are read
(counted in :class:`LoadStats`), empty texts fail before training or are skipped and counted
(``config.data.on_empty``), labels outside the label set fail before training naming the
example, and documents are kept whole unless ``config.data.max_tokens`` truncates them
(counted) or, for unlabelled text, splits them into pieces (``config.data.long_documents``).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

from absl import logging
import numpy as np

from longtext_jax.data import pipeline
from longtext_jax.data import tokenizers

# config.data.long_documents: what becomes of a document longer than data.max_tokens.
LONG_DOCUMENTS = ("cut", "split")
# The label layouts whose documents may be split (no label belongs to the whole document).
SPLIT_LAYOUTS = ("none",)

# Documents longer than this many tokens are counted as "long" (the long-document benchmark's
# long subset: more than 510 word pieces + [CLS] + [SEP]).
LONG_DOC_TOKENS = 512


@dataclasses.dataclass
class LoadStats:
  """Counters of what a loader did to its input, reported once per split (:meth:`log`)."""
  examples: int = 0  # Examples kept.
  empty_skipped: int = 0  # Records with an empty text, dropped (on_empty='skip').
  label_skipped: int = 0  # Records dropped for their label (skip_labels, skip_unlabeled).
  invalid_utf8: int = 0  # Invalid UTF-8 byte sequences replaced by U+FFFD.
  truncated: int = 0  # Examples cut to config.data.max_tokens.
  split_documents: int = 0  # Documents split into several examples (long_documents='split').
  long_docs: int = 0  # Examples longer than LONG_DOC_TOKENS (after any truncation).
  max_tokens_seen: int = 0  # Longest example (before truncation).
  files_skipped: int = 0  # text_dir: files not read (hidden, other extension, too deep).
  in_train: int = 0  # eval/test files: examples whose text is also a training example's.
  multiline_rows: int = 0  # CSV rows whose quoted cell spans lines (legal CSV, but a stray
  # quote also makes one row of several: the first is named in a warning).

  def summary(self, what: str) -> str:
    """One line: ``what`` and every count, e.g. for the run's log."""
    counts = ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(self).items())
    return f"{what}: {counts}"

  def log(self, what: str) -> None:
    """Logs :meth:`summary` at WARNING level, so that the CLI (which hides INFO) shows it.

    One line per split; it says what was dropped, replaced or cut, which a user must see.
    """
    logging.warning("%s", self.summary(what))


# A string label that is an integer id: ASCII digits with an optional minus sign (not '²' or
# '--1', which str.isdigit / lstrip('-') would take and int() refuses).
_INT_LABEL = re.compile(r"-?[0-9]+")


def is_int_label(x: Any) -> bool:
  """Whether ``x`` is an integer label id: an int (not a bool) or a string of digits."""
  if isinstance(x, (bool, np.bool_)):
    return False
  if isinstance(x, (int, np.integer)):
    return True
  return isinstance(x, str) and _INT_LABEL.fullmatch(x.strip()) is not None


class LabelVocab:
  """Label names <-> ids.

  Labels that are all integers (JSON ints or digit strings) are ids already; other labels are
  names mapped through ``names`` (``config.data.label_names``, in id order) or, when that is
  empty, the sorted set of the training split's labels.
  """

  def __init__(self, names: Sequence[str] | None, num_ids: int = 0):
    """Args: names: label names in id order, or None when labels are integer ids already;
    num_ids: > 0 bounds integer ids to [0, num_ids) (the task's num_classes)."""
    self.names = None if names is None else [str(n) for n in names]
    self.num_ids = num_ids
    self._ids = None if names is None else {n: i for i, n in enumerate(self.names)}
    if self._ids is not None and len(self._ids) != len(self.names):
      raise ValueError(f"label names are not unique: {self.names}")

  @classmethod
  def build(cls, configured: Sequence[str], train_labels: Iterable[Any]) -> "LabelVocab":
    """From ``config.data.label_names`` if given, else from a scan of the training labels."""
    if configured:
      return cls(list(configured))
    labels = list(train_labels)
    if labels and all(is_int_label(x) for x in labels):
      return cls(None)  # Integer ids, used as they are.
    return cls(sorted({str(x) for x in labels}))

  def __len__(self) -> int:
    return 0 if self.names is None else len(self.names)

  def encode(self, label: Any, where: str) -> int:
    """The id of ``label``; errors name ``where`` (the record's file:line) and the label set."""
    if self._ids is None:
      if not is_int_label(label):
        raise ValueError(f"{where}: label {label!r} is not an integer id, but the training "
                         "labels were all integers (set config.data.label_names to use names)")
      if self.num_ids and not 0 <= int(label) < self.num_ids:
        raise ValueError(f"{where}: label {label!r} is outside the label set [0, "
                         f"{self.num_ids}) (config.task.num_classes={self.num_ids})")
      return int(label)
    key = str(label)
    if key not in self._ids:
      shown = self.names[:20] + (["..."] if len(self.names) > 20 else [])
      raise ValueError(f"{where}: label {label!r} is outside the label set "
                       f"{shown} ({len(self.names)} labels)")
    return self._ids[key]


@dataclasses.dataclass
class TextEncoder:
  """Encodes records for one task.

  Attributes:
    tokenizer: any :class:`longtext_jax.data.tokenizers.Tokenizer`.
    layout: the label layout the task asks for (``Task.label_layout``): 'label' (one id),
      'multi_hot' (a set of classes), 'tags' (one per word), 'none' / 'mlm' (no labels).
    num_classes: classes (multi-hot width for 'multilabel').
    labels: maps label / tag names to ids.
    max_tokens: 0 keeps documents whole; > 0 truncates (special tokens included) and counts.
    add_special_tokens: ``[CLS] a [SEP]`` / ``[CLS] a [SEP] b [SEP]`` (not for tagging).
    cut_fields: tagging only, the task's ``cut_fields(tag_ids, kept_words)`` (None: none):
      what a cut at ``max_tokens`` removes from the gold, as per-example fields (e.g. the
      gold spans past the cut, which span F1 then counts as missed).
    long_documents: what :meth:`encode_all` does with a document longer than ``max_tokens``:
      'cut' (keeps its first ``max_tokens`` tokens, counted in ``truncated``) or 'split'
      (unlabelled layouts only: every token kept, in consecutive pieces; see
      :meth:`encode_all`). ``__call__`` always cuts.
  """
  tokenizer: Any
  layout: str
  num_classes: int
  labels: LabelVocab
  max_tokens: int = 0
  add_special_tokens: bool = True
  cut_fields: Callable[[Sequence[int], int], Mapping[str, np.ndarray]] | None = None
  long_documents: str = "cut"

  def __post_init__(self):
    if self.long_documents not in LONG_DOCUMENTS:
      raise ValueError(f"long_documents must be one of {LONG_DOCUMENTS}, got "
                       f"{self.long_documents!r}")

  @property
  def splits(self) -> bool:
    """Whether :meth:`encode_all` splits documents longer than ``max_tokens``."""
    return self.long_documents == "split" and self.max_tokens > 0

  def encode_all(self, record: Mapping[str, Any], stats: LoadStats | None = None
                 ) -> list[dict[str, np.ndarray]]:
    """One record -> its examples, in document order.

    With ``long_documents='cut'`` (or ``max_tokens=0``) that is ``[self(record)]``. With
    'split', a text of n tokens becomes ``ceil(n / (max_tokens - specials))`` examples
    (one when it fits): consecutive, non-overlapping pieces of the document's token ids,
    each with its own special tokens (``[CLS] piece [SEP]`` unless ``add_special_tokens``
    is off) and at most ``max_tokens`` ids, so that every token is trained on (language
    modelling over long articles; a piece's first token has no context from the one
    before). A text that fits gives exactly what ``__call__`` gives.

    Raises:
      ValueError: naming the record: a labelled layout or a text pair with 'split' (a
        label is the whole document's; a pair's two texts would be cut apart), or a
        ``max_tokens`` that leaves no room for text.
    """
    if not self.splits:
      return [self(record, stats)]
    where = record.get("where", "?")
    if self.layout not in SPLIT_LAYOUTS:
      raise ValueError(f"{where}: config.data.long_documents='split' is for unlabelled text "
                       f"(task lm); this task's examples carry a label per document "
                       f"({self.layout!r}): use 'cut', or an encoder that reads whole "
                       "documents")
    if record.get("text_pair") is not None:
      raise ValueError(f"{where}: config.data.long_documents='split' cannot split a text "
                       "pair (its two texts would be cut apart): use 'cut'")
    ids = self.tokenizer.encode(record["text"])
    specials = 2 if self.add_special_tokens else 0
    body = self.max_tokens - specials
    if body < 1:
      raise ValueError(f"config.data.max_tokens={self.max_tokens} leaves no room for text")
    out = []
    for start in range(0, max(len(ids), 1), body):  # Each piece fits: none is cut.
      ex = self._text_inputs(ids[start:start + body], None, stats)
      self._add_label(ex, record)
      out.append(self._counted(ex, stats))
    if stats is not None:
      stats.max_tokens_seen = max(stats.max_tokens_seen, len(ids) + specials)
      stats.split_documents += int(len(out) > 1)
    return out

  def __call__(self, record: Mapping[str, Any], stats: LoadStats | None = None
               ) -> dict[str, np.ndarray]:
    """One record -> ``input_ids`` int32[L], ``mask`` bool[L], ``token_type_ids`` int32[L]
    (pairs), and ``label`` int32 / ``labels`` float32[C] / ``tags`` int32[L] with
    ``tag_mask`` bool[L] (True at each word's first token: the positions that are labels);
    counts into ``stats``."""
    if self.layout == "tags":
      ex = self._encode_tagging(record, stats)
    else:
      tok = self.tokenizer
      ex = self._text_inputs(
          tok.encode(record["text"]),
          tok.encode(record["text_pair"]) if record.get("text_pair") is not None else None,
          stats)
      self._add_label(ex, record)
    return self._counted(ex, stats)

  @staticmethod
  def _counted(ex: dict[str, np.ndarray], stats: LoadStats | None) -> dict[str, np.ndarray]:
    """Counts ``ex`` as an example kept (and whether it is long) into ``stats``."""
    if stats is not None:
      stats.examples += 1
      stats.long_docs += int(len(ex["input_ids"]) > LONG_DOC_TOKENS)
    return ex

  def _text_inputs(self, a, b, stats) -> dict[str, np.ndarray]:
    """Token ids of a text (and its pair, or None) -> the model's inputs, cut at
    ``max_tokens`` (counted)."""
    tok = self.tokenizer
    specials = (0 if not self.add_special_tokens else 2 if b is None else 3)
    total = len(a) + (0 if b is None else len(b)) + specials
    if stats is not None:
      stats.max_tokens_seen = max(stats.max_tokens_seen, total)
    if self.max_tokens and total > self.max_tokens and (
        self.max_tokens - specials < (1 if b is None else 2)):
      raise ValueError(f"config.data.max_tokens={self.max_tokens} leaves no room for text")
    ids, types, truncated = tokenizers.build_inputs(tok, a, b, self.max_tokens,
                                                    self.add_special_tokens)
    if truncated and stats is not None:
      stats.truncated += 1
    if not len(ids):  # An empty text kept (on_empty='keep') without special tokens: one
      # [UNK], so that it stays an example (a row without tokens is filler, counted nowhere).
      ids = np.asarray([tok.unk_id], np.int32)
      types = None if types is None else np.zeros(1, np.int32)
    ex = {"input_ids": ids, "mask": np.ones(len(ids), bool)}
    if types is not None:
      ex["token_type_ids"] = types
    return ex

  def _add_label(self, ex, record) -> None:
    where = record.get("where", "?")
    if self.layout == "label":
      if "label" not in record:
        raise ValueError(f"{where}: no label")
      ex["label"] = np.int32(self.labels.encode(record["label"], where))
    elif self.layout == "multi_hot":
      if "labels" not in record:
        raise ValueError(f"{where}: no list of labels")
      hot = np.zeros(self.num_classes, np.float32)
      for name in record["labels"]:
        i = self.labels.encode(name, where)
        if not 0 <= i < self.num_classes:
          raise ValueError(f"{where}: label {name!r} (id {i}) is outside the label set "
                           f"[0, {self.num_classes})")
        hot[i] = 1.0
      ex["labels"] = hot
    elif self.layout == "targets":  # Regression values, float32[T].
      if "target" not in record:
        raise ValueError(f"{where}: no regression target")
      ex["target"] = np.asarray(record["target"], np.float32)
    elif self.layout in ("none", "mlm"):
      pass  # Unlabelled text.
    else:
      raise ValueError(f"text loaders do not support the label layout {self.layout!r} "
                       "(they give 'label', 'multi_hot', 'tags', 'targets' or no labels)")

  def _encode_tagging(self, record, stats) -> dict[str, np.ndarray]:
    where = record.get("where", "?")
    if "words" not in record or "tags" not in record:
      raise ValueError(f"{where}: a tagging task needs words and tags (CoNLL files, or a "
                       "TFDS tagging set such as conll2003)")
    words, tags = record["words"], record["tags"]
    if len(words) != len(tags):
      raise ValueError(f"{where}: {len(words)} words but {len(tags)} tags")
    ids, tag_ids, starts = [], [], []
    n = 0
    for j, (word, tag) in enumerate(zip(words, tags)):
      tag_ids.append(self.labels.encode(tag, where))
      pieces = np.asarray(self.tokenizer.encode(word if j == 0 else " " + word), np.int32)
      if len(pieces) == 0:
        pieces = np.asarray([self.tokenizer.unk_id], np.int32)
      ids.append(pieces)
      starts.append(n)
      n += len(pieces)
    ids_n = np.concatenate(ids)
    # Each word's tag on all its pieces; only the first piece (tag_mask) is a label: the
    # loss, token accuracy and span F1 count words, not sub-tokens.
    tags_n = np.repeat(np.asarray(tag_ids, np.int32), [len(p) for p in ids])
    tag_mask = np.zeros(n, bool)
    tag_mask[starts] = True
    if stats is not None:
      stats.max_tokens_seen = max(stats.max_tokens_seen, n)
    kept = len(words)
    if self.max_tokens and n > self.max_tokens:
      ids_n, tags_n, tag_mask = (x[:self.max_tokens] for x in (ids_n, tags_n, tag_mask))
      kept = int(np.sum(tag_mask))
      if stats is not None:
        stats.truncated += 1
    ex = {"input_ids": ids_n, "mask": np.ones(len(ids_n), bool), "tags": tags_n,
          "tag_mask": tag_mask}
    if self.cut_fields is not None:
      ex.update(self.cut_fields(tag_ids, kept))
    return ex


def is_empty(record: Mapping[str, Any]) -> bool:
  """Whether a record has no words, or an empty (blank) text or text pair."""
  if "words" in record:
    return not record["words"]
  if not str(record.get("text", "")).strip():
    return True
  return record.get("text_pair") is not None and not str(record["text_pair"]).strip()


def drop_empty(records: Iterable[Mapping[str, Any]], on_empty: str, stats: LoadStats
               ) -> list[Mapping[str, Any]]:
  """Empty texts: ``on_empty='error'`` raises naming the record, 'skip' drops and counts,
  'keep' keeps them (encoded as ``[CLS] [SEP]``, or one ``[UNK]`` without special tokens)."""
  if on_empty not in ("error", "skip", "keep"):
    raise ValueError(f"config.data.on_empty must be 'error', 'skip' or 'keep', got "
                     f"{on_empty!r}")
  if on_empty == "keep":
    return list(records)
  kept = []
  for r in records:
    if is_empty(r):
      if on_empty == "error":
        raise ValueError(f"{r.get('where', '?')}: empty text (set config.data.on_empty="
                         "'skip' to drop such examples)")
      stats.empty_skipped += 1
      continue
    kept.append(r)
  return kept


def drop_labels(records: Iterable[Mapping[str, Any]], skip: Sequence[Any], stats: LoadStats
                ) -> list[Mapping[str, Any]]:
  """Drops (and counts) records whose single label is in ``skip`` (e.g. SNLI's -1, "no gold
  label"), and multi-label records whose list of labels is None (a null label, read with
  ``skip_unlabeled``); every other label is still validated."""
  records, skip = list(records), set(skip)
  kept = [r for r in records
          if ("label" not in r or r["label"] not in skip)
          and not ("labels" in r and r["labels"] is None)]
  stats.label_skipped += len(records) - len(kept)
  return kept


class ExampleSource(pipeline.ArraySource):
  """A random-access split of variable-length examples (dicts of arrays).

  Args:
    examples: a sequence of records or encoded examples (a list, or a lazy random-access
      source such as a TFDS ``data_source``).
    transform: record -> encoded example, applied on access (None: already encoded).
    stats: what the loader counted.
    eager: whether ``examples`` is an in-memory list (then labels are validated up front and
      lengths are known, which length bucketing needs).
    where: the origin of each example ("train.csv:12"), used in error messages.
    label_names: names of the label (or tag) ids in id order, None when the labels are ids
      already (saved with the run by :func:`longtext_jax.data.save_data_info`).
    tokenizer_info: ``{'kind', 'path', 'vocab_size'}`` of the tokenizer that encoded the text
      (None: not a text source).
  """

  def __init__(self, examples: Sequence[Any],
               transform: Callable[[Any], dict[str, np.ndarray]] | None = None,
               stats: LoadStats | None = None, eager: bool = True,
               where: Sequence[str] | None = None,
               label_names: Sequence[str] | None = None,
               tokenizer_info: Mapping[str, Any] | None = None):
    if len(examples) == 0:
      raise ValueError("empty split: no examples")
    self.examples = examples
    self.transform = transform
    self.stats = stats or LoadStats()
    self.eager = eager and transform is None
    self.where = where  # Origin of each example ("file:line"), for error messages.
    self.label_names = None if label_names is None else list(label_names)
    self.tokenizer_info = None if tokenizer_info is None else dict(tokenizer_info)
    self._len = len(examples)
    self._lengths = None

  @property
  def arrays(self):
    """Not available: the examples have different lengths (use ``__getitem__``)."""
    raise AttributeError("an ExampleSource holds variable-length examples, not stacked arrays")

  def __getitem__(self, i: int) -> dict[str, np.ndarray]:
    """Example ``i`` (encoded on access for lazy sources) with its ``example_id``."""
    i = int(i)
    ex = self.examples[i]
    if self.transform is not None:
      ex = self.transform(ex)
    ex = dict(ex)
    ex.setdefault("example_id", np.int64(i))
    return ex

  def lengths(self) -> np.ndarray | None:
    """int[N] token counts (eager sources only; None for lazy ones)."""
    if not self.eager:
      return None
    if self._lengths is None:
      self._lengths = np.array([len(ex["mask"]) for ex in self.examples], np.int64)
    return self._lengths

  def validate(self, task, chunk: int = 256) -> None:
    """Runs ``task.validate`` over every example (eager sources), naming the bad one."""
    if not self.eager:
      return
    for start in range(0, len(self), chunk):
      rows = [self[i] for i in range(start, min(start + chunk, len(self)))]
      batch = pipeline.collate(rows)
      ids = (list(self.where[start:start + len(rows)]) if self.where is not None
             else batch["example_id"])
      task.validate(batch, ids)


def tokenizer_info(tokenizer) -> dict[str, Any]:
  """``{'kind', 'path', 'vocab_size'}`` of a tokenizer, as saved in the run's data info."""
  kind = {"ByteTokenizer": "byte", "SentencePieceTokenizer": "sentencepiece",
          "WordPieceTokenizer": "wordpiece", "WordTokenizer": "word"}.get(type(tokenizer).__name__,
                                                 type(tokenizer).__name__)
  return {"kind": kind, "path": getattr(tokenizer, "path", None) or "",
          "vocab_size": int(tokenizer.vocab_size)}


def encoded_source(records: Sequence[Mapping[str, Any]], encoder: TextEncoder,
                   stats: LoadStats) -> ExampleSource:
  """Encodes records eagerly into an :class:`ExampleSource` that remembers their origins,
  the label names and the tokenizer. A record may give several examples
  (:meth:`TextEncoder.encode_all`, ``long_documents='split'``): each is named
  ``"<where> (piece k of n)"``."""
  examples, wheres = [], []
  for r in records:
    where = r.get("where", "?")
    try:
      pieces = encoder.encode_all(r, stats)
    except Exception as e:  # pylint: disable=broad-exception-caught
      if str(e).startswith(where):
        raise  # Ours: it names the record already.
      # e.g. a tokenizer library's own error: name the record.
      raise ValueError(f"{where}: could not encode this example ({type(e).__name__}: {e})"
                       ) from e
    examples.extend(pieces)
    wheres.extend([where] if len(pieces) == 1 else
                  [f"{where} (piece {k + 1} of {len(pieces)})" for k in range(len(pieces))])
  return ExampleSource(examples, stats=stats, where=wheres,
                       label_names=encoder.labels.names,
                       tokenizer_info=tokenizer_info(encoder.tokenizer))


def fixed_length(source: ExampleSource, length: int) -> pipeline.ArraySource:
  """The examples of an eager ``source`` stacked and padded to ``length`` tokens.

  For sources whose rows have one length (the S-LSTM fine-tuning files, the pydoc pairs):
  ``input_ids`` int32[N, length] padded with 0, ``mask`` bool[N, length], ``token_type_ids``
  int32[N, length] for pairs, labels stacked. ``label_names``, ``tokenizer_info`` and
  ``stats`` are kept as attributes of the returned source.
  """
  if not source.eager:
    raise ValueError("fixed_length needs an in-memory source")
  arrays = pipeline.collate([source[i] for i in range(len(source))], length=length)
  out = pipeline.ArraySource(arrays)
  out.label_names = source.label_names
  out.tokenizer_info = source.tokenizer_info
  out.stats = source.stats
  return out
