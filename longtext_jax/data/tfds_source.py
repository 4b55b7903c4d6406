"""TFDS datasets by name through ``tfds.data_source`` (random access, no TensorFlow).

``config.data.name = 'tfds'`` with ``config.data.tfds_name`` (e.g. 'imdb_reviews',
'ag_news_subset', 'glue/sst2', 'scientific_papers/arxiv', 'lm1b') reads the prepared
ArrayRecord files of ``tfds_train_split`` / ``tfds_eval_split``. TensorFlow is needed neither
here nor in training; preparing a dataset once (``tfds build NAME --file_format=array_record``)
may need it for some builders (an optional extra; see docs/data.md).

Which fields hold the text(s) and the label is known for the papers' datasets (``PRESETS``);
for any other dataset ``config.data.text_field`` / ``text_pair_field`` / ``label_field`` say.
By default the split is read lazily (records are tokenized when the batch is built, also in
Grain worker processes); with ``config.data.max_examples > 0`` the first examples are encoded
up front instead (labels validated, lengths known, so length bucketing works).
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import numpy as np

from longtext_jax.data import local_files
from longtext_jax.data import text as text_lib

# name -> (text fields joined by a space, second text field or None, label field or None).
PRESETS: dict[str, tuple[tuple[str, ...], str | None, str | None]] = {
    "imdb_reviews": (("text",), None, "label"),
    "ag_news_subset": (("title", "description"), None, "label"),
    "yelp_polarity_reviews": (("text",), None, "label"),
    "glue/sst2": (("sentence",), None, "label"),
    "glue/cola": (("sentence",), None, "label"),
    "glue/mrpc": (("sentence1",), "sentence2", "label"),
    "glue/rte": (("sentence1",), "sentence2", "label"),
    "glue/wnli": (("sentence1",), "sentence2", "label"),
    "glue/qqp": (("question1",), "question2", "label"),
    "glue/qnli": (("question",), "sentence", "label"),
    "glue/mnli": (("premise",), "hypothesis", "label"),
    "snli": (("premise",), "hypothesis", "label"),
    "scientific_papers": (("article",), None, None),
    "lm1b": (("text",), None, None),
    "wikipedia": (("text",), None, None),
    "c4": (("text",), None, None),
    "pg19": (("book_text",), None, None),
    "wikitext103": (("text",), None, None),
    "conll2003": (("tokens",), None, "ner"),  # Tagging: words and their NER tags.
}

# Builders whose module TFDS does not import by default.
_MODULES = ("text", "summarization", "question_answering", "structured", "translate")


def _base_name(name: str) -> str:
  return name.split(":")[0]


def preset(name: str) -> tuple[tuple[str, ...], str | None, str | None] | None:
  """The known fields of a TFDS dataset: ``(text_fields, pair_field, label_field)``, or
  None when ``name`` (or its family, the part before ``/``) has no preset."""
  base = _base_name(name)
  return PRESETS.get(base) or PRESETS.get(base.split("/")[0])


def _register(tfds, name: str) -> None:
  """Imports the builder's module when TFDS did not register it (e.g. glue)."""
  family = _base_name(name).split("/")[0]
  try:
    tfds.builder_cls(family)
    return
  except Exception:  # pylint: disable=broad-except
    pass
  for package in _MODULES:
    try:
      importlib.import_module(f"tensorflow_datasets.{package}.{family}")
      return
    except ImportError:
      continue


def open_split(name: str, split: str, data_dir: str = "") -> tuple[Any, Any]:
  """(random-access data source, DatasetInfo) of one split, without TensorFlow."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  _register(tfds, name)
  try:
    source = tfds.data_source(name, split=split, data_dir=data_dir or None)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(
        f"tfds.data_source({name!r}, split={split!r}) failed: {e}\nPrepare the dataset once "
        f"as ArrayRecord files: `tfds build {_base_name(name)} --file_format=array_record` "
        "(see docs/data.md)") from e
  return source, source.dataset_info


@dataclasses.dataclass
class TfdsRecord:
  """A TFDS example -> a text record -> an encoded example (picklable for Grain workers)."""
  name: str
  split: str
  text_fields: tuple[str, ...]
  pair_field: str | None
  label_field: str | None
  encoder: text_lib.TextEncoder | None = None

  def record(self, ex: dict, index: int) -> dict[str, Any]:
    """One TFDS example as a text record (``words``/``tags`` for tagging sets, else text,
    optional pair and label), with ``where`` naming the dataset, split and index."""
    where = f"tfds {self.name}[{self.split}] example {index}"
    if self.encoder is not None and self.encoder.layout == "tags":
      words = [_as_text(w) for w in _get(ex, self.text_fields[0], where)]
      tags = np.asarray(_get(ex, self.label_field, where)).tolist()
      if len(words) != len(tags):
        raise ValueError(f"{where}: {len(words)} words but {len(tags)} tags")
      names = self.encoder.labels.names
      return {"where": where, "words": words,
              "tags": [names[t] if names else t for t in tags]}
    rec: dict[str, Any] = {"where": where, "text": " ".join(
        _as_text(_get(ex, f, where)) for f in self.text_fields)}
    if self.pair_field:
      rec["text_pair"] = _as_text(_get(ex, self.pair_field, where))
    if self.label_field:
      value = np.asarray(_get(ex, self.label_field, where))
      key = "labels" if value.ndim else "label"
      rec[key] = value.tolist() if value.ndim else int(value)
    return rec

  def __call__(self, indexed: tuple[int, dict]) -> dict[str, np.ndarray]:
    index, ex = indexed
    rec = self.record(ex, index)
    if "label" in rec and self.encoder.num_classes and not (
        0 <= rec["label"] < self.encoder.num_classes):
      raise ValueError(f"{rec['where']}: label {rec['label']} is outside the label set [0, "
                       f"{self.encoder.num_classes}) (GLUE test splits have no labels: "
                       "evaluate on 'validation')")
    return self.encoder(rec)


def _get(ex: dict, field: str, where: str):
  if field not in ex:
    raise ValueError(f"{where}: no field {field!r} (fields: {sorted(ex)})")
  return ex[field]


def _as_text(x) -> str:
  if isinstance(x, np.ndarray):
    x = x.item()
  if isinstance(x, bytes):
    return x.decode("utf-8", errors="replace")
  return str(x)


class _Indexed:
  """``source[i] -> (i, source[i])`` so the transform can name the example."""

  def __init__(self, source):
    self.source = source

  def __len__(self):
    return len(self.source)

  def __getitem__(self, i):
    return int(i), self.source[int(i)]


def tfds_source(config, task) -> dict[str, text_lib.ExampleSource]:
  """``config.data.name='tfds'``: ``config.data.tfds_name`` encoded for the Task ``task``."""
  d, layout = config.data, task.label_layout
  if layout == "mlm":
    raise ValueError("data.name='tfds' gives unmasked text; for MLM use data.name="
                     "'text_mlm' (a folder of .txt files) or 'tfds_mlm' (a TFDS text "
                     "dataset), which mask on the fly (80/10/10)")
  if not d.tfds_name:
    raise ValueError("config.data.tfds_name is empty (e.g. 'imdb_reviews', 'glue/sst2')")
  fields = preset(d.tfds_name) or ((d.text_field,), d.text_pair_field or None,
                                   d.label_field or None)
  if layout in ("none", "mlm"):
    fields = (fields[0], fields[1], None)
  splits = {"train": d.tfds_train_split, "eval": d.tfds_eval_split}
  opened = {k: open_split(d.tfds_name, s, d.tfds_data_dir) for k, s in splits.items()}
  info = opened["train"][1]
  label_feature = info.features[fields[2]] if fields[2] else None
  label_feature = getattr(label_feature, "feature", label_feature)  # Sequence(ClassLabel).
  names = list(d.label_names) or (list(label_feature.names) if hasattr(
      label_feature, "names") else [])
  if fields[2] and layout in ("label", "multi_hot"):
    num = task.num_label_classes
    if names and len(names) != num:
      raise ValueError(f"{d.tfds_name}: {fields[2]!r} has {len(names)} classes {names}, the "
                       f"task has num_classes={num}")
  # TFDS labels are ids already (ClassLabel); tag names give B-X -> I-X for sub-tokens.
  vocab = text_lib.LabelVocab(names if layout == "tags" and names else None)
  encoder = local_files.build_encoder(config, task, [], vocab=vocab)
  out = {}
  for split, (source, _) in opened.items():
    convert = TfdsRecord(d.tfds_name, splits[split], *fields, encoder=encoder)
    stats = text_lib.LoadStats()
    if d.max_examples:  # Eager: read, check and encode the first examples now.
      n = min(d.max_examples, len(source))
      records = [convert.record(source[i], i) for i in range(n)]
      records = text_lib.drop_empty(records, d.on_empty, stats)
      records = text_lib.drop_labels(records, d.skip_labels, stats)
      out[split] = text_lib.encoded_source(records, encoder, stats)
      stats.log(f"tfds {d.tfds_name}[{splits[split]}]")
    else:
      if d.skip_labels:
        raise ValueError("config.data.skip_labels needs the examples in memory: set "
                         "config.data.max_examples > 0")
      out[split] = text_lib.ExampleSource(_Indexed(source), transform=convert, stats=stats,
                                          eager=False)
    if names and layout in ("label", "multi_hot", "tags"):
      # The ClassLabel's names: saved in data_info.json, so predictions name their labels.
      out[split].label_names = list(names)
  return out
