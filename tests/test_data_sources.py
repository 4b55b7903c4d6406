"""Text sources: local files round-trip into batches, bad input, tokenizers, TFDS mock data."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, load_config, local_config
from longtext_jax import data, tasks
from longtext_jax.data import local_files, text, tokenizers

BYTES = tokenizers.ByteTokenizer()


def _config(task="classification", num_classes=3, **data_fields):
  return local_config(task, num_classes, **data_fields)


def _all_rows(source, batch_size=4):
  """Every real row of the eval pass, as (text, row-dict) decoded with the byte tokenizer."""
  rows = []
  for batch in data.eval_batches(source, batch_size):
    for r in np.flatnonzero(batch["mask"].any(-1)):
      ids = batch["input_ids"][r][batch["mask"][r]]
      assert ids[0] == BYTES.cls_id and ids[-1] == BYTES.sep_id
      rows.append((ids, {k: v[r] for k, v in batch.items()}))
  return rows


DOCS = [("the cat sat", "pets"), ("stocks fell, sharply", "money"), ("é ünïcode ☃", "misc"),
        ('a "quoted" text', "money"), ("dogs bark", "pets")]


def _write_jsonl(path, docs, **extra):
  with open(path, "w", encoding="utf-8") as f:
    for t, l in docs:
      f.write(json.dumps({"text": t, "label": l, **extra}) + "\n")


def _write_csv(path, docs):
  import csv  # pylint: disable=import-outside-toplevel
  with open(path, "w", encoding="utf-8", newline="") as f:
    w = csv.writer(f)
    w.writerow(["id", "text", "label"])
    for i, (t, l) in enumerate(docs):
      w.writerow([i, t, l])


def _write_tsv(path, docs):  # GLUE style: no quoting at all.
  with open(path, "w", encoding="utf-8") as f:
    f.write("id\ttext\tlabel\n")
    f.writelines(f"{i}\t{t}\t{l}\n" for i, (t, l) in enumerate(docs))


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "tsv"])
def test_labelled_files_round_trip_into_batches(fmt, tmp_path):
  path = str(tmp_path / f"train.{fmt}")
  {"jsonl": _write_jsonl, "csv": _write_csv,
   "tsv": _write_tsv}[fmt](path, DOCS)
  config = _config(train_path=path, eval_path=path)
  splits = data.build_splits(config, tasks.get_task(config.task))
  names = sorted({l for _, l in DOCS})  # Sorted scan of the training labels.
  rows = _all_rows(splits["eval"])
  assert len(rows) == len(DOCS)
  for (ids, row), (doc, label) in zip(rows, DOCS):
    assert BYTES.decode(ids) == doc
    assert names[int(row["label"])] == label
  # The training iterator yields the same (text, label) pairs, shuffled.
  batch = next(data.train_iterator(splits["train"], 5, seed=0))
  got = sorted((BYTES.decode(batch["input_ids"][r][batch["mask"][r]]),
                names[int(batch["label"][r])]) for r in range(5))
  assert got == sorted(DOCS)


def test_text_pairs_multilabel_and_configured_label_names(tmp_path):
  path = str(tmp_path / "pairs.jsonl")
  rows = [{"a": "first one", "b": "second", "y": ["x", "z"]}, {"a": "p", "b": "qq", "y": ["y"]},
          {"a": "only", "b": "zz", "y": []}]
  with open(path, "w") as f:
    f.write("\n".join(json.dumps(r) for r in rows))
  config = _config("multilabel", 3, train_path=path, eval_path=path, text_field="a",
                   text_pair_field="b", label_field="y", label_names=("z", "y", "x"))
  splits = data.build_splits(config, tasks.get_task(config.task))
  batch = next(data.eval_batches(splits["eval"], 3))
  np.testing.assert_array_equal(batch["labels"], [[1, 0, 1], [0, 1, 0], [0, 0, 0]])
  for r, row in enumerate(rows):
    ids = batch["input_ids"][r][batch["mask"][r]]
    types = batch["token_type_ids"][r][batch["mask"][r]]
    first, second = ids[types == 0], ids[types == 1]
    assert BYTES.decode(first) == row["a"] and BYTES.decode(second) == row["b"]
    assert first[0] == BYTES.cls_id and first[-1] == second[-1] == BYTES.sep_id


def test_conll_round_trip_with_tags(tmp_path):
  path = str(tmp_path / "ner.conll")
  sents = [[("EU", "B-ORG"), ("rejects", "O"), ("German", "B-MISC"), ("call", "O")],
           [("Peter", "B-PER"), ("Blackburn", "I-PER")]]
  with open(path, "w") as f:
    f.write("-DOCSTART- -X- O O\n\n")
    for s in sents:
      f.write("".join(f"{w} NNP I-NP {t}\n" for w, t in s) + "\n")
  names = ["B-MISC", "B-ORG", "B-PER", "I-PER", "O"]  # Sorted scan; 5 tags, not 6:
  config = _config("tagging", 6, train_path=path, eval_path=path)
  with pytest.raises(ValueError, match="label set has 5 labels"):
    data.build_splits(config, tasks.get_task(config.task))
  config = _config("tagging", 5, train_path=path, eval_path=path)
  splits = data.build_splits(config, tasks.get_task(config.task))
  batch = next(data.eval_batches(splits["eval"], 2))
  for r, sent in enumerate(sents):
    ids = batch["input_ids"][r][batch["mask"][r]]
    tags = batch["tags"][r][batch["mask"][r]]
    assert BYTES.decode(ids) == " ".join(w for w, _ in sent)  # No special tokens.
    starts = batch["tag_mask"][r][batch["mask"][r]]
    # Each word's first byte is its one label (tag_mask); its later bytes repeat the tag
    # and are not labels (the loss and span F1 count words).
    pos = 0
    for j, (w, t) in enumerate(sent):
      n = len((" " if j else "") + w)
      assert [names[x] for x in tags[pos:pos + n]] == [t] * n
      assert starts[pos:pos + n].tolist() == [True] + [False] * (n - 1)
      pos += n
    assert pos == len(ids)


def test_text_dir_labels_from_subfolders(tmp_path):
  for label, docs in {"neg": ["bad film", "awful"], "pos": ["great", "loved it"]}.items():
    os.makedirs(tmp_path / "train" / label)
    for i, d in enumerate(docs):
      (tmp_path / "train" / label / f"{i}.txt").write_text(d)
  config = _config("classification", 2, train_path=str(tmp_path / "train"),
                   eval_path=str(tmp_path / "train"))
  splits = data.build_splits(config, tasks.get_task(config.task))
  got = {(BYTES.decode(ids[1:-1]), int(row["label"])) for ids, row in _all_rows(splits["eval"])}
  assert got == {("bad film", 0), ("awful", 0), ("great", 1), ("loved it", 1)}


def _build(tmp_path, lines, **kw):
  path = tmp_path / "d.jsonl"
  path.write_bytes(b"\n".join(lines))
  config = _config("classification", 2, train_path=str(path), eval_path=str(path), **kw)
  return data.build_splits(config, tasks.get_task(config.task))


def test_bad_input(tmp_path):
  ok = b'{"text": "fine", "label": "a"}'
  # Invalid UTF-8: replaced by U+FFFD and counted, never an error.
  splits = _build(tmp_path, [ok, b'{"text": "caf\xe9 \xff\xfe ok", "label": "b"}'])
  assert splits["train"].stats.invalid_utf8 == 3  # \xe9 (truncated sequence), \xff, \xfe.
  ids = splits["train"][1]["input_ids"]
  assert BYTES.decode(ids[1:-1]) == "caf\ufffd \ufffd\ufffd ok"
  # Empty text: an error naming file:line, or skipped and counted.
  lines = [ok, b'{"text": "  ", "label": "b"}', b'{"text": "x", "label": "b"}']
  with pytest.raises(ValueError, match=r"d\.jsonl:2: empty text"):
    _build(tmp_path, lines)
  splits = _build(tmp_path, lines, on_empty="skip")
  assert splits["train"].stats.empty_skipped == 1 and len(splits["train"]) == 2
  # A label outside the configured set: an error naming the example.
  with pytest.raises(ValueError, match=r"d\.jsonl:3: label 'c' is outside the label set"):
    _build(tmp_path, [ok, ok, b'{"text": "x", "label": "c"}'], label_names=("a", "b"))
  # A label outside the training labels (eval file): error naming the eval file and line.
  (tmp_path / "e.jsonl").write_text(ok.decode() + '\n{"text": "y", "label": "zzz"}\n')
  config = _config("classification", 2, train_path=str(tmp_path / "e.jsonl"))
  (tmp_path / "t.jsonl").write_text(ok.decode() + '\n{"text": "y", "label": "b"}\n')
  config.data.train_path, config.data.eval_path = str(tmp_path / "t.jsonl"), str(
      tmp_path / "e.jsonl")
  with pytest.raises(ValueError, match=r"e\.jsonl:2: label 'zzz'"):
    data.build_splits(config, tasks.get_task(config.task))
  # Integer labels beyond num_classes: the task's check names the example.
  with pytest.raises(ValueError, match=r"d\.jsonl:2.*outside the label set"):
    _build(tmp_path, [b'{"text": "x", "label": 1}', b'{"text": "y", "label": 7}'])
  # Empty file: a clear error.
  (tmp_path / "empty.csv").write_text("")
  with pytest.raises(ValueError, match="empty.csv: the file is empty"):
    data.build_splits(_config("classification", 2, train_path=str(tmp_path / "empty.csv"),
                              eval_path=str(tmp_path / "empty.csv")),
                      tasks.get_task(_config().task))
  # Long documents: kept whole (counted as long), truncated only when max_tokens says so.
  long = json.dumps({"text": "w" * 700, "label": "a"}).encode()
  splits = _build(tmp_path, [ok, long, b'{"text": "x", "label": "b"}'])
  assert len(splits["train"][1]["input_ids"]) == 702
  assert splits["train"].stats.long_docs == 1 and splits["train"].stats.truncated == 0
  splits = _build(tmp_path, [ok, long, b'{"text": "x", "label": "b"}'], max_tokens=100)
  assert len(splits["train"][1]["input_ids"]) == 100
  assert splits["train"][1]["input_ids"][-1] == BYTES.sep_id
  assert splits["train"].stats.truncated == 1


def test_byte_tokenizer_round_trip_and_load_tokenizer():
  s = "naïve ☃ text\n"
  ids = BYTES.encode(s)
  assert ids.min() >= len(tokenizers.SPECIAL_IDS) and ids.max() < BYTES.vocab_size
  assert BYTES.decode(ids) == s
  assert BYTES.decode(np.concatenate([[BYTES.cls_id], ids, [BYTES.pad_id]])) == s
  assert isinstance(BYTES, tokenizers.Tokenizer)
  cfg = _config().data.tokenizer
  assert isinstance(tokenizers.load_tokenizer(cfg), tokenizers.ByteTokenizer)
  cfg.kind = "sentencepice"
  with pytest.raises(ValueError, match="unknown tokenizer kind"):
    tokenizers.load_tokenizer(cfg)
  cfg.kind, cfg.path = "sentencepiece", ""
  with pytest.raises(ValueError, match="path is empty"):
    tokenizers.load_tokenizer(cfg)


TF_PROBE = r"""
import importlib, importlib.abc, importlib.util, pkgutil, sys, traceback
attempts = []

class Probe(importlib.abc.MetaPathFinder):
  # Records every attempt to import tensorflow made from a longtext_jax file (whether or not
  # tensorflow is installed; tensorflow_datasets' own optional imports are not ours).
  def find_spec(self, name, path=None, target=None):
    if name.split(".")[0] == "tensorflow":
      stack = [f for f in traceback.extract_stack()[:-1]
               if not f.filename.startswith("<frozen importlib")
               and not f.filename.endswith("importlib/__init__.py")]
      importer = stack[-1]  # The file whose import statement this is.
      if "/longtext_jax/" in importer.filename:
        attempts.append(f"{name} from {importer.filename}:{importer.lineno}")
    return None

sys.meta_path.insert(0, Probe())
root = importlib.util.find_spec("longtext_jax").submodule_search_locations
for m in pkgutil.walk_packages(root, "longtext_jax."):
  importlib.import_module(m.name)
import tensorflow_datasets as tfds
sys.path.insert(0, "tests")
from conftest import ROOT, load_config
from longtext_jax import data, tasks
for arg in ("imdb", "ag_news"):  # Lazy (records read while batching) and in memory.
  config = load_config("text_classification.py", arg + ",tiny")
  config.data.max_examples = 0 if arg == "imdb" else config.data.max_examples
  config.data.bucket_batches = 0
  with tfds.testing.mock_data(num_examples=6, policy=tfds.testing.MockPolicy.USE_CODE):
    splits = data.build_splits(config, tasks.get_task(config.task))
    batch = next(data.train_iterator(splits["train"], 4, 0))
    assert batch["input_ids"].shape[0] == 4
print("ATTEMPTS", attempts)
"""


def test_no_module_imports_tensorflow_and_tfds_sources_read_without_it():
  """Every longtext_jax module imports, and the TFDS sources (lazy and in memory) build
  batches from mock data, without one import of tensorflow from our files."""
  r = subprocess.run([sys.executable, "-c", TF_PROBE], cwd=ROOT, capture_output=True,
                     text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "ATTEMPTS []" in r.stdout, r.stdout[-3000:]


TFDS_CASES = {  # name -> (config arg, train split, text fields)
    "imdb_reviews": ("imdb", "train", ("text",)),
    "ag_news_subset": ("ag_news", "train", ("title", "description")),
    "glue/sst2": ("sst2", "train", ("sentence",)),
}


@pytest.mark.parametrize("name", [  # Lazy records; two text fields; (long) one more dataset.
    "imdb_reviews", "ag_news_subset", pytest.param("glue/sst2", marks=pytest.mark.long)])
def test_tfds_mock_data_trains_without_tensorflow(name, tmp_path):
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  from longtext_jax import train  # pylint: disable=import-outside-toplevel
  arg, train_split, fields = TFDS_CASES[name]
  config = load_config("text_classification.py", f"{arg},tiny")
  if name == "imdb_reviews":  # Lazy: records tokenized as batches are built.
    config.data.max_examples = 0
    config.data.bucket_batches = 0
  config.data.batch_size = 4
  config.data.eval_batch_size = 8
  config.data.pad_multiple = 64  # Mock texts are short: one shape, one compilation.
  config.model.d_model = 16
  config.model.encoder.num_heads = 2
  config.train.num_steps = 2
  config.train.eval_every = 2
  config.train.checkpoint_every = 2
  config.train.best_metric = ""
  config.train.progress_bar = False
  with tfds.testing.mock_data(num_examples=12, policy=tfds.testing.MockPolicy.USE_CODE):
    splits = data.build_splits(config, tasks.get_task(config.task))
    source = splits["train"]
    assert source.eager == (name != "imdb_reviews")
    reference = tfds.data_source(name, split=train_split)
    for i in range(3):  # The loader's text and label are the dataset's.
      raw = reference[i]
      want = " ".join(raw[f].decode() if isinstance(raw[f], bytes) else raw[f]
                      for f in fields)
      ex = source[i]
      assert BYTES.decode(ex["input_ids"]) == want
      assert int(ex["label"]) == int(raw["label"])
    names = reference.dataset_info.features["label"].names
    assert source.label_names == names and splits["eval"].label_names == names
    # The trainer reads the lazy source (imdb_reviews); an eager one is an in-memory
    # ExampleSource like the 'local' files that the other trainer tests run on.
    final = train.train_and_evaluate(config, str(tmp_path)) if not source.eager else None
    if final is None:  # What the trainer saves of the splits.
      data.save_data_info(str(tmp_path), splits, config.data.tokenizer)
  assert final is None or (np.isfinite(final["loss"]) and 0 <= final["accuracy"] <= 1)
  # The ClassLabel names reach the workdir: a prediction names its label.
  assert data.load_data_info(str(tmp_path))["label_names"] == names
  assert "tensorflow" not in sys.modules


@pytest.mark.parametrize("source", ["local", "tfds"])
def test_mlm_on_an_unmasked_text_source_is_refused_with_the_masking_sources_named(source):
  config = _config("mlm", 0, train_path="unused", eval_path="unused", tfds_name="unused")
  config.data.name = source
  with pytest.raises(ValueError, match="text_mlm.*tfds_mlm"):
    data.build_splits(config, tasks.get_task(config.task))


# --- TFDS ClassLabel ids named by the ClassLabel, ordered by config.data.label_names --------

# TFDS conll2003's NER ClassLabel (ORG before LOC); configs/star's CONLL03_TAGS put LOC first.
TFDS_NER_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC",
                 "I-MISC")
NER_SENTENCE = {"tokens": np.array([b"EU", b"rejects", b"German", b"call", b"in", b"Paris"],
                                   object),
                "ner": np.array([3, 0, 7, 0, 0, 5])}  # B-ORG O B-MISC O O B-LOC


def _stub_tfds(monkeypatch, examples, **features):
  """``tfds_source.open_split`` returning ``examples`` for every split, with a DatasetInfo
  whose ``features`` are the given TFDS features (nothing is read or downloaded)."""
  import types  # pylint: disable=import-outside-toplevel
  from longtext_jax.data import tfds_source  # pylint: disable=import-outside-toplevel
  info = types.SimpleNamespace(features=features)
  monkeypatch.setattr(tfds_source, "open_split",
                      lambda name, split, data_dir="": (list(examples), info))


def _word_tags(ex, words):
  """The tag id of each word: the tag at the word's first byte token."""
  starts = np.cumsum([0] + [len(BYTES.encode(w if j == 0 else " " + w))
                            for j, w in enumerate(words)])[:-1]
  return [int(t) for t in np.asarray(ex["tags"])[starts]]


def _star_conll03_on_tfds(max_examples):
  config = load_config("star/star_transformer.py", "conll03,tiny")
  config.data.name, config.data.tfds_name = "tfds", "conll2003"
  config.data.max_examples = max_examples
  return config


@pytest.mark.parametrize("max_examples", [2, 0])  # In memory, and read lazily.
def test_tfds_class_label_tags_keep_their_names_in_the_configured_order(
    monkeypatch, tmp_path, max_examples):
  """The Star conll03 config's label_names (LOC before ORG) give the ids; each TFDS id is
  read as its ClassLabel name, never renamed by position (B-ORG stays B-ORG)."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  _stub_tfds(monkeypatch, [NER_SENTENCE] * 2, ner=tfds.features.Sequence(
      tfds.features.ClassLabel(names=list(TFDS_NER_TAGS))))
  config = _star_conll03_on_tfds(max_examples)
  configured = list(config.data.label_names)
  assert configured != list(TFDS_NER_TAGS)  # The case under test: another order.
  splits = data.build_splits(config, tasks.get_task(config.task))
  words = [w.decode() for w in NER_SENTENCE["tokens"]]
  truth = [TFDS_NER_TAGS[i] for i in NER_SENTENCE["ner"]]
  for source in splits.values():
    assert source.eager == bool(max_examples)
    assert source.label_names == configured
    assert [configured[i] for i in _word_tags(source[0], words)] == truth
  # What predictions name their tags by: the configured order the ids follow.
  data.save_data_info(str(tmp_path), splits)
  assert data.load_data_info(str(tmp_path))["label_names"] == configured


@pytest.mark.parametrize("task_name", ["classification", "multilabel"])
def test_tfds_class_labels_follow_the_configured_order_and_skip_by_tfds_id(monkeypatch,
                                                                           task_name):
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  names = ["neg", "pos", "mixed"]  # TFDS ids 0, 1, 2.
  multi = task_name == "multilabel"
  feature = tfds.features.ClassLabel(names=names)
  values = [[1, 2], [0], [2]] if multi else [1, 0, 2, -1]  # -1: no gold label.
  _stub_tfds(monkeypatch, [{"text": f"t{i}", "label": np.array(v)}
                           for i, v in enumerate(values)],
             label=tfds.features.Sequence(feature) if multi else feature)
  config = _config(task_name, 3, tfds_name="my_reviews", max_examples=10,
                   label_names=("mixed", "neg", "pos"), skip_labels=() if multi else (-1,))
  config.data.name = "tfds"
  splits = data.build_splits(config, tasks.get_task(config.task))
  source = splits["train"]
  assert source.label_names == ["mixed", "neg", "pos"]
  order = {n: i for i, n in enumerate(source.label_names)}
  if multi:
    for i, v in enumerate(values):
      assert np.flatnonzero(source[i]["labels"]).tolist() == sorted(order[names[t]] for t in v)
  else:
    assert len(source) == 3 and source.stats.label_skipped == 1  # -1 dropped.
    assert [int(source[i]["label"]) for i in range(3)] == [order[names[t]] for t in values[:3]]
    # skip_labels holds TFDS ids: 2 ('mixed') drops the examples whose name is 'mixed'.
    config.data.skip_labels = (-1, 2)
    source = data.build_splits(config, tasks.get_task(config.task))["train"]
    assert [int(source[i]["label"]) for i in range(len(source))] == [order["pos"],
                                                                    order["neg"]]


def test_tfds_label_names_that_are_not_the_class_label_names_name_both_sides(monkeypatch):
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  _stub_tfds(monkeypatch, [NER_SENTENCE], ner=tfds.features.Sequence(
      tfds.features.ClassLabel(names=list(TFDS_NER_TAGS))))
  config = _star_conll03_on_tfds(1)
  wrong = list(config.data.label_names)
  wrong[wrong.index("B-MISC")] = "B-MSC"
  config.data.label_names = tuple(wrong)
  config.task.tag_names = tuple(wrong)
  with pytest.raises(ValueError, match=r"conll2003.*'ner'.*not in config\.data\.label_names: "
                     r"\['B-MISC'\].*not names of 'ner': \['B-MSC'\]"):
    data.build_splits(config, tasks.get_task(config.task))


def test_tfds_numbered_class_label_or_plain_ids_are_named_by_position(monkeypatch):
  """A ClassLabel without names of its own ('0', '1', ...) holds plain ids: configured
  names name them by position, as for integer labels."""
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  _stub_tfds(monkeypatch, [{"text": "a", "label": np.array(1)}],
             label=tfds.features.ClassLabel(num_classes=2))
  config = _config("classification", 2, tfds_name="my_ids", max_examples=10,
                   label_names=("neg", "pos"))
  config.data.name = "tfds"
  source = data.build_splits(config, tasks.get_task(config.task))["train"]
  assert source.label_names == ["neg", "pos"] and int(source[0]["label"]) == 1


# --- task.tag_names (span F1's tag order) against the data's tag ids -------------------------

def _conll_files(tmp_path, extra=""):
  sentences = [[("EU", "B-ORG"), ("rejects", "O"), ("German", "B-MISC"), ("call", "O")],
               [("Peter", "B-PER"), ("Blackburn", "I-PER"), ("in", "O"), ("Paris", "B-LOC")],
               [("Bonn", "B-LOC"), ("and", "O"), ("Siemens", "B-ORG"), ("AG", "I-ORG")],
               [("EU", "I-MISC"), ("New", "B-LOC"), ("York", "I-LOC")]]
  for split in ("train", "test"):
    with open(tmp_path / f"{split}.txt", "w", encoding="utf-8") as f:
      for sent in sentences:
        f.write("".join(f"{w} NNP {t}\n" for w, t in sent) + "\n")
      f.write(extra)
  return str(tmp_path / "train.txt"), str(tmp_path / "test.txt")


def test_tag_names_without_label_names_is_an_error_showing_both_orders(tmp_path):
  """Local CoNLL tags without data.label_names get the sorted order; span F1 reads the ids
  in task.tag_names' order: the mismatch stops the run before training, with the fix."""
  config = load_config("star/star_transformer.py", "conll03,tiny")
  config.data.train_path, config.data.eval_path = _conll_files(tmp_path)
  config.data.label_names = ()
  task = tasks.get_task(config.task)
  with pytest.raises(ValueError) as e:
    data.build_splits(config, task)
  message = str(e.value)
  assert str(sorted(config.task.tag_names)) in message  # The data's order ...
  assert str(list(config.task.tag_names)) in message  # ... and the task's.
  assert "config.data.label_names = config.task.tag_names" in message
  # The fix: the ids follow the task's order; a tag outside it names its file:line.
  config.data.label_names = config.task.tag_names
  source = data.build_splits(config, task)["train"]
  assert source.label_names == list(config.task.tag_names)
  names = config.task.tag_names
  assert [names[i] for i in _word_tags(source[1], ["Peter", "Blackburn", "in", "Paris"])] == [
      "B-PER", "I-PER", "O", "B-LOC"]
  config.data.train_path, config.data.eval_path = _conll_files(tmp_path, "Bob B-PERSON\n")
  with pytest.raises(ValueError, match=r"train\.txt:20: label 'B-PERSON' is outside"):
    data.build_splits(config, task)


def test_tag_names_against_the_class_label_order_of_tfds(monkeypatch):
  import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel
  _stub_tfds(monkeypatch, [NER_SENTENCE], ner=tfds.features.Sequence(
      tfds.features.ClassLabel(names=list(TFDS_NER_TAGS))))
  config = _star_conll03_on_tfds(1)
  config.data.label_names = ()  # The ids would follow the ClassLabel (ORG before LOC).
  with pytest.raises(ValueError, match="config.task.tag_names"):
    data.build_splits(config, tasks.get_task(config.task))


def test_a_tfds_dataset_not_prepared_is_named_with_the_command_and_never_downloaded(tmp_path):
  """tfds.data_source's default downloads and prepares a missing dataset (here it failed on
  a missing module, after 'Downloading and preparing dataset'); the run instead refuses,
  naming the folder and the `tfds build` command. An unknown name says so."""
  from longtext_jax.data import tfds_source  # pylint: disable=import-outside-toplevel
  with pytest.raises(ValueError, match=r"TFDS dataset 'imdb_reviews' is not prepared under "
                     + re.escape(str(tmp_path)) + r".*`tfds build imdb_reviews "
                     r"--file_format=array_record --data_dir=" + re.escape(str(tmp_path))):
    tfds_source.open_split("imdb_reviews", "train", str(tmp_path))
  assert not any(p.is_file() for p in tmp_path.rglob("*"))  # Nothing downloaded.
  with pytest.raises(ValueError, match="TFDS has no dataset 'no_such_set': Dataset "
                                       "no_such_set not found"):
    tfds_source.open_split("no_such_set", "train", str(tmp_path))
