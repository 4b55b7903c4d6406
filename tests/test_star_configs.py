"""The Star-Transformer dataset configs build models that accept their batch formats."""
import importlib.util
import os

import jax
import numpy as np
import pytest

from longtext_jax.model import build_model

_PATH = os.path.join(os.path.dirname(__file__), "..", "configs", "star", "star_transformer.py")
_spec = importlib.util.spec_from_file_location("star_configs", _PATH)
star_configs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(star_configs)


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
