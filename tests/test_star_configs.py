"""The Star-Transformer dataset configs build models that accept their batch formats."""
import jax
import numpy as np
import pytest

from conftest import load_script
from longtext_jax.model import build_model

star_configs = load_script("configs/star/star_transformer.py")


def _batch(task, num_classes, vocab):
  b, length = 2, 7
  mask = np.arange(length)[None] < np.array([[7], [4]])
  batch = {"input_ids": np.where(mask, 3, 0), "mask": mask}
  if "tagging" in task:
    batch["tags"] = np.zeros((b, length), np.int32)
  else:
    batch["label"] = np.zeros((b,), np.int32)
  if task == "pair_classification":
    batch["token_type_ids"] = (np.arange(length)[None] >= 2).astype(np.int32) * mask
  return batch


@pytest.mark.parametrize("arg", ["sst", "mtl16:books", "snli", "conll03", "conll03,crf",
                                 "ontonotes,crf", "ptb_pos"])
def test_config_builds_table1_model(arg):
  full = star_configs.get_config(arg)
  assert full.model.encoder.name == "star_transformer"
  assert full.model.d_model // full.model.encoder.num_heads == (100 if arg == "snli" else 50)
  c = star_configs.get_config(arg + ",tiny")
  model = build_model(c)
  batch = _batch(c.task.name, c.task.num_classes, c.model.vocab_size)
  out = jax.eval_shape(lambda: model.init_with_output(jax.random.key(0), batch))[0]
  key = "crf" if c.task.name == "crf_tagging" else "logits"
  assert key in out
  if c.task.get("tag_names", ()):
    assert len(c.task.tag_names) == c.task.num_classes


@pytest.mark.parametrize("arg", ["sst,crf", "mtl16", "mtl16:cars", "imdb", "sst,big"])
def test_bad_args_raise(arg):
  with pytest.raises(ValueError):
    star_configs.get_config(arg)


def test_conll03_config_trains_on_conll_files_with_the_tasks_tag_ids(tmp_path):
  """The CoNLL-2003 config reads CoNLL column files through the local loader; tag ids follow
  the config's tag order (which span F1 decodes), not the order tags appear in the file."""
  from longtext_jax import data, tasks, train  # pylint: disable=import-outside-toplevel
  sentences = [[("EU", "B-ORG"), ("rejects", "O"), ("German", "B-MISC"), ("call", "O")],
               [("Peter", "B-PER"), ("Blackburn", "I-PER")],
               [("BRUSSELS", "B-LOC"), ("1996-08-22", "O")]] * 4
  for split in ("train", "test"):
    with open(tmp_path / f"{split}.txt", "w") as f:
      f.write("-DOCSTART- -X- -X- O\n\n")
      for sent in sentences:
        f.write("".join(f"{w} NNP B-NP {t}\n" for w, t in sent) + "\n")
  c = star_configs.get_config("conll03,crf,tiny")
  c.data.train_path, c.data.eval_path = str(tmp_path / "train.txt"), str(tmp_path / "test.txt")
  c.data.batch_size = c.data.eval_batch_size = 4
  splits = data.build_splits(c, tasks.get_task(c.task))
  tag_ids = splits["train"][1]["tags"]  # Peter Blackburn, tokenized as bytes.
  names = star_configs.CONLL03_TAGS
  assert names[int(tag_ids[0])] == "B-PER" and names[int(tag_ids[-1])] == "I-PER"
  c.train.num_steps, c.train.eval_every, c.train.checkpoint_every = 2, 2, 2
  final = train.train_and_evaluate(c, str(tmp_path / "run"))
  assert "span_f1" in final


def test_examples_without_a_gold_label_are_dropped_and_counted():
  from longtext_jax.data import text  # pylint: disable=import-outside-toplevel
  stats = text.LoadStats()
  records = [{"label": 0}, {"label": -1}, {"label": 2}, {"label": -1}]
  kept = text.drop_labels(records, (-1,), stats)
  assert [r["label"] for r in kept] == [0, 2] and stats.label_skipped == 2
  assert text.drop_labels(records, (), stats) == records
