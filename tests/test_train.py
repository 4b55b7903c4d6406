"""The trainer end to end: learning, exact resume, preemption, NaN, warm start, sharding."""
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import ROOT, load_config, load_script, local_config, run_cli
from longtext_jax import config as config_lib
from longtext_jax import train
from longtext_jax.train import checkpointing


def read_metrics(workdir, split):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [r for r in map(json.loads, f) if r["split"] == split]


def restore_params(workdir, step=None):
  mngr = ocp.CheckpointManager(os.path.join(workdir, "checkpoints"),
                               item_handlers=checkpointing._handlers(),
                               options=ocp.CheckpointManagerOptions(read_only=True))
  step = mngr.latest_step() if step is None else step
  restored = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
  return step, jax.device_get(restored["state"])


def _msum_run(config, workdir, dtype="float32", steps=30, log_every=5):
  """Trains a tiny masked-summation config for ``steps`` steps with compute dtype ``dtype``,
  evaluating at the end; returns (final eval metrics, the losses logged every log_every)."""
  config.train.num_steps = steps
  config.train.log_every = log_every
  config.train.eval_every = steps
  config.model.encoder.dtype = dtype
  config.optim.mu_dtype = dtype
  if dtype == "bfloat16":  # Also exercise the profiler switch once.
    config.train.profile_start_step = 2
    config.train.profile_num_steps = 2
  final = train.train_and_evaluate(config, str(workdir))
  return final, [r["loss"] for r in read_metrics(workdir, "train")]


@pytest.fixture(scope="module")
def fp32_transformer_run(tmp_path_factory):
  """The tiny masked-summation Transformer trained once for this file (float32): (final
  eval metrics, logged training losses, workdir)."""
  config = load_config("masked_summation.py", "transformer,tiny")
  config.train.progress_bar = False
  workdir = tmp_path_factory.mktemp("fp32_transformer")
  return (*_msum_run(config, workdir), workdir)


@pytest.mark.parametrize("encoder", ["transformer", pytest.param("bilstm", marks=pytest.mark.long)])
def test_loss_decreases_on_masked_summation(encoder, tiny_msum, tmp_path, request):
  config = tiny_msum(encoder)
  if encoder == "transformer":  # The run shared with the bf16 test.
    final, losses, _ = request.getfixturevalue("fp32_transformer_run")
  else:
    final, losses = _msum_run(config, tmp_path, steps=40, log_every=10)
  assert losses[-1] < 0.5 * losses[0], losses
  k = config.data.num_masked
  assert final["mse"] < k / 12, final  # Better than always guessing k/2 (MSE = k/12).


def test_progress_bar_in_a_log_file_is_not_redrawn_every_step(tiny_msum, tmp_path, capfd):
  """A run whose stderr is a file (a batch job's log) gets its progress bar drawn at the
  start, around each log record and at the end, not once per step (the loss shown beside
  it must not force a redraw)."""
  config = tiny_msum("transformer")
  config.train.progress_bar = True
  steps = 40
  _msum_run(config, tmp_path, steps=steps, log_every=20)
  err = capfd.readouterr().err
  assert f"{steps}/{steps}" in err and "loss=" in err
  assert err.count("\r") < steps // 2, err.count("\r")


def test_grad_accumulation_equals_full_batch(tiny_msum):
  """Two code paths: 4 micro-batches accumulated inside the step == one batch (same loss,
  same gradient; with SGD(lr=1) the update is exactly minus the gradient)."""
  import optax
  from longtext_jax import build_model, data, tasks
  from longtext_jax.train import loop
  config = tiny_msum("transformer")
  config.data.batch_size = 16
  task = tasks.get_task(config.task)
  model = build_model(config)
  splits = data.build_splits(config, task)
  batch = loop._strip_host_keys(next(data.train_iterator(splits["train"], 16, 0)))
  batch["mask"][3, 10:] = False  # Uneven token counts across micro-batches.
  params = jax.jit(model.init)(jax.random.key(0), batch)["params"]
  tx = optax.sgd(1.0)
  state = loop.TrainState(step=jnp.zeros((), jnp.int32), params=params,
                          opt_state=tx.init(params))
  out = {}
  for accum in (1, 4):
    step = jax.jit(loop.make_train_step(model, task, tx, optax.constant_schedule(1.0), accum))
    out[accum] = step(state, batch, jax.random.key(1))
  np.testing.assert_allclose(out[4][1]["loss"], out[1][1]["loss"], rtol=1e-6)
  for a, b in zip(jax.tree.leaves(out[1][0].params), jax.tree.leaves(out[4][0].params)):
    np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-5)


def test_step_normalises_by_the_weight_also_when_it_sums_below_one(tiny_msum):
  """A task whose weights sum below 1 (here every weight x 0.01) gives the same loss and
  update as the unscaled task: the step divides by the weight, not by max(weight, 1)."""
  import optax
  from longtext_jax import build_model, data, tasks
  from longtext_jax.train import loop
  config = tiny_msum("transformer")
  task = tasks.get_task(config.task)

  class Scaled(type(task)):
    def loss(self, outputs, batch):
      loss_sum, weight = super().loss(outputs, batch)
      return 0.01 * loss_sum, 0.01 * weight

  scaled = Scaled.__new__(Scaled)
  scaled.__dict__.update(task.__dict__)
  model = build_model(config)
  splits = data.build_splits(config, task)
  batch = loop._strip_host_keys(next(data.train_iterator(splits["train"], 16, 0)))
  params = jax.jit(model.init)(jax.random.key(0), batch)["params"]
  tx = optax.sgd(1.0)
  state = loop.init_from_params(params, tx)
  out = [jax.jit(loop.make_train_step(model, t, tx))(state, batch, jax.random.key(1))
         for t in (task, scaled)]
  assert float(out[1][1]["weight"]) < 1.0
  np.testing.assert_allclose(out[1][1]["loss"], out[0][1]["loss"], rtol=1e-5)
  for a, b in zip(jax.tree.leaves(out[0][0].params), jax.tree.leaves(out[1][0].params)):
    np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-5)


def _cli_args(workdir, steps, extra=()):
  return ["--config=configs/masked_summation.py:transformer,tiny", f"--workdir={workdir}",
          f"--config.train.num_steps={steps}", "--config.train.progress_bar=False",
          "--config.train.eval_every=1000", *extra]


def _wait_for(predicate, proc, timeout=120):
  t0 = time.time()
  while not predicate():
    if proc.poll() is not None:
      raise AssertionError(f"process ended early:\n{proc.stderr.read()}")
    if time.time() - t0 > timeout:
      raise AssertionError("timed out")
    time.sleep(0.01)


def test_exact_resume_after_sigkill_from_a_step_recorded_good(tmp_path):
  """N steps straight == killed (SIGKILL) between two saves, then resumed: bitwise-equal
  params. The step resumed from already has its good.json (sizes and SHA-256 of its files,
  what resume verifies): it is written as soon as the save has finished, not at the next
  save, so the step a kill leaves is verified."""
  steps, every = 150, 100  # Saves at 100 and at the end.
  straight, resumed = tmp_path / "straight", tmp_path / "resumed"
  r = run_cli(_cli_args(straight, steps))
  assert r.returncode == 0, r.stderr
  proc = subprocess.Popen(
      [sys.executable, "-m", "longtext_jax.main",
       *_cli_args(resumed, steps, [f"--config.train.checkpoint_every={every}",
                                   "--config.train.log_every=10"])],
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  # good.json of the first save appears while the run trains towards the second (it came
  # with the second save before): kill then, between the two saves.
  _wait_for(lambda: (resumed / "checkpoints" / str(every) / checkpointing.GOOD_FILE).exists(),
            proc)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  killed_at, _ = restore_params(resumed)
  assert killed_at == every and sorted(os.listdir(resumed / "checkpoints")) == [str(every)]
  # Recorded before the final save (which used to write it: the last step logged).
  assert max(r["step"] for r in read_metrics(resumed, "train")) < steps
  assert checkpointing.check_step_dir(str(resumed / "checkpoints" / str(every)))  # Recorded.
  r = run_cli(_cli_args(resumed, steps))
  assert r.returncode == 0, r.stderr
  assert f'"steps_this_run": {steps - killed_at}' in r.stdout
  step_a, a = restore_params(straight)
  step_b, b = restore_params(resumed)
  assert step_a == step_b == steps
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("signum,status", [(signal.SIGTERM, 0), (signal.SIGINT, 130)],
                         ids=["sigterm", "ctrl_c"])
def test_sigterm_or_ctrl_c_to_the_process_group_saves_the_step(tmp_path, signum, status):
  """SIGTERM (a scheduler's) or Ctrl-C (a terminal's) sent to the whole process group of a
  run with two Grain workers, as both are: the trainer saves its current step and reports
  it, then exits 0 (SIGTERM) or 130 (interrupted); no traceback. The workers used to die of
  the Ctrl-C with a KeyboardInterrupt traceback each, and of SIGTERM printing the CLI's
  "SIGTERM before training started" (a spawned worker imports the CLI's module), their
  shared memory reported leaked; now the trainer stops them as it exits."""
  proc = subprocess.Popen(
      [sys.executable, "-m", "longtext_jax.main",
       *_cli_args(tmp_path, 100000, ["--config.train.checkpoint_every=100000",
                                     "--config.train.log_every=1",
                                     "--config.data.num_workers=2"])],
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      start_new_session=True,  # Its own process group, to signal as a terminal does.
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # Not inherited off.
  metrics = tmp_path / "metrics.jsonl"
  _wait_for(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 3, proc)
  os.killpg(proc.pid, signum)
  out, err = proc.communicate(timeout=120)
  assert proc.returncode == status, err
  assert "before training started" not in err  # The trainer passed it on after saving.
  assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
  assert "leaked shared_memory" not in err, err  # The trainer stopped its workers.
  last_logged = max(r["step"] for r in read_metrics(tmp_path, "train"))
  step, _ = restore_params(tmp_path)
  assert step >= last_logged >= 3
  assert json.loads(out.strip().splitlines()[-1])["step"] == step
  label = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C (SIGINT)"
  assert f"Stopped by {label} at step {step} (relaunch to resume)" in out


def _session_processes(sid):
  """{pid: (ppid, command line)} of the live processes of session ``sid``."""
  out = {}
  for name in os.listdir("/proc"):
    if not name.isdigit():
      continue
    try:
      with open(f"/proc/{name}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
      with open(f"/proc/{name}/cmdline", "rb") as f:
        cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
      continue
    if int(fields[3]) == sid and fields[0] != "Z":  # fields: state, ppid, pgrp, session.
      out[int(name)] = (int(fields[1]), cmd)
  return out


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_grain_workers_of_a_killed_trainer_end_on_sigterm(tmp_path):
  """Grain workers ignore SIGTERM while their trainer lives (it stops them); once it is
  gone (SIGKILL) they are orphans, and a SIGTERM ends them: nothing is left running."""
  proc = subprocess.Popen(
      [sys.executable, "-m", "longtext_jax.main",
       *_cli_args(tmp_path, 100000, ["--config.train.checkpoint_every=100000",
                                     "--config.train.log_every=1",
                                     "--config.data.num_workers=2"])],
      cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
  metrics = tmp_path / "metrics.jsonl"
  try:
    _wait_for(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 3, proc)
    group = _session_processes(proc.pid)
    trainers = [p for p, (_, cmd) in group.items() if "longtext_jax.main" in cmd]
    workers = [p for p, (parent, _) in group.items() if parent in trainers
               and p not in trainers]
    assert len(workers) >= 2, group
    for pid in trainers:
      os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)
    t0 = time.time()
    while any(p in trainers for p in _session_processes(proc.pid)) and time.time() - t0 < 30:
      time.sleep(0.05)
    assert set(_session_processes(proc.pid)) >= set(workers)  # Orphaned, still running.
    os.killpg(proc.pid, signal.SIGTERM)
    t0 = time.time()
    while _session_processes(proc.pid) and time.time() - t0 < 30:
      time.sleep(0.05)
    assert not _session_processes(proc.pid), _session_processes(proc.pid)
  finally:
    for pid in _session_processes(proc.pid):
      with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def test_command_mistakes_are_one_line_naming_the_field_not_a_traceback(tmp_path):
  """A misspelt override, a bad config arg, a config file not found and a missing data
  path: exit 1 with one message naming it (predict/evaluate already did this; main printed
  17-56 lines of traceback around it). LONGTEXT_JAX_TRACEBACK=1 brings the traceback back."""
  cases = {
      "misspelt": (_cli_args(tmp_path / "a", 5, ["--config.train.num_stpes=3"]),
                   "error: AttributeError: --config.train.num_stpes: no such config field "
                   "'num_stpes'\nDid you mean \"num_steps\""),
      # The flag that failed, not the first with the same last name (train.num_steps is
      # given too and is valid), and a misspelt middle part.
      "misplaced": (_cli_args(tmp_path / "f", 5, ["--config.model.num_steps=4"]),
                    "error: AttributeError: --config.model.num_steps: no such config field"),
      "middle": (_cli_args(tmp_path / "g", 5, ["--config.trian.log_every=4"]),
                 "error: KeyError: --config.trian.log_every: no such config field 'trian'"),
      "config_arg": ([f"--workdir={tmp_path / 'b'}", "--config=configs/needle.py:tiyn"],
                     "Error whilst parsing config file: ValueError: config arg 'tiyn': "
                     "encoder 'tiyn' is not one of"),
      "no_file": ([f"--workdir={tmp_path / 'c'}", "--config=configs/needel.py:tiny"],
                  "error: OSError: Configuration is not available"),
      "no_data": ([f"--workdir={tmp_path / 'd'}",
                   "--config=configs/text_classification.py:local,tiny"],
                  "error: ValueError: config.data.train_path is empty: pass "
                  "--config.data.train_path=<file or folder>"),
      # Epochs set the steps of a local text run: an explicit step count was dropped
      # without a word (review s35: 5 steps asked, 26 trained); any spelling of the flag.
      "epochs": ([f"--workdir={tmp_path / 'e'}",
                  "--config=configs/text_classification.py:local,encoder=bilstm",
                  "--config.data.train_path=x.jsonl", "-config.train.num_steps=5"],
                 "error: ValueError: --config.train.num_steps: not used while "
                 "train.num_epochs=3 sets the run's steps"),
  }
  # From another folder, a config given by its path in the repository loads (its
  # 'from configs import common' found) as from the root: the same config arg error.
  elsewhere = ([f"--workdir={tmp_path / 'h'}",
                f"--config={os.path.join(ROOT, 'configs', 'needle.py')}:tiyn"],
               cases["config_arg"][1])
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  env.pop("LONGTEXT_JAX_TRACEBACK", None)
  procs = {k: subprocess.Popen([sys.executable, "-m", "longtext_jax.main", *args], cwd=ROOT,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
           for k, (args, _) in cases.items()}
  cases["elsewhere"] = elsewhere
  procs["elsewhere"] = subprocess.Popen(
      [sys.executable, "-m", "longtext_jax.main", *elsewhere[0]], cwd=tmp_path, env=env,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  for name, proc in procs.items():
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, (name, err)
    assert cases[name][1] in err and "Traceback" not in err, (name, err)
  # A launch refused once the trainer started (the data path is read after the workdir is
  # held) leaves no empty workdir behind (new-user review s35); a folder that existed stays.
  assert not (tmp_path / "d").exists()
  nested = [f"--workdir={tmp_path / 'new' / 'exp1'}", cases["no_data"][0][1]]
  assert run_cli(nested).returncode == 1
  assert not (tmp_path / "new").exists()  # The parent it created went too.
  (tmp_path / "d").mkdir()
  r = run_cli(cases["no_data"][0], env_extra={"LONGTEXT_JAX_TRACEBACK": "1"})
  assert r.returncode == 1 and "Traceback" in r.stderr
  assert (tmp_path / "d").is_dir()


def test_config_package_root_is_found_from_the_config_flag(tmp_path):
  """The folder that holds a config file's ``configs`` package, however the flag is
  spelled; none for a file outside such a package (or no --config)."""
  # (In longtext_jax.config, not main: importing main installs its SIGTERM handler, which
  # later tests that signal their own process would run into.)
  ran = os.path.join(ROOT, "configs", "ran", "demo.py")
  for argv in (["m", f"--config={ran}:tiny"], ["m", "--config", ran], ["m", f"-config={ran}"],
               ["m", "--workdir=w", f"--config={os.path.join(ROOT, 'configs', 'needle.py')}"]):
    assert config_lib.config_package_root(argv) == ROOT, argv
  (tmp_path / "own.py").write_text("")
  assert config_lib.config_package_root(["m", f"--config={tmp_path / 'own.py'}"]) is None
  assert config_lib.config_package_root(["m", "--workdir=w"]) is None


def _classification_npz(path, bad_row=None, nan_row=None):
  rng = np.random.default_rng(0)
  arrays = {}
  for split, n in (("train", 32), ("eval", 16)):
    ids = rng.integers(1, 20, (n, 12))
    label = ids[:, 0] % 3
    if split == "train" and bad_row is not None:
      label[bad_row] = 7
    arrays[f"{split}/input_ids"] = ids
    arrays[f"{split}/mask"] = np.ones((n, 12), bool)
    arrays[f"{split}/label"] = label
  np.savez(path, **arrays)


def _classification_config(path):
  config = load_config("masked_summation.py", "transformer,tiny")
  config.data.name = "npz"
  config.data.path = str(path)
  config.task.name = "classification"
  config.task.num_classes = 3
  config.model.input = "tokens"
  config.model.vocab_size = 20
  config.train.best_metric = "accuracy"
  config.train.best_mode = "max"
  config.train.progress_bar = False
  return config


def test_label_outside_label_set_names_the_example(tmp_path):
  _classification_npz(tmp_path / "d.npz", bad_row=5)
  config = _classification_config(tmp_path / "d.npz")
  with pytest.raises(ValueError, match=r"train split: example 5: label=7 is outside"):
    train.train_and_evaluate(config, str(tmp_path / "run"))


def test_nan_loss_stops_with_step_and_keeps_last_good_checkpoint(tmp_path, tiny_msum):
  """One poisoned example (an overflowing target) is drawn at step 7; the run stops naming
  step 7, the update of that step is not applied, and the step-6 checkpoint survives."""
  from longtext_jax import data
  from longtext_jax.data import synthetic
  config = tiny_msum("transformer")
  d = config.data
  arrays = {"train": synthetic.masked_summation(d.num_train, d.seq_len, d.num_masked,
                                                d.feature_dim, seed=1),
            "eval": synthetic.masked_summation(d.num_eval, d.seq_len, d.num_masked,
                                               d.feature_dim, seed=2)}
  it = data.train_iterator(data.ArraySource(arrays["train"]), d.batch_size, config.seed)
  for _ in range(6):
    next(it)
  poisoned = int(next(it)["example_id"][0])  # First example of step 7's batch.
  arrays["train"]["target"][poisoned] = 3e38  # Finite, but its square overflows.
  np.savez(tmp_path / "d.npz", **{f"{s}/{k}": v for s, a in arrays.items()
                                  for k, v in a.items()})
  config.data.name = "npz"
  config.data.path = str(tmp_path / "d.npz")
  config.train.num_steps = 20
  config.train.checkpoint_every = 3
  with pytest.raises(train.NonFiniteLossError, match=r"non-finite .* at step 7 "):
    train.train_and_evaluate(config, str(tmp_path / "run"))
  step, state = restore_params(tmp_path / "run")
  assert step == 6
  assert all(np.isfinite(x).all() for x in jax.tree.leaves(state["params"]))


def test_init_from_copies_encoder_and_rejects_mismatch(tmp_path, tiny_msum,
                                                      fp32_transformer_run):
  src_dir = fp32_transformer_run[2]  # A finished tiny_msum("transformer") run.
  _, src_state = restore_params(src_dir)

  dst = tiny_msum("transformer")
  dst.train.num_steps = 1
  dst.optim.learning_rate = 0.0  # Step 1 leaves the weights as loaded.
  dst.optim.warmup_steps = 0
  dst.init_from.path = str(src_dir)
  dst.seed = 123  # A different init for everything that is not copied.
  train.train_and_evaluate(dst, str(tmp_path / "dst"))
  _, dst_state = restore_params(tmp_path / "dst")
  for name in ("inputs", "encoder"):
    for a, b in zip(jax.tree.leaves(src_state["params"][name]),
                    jax.tree.leaves(dst_state["params"][name])):
      np.testing.assert_array_equal(a, b)
  head_equal = [np.array_equal(a, b) for a, b in zip(
      jax.tree.leaves(src_state["params"]["head"]),
      jax.tree.leaves(dst_state["params"]["head"]))]
  assert not all(head_equal)  # The head is fresh.

  bad = tiny_msum("transformer")
  bad.model.encoder.num_layers = 3
  bad.init_from.path = str(src_dir)
  with pytest.raises(ValueError, match=r"encoder/layers/attn/\w+/\w+' has shape"):
    train.train_and_evaluate(bad, str(tmp_path / "bad"))


def test_best_checkpoint_tracks_best_metric(tmp_path):
  _classification_npz(tmp_path / "d.npz")
  config = _classification_config(tmp_path / "d.npz")
  config.train.num_steps = 20
  config.train.eval_every = 5
  train.train_and_evaluate(config, str(tmp_path / "run"))
  evals = read_metrics(tmp_path / "run", "eval")
  best = max(evals, key=lambda r: (r["accuracy"], -r["step"]))
  assert sorted(os.listdir(tmp_path / "run" / "best")) == [str(best["step"])]


MULTI_DEVICE_SCRIPT = r"""
import json, sys
import jax
sys.path.insert(0, "tests")
from conftest import load_config
from longtext_jax import encoders, train
from longtext_jax.config import encoder_config
assert jax.device_count() == 8, jax.devices()

def config_for(name):
  if encoders.input_kind(encoders.ENCODERS[name]) == "ids":  # BERT family: ids, not features.
    config = load_config("needle.py", "transformer,tiny")
    config.data.bucket_batches = 0
    config.model.input = "ids"
    config.model.encoder = encoder_config(
        name, vocab_size=config.model.vocab_size, hidden_size=32, num_layers=2, num_heads=4,
        intermediate_size=64, chunk_size=32, num_last_layers=3, num_filters=8,
        hidden_dropout_rate=0.0, attention_dropout_rate=0.0, cnn_dropout_rate=0.0,
        cls_id=2, sep_id=3)
    return config
  config = load_config("masked_summation.py", "transformer,tiny")
  config.model.encoder = encoder_config(name, **({"position": "learned", "dropout_rate": 0.0}
                                                 if name == "transformer" else {}))
  return config

def run(name, mesh, workdir, steps=4, constant_lr=False, **train_kw):
  # Trains; returns (training losses, eval losses), the last eval being the final one.
  config = config_for(name)
  config.train.num_steps = steps
  config.train.log_every = 1
  config.train.eval_every = steps
  config.train.progress_bar = False
  config.mesh.fsdp_min_size = 1  # Shard even tiny parameters.
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = mesh
  config.data.eval_batch_size = 10  # Not a multiple of data x fsdp = 4: rounded up to 12.
  config.train.update(train_kw)
  if constant_lr:  # The schedule must not depend on num_steps when a run is extended.
    config.optim.schedule, config.optim.warmup_steps = "constant", 0
  final = train.train_and_evaluate(config, workdir)
  rows = [json.loads(l) for l in open(workdir + "/metrics.jsonl")]
  evals = [r["loss"] for r in rows if r["split"] == "eval"]
  assert evals[-1] == final["loss"], (evals, final)
  return [r["loss"] for r in rows if r["split"] == "train"], evals

out = {}
root = sys.argv[1]
names = [n for n, c in encoders.ENCODERS.items() if encoders.input_kind(c) == "embeddings"]
names.append("chunk_bert")  # The BERT family shares one trunk; ChunkBERT stands for it.
if len(sys.argv) > 2:  # A subset of the encoders (the fast test); all of them otherwise.
  names = sys.argv[2].split(",")
# The Transformer at a constant learning rate: 4 steps on 8 devices (data 2 x fsdp 2 x
# tensor 2), saved, then resumed on 1 device to step 6; the straight 1-device 6-step run,
# evaluated at step 4 too, is the reference of both (its first 4 steps: the 1-device run).
trains, evals = run("transformer", (1, 1, 1), root + "/straight", steps=6, constant_lr=True,
                    eval_every=4)
out["transformer/(1, 1, 1)"] = trains[:4] + evals[:1]
out["straight"] = trains[-2:] + evals[-1:]
trains, evals = run("transformer", (2, 2, 2), root + "/moved", steps=4, constant_lr=True)
out["transformer/(2, 2, 2)"] = trains + evals
trains, evals = run("transformer", (1, 1, 1), root + "/moved", steps=6, constant_lr=True)
out["moved"] = trains[-2:] + evals[-1:]
for name in names:
  full = name == "transformer" and len(sys.argv) == 2  # Pure data / pure fsdp: long test.
  for mesh in [(1, 1, 1), (2, 2, 2)] + ([(8, 1, 1), (1, 8, 1)] if full else []):
    if f"{name}/{mesh}" not in out:
      trains, evals = run(name, mesh, f"{root}/{name}_{'x'.join(map(str, mesh))}",
                          constant_lr=name == "transformer")
      out[f"{name}/{mesh}"] = trains + evals
print("LOSSES", json.dumps(out))
"""


@pytest.mark.parametrize("names", [
    "transformer,chunk_bert",  # A feature encoder and the BERT family.
    pytest.param("", marks=pytest.mark.long)])  # Every feature encoder and ChunkBERT.
def test_sharded_meshes_match_1_device_and_restore_on_fewer_devices(tmp_path, names):
  """8 fake devices: (2, 2, 2), pure data and pure fsdp meshes give the 1-device losses
  (fast: the Transformer and ChunkBERT on (2, 2, 2); long: every mesh and encoder); a
  checkpoint written on 8 devices resumes on 1 and continues like a 1-device run."""
  env = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", "")
             + " --xla_force_host_platform_device_count=8")
  r = subprocess.run([sys.executable, "-c", MULTI_DEVICE_SCRIPT, str(tmp_path)]
                     + ([names] if names else []), cwd=ROOT,
                     env=env, capture_output=True, text=True, timeout=900)
  assert r.returncode == 0, r.stderr[-5000:]
  out = json.loads(r.stdout.split("LOSSES", 1)[1])
  for key, losses in out.items():
    name = key.split("/")[0]
    if name in ("moved", "straight"):
      continue
    assert len(losses) == 5
    np.testing.assert_allclose(losses, out[f"{name}/(1, 1, 1)"], rtol=1e-5, atol=1e-5,
                               err_msg=key)
  np.testing.assert_allclose(out["moved"], out["straight"], rtol=1e-5, atol=1e-5)


def test_bf16_run_trains_and_agrees_with_fp32(tiny_msum, tmp_path, fp32_transformer_run):
  """bf16 compute (fp32 params, softmax, norms, loss) learns and tracks the fp32 run."""
  finals = {"float32": fp32_transformer_run[0]}
  finals["bfloat16"], losses = _msum_run(tiny_msum("transformer"), tmp_path / "bfloat16",
                                         "bfloat16")
  for dtype, run_losses in (("float32", fp32_transformer_run[1]), ("bfloat16", losses)):
    assert run_losses[-1] < 0.5 * run_losses[0], (dtype, run_losses)
  assert abs(finals["bfloat16"]["mse"] - finals["float32"]["mse"]) < 0.1 * finals["float32"]["mse"] + 0.02
  assert any(files for _, _, files in os.walk(tmp_path / "bfloat16" / "profile"))


def test_decay_mask_skips_biases_and_norms_also_when_boxed():
  import flax.linen as nn
  from longtext_jax.train import optimizer
  params = {"dense": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)},
            "ln": {"scale": jnp.ones(2), "bias": jnp.ones(2)},
            "boxed": {"kernel": nn.LogicallyPartitioned(jnp.ones((2, 2)), ("embed", "mlp")),
                      "scale": nn.LogicallyPartitioned(jnp.ones(2), ("embed",))}}
  params["crf"] = {"transitions": jnp.ones((3, 3)), "start": jnp.ones(3), "end": jnp.ones(3)}
  mask = optimizer.decay_mask(params)
  assert mask["crf"] == {"transitions": True, "start": False, "end": False}
  assert mask["dense"] == {"kernel": True, "bias": False}
  assert mask["ln"] == {"scale": False, "bias": False}
  assert jax.tree.leaves(mask["boxed"]["kernel"]) == [True]
  assert jax.tree.leaves(mask["boxed"]["scale"]) == [False]


@pytest.fixture(scope="module")
def golden_demo(tmp_path_factory):
  """The demo config's golden 20-step run (tests/golden/demo_losses.py), trained once per
  test session: (the golden module, its workdir, its training losses).

  Under xdist the two tests using it may land on two workers; they share the session's
  base folder, so the first to take the lock trains and the other reads the finished run
  (~17 s of training saved). A marker file is written only after the run finished."""
  import fcntl  # pylint: disable=import-outside-toplevel
  golden = load_script("tests/golden/demo_losses.py")
  root = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):  # The session's folder, not the worker's.
    root = root.parent
  workdir, done = root / "golden_demo", root / "golden_demo.done"
  with open(root / "golden_demo.lock", "w", encoding="utf-8") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not done.exists():
      shutil.rmtree(workdir, ignore_errors=True)  # A run that failed on the other worker.
      golden.compute(str(workdir))
      done.write_text("trained\n", encoding="utf-8")
  return golden, workdir, golden.read_losses(str(workdir))


def test_make_demo_config_is_a_ran_run_whose_label_lies_beyond_the_first_window(golden_demo):
  """`make demo` trains RAN on generated documents longer than one window, labelled by a
  marker in the last window; its first steps (the golden run) run through the CLI's
  trainer and write an evaluation and a checkpoint."""
  from longtext_jax import data as data_lib  # pylint: disable=import-outside-toplevel
  from longtext_jax import tasks as tasks_lib  # pylint: disable=import-outside-toplevel
  config = load_config("default.py")
  assert config.model.encoder.name == "ran"
  config.data.num_train, config.data.num_eval = 64, 32
  splits = data_lib.build_splits(config, tasks_lib.get_task(config.task))
  lengths = splits["train"].arrays["mask"].sum(1)
  assert lengths.min() > 2 * config.model.encoder.window_size
  golden, workdir, _ = golden_demo
  steps = golden.demo_config().train.num_steps
  (final,) = read_metrics(workdir, "eval")
  assert final["step"] == steps
  assert np.isfinite(final["loss"]) and set(final) >= {"loss", "accuracy"}
  assert os.path.isdir(workdir / "checkpoints" / str(steps))


def test_long_subset_is_evaluated_beside_the_full_eval_split(tmp_path):
  """data.long_threshold adds 'eval_long' (only the longer eval documents), reported as
  'eval_long/<metric>' next to the full split's metrics."""
  from longtext_jax import data as data_lib  # pylint: disable=import-outside-toplevel
  from longtext_jax import tasks as tasks_lib  # pylint: disable=import-outside-toplevel
  config = load_config("needle.py", "transformer,tiny")
  config.data.long_threshold = 80
  config.train.num_steps, config.train.eval_every = 2, 2
  splits = data_lib.build_splits(config, tasks_lib.get_task(config.task))
  real = np.array([int(np.sum(splits["eval"][i]["mask"])) for i in range(len(splits["eval"]))])
  assert 0 < len(splits["eval_long"]) == int((real > 80).sum()) < len(real)
  assert all(np.sum(splits["eval_long"][i]["mask"]) > 80 for i in range(len(splits["eval_long"])))
  final = train.train_and_evaluate(config, str(tmp_path))
  assert {"accuracy", "loss", "eval_long/accuracy", "eval_long/loss"} <= set(final)
  config.data.long_threshold = 10_000
  with pytest.raises(ValueError, match="no eval example is longer"):
    data_lib.build_splits(config, tasks_lib.get_task(config.task))


def test_train_and_eval_steps_compile_once_per_shape_bucket(tmp_path, monkeypatch):
  """Recompile guard: over a run whose batches come in several padded lengths, the train
  step and the eval step are each traced exactly once per batch shape."""
  from longtext_jax.train import loop  # pylint: disable=import-outside-toplevel
  traces = {"train": [], "eval": []}

  def counting(kind, make):
    def make_counted(*args, **kwargs):
      step = make(*args, **kwargs)
      def counted(*a):  # Runs only while jax traces: once per compilation.
        traces[kind].append(a[1]["input_ids"].shape)
        return step(*a)
      return counted
    return make_counted

  monkeypatch.setattr(loop, "make_train_step", counting("train", loop.make_train_step))
  monkeypatch.setattr(loop, "make_eval_step", counting("eval", loop.make_eval_step))
  config = load_config("needle.py", "transformer,tiny")  # Lengths 48-96, padded to 32s.
  config.train.num_steps, config.train.eval_every = 12, 4  # Three evaluations ...
  config.data.eval_batch_size = 4  # ... of 16 batches, some with only shorter documents.
  config.train.progress_bar = False
  train.train_and_evaluate(config, str(tmp_path))
  for kind, shapes in traces.items():
    assert len(set(shapes)) >= 2, (kind, shapes)  # The run did see two buckets ...
    assert len(shapes) == len(set(shapes)), (kind, shapes)  # ... each traced once.


def test_demo_config_first_20_losses_match_the_golden_file(golden_demo):
  """Golden losses: the demo config's (configs/default.py) first 20 training losses equal
  tests/golden/demo_losses.json (regenerate with the command stored there)."""
  golden, _, losses = golden_demo
  with open(golden.GOLDEN) as f:
    want = json.load(f)
  assert len(losses) == len(want["losses"]) == 20
  np.testing.assert_allclose(losses, want["losses"], rtol=1e-5,
                             err_msg=f"regenerate with: {want['command']}")


def test_batch_shards_per_process_and_eval_batch_rounding():
  """Each process needs whole batch shards of its own (data x fsdp a multiple of the
  process count); any eval batch size works on any mesh (rounded up, filler rows)."""
  from longtext_jax.train import sharding  # pylint: disable=import-outside-toplevel
  sharding.check_batch_shards({"data": 4, "fsdp": 1, "tensor": 1}, 2)
  sharding.check_batch_shards({"data": 1, "fsdp": 2, "tensor": 2}, 2)
  sharding.check_batch_shards({"data": 1, "fsdp": 1, "tensor": 8}, 1)
  with pytest.raises(ValueError, match="data x fsdp = 1 shards, not a multiple of the 2"):
    sharding.check_batch_shards({"data": 1, "fsdp": 1, "tensor": 2}, 2)
  with pytest.raises(ValueError, match="data x fsdp = 2 shards, not a multiple of the 4"):
    sharding.check_batch_shards({"data": 2, "fsdp": 1, "tensor": 2}, 4)
  mesh = types.SimpleNamespace(shape={"data": 4, "fsdp": 1, "tensor": 2})
  assert [sharding.eval_batch_size(n, mesh) for n in (1, 4, 10, 12)] == [4, 4, 12, 12]


def test_a_constant_schedule_does_not_depend_on_the_runs_length(caplog):
  """Extending a run (resume with more steps) keeps its rates when the schedule is
  'constant', also while still warming up (a 10-step chunk of a 30-step run with 20 warmup
  steps used to squeeze the warmup into the chunk, then fall back on resume); a decaying
  schedule whose warmup fills the run says so."""
  from longtext_jax.train import optimizer  # pylint: disable=import-outside-toplevel
  optim = ml_collections.ConfigDict(dict(learning_rate=3e-3, warmup_steps=20,
                                         end_lr_factor=0.0, schedule="constant"))
  steps = np.arange(40)
  short = np.asarray([optimizer.learning_rate_schedule(optim, 10)(s) for s in steps])
  long = np.asarray([optimizer.learning_rate_schedule(optim, 30)(s) for s in steps])
  np.testing.assert_array_equal(short, long)
  assert short[10] == pytest.approx(1.5e-3) and short[25] == pytest.approx(3e-3)
  optim.schedule = "cosine"
  with caplog.at_level(logging.WARNING):
    optimizer.learning_rate_schedule(optim, 10)
  assert "never decays" in caplog.text


def test_the_training_log_weights_the_loss_by_tokens_and_shows_the_last_rate():
  """A window of log_every steps logs the loss over all its tokens (2 steps of 256 and 8
  tokens: not the mean of the two step means), the rate of its last step and the mean
  gradient norm; the loss weight itself is not logged."""
  from longtext_jax.train import loop  # pylint: disable=import-outside-toplevel
  written = []
  run = types.SimpleNamespace(config=ml_collections.ConfigDict(
      {"train": {"log_every": 2, "num_steps": 4}, "optim": {"learning_rate": 1.0}}),
      workdir="w")
  writer = types.SimpleNamespace(write=lambda s, split, m: written.append((s, split, m)))
  bar = types.SimpleNamespace(set_postfix=lambda **kw: None)
  late = loop._LateMetrics(run, writer, None, bar)  # pylint: disable=protected-access
  steps = [(2.0, 256.0, 1e-3, 1.0), (4.0, 8.0, 2e-3, 3.0)]
  for s, (loss, weight, lr, grad_norm) in enumerate(steps, 1):
    late.push(s, {"loss": np.float32(loss), "weight": np.float32(weight), "ok": True,
                  "update_finite": True, "learning_rate": np.float32(lr),
                  "grad_norm": np.float32(grad_norm)})
  late.resolve()
  [(step, split, m)] = written
  assert (step, split) == (2, "train") and "weight" not in m
  assert m["loss"] == pytest.approx((2.0 * 256 + 4.0 * 8) / 264)
  assert m["learning_rate"] == pytest.approx(2e-3) and m["grad_norm"] == pytest.approx(2.0)


def test_a_read_only_or_full_file_system_is_one_line_wherever_it_is_met():
  """EROFS / ENOSPC / EDQUOT raised inside another library (Orbax writing a step, the lock
  file's write) print one line naming the path (a traceback before, review s36 L4); other
  errors from other libraries keep theirs."""
  code = ("import errno; from longtext_jax import main\n"
          "for n in (errno.EROFS, errno.ENOSPC, errno.EDQUOT):\n"
          "  e = OSError(n, 'no', '/runs/x/writer.lock')\n"
          "  print(main.user_error_message(e, config_read=True))\n"
          "print(main.user_error_message(OSError(errno.EIO, 'io', '/x'), config_read=True))\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, check=True).stdout.splitlines()
  assert out[:3] == [f"OSError: [Errno {n}] no: '/runs/x/writer.lock'"
                     for n in (30, 28, 122)], out
  assert out[3] == "None", out


def test_the_log_line_after_a_resume_averages_the_same_steps_as_an_uninterrupted_run(
    tiny_msum, tmp_path, monkeypatch):
  """SIGTERM at step 3, between two log lines (log_every 4): the step-4 line after the
  resume averaged step 4 alone (review s36 L1); the unlogged steps' metrics are saved with
  the data position, so every train record equals the uninterrupted run's."""
  from longtext_jax.train import loop  # pylint: disable=import-outside-toplevel

  def config():
    c = tiny_msum("transformer")
    c.train.update(num_steps=8, log_every=4, checkpoint_every=100, eval_every=100)
    return c

  train.train_and_evaluate(config(), str(tmp_path / "whole"))
  compile_steps = loop.compile_steps

  def signal_in_step_3(run, spec):
    train_step, eval_step = compile_steps(run, spec)

    def step(state, *args):
      if int(jax.device_get(state.step)) == 2:
        os.kill(os.getpid(), signal.SIGTERM)
      return train_step(state, *args)
    return step, eval_step

  monkeypatch.setattr(loop, "compile_steps", signal_in_step_3)
  train.train_and_evaluate(config(), str(tmp_path / "part"))
  monkeypatch.setattr(loop, "compile_steps", compile_steps)
  assert sorted(os.listdir(tmp_path / "part" / "checkpoints")) == ["3"]
  train.train_and_evaluate(config(), str(tmp_path / "part"))

  def records(name):
    return [{k: v for k, v in r.items() if k != "steps_per_sec"}
            for r in read_metrics(tmp_path / name, "train")]
  assert [r["step"] for r in records("whole")] == [4, 8]
  assert records("part") == records("whole")


def test_the_saved_log_window_is_a_copy_the_loop_does_not_change(tiny_msum, tmp_path,
                                                                 monkeypatch):
  """The checkpoint's data state is written by a background thread: the log window handed
  to it must not be the list the loop goes on appending to and clearing (a slow file
  system saved the wrong steps: review s36)."""
  from longtext_jax.train import loop  # pylint: disable=import-outside-toplevel
  handed = []
  save = checkpointing.Checkpointer.save

  def spy(self, step, state, data_state):
    window = data_state[loop.LOG_WINDOW_KEY]
    handed.append((step, window, [dict(m) for m in window]))
    return save(self, step, state, data_state)

  monkeypatch.setattr(checkpointing.Checkpointer, "save", spy)
  c = tiny_msum("transformer")
  c.train.update(num_steps=8, log_every=4, checkpoint_every=3, eval_every=100)
  train.train_and_evaluate(c, str(tmp_path))
  assert [(s, len(w)) for s, _, w in handed] == [(3, 3), (6, 2), (8, 0)]
  for _, window, at_save in handed:
    assert window == at_save  # Unchanged since it was handed over.


def test_batch_shapes_warn_once_past_the_limit_naming_the_padding_fields(caplog):
  """A new batch shape past SHAPES_BEFORE_WARNING warns once (every shape is a compilation
  of the train step), naming data.pad_multiple and data.max_tokens; shapes seen again and
  shapes within the limit say nothing."""
  from longtext_jax.train import loop  # pylint: disable=import-outside-toplevel
  config = ml_collections.ConfigDict({"data": {"pad_multiple": 1, "max_tokens": 0}})
  shapes = loop.BatchShapes(config)
  limit = loop.SHAPES_BEFORE_WARNING

  def batch(length):
    return {"input_ids": np.zeros((4, length), np.int32), "label": np.zeros(4, np.int32)}

  with caplog.at_level("WARNING"):
    for length in list(range(1, limit + 1)) * 2:  # Every shape twice: still within.
      shapes.see(batch(length))
    assert not caplog.records
    shapes.see(batch(limit + 1))
    shapes.see(batch(limit + 2))
  assert len(shapes.seen) == limit + 2
  (record,) = caplog.records
  message = record.getMessage()
  assert f"in {limit + 1} shapes" in message and "data.pad_multiple=1 now" in message
  assert "data.max_tokens=0 now" in message and "lengths 1, 2, 3" in message, message


def test_the_trainer_counts_its_batch_shapes(tmp_path, monkeypatch, caplog):
  """The training loop shows every batch it trains on to BatchShapes: texts of three lengths
  padded to each batch's longest (pad_multiple=1) pass a limit of 2 and warn."""
  from longtext_jax.train import loop  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(loop, "SHAPES_BEFORE_WARNING", 2)
  path = tmp_path / "train.jsonl"
  path.write_text("".join(json.dumps({"text": "ab" * n, "label": n % 2}) + "\n"
                          for n in (2, 2, 6, 6, 11, 11) * 2))
  config = local_config(train_path=str(path), eval_path=str(path))
  config.data.batch_size, config.data.eval_batch_size = 2, 4
  config.data.bucket_batches = 6  # The epoch sorted by length: three shapes, two batches each.
  config.train.update(num_steps=6, eval_every=6, checkpoint_every=6, progress_bar=False,
                      best_metric="")
  with caplog.at_level("WARNING"):
    train.train_and_evaluate(config, str(tmp_path / "run"))
  warned = [r.getMessage() for r in caplog.records if "shapes so far" in r.getMessage()]
  assert len(warned) == 1 and "in 3 shapes" in warned[0], warned
