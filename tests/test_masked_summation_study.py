"""The masked-summation study: a tiny run beats the k/2 guess by a wide margin; the trainer
runs the Star-Transformer config."""
import importlib.util
import json
import os
import sys

import jax
import numpy as np

from conftest import load_config
from longtext_jax import train

_PATH = os.path.join(os.path.dirname(__file__), "..", "experiments", "masked_summation.py")
_spec = importlib.util.spec_from_file_location("msum_study", _PATH)
study = importlib.util.module_from_spec(_spec)
sys.modules["msum_study"] = study  # dataclasses look their module up here
_spec.loader.exec_module(study)


def test_tiny_star_run_beats_k_over_2_guess_by_wide_margin(tmp_path):
  s = study.Setting(num_train=512, num_test=256, steps=150, batch_size=32, d_model=32,
                    num_heads=4, learning_rate=3e-3, k=3, d=4, eval_batch_size=256)
  result = study.run_one("star", 16, s, seed=0)
  guess = study.guess_mse(s.k)
  assert guess == 0.25
  assert result["test_mse"] < 0.3 * guess, result  # observed ~0.02
  study.write_docs([result], s, [["--test"]], str(tmp_path), 1.0)
  table = (tmp_path / "masked_summation.md").read_text()
  assert f"{result['test_mse']:.4f}" in table
  saved = json.loads((tmp_path / "masked_summation_results.json").read_text())
  assert saved["results"][0]["model"] == "star"
  assert (tmp_path / "masked_summation_mse.png").exists()


def test_trainer_runs_star_masked_summation_config(tmp_path):
  """The trainer learns the task with the Star-Transformer config (ablation without ring):
  the training loss falls tenfold and, after 20 steps, the eval MSE beats the k/2 guess."""
  config = load_config("star/masked_summation.py", "star_no_ring,tiny")
  assert config.model.encoder.name == "star_transformer" and not config.model.encoder.ring
  config.unlock()
  config.train.progress_bar = False
  config.train.num_steps = 20
  config.train.eval_every = 20
  config.train.log_every = 5
  final = train.train_and_evaluate(config, str(tmp_path))
  with open(tmp_path / "metrics.jsonl") as f:
    rows = [json.loads(line) for line in f]
  losses = [r["loss"] for r in rows if r["split"] == "train"]
  assert len(losses) == 4 and losses[-1] < 0.1 * losses[0], losses  # observed 3.2 -> 0.21
  assert final["mse"] < study.guess_mse(config.data.num_masked), final  # observed 0.197
  assert [r["mse"] for r in rows if r["split"] == "eval"] == [final["mse"]]
