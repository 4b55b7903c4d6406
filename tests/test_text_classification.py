"""GLUE/CLUE-style files through the one local loader (and its 'local_text' alias), the
pydoc pair demo, the MCC metric."""
import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_script
from longtext_jax import data as data_lib
from longtext_jax import tasks
from longtext_jax.data.sentencepiece_tokenizer import SentencePieceTokenizer, train_sentencepiece


def _finetune_config(arg):
  return load_script("configs/slstm/finetune.py").get_config(arg)


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
  lines = ["the cat sat on the mat", "a dog is not a cat", "entailment means it follows",
           "猫 坐 在 垫子 上", "体育 新闻 财经"] * 20
  prefix = str(tmp_path_factory.mktemp("spm") / "m")
  train_sentencepiece(lines, 60, prefix)
  return prefix + ".model"


def _arrays(config, source):
  """All rows of ``source`` as one batch, padded as training pads them."""
  return next(data_lib.eval_batches(source, len(source), pad_multiple=config.data.pad_multiple))


def test_glue_and_clue_layouts(tmp_path, spm_model):
  tok = SentencePieceTokenizer(spm_model)
  cola = tmp_path / "CoLA"
  cola.mkdir()
  (cola / "train.tsv").write_text("gj04\t1\t\tthe cat sat.\ngj04\t0\t*\tcat the sat.\n")
  (cola / "dev.tsv").write_text("gj04\t1\t\ta dog sat.\n")
  c = _finetune_config("cola,tiny")
  c.data.data_dir = str(tmp_path)
  c.data.tokenizer.kind = "sentencepiece"
  c.data.tokenizer.path = spm_model
  splits = data_lib.build_splits(c, tasks.get_task(c.task))
  arr = _arrays(c, splits["train"])
  assert arr["input_ids"].shape == (2, c.data.seq_len)  # Rows padded to seq_len, as before.
  np.testing.assert_array_equal(arr["label"], [1, 0])
  np.testing.assert_array_equal(arr["input_ids"][0, :arr["mask"][0].sum()],
                                tok.encode_pair("the cat sat."))
  assert "token_type_ids" not in arr  # Single texts.

  mnli = tmp_path / "MNLI"
  mnli.mkdir()
  header = "index\tgenre\tsentence1\tsentence2\tgold_label\n"
  (mnli / "train.tsv").write_text(header + "0\tx\ta cat\tit is a cat\tentailment\n"
                                  "1\tx\ta dog\tno dog\tcontradiction\n2\tx\ta\tb\t-\n")
  (mnli / "dev_matched.tsv").write_text(header + "0\tx\tthe mat\ta mat\tneutral\n")
  c = _finetune_config("mnli,tiny")
  c.data.data_dir = str(tmp_path)
  c.data.tokenizer.kind = "sentencepiece"
  c.data.tokenizer.path = spm_model
  splits = data_lib.build_splits(c, tasks.get_task(c.task))
  arr = _arrays(c, splits["train"])
  np.testing.assert_array_equal(arr["label"], [1, 0])  # the '-' row is skipped
  assert splits["train"].stats.label_skipped == 1
  np.testing.assert_array_equal(arr["input_ids"][0, :arr["mask"][0].sum()],
                                tok.encode_pair("a cat", "it is a cat"))
  # Segment ids: 0 on <s> A </s>, 1 on B </s>.
  n_a = len(tok.encode("a cat")) + 2
  np.testing.assert_array_equal(arr["token_type_ids"][0, :arr["mask"][0].sum()],
                                [0] * n_a + [1] * (len(tok.encode("it is a cat")) + 1))
  assert _arrays(c, splits["eval"])["label"].tolist() == [2]
  assert splits["train"].label_names == ["contradiction", "entailment", "neutral"]

  tnews = tmp_path / "tnews"
  tnews.mkdir()
  for name in ("train.json", "dev.json"):
    (tnews / name).write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in [
        {"label": "103", "sentence": "体育 新闻"}, {"label": "116", "sentence": "猫"}]))
  c = _finetune_config("tnews,tiny")
  c.data.data_dir = str(tmp_path)
  c.data.tokenizer.kind = "sentencepiece"
  c.data.tokenizer.path = spm_model
  splits = data_lib.build_splits(c, tasks.get_task(c.task))
  assert _arrays(c, splits["train"])["label"].tolist() == [3, 14] and c.task.num_classes == 15

  (tnews / "dev.json").write_text(json.dumps({"label": "105", "sentence": "x"}))
  with pytest.raises(ValueError, match="105"):
    data_lib.build_splits(c, tasks.get_task(c.task))
  c.data.data_dir = ""
  with pytest.raises(ValueError, match="data_dir"):
    data_lib.build_splits(c, tasks.get_task(c.task))


def test_pydoc_pairs(tmp_path, monkeypatch):
  monkeypatch.setenv("LONGTEXT_JAX_CACHE", str(tmp_path))
  c = _finetune_config("pydoc_pairs,tiny")
  splits = data_lib.build_splits(c, tasks.get_task(c.task))
  arr = splits["train"].arrays
  assert len(arr["label"]) == 512 and 0.35 < arr["label"].mean() < 0.65
  row = arr["input_ids"][0][arr["mask"][0]]
  assert row[0] == 2 and row[-1] == 3 and (row == 3).sum() == 2  # <s> A </s> B </s>
  assert len(os.listdir(tmp_path / "spm")) == 2  # tokenizer trained once and cached


def test_matthews_corrcoef():
  task = tasks.get_task(_finetune_config("cola,tiny").task)
  gold = np.array([1, 1, 1, 0, 0, 1, 0, 1])
  pred = np.array([1, 0, 1, 0, 1, 1, 0, 1])
  logits = jnp.asarray(np.eye(2)[pred] * 3.0)
  batch = {"label": jnp.asarray(gold), "mask": jnp.ones((8, 3), bool)}
  sums = task.metrics({"logits": logits}, batch)
  tp, tn, fp, fn = 4, 2, 1, 1
  want = (tp * tn - fp * fn) / np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  assert task.summarize(sums)["mcc"] == pytest.approx(want)
  # Filler rows (no real token) do not count.
  batch["mask"] = batch["mask"].at[1].set(False)
  assert task.summarize(task.metrics({"logits": logits}, batch))["mcc"] == pytest.approx(
      (4 * 2 - 1 * 0) / np.sqrt(5 * 4 * 2 * 3))
  assert tasks.matthews_corrcoef(np.array([[3, 0], [0, 0]])) == 0.0


def _mnli_files(tmp_path):
  mnli = tmp_path / "MNLI"
  mnli.mkdir()
  header = "index\tgenre\tsentence1\tsentence2\tgold_label\n"
  long = " ".join(["the cat sat on the mat"] * 12)  # Cut longest-first to seq_len.
  (mnli / "train.tsv").write_text(
      header + f"0\tx\ta cat\tit is a cat\tentailment\n1\tx\t{long}\tno dog\tcontradiction\n"
      f"2\tx\ta\tb\t-\n3\tx\tdog {long}\t{long} cat\tneutral\n4\tx\t\tempty first\tneutral\n")
  (mnli / "dev_matched.tsv").write_text(header + "0\tx\tthe mat\ta mat\tneutral\n")


def test_local_text_alias_equals_the_local_loader(tmp_path, spm_model):
  """A config written for the former 'local_text' source (its field names) gives the batches
  of the finetune config, which now uses 'local'."""
  _mnli_files(tmp_path)
  new = _finetune_config("mnli,tiny")
  new.data.data_dir = str(tmp_path)
  new.data.tokenizer.path = spm_model
  assert new.data.name == "local"
  legacy = _finetune_config("mnli,tiny")
  legacy.data.name = "local_text"
  legacy.data.data_dir = str(tmp_path)
  legacy.data.tokenizer.path = spm_model
  legacy.data.train_file = os.path.join("{data_dir}", "MNLI", "train.tsv")
  legacy.data.eval_file = os.path.join("{data_dir}", "MNLI", "dev_matched.tsv")
  legacy.data.text_a, legacy.data.text_b, legacy.data.label = (
      "sentence1", "sentence2", "gold_label")
  task = tasks.get_task(new.task)
  got_new = data_lib.build_splits(new, task)
  got_old = data_lib.build_splits(legacy, task)
  for split in ("train", "eval"):
    a = _arrays(new, got_new[split])
    b = got_old[split].arrays  # The alias returns rows stacked at seq_len, as before.
    assert set(a) == set(b) == {"input_ids", "mask", "token_type_ids", "label", "example_id"}
    for k in a:
      np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  arr = got_old["train"].arrays
  assert arr["input_ids"].shape == (4, 64) and arr["mask"].sum(1).max() == 64
  assert got_new["train"].stats.truncated == 2 and got_new["train"].stats.label_skipped == 1
  # The empty first text is kept as <s> </s> B </s> (on_empty='keep'), as local_text did.
  row = arr["input_ids"][3][arr["mask"][3]]
  assert row[0] == 2 and row[1] == 3 and row[-1] == 3
