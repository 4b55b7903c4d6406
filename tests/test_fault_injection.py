"""Fault injection into small runs (issue 15): non-finite updates, damaged checkpoints, two
writers on one workdir, stale locks, SIGTERM at start and mid-run, Ctrl-C, failed launches.

Every run here is the tiny masked-summation config, 4 steps, a checkpoint every step. One
uninterrupted run (the ``template`` fixture) is the reference: each test copies its workdir,
injects a fault, relaunches ``train.train_and_evaluate`` and compares with it bitwise.
``compile_steps`` and ``build_state`` are memoised per config for the module (the fields of
``train`` other than ``num_steps`` do not change them), so a relaunch costs no compile;
everything else a launch does is the real code path. docs/reliability.md tabulates the cases.
"""
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
import tqdm

from conftest import ROOT, load_config
from test_checkpoint_fallback import _abstract, _damage, _save_steps, _state
from longtext_jax import train
from longtext_jax.train import checkpointing, loop, workdir_lock
from longtext_jax.train import logging as log_lib

STEPS = 4


def _config(**overrides):
  """The tiny run: ``overrides`` as {'section__field': value}."""
  c = load_config("masked_summation.py", "transformer,tiny")
  c.train.update(progress_bar=False, num_steps=STEPS, checkpoint_every=1,
                 keep_checkpoints=STEPS, eval_every=2, log_every=1)
  for key, value in overrides.items():
    section, field = key.split("__")
    c[section][field] = value
  return c


def _memoised(fn):
  """``fn(run, ...)`` computed once per config (``train.*`` except num_steps ignored)."""
  cache = {}

  def cached(run, *args):
    cfg = json.loads(run.config.to_json_best_effort())
    cfg["train"] = {"num_steps": cfg["train"]["num_steps"]}
    key = json.dumps(cfg, sort_keys=True)
    if key not in cache:
      cache[key] = fn(run, *args)
    return cache[key]
  return cached


@pytest.fixture(scope="module", autouse=True)
def reuse_compiled_steps():
  """The jitted steps and the jitted init (``loop.compile_steps``, ``loop.build_state``) are
  made once per config for the module: equal configs give equal ones, and jax caches their
  compiled code by the function."""
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(loop, "compile_steps", _memoised(loop.compile_steps))
    mp.setattr(loop, "build_state", _memoised(loop.build_state))
    yield


def _restore(workdir, step):
  """The saved TrainState of ``step`` as host arrays (Orbax directly, no checks)."""
  mngr = ocp.CheckpointManager(os.path.join(workdir, "checkpoints"),
                               item_handlers=checkpointing._handlers(),
                               options=ocp.CheckpointManagerOptions(read_only=True))
  restored = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
  mngr.close()
  return jax.device_get(restored["state"])


def _assert_trees_equal(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_array_equal(x, y)


def _records(workdir):
  """metrics.jsonl without the timing field; each (step, split) must appear once."""
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    records = [json.loads(line) for line in f]
  keys = [(r["step"], r["split"]) for r in records]
  assert len(keys) == len(set(keys)), f"duplicated records: {keys}"
  return [{k: v for k, v in r.items() if k != "steps_per_sec"} for r in records]


def _steps(directory):
  return sorted(int(n) for n in os.listdir(directory) if n.isdigit())


def _snapshot(workdir):
  """{relative path: bytes} of every file (the lock file aside)."""
  out = {}
  for root, _, files in os.walk(workdir):
    for name in files:
      path = os.path.join(root, name)
      if name != workdir_lock.LOCK_NAME:
        out[os.path.relpath(path, workdir)] = open(path, "rb").read()
  return out


@pytest.fixture(scope="module")
def template(tmp_path_factory):
  """The uninterrupted run: (workdir, final metrics, final TrainState, metrics records)."""
  workdir = tmp_path_factory.mktemp("template") / "run"
  final = train.train_and_evaluate(_config(), str(workdir))
  assert _steps(workdir / "checkpoints") == list(range(1, STEPS + 1))
  return workdir, final, _restore(workdir, STEPS), _records(workdir)


def _copy(template, tmp_path, until=STEPS):
  """The template's workdir as if the run had been killed right after saving ``until``."""
  workdir = tmp_path / "run"
  shutil.copytree(template[0], workdir)
  for step in range(until + 1, STEPS + 1):
    shutil.rmtree(workdir / "checkpoints" / str(step))
  return workdir


# ---------------------------------------------------------------------------------------------
# Non-finite values: the step's guard, then whole runs.


class _Scale(nn.Module):
  """outputs = x * w, w of shape [3] (ones at init)."""

  @nn.compact
  def __call__(self, batch, train=False):
    del train
    return batch["x"] * self.param("w", nn.initializers.ones, (3,))


@dataclasses.dataclass
class _Task:
  """loss = sum(fn(outputs)), weight 1."""
  fn: object

  def loss(self, outputs, batch):
    del batch
    return jnp.sum(self.fn(outputs)), jnp.asarray(1.0)


_EXPLODING_STATE = optax.GradientTransformation(
    init=lambda params: {"moment": jnp.ones(())},
    update=lambda g, s, p=None: (g, {"moment": s["moment"] * 1e38 * 1e38}))

# name: (x, loss fn, optimizer, expected finiteness of (loss, gradient, update)).
STEP_CASES = {
    "fine": ([1.0, 2.0, 3.0], jnp.square, optax.sgd(0.1), (True, True, True)),
    "nan_loss": ([1.0, np.nan, 3.0], jnp.square, optax.sgd(0.1), (False, False, False)),
    "non_finite_gradient": ([0.0, 0.0, 0.0], lambda o: jnp.sqrt(jnp.abs(o)), optax.sgd(0.1),
                            (True, False, False)),
    "parameters_overflow": ([1.0, 2.0, 3.0], jnp.square, optax.adam(1e39),
                            (True, True, False)),
    "optimizer_state_overflow": ([1.0, 2.0, 3.0], jnp.square, _EXPLODING_STATE,
                                 (True, True, False)),
}


@pytest.mark.parametrize("case", sorted(STEP_CASES))
def test_a_non_finite_step_leaves_the_state_as_it_was(case):
  """Loss, gradient, new parameters and new optimizer state are all checked: a step that
  makes any of them NaN/Inf returns ok=False and the input state unchanged."""
  x, fn, tx, finite = STEP_CASES[case]
  batch = {"x": jnp.asarray(x)}
  model = _Scale()
  params = model.init(jax.random.key(0), batch)["params"]
  state = loop.init_from_params(params, tx)
  step = jax.jit(loop.make_train_step(model, _Task(fn), tx))
  new_state, metrics = jax.device_get(step(state, batch, jax.random.key(1)))
  assert (np.isfinite(metrics["loss"]), np.isfinite(metrics["grad_norm"]),
          bool(metrics["update_finite"])) == finite
  assert bool(metrics["ok"]) == all(finite)
  if all(finite):
    assert int(new_state.step) == 1
    assert not np.array_equal(new_state.params["w"], state.params["w"])
  else:
    _assert_trees_equal(new_state, jax.device_get(state))


@pytest.mark.parametrize("loss,grad_norm,what", [
    (1.5, 2.0, r"parameters or optimizer state after the update \(is "
               r"optim.learning_rate=1e\+39 too large\?\)"),
    (np.nan, 2.0, "loss or gradient"), (1.5, np.inf, "loss or gradient")],
    ids=["update", "nan_loss", "inf_gradient"])
def test_the_loop_stops_naming_the_step_what_overflowed_and_the_last_checkpoint(
    tmp_path, loss, grad_norm, what):
  """The host side of the guard (fast twin of the long end-to-end test below)."""
  config = _config(optim__learning_rate=1e39)
  run = types.SimpleNamespace(config=config, workdir=str(tmp_path))
  ckpt = checkpointing.Checkpointer(str(tmp_path), keep=3)
  late = loop._LateMetrics(run, log_lib.MetricWriter(str(tmp_path), enabled=False), ckpt,
                           tqdm.tqdm(disable=True))
  bad = {"loss": np.float32(loss), "grad_norm": np.float32(grad_norm), "weight": 1.0,
         "ok": False, "update_finite": False}
  late.push(1, bad)
  with pytest.raises(train.NonFiniteLossError,
                     match=rf"non-finite {what} at step 1 .*no checkpoint was saved"):
    late.resolve()
  ckpt.save(2, _state(2), {"position": 2})
  late.push(3, bad)
  with pytest.raises(train.NonFiniteLossError, match=rf"non-finite {what} at step 3 .*the "
                     rf"last good checkpoint is step 2 in {tmp_path}/checkpoints"):
    late.resolve()
  ckpt.close()


@pytest.mark.long  # ~15 s on 2 CPU cores (compiles the step at lr=1e39); fast twins above.
def test_huge_learning_rate_saves_nothing_non_finite_and_a_relaunch_resumes_exactly(
    template, tmp_path):
  """optim.learning_rate=1e39, warmup_steps=0, checkpoint_every=1: step 1's loss and
  gradient are finite but its update overflows every parameter. Nothing is saved, the error
  names the step, the checkpoint it calls good is finite, and a relaunch with a sane learning
  rate resumes from it and ends bitwise equal to the uninterrupted run."""
  huge = _config(optim__learning_rate=1e39, optim__warmup_steps=0)
  what = (r"non-finite parameters or optimizer state after the update \(is "
          r"optim.learning_rate=1e\+39 too large\?\) at step {} \(loss=[^,]+, grad_norm=")
  with pytest.raises(train.NonFiniteLossError,
                     match=what.format(1) + r".*not applied and no checkpoint was saved"):
    train.train_and_evaluate(huge, str(tmp_path / "fresh"))
  assert _steps(tmp_path / "fresh" / "checkpoints") == []

  workdir = _copy(template, tmp_path, until=2)
  huge.train.allow_config_change = "optim.learning_rate,optim.warmup_steps"  # A resume.
  with pytest.raises(train.NonFiniteLossError,
                     match=what.format(3) + r".*the last good checkpoint is step 2 in "):
    train.train_and_evaluate(huge, str(workdir))
  assert _steps(workdir / "checkpoints") == [1, 2]
  for step in (1, 2):
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(_restore(workdir, step)))
  assert not (workdir / workdir_lock.LOCK_NAME).exists()  # Released on the exception.

  final = train.train_and_evaluate(
      _config(train__allow_config_change="optim.learning_rate,optim.warmup_steps"),
      str(workdir))
  assert final == template[1]
  _assert_trees_equal(_restore(workdir, STEPS), template[2])
  assert _records(workdir) == template[3]


def test_a_non_finite_checkpoint_is_set_aside_as_damaged(tmp_path):
  """Checkpoints written before the update guard may hold Inf: restore skips them."""
  _save_steps(tmp_path, steps=(1, 2))
  inf = _state(3).replace(params=jax.tree.map(lambda x: x * jnp.inf, _state(3).params))
  ckpt = checkpointing.Checkpointer(str(tmp_path), keep=10)
  ckpt.save(3, inf, {"position": 3})
  ckpt.close()
  ckpt = checkpointing.Checkpointer(str(tmp_path), keep=10)
  restored = ckpt.restore_latest(_abstract(_state(0)))
  ckpt.close()
  assert restored.step == 2 and [(d.step, d.tag) for d in restored.damaged] == [
      (3, "non-finite")]
  assert "params/dense/bias holds NaN or Inf" in restored.damaged[0].reason
  assert (tmp_path / checkpointing.DAMAGED_DIR / "3-non-finite").is_dir()


# ---------------------------------------------------------------------------------------------
# Damaged checkpoints through the trainer.

DAMAGE = [("truncated", "truncated"), ("garbled", "garbled"),
          ("emptied_manifest", "empty-manifest"),
          ("missing_state_metadata", "missing-state-metadata"),
          ("missing_data_metadata", "missing-data-metadata"),
          ("empty_step_folder", "empty"),
          ("unfinished_save", None)]  # kill -9 during Orbax's save: only its tmp folder.


@pytest.mark.parametrize("kind,tag", DAMAGE)
def test_damaged_newest_checkpoint_falls_back_and_the_run_continues_exactly(
    template, tmp_path, caplog, kind, tag):
  """The newest step is damaged: the relaunch names it and why, moves it aside, resumes from
  the step before and ends bitwise equal to the uninterrupted run, each metric logged once."""
  workdir = _copy(template, tmp_path)
  newest = workdir / "checkpoints" / str(STEPS)
  if kind == "unfinished_save":
    os.rename(newest, workdir / "checkpoints" / f"{STEPS}.orbax-checkpoint-tmp-1700000000")
  else:
    _damage(str(newest), kind)
  with caplog.at_level("WARNING"):
    final = train.train_and_evaluate(_config(), str(workdir))
  assert final == template[1]
  _assert_trees_equal(_restore(workdir, STEPS), template[2])
  assert _records(workdir) == template[3]
  damaged_dir = workdir / checkpointing.DAMAGED_DIR
  if tag is None:
    assert not damaged_dir.exists()
  else:
    assert os.listdir(damaged_dir) == [f"{STEPS}-{tag}"]
    assert any(f"step {STEPS} is damaged ({tag})" in r.getMessage() for r in caplog.records)
    assert any(f"Resumed from {workdir}/checkpoints/{STEPS - 1}, the newest intact step"
               in r.getMessage() for r in caplog.records)


def test_all_checkpoints_damaged_stops_naming_them_unless_told_to_start_afresh(
    template, tmp_path):
  """Every step damaged: an error naming each, nothing moved, config.json kept, the lock
  released. With train.start_fresh_if_all_damaged they are moved aside and the run starts
  from step 0 (and then matches the uninterrupted run)."""
  workdir = _copy(template, tmp_path)
  for step in range(1, STEPS + 1):
    _damage(str(workdir / "checkpoints" / str(step)), "empty_step_folder")
  before = _snapshot(workdir)
  with pytest.raises(checkpointing.AllCheckpointsDamagedError,
                     match=r"(?s)nothing was moved:\n  step 4 \(empty\).*step 1 \(empty\)"):
    train.train_and_evaluate(_config(train__keep_checkpoints=9), str(workdir))
  after = _snapshot(workdir)
  for name in ("config.json", "metrics.jsonl"):
    assert after[name] == before[name]
  # (Only a new, empty TensorBoard event file: the metric writer opens before the restore.)
  assert {k for k in after if not k.startswith("tensorboard")} == {
      k for k in before if not k.startswith("tensorboard")}
  assert not (workdir / workdir_lock.LOCK_NAME).exists()

  final = train.train_and_evaluate(_config(train__start_fresh_if_all_damaged=True),
                                   str(workdir))
  assert sorted(os.listdir(workdir / checkpointing.DAMAGED_DIR)) == [
      f"{s}-empty" for s in range(1, STEPS + 1)]
  assert final == template[1]
  _assert_trees_equal(_restore(workdir, STEPS), template[2])
  assert _records(workdir) == template[3]


def test_damaged_best_checkpoint_is_moved_aside_and_a_new_best_saved_after(template,
                                                                           tmp_path, caplog):
  workdir = _copy(template, tmp_path)
  (best,) = _steps(workdir / "best")
  _damage(str(workdir / "best" / str(best)), "truncated")
  with caplog.at_level("WARNING"):
    train.train_and_evaluate(_config(), str(workdir))  # Finished: nothing left to train.
  assert (workdir / checkpointing.DAMAGED_DIR / f"best-{best}-truncated").is_dir()
  assert _steps(workdir / "best") == []
  assert any(f"best/{best} (truncated) moved to" in r.getMessage() for r in caplog.records)
  ckpt = checkpointing.Checkpointer(str(workdir), 3, best_metric="mse", best_mode="min")
  ckpt.save_best(9, _state(9), {"position": 9}, {"mse": 1e9})  # Worse, but the only one.
  ckpt.close()
  assert _steps(workdir / "best") == [9]


# ---------------------------------------------------------------------------------------------
# One writer per workdir.


def test_second_launch_is_refused_naming_the_holder_and_force_lock_takes_over(
    template, tmp_path, caplog):
  """A launch on a workdir that a live run holds fails before writing anything, naming
  the holder; config.train.force_lock takes the lock over (with a warning) and the taking run
  writes its config.json only once its checks pass."""
  workdir = _copy(template, tmp_path)
  first = workdir_lock.acquire(str(workdir))  # This process plays the running first launch.
  before = _snapshot(workdir)
  who = (rf"in use by another run: host {socket.gethostname()}, pid {os.getpid()}, since "
         rf"{first.info.started} \(command: ")
  with pytest.raises(workdir_lock.WorkdirLockedError, match=who + r".*force_lock=True"):
    train.train_and_evaluate(_config(optim__learning_rate=0.1), str(workdir))
  assert _snapshot(workdir) == before  # Neither config.json nor metrics.jsonl touched.

  with caplog.at_level("WARNING"):
    final = train.train_and_evaluate(_config(train__force_lock=True), str(workdir))
  assert final == template[1]
  assert any("forced takeover" in r.getMessage() and f"pid {os.getpid()}" in r.getMessage()
             for r in caplog.records)
  assert json.loads((workdir / "config.json").read_text())["train"]["force_lock"] is True
  assert not (workdir / workdir_lock.LOCK_NAME).exists()  # Released by the run on exit.
  first.release()  # Taken over: nothing of its own left to remove.
  assert _records(workdir) == template[3]  # The finished run reported its stored eval.


def test_stale_lock_of_a_killed_run_is_reported_and_taken_over(template, tmp_path, caplog):
  workdir = _copy(template, tmp_path)
  dead = subprocess.Popen(["true"])
  dead.wait()  # Its pid no longer runs: the lock it "left" is stale.
  info = workdir_lock.LockInfo(host=socket.gethostname(), pid=dead.pid, pid_start=-1,
                               started="2026-01-01T00:00:00Z", command="killed run",
                               token="dead")
  (workdir / workdir_lock.LOCK_NAME).write_text(json.dumps(dataclasses.asdict(info)))
  with caplog.at_level("WARNING"):
    train.train_and_evaluate(_config(), str(workdir))
  assert any(f"stale lock: its process {dead.pid}" in r.getMessage() for r in caplog.records)
  assert not (workdir / workdir_lock.LOCK_NAME).exists()


def test_only_process_0_takes_the_lock(tmp_path, monkeypatch):
  held = workdir_lock.acquire(str(tmp_path))
  monkeypatch.setattr(jax, "process_index", lambda: 1)
  with loop.contextlib.ExitStack() as stack:  # Another process's setup: no lock, no error.
    assert loop.setup_workdir(_config(), str(tmp_path), stack) == str(tmp_path)
  assert workdir_lock.read_lock(str(tmp_path / workdir_lock.LOCK_NAME)) == held.info
  held.release()


def test_launch_failing_its_checks_keeps_the_previous_config_json(template, tmp_path):
  """Another architecture than the checkpoint's: refused by the config check, and (let
  through) by the checkpoint's shapes; either way config.json and data_info.json stay the
  previous run's and nothing is moved aside."""
  workdir = _copy(template, tmp_path)
  before = [(workdir / f).read_bytes() for f in ("config.json", "data_info.json")]
  other = _config()
  other.model.encoder.num_layers = 3  # Another architecture than the checkpoint's.
  with pytest.raises(ValueError, match=r"another config .*config.model.encoder.num_layers: "
                                       r"2 -> 3.*allow_config_change=model.encoder.num_layers$"):
    train.train_and_evaluate(other, str(workdir))
  other.train.allow_config_change = "model.encoder.num_layers"
  with pytest.raises(ValueError, match="does not match the model"):
    train.train_and_evaluate(other, str(workdir))
  assert [(workdir / f).read_bytes() for f in ("config.json", "data_info.json")] == before
  assert not (workdir / "config.json.tmp").exists()
  assert not (workdir / checkpointing.DAMAGED_DIR).exists()  # A mismatch is not damage.


@pytest.mark.parametrize("field,value", [("data__batch_size", 4), ("seed", 7),
                                         ("optim__learning_rate", 0.5),
                                         ("data__num_train", 40)])
def test_resuming_under_a_config_that_trains_something_else_is_refused(template, tmp_path,
                                                                      field, value):
  """A resume (or a relaunch of a finished run) whose config changes what is trained (the
  batch, whose data position is a batch index; the seed; the learning rate; the data) stops
  naming the field, before anything in the workdir is written; how long, how often and where
  a run trains may change, and allow_config_change lets a named field through."""
  workdir = _copy(template, tmp_path, until=2)
  snapshot = {f: (workdir / f).read_bytes() for f in ("config.json", "data_info.json",
                                                       "metrics.jsonl")}
  config = _config()
  if field == "seed":
    config.seed = value
  else:
    section, name = field.split("__")
    config[section][name] = value
  key = field.replace("__", ".")
  with pytest.raises(ValueError, match=rf"config.{key}: .* -> {value!r}"):
    train.train_and_evaluate(config, str(workdir))
  assert {f: (workdir / f).read_bytes() for f in snapshot} == snapshot
  assert _steps(workdir / "checkpoints") == [1, 2]
  if field == "optim__learning_rate":  # Let through by name: the run resumes at step 2.
    config.train.allow_config_change = key
    config.train.update(eval_every=1, log_every=2, keep_checkpoints=2)  # Always allowed.
    train.train_and_evaluate(config, str(workdir))
    assert _steps(workdir / "checkpoints") == [STEPS - 1, STEPS]
    saved = json.loads((workdir / "config.json").read_text())
    assert saved["optim"]["learning_rate"] == value


# ---------------------------------------------------------------------------------------------
# SIGTERM and honest reports.


def _last_json(out):
  return json.loads(out.strip().splitlines()[-1])


def test_sigterm_during_startup_stops_before_the_first_step(template, tmp_path, monkeypatch,
                                                            capsys):
  """SIGTERM while the run starts (here: while its steps compile) is handled from the start:
  the run stops cleanly before its first step and reports the stored eval with its step."""
  workdir = _copy(template, tmp_path, until=2)
  previous = signal.getsignal(signal.SIGTERM)
  compile_steps = loop.compile_steps

  def compile_then_sigterm(run, spec):
    os.kill(os.getpid(), signal.SIGTERM)
    return compile_steps(run, spec)

  monkeypatch.setattr(loop, "compile_steps", compile_then_sigterm)
  final = train.train_and_evaluate(_config(), str(workdir))
  out = capsys.readouterr().out
  eval_at_2 = next(r for r in template[3] if r["split"] == "eval" and r["step"] == 2)
  eval_at_2 = {k: v for k, v in eval_at_2.items() if k not in ("step", "split")}
  assert final == eval_at_2
  assert _last_json(out) == {"step": 2, "eval": eval_at_2, "eval_step": 2,
                             "steps_this_run": 0, "preempted": True}
  assert "Stopped by SIGTERM at step 2 (relaunch to resume); last eval at step 2" in out
  assert _steps(workdir / "checkpoints") == [1, 2]
  assert signal.getsignal(signal.SIGTERM) == previous


def _signals_in_step_3(monkeypatch, signums):
  """Sends ``signums`` to this process while step 3 is being dispatched."""
  compile_steps = loop.compile_steps

  def compile_and_signal_in_step(run, spec):
    train_step, eval_step = compile_steps(run, spec)

    def step_and_signal(state, *args):
      if int(jax.device_get(state.step)) == 2:
        for signum in signums:
          os.kill(os.getpid(), signum)
      return train_step(state, *args)
    return step_and_signal, eval_step

  monkeypatch.setattr(loop, "compile_steps", compile_and_signal_in_step)


def test_sigterm_mid_run_saves_that_step_and_reports_the_eval_it_really_has(
    template, tmp_path, monkeypatch, capsys):
  """SIGTERM during step 3: step 3 is saved (equal to the uninterrupted run's), and the report
  says it stopped at step 3 with the evaluation of step 2, not "final eval at step 3"."""
  workdir = _copy(template, tmp_path, until=2)
  _signals_in_step_3(monkeypatch, [signal.SIGTERM])
  train.train_and_evaluate(_config(), str(workdir))
  report = _last_json(capsys.readouterr().out)
  assert (report["step"], report["eval_step"], report["preempted"]) == (3, 2, True)
  assert _steps(workdir / "checkpoints") == [1, 2, 3]
  _assert_trees_equal(_restore(workdir, 3), _restore(template[0], 3))


def test_sigterm_is_passed_on_to_the_callers_handler(template, tmp_path, monkeypatch):
  """A SIGTERM the trainer handled (saved, returned) reaches the handler that was there
  before it, once: a sweep calling train_and_evaluate in a loop learns that the job is
  being stopped instead of starting its next run."""
  workdir = _copy(template, tmp_path, until=2)
  _signals_in_step_3(monkeypatch, [signal.SIGTERM])
  calls = []
  previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
  try:
    with loop.Preemption() as outer:
      train.train_and_evaluate(_config(), str(workdir))
      assert outer.requested and _steps(workdir / "checkpoints") == [1, 2, 3]
    assert calls == [signal.SIGTERM]  # The outer Preemption passed it on in turn.
  finally:
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def python_sigint():
  """Python's own Ctrl-C handler (``default_int_handler``) for the test, as in a terminal or
  a notebook (a test worker may have SIGINT ignored), restored after."""
  previous = signal.signal(signal.SIGINT, signal.default_int_handler)
  yield
  signal.signal(signal.SIGINT, previous)


def test_ctrl_c_saves_the_step_then_interrupts_and_the_resume_is_exact(
    template, tmp_path, monkeypatch, capsys, python_sigint):
  """Ctrl-C during step 3 (a notebook's interrupt, a terminal's): step 3 is saved, equal to
  the uninterrupted run's, the report says so, and then the caller sees KeyboardInterrupt
  (a cell shows it interrupted, a sweep stops). It used to stop at once, saving nothing
  after the last periodic checkpoint. Relaunched, the run ends bitwise equal to the
  template's, metrics.jsonl holding each record once."""
  workdir = _copy(template, tmp_path, until=2)
  previous_term = signal.getsignal(signal.SIGTERM)
  _signals_in_step_3(monkeypatch, [signal.SIGINT])
  with pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(_config(), str(workdir))
  out, err = capsys.readouterr()
  assert "Ctrl-C: the run stops after the current step and saves it" in err
  assert "Stopped by Ctrl-C (SIGINT) at step 3 (relaunch to resume); last eval at step 2" in out
  assert _last_json(out)["preempted"] and _last_json(out)["step"] == 3
  assert _steps(workdir / "checkpoints") == [1, 2, 3]
  _assert_trees_equal(_restore(workdir, 3), _restore(template[0], 3))
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
  assert signal.getsignal(signal.SIGTERM) == previous_term
  monkeypatch.undo()  # The relaunch: no signal; the lock was released.
  final = train.train_and_evaluate(_config(), str(workdir))
  assert final == template[1]
  _assert_trees_equal(_restore(workdir, STEPS), template[2])
  assert _records(workdir) == template[3]


def test_a_second_ctrl_c_stops_at_once_and_the_resume_is_exact(
    template, tmp_path, monkeypatch, capsys, python_sigint):
  """Two Ctrl-C in one step: the second raises KeyboardInterrupt at once, as Python's
  handler would (nothing saved after step 2, no report); the lock is released and the
  relaunch ends bitwise equal to the uninterrupted run."""
  workdir = _copy(template, tmp_path, until=2)
  _signals_in_step_3(monkeypatch, [signal.SIGINT, signal.SIGINT])
  with pytest.raises(KeyboardInterrupt):
    train.train_and_evaluate(_config(), str(workdir))
  assert "Stopped by" not in capsys.readouterr().out
  assert _steps(workdir / "checkpoints") == [1, 2]
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
  monkeypatch.undo()
  assert train.train_and_evaluate(_config(), str(workdir)) == template[1]
  _assert_trees_equal(_restore(workdir, STEPS), template[2])
  assert _records(workdir) == template[3]


def test_preemption_flags_ctrl_c_passes_it_on_and_leaves_an_ignored_sigint_ignored(
    python_sigint, capsys):
  """The flag alone: a first SIGINT sets it (label 'Ctrl-C (SIGINT)'), a second raises at
  once; on exit the first is passed on to the handler that was there (Python's: a
  KeyboardInterrupt after the block). A SIGINT ignored on entry (a background job of a
  non-interactive shell) stays ignored: no flag, no handler installed. An exception leaving
  the block is what the caller sees, not the signal; nested, the inner passes it to the
  outer, which does not print the Ctrl-C message again."""
  with pytest.raises(KeyboardInterrupt):  # Passed on as the block ends.
    with loop.Preemption() as stop:
      os.kill(os.getpid(), signal.SIGINT)
      assert stop.requested and stop.label == "Ctrl-C (SIGINT)"
      with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
  assert capsys.readouterr().err.count("Ctrl-C: the run stops") == 1
  with pytest.raises(ZeroDivisionError):  # The error, not the signal, leaves the block.
    with loop.Preemption():
      os.kill(os.getpid(), signal.SIGINT)
      raise ZeroDivisionError
  capsys.readouterr()
  with pytest.raises(KeyboardInterrupt):
    with loop.Preemption() as outer:
      with loop.Preemption() as inner:
        os.kill(os.getpid(), signal.SIGINT)
      assert inner.requested and outer.requested and outer.label == "Ctrl-C (SIGINT)"
  assert capsys.readouterr().err.count("Ctrl-C: the run stops") == 1
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  with loop.Preemption() as stop:
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.01)
  assert not stop.requested and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
  previous_term = signal.signal(signal.SIGTERM, signal.SIG_DFL)
  try:  # SIGTERM under the default disposition: flagged, nothing passed on (it would kill).
    with loop.Preemption() as stop:
      os.kill(os.getpid(), signal.SIGTERM)
    assert stop.requested and stop.label == "SIGTERM"
  finally:
    signal.signal(signal.SIGTERM, previous_term)


def test_relaunch_with_fewer_steps_than_saved_says_so(template, tmp_path, caplog):
  """num_steps below the restored step: nothing trains, and a warning says the report is
  the saved step's (not a silent "Final eval at step 3" for num_steps=2)."""
  workdir = _copy(template, tmp_path, until=3)
  final = train.train_and_evaluate(_config(train__num_steps=2), str(workdir))
  assert final is not None
  assert "checkpoints/3 is past train.num_steps=2: nothing is trained" in caplog.text
  assert _steps(workdir / "checkpoints") == [1, 2, 3]


@pytest.mark.parametrize("recorded", [True, False])
def test_an_optimizer_built_otherwise_is_a_config_error_not_damage(template, tmp_path,
                                                                   recorded):
  """Resuming with optim.clip_norm 1 -> 0 (let through by allow_config_change) drops a
  transform from the optimizer: a ValueError naming it, whether or not the step has its
  good.json (an unrecorded step's restore errors used to be called damage, and with
  start_fresh_if_all_damaged the intact step was moved aside)."""
  workdir = _copy(template, tmp_path, until=3)
  if not recorded:
    os.remove(workdir / "checkpoints" / "3" / checkpointing.GOOD_FILE)
  config = _config(optim__clip_norm=0.0, train__allow_config_change="optim.clip_norm",
                   train__start_fresh_if_all_damaged=True)
  with pytest.raises(ValueError, match=r"checkpoints/3: the optimizer state differs from "
                                       r"the checkpoint's .*optim.clip_norm"):
    train.train_and_evaluate(config, str(workdir))
  assert _steps(workdir / "checkpoints") == [1, 2, 3]
  assert not (workdir / checkpointing.DAMAGED_DIR).exists()


def test_sigterm_during_a_launch_that_fails_lets_the_error_through(template, tmp_path,
                                                                    monkeypatch):
  """A SIGTERM followed by an error (here: compiling fails) is not passed on to the
  caller's handler, which in the CLI exits 0: the error is what the caller sees."""
  workdir = _copy(template, tmp_path, until=2)

  def signal_then_fail(run, spec):
    del run, spec
    os.kill(os.getpid(), signal.SIGTERM)
    raise ValueError("compilation failed")

  monkeypatch.setattr(loop, "compile_steps", signal_then_fail)
  calls = []
  previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
  try:
    with pytest.raises(ValueError, match="compilation failed"):
      train.train_and_evaluate(_config(), str(workdir))
    assert calls == []
  finally:
    signal.signal(signal.SIGTERM, previous)


def _catches_sigterm(pid):
  """Whether process ``pid`` has a handler for SIGTERM (Linux: SigCgt of /proc/pid/status)."""
  with open(f"/proc/{pid}/status") as f:
    caught = next(line for line in f if line.startswith("SigCgt:")).split()[1]
  return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_cli_sigterm_while_jax_loads_exits_zero(tmp_path):
  """The CLI's own handler covers the seconds before the trainer's (JAX loading): SIGTERM
  sent as soon as the process catches it ends the launch with status 0, nothing written."""
  proc = subprocess.Popen(
      [sys.executable, "-m", "longtext_jax.main",
       "--config=configs/masked_summation.py:transformer,tiny", f"--workdir={tmp_path}/run",
       "--config.train.progress_bar=False"],
      cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env={**os.environ, "PYTHONUNBUFFERED": "1"})
  t0 = time.time()
  while not _catches_sigterm(proc.pid) and time.time() - t0 < 30 and proc.poll() is None:
    time.sleep(0.005)
  proc.send_signal(signal.SIGTERM)
  out, err = proc.communicate(timeout=120)
  assert proc.returncode == 0, err
  assert "SIGTERM before training started: nothing to save" in err, err
  assert not (tmp_path / "run").exists()


def test_resume_check_compares_fields_and_follows_a_moved_run_s_own_tokenizer(tmp_path):
  """check_resume_config alone: the run's own tokenizer file (under <workdir>/tokenizer/,
  recorded by absolute path) may move with the workdir; another file may not; fields the
  recorded config lacks (an older library) are not compared; 'all' skips the check."""
  old = _config()
  old.data.tokenizer.path = "/old/place/run/tokenizer/sentencepiece-100.model"
  (tmp_path / "checkpoints" / "3").mkdir(parents=True)
  recorded = json.loads(old.to_json_best_effort())
  del recorded["train"]["allow_config_change"]  # Written before the field existed.
  (tmp_path / "config.json").write_text(json.dumps(recorded))
  new = _config()
  new.data.tokenizer.path = str(tmp_path / "tokenizer" / "sentencepiece-100.model")
  loop.check_resume_config(new, str(tmp_path))
  new.data.tokenizer.path = str(tmp_path / "tokenizer" / "sentencepiece-200.model")
  with pytest.raises(ValueError, match=r"config.data.tokenizer.path: '/old/place/run/"):
    loop.check_resume_config(new, str(tmp_path))
  new.train.allow_config_change = "all"
  loop.check_resume_config(new, str(tmp_path))
  shutil.rmtree(tmp_path / "checkpoints")  # No checkpoint: a new run, nothing to compare.
  new.train.allow_config_change = ""
  loop.check_resume_config(new, str(tmp_path))
