"""Local text files: JSONL, CSV, TSV, plain-text folders and CoNLL column files.

``config.data.name = 'local'`` reads ``config.data.train_path`` and ``config.data.eval_path``
(format from ``config.data.format`` or the file extension) and encodes them for
``config.task.name``:

========  ================================================================================
jsonl     one JSON object per line: ``text_field`` (and ``text_pair_field``), ``label_field``
          holding one label or, for task 'multilabel', a list of labels.
csv/tsv   a header row naming the columns, then one example per row; for 'multilabel' the
          label cell is split on ``label_separator``. TSV is read without quoting (GLUE style).
text_dir  a folder of ``*.txt`` files, one document per file. Files directly in the folder
          are unlabelled documents (tasks 'lm'/'mlm'); files in sub-folders are labelled by the
          sub-folder's name (``train/pos/1.txt`` -> label 'pos'; aclImdb's and 20News' layout).
conll     whitespace-separated columns, the word in column 0 and its tag in column
          ``tag_column``; blank lines end a sentence; ``-DOCSTART-`` lines are skipped.
========  ================================================================================

Every record remembers ``file:line`` so that a bad label or an empty text is reported with
its place. Files are read as bytes and decoded as UTF-8 with invalid sequences replaced by
U+FFFD and counted (see :class:`longtext_jax.data.text.LoadStats`).
"""
from __future__ import annotations

import csv
import io
import json
import os
from typing import Any

from absl import logging

from longtext_jax.data import text as text_lib
from longtext_jax.data import tokenizers

FORMATS = ("jsonl", "csv", "tsv", "text_dir", "conll")
_EXTENSIONS = {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv",
               ".conll": "conll", ".conllu": "conll", ".bio": "conll"}


def infer_format(path: str, configured: str = "") -> str:
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
  """The file's text; invalid UTF-8 is replaced by U+FFFD and counted. Empty files fail."""
  if not os.path.exists(path):
    raise ValueError(f"no such file: {path}")
  with open(path, "rb") as f:
    raw = f.read()
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


def _field(row: dict, name: str, where: str) -> Any:
  if name not in row:
    raise ValueError(f"{where}: no field {name!r} (fields: {sorted(row)})")
  return row[name]


def _record(row: dict, where: str, d, task: str) -> dict[str, Any]:
  rec: dict[str, Any] = {"where": where, "text": _field(row, d.text_field, where)}
  if rec["text"] is None:
    rec["text"] = ""
  if d.text_pair_field:
    rec["text_pair"] = _field(row, d.text_pair_field, where) or ""
  if task == "multilabel":
    labels = _field(row, d.label_field, where)
    if isinstance(labels, str):
      labels = [x.strip() for x in labels.split(d.label_separator) if x.strip()]
    elif not isinstance(labels, (list, tuple)):
      labels = [labels]
    rec["labels"] = list(labels)
  elif task in ("classification", "binary"):
    label = _field(row, d.label_field, where)
    if isinstance(label, (list, tuple)):
      raise ValueError(f"{where}: a list of labels {label!r} for single-label task {task!r}")
    rec["label"] = label.strip() if isinstance(label, str) else label
  return rec


def read_jsonl(path: str, d, task: str, stats: text_lib.LoadStats) -> list[dict]:
  records = []
  for n, line in enumerate(read_text(path, stats).splitlines(), 1):
    if not line.strip():
      continue
    where = f"{path}:{n}"
    try:
      row = json.loads(line)
    except json.JSONDecodeError as e:
      raise ValueError(f"{where}: not valid JSON ({e})") from None
    if not isinstance(row, dict):
      raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
    records.append(_record(row, where, d, task))
  return records


def read_delimited(path: str, d, task: str, stats: text_lib.LoadStats, delimiter: str
                   ) -> list[dict]:
  quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
  reader = csv.reader(io.StringIO(read_text(path, stats), newline=""), delimiter=delimiter,
                      quoting=quoting)
  header = next(reader, None)
  if not header:
    raise ValueError(f"{path}: no header row")
  records = []
  start = reader.line_num + 1
  for row in reader:
    where = f"{path}:{start}"
    start = reader.line_num + 1
    if not row or (len(row) == 1 and not row[0].strip()):
      continue
    if len(row) != len(header):
      raise ValueError(f"{where}: {len(row)} columns, the header has {len(header)}")
    records.append(_record(dict(zip(header, row)), where, d, task))
  return records


def read_text_dir(path: str, d, task: str, stats: text_lib.LoadStats) -> list[dict]:
  del d
  records = []
  for root, dirs, files in os.walk(path):
    dirs.sort()
    label = os.path.relpath(root, path)
    for name in sorted(files):
      if not name.endswith(".txt"):
        continue
      file = os.path.join(root, name)
      with open(file, "rb") as f:
        empty = not f.read().strip()
      rec = {"where": file, "text": "" if empty else read_text(file, stats)}
      if label != ".":
        rec["label"] = label
      elif task in ("classification", "binary", "multilabel"):
        raise ValueError(f"{file}: task {task!r} needs labels; put the files in one "
                         "sub-folder per label")
      records.append(rec)
  if not records:
    raise ValueError(f"{path}: no *.txt files")
  return records


def read_conll(path: str, d, task: str, stats: text_lib.LoadStats) -> list[dict]:
  del task
  records, words, tags, start = [], [], [], None
  def flush():
    if words:
      records.append({"where": f"{path}:{start}", "words": list(words), "tags": list(tags)})
    words.clear()
    tags.clear()
  for n, line in enumerate(read_text(path, stats).splitlines(), 1):
    cols = line.split()
    if not cols:
      flush()
      continue
    if cols[0] == "-DOCSTART-":
      flush()
      continue
    if len(cols) < 2:
      raise ValueError(f"{path}:{n}: a word without a tag column: {line!r}")
    try:
      tag = cols[d.tag_column]
    except IndexError:
      raise ValueError(f"{path}:{n}: no column {d.tag_column} in {line!r}") from None
    if not words:
      start = n
    words.append(cols[0])
    tags.append(tag)
  flush()
  if not records:
    raise ValueError(f"{path}: no sentences")
  return records


def read_records(path: str, fmt: str, d, task: str, stats: text_lib.LoadStats) -> list[dict]:
  """Reads one split's file (or folder) into records."""
  if fmt == "jsonl":
    return read_jsonl(path, d, task, stats)
  if fmt in ("csv", "tsv"):
    return read_delimited(path, d, task, stats, "," if fmt == "csv" else "\t")
  if fmt == "text_dir":
    if not os.path.isdir(path):
      raise ValueError(f"format 'text_dir' needs a folder, got {path!r}")
    return read_text_dir(path, d, task, stats)
  if fmt == "conll":
    return read_conll(path, d, task, stats)
  raise ValueError(f"unknown format {fmt!r}; choose one of {FORMATS}")


def _label_values(records: list[dict], task: str) -> list[Any]:
  if task == "multilabel":
    return [x for r in records for x in r["labels"]]
  if task == "tagging":
    return [t for r in records for t in r["tags"]]
  return [r["label"] for r in records if "label" in r]


def build_encoder(config, train_label_values, vocab: text_lib.LabelVocab | None = None
                  ) -> text_lib.TextEncoder:
  """The tokenizer, label vocabulary (from ``config.data.label_names`` or the training
  labels, unless ``vocab`` is given) and encoder for ``config``."""
  d, task = config.data, text_lib.data_task(config.task.name)
  if vocab is None:
    vocab = text_lib.LabelVocab.build(list(d.label_names), train_label_values)
  num_classes = 2 if task == "binary" else config.task.num_classes
  if len(vocab) and task in ("classification", "binary", "multilabel", "tagging") and (
      len(vocab) != num_classes):
    raise ValueError(f"the label set has {len(vocab)} labels {vocab.names[:20]}, but the task "
                     f"has num_classes={num_classes}; set config.task.num_classes or "
                     "config.data.label_names")
  tok = tokenizers.load_tokenizer(d.tokenizer)
  vocab_size = config.model.vocab_size
  if config.model.input == "tokens" and vocab_size < tok.vocab_size:
    raise ValueError(f"config.model.vocab_size={vocab_size} is smaller than the tokenizer's "
                     f"{tok.vocab_size} ids")
  return text_lib.TextEncoder(tok, task, num_classes, vocab, d.max_tokens,
                              d.add_special_tokens and task != "tagging")


def local_source(config) -> dict[str, text_lib.ExampleSource]:
  """``config.data.name='local'``: the train/eval files encoded for ``config.task``."""
  d, task = config.data, text_lib.data_task(config.task.name)
  if task == "mlm":
    raise ValueError("data.name='local' gives unmasked text; for MLM use data.name="
                     "'text_mlm' (a folder of .txt files) or 'tfds_mlm' (a TFDS text "
                     "dataset), which mask on the fly (80/10/10)")
  paths = {"train": d.train_path, "eval": d.eval_path}
  for split, path in paths.items():
    if not path:
      raise ValueError(f"config.data.{split}_path is empty")
  records, stats = {}, {}
  for split, path in paths.items():
    stats[split] = text_lib.LoadStats()
    recs = read_records(path, infer_format(path, d.format), d, task, stats[split])
    recs = text_lib.drop_empty(recs, d.on_empty, stats[split])
    if d.max_examples:
      recs = recs[:d.max_examples]
    if not recs:
      raise ValueError(f"{path}: no examples left (all empty?)")
    records[split] = recs
  encoder = build_encoder(config, _label_values(records["train"], task))
  out = {}
  for split, recs in records.items():
    out[split] = text_lib.encoded_source(recs, encoder, stats[split])
    stats[split].log(f"{paths[split]} ({split})")
  return out
