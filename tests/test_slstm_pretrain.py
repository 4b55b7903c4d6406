"""Pretrain -> fine-tune: tiny MLM pretraining of the S-LSTM on the shipped corpus lowers the
loss clearly; fine-tuning from its checkpoint starts from exactly its encoder and trains."""
import json
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from conftest import load_config

from longtext_jax import data as data_lib
from longtext_jax import model as model_lib
from longtext_jax import tasks
from longtext_jax.data.sentencepiece_tokenizer import train_sentencepiece
from longtext_jax.train import loop


def _train_losses(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [r["loss"] for r in map(json.loads, f) if r["split"] == "train"]


def _restore_params(workdir):
  manager = ocp.CheckpointManager(os.path.join(workdir, "checkpoints"),
                                  item_handlers={"state": ocp.StandardCheckpointHandler()},
                                  options=ocp.CheckpointManagerOptions(read_only=True))
  state = manager.restore(manager.latest_step(),
                          args=ocp.args.Composite(state=ocp.args.StandardRestore()))["state"]
  manager.close()
  return state["params"]


def test_pretrain_then_finetune(tmp_path, monkeypatch):
  monkeypatch.setenv("LONGTEXT_JAX_CACHE", str(tmp_path / "cache"))
  spm = str(tmp_path / "spm" / "pydoc.model")
  pt = load_config("slstm/pretrain.py", "tiny")
  pt.data.tokenizer.kind = "sentencepiece"
  pt.data.tokenizer.path = spm  # trained here on the pydoc corpus, reused by fine-tuning
  pt.data.seq_len = pt.model.encoder.max_len = 32
  pt.train.num_steps = 60
  pt.train.eval_every = pt.train.checkpoint_every = 60
  pt.train.log_every = 1  # step 1's loss is that of the initial parameters (no dropout)
  pt.train.async_checkpoint = False
  pt_dir = str(tmp_path / "pretrain")
  after = loop.train_and_evaluate(pt, pt_dir)["loss"]
  losses = _train_losses(pt_dir)
  before = losses[0]  # ~ln(V) = 6.9
  assert after < before - 0.8, (before, after)  # held-out documents
  assert np.mean(losses[-10:]) < before - 0.8, losses
  pretrained = _restore_params(pt_dir)

  ft = load_config("slstm/finetune.py", "pydoc_pairs,tiny")
  ft.init_from.path = pt_dir
  ft.data.tokenizer.kind = "sentencepiece"
  ft.data.tokenizer.path = spm
  ft.data.seq_len = ft.model.encoder.max_len = 32
  ft.data.chunk_words = 12
  ft.data.num_train = 512
  ft.data.num_eval = 128
  ft.train.num_steps = 150
  ft.train.eval_every = ft.train.checkpoint_every = 150
  ft.train.log_every = 25
  ft.train.async_checkpoint = False
  started = {}
  original = loop.init_from_params

  def spy(params, tx, *args):  # traced under jit: record the concrete values when it runs
    jax.debug.callback(lambda p: started.update(params=jax.device_get(p)), params)
    return original(params, tx, *args)

  monkeypatch.setattr(loop, "init_from_params", spy)
  ft_dir = str(tmp_path / "finetune")
  # Another tokenizer than pretraining's (here: one trained on other text) would feed the
  # copied embeddings other tokens' ids: refused before anything is trained or written.
  other = str(tmp_path / "spm" / "other.model")
  train_sentencepiece([f"line {i} of other text, word{i % 37}" for i in range(400)], 200,
                      other[:-len(".model")])
  wrong = ft.copy_and_resolve_references()
  wrong.data.tokenizer.path = other
  with pytest.raises(ValueError, match=r"was trained with the tokenizer .*pydoc.model .*this "
                                       r"run tokenizes with .*other.model"):
    loop.train_and_evaluate(wrong, str(tmp_path / "wrong"))
  assert not os.path.exists(tmp_path / "wrong" / "config.json") and not started
  metrics = loop.train_and_evaluate(ft, ft_dir)
  # The fine-tuning run starts with exactly the pretrained inputs and encoder ...
  for name in ("inputs", "encoder"):
    jax.tree.map(np.testing.assert_array_equal, started["params"][name], pretrained[name])
  # ... and a fresh classification head (the MLM head is not copied).
  assert set(started["params"]["head"]) == {"out"} and "transform" in pretrained["head"]
  # It trains: the encoder moved, the training loss went down.
  finetuned = _restore_params(ft_dir)
  moved = jax.tree.map(lambda a, b: np.abs(np.asarray(a) - np.asarray(b)).max(),
                       finetuned["encoder"], pretrained["encoder"])
  assert max(jax.tree.leaves(moved)) > 0
  losses = _train_losses(ft_dir)
  assert np.mean(losses[-2:]) < losses[0], losses
  assert 0.0 <= metrics["accuracy"] <= 1.0 and "mcc" in metrics

  # A model of another width cannot start from this checkpoint: a clear error.
  bad = load_config("slstm/finetune.py", "pydoc_pairs,tiny")
  bad.init_from.path = pt_dir
  bad.data.tokenizer.kind = "sentencepiece"
  bad.data.tokenizer.path = spm
  bad.model.d_model = 48
  bad.train.num_steps = 1
  with pytest.raises(ValueError, match="shape"):
    loop.train_and_evaluate(bad, str(tmp_path / "bad"))


def test_mlm_config_builds_for_every_bidirectional_encoder(tmp_path, monkeypatch):
  """configs/mlm.py:<encoder>,tiny gives an MLM model with tied [B, L, V] logits."""
  from longtext_jax import encoders
  monkeypatch.setenv("LONGTEXT_JAX_CACHE", str(tmp_path))
  names = [n for n in ("transformer", "slstm", "ran", "star_transformer")
           if n in encoders.ENCODERS]
  for name in names:
    config = load_config("mlm.py", f"{name},tiny")
    task = tasks.get_task(config.task)
    model = model_lib.build_model(config)
    batch = next(data_lib.train_iterator(data_lib.build_splits(config, task)["train"], 4, 0))
    batch = {k: v for k, v in batch.items() if k != "example_id"}
    variables = jax.eval_shape(model.init, jax.random.key(0), batch)
    out = jax.eval_shape(model.apply, variables, batch)
    assert out["logits"].shape == batch["input_ids"].shape + (config.model.vocab_size,)
    assert "decoder" not in variables["params"]["head"]  # tied to the input embedding
    assert config.optim.b2 == 0.98 and config.optim.schedule == "linear"


def test_a_cached_pretraining_tokenizer_is_recorded_in_the_data_info(tmp_path, monkeypatch):
  """With data.tokenizer.path empty the MLM source trains (or reuses) a cached tokenizer;
  the run's data info names that file, so a fine-tuning run can be checked against it."""
  monkeypatch.setenv("LONGTEXT_JAX_CACHE", str(tmp_path / "cache"))
  pt = load_config("slstm/pretrain.py", "tiny")
  pt.data.tokenizer.kind, pt.data.tokenizer.path = "sentencepiece", ""
  splits = data_lib.build_splits(pt, tasks.get_task(pt.task))
  info = data_lib.data_info(splits, pt.data.tokenizer)["tokenizer"]
  assert info["path"].startswith(str(tmp_path / "cache")) and os.path.isfile(info["path"])
  assert info["vocab_size"] == splits["train"].tokenizer_info["vocab_size"] > 5
