"""The reproduction studies (docs/reproduction.md): their configs, the early-stopped training
through the trainer, the test split, the best checkpoint's test metrics, and the --tiny path
of every study script."""
import copy
import json
import os
import re
import shutil
import signal
import sys
import tarfile

import jax
import numpy as np
import pytest

from conftest import load_config, load_script
from longtext_jax import fileio, train
from longtext_jax.train import loop

_EXP = os.path.join(os.path.dirname(__file__), "..", "experiments")
sys.path.insert(0, _EXP)


def _script(name):
  return load_script(f"experiments/{name}.py")


study_lib = _script("study_lib")


# --------------------------------------------------------------------------------------------
# Configs.


def test_masked_summation_paper_setting_is_table_1():
  """'paper': 10k/10k, H=100, 10 heads x 10, Adam at a constant rate, best dev MSE kept;
  the Star variants are the authors' encoder with exactly one connection type removed."""
  c = load_config("masked_summation.py", "star,paper,n=400")
  assert (c.data.num_train, c.data.num_eval, c.model.d_model) == (10_000, 10_000, 100)
  enc = c.model.encoder
  assert (enc.num_heads, enc.head_dim, enc.max_len) == (10, 10, 400)
  assert c.data.seq_len == 400 and c.data.num_masked == 10 and c.data.feature_dim == 10
  assert (enc.ordering, enc.ends, enc.pooling) == ("official", "zero", "relay_max_mean")
  assert c.optim.schedule == "constant" and c.optim.weight_decay == 0.0
  assert (c.train.best_metric, c.train.best_mode) == ("mse", "min")
  assert c.train.checkpoint_every == c.train.eval_every == 10_000 // c.data.batch_size
  for variant, field in (("star_no_radial", "radial"), ("star_no_ring", "ring")):
    other = load_config("masked_summation.py", f"{variant},paper,n=400").model.encoder
    diff = {k for k in enc if enc[k] != other[k]}
    assert diff == {field} and other[field] is False, diff
  for model in ("transformer", "ran"):
    other = load_config("masked_summation.py", f"{model},paper").model.encoder
    assert (other.num_heads, other.head_dim) == (10, 10)
  # Without 'paper' a registered encoder keeps its tuned default setting.
  assert load_config("masked_summation.py", "transformer").model.d_model == 64
  with pytest.raises(ValueError, match="n='x' is not an integer"):
    load_config("masked_summation.py", "star,paper,n=x")
  with pytest.raises(ValueError, match="star_no_radial"):
    load_config("masked_summation.py", "star_no_rng,paper")


def test_listops_study_models_share_one_budget():
  """The reduced ListOps study trains every model on the same data, batch, steps and
  optimiser at the same width; only the encoder (and RAN's padding multiple) differs."""
  configs = {m: load_config("listops.py", f"{m},reduced") for m in
             ("transformer", "ran", "star", "slstm")}
  names = {m: c.model.encoder.name for m, c in configs.items()}
  assert names == {"transformer": "transformer", "ran": "ran", "star": "star_transformer",
                   "slstm": "slstm"}
  base = configs["transformer"]
  for m, c in configs.items():
    for section in ("optim", "train", "task"):
      assert c[section].to_dict() == base[section].to_dict(), (m, section)
    data = {k: v for k, v in c.data.to_dict().items() if k != "pad_multiple"}
    assert data == {k: v for k, v in base.data.to_dict().items() if k != "pad_multiple"}, m
    assert c.model.d_model == 128 and c.data.seq_len == 500
  assert configs["ran"].data.pad_multiple == configs["ran"].model.encoder.window_size == 128


@pytest.mark.parametrize("size", ["tiny", "reduced", "full"])
@pytest.mark.parametrize("model", ["transformer", "ran", "star", "slstm"])
def test_listops_position_tables_cover_padded_batches(model, size):
  """Batches are padded to a multiple of data.pad_multiple, so an encoder with a learned
  position table needs max_len >= seq_len rounded up to it (the reduced and full Star and
  S-LSTM configs had max_len = seq_len: 500 < 512 and 2000 < 2048, a crash at step 1 that
  the tiny size, 64 = 4 x 16, did not show)."""
  c = load_config("listops.py", model if size == "full" else f"{model},{size}")
  padded = -(-c.data.seq_len // c.data.pad_multiple) * c.data.pad_multiple
  if "max_len" in c.model.encoder:
    assert c.model.encoder.max_len >= padded, (c.model.encoder.max_len, padded)


@pytest.mark.parametrize("ablation,fields", [
    ("mean_pool", {"pooling": "mean"}), ("no_residual", {"gpc_residual": "none"}),
    ("no_rotary", {"use_rotary": False}), ("no_review", {"memory_review": False})])
def test_ran_ablation_changes_exactly_its_switch(ablation, fields):
  full = load_config("ran/ablations.py", "full,last_window")
  other = load_config("ran/ablations.py", f"{ablation},last_window")
  assert other.to_dict()["data"] == full.to_dict()["data"]
  diff = {k: other.model.encoder[k] for k in full.model.encoder
          if full.model.encoder[k] != other.model.encoder[k]}
  assert diff == fields


# --------------------------------------------------------------------------------------------
# study_lib: early stopping, test split, best-checkpoint evaluation.


def _tiny_msum(steps_per_eval=5, lr=3e-3):
  c = load_config("masked_summation.py", "lstm,tiny,paper,n=12")
  c.train.eval_every = c.train.checkpoint_every = steps_per_eval
  c.train.log_every = steps_per_eval
  c.train.num_steps = 100
  c.train.progress_bar = False
  c.train.async_checkpoint = False
  c.optim.warmup_steps = 0
  c.optim.learning_rate = lr
  c.data.num_eval = 32
  return c


def test_early_stopping_stops_after_patience_and_resumes_without_training(tmp_path,
                                                                         monkeypatch):
  """At learning rate 0 the dev MSE never improves on the first evaluation: training stops
  after `patience` more evaluations; the best step reported is the checkpoint the trainer
  kept (of tied evaluations, the newest); a second call trains nothing and reports the
  same."""
  c = _tiny_msum(lr=0.0)
  out = study_lib.train_early_stopped(c, str(tmp_path), patience=2, log=lambda m: None)
  assert out["early_stopped"] and out["best_step"] == 15 and out["stopped_step"] == 15, out
  assert os.listdir(tmp_path / "best") == ["15"]
  assert [r["step"] for r in out["eval_history"]] == [5, 10, 15]
  assert study_lib.latest_checkpoint_step(str(tmp_path)) == 15
  monkeypatch.setattr(loop, "train_and_evaluate",
                      lambda *a: (_ for _ in ()).throw(AssertionError("trained again")))
  again = study_lib.train_early_stopped(c, str(tmp_path), patience=2, log=lambda m: None)
  assert {k: again[k] for k in ("best_step", "stopped_step", "best_dev")} == {
      k: out[k] for k in ("best_step", "stopped_step", "best_dev")}


@pytest.mark.parametrize("signum,status", [(signal.SIGTERM, 0), (signal.SIGINT, 130)],
                         ids=["sigterm", "ctrl_c"])
def test_sigterm_ends_an_early_stopping_study_not_just_its_chunk(tmp_path, monkeypatch,
                                                                 capsys, signum, status):
  """SIGTERM (or Ctrl-C) in step 3 of the first chunk: the trainer saves step 3 and the
  study stops with one line (exit status 0; 130 for Ctrl-C, which ended in a
  KeyboardInterrupt traceback) instead of training the next chunk; rerunning resumes from
  step 3."""
  previous_sigint = signal.signal(signal.SIGINT, signal.default_int_handler)  # A terminal's.
  c = _tiny_msum()
  c.train.num_steps = 10
  compile_steps = loop.compile_steps
  seen = []

  def compile_and_signal_in_step_3(run, spec):
    train_step, eval_step = compile_steps(run, spec)

    def step(state, *args):
      seen.append(int(jax.device_get(state.step)) + 1)
      if seen[-1] == 3:
        os.kill(os.getpid(), signum)
      return train_step(state, *args)
    return step, eval_step

  monkeypatch.setattr(loop, "compile_steps", compile_and_signal_in_step_3)
  try:
    with pytest.raises(study_lib.Preempted) as stopped:
      study_lib.train_early_stopped(c, str(tmp_path), patience=50, log=lambda m: None)
  finally:
    signal.signal(signal.SIGINT, previous_sigint)
  assert stopped.value.code == status and seen == [1, 2, 3]
  label = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C (SIGINT)"
  assert f"{label}: {tmp_path} saved at step 3; rerun the same command" in (
      capsys.readouterr().err)
  assert study_lib.latest_checkpoint_step(str(tmp_path)) == 3
  first = study_lib.read_clock(str(tmp_path))
  assert first["train_s_calls"] == 1 and first["train_s"] > 0, first
  monkeypatch.setattr(loop, "compile_steps", compile_steps)
  out = study_lib.train_early_stopped(c, str(tmp_path), patience=50, log=lambda m: None)
  assert [r["step"] for r in out["eval_history"]] == [5, 10]
  # The training time reported covers the preempted call too: its chunk plus this call's
  # two chunks (3 -> 5, 5 -> 10), each of which this call's own clock contains.
  assert study_lib.read_clock(str(tmp_path))["train_s_calls"] == 3
  assert first["train_s"] < out["train_s_total"] <= first["train_s"] + out["train_s"]


def test_a_killed_call_counts_up_to_its_last_saved_progress(tmp_path):
  """A call that died without its ``finally`` (SIGKILL) left its open record: the next call
  adds the killed call's seconds up to the workdir's newest metrics line or checkpoint
  (not the lost time after it); the record of a call still running is left alone."""
  import socket
  import subprocess
  import time
  workdir = str(tmp_path)
  dead = subprocess.Popen(["true"])
  dead.wait()
  now = time.time()
  with open(os.path.join(workdir, study_lib.CLOCK_FILE), "w") as f:
    json.dump({"train_s": 10.0, "train_s_calls": 1, "train_s_open": {
        "start": now - 100, "pid": dead.pid, "host": socket.gethostname()}}, f)
  os.makedirs(os.path.join(workdir, "checkpoints", "30"))
  os.utime(os.path.join(workdir, "checkpoints", "30"), (now - 40, now - 40))
  os.utime(os.path.join(workdir, "checkpoints"), (now - 45, now - 45))
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    f.write("{}\n")
  os.utime(os.path.join(workdir, "metrics.jsonl"), (now - 50, now - 50))
  assert study_lib.open_clock(workdir, "train_s") == pytest.approx(60, abs=1)
  clock = study_lib.read_clock(workdir)
  assert clock["train_s"] == pytest.approx(70, abs=1)
  assert clock["train_s_calls"] == 2 and clock["train_s_killed_calls"] == 1
  assert clock["train_s_open"]["pid"] == os.getpid()
  # A second launch while this one runs (the trainer refuses it): the record stays ours.
  other = subprocess.Popen([sys.executable, "-c", "import sys, os; sys.path.insert(0, "
                            f"{os.path.dirname(study_lib.__file__)!r}); import study_lib; "
                            f"study_lib.open_clock({workdir!r}, 'train_s'); "
                            f"study_lib.add_clock({workdir!r}, 'train_s', 1.0)"])
  assert other.wait() == 0
  clock = study_lib.read_clock(workdir)
  assert clock["train_s_open"]["pid"] == os.getpid() and clock["train_s_calls"] == 3
  study_lib.add_clock(workdir, "train_s", 5.0)
  clock = study_lib.read_clock(workdir)
  assert "train_s_open" not in clock and clock["train_s"] == pytest.approx(76, abs=1)


def test_chunked_training_equals_one_run_and_best_checkpoint_is_tested(tmp_path):
  """Two early-stopping chunks give the dev MSE of one uninterrupted trainer run; the best
  checkpoint evaluated on the dev split reproduces the best dev MSE; the test split shares
  no example with the train and dev splits."""
  c = _tiny_msum()
  c.train.num_steps = 10
  chunked = study_lib.train_early_stopped(c, str(tmp_path / "a"), patience=50,
                                          log=lambda m: None)
  assert [r["step"] for r in chunked["eval_history"]] == [5, 10]
  whole = train.train_and_evaluate(c, str(tmp_path / "b"))
  assert chunked["eval_history"][-1]["mse"] == pytest.approx(whole["mse"], rel=1e-6)
  run = loop.make_run(c, str(tmp_path / "a"))
  splits = loop.build_data(c, run.task)
  tested = study_lib.evaluate_best(c, str(tmp_path / "a"), splits["eval"], time_repeats=1)
  assert tested["test"]["mse"] == pytest.approx(chunked["best_dev"], rel=1e-5)
  assert tested["infer_ms_per_batch"] > 0 and tested["num_params"] > 0
  test = study_lib.test_split(c, 16)
  assert len(test) == 16
  seen = {np.asarray(s.arrays["features"][i]).tobytes()
          for s in (splits["train"], splits["eval"]) for i in range(len(s))}
  assert not any(test.arrays["features"][i].tobytes() in seen for i in range(16))


def test_a_run_killed_after_a_checkpoint_between_evaluations_resumes_there_exactly(
    tmp_path, monkeypatch):
  """Checkpoints between two dev evaluations (the studies' ``--checkpoints_per_epoch`` /
  ``--checkpoints_per_eval``, study_lib.checkpoint_every): a study run
  killed right after one (no SIGTERM, nothing saved on the way out) resumes from it, not
  from the evaluation before, and ends with the dev history of an uninterrupted run."""
  from longtext_jax.train import checkpointing  # pylint: disable=import-outside-toplevel
  c = _tiny_msum(steps_per_eval=6)
  c.train.checkpoint_every = study_lib.checkpoint_every(6, 2)
  c.train.num_steps = 12
  assert c.train.checkpoint_every == 3
  for bad in (0, 4, 7):
    with pytest.raises(ValueError, match="positive divisor"):
      study_lib.checkpoint_every(6, bad)

  class Killed(Exception):
    pass

  save = checkpointing.Checkpointer.save

  def save_then_die(self, step, *args, **kwargs):
    save(self, step, *args, **kwargs)
    if step == 9:  # Between the evaluations at 6 and 12.
      raise Killed

  monkeypatch.setattr(checkpointing.Checkpointer, "save", save_then_die)
  with pytest.raises(Killed):
    study_lib.train_early_stopped(c, str(tmp_path / "a"), patience=50, log=lambda m: None)
  monkeypatch.undo()
  assert study_lib.latest_checkpoint_step(str(tmp_path / "a")) == 9
  chunks = []
  resumed = study_lib.train_early_stopped(c, str(tmp_path / "a"), patience=50,
                                          log=chunks.append)
  assert chunks == ["  train a: steps 9 -> 12"]  # Not 6 -> 12: the kill lost no step.
  whole = study_lib.train_early_stopped(c, str(tmp_path / "b"), patience=50,
                                        log=lambda m: None)
  assert [r["step"] for r in resumed["eval_history"]] == [
      r["step"] for r in whole["eval_history"]] == [6, 12]
  for got, want in zip(resumed["eval_history"], whole["eval_history"]):
    assert got["mse"] == pytest.approx(want["mse"], rel=1e-6)
  c.train.checkpoint_every = 4  # Not a divisor of eval_every: an evaluation off a checkpoint.
  with pytest.raises(ValueError, match="must divide"):
    study_lib.train_early_stopped(c, str(tmp_path / "c"), patience=50, log=lambda m: None)


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
  assert final["mse"] < config.data.num_masked / 12, final  # observed 0.197
  assert [r["mse"] for r in rows if r["split"] == "eval"] == [final["mse"]]


# --------------------------------------------------------------------------------------------
# The study scripts' --tiny paths.


def test_masked_summation_study_tiny_learns_writes_docs_and_resumes(tmp_path, monkeypatch,
                                                                   capsys):
  study = _script("masked_summation")
  args = ["--tiny", "--models", "star", "--lengths", "12", "--seeds", "0", "--max_epochs", "1",
          "--workdir", str(tmp_path / "runs"), "--out_dir", str(tmp_path / "docs")]
  (tmp_path / "docs").mkdir()
  (tmp_path / "docs" / "masked_summation.md").write_text("# Kept\n\nhand-written\n")
  begin, end = study.SUMMARY  # docs/reproduction.md's summary table, beside the rest.
  (tmp_path / "docs" / "reproduction.md").write_text(f"# R\n\n{begin}\n| stale |\n{end}\n\nEnd.\n")
  rows = study.main(args)
  summary = (tmp_path / "docs" / "reproduction.md").read_text()
  assert summary.startswith(f"# R\n\n{begin}\n") and summary.endswith(f"\n{end}\n\nEnd.\n")
  assert "| stale |" not in summary and "(1 finished runs)" in summary
  assert f"| Star-Transformer | 0.0284 | {rows[0]['test']['mse']:.4f} (1) (test 16) |" in summary
  assert len(rows) == 1 and rows[0]["model"] == "star" and rows[0]["n"] == 12
  assert rows[0]["test"]["mse"] < study.guess_mse(3), rows  # k=3: guess 0.25
  text = (tmp_path / "docs" / "masked_summation.md").read_text()
  assert text.startswith("# Kept\n\nhand-written\n") and study.BEGIN in text
  assert f"{rows[0]['test']['mse']:.4f} (test 16)" in text  # Fewer than 10k: marked.
  assert rows[0]["num_test"] == 16
  r = rows[0]  # One call trained and tested it: the total is this call's training + test.
  assert r["wall_s_total"] == pytest.approx(r["train_s_total"] + r["test_s"])
  assert r["train_s_total"] <= r["train_s"] and r["wall_s_total"] <= r["wall_s"]
  assert "(last call only)" not in text
  assert f"host CPU of the runs: {r['host']}; {r['allocator']} (1 run)." in text and r["host"]
  assert "| star | 1 (1) |" in text  # Epochs run (best epoch): the one epoch of --max_epochs 1.
  command = "python experiments/masked_summation.py " + " ".join(args[:-2])  # No --out_dir.
  assert study.recorded_command(args[:-2] + [f"--out_dir={tmp_path}"]) == command
  assert r["command"] == command and f"| `{command}` | star n=12 s0 |" in text
  older = {k: v for k, v in r.items() if k != "command"}  # A run from before commands.
  assert study.commands_table([older])[2].startswith("| not recorded")
  for name in ("mse", "time", "curves"):
    assert (tmp_path / "docs" / f"masked_summation_{name}.png").stat().st_size > 0
  # A run moved to another folder mid-training (a GPU queue's unfinished.tgz untarred on
  # another machine: a checkpoint, no result.json) resumes there from its step: a second
  # epoch trains steps 31-60 once, after the first call's 1-30.
  with tarfile.open(tmp_path / "unfinished.tgz", "w:gz") as tar:
    tar.add(tmp_path / "runs" / "star_n12_s0", arcname="star_n12_s0",
            filter=lambda info: None if info.name.endswith("result.json") else info)
  with tarfile.open(tmp_path / "unfinished.tgz") as tar:
    tar.extractall(tmp_path / "moved", filter="data")
  (tmp_path / "moved_docs").mkdir()
  moved_args = args[:-4] + ["--workdir", str(tmp_path / "moved"), "--out_dir",
                            str(tmp_path / "moved_docs")]
  moved_args[moved_args.index("--max_epochs") + 1] = "2"
  moved_args += ["--checkpoints_per_epoch", "3"]  # Its second epoch checkpoints at 40, 50, 60.
  capsys.readouterr()
  study.main(moved_args)
  said = capsys.readouterr().out
  assert "train star_n12_s0: steps 30 -> 60" in said and "steps 0 ->" not in said, said
  saved = json.loads((tmp_path / "moved" / "star_n12_s0" / "config.json").read_text())
  assert saved["train"]["checkpoint_every"] == 10 and saved["train"]["eval_every"] == 30
  with pytest.raises(SystemExit):  # 30 steps an epoch: 7 checkpoints do not divide it.
    study.main(moved_args[:-1] + ["7"])
  assert "--checkpoints_per_epoch: 7 checkpoints per evaluation: must be a positive divisor " \
      "of the 30 steps" in capsys.readouterr().err
  with open(tmp_path / "moved" / "star_n12_s0" / "metrics.jsonl", encoding="utf-8") as f:
    steps = [r["step"] for r in map(json.loads, f) if r["split"] == "train"]
  assert steps == sorted(set(steps)) and steps[0] <= 30 < steps[-1] == 60, steps
  # Resumable: a second run reads result.json and trains nothing.
  monkeypatch.setattr(loop, "train_and_evaluate",
                      lambda *a: (_ for _ in ()).throw(AssertionError("trained again")))
  assert study.main(args)[0]["test"] == rows[0]["test"]
  assert text == (tmp_path / "docs" / "masked_summation.md").read_text()
  # A lost workdir: --restore rebuilds the finished runs from the docs' results JSON, so
  # nothing is trained again and the docs are unchanged.
  shutil.rmtree(tmp_path / "runs")
  assert study.main(args + ["--restore"]) == rows
  assert text == (tmp_path / "docs" / "masked_summation.md").read_text().replace(
      " --restore", "")  # The same tables; only the command line differs.
  # A run folder without result.json (being resumed to train on) is not given the old one.
  (tmp_path / "runs" / "star_n12_s0" / "result.json").unlink()
  assert study.restore(str(tmp_path / "docs" / "masked_summation_results.json"),
                       str(tmp_path / "runs")) == []
  assert not (tmp_path / "runs" / "star_n12_s0" / "result.json").exists()
  with pytest.raises(FileNotFoundError, match="--restore"):  # Nothing to restore from.
    study.main(args[:-2] + ["--out_dir", str(tmp_path / "no_docs"), "--restore"])
  # A fresh workdir (a new clone, another machine) adds to the docs, never drops from them:
  # its redraw keeps the recorded run in the results, the tables and the summary.
  fresh = ["--tiny", "--docs_only", "--workdir", str(tmp_path / "fresh"), "--out_dir"]
  assert [r["test"] for r in study.main(fresh + [str(tmp_path / "docs")])] == [rows[0]["test"]]
  saved = json.loads((tmp_path / "docs" / "masked_summation_results.json").read_text())
  assert [(r["model"], r["n"], r["seed"]) for r in saved["runs"]] == [("star", 12, 0)]
  assert f"{rows[0]['test']['mse']:.4f} (test 16)" in (
      tmp_path / "docs" / "masked_summation.md").read_text()
  assert summary == (tmp_path / "docs" / "reproduction.md").read_text()
  assert study.main(fresh + [str(tmp_path / "none")]) == []  # Nothing anywhere: no drawing.
  assert not (tmp_path / "none").exists()


def test_masked_summation_patience_defaults_per_model_and_flag_overrides(tmp_path,
                                                                         monkeypatch):
  """The LSTMs get a patience longer than their initial plateau (12 epochs at n=400) unless
  --patience is given; the other models keep 5."""
  study = _script("masked_summation")
  seen = {}

  def fake_train_and_test(config, workdir, patience, num_test, command):
    del config, num_test, command
    seen[os.path.basename(workdir)] = patience
    raise StopIteration  # Nothing to train: only the patience passed is looked at.

  monkeypatch.setattr(study.study_lib, "train_and_test", fake_train_and_test)
  base = ["--tiny", "--lengths", "12", "--seeds", "0", "--workdir", str(tmp_path)]
  for model, flag, want in [("lstm", [], 30), ("bilstm", [], 30), ("star", [], 5),
                            ("ran", [], 5), ("lstm", ["--patience", "3"], 3)]:
    with pytest.raises(StopIteration):
      study.main(base + ["--models", model] + flag)
    assert seen.pop(f"{model}_n12_s0") == want, (model, flag)


def test_masked_summation_summary_in_the_docs_is_the_results_files():
  """docs/reproduction.md's at-a-glance table is the one docs/masked_summation_results.json
  gives (a results change without `--docs_only` fails here); a lone seed is marked (1) and a
  cell without a run says so."""
  study = _script("masked_summation")
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with open(os.path.join(repo, "docs", "masked_summation_results.json")) as f:
    rows = json.load(f)["runs"]
  with open(os.path.join(repo, "docs", "reproduction.md")) as f:
    shown = f.read()
  shown = shown[shown.index(study.SUMMARY[0]):shown.index(study.SUMMARY[1])]
  table = study.summary_table(rows)
  assert len(table) == 2 + len({r["model"] for r in rows})
  assert all(line in shown for line in table) and f"({len(rows)} finished runs)" in shown
  one = [dict(r, seed=s) for r, s in ((rows[0], 0), (rows[0], 1))] + [
      dict(rows[0], model="ran", n=rows[0]["n"] * 2)]
  mse = rows[0]["test"]["mse"]
  assert study.summary_table(one)[2:] == [
      f"| {study.NAMES[rows[0]['model']]} | {study.PAPER_N200.get(rows[0]['model'], '-')} | "
      f"{mse:.4f} ± 0.0000 (2) | not run |",
      f"| RAN (not in the paper) | - | not run | {mse:.4f} (1) |"]


@pytest.mark.parametrize("script,tiny,full,writer,name", [
    ("masked_summation", ["--tiny", "--models", "star", "--lengths", "12", "--seeds", "0"],
     ["--full", "--models", "star", "--lengths", "12", "--seeds", "0"], "write_docs",
     "masked_summation"),
    ("listops_study", ["--tiny", "--models", "star"], ["--reduced", "--models", "star"],
     "write_rows", "listops"),
    ("ran_ablations", ["--tiny", "--tasks", "last_window", "--ablations", "full", "--seeds",
                       "0"], ["--tasks", "last_window", "--ablations", "full", "--seeds", "0"],
     "write_rows", "ran_ablations")])
def test_a_tiny_study_writes_nothing_into_the_docs_by_default(script, tiny, full, writer,
                                                               name, tmp_path, monkeypatch):
  """A --tiny call that forgets its --out / --out_dir must not merge seconds-long runs into
  the docs' results, nor leave them among the paper-setting runs (where a later full call
  would skip them as finished): --tiny defaults to runs/<study>_tiny/, the full sizes keep
  runs/<study>/ and docs/; a full call with its own --out leaves the docs alone."""
  study = _script(script)
  seen = []

  def fake_train_and_test(config, workdir, *args, **kwargs):
    del config, args, kwargs
    seen.append(workdir)
    return {"test": {"mse": 0.0, "accuracy": 0.0}, "best_step": 0, "wall_s": 0.0}

  monkeypatch.setattr(study, "ROOT", str(tmp_path))
  monkeypatch.setattr(study.study_lib, "train_and_test", fake_train_and_test)
  monkeypatch.setattr(study, writer, lambda *a: seen.append(
      a[1] if writer == "write_docs" else a[0]) or [])
  if hasattr(study, "write_summary"):  # ListOps: docs/reproduction.md's summary table.
    monkeypatch.setattr(study, "write_summary", lambda *a: seen.append(a[0]))
  study.main(tiny)
  assert seen and all(p.startswith(str(tmp_path / "runs" / f"{name}_tiny")) for p in seen), seen
  seen.clear()
  study.main(full)
  assert seen[0].startswith(str(tmp_path / "runs" / name) + os.sep), seen
  assert all(p.startswith(str(tmp_path / "docs")) for p in seen[1:]) and len(seen) > 1, seen
  assert not (tmp_path / "docs").exists()
  if writer == "write_docs":  # Drawn once after the run it trained, not again at the end;
    assert len(seen) == 2, seen  # a call that trains nothing draws once, at the end.
    run = seen[0]
    os.makedirs(run)
    with open(os.path.join(run, "result.json"), "w") as f:
      json.dump({}, f)
    seen.clear()
    study.main(full)  # The stand-in trainer is called (the real one reads result.json).
    assert seen == [run, str(tmp_path / "docs")], seen
  seen.clear()  # Results sent elsewhere: nothing of the docs is rewritten from them.
  study.main(full + ["--out_dir" if script == "masked_summation" else "--out",
                     str(tmp_path / "elsewhere")])
  assert len(seen) > 1 and not any(p.startswith(str(tmp_path / "docs")) for p in seen), seen


def test_masked_summation_epoch_caps_per_model(tmp_path, monkeypatch):
  """--max_epochs: one cap for all, 'cpu' (12, the LSTMs 30), or per model with a default;
  malformed or unknown entries are refused before anything trains."""
  study = _script("masked_summation")
  seen = {}

  def fake_train_and_test(config, workdir, patience, num_test, command):
    del patience, num_test, command
    seen[os.path.basename(workdir)] = config.train.num_steps // config.train.eval_every
    return {"test": {"mse": 0.0}, "best_step": 0}

  monkeypatch.setattr(study.study_lib, "train_and_test", fake_train_and_test)
  monkeypatch.setattr(study, "write_docs", lambda *a, **k: None)
  base = ["--tiny", "--lengths", "12", "--seeds", "0", "--workdir", str(tmp_path),
          "--models", "lstm,bilstm,star,ran"]
  config_cap = study.run_config("star", 12, 0, True).train.num_steps // (
      study.run_config("star", 12, 0, True).train.eval_every)
  for flag, want in [("0", [config_cap] * 4), ("7", [7] * 4), ("cpu", [30, 30, 12, 12]),
                     ("ran=3,5", [5, 5, 5, 3]), ("lstm=9", [9] + [config_cap] * 3)]:
    study.main(base + ["--max_epochs", flag])
    got = [seen.pop(f"{m}_n12_s0") for m in ("lstm", "bilstm", "star", "ran")]
    assert got == want, flag
  for bad in ["x", "lstm=", "=3", "3,4", "gru=3", "lstm=-1"]:
    with pytest.raises(SystemExit):
      study.main(base + ["--max_epochs", bad])
    assert not seen, bad


@pytest.mark.long
def test_listops_study_tiny_trains_tests_and_saves(tmp_path):
  listops = _script("listops_study")
  rows = listops.main(["--tiny", "--models", "star", "--steps", "4", "--workdir",
                       str(tmp_path / "lo"), "--out", str(tmp_path / "lo.json")])
  saved = json.loads((tmp_path / "lo.json").read_text())
  assert saved["runs"][0]["test"] == rows[0]["test"] and 0 <= rows[0]["test"]["accuracy"] <= 1
  assert rows[0]["best_step"] == 4 and rows[0]["eval_batch_size"] == 32
  assert rows[0]["command"] == saved["command"]  # Each run records the call that finished it.


@pytest.mark.long
def test_listops_study_tiny_self_pretrains_then_fine_tunes(tmp_path):
  """The real pretraining and warm start of --pretrain_steps; once the classification run has
  its result, a rerun reads it back even with the pretraining folder gone."""
  listops = _script("listops_study")
  args = ["--tiny", "--models", "star", "--steps", "4", "--pretrain_steps", "4", "--workdir",
          str(tmp_path / "lo"), "--out", str(tmp_path / "lo.json")]
  rows = listops.main(args)
  assert rows[0]["pretrain"]["steps"] == 4 and rows[0]["pretrain"]["best_step"] == 4
  assert np.isfinite(rows[0]["pretrain"]["best_dev_loss"]) and rows[0]["best_step"] == 4
  shutil.rmtree(tmp_path / "lo" / "tiny_star_s0_spt4_pretrain")
  assert listops.main(args) == rows
  assert not (tmp_path / "lo" / "tiny_star_s0_spt4_pretrain").exists()


def test_listops_summary_between_the_markers_is_the_results_files(tmp_path):
  """--docs / --docs_only: the ListOps table of docs/reproduction.md is the one its results
  file gives (sample sd over seeds, one seed marked, a cell with a run tested on fewer
  expressions than the default marked with the fewest, tiny rows left out), the rest of the
  document is kept, and a document without the markers is refused, not appended to."""
  lo = _script("listops_study")
  results = tmp_path / "lo.json"
  rows = [{"model": m, "seed": s, "size": z, "test": {"accuracy": a}}
          for m, s, z, a in (("ran", 0, "reduced", 0.30), ("ran", 1, "reduced", 0.32),
                             ("star", 0, "full", 0.40), ("star", 0, "tiny", 0.9))]
  rows[0]["num_test"] = lo.NUM_TEST  # recorded, the default; rows[1] unrecorded (old runs)
  rows[2]["num_test"] = 500
  lo.write_rows(str(results), rows, "python experiments/listops_study.py --reduced")
  begin, end = lo.SUMMARY
  doc = tmp_path / "doc.md"
  doc.write_text(f"# A\n\n{begin}\n| stale |\n{end}\nB\n")
  assert lo.main(["--docs_only", "--out", str(results), "--docs", str(doc)]) == []
  text = doc.read_text()
  assert text.startswith(f"# A\n\n{begin}\n") and text.endswith(f"\n{end}\nB\n")
  assert "| stale |" not in text and "(3 finished runs)" in text
  assert "| RAN (authors' encoder) | goal >= 40% | 31.00 ± 1.41% (2) | not run |" in text
  assert "| Star-Transformer (authors' encoder) | - | not run | 40.00% (1) (test 500) |" in text
  assert "| Transformer (4 layers, rotary) | 36.4% (LRA) | not run | not run |" in text
  bare = tmp_path / "bare.md"
  bare.write_text("# No markers\n")
  with pytest.raises(ValueError, match=f"{bare}: no ListOps summary markers"):
    lo.main(["--docs_only", "--out", str(results), "--docs", str(bare)])
  assert bare.read_text() == "# No markers\n"
  # The table of docs/reproduction.md is the one docs/reproduction/listops.json gives.
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with open(os.path.join(repo, "docs", "reproduction", "listops.json")) as f:
    saved = json.load(f)["runs"]
  with open(os.path.join(repo, "docs", "reproduction.md")) as f:
    shown = f.read()
  shown = shown[shown.index(begin):shown.index(end)]
  assert all(line in shown for line in lo.summary_table(saved))
  assert f"({sum(r['size'] != 'tiny' for r in saved)} finished runs)" in shown


def test_listops_self_pretraining_runs_first_and_is_its_own_row(tmp_path, monkeypatch):
  """--pretrain_steps N: each model first trains N masked-LM steps on the same training
  expressions (configs/listops.py:<model>,<size>,mlm: same data, model and optimiser, task
  mlm) in <run>_pretrain, and the classification run (its own folder, the others' budget)
  starts from it (config.init_from); its row carries pretrain_steps and the pretraining's
  dev loss, is merged beside the from-scratch row of the same model and seed, and is a row
  of its own in the summary; a negative N is refused before anything runs; a second call
  reads both finished runs back and trains nothing (the pretraining's summary is stored in
  the classification run's result, so its folder is not needed again)."""
  lo = _script("listops_study")
  calls = []

  def fake_early_stopped(config, workdir, patience, log=print):
    del log
    calls.append((config.task.name, workdir, config))
    assert patience == 0
    if config.task.name == "mlm":
      return {"best_step": 6, "best_dev": 1.5, "train_s_total": 9.0,
              "eval_history": [{"step": 4, "loss": 2.0}, {"step": 6, "loss": 1.5}]}
    return {"best_step": 4, "best_dev": 0.4, "train_s_total": 1.0, "eval_history": []}

  def fake_evaluate_best(config, workdir, test, *args, **kwargs):
    del config, workdir, test, args, kwargs
    return {"test": {"accuracy": 0.41}}

  monkeypatch.setattr(lo.study_lib, "train_early_stopped", fake_early_stopped)
  monkeypatch.setattr(lo.study_lib, "evaluate_best", fake_evaluate_best)
  out = str(tmp_path / "lo.json")
  base = ["--tiny", "--models", "ran", "--workdir", str(tmp_path / "runs"), "--out", out]
  with pytest.raises(SystemExit):
    lo.main(base + ["--pretrain_steps", "-1"])
  assert not calls
  lo.main(base)
  lo.main(base + ["--pretrain_steps", "6"])
  (_, scratch_dir, scratch), (_, pre_dir, pre), (_, run_dir, run) = calls
  assert pre_dir == str(tmp_path / "runs" / "tiny_ran_s0_spt6_pretrain")
  assert run_dir == str(tmp_path / "runs" / "tiny_ran_s0_spt6") != scratch_dir
  assert pre.task.name == "mlm" and pre.data.name == "listops_mlm"
  assert pre.train.num_steps == 6 and pre.train.best_mode == "min"
  assert pre.model.to_dict() == scratch.model.to_dict() == run.model.to_dict()
  for field in ("seq_len", "min_len", "num_train", "num_eval", "batch_size",
                "listops_max_depth", "listops_max_args"):
    assert pre.data[field] == scratch.data[field], field
  assert pre.optim.to_dict() == scratch.optim.to_dict() and pre.seed == scratch.seed
  assert run.init_from.path == pre_dir and not scratch.init_from.path
  assert run.init_from.modules == ("inputs", "encoder")  # the head is new
  assert run.task.name == "classification"
  assert run.train.num_steps == scratch.train.num_steps
  saved = json.loads(open(out).read())["runs"]
  assert [r.get("pretrain_steps") for r in saved] == [None, 6]
  assert saved[1]["pretrain"]["best_dev_loss"] == 1.5
  assert saved[1]["pretrain"]["last_dev_loss"] == 1.5 and saved[1]["pretrain"]["steps"] == 6
  rows = [dict(r, size="reduced", num_test=lo.NUM_TEST) for r in saved] + [
      dict(saved[1], size="reduced", num_test=lo.NUM_TEST, seed=1, test={"accuracy": 0.43})]
  table = lo.summary_table(rows)
  assert "| RAN (authors' encoder) | goal >= 40% | 41.00% (1) | not run |" in table
  assert ("| RAN (authors' encoder), self-pretrained (6 masked-LM steps first) | goal >= 40% "
          "| 42.00 ± 1.41% (2) | not run |") in table
  assert len(table) == 2 + len(lo.listops_config.STUDY_MODELS) + 1
  calls.clear()
  assert lo.main(base + ["--pretrain_steps", "6"])[0]["pretrain"] == \
      saved[1]["pretrain"]
  assert not calls
  assert json.loads(open(out).read())["runs"] == saved


def test_listops_curriculum_trains_short_expressions_first_and_continues_all_of_it(
    tmp_path, monkeypatch):
  """--curriculum_steps N: each model first trains N classification steps on short
  expressions (configs/listops.py:<model>,<size>,short: the same model, sizes and optimiser,
  only the lengths differ) in <run>_short; the run continues from all of it (head
  included); its row carries curriculum_steps and the short run's dev accuracy, is its own
  row in the summary, and a second call trains nothing; --pretrain_steps with it, or a
  negative N, is refused before anything runs."""
  lo = _script("listops_study")
  calls = []

  def fake_early_stopped(config, workdir, patience, log=print):
    del log, patience
    calls.append((workdir, config))
    history = [{"step": 4, "accuracy": 0.5}, {"step": 8, "accuracy": 0.45}]
    return {"best_step": 4, "best_dev": 0.5, "train_s_total": 3.0, "eval_history": history}

  monkeypatch.setattr(lo.study_lib, "train_early_stopped", fake_early_stopped)
  monkeypatch.setattr(lo.study_lib, "evaluate_best",
                      lambda *a, **k: {"test": {"accuracy": 0.45}})
  out = str(tmp_path / "lo.json")
  base = ["--tiny", "--models", "star", "--workdir", str(tmp_path / "runs"), "--out", out]
  for bad in (["--curriculum_steps", "-1"], ["--curriculum_steps", "8", "--pretrain_steps", "8"]):
    with pytest.raises(SystemExit):
      lo.main(base + bad)
  assert not calls
  lo.main(base)
  lo.main(base + ["--curriculum_steps", "8"])
  (_, scratch), (short_dir, short), (run_dir, run) = calls
  assert short_dir == str(tmp_path / "runs" / "tiny_star_s0_cur8_short")
  assert run_dir == str(tmp_path / "runs" / "tiny_star_s0_cur8")
  assert short.task.to_dict() == scratch.task.to_dict() and short.train.num_steps == 8
  assert short.model.to_dict() == scratch.model.to_dict() == run.model.to_dict()
  # configs/listops.py's ',short' at the tiny size: 8-32 tokens (long run: 8-64).
  assert (short.data.min_len, short.data.seq_len) == (8, 32) and scratch.data.seq_len == 64
  for field in ("num_train", "batch_size", "listops_max_depth", "listops_max_args",
                "pad_multiple"):
    assert short.data[field] == scratch.data[field], field
  assert short.seed == scratch.seed and short.optim.learning_rate == scratch.optim.learning_rate
  assert run.init_from.path == short_dir and run.init_from.modules == ("inputs", "encoder",
                                                                       "head")
  assert run.data.to_dict() == scratch.data.to_dict()
  assert run.train.num_steps == scratch.train.num_steps
  saved = json.loads(open(out).read())["runs"]
  assert [r.get("curriculum_steps") for r in saved] == [None, 8]
  assert saved[1]["curriculum"]["best_dev_accuracy"] == 0.5
  assert saved[1]["curriculum"]["last_dev_accuracy"] == 0.45
  rows = [dict(r, size="reduced", num_test=lo.NUM_TEST) for r in saved]
  table = lo.summary_table(rows)
  assert ("| Star-Transformer (authors' encoder), curriculum (8 steps on 8-64-token expressions "
          "first) | - | 45.00% (1) | not run |") in table
  assert "| Star-Transformer (authors' encoder) | - | 45.00% (1) | not run |" in table
  calls.clear()
  assert lo.main(base + ["--curriculum_steps", "8"])[0]["curriculum"] == \
      saved[1]["curriculum"]
  assert not calls


def _fake_listops_trainers(lo, monkeypatch, dev=lambda config: 0.5, test=lambda config: 0.2):
  """Stand-ins for listops_study's two trainers (study_lib.train_early_stopped for the first
  phases, train_and_test for the classification run): every call is recorded as (workdir,
  config) in the list returned; a first phase's dev accuracy is dev(config) at its last
  step; a classification run's test accuracy is test(config), written to the run's
  result.json, which a later call reads back instead (as the real trainer does)."""
  calls = []

  def fake_early_stopped(config, workdir, patience, log=print):
    del log, patience
    calls.append((workdir, config))
    acc, step = dev(config), config.train.num_steps
    return {"best_step": step, "best_dev": acc, "train_s_total": 3.0,
            "eval_history": [{"step": step, "accuracy": acc}]}

  def fake_train_and_test(config, workdir, **kwargs):
    calls.append((workdir, config))
    result = lo.study_lib.stored_result(workdir)
    if result is None:
      result = {"test": {"accuracy": test(config)}, "wall_s": 1.0, **kwargs["record"]}
      os.makedirs(workdir, exist_ok=True)
      fileio.write_json_atomic(os.path.join(workdir, "result.json"), result)
    return result

  monkeypatch.setattr(lo.study_lib, "train_early_stopped", fake_early_stopped)
  monkeypatch.setattr(lo.study_lib, "train_and_test", fake_train_and_test)
  return calls


def test_listops_train_min_len_mixes_short_expressions_into_the_runs_training(
    tmp_path, monkeypatch):
  """--train_min_len N: the classification run trains with data.listops_train_min_len=N
  (nothing else in its config changes) in <run>_min<N>; with --curriculum_steps it starts
  from the same short first phase (folder) as the run without; its row carries
  train_min_len and is its own row of the summary, after the curriculum's; N above the
  size's longest expression, or negative, is refused before anything runs."""
  lo = _script("listops_study")
  calls = _fake_listops_trainers(
      lo, monkeypatch, test=lambda config: 0.3 if config.data.listops_train_min_len else 0.2)
  out, runs = str(tmp_path / "lo.json"), tmp_path / "runs"
  base = ["--tiny", "--models", "ran", "--workdir", str(runs), "--out", out,
          "--curriculum_steps", "8"]
  for bad in (["--train_min_len", "-1"], ["--train_min_len", "65"]):
    with pytest.raises(SystemExit):
      lo.main(base + bad)
  assert not calls
  lo.main(base)
  (short_dir, short), (plain_dir, plain) = calls
  calls.clear()
  lo.main(base + ["--train_min_len", "4"])
  # The same first-phase folder: a finished one is read back by the trainer, not retrained.
  [(again_dir, again), (run_dir, run)] = calls
  assert (again_dir, again.to_dict()) == (short_dir, short.to_dict())
  assert short_dir == str(runs / "tiny_ran_s0_cur8_short") == run.init_from.path
  assert run_dir == str(runs / "tiny_ran_s0_cur8_min4")
  assert (plain.data.listops_train_min_len, run.data.listops_train_min_len) == (0, 4)
  run.data.listops_train_min_len = 0
  assert run.to_dict() == plain.to_dict()
  saved = json.loads(open(out).read())["runs"]
  assert [r.get("train_min_len") for r in saved] == [None, 4]
  assert saved[1]["curriculum"] == saved[0]["curriculum"]
  table = lo.summary_table([dict(r, size="reduced", num_test=lo.NUM_TEST) for r in saved])
  ran = [t for t in table if t.startswith("| RAN")]
  assert ran == [
      "| RAN (authors' encoder) | goal >= 40% | not run | not run |",
      "| RAN (authors' encoder), curriculum (8 steps on 8-64-token expressions first) "
      "| goal >= 40% | 20.00% (1) | not run |",
      "| RAN (authors' encoder), curriculum (8 steps on 8-64-token expressions first), "
      "trained on expressions from 4 tokens up | goal >= 40% | 30.00% (1) | not run |"]


def test_listops_curriculum_mid_steps_chain_short_medium_and_long_runs(tmp_path, monkeypatch):
  """--curriculum_mid_steps M (with --curriculum_steps N): the middle run trains M steps on
  configs/listops.py's ',medium' lengths (16-48 tokens at the tiny size) from all of the
  same short run as the two-phase curriculum's (one folder, read back, not retrained), and
  the long run starts from all of the middle one; its row carries both summaries and is its
  own row of the summary, after the two-phase one's; without --curriculum_steps it is
  refused before anything runs."""
  lo = _script("listops_study")
  calls = _fake_listops_trainers(
      lo, monkeypatch, dev=lambda config: 0.6 if config.data.seq_len == 48 else 0.5,
      test=lambda config: 0.4 if config.init_from.path.endswith("_medium") else 0.3)
  out, runs = str(tmp_path / "lo.json"), tmp_path / "runs"
  base = ["--tiny", "--models", "ran", "--workdir", str(runs), "--out", out]
  for bad in (["--curriculum_mid_steps", "4"], ["--curriculum_steps", "8",
                                                "--curriculum_mid_steps", "-1"]):
    with pytest.raises(SystemExit):
      lo.main(base + bad)
  assert not calls
  lo.main(base + ["--curriculum_steps", "8"])
  (short_dir, short), (two_dir, two) = calls
  calls.clear()
  lo.main(base + ["--curriculum_steps", "8", "--curriculum_mid_steps", "4"])
  [(again_dir, again), (mid_dir, mid), (run_dir, run)] = calls
  assert (again_dir, again.to_dict()) == (short_dir, short.to_dict())
  assert short_dir == str(runs / "tiny_ran_s0_cur8_short")
  assert mid_dir == str(runs / "tiny_ran_s0_cur8_mid4_medium")
  assert run_dir == str(runs / "tiny_ran_s0_cur8_mid4")
  whole = ("inputs", "encoder", "head")
  assert (mid.init_from.path, mid.init_from.modules) == (short_dir, whole)
  assert (run.init_from.path, run.init_from.modules) == (mid_dir, whole)
  assert (mid.data.min_len, mid.data.seq_len, mid.train.num_steps) == (16, 48, 4)
  assert (short.data.min_len, short.data.seq_len) == (8, 32)
  with pytest.raises(ValueError, match="two lengths"):
    lo.listops_config.get_config("ran,tiny,short,medium")
  # The middle run is the short run but for its lengths, steps and starting point.
  for field in ("min_len", "seq_len"):
    mid.data[field] = short.data[field]
  mid.train.num_steps = short.train.num_steps
  mid.init_from = short.init_from
  assert mid.to_dict() == short.to_dict()
  run.init_from.path = two.init_from.path
  assert run.to_dict() == two.to_dict()
  saved = json.loads(open(out).read())["runs"]
  assert [r.get("curriculum_mid_steps") for r in saved] == [None, 4]
  assert saved[1]["curriculum"] == saved[0]["curriculum"]
  assert saved[1]["curriculum_mid"]["best_dev_accuracy"] == 0.6
  table = lo.summary_table([dict(r, size="reduced", num_test=lo.NUM_TEST) for r in saved])
  assert [t for t in table if t.startswith("| RAN")][1:] == [
      "| RAN (authors' encoder), curriculum (8 steps on 8-64-token expressions first) "
      "| goal >= 40% | 30.00% (1) | not run |",
      "| RAN (authors' encoder), curriculum (8 steps on 8-64-token expressions, then 4 on "
      "32-200 first) | goal >= 40% | 40.00% (1) | not run |"]
  calls.clear()
  lo.main(base + ["--curriculum_steps", "8", "--curriculum_mid_steps", "4"])
  # The finished run is read back (by the trainer), its first phases not even that.
  assert [d for d, _ in calls] == [run_dir]


def test_listops_override_changes_every_phase_in_folders_and_rows_of_its_own(
    tmp_path, monkeypatch, capsys):
  """--override field=value sets the field in every config of the call (the chain's short and
  middle runs and the classification run) and nothing else; the runs get folders of their
  own (the override in the name, before the phases' suffixes: no first phase is shared with
  the run without), their rows carry 'overrides' and are rows of their own in the results
  file and the summary (after the same run without); the analysis' folder rule leaves them
  out. A field no config has, a value of the wrong type, a field the study sets, or a value
  that would not make a folder name is refused, naming it, before anything trains."""
  lo = _script("listops_study")
  analysis = _script("listops_analysis")
  calls = _fake_listops_trainers(
      lo, monkeypatch, test=lambda config: config.model.encoder.num_cycles / 10)
  out, runs = str(tmp_path / "lo.json"), tmp_path / "runs"
  base = ["--tiny", "--models", "star", "--workdir", str(runs), "--out", out,
          "--curriculum_steps", "8", "--curriculum_mid_steps", "4"]
  for bad, says in [("model.encoder.num_cycle=3", "no field 'model.encoder.num_cycle'"),
                    ("model.encoder.num_cycles=three", "is a int"),
                    ("model.encoder.ring=maybe", "boolean"),
                    ("model.encoder=3", "group of fields"),
                    ("seed=3", "--seeds"), ("train.num_steps=9", "--steps"),
                    ("init_from.path=x", "chain"), ("data.data_dir=a/b", "folder"),
                    ("train.checkpoint_every=50", "--checkpoints_per_eval"),
                    ("num_cycles", "field=value")]:
    with pytest.raises(SystemExit):
      lo.main(base + ["--override", bad])
    assert says in capsys.readouterr().err, bad
  assert not calls
  plain = lo.main(base)
  plain_calls = calls[:]
  calls.clear()
  six = "model.encoder.num_cycles=6"
  rows = lo.main(base + ["--override", six])
  name = "tiny_star_s0_model.encoder.num_cycles-6_cur8"
  assert [d for d, _ in calls] == [str(runs / f"{name}_short"),
                                   str(runs / f"{name}_mid4_medium"), str(runs / f"{name}_mid4")]
  for (_, changed), (_, before) in zip(calls, plain_calls):
    assert (changed.model.encoder.num_cycles, before.model.encoder.num_cycles) == (6, 2)
    changed.model.encoder.num_cycles = 2
    changed.init_from.path = before.init_from.path
    assert changed.to_dict() == before.to_dict()
  assert rows[0]["overrides"] == [six] and rows[0]["test"]["accuracy"] == 0.6
  saved = json.loads(open(out).read())["runs"]
  assert [(r.get("overrides"), r["test"]["accuracy"]) for r in saved] == [
      (None, plain[0]["test"]["accuracy"]), ([six], 0.6)]
  calls.clear()
  assert lo.main(base + ["--override", six]) == rows  # Read back, the same one row replaced.
  assert [d for d, _ in calls] == [str(runs / f"{name}_mid4")]
  assert len(json.loads(open(out).read())["runs"]) == 2
  table = lo.summary_table([dict(r, size="reduced", num_test=lo.NUM_TEST) for r in saved])
  assert [t for t in table if t.startswith("| Star")][1:] == [
      "| Star-Transformer (authors' encoder), curriculum (8 steps on 8-64-token expressions, "
      "then 4 on 32-200 first) | - | 20.00% (1) | not run |",
      "| Star-Transformer (authors' encoder), curriculum (8 steps on 8-64-token expressions, "
      "then 4 on 32-200 first), with `model.encoder.num_cycles=6` | - | 60.00% (1) | not run |"]
  assert analysis.RUN_NAME.match("tiny_star_s0_cur8_mid4")
  assert not any(analysis.RUN_NAME.match(os.path.basename(d)) for d, _ in calls)


def test_listops_steps_other_than_the_sizes_are_a_run_of_their_own(tmp_path, monkeypatch):
  """--steps N (N not the size's train.num_steps) trains the classification run N steps in
  <run>[_<first phases>]_st<N>, started from the same first phases (folders) as the run
  with the size's steps; nothing else in its config changes; its row carries steps=N and is
  its own row of the summary. --steps equal to the size's is the plain run (same folder, no
  key), and a finished run is read back, not retrained."""
  lo = _script("listops_study")
  calls = _fake_listops_trainers(
      lo, monkeypatch, test=lambda config: config.train.num_steps / 1000)
  out, runs = str(tmp_path / "lo.json"), tmp_path / "runs"
  base = ["--tiny", "--models", "ran", "--workdir", str(runs), "--out", out]
  default = lo.run_config("ran", 0, "tiny").train.num_steps
  with pytest.raises(SystemExit):
    lo.main(base + ["--steps", "-3"])
  assert not calls
  lo.main(base + ["--curriculum_steps", "8"])
  (short_dir, short), (plain_dir, plain) = calls
  calls.clear()
  lo.main(base + ["--curriculum_steps", "8", "--steps", str(default + 5)])
  [(again_dir, again), (run_dir, run)] = calls
  assert (again_dir, again.to_dict()) == (short_dir, short.to_dict())
  assert run_dir == str(runs / f"tiny_ran_s0_cur8_st{default + 5}")
  assert run.init_from.path == short_dir == plain.init_from.path
  assert run.train.num_steps == default + 5
  run.train.num_steps = default
  assert run.to_dict() == plain.to_dict()
  calls.clear()
  lo.main(base + ["--steps", "7"])  # From scratch, 7 steps.
  [(scratch_dir, scratch)] = calls
  assert scratch_dir == str(runs / "tiny_ran_s0_st7") and scratch.train.num_steps == 7
  calls.clear()
  lo.main(base + ["--curriculum_steps", "8", "--steps", str(default)])
  # The plain run, read back (its first phase's summary with it: that folder is not read).
  assert [d for d, _ in calls] == [plain_dir]
  saved = json.loads(open(out).read())["runs"]
  assert [(r.get("curriculum_steps"), r.get("steps")) for r in saved] == [
      (None, 7), (8, None), (8, default + 5)]
  table = lo.summary_table([dict(r, size="reduced", num_test=lo.NUM_TEST) for r in saved])
  assert [t for t in table if t.startswith("| RAN")] == [
      "| RAN (authors' encoder) | goal >= 40% | not run | not run |",
      "| RAN (authors' encoder), 7 steps | goal >= 40% | 0.70% (1) | not run |",
      "| RAN (authors' encoder), curriculum (8 steps on 8-64-token expressions first) "
      f"| goal >= 40% | {default / 10:.2f}% (1) | not run |",
      "| RAN (authors' encoder), curriculum (8 steps on 8-64-token expressions first), "
      f"{default + 5:,} steps on the size's lengths | goal >= 40% "
      f"| {(default + 5) / 10:.2f}% (1) | not run |"]


def test_listops_analysis_reads_the_curriculums_folders_by_name(tmp_path):
  """listops_analysis.find_runs: every finished run's folder is parsed into its variant
  (the middle step's count included), a curriculum step's own folder is read once a run
  started from it has finished (the next step's run, or a chain after it), and the tables'
  labels say which run each row is."""
  an = _script("listops_analysis")
  runs = tmp_path / "runs"
  for name, finished in [("reduced_ran_s0_cur8_mid4", True), ("reduced_ran_s0_cur8_short", False),
                         ("reduced_ran_s0_cur8_mid4_medium", False),
                         ("reduced_ran_s1_cur8_mid4_medium", False),
                         ("reduced_ran_s1_cur8_short", False),
                         ("reduced_ran_s2_cur8_short", False),
                         ("reduced_ran_s2_cur8", True),
                         ("reduced_ran_s3_cur8_short", False),
                         ("reduced_ran_s3_cur80", True),
                         ("reduced_ran_s4_cur8_short", False),
                         ("reduced_ran_s4_cur8_mid4_medium", False),
                         ("reduced_ran_s4_cur8_mid4_st9", True),
                         ("reduced_ran_s0_cur8_mid4_min16", True),
                         ("reduced_ran_s0_cur8_mid4_st6000", True),
                         ("reduced_ran_s1_st7000", True),
                         ("reduced_ran_s1_st7000_short", False),
                         ("reduced_ran_s0_mid4", True)]:
    (runs / name / "best").mkdir(parents=True)
    if finished:
      (runs / name / "result.json").write_text("{}")
  found = {os.path.basename(p): info for p, info in an.find_runs(str(runs), "reduced")}
  # s0_cur8_short: the three-length run from it (s0_cur8_mid4) finished; s2_cur8_short:
  # its two-length run did; s1's short and middle steps: no run from them finished;
  # s3_cur8_short: a run of another short length (s3_cur80) is not one from it; s4: a chain
  # from the middle step (_st9) finished, so both steps are read; a middle step without the
  # curriculum is no study folder; s1_st7000_short: a run's steps are no first phase's.
  assert sorted(found) == ["reduced_ran_s0_cur8_mid4", "reduced_ran_s0_cur8_mid4_medium",
                           "reduced_ran_s0_cur8_mid4_min16", "reduced_ran_s0_cur8_mid4_st6000",
                           "reduced_ran_s0_cur8_short", "reduced_ran_s1_st7000",
                           "reduced_ran_s2_cur8", "reduced_ran_s2_cur8_short",
                           "reduced_ran_s3_cur80", "reduced_ran_s4_cur8_mid4_medium",
                           "reduced_ran_s4_cur8_mid4_st9", "reduced_ran_s4_cur8_short"]
  labels = {n: an.label(info) for n, info in found.items()}
  assert labels == {
      "reduced_ran_s0_cur8_mid4": ", curriculum 8 steps then 4 on 32-200 tokens",
      "reduced_ran_s0_cur8_mid4_medium":
          ", curriculum 8 steps then 4 on 32-200 tokens, its 32-200-token middle step",
      "reduced_ran_s0_cur8_mid4_min16":
          ", curriculum 8 steps then 4 on 32-200 tokens, trained from 16 tokens",
      "reduced_ran_s0_cur8_mid4_st6000": ", curriculum 8 steps then 4 on 32-200 tokens, "
                                         "6,000 steps",
      "reduced_ran_s1_st7000": ", 7,000 steps",
      "reduced_ran_s0_cur8_short": ", curriculum 8 steps, its short first phase",
      "reduced_ran_s2_cur8": ", curriculum 8 steps",
      "reduced_ran_s2_cur8_short": ", curriculum 8 steps, its short first phase",
      "reduced_ran_s3_cur80": ", curriculum 80 steps",
      "reduced_ran_s4_cur8_mid4_medium":
          ", curriculum 8 steps then 4 on 32-200 tokens, its 32-200-token middle step",
      "reduced_ran_s4_cur8_mid4_st9": ", curriculum 8 steps then 4 on 32-200 tokens, 9 steps",
      "reduced_ran_s4_cur8_short": ", curriculum 8 steps, its short first phase"}
  assert found["reduced_ran_s0_cur8_mid4_min16"]["curriculum_mid_steps"] == 4
  assert [found[n]["steps"] for n in ("reduced_ran_s0_cur8_mid4", "reduced_ran_s1_st7000")
          ] == [0, 7000]


@pytest.mark.long
def test_listops_curriculum_run_starts_from_the_short_runs_whole_model(tmp_path):
  """The real warm start: before its first update the long run's parameters, the head
  included, are the short run's last ones (Star-Transformer: its position table keeps the
  long run's length, so every shape matches)."""
  lo = _script("listops_study")
  runs = tmp_path / "lo"
  lo.main(["--tiny", "--models", "star", "--steps", "4", "--curriculum_steps", "3",
           "--workdir", str(runs), "--out", str(tmp_path / "lo.json")])
  from longtext_jax import inference  # pylint: disable=g-import-not-at-top
  short = inference.load(str(runs / "tiny_star_s0_cur3_short"), step=3, progress=False)
  from longtext_jax import data as data_lib  # pylint: disable=g-import-not-at-top
  from longtext_jax.train import init_from, loop  # pylint: disable=g-import-not-at-top
  c = lo.run_config("star", 0, "tiny")
  c.init_from.path = str(runs / "tiny_star_s0_cur3_short")
  run = loop.make_run(c, str(tmp_path / "start"))
  batch = next(iter(data_lib.eval_batches(study_lib.test_split(c, 2), 2, 0, 1,
                                          c.data.pad_multiple, c.data.pad_offset)))
  spec = loop.build_state(run, {k: v for k, v in batch.items() if k != "example_id"})
  fresh = spec.init(jax.random.key(1)).params

  def same(params):
    return jax.tree.map(lambda a, b: bool(np.array_equal(np.asarray(a), np.asarray(b))),
                        jax.device_get(params), short.params)

  c.init_from.modules = ("inputs", "encoder", "head")  # What the study sets.
  assert all(jax.tree.leaves(same(init_from.apply(c, fresh, spec.abstract)[0])))
  c.init_from.modules = ("inputs", "encoder")  # The self-pretraining's: the head is new.
  partial = same(init_from.apply(c, fresh, spec.abstract)[0])
  assert all(jax.tree.leaves(partial["encoder"])) and not any(jax.tree.leaves(partial["head"]))


def test_listops_results_file_keeps_the_rows_of_other_calls(tmp_path):
  """A call that trains one model rewrites its own rows only: the others' results stay
  (their run folders may be gone), in the study's model order."""
  listops = _script("listops_study")
  path = str(tmp_path / "lo.json")
  row = {"model": "star", "seed": 0, "size": "reduced", "test": {"accuracy": 0.34},
         "command": "a"}
  listops.write_rows(path, [row, dict(row, model="ran")], "a")
  listops.write_rows(path, [dict(row, model="transformer", command="b")], "b")
  listops.write_rows(path, [dict(row, test={"accuracy": 0.5}, command="c")], "c")
  listops.write_rows(path, [dict(row, seed=1, command="d")], "d")
  saved = json.loads(open(path).read())
  assert [(r["model"], r["seed"], r["test"]["accuracy"], r["command"]) for r in
          saved["runs"]] == [("transformer", 0, 0.34, "b"), ("ran", 0, 0.34, "a"),
                             ("star", 0, 0.5, "c"), ("star", 1, 0.34, "d")]
  assert saved["command"] == "d" and not os.path.exists(path + ".tmp")
  # The RAN ablation study's file likewise (its table is the merged rows').
  ablations = _script("ran_ablations")
  path = str(tmp_path / "abl.json")
  cell = {"task": "last_window", "ablation": "full", "seed": 0, "test": {"accuracy": 0.5}}
  ablations.write_rows(path, [cell], "a")
  ablations.write_rows(path, [dict(cell, ablation="no_rotary", test={"accuracy": 0.4})], "b")
  saved = json.loads(open(path).read())
  assert [r["ablation"] for r in saved["runs"]] == ["full", "no_rotary"]
  assert any(line.startswith("| last_window | no_rotary | 40.00 (1) | -10.00 |")
             for line in saved["table"]), saved["table"]


def test_ran_ablation_table_and_cells():
  """The table reports mean ± sample sd (n - 1) over seeds and the change from the full
  model next to the paper's; mean pooling is skipped on the token task."""
  abl = _script("ran_ablations")
  rows = [{"task": "last_window", "ablation": a, "seed": s, "test": {"accuracy": v}}
          for a, s, v in (("full", 0, 0.8), ("full", 1, 0.9), ("mean_pool", 0, 0.6))]
  table = abl.table(rows)
  assert table[2] == "| last_window | full | 85.00 ± 7.07 (2) |  |  |"  # not 5.00 (n)
  assert table[3] == "| last_window | mean_pool | 60.00 (1) | -25.00 | -1.12 |"
  assert abl.cells(["tagging", "last_window"], ["full", "mean_pool"]) == [
      ("tagging", "full"), ("last_window", "full"), ("last_window", "mean_pool")]


def test_ran_ablation_table_is_written_between_the_docs_markers(tmp_path):
  """--docs / --docs_only: the table between the markers is the results file's, the rest of
  the document is kept, and a document without the markers is refused, not appended to."""
  abl = _script("ran_ablations")
  results = tmp_path / "abl.json"
  rows = [{"task": "last_window", "ablation": a, "seed": s, "test": {"accuracy": v}}
          for a, s, v in (("full", 0, 0.8), ("full", 1, 0.9), ("no_review", 0, 0.6))]
  abl.write_rows(str(results), rows, "python experiments/ran_ablations.py --seeds 0,1")
  doc = tmp_path / "doc.md"
  doc.write_text(f"# Before\n\n{abl.BEGIN}\n| stale |\n{abl.END}\n\nAfter.\n")
  assert abl.main(["--docs_only", f"--out={results}", f"--docs={doc}"]) == []
  text = doc.read_text()
  assert text.startswith("# Before\n\n") and text.endswith(f"{abl.END}\n\nAfter.\n")
  assert "| stale |" not in text and "--seeds 0,1" in text
  assert "| last_window | full | 85.00 ± 7.07 (2) |  |  |" in text
  assert "| last_window | no_review | 60.00 (1) | -25.00 | -2.51 |" in text
  assert text.count(abl.BEGIN) == 1 and text.count(abl.END) == 1
  abl.main(["--docs_only", f"--out={results}", f"--docs={doc}"])  # idempotent
  assert doc.read_text() == text
  bare = tmp_path / "bare.md"
  bare.write_text("# No markers\n")
  with pytest.raises(ValueError, match="markers"):
    abl.main(["--docs_only", f"--out={results}", f"--docs={bare}"])
  assert bare.read_text() == "# No markers\n"
  with pytest.raises(SystemExit):
    abl.main(["--docs_only", f"--out={results}"])
  # Each table of docs/reproduction.md is the one its results file gives.
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with open(os.path.join(repo, "docs", "reproduction.md")) as f:
    doc_text = f.read()
  for name, results_file in (("", "ran_ablations_250steps_cpu.json"),
                             ("1000steps", "ran_ablations_1000steps_cpu.json")):
    begin, end = abl.table_markers(name)
    with open(os.path.join(repo, "docs", "reproduction", results_file)) as f:
      saved = json.load(f)
    shown = doc_text[doc_text.index(begin):doc_text.index(end)]
    assert all(line in shown for line in abl.table(saved["runs"])), name


def test_ran_ablation_named_table_is_its_own_markers(tmp_path):
  """--table NAME: the table between NAME's markers is rewritten, the default table of the
  same document is kept byte for byte, and the redraw command names the table."""
  abl = _script("ran_ablations")
  results = tmp_path / "abl_1000.json"
  rows = [{"task": "tagging", "ablation": a, "seed": 0, "test": {"token_accuracy": v}}
          for a, v in (("full", 0.99), ("no_rotary", 0.8))]
  abl.write_rows(str(results), rows, "python experiments/ran_ablations.py --steps 1000")
  begin, end = abl.table_markers("1000steps")
  assert (begin, end) != (abl.BEGIN, abl.END)
  default = f"{abl.BEGIN}\n| kept |\n{abl.END}\n"
  doc = tmp_path / "doc.md"
  doc.write_text(f"{default}\n{begin}\n| stale |\n{end}\n")
  abl.main(["--docs_only", f"--out={results}", f"--docs={doc}", "--table", "1000steps"])
  text = doc.read_text()
  assert text.startswith(default) and "| stale |" not in text
  assert "| tagging | no_rotary | 80.00 (1) | -19.00 | -1.23 |" in text
  assert f"--docs_only --table 1000steps --out {os.path.relpath(results, abl.ROOT)}" in text
  with pytest.raises(ValueError, match="markers"):  # No such table in the document.
    abl.main(["--docs_only", f"--out={results}", f"--docs={doc}", "--table", "other"])


def test_ran_ablation_corpus_table_from_own_corpus_rows(tmp_path):
  """--corpus_results: the RAN rows of an own-corpus results file become ablation cells by
  their overrides (the full model without any; rows of other encoders, other overrides or no
  test left out), tabled between the corpus markers, the generated-task table untouched."""
  abl = _script("ran_ablations")
  assert abl.ablation_of([]) == "full"
  assert abl.ablation_of(["model.encoder.memory_review=False"]) == "no_review"
  assert abl.ablation_of(["model.encoder.use_rotary=false"]) == "no_rotary"
  assert abl.ablation_of(["model.encoder.gpc_residual=none"]) == "no_residual"
  assert abl.ablation_of(["model.encoder.pooling=mean"]) == "mean_pool"
  assert abl.ablation_of(["model.encoder.memory_review=True"]) is None
  assert abl.ablation_of(["train.num_epochs=1"]) is None

  def row(encoder, overrides, seed, acc):
    return json.dumps({"corpus": "news", "encoder": encoder, "overrides": overrides,
                       "seed": seed, "test/accuracy": acc, "dev/accuracy": acc,
                       "command": f"python -m longtext_jax.main --seed={seed}"})

  results = tmp_path / "rows.jsonl"
  results.write_text("\n".join([
      row("ran", [], 0, 0.90), row("ran", [], 1, 0.92),
      row("ran", ["model.encoder.memory_review=False"], 0, 0.88),
      row("ran", ["train.num_epochs=1"], 0, 0.5), row("transformer", [], 0, 0.1),
      json.dumps({"corpus": "news", "encoder": "ran", "overrides": [], "seed": 2})]) + "\n")
  doc = tmp_path / "doc.md"
  begin, end = abl.CORPUS_MARKERS
  doc.write_text(f"{abl.BEGIN}\n| kept |\n{abl.END}\n{begin}\n| stale |\n{end}\n")
  runs = abl.main(["--docs_only", f"--corpus_results={results}", f"--docs={doc}"])
  assert [(r["ablation"], r["seed"]) for r in runs] == [("full", 0), ("full", 1),
                                                       ("no_review", 0)]
  text = doc.read_text()
  assert "| kept |" in text and "| stale |" not in text
  assert "| news | full | 91.00 ± 1.41 (2) |  |  |" in text
  assert "| news | no_review | 88.00 (1) | -3.00 | -2.51 |" in text


def test_ran_ablation_corpus_table_at_another_budget(tmp_path):
  """--budget: rows run with the same extra overrides (a longer training budget) form their
  own table, between the named corpus markers (--table), and never join the default table's
  cells; the redraw command names the budget; a line that is not JSON is an error naming
  the file and line."""
  abl = _script("ran_ablations")
  epochs = "train.num_epochs=6"

  def row(overrides, seed, acc):
    return json.dumps({"corpus": "news", "encoder": "ran", "overrides": overrides,
                       "seed": seed, "test/accuracy": acc, "dev/accuracy": acc,
                       "command": f"python -m longtext_jax.main --seed={seed}"})

  results = tmp_path / "rows.jsonl"
  results.write_text("\n".join([
      row([], 0, 0.90), row([epochs], 0, 0.94), row([epochs], 1, 0.96),
      row(["model.encoder.gpc_residual=none", epochs], 0, 0.91),
      row([epochs, "model.encoder.pooling=mean"], 0, 0.97),
      row(["model.encoder.gpc_residual=none"], 0, 0.10),
      row([epochs, "train.num_epochs=7"], 0, 0.5)]) + "\n")
  doc = tmp_path / "doc.md"
  begin, end = abl.CORPUS_MARKERS
  begin6, end6 = abl.corpus_markers("6epochs")
  doc.write_text(f"{begin}\n| stale |\n{end}\n{begin6}\n| stale 6 |\n{end6}\n")
  runs = abl.main(["--docs_only", f"--corpus_results={results}", f"--docs={doc}",
                   "--table", "6epochs", "--budget", epochs])
  assert [(r["ablation"], r["seed"]) for r in runs] == [
      ("full", 0), ("full", 1), ("mean_pool", 0), ("no_residual", 0)]
  text = doc.read_text()
  assert "| stale |" in text and "| stale 6 |" not in text  # Only the named table.
  assert "| news | full | 95.00 ± 1.41 (2) |  |  |" in text
  assert "| news | no_residual | 91.00 (1) | -4.00 | -1.60 |" in text
  assert "| news | mean_pool | 97.00 (1) | +2.00 | -1.12 |" in text
  assert (f"--docs_only --table 6epochs --budget {epochs} --corpus_results "
          f"{os.path.relpath(results, abl.ROOT)}") in text
  # The default table takes the rows without the budget only.
  assert [(r["ablation"], r["test"]["accuracy"]) for r in abl.corpus_runs(str(results))] == [
      ("full", 0.90), ("no_residual", 0.10)]
  with pytest.raises(SystemExit):  # --budget selects corpus rows: alone it is a mistake.
    abl.main(["--docs_only", f"--docs={doc}", "--budget", epochs])
  with pytest.raises(ValueError, match="field=value"):
    abl.corpus_runs(str(results), ["num_epochs"])
  with pytest.raises(ValueError, match="no row was run with"):  # 6.0 is not the rows' 6.
    abl.corpus_runs(str(results), ["train.num_epochs=6.0"])
  results.write_text(row([], 0, 0.9) + "\n{not json\n")
  with pytest.raises(ValueError, match=f"{results}:2: not a JSON line"):
    abl.corpus_runs(str(results))


def test_masked_summation_gpu_runs_times_are_shown_apart(tmp_path):
  """A run on a GPU joins its cell's MSE (the model's result does not depend on the device)
  but not its CPU times: the time and wall cells give it apart ('GPU ...'), and the header
  names the GPU device beside the host."""
  study = _script("masked_summation")

  def run(seed, mse, ms, device):
    return {"model": "star", "n": 12, "seed": seed, "test": {"mse": mse},
            "infer_ms_per_batch": ms, "best_step": 10, "stopped_step": 20,
            "early_stopped": False, "eval_history": [{"step": 10, "mse": mse}],
            "wall_s_total": 60.0 * (seed + 1), "wall_s": 60.0, "num_test": 10_000,
            "host": "Some CPU, 2 cores", "allocator": "glibc malloc", "device": device}

  rows = [run(0, 0.01, 100.0, "CPU cpu (2 cores)"), run(1, 0.02, 300.0, "CPU cpu (2 cores)"),
          run(2, 0.03, 7.0, "GPU NVIDIA H100 80GB HBM3 (16 cores)")]
  study.write_docs(rows, str(tmp_path), "cmd", tiny=True)
  text = (tmp_path / "masked_summation.md").read_text()
  assert "| star | 0.0200 ± 0.0100 (3) |" in text  # MSE: every seed.
  assert "| star | 200.0 ± 141.4 (2); GPU 7.0 |" in text  # Test time: CPU runs, then GPU.
  assert "| star | 2 ± 1 (2); GPU 3 |" in text  # Wall minutes likewise.
  assert "; GPU NVIDIA H100 80GB HBM3 (16 cores) (1 run)" in text


def test_masked_summation_cells_name_mixed_epoch_budgets():
  """A cell whose seeds ran different numbers of epochs (caps, or a SIGTERM cut) says so in
  the MSE tables (the Transformer at n=200 averaged 7- and 12-epoch runs unmarked); a seed
  stopped by patience ran under the others' cap and marks nothing."""
  study = _script("masked_summation")

  def run(model, seed, stopped, early):
    return {"model": model, "n": 12, "seed": seed, "test": {"mse": 0.01 * (seed + 1)},
            "infer_ms_per_batch": 1.0, "best_step": 10, "stopped_step": stopped,
            "early_stopped": early, "eval_history": [{"step": 10, "mse": 0.1}],
            "wall_s": 60.0, "num_test": 10_000}

  rows = [run("star", 0, 70, False), run("star", 1, 120, False), run("star", 2, 120, False),
          run("ran", 0, 120, False), run("ran", 1, 50, True)]
  assert study.summary_table(rows)[2:] == [
      "| Star-Transformer | 0.0284 | 0.0200 ± 0.0100 (3) (epochs run 7, 12) |",
      "| RAN (not in the paper) | - | 0.0150 ± 0.0071 (2) |"]


def test_masked_summation_cells_use_the_sample_sd():
  """Spreads over seeds divide by n - 1, as the own-corpus table's (statistics.stdev)."""
  study = _script("masked_summation")
  assert study._fmt([1.0, 2.0, 3.0], ".2f") == "2.00 ± 1.00 (3)"  # n: 0.82
  assert study._fmt([0.25], ".2f") == "0.25"


@pytest.mark.parametrize("script,args", [
    ("ran_ablations", ["--tasks", "last_window", "--ablations", "full", "--seeds", "0"]),
    ("listops_study", ["--models", "star"])])
def test_checkpoints_per_eval_must_divide_the_evaluation_steps(script, args, tmp_path,
                                                                capsys):
  """--checkpoints_per_eval of the RAN ablations and ListOps: a value that does not divide
  the steps between two dev evaluations is a parser error naming the flag, before any run
  starts (nothing is written); the full-size configs take 5 (the value docs/ suggest)."""
  study = _script(script)
  with pytest.raises(SystemExit) as exit_info:
    study.main(["--tiny", *args, "--checkpoints_per_eval", "7", "--workdir",
                str(tmp_path / "runs"), "--out", str(tmp_path / "out.json")])
  assert exit_info.value.code == 2
  assert "--checkpoints_per_eval: 7 checkpoints per evaluation: must be a positive " \
         "divisor" in capsys.readouterr().err
  assert not os.listdir(tmp_path)
  full = (study.abl_config.get_config("full,last_window") if script == "ran_ablations"
          else study.run_config("star", 0, "full"))
  assert study_lib.checkpoint_every(full.train.eval_every, 5) * 5 == \
      full.train.eval_every


@pytest.mark.long
def test_ran_ablation_study_tiny(tmp_path):
  abl = _script("ran_ablations")
  rows = abl.main(["--tiny", "--tasks", "last_window", "--ablations", "full,mean_pool",
                   "--seeds", "0", "--steps", "4", "--workdir", str(tmp_path / "abl"),
                   "--out", str(tmp_path / "abl.json"), "--num_test", "24"])
  assert [r["ablation"] for r in rows] == ["full", "mean_pool"]
  assert [r["num_test"] for r in rows] == [24, 24]  # --tiny ignored --num_test (used 16).
  saved = json.loads((tmp_path / "abl.json").read_text())
  assert all(r["command"] == saved["command"] for r in rows)
  table = saved["table"]
  assert table[2].startswith("| last_window | full |") and "-1.12" in table[3]


def test_grn_speed_tiny_times_both_models(tmp_path, monkeypatch):
  grn = _script("grn_speed")
  monkeypatch.setattr(grn, "ROOT", str(tmp_path))  # Where its results file defaults to.
  rows = grn.main(["--tiny", "--lengths", "8", "--repeats", "1"])
  saved = json.loads((tmp_path / "runs" / "grn_speed_tiny.json").read_text())
  assert not (tmp_path / "docs").exists()  # Tiny timings never replace the recorded ones.
  assert saved["rows"] == rows
  assert [r["model"] for r in rows] == ["slstm_1280x6", "roberta_base"]
  assert all(r["time_s"] > 0 for r in rows)
  assert rows[1]["speedup_vs_roberta"] == 1.0
  assert rows[0]["speedup_vs_roberta"] == pytest.approx(rows[1]["time_s"] / rows[0]["time_s"])


def test_a_cached_study_result_of_other_settings_is_refused(tmp_path):
  """run_cached stores the run's settings (steps, patience, test size) with its result; a
  call with other settings is refused naming them (a finished run was returned in 0 s and
  recorded under a command whose --steps/--patience/--num_test did not produce it). A
  result stored before the key existed is read as it is."""
  lib = load_script("experiments/study_lib.py")
  calls = []
  key = {"train.num_steps": 40, "patience": 5, "num_test": 100}
  first = lib.run_cached(str(tmp_path), lambda: calls.append(1) or {"command": "c"}, key)
  assert first["study_key"] == key and calls == [1]
  assert lib.run_cached(str(tmp_path), lambda: calls.append(2) or {}, key) == first
  with pytest.raises(ValueError, match=r"other settings: patience 5 -> 1, train.num_steps "
                                       r"40 -> 10; rerun with the flags that made it"):
    lib.run_cached(str(tmp_path), lambda: {}, dict(key, patience=1, **{"train.num_steps": 10}))
  old = tmp_path / "old"
  old.mkdir()
  (old / "result.json").write_text(json.dumps({"test": {"mse": 0.5}}))
  assert lib.run_cached(str(old), lambda: {}, key) == {"test": {"mse": 0.5}}
  assert calls == [1]


def test_at_a_glance_numbers_are_those_of_the_generated_tables():
  """docs/reproduction.md's hand-written claims table quotes the generated tables (the
  studies' results files, between the markers): every mean ± sd and every bold number in it
  appears there, so a result redrawn by a study (`--docs_only`) without the claims table
  being updated fails here instead of leaving two numbers for one cell."""
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with open(os.path.join(repo, "docs", "reproduction.md"), encoding="utf-8") as f:
    page = f.read()
  generated = "\n".join(body for _, body in re.findall(
      r"<!-- (.+?): begin -->(.*?)<!-- \1: end -->", page, flags=re.S))
  start = page.index("## At a glance")
  glance = page[start:page.index("\n## ", start + 1)]
  quoted = set(re.findall(r"\d+\.\d+ ± \d+\.\d+", glance))
  quoted |= {b for b in re.findall(r"\*\*([^*]+)\*\*", glance)}
  assert len(quoted) >= 6, quoted  # The table is there and quotes the studies.
  missing = sorted(q for q in quoted if q not in generated)
  assert not missing, (f"{missing}: in the at-a-glance table but in no generated table of "
                       "docs/reproduction.md; update the claims table to the studies' results")


def _fake_listops_runs(tmp_path, an, monkeypatch, predict):
  """Run folders of the study's layout whose 'predictor' answers ``predict[name](tree,
  label)`` for each test expression (no model trained: the analysis's bookkeeping alone)."""
  runs = tmp_path / "runs"
  # Not read: a masked-LM first phase; a run without a best checkpoint; a curriculum's
  # short phase whose run has not finished.
  for name in [*predict, "tiny_ran_s0_spt4_pretrain", "tiny_star_s2", "tiny_ran_s1_cur8_short"]:
    (runs / name / "best").mkdir(parents=True)
  (runs / "tiny_star_s2" / "best").rmdir()

  class Fake:
    def __init__(self, path):
      self.name = os.path.basename(path)
      self.config = an.listops_config.get_config(
          "ran,tiny" + (",short" if self.name.endswith("_short") else ""))
      self.config.seed = int(an.RUN_NAME.match(self.name)["seed"])

    def predict_examples(self, examples):
      out = []
      for ex in examples:
        tree = an.synthetic.listops_tree(ex["input_ids"][ex["mask"]])
        out.append({"label": predict[self.name](tree, an.synthetic.listops_value(tree))})
      return out

  loaded = []
  monkeypatch.setattr(an.inference, "load",
                      lambda path, progress=None: loaded.append(path) or Fake(path))
  return runs, loaded


def test_listops_analysis_scores_the_readers_and_each_runs_predictions(tmp_path, monkeypatch):
  """experiments/listops_analysis.py: the readers' accuracies (the tiny task is 3 levels
  deep, so the 3-level reader is the label), a run predicting the labels and one predicting
  the level-0 reader, each checked against the study's stored accuracy; folders that are
  not finished runs are not read; the table goes between the docs' markers only."""
  an = _script("listops_analysis")
  c = an.listops_config.get_config("ran,tiny")
  c.seed = 0
  readers, parsed = an.readers_row(c, 16, 0)
  assert readers["levels"]["3"] == 1.0 and readers["num_test"] == 16
  assert readers["fit_examples"] == c.data.num_train
  level0 = an.reader(parsed["modes"], 0)
  assert [level0(t) for t in parsed["trees"][:5]] == [parsed["modes"][t[0]]
                                                     for t in parsed["trees"][:5]]
  runs, loaded = _fake_listops_runs(tmp_path, an, monkeypatch, {
      "tiny_ran_s0": lambda tree, label: label,
      "tiny_star_s0_spt4": lambda tree, label: level0(tree),
      "tiny_star_s0_cur8": lambda tree, label: label,
      "tiny_star_s0_cur8_min4": lambda tree, label: label,
      "tiny_star_s0_cur8_short": lambda tree, label: level0(tree)})
  for name, acc in [("tiny_ran_s0", 1.0), ("tiny_star_s0_spt4", readers["levels"]["0"]),
                    ("tiny_star_s0_cur8", 1.0), ("tiny_star_s0_cur8_min4", 1.0)]:
    (runs / name / "result.json").write_text(json.dumps({"test": {"accuracy": acc},
                                                         "num_test": 16}))
  doc = tmp_path / "doc.md"
  doc.write_text(f"before\n{an.MARKERS[0]}\nold\n{an.MARKERS[1]}\nafter\n")
  result = an.main(["--tiny", "--seeds", "0", "--workdir", str(runs), "--out",
                    str(tmp_path / "an.json"), "--docs", str(doc)])
  assert sorted(os.path.basename(p) for p in loaded) == [
      "tiny_ran_s0", "tiny_star_s0_cur8", "tiny_star_s0_cur8_min4", "tiny_star_s0_cur8_short",
      "tiny_star_s0_spt4"]
  assert result["readers"] == [readers]
  oracle, cur, mixed, first, zero = result["runs"]
  # The short phase on the long expressions: no study result to check; read as it predicts.
  assert first["first_phase"] and first["study_accuracy"] is None
  assert first["accuracy"] == readers["levels"]["0"] and not cur["first_phase"]
  assert (mixed["curriculum_steps"], mixed["train_min_len"], cur["train_min_len"]) == (8, 4, 0)
  assert (oracle["model"], oracle["pretrain_steps"], zero["model"], zero["pretrain_steps"]) == (
      "ran", 0, "star", 4)
  assert (cur["curriculum_steps"], cur["pretrain_steps"], zero["curriculum_steps"]) == (8, 0, 0)
  assert oracle["accuracy"] == 1.0 and oracle["accuracy_where_level0_wrong"] == 1.0
  assert oracle["agrees_level0"] == readers["levels"]["0"]
  assert oracle["agrees_level1"] == readers["levels"]["1"]
  assert zero["agrees_level0"] == 1.0 and zero["accuracy"] == readers["levels"]["0"]
  assert zero["accuracy_where_level0_right"] == 1.0
  assert zero["accuracy_where_level0_wrong"] == 0.0
  assert json.loads((tmp_path / "an.json").read_text())["sizes"]["tiny"] == result
  text = doc.read_text()
  assert text.startswith(f"before\n{an.MARKERS[0]}\n") and text.endswith(
      f"{an.MARKERS[1]}\nafter\n") and "old" not in text
  assert "| ran, tiny, seed 0 | 100.0% |" in text
  assert "| star, tiny, seed 0, self-pretrained 4 steps |" in text
  assert "| star, tiny, seed 0, curriculum 8 steps | 100.0% |" in text
  assert "| star, tiny, seed 0, curriculum 8 steps, trained from 4 tokens | 100.0% |" in text
  assert "| star, tiny, seed 0, curriculum 8 steps, its short first phase |" in text
  # By windows spanned (tiny expressions fit one 128-token window): the level-1 rule's
  # rate and the count are those of the readers' own predictions.
  [(n, b)] = oracle["by_windows"].items()
  wrong = parsed["predictions"][0] != parsed["labels"]
  assert (n, b["expressions"], b["level0_wrong"]) == ("1", 16, int(wrong.sum()))
  assert b["accuracy_where_level0_wrong"] == 1.0
  assert b["level1_where_level0_wrong"] == np.mean(
      parsed["predictions"][1][wrong] == parsed["labels"][wrong])
  assert zero["by_windows"]["1"]["accuracy_where_level0_wrong"] == 0.0
  assert f"| ran, tiny, seed 0 | 100.0% ({100 * b['level1_where_level0_wrong']:.1f}%, " in text
  # --short: the readers and the same runs on the short expressions (8-32 tokens here), kept
  # beside the size's entry; no stored accuracy applies there, none is checked.
  loaded.clear()
  short = an.main(["--tiny", "--short", "--seeds", "0", "--workdir", str(runs), "--out",
                   str(tmp_path / "an.json"), "--docs", str(doc)])
  c_short = an.listops_config.get_config("ran,tiny,short")
  c_short.seed = 0
  readers_short, parsed_short = an.readers_row(c_short, 16, 0)
  assert short["size"] == "tiny_short" and short["readers"] == [readers_short]
  test_short = an.study_lib.test_split(c_short, 16)
  assert max(len(test_short[i]["input_ids"]) for i in range(16)) <= 32 and len(loaded) == 5
  assert [r["accuracy"] for r in short["runs"]] == [
      1.0, 1.0, 1.0, *[np.mean([level0(t) == y for t, y in zip(
          parsed_short["trees"], parsed_short["labels"])])] * 2]
  assert all(r["study_accuracy"] is None for r in short["runs"])
  saved = json.loads((tmp_path / "an.json").read_text())["sizes"]
  assert saved == {"tiny": result, "tiny_short": short}
  text = doc.read_text()
  assert "| star, tiny, on short expressions, seed 0, curriculum 8 steps |" in text
  assert "the tiny runs on short expressions: 8-32 tokens" in text
  # A later call keeps the rows of runs whose folders it no longer finds (the results file
  # outlives run folders), replaces the rows of those it reads again; another --num_test
  # replaces the whole entry.
  gone = runs / "tiny_star_s0_cur8_min4"
  shutil.move(str(gone), str(tmp_path / "aside"))
  loaded.clear()
  again = an.main(["--tiny", "--seeds", "0", "--workdir", str(runs), "--out",
                   str(tmp_path / "an.json"), "--docs", str(doc)])
  assert len(loaded) == 4 and again["runs"] == result["runs"]
  assert again["num_test"] == 16 and again["fit_examples"] == 0
  assert doc.read_text() == text
  # --only scores the runs whose folder names it matches (no other run is loaded) and keeps
  # every other row as the results file has it; a pattern matching no run is refused before
  # anything is scored or written.
  loaded.clear()
  only = an.main(["--tiny", "--seeds", "0", "--only", "tiny_star_s0_cur8*", "--workdir",
                  str(runs), "--out", str(tmp_path / "an.json"), "--docs", str(doc)])
  assert sorted(os.path.basename(p) for p in loaded) == ["tiny_star_s0_cur8",
                                                        "tiny_star_s0_cur8_short"]
  assert only["runs"] == result["runs"] and doc.read_text() == text
  before = (tmp_path / "an.json").read_text()
  with pytest.raises(SystemExit):
    an.main(["--tiny", "--seeds", "0", "--only", "tiny_star_s9*,nothing", "--workdir",
             str(runs), "--out", str(tmp_path / "an.json"), "--docs", str(doc)])
  with pytest.raises(SystemExit):  # Rows scored on 16 expressions cannot be kept beside 12.
    an.main(["--tiny", "--seeds", "0", "--only", "tiny_star_s0_cur8*", "--num_test", "12",
             "--workdir", str(runs), "--out", str(tmp_path / "an.json"), "--docs", str(doc)])
  assert (tmp_path / "an.json").read_text() == before and len(loaded) == 2
  other_size = an.main(["--tiny", "--seeds", "0", "--num_test", "12", "--workdir", str(runs),
                        "--out", str(tmp_path / "an3.json")])
  # (Runs tested on 16 expressions are skipped at 12: the short phase alone is scored.)
  assert [r["first_phase"] for r in other_size["runs"]] == ["_short"]
  shutil.copy(tmp_path / "an.json", tmp_path / "an4.json")
  fewer = an.main(["--tiny", "--seeds", "0", "--num_test", "12", "--workdir", str(runs),
                   "--out", str(tmp_path / "an4.json")])
  assert [r["workdir"] for r in fewer["runs"]] == [r["workdir"] for r in other_size["runs"]]
  shutil.move(str(tmp_path / "aside"), str(gone))
  # --docs_only redraws the same tables from the results file, scoring nothing.
  loaded.clear()
  doc.write_text(f"before\n{an.MARKERS[0]}\nold\n{an.MARKERS[1]}\nafter\n")
  assert an.main(["--tiny", "--docs_only", "--out", str(tmp_path / "an.json"), "--docs",
                  str(doc)]) is None
  assert doc.read_text() == text and not loaded
  with pytest.raises(SystemExit):
    an.main(["--tiny", "--docs_only", "--out", str(tmp_path / "an.json")])
  # A run whose predictions do not give the study's accuracy is an error naming it.
  (runs / "tiny_ran_s0" / "result.json").write_text(json.dumps({"test": {"accuracy": 0.5},
                                                                "num_test": 16}))
  with pytest.raises(SystemExit, match="tiny_ran_s0: the test accuracy recomputed here"):
    an.main(["--tiny", "--seeds", "0", "--workdir", str(runs), "--out",
             str(tmp_path / "an2.json")])
  assert not (tmp_path / "an2.json").exists()
  # A run whose config gives another test split than the readers' is refused, not scored.
  other = dict(parsed, labels=(parsed["labels"] + 1) % 10)
  with pytest.raises(SystemExit, match="tiny_ran_s0: its config's test split is not"):
    an.run_row(str(runs / "tiny_ran_s0"), other, {"test": {"accuracy": 1.0}}, c)


@pytest.mark.long
def test_listops_analysis_reads_a_trained_run_as_the_study_scored_it(tmp_path):
  """The real prediction path (inference.load + Predictor.predict_examples) on a run the
  tiny study trained: the analysis's accuracy is the study's (the script checks it)."""
  listops = _script("listops_study")
  rows = listops.main(["--tiny", "--models", "star", "--steps", "4", "--workdir",
                       str(tmp_path / "lo"), "--out", str(tmp_path / "lo.json")])
  an = _script("listops_analysis")
  result = an.main(["--tiny", "--seeds", "0", "--workdir", str(tmp_path / "lo"), "--out",
                    str(tmp_path / "an.json")])
  assert [r["accuracy"] for r in result["runs"]] == [rows[0]["test"]["accuracy"]]
