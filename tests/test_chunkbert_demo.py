"""experiments/chunkbert_demo.py: its generated task and its run, on a tiny random BERT folder.

The demo reads its BERT through the ``hf_bert`` warm-start source (``config.init_from``) and
its tokenizer through ``WordPieceTokenizer.from_pretrained``; here both come from a tiny
Hugging Face folder written by the test (no MiniLM needed).
"""
from __future__ import annotations

import json

import jax
import numpy as np
import pytest

import hf_folders
from conftest import load_script
from longtext_jax import model as model_lib
from longtext_jax.encoders import bert_checkpoint


def _demo():
  """Imports experiments/chunkbert_demo.py as a module."""
  return load_script("experiments/chunkbert_demo.py")


def _tiny_folder(tmp_path, demo, layers=1):
  """A random BERT of width 16 as a HF folder, with a vocabulary holding the demo's topic
  words (ids 8000+) and 6000 whole-word fillers at ids 2000-7999."""
  vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(1, 2000)]
  vocab[100:104] = ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  vocab += [f"filler{i}" for i in range(2000, 8000)]
  vocab += list(demo.SPORTS) + list(demo.FOOD)
  (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
  cfg = dict(hidden_size=16, num_hidden_layers=layers, num_attention_heads=2,
             intermediate_size=32, max_position_embeddings=512, type_vocab_size=2,
             layer_norm_eps=1e-12, hidden_act="gelu", hidden_dropout_prob=0.1,
             attention_probs_dropout_prob=0.1, model_type="bert")
  hf_folders.write_folder(tmp_path, cfg, scale=0.02, vocab=vocab)
  return str(tmp_path)


def test_demo_task_hides_the_label_beyond_the_signal_start(tmp_path):
  """Before ``signal_start`` both classes draw the same fillers (no topic word); from there
  on every piece is a word of the row's topic."""
  demo = _demo()
  path = _tiny_folder(tmp_path, demo)
  tok = demo.WordPieceTokenizer.from_pretrained(path)
  data = demo.make_data(tok, 16, 40, 30, seed=3)
  topics = [{tok.encode(w)[0] for w in words} for words in (demo.SPORTS, demo.FOOD)]
  assert data["input_ids"].shape == (16, 40) and data["mask"].all()
  assert set(data["label"].tolist()) == {0, 1}
  for ids, label in zip(data["input_ids"], data["label"]):
    assert not set(ids[:30].tolist()) & (topics[0] | topics[1])
    assert set(ids[30:].tolist()) <= topics[label]
    assert all(2000 <= i < 8000 for i in ids[:30])


TINY_CHUNK_BERT = dict(name="chunk_bert", chunk_size=16, num_last_layers=2, num_filters=4,
                       kernel_sizes=(3,))


def test_demo_loads_the_folder_through_init_from(tmp_path):
  """build() makes the folder an ``hf_bert`` source: every BERT weight equals the file's,
  the rest of the model keeps its init."""
  demo = _demo()
  path = _tiny_folder(tmp_path, demo)
  c = demo.build(TINY_CHUNK_BERT, path)
  assert (c.init_from.kind, c.init_from.path) == ("hf_bert", path)
  model = model_lib.build_model(c)
  batch = {"input_ids": np.full((1, 40), 2001, np.int32), "mask": np.ones((1, 40), bool),
           "label": np.zeros((1,), np.int32)}
  shapes = jax.eval_shape(model.init, jax.random.key(0), batch)["params"]
  params = jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), shapes)
  loaded, applied = demo.init_from.apply(c, params, None)
  assert applied == [("hf_bert", path)]
  _, want = bert_checkpoint.from_pretrained(path)
  got = jax.tree_util.tree_flatten_with_path(loaded["encoder"]["bert"])[0]
  assert len(got) >= 16  # Embeddings (5) + one layer (16), all of them checked.
  for keys, value in got:
    expected = want
    for k in keys:
      expected = expected[k.key]
    np.testing.assert_array_equal(np.asarray(value), np.asarray(expected), err_msg=str(keys))
  assert not any(np.any(leaf) for leaf in jax.tree_util.tree_leaves(loaded["encoder"]["textcnn"]))
  assert not any(np.any(leaf) for leaf in jax.tree_util.tree_leaves(loaded["head"]))


@pytest.mark.long
def test_demo_fine_tunes_a_tiny_chunk_bert(tmp_path):
  """run(): the trainer's step with two learning rates, then test accuracy (~20 s of CPU:
  compiling the train step)."""
  demo = _demo()
  path = _tiny_folder(tmp_path, demo)
  c = demo.build(TINY_CHUNK_BERT, path)

  tok = demo.WordPieceTokenizer.from_pretrained(path)
  train = demo.make_data(tok, 4, 40, 30, seed=1)
  row = demo.run("chunk_bert", c, train, demo.make_data(tok, 2, 40, 30, seed=2), steps=2,
                 batch=2, bert_lr=3e-5, head_lr=5e-4, seed=0)
  assert np.isfinite(row["first_loss"]) and len(row["last_losses"]) == 2
  assert row["test_accuracy"] in (0.0, 0.5, 1.0)  # 2 test documents.


@pytest.mark.long
def test_demo_command_line_runs_both_models(tmp_path):
  """main() with its own encoder settings (a 4-layer BERT: ChunkBERT averages 5 states)."""
  demo = _demo()
  path = _tiny_folder(tmp_path, demo, layers=4)
  out = tmp_path / "results.json"
  results = demo.main(["--pretrained", path, "--models", "chunk_bert,bert_first", "--steps", "2",
                       "--batch", "2", "--length", "520", "--signal_start", "512",
                       "--num_train", "4", "--num_test", "2", "--out", str(out)])
  for name in ("chunk_bert", "bert_first"):
    row = results[name]
    assert np.isfinite(row["first_loss"]) and len(row["last_losses"]) == 2
    assert row["test_accuracy"] in (0.0, 0.5, 1.0)  # 2 test documents.
  assert json.loads(out.read_text())["chunk_bert"] == results["chunk_bert"]
