"""TFDS datasets by name through ``tfds.data_source`` (random access, no TensorFlow).

``config.data.name = 'tfds'`` with ``config.data.tfds_name`` (e.g. 'imdb_reviews',
'ag_news_subset', 'glue/sst2', 'scientific_papers/arxiv', 'lm1b') reads the prepared
ArrayRecord files of ``tfds_train_split`` / ``tfds_eval_split``. TensorFlow is needed neither
here nor in training; preparing a dataset once (``tfds build NAME --file_format=array_record``)
may need it for some builders (an optional extra; see docs/data.md).

Which fields hold the text(s) and the label is known for the papers' datasets (``PRESETS``);
for any other dataset ``config.data.text_field`` / ``text_pair_field`` / ``label_field`` say.
A ``ClassLabel`` label (or a sequence of them: conll2003's tags) is read by name: each TFDS id
becomes its ClassLabel name, and the run's ids follow ``config.data.label_names`` when set
(they must be the ClassLabel's names, in any order) or else the ClassLabel's order.
By default the split is read lazily (records are tokenized when the batch is built, also in
Grain worker processes); with ``config.data.max_examples > 0`` the first examples are encoded
up front instead (labels validated, lengths known, so length bucketing works).
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Sequence

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
  build = (f"`tfds build {_base_name(name)} --file_format=array_record"
           + (f" --data_dir={data_dir}`" if data_dir else "`"))
  try:  # download=False: a dataset that is not prepared is an error, never a download.
    source = tfds.data_source(name, split=split, data_dir=data_dir or None, download=False)
  except Exception as e:  # pylint: disable=broad-except
    try:
      builder = tfds.builder(name, data_dir=data_dir or None)
    except Exception as e2:  # pylint: disable=broad-except
      raise ValueError(f"TFDS has no dataset {name!r}: {str(e2).splitlines()[0]}") from e
    if not builder.is_prepared():
      raise ValueError(
          f"TFDS dataset {name!r} is not prepared under {builder.data_dir} (config.data."
          f"tfds_data_dir={data_dir!r}): prepare it once as ArrayRecord files with {build} "
          "(see docs/data.md); runs never download") from e
    raise ValueError(
        f"tfds.data_source({name!r}, split={split!r}) failed: {e}\nPrepare the dataset once "
        f"as ArrayRecord files: {build} (see docs/data.md)") from e
  return source, source.dataset_info


@dataclasses.dataclass
class TfdsRecord:
  """A TFDS example -> a text record -> an encoded example (picklable for Grain workers).

  Attributes:
    name, split: the dataset and split, named in messages.
    text_fields, pair_field, label_field: the example's fields (see :data:`PRESETS`).
    encoder: encodes the record (None: :meth:`record` only).
    class_names: the label feature's ``ClassLabel`` names in TFDS id order, or None (labels
      are plain integers). With them each TFDS id becomes its name in the record, and the
      encoder's label vocabulary maps names to the run's ids (``config.data.label_names``
      order when set): TFDS ids are never named by position.
  """
  name: str
  split: str
  text_fields: tuple[str, ...]
  pair_field: str | None
  label_field: str | None
  encoder: text_lib.TextEncoder | None = None
  class_names: tuple[str, ...] | None = None

  def _named(self, value: Any) -> Any:
    """TFDS id ``value`` as its ClassLabel name; an id outside the ClassLabel (GLUE test
    splits' -1) stays an int (for ``skip_labels``, or an error naming the example). Without
    a ClassLabel the value is returned as it is."""
    if self.class_names is None:
      return value
    if 0 <= int(value) < len(self.class_names):
      return self.class_names[int(value)]
    return int(value)

  def record(self, ex: dict, index: int) -> dict[str, Any]:
    """One TFDS example as a text record (``words``/``tags`` for tagging sets, else text,
    optional pair and label), with ``where`` naming the dataset, split and index."""
    where = f"tfds {self.name}[{self.split}] example {index}"
    if self.encoder is not None and self.encoder.layout == "tags":
      words = [_as_text(w) for w in _get(ex, self.text_fields[0], where)]
      tags = np.asarray(_get(ex, self.label_field, where)).tolist()
      if len(words) != len(tags):
        raise ValueError(f"{where}: {len(words)} words but {len(tags)} tags")
      if self.class_names is not None:  # ClassLabel ids -> their names.
        return {"where": where, "words": words, "tags": [self._named(t) for t in tags]}
      names = self.encoder.labels.names  # Plain integer tags: config.data.label_names.
      return {"where": where, "words": words,
              "tags": [names[t] if names else t for t in tags]}
    rec: dict[str, Any] = {"where": where, "text": " ".join(
        _as_text(_get(ex, f, where)) for f in self.text_fields)}
    if self.pair_field:
      rec["text_pair"] = _as_text(_get(ex, self.pair_field, where))
    if self.label_field:
      value = np.asarray(_get(ex, self.label_field, where))
      if value.ndim:
        rec["labels"] = [self._named(v) for v in value.tolist()]
      else:
        rec["label"] = self._named(int(value))
    return rec

  def check_label(self, rec: dict[str, Any]) -> None:
    """Raises naming the example when its single label is an id outside the label set
    (the ClassLabel's, else ``[0, num_classes)``), e.g. a GLUE test split's -1."""
    label = rec.get("label")
    size = len(self.class_names) if self.class_names is not None else (
        self.encoder.num_classes)
    if isinstance(label, int) and size and not 0 <= label < size:
      raise ValueError(f"{rec['where']}: label {label} is outside the label set [0, "
                       f"{size}) (GLUE test splits have no labels: evaluate on 'validation')")

  def __call__(self, indexed: tuple[int, dict]) -> dict[str, np.ndarray]:
    index, ex = indexed
    rec = self.record(ex, index)
    self.check_label(rec)
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


def class_label_names(feature) -> tuple[str, ...] | None:
  """The names of a ``ClassLabel`` feature in TFDS id order, or None when ``feature`` is not
  a ClassLabel or has no names of its own (one built from ``num_classes`` is named
  '0', '1', ...: its ids are plain integers, which ``config.data.label_names`` may name)."""
  names = getattr(feature, "names", None)
  if not names:
    return None
  names = tuple(str(n) for n in names)
  if names == tuple(str(i) for i in range(len(names))):
    return None
  return names


def ordered_label_names(class_names: Sequence[str], configured: Sequence[str],
                        dataset: str, field: str) -> list[str]:
  """The run's label names in id order for a ClassLabel field: ``configured``
  (``config.data.label_names``) when set, else the ClassLabel's own order.

  Configured names are never laid over the TFDS ids by position: the records carry each
  id's ClassLabel name and the label vocabulary maps names to ids in the configured order.

  Raises:
    ValueError: the configured names are not the ClassLabel's names (the same set), naming
      the dataset, the field and the names missing on each side.
  """
  if not configured:
    return list(class_names)
  configured = [str(n) for n in configured]
  repeated = sorted({n for n in configured if configured.count(n) > 1})
  missing_in_config = [n for n in class_names if n not in configured]
  missing_in_data = [n for n in configured if n not in class_names]
  if repeated or missing_in_config or missing_in_data:
    raise ValueError(
        f"tfds {dataset}: config.data.label_names {tuple(configured)} are not the names of "
        f"the ClassLabel field {field!r} {tuple(class_names)}"
        + (f"; not in config.data.label_names: {missing_in_config}" if missing_in_config
           else "")
        + (f"; not names of {field!r}: {missing_in_data}" if missing_in_data else "")
        + (f"; repeated: {repeated}" if repeated else "")
        + ". List the ClassLabel's names (in any order: the ids follow it), or leave "
        "config.data.label_names empty to use the ClassLabel's order")
  return configured


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
  class_names = class_label_names(label_feature) if layout in (
      "label", "multi_hot", "tags") else None
  if class_names is not None:
    # ClassLabel: ids are named by the ClassLabel and mapped to the configured order.
    names = ordered_label_names(class_names, d.label_names, d.tfds_name, fields[2])
  else:  # Plain integers: configured names (or a numbered ClassLabel's) name the ids.
    names = list(d.label_names) or (list(label_feature.names) if hasattr(
        label_feature, "names") else [])
  if fields[2] and layout in ("label", "multi_hot"):
    num = task.num_label_classes
    if names and len(names) != num:
      raise ValueError(f"{d.tfds_name}: {fields[2]!r} has {len(names)} classes {names}, the "
                       f"task has num_classes={num}")
  # Names -> ids: ClassLabel names (any layout) or, for plain integer tags, configured names.
  by_name = class_names is not None or (layout == "tags" and bool(names))
  vocab = text_lib.LabelVocab(names if by_name else None)
  encoder = local_files.build_encoder(config, task, [], vocab=vocab)
  skip = list(d.skip_labels)
  if class_names is not None:  # skip_labels holds TFDS ids; the records hold their names.
    skip += [class_names[x] for x in d.skip_labels
             if isinstance(x, int) and 0 <= x < len(class_names)]
  out = {}
  for split, (source, _) in opened.items():
    convert = TfdsRecord(d.tfds_name, splits[split], *fields, encoder=encoder,
                         class_names=class_names)
    stats = text_lib.LoadStats()
    if d.max_examples:  # Eager: read, check and encode the first examples now.
      n = min(d.max_examples, len(source))
      records = [convert.record(source[i], i) for i in range(n)]
      records = text_lib.drop_empty(records, d.on_empty, stats)
      records = text_lib.drop_labels(records, skip, stats)
      for r in records:
        convert.check_label(r)
      out[split] = text_lib.encoded_source(records, encoder, stats)
      stats.log(f"tfds {d.tfds_name}[{splits[split]}]")
    else:
      if d.skip_labels:
        raise ValueError("config.data.skip_labels needs the examples in memory: set "
                         "config.data.max_examples > 0")
      out[split] = text_lib.ExampleSource(_Indexed(source), transform=convert, stats=stats,
                                          eager=False)
    if names and layout in ("label", "multi_hot", "tags"):
      # The names of the run's ids: saved in data_info.json, so predictions name their labels.
      out[split].label_names = list(names)
  return out
