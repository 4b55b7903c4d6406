"""What the reproduction studies share: early-stopped training through the trainer, the test
split, the best checkpoint's test metrics and inference time, resumable result files.

Every study of ``experiments/`` (masked_summation.py, listops_study.py, ran_ablations.py)
trains with ``longtext_jax.train.train_and_evaluate`` (no loop of its own) and times with the
benchmark harness ``longtext_jax.train.benchmark``:

* :func:`train_early_stopped` calls the trainer in chunks of ``train.eval_every`` steps (a
  resumed run continues bitwise, the trainer's own checkpoints carry the state and the data
  position) and stops when the dev metric has not improved for ``patience`` evaluations;
  the trainer's best checkpoint (``train.best_metric``) is the early-stopped model.
* :func:`test_split` is a fresh sample of a generated source: the 'eval' split of the same
  config under another seed (the generators derive every split from ``config.seed``).
* :func:`evaluate_best` restores ``workdir/best`` and reports the test metrics and the
  inference time of one evaluation batch.
* :func:`run_cached` makes a study resumable: each finished run leaves ``result.json`` in its
  workdir and is not run again; an unfinished one resumes from its latest checkpoint.
* :func:`open_clock` / :func:`add_clock` keep each run's wall seconds across the calls that
  trained it (``workdir/study_clock.json``), so a run stopped and resumed reports its whole
  training time, not the last call's (a SIGKILLed call: up to its last saved progress).
"""
from __future__ import annotations

import copy
import json
import os
import signal
import socket
import sys
import time
from typing import Any, Callable

import jax
import numpy as np

from longtext_jax import data as data_lib
from longtext_jax import fileio
from longtext_jax import procinfo
from longtext_jax import plot as plot_lib
from longtext_jax.train import benchmark as harness
from longtext_jax.train import checkpointing
from longtext_jax.train import loop

TEST_SEED_OFFSET = 7919  # The test split of seed s is the eval split of seed s + this.


def eval_history(workdir: str) -> list[dict[str, Any]]:
  """The run's eval records from ``metrics.jsonl`` by step (a re-logged step: its last one)."""
  if not os.path.exists(os.path.join(workdir, "metrics.jsonl")):
    return []
  return [r for r in plot_lib.read_metrics(workdir) if r["split"] == "eval"]


def latest_checkpoint_step(workdir: str) -> int:
  """The newest step under ``workdir/checkpoints`` (0 when none)."""
  directory = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(directory):
    return 0
  steps = [int(name) for name in os.listdir(directory) if name.isdigit()]
  return max(steps, default=0)


CLOCK_FILE = "study_clock.json"


def read_clock(workdir: str) -> dict[str, float]:
  """The wall seconds spent on ``workdir`` by earlier calls, by phase (empty when none)."""
  path = os.path.join(workdir, CLOCK_FILE)
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)


def add_clock(workdir: str, phase: str, seconds: float) -> float:
  """Adds ``seconds`` to ``phase``'s total in ``workdir/study_clock.json`` (written
  atomically), closing this process's :func:`open_clock` record; returns the new total."""
  clock = read_clock(workdir)
  clock[phase] = clock.get(phase, 0.0) + seconds
  clock[phase + "_calls"] = clock.get(phase + "_calls", 0) + 1
  if _is_mine(clock.get(phase + "_open")):
    clock.pop(phase + "_open")
  fileio.write_text_atomic(os.path.join(workdir, CLOCK_FILE), json.dumps(clock))
  return clock[phase]


def _is_mine(record: Any) -> bool:
  return (isinstance(record, dict) and record.get("pid") == os.getpid()
          and record.get("host") == socket.gethostname())


def _last_saved_time(workdir: str) -> float:
  """When ``workdir`` last recorded progress: the newest modification time of its
  metrics.jsonl and of the entries of checkpoints/ and its steps (0 when none)."""
  directory = os.path.join(workdir, "checkpoints")
  paths = [os.path.join(workdir, "metrics.jsonl"), directory]
  if os.path.isdir(directory):
    paths += [os.path.join(directory, name) for name in os.listdir(directory)]
  times = []
  for path in paths:
    try:
      times.append(os.stat(path).st_mtime)
    except OSError:
      pass
  return max(times, default=0.0)


def open_clock(workdir: str, phase: str) -> float:
  """Records that this process starts ``phase`` on ``workdir`` now (``<phase>_open``: its
  wall-clock start, pid and host).

  A call killed before its ``finally`` (SIGKILL, a lost machine) leaves that record; the
  next call adds the killed one's time up to the workdir's last recorded progress (its
  newest metrics line or checkpoint, :func:`_last_saved_time`: what was kept of it; the
  time after that was lost work and is not counted) and counts it in
  ``<phase>_killed_calls``. A record of a process of this host that still runs is left
  alone (a second launch on the same workdir, which the trainer's lock refuses). Returns
  the seconds added (0 when none)."""
  os.makedirs(workdir, exist_ok=True)
  clock = read_clock(workdir)
  record = clock.get(phase + "_open")
  if (isinstance(record, dict) and record.get("host") == socket.gethostname()
      and procinfo.pid_state(int(record.get("pid", 0))) == "running"):
    return 0.0
  added = 0.0
  if isinstance(record, dict):
    added = max(0.0, _last_saved_time(workdir) - float(record["start"]))
    clock[phase] = clock.get(phase, 0.0) + added
    clock[phase + "_calls"] = clock.get(phase + "_calls", 0) + 1
    clock[phase + "_killed_calls"] = clock.get(phase + "_killed_calls", 0) + 1
  clock[phase + "_open"] = {"start": time.time(), "pid": os.getpid(),
                            "host": socket.gethostname()}
  fileio.write_text_atomic(os.path.join(workdir, CLOCK_FILE), json.dumps(clock))
  return added


def _best(history, metric: str, mode: str):
  sign = 1.0 if mode == "min" else -1.0
  return min(history, key=lambda r: (sign * r[metric], r["step"]))


class Preempted(SystemExit):
  """A study stopped by SIGTERM (exit status 0: a clean stop) or Ctrl-C (130) after its
  current run saved; rerunning the command resumes from the saved runs."""

  def __init__(self, message: str, code: int = 0):
    print(message, file=sys.stderr)
    super().__init__(code)


def checkpoint_every(eval_every: int, per_eval: int) -> int:
  """``train.checkpoint_every`` for ``per_eval`` checkpoints per dev evaluation (the studies'
  ``--checkpoints_per_epoch`` / ``--checkpoints_per_eval``): a run killed without SIGTERM
  resumes from its last checkpoint, so more of them lose less; results do not change."""
  if per_eval < 1 or eval_every % per_eval:
    raise ValueError(f"{per_eval} checkpoints per evaluation: must be a positive divisor of "
                     f"the {eval_every} steps between two evaluations")
  return eval_every // per_eval


def add_checkpoints_flag(parser, unit: str = "eval") -> str:
  """Adds ``--checkpoints_per_<unit>`` (default 1: one checkpoint per dev evaluation) to a
  study's ``parser``; returns the flag's name, for ``set_checkpoint_every``."""
  flag = f"--checkpoints_per_{unit}"
  parser.add_argument(flag, type=int, default=1,
                      help=f"checkpoints per dev evaluation ({unit}), dividing its steps "
                           "(default: one, at the evaluation; 3: one every third of those steps): "
                           "a run killed without SIGTERM "
                           "resumes from the last, so on a CPU more of them lose less. "
                           "Changes no result: a resumed run trains as one uninterrupted run")
  return flag


def set_checkpoint_every(parser, config, args, flag: str) -> None:
  """Sets ``config.train.checkpoint_every`` from the parsed ``flag`` of
  ``add_checkpoints_flag``; a value that does not divide ``train.eval_every`` is a parser
  error naming the flag (call it before the run is trained or skipped: a bad flag fails
  the first run, before anything is written)."""
  try:
    config.train.checkpoint_every = checkpoint_every(
        config.train.eval_every, getattr(args, flag.lstrip("-")))
  except ValueError as e:
    parser.error(f"{flag}: {e}")


def train_early_stopped(config, workdir: str, patience: int,
                        log: Callable[[str], None] = print) -> dict[str, Any]:
  """Trains ``config`` with the trainer until the dev metric stops improving.

  The dev metric is ``config.train.best_metric`` on the 'eval' split, evaluated every
  ``train.eval_every`` steps; training stops after ``patience`` evaluations without a new
  best, or at ``train.num_steps``. Chunked calls of ``train_and_evaluate`` resume from the
  trainer's checkpoints, so the steps run are those of one uninterrupted run as long as the
  learning rate does not depend on ``train.num_steps``: with a schedule other than
  'constant' the run is made in one call (no early stop; the best checkpoint still wins).

  Args:
    config: the experiment config (``train.best_metric`` set; ``train.checkpoint_every``
      dividing ``train.eval_every``: every evaluation falls on a checkpoint, and more
      checkpoints between two evaluations lose less of a run killed there).
    workdir: the run directory (resumed when it has checkpoints).
    patience: evaluations without improvement before stopping (<= 0: never stop early).
    log: progress messages.

  Returns:
    ``best_step``, ``best_dev`` (the dev metric there), ``stopped_step``, ``early_stopped``,
    ``train_s`` (wall seconds of this call's training), ``train_s_total`` (of every call
    that trained this workdir, from ``study_clock.json``; a call killed by SIGKILL adds
    its time up to the workdir's last saved progress, :func:`open_clock`) and
    ``eval_history``.

  Raises:
    ValueError: ``train.best_metric`` is unset, or checkpoints do not fall on evaluations.
    Preempted: SIGTERM or Ctrl-C came (the current run saved); exits the study with
      status 0 (SIGTERM) or 130 (Ctrl-C).
  """
  t = config.train
  if not t.best_metric:
    raise ValueError("train_early_stopped needs config.train.best_metric (the dev metric)")
  if t.checkpoint_every <= 0 or t.eval_every % t.checkpoint_every:
    raise ValueError(f"config.train.checkpoint_every={t.checkpoint_every} must divide "
                     f"train.eval_every={t.eval_every} to stop early on an evaluation")
  chunked = config.optim.schedule == "constant" and patience > 0
  t0 = time.perf_counter()
  early = False
  # SIGTERM or Ctrl-C ends the study, not just the current chunk: the trainer saves and
  # passes the signal on to this handler, and no further chunk starts.
  stop = loop.Preemption()
  try:
    with stop:
      while not stop.requested:
        done = latest_checkpoint_step(workdir)
        history = [r for r in eval_history(workdir) if r["step"] <= done]
        if history:
          best = _best(history, t.best_metric, t.best_mode)
          since = sum(1 for r in history if r["step"] > best["step"])
          if chunked and since >= patience:
            early = True
            break
        if done >= t.num_steps:
          break
        # The next evaluation step (a run stopped by SIGTERM may have saved between two).
        target = (min(t.num_steps, (done // t.eval_every + 1) * t.eval_every) if chunked
                  else t.num_steps)
        c = copy.deepcopy(config)
        c.unlock()
        c.train.num_steps = target
        log(f"  train {os.path.basename(workdir)}: steps {done} -> {target}")
        t_chunk = time.perf_counter()
        open_clock(workdir, "train_s")
        try:
          loop.train_and_evaluate(c, workdir)
        finally:  # A preempted or failed chunk's time counts too.
          add_clock(workdir, "train_s", time.perf_counter() - t_chunk)
  except KeyboardInterrupt:
    # The first Ctrl-C: the run saved, and the Preemption passed it on as it ended. Not a
    # second one while a run trained (it stopped unsaved, inside the trainer's handler).
    if not stop.requested:
      raise
  if stop.requested:  # 130 after a Ctrl-C, as the shell reports an interrupt.
    raise Preempted(f"{stop.label}: {workdir} saved at step {latest_checkpoint_step(workdir)}; "
                    "rerun the same command to resume",
                    code=130 if signal.SIGINT in stop.signals else 0)
  history = [r for r in eval_history(workdir) if r["step"] <= latest_checkpoint_step(workdir)]
  best = _best(history, t.best_metric, t.best_mode)
  # Of tied evaluations the trainer keeps the newest as its best checkpoint (the one
  # evaluate_best tests); patience above counted from the first.
  best_step = max(r["step"] for r in history if r[t.best_metric] == best[t.best_metric])
  return {"best_step": best_step, "best_dev": best[t.best_metric],
          "stopped_step": history[-1]["step"], "early_stopped": early,
          "train_s": time.perf_counter() - t0,
          "train_s_total": read_clock(workdir).get("train_s", 0.0),
          "eval_history": [{"step": r["step"], t.best_metric: r[t.best_metric]}
                           for r in history]}


def test_split(config, num_examples: int) -> data_lib.ArraySource:
  """A test split of a generated source, independent of its train and dev splits.

  Args:
    config: the experiment config of a generated source (masked_summation, listops,
      long_tasks, ...).
    num_examples: test examples.

  Returns:
    The 'eval' split of ``config`` with ``seed + TEST_SEED_OFFSET`` and ``num_eval =
    num_examples``.
  """
  c = copy.deepcopy(config)
  c.unlock()
  c.seed = config.seed + TEST_SEED_OFFSET
  c.data.num_eval = num_examples
  c.data.num_train = min(c.data.num_train, 2)  # Not used; keep the generator's work small.
  task = loop.make_run(c, "/nonexistent").task
  source = data_lib.build_splits(c, task)["eval"]
  return source


def evaluate_best(config, workdir: str, test: data_lib.ArraySource, time_repeats: int = 3
                  ) -> dict[str, Any]:
  """The test metrics and inference time of the best checkpoint in ``workdir/best``.

  Args:
    config: the run's config.
    workdir: the run directory (with ``best/``).
    test: the test split.
    time_repeats: timed calls of the jitted forward pass on one evaluation batch (after a
      warm-up), median reported.

  Returns:
    ``test`` (metrics by name), ``infer_ms_per_batch`` (one batch of
    ``data.eval_batch_size`` examples, jit, after warm-up), ``eval_batch_size`` and
    ``num_params``.
  """
  run = loop.make_run(config, workdir)
  batches = list(data_lib.eval_batches(test, config.data.eval_batch_size, 0, 1,
                                       config.data.pad_multiple, config.data.pad_offset))
  example = {k: v[:2] for k, v in batches[0].items() if k != "example_id"}
  spec = loop.build_state(run, example)
  params = checkpointing.load_param_subtrees(
      os.path.join(workdir, "best"), -1, list(spec.abstract.params), spec.abstract.params,
      spec.abstract)
  eval_step = jax.jit(run.in_context(loop.make_eval_step(run.model, run.task)))
  metrics = loop.evaluate(eval_step, params, iter(batches), run.mesh, run.task)
  forward = jax.jit(lambda p, b: run.model.apply({"params": p}, b, train=False))
  batch = {k: v for k, v in batches[0].items() if k != "example_id"}
  seconds, _ = harness.time_fn(forward, (params, batch), repeats=time_repeats, warmup=1)
  return {"test": {k: float(v) for k, v in metrics.items()},
          "infer_ms_per_batch": 1000 * seconds,
          "eval_batch_size": config.data.eval_batch_size,
          "num_params": int(sum(np.size(x) for x in jax.tree.leaves(params)))}


def stored_result(workdir: str) -> dict[str, Any] | None:
  """The result :func:`run_cached` stored in ``workdir`` (None when it has none yet)."""
  path = os.path.join(workdir, "result.json")
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def run_cached(workdir: str, fn: Callable[[], dict[str, Any]],
               key: dict[str, Any] | None = None) -> dict[str, Any]:
  """``fn()``'s result, stored as ``workdir/result.json``; read back instead of rerunning.

  ``key`` (the settings that make the run: steps, patience, test size) is stored with the
  result as ``study_key``; a stored result whose key differs is refused, naming each field,
  rather than reported under a command whose flags did not produce it. Results stored
  without a key (before 2 December 2026) are read as they are."""
  path = os.path.join(workdir, "result.json")
  result = stored_result(workdir)
  if result is not None:
    stored = result.get("study_key") or {}
    changed = {k: (stored[k], v) for k, v in (key or {}).items()
               if k in stored and stored[k] != v}
    if changed:
      raise ValueError(
          f"{path} holds a run made with other settings: "
          + ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in sorted(changed.items()))
          + f"; rerun with the flags that made it (its command: {result.get('command')!r}) "
          "or move the run folder aside to train it again")
    return result
  os.makedirs(workdir, exist_ok=True)
  result = fn()
  if key:
    result["study_key"] = dict(key)
  fileio.write_json_atomic(path, result)
  return result


def train_and_test(config, workdir: str, patience: int, num_test: int,
                   log: Callable[[str], None] = print,
                   command: str | None = None,
                   record: dict[str, Any] | None = None) -> dict[str, Any]:
  """One study run (cached in ``workdir/result.json``): early-stopped training, then the
  best checkpoint's test metrics and inference time; see :func:`train_early_stopped` and
  :func:`evaluate_best`. ``command`` (the study's command line) is recorded in the result
  as ``command``: the call that finished the run (earlier calls may have trained it);
  ``record`` (what made the run besides its config, e.g. the pretraining it started from)
  is stored in the result as it is, and read back with it (:func:`stored_result`)."""
  def run():
    t0 = time.perf_counter()
    trained = train_early_stopped(config, workdir, patience, log)
    t_test = time.perf_counter()
    tested = evaluate_best(config, workdir, test_split(config, num_test))
    test_s = time.perf_counter() - t_test
    # wall_s: this call; wall_s_total: every call's training plus this test.
    return {**trained, **tested, "num_test": num_test, "test_s": test_s,
            "wall_s": time.perf_counter() - t0,
            "wall_s_total": trained["train_s_total"] + test_s,
            "device": device_string(), "host": harness.host(),
            "allocator": harness.allocator(), "jax": jax.__version__,
            **({"command": command} if command else {}), **(record or {})}
  return run_cached(workdir, run, key={"train.num_steps": int(config.train.num_steps),
                                       "patience": int(patience), "num_test": int(num_test)})


def merge_results(path: str, rows: list[dict], keys: tuple[str, ...], order=None
                  ) -> list[dict]:
  """The rows of a study's results file ``path`` (``{'runs': [...]}``) whose ``keys`` (e.g.
  model, seed, size) differ from every new row's, then ``rows``: a call that trains one cell
  must not drop the others' results (their run folders may be gone), and a new row replaces
  an old row of the same cell (a list-valued key, e.g. overrides, compared as a tuple).
  Sorted by ``order(row)`` when given."""
  kept = []
  if os.path.exists(path):
    with open(path) as f:
      kept = json.load(f)["runs"]

  def cell(r):
    return tuple(tuple(v) if isinstance(v, list) else v for v in (r.get(k) for k in keys))

  new = {cell(r) for r in rows}
  merged = [r for r in kept if cell(r) not in new] + list(rows)
  return sorted(merged, key=order) if order is not None else merged


def write_between_markers(path: str, markers: tuple[str, str], lines: list[str],
                          what: str = "table") -> None:
  """Replaces the text from ``markers[0]`` to ``markers[1]`` (both kept) of the markdown file
  ``path`` by ``lines``; the rest of the (hand-written) document is kept byte for byte, and
  it is written whole or not at all. A file without both markers, in that order, is an
  error naming the file and the markers: nothing is appended to a document by surprise."""
  begin, end = markers
  with open(path, encoding="utf-8") as f:
    text = f.read()
  if begin not in text or end not in text or text.index(begin) > text.index(end):
    raise ValueError(f"{path}: no {what} markers ({begin} ... {end}) to write between")
  text = (text[:text.index(begin)] + "\n".join([begin, *lines, end])
          + text[text.index(end) + len(end):])
  fileio.write_text_atomic(path, text)


def device_string() -> str:
  """The device the run used, in words (platform, kind, visible CPU cores)."""
  d = jax.devices()[0]
  return f"{d.platform.upper()} {getattr(d, 'device_kind', '')} ({os.cpu_count()} cores)"
