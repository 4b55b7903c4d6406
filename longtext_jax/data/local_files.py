"""The one local-file loader: JSONL, CSV, TSV, plain-text folders and CoNLL column files.

``config.data.name = 'local'`` reads ``config.data.train_path`` and ``config.data.eval_path``
(format from ``config.data.format`` or the file extension; ``{data_dir}`` in a path is
replaced by ``config.data.data_dir``) and encodes them in the label layout the task asks for (``task.label_layout``) with the
tokenizer of ``config.data.tokenizer`` (:func:`longtext_jax.data.tokenizers.build_tokenizer`):

========  ================================================================================
jsonl     one JSON object per line (lines end at ``\\n`` only, so raw U+2028/U+2029/U+0085
          inside JSON strings are fine): ``text_field`` (and ``text_pair_field``),
          ``label_field`` holding one label or, for layout 'multi_hot' (multilabel), a list of labels.
csv/tsv   a header row naming the columns (or ``config.data.columns`` for a headerless file,
          e.g. GLUE's CoLA), then one example per row; for 'multilabel' the label cell is split
          on ``label_separator``. TSV is read without quoting (GLUE style).
text_dir  a folder of documents, one per file (see :func:`read_text_dir` for which files).
          Files directly in the folder are unlabelled documents (tasks 'lm'/'mlm'); files in
          a sub-folder are labelled by the sub-folder's name (``train/pos/1.txt`` -> label
          'pos'; aclImdb's and 20News' layout).
conll     columns separated by spaces or tabs (not by other Unicode spaces, which stay inside
          a word), the word in column 0 and its tag in column ``tag_column``; blank lines
          end a sentence; ``-DOCSTART-`` lines are skipped.
conllu    CoNLL-U (Universal Dependencies, ``*.conllu``): 10 tab-separated columns, the word
          in column 1 (FORM) and the tag in column ``tag_column`` (the default -1 reads UPOS,
          column 3); ``#`` comment lines, multi-word token ranges (``3-4``) and empty nodes
          (``8.1``) are skipped.
========  ================================================================================

Text fields must hold a string; a JSON list of strings is joined with single spaces (CLUE's
CSL keyword lists); a number, a list of non-strings or an object is an error naming
``file:line`` and the field; null is an empty text (``config.data.on_empty`` decides).

A file starting with a UTF-8 byte-order mark (Excel's "CSV UTF-8", Notepad) is read without
it; a UTF-16 or UTF-32 file is an error naming it. Unpaired surrogate escapes in JSON strings
(``"\\ud83d"``, half an emoji) are replaced by U+FFFD and counted with the invalid UTF-8.

Sentence pairs (``text_pair_field``) are ``[CLS] a [SEP] b [SEP]`` with ``token_type_ids``
0/1, cut longest-first to ``max_tokens``. Every record remembers ``file:line`` so that a bad
label or an empty text is reported with its place. Files are read as bytes and decoded as
UTF-8 with invalid sequences replaced by U+FFFD and counted; what was dropped, replaced, cut or
skipped is logged once per split at WARNING level (:class:`longtext_jax.data.text.LoadStats`).

``local_text`` (the S-LSTM fine-tuning source before it merged into this one) is kept as a
registry alias: :func:`local_text_source` reads its field names (``train_file``,
``eval_file``, ``text_a``, ``text_b``, ``label``, ``columns``, ``data_dir``, ``seq_len``)
and returns rows padded to ``seq_len``, as it did.
"""
from __future__ import annotations

import codecs
import csv
import dataclasses
import hashlib
import io
import json
import math
import os
import re
import sys
from typing import Any, Mapping, Sequence

from absl import logging
import numpy as np

from longtext_jax.data import text as text_lib
from longtext_jax.data import tokenizers

FORMATS = ("jsonl", "csv", "tsv", "text_dir", "conll", "conllu")
_EXTENSIONS = {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv",
               ".conll": "conll", ".conllu": "conllu", ".bio": "conll"}
# CoNLL-U's column of the universal part-of-speech tag (UPOS), read when tag_column is -1.
CONLLU_UPOS = 3
# Byte-order marks of the encodings other than UTF-8 (UTF-32 LE before UTF-16 LE: a prefix).
_OTHER_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
               (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))
_CONLL_SPACES = re.compile("[ \t]+")  # CoNLL's column separators (not U+00A0 and the like).
# Unpaired UTF-16 surrogates: JSON escapes such as "\ud83d" decode to them; UTF-8 cannot hold them.
_SURROGATE = re.compile("[\ud800-\udfff]")
# Labels that mean "no gold label" (MNLI's '-'), dropped when options.skip_unlabeled.
UNLABELLED = ("", "-")


@dataclasses.dataclass(frozen=True)
class LocalOptions:
  """What the local loader reads and how (the ``config.data`` fields of the same names).

  Attributes:
    train_path, eval_path: file or folder of each split; ``{data_dir}`` is replaced by
      ``data_dir``.
    format: one of FORMATS, or '' to infer it from the extension (a folder is 'text_dir').
    data_dir: root folder substituted for ``{data_dir}`` in the paths.
    columns: column names of a headerless CSV/TSV file (empty: the first row is the header).
    text_field, text_pair_field, label_field: fields (JSON keys, columns) of the text, the
      second text of a pair ('' = single text) and the label.
    label_names: label names in id order; empty: integer labels are ids, other labels are
      the sorted set of the training labels.
    label_separator: separator inside a CSV/TSV multilabel cell.
    tag_column: CoNLL column of the tag (CoNLL-U: -1 reads UPOS, column 3).
    max_tokens: > 0 cuts longer examples (special tokens included), counted.
    long_documents: 'cut' (as above) or 'split': unlabelled text longer than
      ``max_tokens`` becomes consecutive examples of at most ``max_tokens`` tokens
      (:meth:`longtext_jax.data.text.TextEncoder.encode_all`).
    on_empty: 'error' (naming file:line), 'skip' (dropped, counted) or 'keep' (encoded as
      ``[CLS] [SEP]``).
    add_special_tokens: ``[CLS] a [SEP]`` (``b [SEP]``); never for tagging.
    max_examples: > 0 keeps the first this many examples (records: with
      ``long_documents='split'``, documents, before they are split) of each split.
    skip_unlabeled: drop (and count) records whose label is '', '-' or null (without it an
      empty or null label is an error naming ``file:line``).
    fixed_length: > 0 returns rows stacked and padded to this length (``local_text``).
    test_path: '' or the file/folder of a held-out 'test' split (evaluated once at the end).
    eval_fraction: with no ``eval_path``, this fraction of the training file becomes the
      'eval' split (:func:`split_off`, stratified by label).
    split_seed: seed of that split.
  """
  train_path: str
  eval_path: str
  format: str = ""
  data_dir: str = ""
  columns: tuple[str, ...] = ()
  text_field: str = "text"
  text_pair_field: str = ""
  label_field: str = "label"
  label_names: tuple[str, ...] = ()
  label_separator: str = "|"
  tag_column: int = -1
  max_tokens: int = 0
  long_documents: str = "cut"
  on_empty: str = "error"
  add_special_tokens: bool = True
  max_examples: int = 0
  skip_unlabeled: bool = False
  fixed_length: int = 0
  test_path: str = ""
  eval_fraction: float = 0.0
  split_seed: int = 0

  @classmethod
  def from_config(cls, data_config) -> "LocalOptions":
    """The options of ``config.data`` (data source 'local')."""
    d = data_config
    return cls(train_path=d.train_path, eval_path=d.eval_path, format=d.format,
               data_dir=d.data_dir, columns=tuple(d.columns), text_field=d.text_field,
               text_pair_field=d.text_pair_field, label_field=d.label_field,
               label_names=tuple(d.label_names), label_separator=d.label_separator,
               tag_column=d.tag_column, max_tokens=d.max_tokens,
               long_documents=d.long_documents, on_empty=d.on_empty,
               add_special_tokens=d.add_special_tokens, max_examples=d.max_examples,
               skip_unlabeled=d.skip_unlabeled, test_path=d.test_path,
               eval_fraction=d.eval_fraction, split_seed=d.split_seed)

  @classmethod
  def from_local_text_config(cls, data_config) -> "LocalOptions":
    """The options of a ``config.data`` written for the former ``local_text`` source.

    Its fields map as: ``train_file``/``eval_file`` -> the paths, ``text_a`` -> text_field,
    ``text_b`` -> text_pair_field, ``label`` -> label_field, ``seq_len`` -> max_tokens and
    fixed_length; unlabelled rows ('' or '-') are skipped and empty texts kept, as before.
    """
    d = data_config
    return cls(train_path=d.train_file, eval_path=d.eval_file, data_dir=d.data_dir,
               columns=tuple(d.columns), text_field=d.text_a, text_pair_field=d.text_b,
               label_field=d.label, label_names=tuple(d.label_names), max_tokens=d.seq_len,
               on_empty="keep", skip_unlabeled=True, fixed_length=d.seq_len)

  def path(self, split: str) -> str:
    """The path of ``split`` ('train' | 'eval' | 'test') with ``{data_dir}`` filled in."""
    path = {"train": self.train_path, "eval": self.eval_path, "test": self.test_path}[split]
    if not path:
      hint = (" (or set config.data.eval_fraction > 0 to split a dev set off the training "
              "file)" if split == "eval" else "")
      raise ValueError(f"config.data.{split}_path is empty{hint}" if hint else
                       f"config.data.{split}_path is empty: pass --config.data.{split}_path="
                       "<file or folder>")
    if "{data_dir}" in path:
      if not self.data_dir:
        raise ValueError(f"config.data.{split}_path={path!r} needs config.data.data_dir")
      path = path.replace("{data_dir}", self.data_dir)
    return os.path.expanduser(path)  # '--config.data.train_path=~/x' is not expanded by a shell.


def infer_format(path: str, configured: str = "") -> str:
  """``configured`` if set (checked against FORMATS), else the format of ``path``'s
  extension; a folder is 'text_dir'."""
  if configured:
    if configured not in FORMATS:
      raise ValueError(f"config.data.format={configured!r}; choose one of {FORMATS}")
    return configured
  if os.path.isdir(path):
    return "text_dir"
  ext = os.path.splitext(path)[1].lower()
  if ext not in _EXTENSIONS:
    raise ValueError(f"cannot tell the format of {path!r} from its extension; set "
                     f"config.data.format to one of {FORMATS}")
  return _EXTENSIONS[ext]


def read_text(path: str, stats: text_lib.LoadStats) -> str:
  """The file's text; invalid UTF-8 is replaced by U+FFFD and counted. Empty files fail.

  A leading UTF-8 byte-order mark is dropped; a UTF-16 or UTF-32 byte-order mark is an error
  (decoded as UTF-8 such a file would be text interleaved with NUL characters)."""
  if not os.path.exists(path):
    raise ValueError(f"no such file: {path}")
  with open(path, "rb") as f:
    raw = f.read()
  for bom, encoding in _OTHER_BOMS:
    if raw.startswith(bom):
      raise ValueError(f"{path}: the file is {encoding} (it starts with a {encoding} "
                       "byte-order mark); save it as UTF-8")
  if raw.startswith(codecs.BOM_UTF8):
    raw = raw[len(codecs.BOM_UTF8):]
  if not raw.strip():
    raise ValueError(f"{path}: the file is empty")
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError:
    pass
  # Count the replaced sequences: each U+FFFD that the strict decoder did not produce.
  text = raw.decode("utf-8", errors="replace")
  legit = raw.count("\ufffd".encode("utf-8"))
  stats.invalid_utf8 += text.count("\ufffd") - legit
  logging.warning("%s: replaced %d invalid UTF-8 sequence(s) by U+FFFD", path,
                  text.count("\ufffd") - legit)
  return text


def _field(row: dict, name: str, where: str, role: str) -> Any:
  """``row[name]``; a missing field names the row, the fields it has, and the setting that
  names the ``role``'s field ('text', 'text_pair', 'label')."""
  if name not in row:
    tools = "evaluate" if role == "label" else "predict / evaluate"
    raise ValueError(f"{where}: no field {name!r} (fields: {sorted(row)}); if the {role} is "
                     f"in another field, set config.data.{role}_field ({tools}: "
                     f"--{role}_field)")
  return row[name]


def _text(row: dict, name: str, where: str, on_empty: str, role: str = "text") -> str:
  """The text of field ``name``: a string, or a list of strings joined by spaces; null is an
  empty text; anything else is an error naming ``where`` and the field."""
  value = _field(row, name, where, role)
  if isinstance(value, str):
    return value
  if value is None:
    if on_empty == "error":
      raise ValueError(f"{where}: field {name!r} is null, not a text (set "
                       "config.data.on_empty='skip' to drop such examples)")
    return ""
  if isinstance(value, list) and all(isinstance(x, str) for x in value):
    return " ".join(value)
  kind = "list holding non-strings" if isinstance(value, list) else type(value).__name__
  raise ValueError(f"{where}: field {name!r} must hold a text (a string), got a {kind}: "
                   f"{str(value)[:60]!r}")


def _class_label(x: Any, where: str, d) -> Any:
  """A class label read as a JSON number: an integral float (``1.0``, as tables with a
  missing value write integer columns) is the integer id; a fraction, NaN or infinity is
  refused (``1``, ``"1"`` and ``1.0`` made two classes, ``NaN`` a class named 'nan')."""
  if isinstance(x, float):
    if not math.isfinite(x) or x != int(x):
      raise ValueError(f"{where}: field {d.label_field!r} holds {x!r}: a class label is a "
                       "name (string) or an integer id (numbers to predict are "
                       "task.name='regression')")
    return int(x)
  return x


def _no_duplicate_keys(where: str):
  """``object_pairs_hook`` for json.loads: an object with a key twice is an error (JSON
  parsers keep the last value: a record labelled twice trained on one of the two)."""
  def build(pairs):
    out = {}
    for key, value in pairs:
      if key in out:
        raise ValueError(f"{where}: key {key!r} appears twice in one object")
      out[key] = value
    return out
  return build


def _record(row: dict, where: str, d, layout: str) -> dict[str, Any]:
  rec: dict[str, Any] = {"where": where, "text": _text(row, d.text_field, where, d.on_empty)}
  if d.text_pair_field:
    rec["text_pair"] = _text(row, d.text_pair_field, where, d.on_empty, "text_pair")
  if layout == "multi_hot":
    labels = _field(row, d.label_field, where, "label")
    if labels is None:  # Unlabelled (an empty list or cell is a document without labels).
      if not d.skip_unlabeled:
        raise ValueError(f"{where}: field {d.label_field!r} is null (an empty list is a "
                         "document without labels; set config.data.skip_unlabeled=True to "
                         "drop unlabelled rows)")
      rec["labels"] = None
      return rec
    if isinstance(labels, str):
      labels = [x.strip() for x in labels.split(d.label_separator) if x.strip()]
    elif not isinstance(labels, (list, tuple)):
      labels = [labels]
    for x in labels:
      if x is None or isinstance(x, (dict, list, tuple, bool)):
        raise ValueError(f"{where}: field {d.label_field!r} holds {x!r}; labels are names "
                         "(strings) or integer ids")
    rec["labels"] = [x.strip() if isinstance(x, str) else _class_label(x, where, d)
                     for x in labels if not (isinstance(x, str) and not x.strip())]
  elif layout == "label":
    label = _field(row, d.label_field, where, "label")
    if isinstance(label, (list, tuple)):
      raise ValueError(f"{where}: a list of labels {label!r} for a single-label task")
    if isinstance(label, dict):
      raise ValueError(f"{where}: field {d.label_field!r} holds an object {label!r}; a label "
                       "is a name (string) or an integer id")
    if isinstance(label, str):
      label = label.strip()
    elif label is not None:
      label = _class_label(label, where, d)
    if (label is None or label == "") and not d.skip_unlabeled:
      what = "null" if label is None else "empty"
      raise ValueError(f"{where}: field {d.label_field!r} is {what} (set "
                       "config.data.skip_unlabeled=True to drop unlabelled rows)")
    rec["label"] = label
  elif layout == "targets":  # Regression: a number or a list of numbers.
    value = _field(row, d.label_field, where, "label")
    values = value if isinstance(value, (list, tuple)) else [value]
    try:
      rec["target"] = [float(x) for x in values]
    except (TypeError, ValueError):
      raise ValueError(f"{where}: field {d.label_field!r} must hold a number (or a list of "
                       f"numbers) for regression, got {value!r}") from None
  return rec


def read_jsonl(path: str, d, layout: str, stats: text_lib.LoadStats) -> list[dict]:
  """Records of a JSON-lines file. Lines are split at ``\\n`` only (``str.splitlines``
  would also split at U+2028, U+2029, U+0085 and other characters that JSON strings may hold
  raw); a trailing ``\\r`` is ignored; blank lines are skipped."""
  records, surrogates = [], 0
  for n, line in enumerate(read_text(path, stats).split("\n"), 1):
    if not line.strip():
      continue
    where = f"{path}:{n}"
    lines_hint = (" (the file must be JSON Lines: one object per line, not one JSON "
                  "document)" if line.strip() in ("[", "{") or line.lstrip().startswith("[")
                  else "")
    try:
      row = json.loads(line, object_pairs_hook=_no_duplicate_keys(where))
    except json.JSONDecodeError as e:
      raise ValueError(f"{where}: not valid JSON ({e}){lines_hint}") from None
    if not isinstance(row, dict):
      raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}"
                       f"{lines_hint}")
    row, count = _replace_surrogates(row)
    surrogates += count
    records.append(_record(row, where, d, layout))
  if surrogates:
    stats.invalid_utf8 += surrogates
    logging.warning("%s: replaced %d unpaired surrogate escape(s) (\\ud800-\\udfff, e.g. half "
                    "an emoji) by U+FFFD", path, surrogates)
  return records


def _replace_surrogates(value: Any) -> tuple[Any, int]:
  """``value`` (a parsed JSON value) with unpaired surrogates replaced by U+FFFD, and how many
  there were. JSON escapes may hold them; no UTF-8 tokenizer can encode them."""
  if isinstance(value, str):
    return _SURROGATE.subn("\ufffd", value)
  if isinstance(value, list):
    out = [_replace_surrogates(x) for x in value]
    return [x for x, _ in out], sum(c for _, c in out)
  if isinstance(value, dict):
    out = {k: _replace_surrogates(v) for k, v in value.items()}
    return {k: x for k, (x, _) in out.items()}, sum(c for _, c in out.values())
  return value, 0


def read_delimited(path: str, d, layout: str, stats: text_lib.LoadStats, delimiter: str
                   ) -> list[dict]:
  """Records of a CSV (quoted) or TSV (unquoted, GLUE style) file with a header row, or with
  ``d.columns`` naming the columns of a headerless file.

  Empty lines, and whitespace-only lines of a file with several columns, are skipped. In a
  one-column file a whitespace-only line is a row whose text is empty (``d.on_empty``
  decides, as for a blank text cell of a wider file).
  """
  quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
  csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # Whole documents in one cell.
  reader = csv.reader(io.StringIO(read_text(path, stats), newline=""), delimiter=delimiter,
                      quoting=quoting)
  header = list(d.columns) or next(reader, None)
  if not header:
    raise ValueError(f"{path}: no header row (or set config.data.columns)")
  repeated = sorted({c for c in header if header.count(c) > 1})
  if repeated:
    where = "config.data.columns" if d.columns else f"{path}:1"
    raise ValueError(f"{where}: column name(s) {repeated} appear more than once in {header}")
  records, first_multiline, multiline = [], None, 0
  start = reader.line_num + 1
  for row in reader:
    where = f"{path}:{start}"
    if reader.line_num > start:  # A quoted cell holding line breaks (or a stray quote).
      stats.multiline_rows += 1
      multiline += 1
      first_multiline = first_multiline or f"{where}-{reader.line_num}"
    start = reader.line_num + 1
    if not row or (len(header) > 1 and len(row) == 1 and not row[0].strip()):
      continue  # A blank line. A blank cell (one-column files too) is on_empty's to judge.
    if len(row) != len(header):
      raise ValueError(f"{where}: {len(row)} columns, the header has {len(header)} "
                       f"({header})")
    records.append(_record(dict(zip(header, row)), where, d, layout))
  if first_multiline:
    logging.warning("%s: %d row(s) span several lines (a quoted cell holding line breaks), "
                    "the first at lines %s: if that is a stray quote, several rows were "
                    "read as one", path, multiline, first_multiline)
  return records


def _is_document(name: str) -> bool:
  """text_dir: a document file is named ``*.txt`` (any case) or has no extension."""
  stem, ext = os.path.splitext(name)
  return not name.startswith(".") and (ext.lower() == ".txt" or (not ext and bool(stem)))


def text_dir_files(path: str, label_names: Sequence[str] = ()
                   ) -> tuple[list[tuple[str, str | None]], int, list[str]]:
  """The documents of a folder, by :func:`read_text_dir`'s rule (its docstring).

  Args:
    path: the folder.
    label_names: when given, the only sub-folders read (the others are skipped).

  Returns:
    ([(file, label: its sub-folder, or None directly in ``path``)] in sorted order, the
    number of files skipped, a few of them (or their folders) for a message).
  """
  wanted = set(label_names) if label_names else None
  documents, skipped_files, examples = [], 0, []

  def skip_folder(folder: str) -> None:
    """Counts every file under ``folder`` as skipped."""
    nonlocal skipped_files
    count = sum(len(files) for _, _, files in os.walk(folder))
    skipped_files += count
    examples.append(f"{folder}{os.sep} ({count} files)")

  # followlinks: a label folder may be a link (splits sharing storage); nothing below the
  # label level is entered, so a link cannot make a cycle.
  for root, dirs, files in os.walk(path, followlinks=True):
    rel = os.path.relpath(root, path)
    depth = 0 if rel == "." else rel.count(os.sep) + 1
    # Entered: not hidden, not a sub-sub-folder (no label level), a configured label if any.
    entered = [x for x in sorted(dirs) if not x.startswith(".") and depth == 0
               and (wanted is None or x in wanted)]
    for x in sorted(set(dirs) - set(entered)):
      skip_folder(os.path.join(root, x))
    dirs[:] = entered
    for name in sorted(files):
      file = os.path.join(root, name)
      if not _is_document(name):
        skipped_files += 1
        examples.append(file)
      else:
        documents.append((file, rel if depth == 1 else None))
  return documents, skipped_files, examples


def read_text_dir(path: str, d, layout: str, stats: text_lib.LoadStats) -> list[dict]:
  """Records of a folder of documents, one per file.

  Which files are read: names ending in ``.txt`` (any case: ``.TXT`` too) or without an
  extension (20 Newsgroups' numbered files), directly in ``path`` (unlabelled) or in one of its
  sub-folders (labelled by the sub-folder's name). Skipped, counted in
  ``stats.files_skipped`` and reported in one warning: hidden files and folders (names starting
  with '.', e.g. ``.ipynb_checkpoints``, ``.DS_Store``), files with another extension, and
  everything in sub-sub-folders (``train/pos/extra/x.txt``: a label is one folder level),
  and, when ``config.data.label_names`` is set, the sub-folders not named there (aclImdb's
  ``train/unsup/``). For a labelled task, documents directly in ``path`` are skipped too when
  sub-folders hold labelled ones, else they are an error. A label folder may be a symbolic
  link.
  """
  labelled_task = layout in ("label", "multi_hot")
  documents, skipped_files, examples = text_dir_files(
      path, d.label_names if labelled_task else ())
  records, top_level = [], []
  for file, label in documents:
    with open(file, "rb") as f:
      empty = not f.read().strip()
    rec = {"where": file, "text": "" if empty else read_text(file, stats)}
    if label is not None:
      rec["label"] = label
      records.append(rec)
    else:
      top_level.append(rec)
  if labelled_task and top_level:
    if not records:
      raise ValueError(f"{top_level[0]['where']}: the task needs labels; put the files "
                       "in one sub-folder per label")
    skipped_files += len(top_level)
    examples.extend(r["where"] for r in top_level)
    top_level = []
  stats.files_skipped += skipped_files
  if skipped_files:
    logging.warning("%s: skipped %d file(s) that are not documents of this layout (hidden, "
                    "neither *.txt nor extension-less, in a sub-sub-folder, in a folder "
                    "that is not one of config.data.label_names, or unlabelled for a "
                    "labelled task): %s", path, skipped_files,
                    ", ".join(examples[:5]) + (", ..." if len(examples) > 5 else ""))
  records = top_level + records
  if not records:
    raise ValueError(f"{path}: no documents (*.txt or extension-less files, directly in the "
                     "folder or in one sub-folder per label)")
  return records


def read_conll(path: str, d, layout: str, stats: text_lib.LoadStats, conllu: bool = False
               ) -> list[dict]:
  """Sentences (``words``, ``tags``) of a CoNLL column file (``conllu``: a CoNLL-U file); lines
  end at ``\\n`` only.

  CoNLL: columns split at spaces and tabs only, so a word holding a no-break space
  (``10\\u00a0000``) stays one word and the tag column stays where it is. CoNLL-U: the 10
  tab-separated columns of the format, the word from FORM (column 1), comment lines and the
  lines of multi-word tokens (``3-4``) and empty nodes (``8.1``) skipped.
  """
  del layout
  records, words, tags, start = [], [], [], None
  tag_column = CONLLU_UPOS if conllu and d.tag_column == -1 else d.tag_column
  def flush():
    if words:
      records.append({"where": f"{path}:{start}", "words": list(words), "tags": list(tags)})
    words.clear()
    tags.clear()
  for n, line in enumerate(read_text(path, stats).split("\n"), 1):
    line = line.rstrip("\r")
    if not line.strip():
      flush()
      continue
    if conllu:
      if line.startswith("#"):  # sent_id, text, ...: before a sentence, not part of it.
        continue
      cols = line.split("\t")
      if len(cols) != 10:
        raise ValueError(f"{path}:{n}: {len(cols)} tab-separated columns, CoNLL-U has 10: "
                         f"{line!r}")
      if "-" in cols[0] or "." in cols[0]:  # A multi-word token's range or an empty node.
        continue
      word = cols[1]
    else:
      cols = _CONLL_SPACES.split(line.strip(" \t"))
      if cols[0] == "-DOCSTART-":
        flush()
        continue
      if len(cols) < 2:
        raise ValueError(f"{path}:{n}: a word without a tag column: {line!r}")
      word = cols[0]
    try:
      tag = cols[tag_column]
    except IndexError:
      raise ValueError(f"{path}:{n}: no column {tag_column} in {line!r}") from None
    if not words:
      start = n
    words.append(word)
    tags.append(tag)
  flush()
  if not records:
    raise ValueError(f"{path}: no sentences")
  return records


def read_records(path: str, fmt: str, d, layout: str, stats: text_lib.LoadStats
                 ) -> list[dict]:
  """Reads one split's file (or folder) into records."""
  if fmt == "jsonl":
    return read_jsonl(path, d, layout, stats)
  if fmt in ("csv", "tsv"):
    return read_delimited(path, d, layout, stats, "," if fmt == "csv" else "\t")
  if fmt == "text_dir":
    if not os.path.isdir(path):
      raise ValueError(f"format 'text_dir' needs a folder, got {path!r}")
    return read_text_dir(path, d, layout, stats)
  if fmt in ("conll", "conllu"):
    return read_conll(path, d, layout, stats, conllu=fmt == "conllu")
  raise ValueError(f"unknown format {fmt!r}; choose one of {FORMATS}")


def _label_values(records: list[dict], layout: str) -> list[Any]:
  if layout == "multi_hot":
    return [x for r in records for x in r["labels"]]
  if layout == "tags":
    return [t for r in records for t in r["tags"]]
  return [r["label"] for r in records if "label" in r]


def _first_seen(records: list[dict], layout: str) -> dict[str, str]:
  """Label name -> the ``file:line`` of its first record (for error messages)."""
  seen: dict[str, str] = {}
  for r in records:
    for value in _label_values([r], layout):
      seen.setdefault(str(value), r.get("where", "?"))
  return seen


def build_encoder(config, task, train_label_values,
                  vocab: text_lib.LabelVocab | None = None,
                  options: LocalOptions | None = None,
                  first_seen: dict[str, str] | None = None) -> text_lib.TextEncoder:
  """The tokenizer, label vocabulary and encoder for ``config``.

  Args:
    config: the run's config (model.vocab_size, data.tokenizer).
    task: the :class:`longtext_jax.tasks.Task` (its ``label_layout`` and
      ``num_label_classes``).
    train_label_values: every label of the training split (the vocabulary is their sorted
      set unless label names are configured or ``vocab`` is given).
    vocab: a ready label vocabulary (e.g. TFDS ClassLabel ids), or None.
    options: the local loader's options (label names, max_tokens, special tokens); None
      reads them from ``config.data``.
    first_seen: label name -> ``file:line`` where it first occurs, named in the error when
      the label set does not match ``config.task.num_classes``.

  Returns:
    A :class:`longtext_jax.data.text.TextEncoder`.
  """
  d, layout = config.data, task.label_layout
  o = options or d
  if vocab is None:
    vocab = text_lib.LabelVocab.build(list(o.label_names), train_label_values)
  num_classes = task.num_label_classes
  if len(vocab) and layout in ("label", "multi_hot", "tags") and len(vocab) != num_classes:
    places = ""
    if first_seen:
      places = " (first seen: " + ", ".join(
          f"{n!r} at {first_seen[n]}" for n in vocab.names[:20] if n in first_seen) + ")"
    raise ValueError(f"the label set has {len(vocab)} labels {vocab.names[:20]}, but the task "
                     f"has num_classes={num_classes}; set config.task.num_classes or "
                     f"config.data.label_names{places}")
  if vocab.names is None:
    vocab.num_ids = num_classes  # Integer labels: checked against [0, num_classes) per record.
  tok = tokenizers.build_tokenizer(d.tokenizer)
  vocab_size = config.model.vocab_size
  if config.model.input == "tokens" and vocab_size < tok.vocab_size:
    raise ValueError(f"config.model.vocab_size={vocab_size} is smaller than the tokenizer's "
                     f"{tok.vocab_size} ids")
  return text_lib.TextEncoder(tok, layout, num_classes, vocab, o.max_tokens,
                              o.add_special_tokens and layout != "tags",
                              getattr(task, "cut_fields", None) if layout == "tags" else None,
                              long_documents=o.long_documents)


def local_source(config, task) -> dict[str, text_lib.ExampleSource]:
  """``config.data.name='local'``: the train/eval(/test) files encoded for the Task ``task``.

  Returns:
    {'train': source, 'eval': source} (and 'test' with ``data.test_path``), each an
    :class:`~longtext_jax.data.text.ExampleSource`
    carrying ``label_names`` (the inferred or configured label vocabulary), ``tokenizer_info``
    and ``stats``.
  """
  return load_local(config, task, LocalOptions.from_config(config.data))


def local_text_source(config, task) -> dict[str, Any]:
  """``config.data.name='local_text'``: an alias of ``local`` for configs written for the
  former S-LSTM fine-tuning source (see :meth:`LocalOptions.from_local_text_config`); rows
  padded to ``config.data.seq_len`` (stacked :class:`~longtext_jax.data.ArraySource`)."""
  return load_local(config, task, LocalOptions.from_local_text_config(config.data))


def load_local(config, task, options: LocalOptions) -> dict[str, Any]:
  """Reads, checks and encodes the train/eval files described by ``options``.

  Args:
    config: the run's config (model, data.tokenizer).
    task: the :class:`longtext_jax.tasks.Task` the examples are encoded for.
    options: what to read (:class:`LocalOptions`).

  Returns:
    {'train': source, 'eval': source} (and 'test'; see :func:`read_splits`):
    :class:`~longtext_jax.data.text.ExampleSource`s, or stacked
    :class:`~longtext_jax.data.ArraySource`s when ``options.fixed_length > 0``. Each
    carries ``label_names``, ``tokenizer_info`` and ``stats`` (logged once per split at
    WARNING level); an 'eval' split cut from the training file carries ``origin``
    (:func:`split_off`'s record, saved in data_info.json).
  """
  layout = task.label_layout
  records, stats, paths, origin = read_splits(options, layout)
  encoder = build_encoder(config, task, _label_values(records["train"], layout),
                          options=options, first_seen=_first_seen(records["train"], layout))
  out = {}
  for split, recs in records.items():
    out[split] = text_lib.encoded_source(recs, encoder, stats[split])
    if options.fixed_length:
      out[split] = text_lib.fixed_length(out[split], options.fixed_length)
    if split in origin:
      out[split].origin = origin[split]
    stats[split].log(f"{paths[split]} ({split})")
  return out


def _read_one(path: str, options: LocalOptions, layout: str, stats: text_lib.LoadStats
              ) -> list[dict]:
  """The records of one file (or folder), unlabelled/empty ones handled as configured."""
  recs = read_records(path, infer_format(path, options.format), options, layout, stats)
  if options.skip_unlabeled:  # e.g. MNLI rows whose gold label is '-'.
    recs = text_lib.drop_labels(recs, (None,) + UNLABELLED, stats)
  return text_lib.drop_empty(recs, options.on_empty, stats)


def read_splits(options: LocalOptions, layout: str, only: Sequence[str] | None = None
                ) -> tuple[dict[str, list[dict]], dict[str, text_lib.LoadStats],
                           dict[str, str], dict[str, dict[str, Any]]]:
  """The records of every split, before encoding.

  'train' from ``train_path``; 'eval' from ``eval_path``, or (when it is empty and
  ``eval_fraction > 0``) split off the training file by :func:`split_off` before
  ``max_examples`` applies; 'test' from ``test_path`` when set.

  Args:
    options: what to read.
    layout: the task's label layout.
    only: the splits wanted (None: all); the others' files are not read. 'train' is the
      training file after the dev split is cut off, whether or not 'eval' is wanted.

  Returns:
    (records by split, LoadStats by split, path by split (for messages), origin by split:
    ``{'eval': {'from', 'fraction', 'seed', 'stratified_by', 'examples', 'where'}}`` when
    the dev split was cut from the training file, else empty).
  """
  if layout == "mlm":
    raise ValueError("data.name='local' gives unmasked text; for MLM use data.name="
                     "'text_mlm' (a folder of .txt files) or 'tfds_mlm' (a TFDS text "
                     "dataset), which mask on the fly (80/10/10)")
  split_eval = not options.eval_path and options.eval_fraction > 0
  if not 0 <= options.eval_fraction < 1:
    raise ValueError(f"config.data.eval_fraction={options.eval_fraction} must be in [0, 1)")
  names = ["train", "eval"] + (["test"] if options.test_path else [])
  if only is not None:
    unknown = set(only) - {"train", "eval", "test"}
    if unknown:
      raise ValueError(f"read_splits: unknown split(s) {sorted(unknown)}")
    names = [n for n in names if n in only or (n == "train" and split_eval)]
  paths = {split: (options.path("train") + f" [{options.eval_fraction:g} split off]"
                   if split == "eval" and split_eval else options.path(split))
           for split in names}
  # Every configured file that is missing, named by its config field, before any reading
  # (also those of splits not read by this call: a typo in test_path fails at the start).
  configured = ["train"] + [n for n in ("eval", "test") if getattr(options, f"{n}_path")]
  missing = [f"config.data.{n}_path={options.path(n)!r}" for n in configured
             if not os.path.exists(options.path(n))]
  if missing:
    raise ValueError(f"no such file or folder: {', '.join(missing)}")
  records, stats, origin = {}, {}, {}
  for split in names:
    stats[split] = text_lib.LoadStats()
    if split == "eval" and split_eval:
      continue
    records[split] = _read_one(options.path(split), options, layout, stats[split])
  if split_eval:  # 'train' is always read when the dev split comes from it.
    records["train"], records["eval"], origin["eval"] = split_off(
        records["train"], options.eval_fraction, options.split_seed, layout)
    origin["eval"]["from"] = options.path("train")
  if "train" in records:  # Copies of training texts in a held-out file: counted, warned.
    train_texts = {_text_key(r) for r in records["train"]} - {None}
    for split in [n for n in records if n != "train" and n in stats]:
      copies = [r for r in records[split] if _text_key(r) in train_texts]
      stats[split].in_train = len(copies)
      if copies and not (split == "eval" and split_eval):
        logging.warning("%s (%s): %d of %d examples have the text of a training example "
                        "(e.g. %s): their %s metric measures memory, not generalisation",
                        paths[split], split, len(copies), len(records[split]),
                        ", ".join(r.get("where", "?") for r in copies[:3]), split)
  if only is not None:  # Drop what was read only to cut the dev split off.
    names = [n for n in names if n in only]
    records, stats, paths = ({n: d[n] for n in names} for d in (records, stats, paths))
    origin = {n: v for n, v in origin.items() if n in names}
  for split in names:
    if options.max_examples:
      records[split] = records[split][:options.max_examples]
    if not records[split]:
      raise ValueError(f"{paths[split]}: no examples left (all empty or unlabelled?)")
  return records, stats, paths, origin


def _stratum(record: dict, layout: str) -> str:
  """The group a record is stratified by: its label ('label'), its smallest label
  ('multi_hot'), else one group."""
  if layout == "label" and "label" in record:
    return str(record["label"])
  if layout == "multi_hot" and record.get("labels"):
    return min(str(x) for x in record["labels"])
  return ""


def split_off(records: Sequence[dict], fraction: float, seed: int, layout: str
              ) -> tuple[list[dict], list[dict], dict[str, Any]]:
  """A seeded, stratified dev split of ``records``.

  Within each stratum (label; smallest label for multi-label; everything otherwise) of
  ``n`` records, ``round(n * fraction)`` go to the dev split, at least 1 when ``n >= 2``
  and never all of them; which ones is a permutation drawn from ``seed`` and the stratum's
  name, so the split does not depend on the order of the other strata. Then drawn records
  go back to training when their text (whitespace-normalised) is also a training record's
  (duplicates would leak into the dev metric), and when they hold a label that no training
  record has (the label set is the training split's). Both parts keep the file order.

  Args:
    records: the training records.
    fraction: in (0, 1).
    seed: the split's seed (``config.data.split_seed``).
    layout: the task's label layout.

  Returns:
    (train records, dev records, a record of the split: fraction, seed, stratified_by,
    examples (dev count), where (the dev records' ``file:line``), duplicates_kept_in_train
    and unseen_labels_kept_in_train (the drawn records that went back)).
  """
  groups: dict[str, list[int]] = {}
  for i, r in enumerate(records):
    groups.setdefault(_stratum(r, layout), []).append(i)
  dev: list[int] = []
  for name in sorted(groups):
    idx = groups[name]
    n = len(idx)
    k = min(max(int(round(n * fraction)), 1 if n >= 2 else 0), n - 1)
    key = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "little")
    perm = np.random.default_rng([seed, key]).permutation(n)
    dev.extend(idx[j] for j in perm[:k])
  dev_set = set(dev)
  # Copies of a training text go back to training: a dev example the model was trained on
  # would inflate the metric that early stopping and the best checkpoint are chosen by.
  train_texts = {_text_key(r) for i, r in enumerate(records) if i not in dev_set} - {None}
  duplicates = [i for i in sorted(dev_set) if _text_key(records[i]) in train_texts]
  dev_set -= set(duplicates)
  # Every label of the dev split must be a training label (the label set is the training
  # split's): a multi-label record is stratified by one of its labels only, and tags not at
  # all, so a rare label can land in the dev split alone. Such records go back, in file order.
  train_labels = {str(x) for i, r in enumerate(records) if i not in dev_set
                  for x in _label_values([r], layout)}
  unseen = []
  for i in sorted(dev_set):
    labels = {str(x) for x in _label_values([records[i]], layout)}
    if not labels <= train_labels:
      unseen.append(i)
      train_labels |= labels
  dev_set -= set(unseen)
  train = [r for i, r in enumerate(records) if i not in dev_set]
  held = [r for i, r in enumerate(records) if i in dev_set]
  if not held:
    raise ValueError(f"config.data.eval_fraction={fraction}: {len(records)} training "
                     "examples are too few to split off a dev set"
                     + (f" ({len(duplicates)} drawn were copies of training texts, "
                        f"{len(unseen)} held labels absent from training)"
                        if duplicates or unseen else ""))
  info = {"fraction": fraction, "seed": seed,
          "stratified_by": {"label": "label", "multi_hot": "smallest label"}.get(layout,
                                                                              "none"),
          "examples": len(held), "where": [r.get("where", "?") for r in held],
          "duplicates_kept_in_train": len(duplicates),
          "unseen_labels_kept_in_train": len(unseen)}
  if duplicates or unseen:
    logging.warning("dev split of %d example(s): %d drawn were copies of a training text and "
                    "%d held a label no training example has; they stayed in training",
                    len(held), len(duplicates), len(unseen))
  return train, held, info


def _text_key(record: Mapping[str, Any]) -> tuple | None:
  """What makes two records the same document: their text (whitespace-normalised, and the
  pair's), or their words; None for a record without text (never a copy of another)."""
  if "words" in record:
    return ("words", tuple(record["words"])) if record["words"] else None
  key = (" ".join(str(record.get("text") or "").split()),
         " ".join(str(record.get("text_pair") or "").split()))
  return key if any(key) else None
