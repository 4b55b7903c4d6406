"""The trainer: ``train_and_evaluate(config, workdir)``, called by the CLI, tests and notebooks.

A run is six named steps, each a function of this module that can be called (and tested)
alone::

    setup_workdir -> build_data -> build_state -> restore_or_init -> train_loop -> final_eval

One step = one optimizer update on one global batch (optionally accumulated over
``optim.grad_accum_steps`` micro-batches inside the jitted step). Losses are sums over units
divided by the total weight of the global batch, so accumulation and data parallelism give
the same update as one big batch.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator, Mapping

from absl import logging
import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tqdm

from longtext_jax import config as config_lib
from longtext_jax import data as data_lib
from longtext_jax import fileio
from longtext_jax import model as model_lib
from longtext_jax import tasks as tasks_lib
from longtext_jax.layers import partitioning
from longtext_jax.layers import remat as remat_lib
from longtext_jax.train import checkpointing
from longtext_jax.train import distributed
from longtext_jax.train import init_from
from longtext_jax.train import logging as log_lib
from longtext_jax.train import loss_scale as loss_scale_lib
from longtext_jax.train import optimizer as optim_lib
from longtext_jax.train import prepare as prepare_lib
from longtext_jax.train import sharding as shard_lib
from longtext_jax.train import workdir_lock


@flax.struct.dataclass
class TrainState:
  """Everything that changes during training (the model and optimizer live outside).

  Attributes:
    step: scalar int32, optimizer updates applied so far.
    params: the model's parameter tree.
    opt_state: the optimizer's state for ``params``.
    loss_scale: the dynamic loss scale of a float16 run (:mod:`loss_scale`), else None
      (no leaves: the checkpoint holds step, params and opt_state only).
  """
  step: jax.Array
  params: Any
  opt_state: Any
  loss_scale: Any = None


class NonFiniteLossError(FloatingPointError):
  """Raised when a step produced a NaN/Inf loss or gradient, or an update that would make a
  parameter or optimizer-state value NaN/Inf; the update was not applied (nor saved)."""


def _all_finite(tree: Any) -> jax.Array:
  """Scalar bool: every floating-point value of ``tree`` is finite (integer leaves pass)."""
  checks = [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
            if jnp.issubdtype(x.dtype, jnp.inexact)]
  return jnp.all(jnp.stack(checks)) if checks else jnp.asarray(True)


# The signals that stop a run with a save: a scheduler's SIGTERM and a first Ctrl-C.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_SIGNAL_LABELS = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C (SIGINT)"}
_passing_on = [False]  # True while a Preemption hands a signal to the handler before it.


class Preemption:
  """Turns SIGTERM and a first Ctrl-C (SIGINT) into a flag (``requested``) that the loop
  checks after every step: the run saves that step and stops.

  A second Ctrl-C stops at once (``KeyboardInterrupt``, nothing saved beyond the last
  checkpoint), as Python's own handler would. A SIGINT that is ignored on entry (``SIG_IGN``:
  a background job of a non-interactive shell) stays ignored. Handlers are installed from
  the main thread only (elsewhere this is a flag that nothing sets).

  On exit the previous handlers are restored and, for each signal that came, when the
  handler it had before is a Python function (an outer ``Preemption``, a sweep's or a
  notebook's own handler, Python's ``default_int_handler`` for SIGINT), the signal is passed
  on to it: code that calls ``train_and_evaluate`` in a loop learns that the job is being
  stopped (the run has saved by then) instead of starting the next run, and a Ctrl-C ends
  as ``KeyboardInterrupt`` after the save (a notebook cell shows it interrupted; the CLI
  exits 130). With the default disposition nothing is passed on (``train_and_evaluate``
  returns).

    with loop.Preemption() as stop:
      for config in sweep:
        train_and_evaluate(config, workdir_of(config))
        if stop.requested:
          break
  """

  def __init__(self):
    self.signals: list[int] = []  # Those that came, first first, each once.
    self._previous: dict[int, Any] = {}

  @property
  def requested(self) -> bool:
    """Whether a stop signal came."""
    return bool(self.signals)

  @property
  def label(self) -> str:
    """What stopped the run, for messages: 'SIGTERM', 'Ctrl-C (SIGINT)' ('' if nothing)."""
    return _SIGNAL_LABELS[self.signals[0]] if self.signals else ""

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for signum in STOP_SIGNALS:
        if signum == signal.SIGINT and signal.getsignal(signum) in (signal.SIG_IGN, None):
          continue
        self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def _handle(self, signum, frame):
    del frame
    if signum == signal.SIGINT and not _passing_on[0]:  # A real Ctrl-C, not one passed on.
      if signal.SIGINT in self.signals:
        raise KeyboardInterrupt  # The second: stop now, as without the trainer.
      print("\nCtrl-C: the run stops after the current step and saves it (Ctrl-C again "
            "stops at once, resuming from the last checkpoint)", file=sys.stderr, flush=True)
    if signum not in self.signals:
      self.signals.append(signum)

  def __exit__(self, exc_type, *exc):
    previous, self._previous = self._previous, {}
    for signum, handler in previous.items():
      signal.signal(signum, handler)
    # With an exception on its way out, that is what the caller must see: the CLI's handler
    # exits 0 (a clean preemption), which would hide a failed launch or a failed save.
    if exc_type is not None:
      return
    for signum in self.signals:
      handler = previous.get(signum)
      if callable(handler):
        _passing_on[0] = True
        try:
          handler(signum, None)
        finally:
          _passing_on[0] = False


def _strip_host_keys(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """The batch without host-only fields (``example_id``) that the model never reads."""
  return {k: v for k, v in batch.items() if k != "example_id"}


# Distinct training batch shapes after which the trainer says what they cost: the jitted
# train step compiles once per shape, so a variable-length source padded to few lengths
# (data.pad_multiple, data.max_tokens) compiles a few times, one padded to every length of
# its longest example (pad_multiple=1) about once a step for its first hundreds of steps.
SHAPES_BEFORE_WARNING = 16


class BatchShapes:
  """The distinct shapes of the training batches seen so far (one compilation each), with
  one warning when there are more than ``SHAPES_BEFORE_WARNING``, naming the fields that
  set them."""

  def __init__(self, config):
    self.config = config
    self.seen: set[tuple] = set()
    self.warned = False

  def see(self, batch: Mapping[str, np.ndarray]) -> None:
    """Records ``batch``'s shapes; warns once when they make a new shape too many."""
    key = tuple(sorted((k, np.shape(v)) for k, v in batch.items()))
    if key in self.seen:
      return
    self.seen.add(key)
    if len(self.seen) > SHAPES_BEFORE_WARNING and not self.warned:
      self.warned = True
      d = self.config.data
      lengths = sorted({shape[1] for seen in self.seen for _, shape in seen if len(shape) > 1})
      logging.warning(
          "The training batches came in %d shapes so far (lengths %s%s): the train step "
          "compiles once for each. Pad batches to fewer lengths (data.pad_multiple=%d now: "
          "e.g. the model's window, or 64-256 tokens) or cut documents shorter "
          "(data.max_tokens=%d now).", len(self.seen), ", ".join(map(str, lengths[:12])),
          ", ..." if len(lengths) > 12 else "", d.pad_multiple, d.max_tokens)


def _first_batch_shapes(source, batch_size, pad_multiple, pad_offset=0):
  """A batch of (at most) the first two examples of ``source``: shapes for ``model.init``."""
  del batch_size
  return data_lib.pipeline.collate([source[i] for i in range(min(len(source), 2))],
                                   pad_multiple, pad_offset=pad_offset)


# ---------------------------------------------------------------------------------------------
# The jitted steps.


def make_train_step(model, task: tasks_lib.Task, tx: optax.GradientTransformation,
                    schedule: optax.Schedule | None = None,
                    grad_accum_steps: int = 1,
                    growth_interval: int = loss_scale_lib.GROWTH_INTERVAL) -> Callable:
  """The training step (not yet jitted): loss, gradient, optimizer update, NaN guard.

  Args:
    model: a flax Module whose ``apply({'params': p}, batch, train=True, rngs=...)`` gives
      the task's outputs.
    task: the task; ``task.loss(outputs, batch)`` gives ``(loss_sum, weight)``.
    tx: the optimizer.
    schedule: the learning-rate schedule, reported as metric ``learning_rate`` (None: not
      reported).
    grad_accum_steps: micro-batches per step; the batch size must be divisible by it.
    growth_interval: with a loss scale, finite steps in a row before it doubles.

  Returns:
    ``step(state, batch, rng) -> (state, metrics)``. ``batch`` maps keys to [B, ...] arrays;
    ``rng`` is folded with ``state.step`` so every step draws new dropout. ``metrics`` holds
    scalars ``loss`` (loss_sum / weight), ``grad_norm``, ``weight``, ``update_finite`` (the
    new parameters and optimizer state hold no NaN/Inf), ``ok`` (loss, gradient and update
    all finite; if not, the returned state is the input state) and ``learning_rate``.

    A state with a ``loss_scale`` (float16 runs, :mod:`loss_scale`) differentiates the
    loss times the scale and divides the gradient by it; a step whose gradient is not
    finite while its loss is is *skipped* (``ok`` stays true: parameters and optimizer
    state unchanged, ``step`` + 1, the scale halved) unless the scale is already at its
    minimum. Such states add metrics ``loss_scale`` (the scale this step used) and
    ``skipped``.
  """

  def loss_fn(params, batch, rng, scale):
    outputs = model.apply({"params": params}, batch, train=True, rngs={"dropout": rng})
    loss_sum, weight = task.loss(outputs, batch)
    scaled = loss_sum if scale is None else loss_sum * scale
    return scaled, (loss_sum, weight)

  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

  def step(state: TrainState, batch, rng):
    rng = jax.random.fold_in(rng, state.step)
    scaler = state.loss_scale
    scale = None if scaler is None else scaler.scale
    if grad_accum_steps == 1:
      (_, (loss_sum, weight)), grads = grad_fn(state.params, batch, rng, scale)
    else:
      def split(x):  # Micro-batch i takes rows i, i + A, ...: each spans every device.
        b = x.shape[0]
        return jnp.swapaxes(x.reshape((b // grad_accum_steps, grad_accum_steps)
                                      + x.shape[1:]), 0, 1)
      micro = jax.tree.map(split, batch)

      def body(carry, inputs):
        i, mb = inputs
        (_, (ls, w)), g = grad_fn(state.params, mb, jax.random.fold_in(rng, i), scale)
        acc_l, acc_w, acc_g = carry
        return (acc_l + ls, acc_w + w, jax.tree.map(jnp.add, acc_g, g)), None

      zeros = jax.tree.map(jnp.zeros_like, state.params)
      (loss_sum, weight, grads), _ = jax.lax.scan(
          body, (jnp.zeros(()), jnp.zeros(()), zeros),
          (jnp.arange(grad_accum_steps), micro))
    # Normalise by the summed weight whatever its scale (a custom task's weights may sum
    # below 1); an all-padding batch (weight 0) has loss_sum 0 and zero gradients.
    denom = jnp.where(weight > 0, weight, 1.0)
    if scale is not None:
      grads = jax.tree.map(lambda g: (g / scale) / denom, grads)
    else:
      grads = jax.tree.map(lambda g: g / denom, grads)
    loss = loss_sum / denom
    grad_norm = optax.global_norm(grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    # A finite loss and gradient can still overflow the parameters (a huge learning rate)
    # or the optimizer's moments: such an update is not applied either.
    update_finite = _all_finite((params, opt_state))
    ok = jnp.isfinite(loss) & jnp.isfinite(grad_norm) & update_finite
    metrics = {"loss": loss, "grad_norm": grad_norm, "weight": weight, "ok": ok,
               "update_finite": update_finite}
    if scaler is None:
      new_state = TrainState(step=state.step + 1, params=params, opt_state=opt_state)
      # A non-finite step leaves the state untouched; the host stops the run on seeing `ok`.
      new_state = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_state, state)
    else:
      grads_finite = jnp.isfinite(grad_norm)
      skipped = (jnp.isfinite(loss) & ~grads_finite
                 & (scaler.scale > loss_scale_lib.MIN_SCALE))
      kept = jax.tree.map(lambda n, o: jnp.where(ok, n, o),
                          (params, opt_state), (state.params, state.opt_state))
      new_state = TrainState(step=state.step + 1, params=kept[0], opt_state=kept[1],
                             loss_scale=loss_scale_lib.adjust(scaler, grads_finite,
                                                              growth_interval))
      ok = ok | skipped
      new_state = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_state, state)
      metrics.update(ok=ok, loss_scale=scaler.scale, skipped=skipped)
    if schedule is not None:
      metrics["learning_rate"] = schedule(state.step)
    return new_state, metrics

  return step


def make_eval_step(model, task: tasks_lib.Task) -> Callable:
  """The evaluation step (not yet jitted).

  Args:
    model: the flax Module (applied with ``train=False``).
    task: the task whose ``metrics(outputs, batch)`` gives summable per-batch sums.

  Returns:
    ``step(params, batch) -> sums``: a dict of scalars that add up over batches and that
    ``task.summarize`` turns into the reported metrics.
  """
  def step(params, batch):
    outputs = model.apply({"params": params}, batch, train=False)
    return task.metrics(outputs, batch)
  return step


def evaluate(eval_step, params, batches: Iterator[Mapping[str, np.ndarray]], mesh,
             task: tasks_lib.Task) -> dict[str, float]:
  """One pass of ``eval_step`` over ``batches``; the summed metrics, summarised by the task.

  Args:
    eval_step: the jitted ``step(params, batch) -> sums`` of :func:`make_eval_step`.
    params: the parameters to evaluate.
    batches: this process's rows of each global eval batch (host numpy arrays, [B, ...]).
    mesh: the device mesh the batches are split over.
    task: the task (``task.summarize(sums)``).

  Returns:
    The metrics by name.

  Raises:
    ValueError: ``batches`` was empty.
  """
  sums = None
  for batch in batches:
    out = eval_step(params, shard_lib.to_global(_strip_host_keys(batch), mesh))
    out = jax.tree.map(lambda x: np.asarray(x, np.float64), jax.device_get(out))
    sums = out if sums is None else jax.tree.map(np.add, sums, out)
  if sums is None:
    raise ValueError("the eval split produced no batch")
  return task.summarize(sums)


def init_from_params(params, tx, loss_scale: bool = False) -> TrainState:
  """A step-0 TrainState around given parameters (a fresh optimizer state; a new loss
  scale with ``loss_scale``)."""
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                    loss_scale=loss_scale_lib.initial() if loss_scale else None)


# ---------------------------------------------------------------------------------------------
# The steps of a run.


@dataclasses.dataclass
class Run:
  """What the steps of one run share; built once by :func:`train_and_evaluate`.

  Attributes:
    config: the experiment config.
    workdir: absolute path of the run directory.
    task: the task (loss, metrics).
    model: the flax Module.
    mesh: the (data, fsdp, tensor) device mesh.
    tx: the optimizer.
    schedule: its learning-rate schedule.
    is_main: whether this process writes files and prints (process 0).
    preemption: the SIGTERM / Ctrl-C flag installed when the run started (None:
      :func:`train_loop` installs its own).
  """
  config: Any
  workdir: str
  task: tasks_lib.Task
  model: Any
  mesh: jax.sharding.Mesh
  tx: optax.GradientTransformation
  schedule: optax.Schedule
  is_main: bool
  preemption: Preemption | None = None
  log_window: list = dataclasses.field(default_factory=list)

  @property
  def pad_multiple(self) -> int:
    """Batch lengths are padded to a multiple of this (``config.data.pad_multiple``)."""
    return self.config.data.pad_multiple

  @property
  def pad_offset(self) -> int:
    """... minus this (``config.data.pad_offset``; see ``pipeline.padded_length``)."""
    return self.config.data.pad_offset

  def in_context(self, fn: Callable) -> Callable:
    """``fn`` traced with logical parameter names on and activation constraints mapped by
    ``config.mesh.rules`` onto the mesh (docs/scaling.md section 2)."""
    def wrapped(*args):
      with partitioning.logical_axis_names(), \
           partitioning.activation_sharding(self.mesh, self.config.mesh.rules):
        return fn(*args)
    return wrapped


def _remove_if_empty(folder: str, top: str) -> None:
  """Removes ``folder`` and its parents up to ``top`` while they are empty."""
  while True:
    try:
      os.rmdir(folder)  # Only an empty folder: anything written keeps it.
    except OSError:
      return
    if folder == top:
      return
    folder = os.path.dirname(folder)


def setup_workdir(config, workdir: str, stack: contextlib.ExitStack) -> str:
  """Creates the run directory and takes its writer lock (process 0).

  One run writes a workdir at a time (:mod:`workdir_lock`): a second launch fails here,
  before anything is written, naming the holder; a lock left by a crashed run on this host
  is taken over with a warning; ``config.train.force_lock`` takes over any lock. Only
  process 0 of a multi-process run takes it. ``config.json`` is written later, once the
  checks have passed (:func:`write_config`).

  Args:
    config: the experiment config.
    workdir: the run directory (created if missing, and removed again if the launch ends
      with it still empty; reused to resume).
    stack: releases the lock when it closes (normal exit or exception).

  Returns:
    The absolute path of ``workdir``.

  Raises:
    workdir_lock.WorkdirLockedError: another run holds the workdir.
  """
  workdir = os.path.abspath(workdir)
  if not os.path.exists(workdir):
    # A launch refused before it wrote anything (a bad data path, say) leaves no empty
    # folders behind (the workdir and the parents it created): registered first, so it
    # runs after the lock is released.
    top = workdir
    while not os.path.exists(os.path.dirname(top)):
      top = os.path.dirname(top)
    stack.callback(_remove_if_empty, workdir, top)
  os.makedirs(workdir, exist_ok=True)
  stack.enter_context(workdir_lock.hold(workdir, force=config.train.force_lock,
                                        enabled=jax.process_index() == 0))
  return workdir


# What a resumed run may change in its config: how long it runs, how often it logs,
# evaluates and saves, where it runs (devices, processes, loader workers), the held-out test
# file and extra eval splits, and warm-start sources (read only by a fresh run). A field
# ending in '.' stands for its whole group. Any other difference from the workdir's
# config.json is refused (check_resume_config); train.allow_config_change lets more through.
RESUME_MAY_CHANGE = (
    "train.num_steps", "train.num_epochs", "train.min_steps", "train.patience",
    "train.log_every", "train.eval_every", "train.checkpoint_every",
    "train.keep_checkpoints", "train.async_checkpoint", "train.force_lock",
    "train.start_fresh_if_all_damaged", "train.progress_bar", "train.profile_start_step",
    "train.profile_num_steps", "train.cpu_scheduler", "train.allow_config_change",
    "mesh.", "distributed.", "init_from.", "data.eval_batch_size", "data.num_workers",
    "data.test_path", "data.long_threshold", "data.data_dir", "data.tfds_data_dir")


def _flat(config: Mapping[str, Any]) -> dict[str, Any]:
  """A nested config as {'a.b.c': value} (log_lib.flatten_config's values: lists as JSON)."""
  return {k.replace("/", "."): v for k, v in log_lib.flatten_config(config).items()}


def _has_checkpoints(workdir: str) -> bool:
  folder = os.path.join(workdir, "checkpoints")
  return os.path.isdir(folder) and any(x.isdigit() for x in os.listdir(folder))


def _same_run_file(key: str, old: Any, new: Any) -> bool:
  """Whether two recorded paths are the run's own tokenizer file (prepare.py puts it in the
  workdir, by absolute path): the same file after the workdir moved."""
  tail = os.sep + prepare_lib.TOKENIZER_DIR + os.sep
  return (key == "data.tokenizer.path" and isinstance(old, str) and isinstance(new, str)
          and tail in old and tail in new and old.rsplit(tail, 1)[1] == new.rsplit(tail, 1)[1])


def check_resume_config(config, workdir: str) -> None:
  """Refuses to resume a run (a workdir with checkpoints) under a config that trains
  something else than its ``config.json`` recorded.

  Fields in :data:`RESUME_MAY_CHANGE` and ``config.train.allow_config_change`` (comma-
  separated; 'all' skips the check) may differ; fields one of the two configs lacks (written
  by another version of the library) are not compared. Changing ``train.num_steps`` under a
  decaying schedule is allowed but warned about: the schedule is rebuilt over the new total.

  Raises:
    ValueError: naming every other changed field with its recorded and new values.
  """
  path = os.path.join(workdir, "config.json")
  allow = [x.strip() for x in str(config.train.allow_config_change).split(",") if x.strip()]
  if "all" in allow or not os.path.exists(path) or not _has_checkpoints(workdir):
    return
  with open(path, encoding="utf-8") as f:
    saved = _flat(json.load(f))
  now = _flat(json.loads(config.to_json_best_effort()))
  allowed = RESUME_MAY_CHANGE + tuple(allow)
  changed = [k for k in sorted(saved.keys() & now.keys())
             if saved[k] != now[k] and not _same_run_file(k, saved[k], now[k])]
  refused = [k for k in changed
             if not any(k == a or (a.endswith(".") and k.startswith(a)) for a in allowed)]
  if refused:
    raise ValueError(
        f"{workdir} holds a run trained with another config ({path}); resuming it would mix "
        "two runs: " + "; ".join(f"config.{k}: {saved[k]!r} -> {now[k]!r}" for k in refused)
        + ". Use a new workdir (config.init_from can warm-start it from this run), or let "
        "these fields change: --config.train.allow_config_change="
        + ",".join(refused))
  if "train.num_steps" in changed and config.optim.schedule != "constant":
    logging.warning("train.num_steps changed from %s to %s: the %r learning-rate schedule is "
                    "rebuilt over the new total, so the rate at the restored step changes "
                    "(optim.schedule='constant' extends a run without a jump)",
                    saved["train.num_steps"], now["train.num_steps"], config.optim.schedule)


def data_file_digests(config) -> dict[str, dict[str, str]]:
  """The SHA-256 of a local-files run's training and dev data (``data.train_path``,
  ``data.eval_path``; a folder: its files' names and bytes), by config field, as recorded
  in data_info.json's ``data_files``; {} for other sources (generated and TFDS data are
  named and versioned by the config)."""
  if config.data.name != "local":
    return {}
  from longtext_jax.data import local_files  # pylint: disable=import-outside-toplevel
  options = local_files.LocalOptions.from_config(config.data)
  out = {}
  for split in ("train", "eval"):
    if not config.data[f"{split}_path"]:
      continue
    path = os.path.abspath(options.path(split))
    if os.path.exists(path):
      out[f"data.{split}_path"] = {"path": path, "sha256": fileio.tree_sha256(path)}
  return out


def check_resume_data(config, workdir: str, digests: Mapping[str, Mapping[str, str]]
                      ) -> None:
  """Refuses to resume (or re-report) a run whose training or dev data changed in place
  since it was recorded (data_info.json's ``data_files``): the run would go on training one
  model on two datasets. ``config.train.allow_config_change`` naming the field (or 'all')
  lets it through; runs recorded before the digests existed are not checked.

  Raises:
    ValueError: naming each changed file, its digest then and now, and the way out.
  """
  allow = [x.strip() for x in str(config.train.allow_config_change).split(",") if x.strip()]
  if "all" in allow or not _has_checkpoints(workdir):
    return
  try:
    recorded = data_lib.load_data_info(workdir).get("data_files") or {}
  except (FileNotFoundError, ValueError):
    return
  changed = [(field, old, digests[field]) for field, old in sorted(recorded.items())
             if field in digests and field not in allow
             and old.get("sha256") != digests[field]["sha256"]]
  if changed:
    raise ValueError(
        f"{workdir} was trained on other data: " + "; ".join(
            f"config.{field} {now['path']} (SHA-256 {now['sha256'][:12]}) is not the "
            f"{old.get('path')} it was (SHA-256 {str(old.get('sha256'))[:12]})"
            for field, old, now in changed)
        + ". Resuming would train one model on two datasets. Use a new workdir "
        "(config.init_from can warm-start it from this run), or continue on the new data: "
        "--config.train.allow_config_change=" + ",".join(f for f, _, _ in changed))


def _tokenizer_identity(info: Mapping[str, Any] | None, workdir: str) -> tuple | None:
  """What identifies a run's tokenizer (its data_info ``tokenizer``): the SHA-256 of its
  file when the file is found (as given, or relative to ``workdir``), else (kind, size)."""
  if not info:
    return None
  path = info.get("path") or ""
  for candidate in ([path, os.path.join(workdir, path)] if path else []):
    if os.path.isfile(candidate):
      with open(candidate, "rb") as f:
        return ("file", hashlib.sha256(f.read()).hexdigest())
  return ("kind", info.get("kind"), info.get("vocab_size"))


def check_warm_start_tokenizer(config, workdir: str, splits: Mapping[str, Any]) -> None:
  """A new run warm-started from another run's checkpoint (``init_from.kind='checkpoint'``)
  copies embeddings indexed by that run's token ids: it must tokenize with the same
  tokenizer. Compared through both runs' data info (the file's bytes when both files are
  found, else kind and size); a source run without data info is not checked.

  Raises:
    ValueError: naming both tokenizers and the field to set.
  """
  src = config.init_from.path
  if config.init_from.kind != "checkpoint" or not src or _has_checkpoints(workdir):
    return
  src_workdir = next((p for p in (src, os.path.dirname(src.rstrip(os.sep)),
                                  os.path.dirname(os.path.dirname(src.rstrip(os.sep))))
                      if os.path.isfile(os.path.join(p, data_lib.DATA_INFO_FILE))), None)
  if src_workdir is None:
    return
  theirs = data_lib.load_data_info(src_workdir).get("tokenizer")
  mine = data_lib.data_info(splits, config.data.tokenizer)["tokenizer"]
  a, b = _tokenizer_identity(theirs, src_workdir), _tokenizer_identity(mine, workdir)
  if a is None or b is None:
    return
  if a[0] == b[0]:  # Both files found (their bytes), or neither (kind and size).
    same = a == b
  else:  # One file not found: what both record.
    same = (theirs.get("kind"), theirs.get("vocab_size")) == (mine.get("kind"),
                                                             mine.get("vocab_size"))
  if same:
    return
  raise ValueError(
      f"config.init_from.path={src} was trained with the tokenizer {theirs.get('path') or '?'} "
      f"({theirs.get('kind')}, {theirs.get('vocab_size')} ids), this run tokenizes with "
      f"{mine.get('path') or '?'} ({mine.get('kind')}, {mine.get('vocab_size')} ids): the "
      "copied embeddings would read other tokens. Set config.data.tokenizer.path to the "
      "pretraining run's tokenizer (its data_info.json)")


def write_config(run: Run) -> None:
  """Writes ``config.json`` into the workdir (process 0), atomically (temporary file, then
  rename): called once the config has been checked against the data and the checkpoint, so
  a launch that fails keeps the previous run's file."""
  if not run.is_main:
    return
  fileio.write_text_atomic(os.path.join(run.workdir, "config.json"),
                           run.config.to_json_best_effort(indent=2))


def build_data(config, task: tasks_lib.Task) -> dict[str, data_lib.ArraySource]:
  """The run's splits, every label validated: 'train', 'eval' and extra eval splits.

  Args:
    config: the experiment config (``config.data``, ``config.optim.grad_accum_steps``).
    task: the task that validates the labels.

  Returns:
    Sources by split name ('train', 'eval', and e.g. 'eval_long').

  Raises:
    ValueError: the batch does not split into the accumulation micro-batches, or a source
      rejected an example (naming the split and example).
  """
  if config.data.batch_size % config.optim.grad_accum_steps:
    raise ValueError(f"data.batch_size={config.data.batch_size} is not divisible by "
                     f"optim.grad_accum_steps={config.optim.grad_accum_steps}")
  return data_lib.build_splits(config, task)


def make_train_iterator(config, train_source: data_lib.ArraySource) -> Any:
  """This process's iterator over training batches (with ``get_state``/``set_state``)."""
  return data_lib.train_iterator(train_source, config.data.batch_size, config.seed,
                                 jax.process_index(), jax.process_count(),
                                 config.data.pad_multiple, **data_lib.loader_options(config))


@dataclasses.dataclass(frozen=True)
class StateSpec:
  """How the run's TrainState is made and laid out on the mesh.

  Attributes:
    abstract: a TrainState of ``jax.ShapeDtypeStruct`` leaves carrying their shardings (the
      restore target).
    shardings: a TrainState of ``NamedSharding`` leaves.
    init: ``key -> TrainState``: the random initial state, jitted and sharded.
    from_params: ``params -> TrainState``: a step-0 state around given parameters.
  """
  abstract: TrainState
  shardings: TrainState
  init: Callable[[jax.Array], TrainState]
  from_params: Callable[[Any], TrainState]


def build_state(run: Run, example: Mapping[str, np.ndarray]) -> StateSpec:
  """Traces the model's init abstractly (``jax.eval_shape``) and derives the shardings.

  Nothing is allocated here: ``spec.init`` runs the sharded ``jax.jit(init)`` later, so
  every parameter is created directly in its place on the mesh.

  Args:
    run: the run.
    example: a small batch ([B, ...] arrays) that fixes the parameter shapes.

  Returns:
    The StateSpec.
  """
  tx = run.tx
  scaled = loss_scale_lib.enabled(run.config)

  @run.in_context
  def init_boxed(key):
    params = run.model.init(key, example, train=False)["params"]
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                      loss_scale=loss_scale_lib.initial() if scaled else None)

  abstract_boxed = jax.eval_shape(init_boxed, jax.random.key(0))
  shardings = shard_lib.state_shardings(abstract_boxed, run.mesh, run.config.mesh.rules,
                                        run.config.mesh.fsdp_min_size)
  abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                          flax.linen.meta.unbox(abstract_boxed), shardings)
  init = jax.jit(lambda key: flax.linen.meta.unbox(init_boxed(key)), out_shardings=shardings)
  # init_from_params is looked up when traced, so tests can wrap it.
  from_params = jax.jit(lambda params: init_from_params(params, tx, scaled),
                        out_shardings=shardings)
  return StateSpec(abstract=abstract, shardings=shardings, init=init, from_params=from_params)


def restore_or_init(run: Run, spec: StateSpec, ckpt: checkpointing.Checkpointer,
                    train_it: Any, init_rng: jax.Array) -> TrainState:
  """Resumes from the latest usable checkpoint of the workdir, or starts a new run.

  A resumed run gets its state and its data iterator's position back (so it continues
  bitwise like an uninterrupted run). Damaged checkpoints are skipped: the newest step that
  is intact is restored, and the damaged newer ones are moved to ``checkpoints_damaged/``
  with a warning naming each step and why (:meth:`checkpointing.Checkpointer.restore_latest`);
  damaged ``best/`` steps are moved aside too. When every step is damaged the run stops
  naming them, unless ``config.train.start_fresh_if_all_damaged``. A new run is initialised
  from ``init_rng`` and then warm-started from the sources of ``config.init_from``
  (:mod:`init_from`).

  Args:
    run: the run.
    spec: the state's layout (:func:`build_state`).
    ckpt: the run's checkpoints.
    train_it: the training iterator; its state is restored in place.
    init_rng: the key of the random initialisation.

  Returns:
    The TrainState to train from.

  Raises:
    ValueError: the checkpoint was written by another model or config, or its data
      position by another sampler (``pipeline.TrainBatches.set_state``; nothing moved).
    checkpointing.AllCheckpointsDamagedError: every checkpoint is damaged (nothing moved).
  """
  ckpt.check_best()
  restored = ckpt.restore_latest(spec.abstract,
                                 run.config.train.start_fresh_if_all_damaged)
  if restored is not None:
    try:
      data_state = dict(restored.data_state)
      # The training metrics since the last log line (saved with the data position), so
      # the first line after the resume averages the same steps as an uninterrupted run.
      run.log_window = list(data_state.pop(LOG_WINDOW_KEY, None) or [])
      train_it.set_state(data_state)
    except ValueError as e:
      raise ValueError(f"{run.workdir}/checkpoints/{restored.step}/data: {e}") from None
    if restored.damaged:
      logging.warning("Resumed from %s/checkpoints/%d, the newest intact step (damaged and "
                      "moved aside: %s)", run.workdir, restored.step,
                      ", ".join(f"{d.step} ({d.tag})" for d in restored.damaged))
    else:
      logging.info("Resumed from %s/checkpoints/%d", run.workdir, restored.step)
    if restored.step > run.config.train.num_steps:
      logging.warning("%s/checkpoints/%d is past train.num_steps=%d: nothing is trained, and "
                      "what is reported is step %d (to evaluate an earlier step: "
                      "python -m longtext_jax.evaluate --workdir=%s --step=N)", run.workdir,
                      restored.step, run.config.train.num_steps, restored.step, run.workdir)
    return restored.state
  state = spec.init(init_rng)
  params, applied = init_from.apply(run.config, state.params, spec.abstract)
  if applied:
    state = spec.from_params(params)
    logging.info("Warm start from %s", applied)
  return state


def train_compiler_options(config, backend: str | None = None) -> dict[str, str] | None:
  """XLA compiler options for the jitted train step: the memory-optimized scheduler on
  CPU when ``train.cpu_scheduler`` is 'memory', or 'auto' with a remat policy anywhere in
  ``config.model`` (layers/remat.py: XLA:CPU's default scheduler undoes a remat outside a
  rolled scan); None otherwise (XLA's defaults; always on GPU/TPU)."""
  choice = config.train.cpu_scheduler
  if (backend or jax.default_backend()) != "cpu" or choice == "xla":
    return None
  if choice == "memory" or remat_lib.uses_remat(config.model):
    return dict(remat_lib.CPU_MEMORY_SCHEDULER)
  return None


def compile_steps(run: Run, spec: StateSpec) -> tuple[Callable, Callable]:
  """The jitted train and eval steps, with their input and output shardings.

  Args:
    run: the run.
    spec: the state's layout.

  Returns:
    ``(train_step, eval_step)``: ``train_step(state, batch, rng) -> (state, metrics)``
    (donates ``state``) and ``eval_step(params, batch) -> sums``; see
    :func:`make_train_step` and :func:`make_eval_step`.
  """
  replicated = shard_lib.replicated(run.mesh)
  batch_sharding = shard_lib.batch_sharding(run.mesh)
  train_step = jax.jit(
      run.in_context(make_train_step(run.model, run.task, run.tx, run.schedule,
                                     run.config.optim.grad_accum_steps)),
      in_shardings=(spec.shardings, batch_sharding, replicated),
      out_shardings=(spec.shardings, replicated), donate_argnums=(0,),
      compiler_options=train_compiler_options(run.config))
  eval_step = jax.jit(run.in_context(make_eval_step(run.model, run.task)),
                      in_shardings=(spec.shardings.params, batch_sharding),
                      out_shardings=replicated)
  return train_step, eval_step


def make_evaluator(run: Run, eval_step: Callable,
                   splits: Mapping[str, data_lib.ArraySource]) -> Callable:
  """``params -> metrics`` over every eval split.

  'eval' decides the best checkpoint; other splits (e.g. 'eval_long') are reported beside it
  as '<split>/<metric>'.

  Args:
    run: the run.
    eval_step: the jitted eval step.
    splits: all splits of :func:`build_data` ('train' is skipped).

  Returns:
    The evaluation function.
  """
  # 'test' is evaluated once, at the end (evaluate_test_split).
  names = ["eval"] + sorted(set(splits) - {"train", "eval", "test"})
  d = run.config.data

  def run_eval(params) -> dict[str, float]:
    out = {}
    for name in names:
      batches = data_lib.eval_batches(
          splits[name], shard_lib.eval_batch_size(d.eval_batch_size, run.mesh),
          jax.process_index(), jax.process_count(), run.pad_multiple, run.pad_offset)
      metrics = evaluate(eval_step, params, batches, run.mesh, run.task)
      out.update(metrics if name == "eval" else {f"{name}/{k}": v for k, v in metrics.items()})
    return out

  return run_eval


LOG_WINDOW_KEY = "log_window"  # In a checkpoint's data state: the unlogged steps' metrics.


class _LateMetrics:
  """Reads each step's metrics one step late (the device stays busy), stops on NaN/Inf and
  writes the training metrics of each window of ``train.log_every`` steps: the loss
  weighted by each step's loss weight (tokens for token-level tasks: the window's loss over
  all its tokens, as one big step would give it), the learning rate (and loss scale) of
  the window's last step, the mean of the others (grad_norm); with a loss scale, the count
  of ``skipped`` steps and grad_norm averaged over the steps that were not."""

  def __init__(self, run: Run, writer: log_lib.MetricWriter, ckpt: checkpointing.Checkpointer,
               bar: tqdm.tqdm):
    self.run, self.writer, self.ckpt, self.bar = run, writer, ckpt, bar
    self.pending: tuple[int, Any] | None = None
    self.window: list[dict[str, float]] = []
    self.carried = 0  # Steps of the window run before a resume (not timed here).
    self.t_window = time.perf_counter()

  def push(self, step: int, metrics: Any) -> None:
    """Resolves the previous step's metrics, then holds ``step``'s (still on device)."""
    self.resolve()
    self.pending = (step, metrics)

  def resolve(self) -> None:
    """Reads the held metrics now; raises NonFiniteLossError if that step was not finite."""
    if self.pending is None:
      return
    s, metrics = self.pending
    self.pending = None
    metrics = jax.device_get(metrics)
    if not bool(metrics["ok"]):
      self.ckpt.wait()
      loss, grad_norm = float(metrics["loss"]), float(metrics["grad_norm"])
      what = ("loss or gradient" if not (np.isfinite(loss) and np.isfinite(grad_norm)) else
              "parameters or optimizer state after the update (is "
              f"optim.learning_rate={self.run.config.optim.learning_rate} too large?)")
      # Every saved step passed this check when it was saved: the latest one is finite.
      last = self.ckpt.latest_step()
      raise NonFiniteLossError(
          f"non-finite {what} at step {s} (loss={loss}, grad_norm={grad_norm}); the update "
          "was not applied and " + (
              f"the last good checkpoint is step {last} in {self.run.workdir}/checkpoints"
              if last is not None else "no checkpoint was saved"))
    self.window.append({k: float(v) for k, v in metrics.items()
                        if k not in ("ok", "update_finite")})
    # Shown at the bar's next redraw (refreshing here would redraw it every step, also
    # in a log file where the bar is meant to be drawn once a minute).
    self.bar.set_postfix(loss=f"{float(metrics['loss']):.4g}", refresh=False)
    tcfg = self.run.config.train
    if s % tcfg.log_every == 0 or s == tcfg.num_steps:
      avg = {k: float(np.mean([m[k] for m in self.window])) for k in self.window[0]
             if k != "weight"}
      weights = np.asarray([m.get("weight", 1.0) for m in self.window])
      if weights.sum() > 0:
        avg["loss"] = float(np.dot(weights, [m["loss"] for m in self.window]) / weights.sum())
      for key in ("learning_rate", "loss_scale"):  # The window's last value.
        if key in avg:
          avg[key] = self.window[-1][key]
      if "skipped" in avg:  # Loss scaling: how many steps of the window were skipped,
        avg["skipped"] = float(sum(m["skipped"] for m in self.window))
        norms = [m["grad_norm"] for m in self.window if np.isfinite(m["grad_norm"])]
        avg["grad_norm"] = float(np.mean(norms)) if norms else float("nan")  # the others'.
      elapsed = time.perf_counter() - self.t_window
      avg["steps_per_sec"] = (len(self.window) - self.carried) / max(elapsed, 1e-9)
      self.writer.write(s, "train", avg)
      self.window.clear()
      self.carried = 0
      self.t_window = time.perf_counter()


class _Profiler:
  """A jax.profiler trace of steps [profile_start_step, + profile_num_steps) on process 0."""

  def __init__(self, run: Run):
    self.start = run.config.train.profile_start_step
    self.stop = self.start + run.config.train.profile_num_steps
    self.directory = os.path.join(run.workdir, "profile")
    self.enabled = run.is_main
    self.active = False

  def before_step(self, step: int, state: Any) -> None:
    """Starts or stops the trace before step ``step + 1`` runs."""
    if self.enabled and step == self.start:
      jax.profiler.start_trace(self.directory, create_perfetto_trace=True)
      self.active = True
    if self.active and step == self.stop:
      jax.block_until_ready(state)
      self.close()

  def close(self) -> None:
    """Stops a running trace."""
    if self.active:
      jax.profiler.stop_trace()
      self.active = False


@dataclasses.dataclass
class LoopResult:
  """Where :func:`train_loop` stopped.

  Attributes:
    state: the last TrainState.
    step: its step.
    start_step: the step this process started (or resumed) from.
    eval_metrics: the last evaluation's metrics ({} if none ran).
    eval_step: the step of that evaluation (-1 if none ran).
    preempted: the loop stopped on SIGTERM or Ctrl-C (after saving).
    stopped_by: what stopped it: 'SIGTERM', 'Ctrl-C (SIGINT)', 'a signal to another
      process' ('' when not preempted).
  """
  state: TrainState
  step: int
  start_step: int
  eval_metrics: dict[str, float]
  eval_step: int
  preempted: bool
  stopped_by: str = ""


def train_loop(run: Run, state: TrainState, train_step: Callable, train_it: Any,
               run_eval: Callable, ckpt: checkpointing.Checkpointer,
               writer: log_lib.MetricWriter, dropout_rng: jax.Array) -> LoopResult:
  """Trains from ``state`` up to ``config.train.num_steps``.

  After each step: metrics of the previous step are read (one step late); every
  ``eval_every`` steps and at the last step the eval splits run and the best checkpoint is
  updated; every ``checkpoint_every`` steps, at the last step and on SIGTERM the state and
  the data iterator's position are saved. SIGTERM then ends the loop (``preempted``); a
  SIGTERM that came before the first step (``run.preemption``, installed at start) ends it
  before that step (the state is the restored or initial one: nothing new to save).

  Args:
    run: the run.
    state: the state to start from (its ``step`` is where training resumes).
    train_step: the jitted train step (donates ``state``).
    train_it: the training iterator.
    run_eval: ``params -> metrics`` (:func:`make_evaluator`).
    ckpt: the run's checkpoints.
    writer: the metric sink.
    dropout_rng: the base dropout key (folded with the step inside the step).

  Returns:
    The LoopResult.

  Raises:
    NonFiniteLossError: a step's loss or gradient was NaN/Inf (its update not applied).
  """
  tcfg = run.config.train
  step = start_step = int(jax.device_get(state.step))
  bar = log_lib.progress_bar(tcfg.num_steps, "train", initial=step,
                             enabled=tcfg.progress_bar and run.is_main)
  late = _LateMetrics(run, writer, ckpt, bar)
  late.window = list(getattr(run, "log_window", ()))  # Restored (restore_or_init).
  late.carried = len(late.window)
  profiler = _Profiler(run)
  shapes = BatchShapes(run.config)
  eval_metrics, eval_step, preempted, stopped_by = {}, -1, False, ""
  stop = _patience_exhausted(run, ckpt, step)  # A resumed run that had stopped early.
  # Several processes must stop after the same step, whichever of them got the SIGTERM.
  multi = jax.process_count() > 1
  agreement = (distributed.StopAgreement(_stop_agreement_name(start_step), start_step)
               if multi else contextlib.nullcontext())
  try:
    with (contextlib.nullcontext(run.preemption) if run.preemption is not None
          else Preemption()) as preemption, agreement:
      while step < tcfg.num_steps and not stop:
        if preemption.requested and step == start_step and not multi:  # During startup.
          logging.warning("%s before step %d: nothing new to save; exiting.",
                          preemption.label, step + 1)
          preempted, stopped_by = True, preemption.label
          break
        batch = _strip_host_keys(next(train_it))
        shapes.see(batch)
        profiler.before_step(step, state)
        state, metrics = train_step(state, shard_lib.to_global(batch, run.mesh), dropout_rng)
        step += 1
        if multi:
          if preemption.requested:
            agreement.request()
          stop_at = agreement.after_step(step)
          stop_now = stop_at is not None and step >= stop_at
        else:
          stop_now = preemption.requested
        late.push(step, metrics)
        ckpt.poll()  # good.json for a save that has finished (a kill keeps a verified step).
        bar.update(1)
        last = step == tcfg.num_steps
        if last or step % tcfg.eval_every == 0:
          late.resolve()
          eval_metrics, eval_step = run_eval(state.params), step
          writer.write(step, "eval", eval_metrics)
          ckpt.save_best(step, state, train_it.get_state(), eval_metrics)
          stop = _patience_exhausted(run, ckpt, step)
        if last or stop or step % tcfg.checkpoint_every == 0 or stop_now:
          late.resolve()
          ckpt.save(step, state, {**train_it.get_state(),  # A copy: the save is async.
                                  LOG_WINDOW_KEY: [dict(m) for m in late.window]})
        if stop_now:
          ckpt.wait()  # A save that fails raises here, before the log says it is saved.
          stopped_by = (preemption.label if preemption.requested
                        else "a signal to another process")
          logging.warning("%s: saved step %d to %s/checkpoints; exiting.",
                          preemption.label or "SIGTERM or Ctrl-C (to another process)", step,
                          run.workdir)
          preempted = True
          break
      late.resolve()
  finally:
    profiler.close()
    bar.close()
  return LoopResult(state=state, step=step, start_step=start_step, eval_metrics=eval_metrics,
                    eval_step=eval_step, preempted=preempted, stopped_by=stopped_by)


_TRAIN_LOOPS = iter(range(1 << 62))  # Calls of train_loop in this process (same in all).


def _stop_agreement_name(start_step: int) -> str:
  """The key of one train_loop call, the same in every process of the run (they make the
  same calls; the workdir's path may differ between hosts)."""
  return f"{next(_TRAIN_LOOPS)}/{start_step}"


def _patience_exhausted(run: Run, ckpt: checkpointing.Checkpointer, step: int) -> bool:
  """Early stopping: ``train.patience`` evaluations since the best value of
  ``train.best_metric`` was first reached (a tie is no progress; read from the best
  checkpoint, so a resumed run agrees)."""
  tcfg = run.config.train
  if not tcfg.patience or ckpt.best is None:
    return False
  ckpt.wait()
  best = ckpt.best_since()
  if best is None or step - best < tcfg.patience * tcfg.eval_every:
    return False
  logging.warning("Early stop at step %d: %s has not improved for %d evaluations (best at "
                  "step %d).", step, tcfg.best_metric, tcfg.patience, best)
  return True


def evaluate_test_split(run: Run, spec: StateSpec, ckpt: checkpointing.Checkpointer,
              eval_step: Callable, splits: Mapping[str, data_lib.ArraySource],
              result: LoopResult, writer: log_lib.MetricWriter) -> dict[str, float]:
  """Evaluates the 'test' split (``data.test_path``) once, with the best checkpoint.

  The best checkpoint by ``train.best_metric`` (the last state when none is kept) is
  restored and evaluated on 'test'; the metrics go to metrics.jsonl (kind 'test'), to
  ``<workdir>/test_metrics.json`` and to stdout, apart from the dev metrics. A relaunch of
  a finished run whose ``test_metrics.json`` holds the same checkpoint and test file
  reports those metrics again (no second evaluation, no second record).

  Args:
    run: the run.
    spec: the state's layout (the restore target).
    ckpt: the run's checkpoints.
    eval_step: the jitted eval step.
    splits: the splits of :func:`build_data` (nothing is done without 'test').
    result: where the loop stopped (its state is used without a best checkpoint).
    writer: the metric sink.

  Returns:
    The test metrics as ``'test/<name>'`` ({} without a 'test' split).
  """
  if "test" not in splits:
    return {}
  ckpt.wait()
  best = ckpt.best.latest_step() if ckpt.best is not None else None
  kind, test_path = ("best" if best is not None else "last"), run.config.data.test_path
  path = os.path.join(run.workdir, "test_metrics.json")
  if os.path.exists(path):  # A relaunch of a finished run: the same checkpoint and file.
    with open(path, encoding="utf-8") as f:
      stored = json.load(f)
    if (stored.get("step"), stored.get("checkpoint"), stored.get("test_path")) == (
        best if best is not None else result.step, kind, test_path):
      if run.is_main:
        print(f"Test ({kind} checkpoint, step {stored['step']}, evaluated before): "
              + ", ".join(f"{k}={v:.5g}" for k, v in stored["test"].items()))
      return {f"test/{k}": v for k, v in stored["test"].items()}
  if best is not None:
    params, step = checkpointing.restore_from(ckpt.best, best, spec.abstract)[0].params, best
  else:
    params, step = result.state.params, result.step
  batches = data_lib.eval_batches(
      splits["test"], shard_lib.eval_batch_size(run.config.data.eval_batch_size, run.mesh),
      jax.process_index(), jax.process_count(), run.pad_multiple, run.pad_offset)
  metrics = evaluate(eval_step, params, batches, run.mesh, run.task)
  writer.write(step, "test", metrics)
  if run.is_main:
    fileio.write_json_atomic(path, {"step": step, "checkpoint": kind, "test_path": test_path,
                                    "test": metrics})
    print(f"Test ({kind} checkpoint, step {step}): "
          + ", ".join(f"{k}={v:.5g}" for k, v in metrics.items()))
  return {f"test/{k}": v for k, v in metrics.items()}


def final_eval(run: Run, result: LoopResult, run_eval: Callable,
               writer: log_lib.MetricWriter) -> dict[str, float]:
  """The final metrics of the run, evaluated if the loop did not already at its last step.

  A finished run started again (nothing left to train) reports the evaluation stored in
  ``metrics.jsonl`` at its last step (evaluating, and storing, only if there is none). A
  preempted run reports its last evaluation as is, to exit quickly: this process's, else the
  last one stored. ``result.eval_step``/``eval_metrics`` are updated to what is returned,
  so :func:`report` names the step the metrics belong to.

  Args:
    run: the run.
    result: where the loop stopped (updated in place).
    run_eval: ``params -> metrics``.
    writer: the metric sink.

  Returns:
    The metrics by name ({} for a preempted run that was never evaluated).
  """
  if result.eval_step == result.step:
    return result.eval_metrics
  if result.preempted or result.step == result.start_step:
    stored = log_lib.last_record(run.workdir, "eval", max_step=result.step)
    if stored is not None and (stored[0] == result.step
                               or (result.preempted and result.eval_step < 0)):
      result.eval_step, result.eval_metrics = stored
    if result.preempted or result.eval_step == result.step:
      return result.eval_metrics
  metrics = run_eval(result.state.params)
  writer.write(result.step, "eval", metrics)
  result.eval_step, result.eval_metrics = result.step, metrics
  return metrics


def report(run: Run, result: LoopResult, metrics: Mapping[str, float]) -> None:
  """Prints where the results are, and last a JSON line ``{"step", "eval", "eval_step",
  "steps_this_run", "preempted"}`` for scripts (process 0 only). ``eval_step`` is the step
  the reported metrics were evaluated at (-1: none), which is ``step`` unless preempted."""
  if not run.is_main:
    return
  tcfg, workdir = run.config.train, run.workdir
  values = ", ".join(f"{k}={v:.5g}" for k, v in metrics.items())
  if result.preempted:
    print(f"Stopped by {result.stopped_by or 'SIGTERM'} at step {result.step} (relaunch to "
          "resume); " + (
        f"last eval at step {result.eval_step}: {values}" if result.eval_step >= 0 else
        "not evaluated yet; relaunch to finish, or evaluate the checkpoint: python -m "
        f"longtext_jax.evaluate --workdir={workdir} --step={result.step}"))
  else:
    print(f"Final eval at step {result.eval_step}: {values}")
  print(f"Checkpoints: {workdir}/checkpoints"
        + (f" (best by {tcfg.best_metric}: {workdir}/best)" if tcfg.best_metric else ""))
  print(f"Logs: {workdir}/metrics.jsonl; TensorBoard: tensorboard --logdir {workdir}")
  print(json.dumps({"step": result.step, "eval": dict(metrics), "eval_step": result.eval_step,
                    "steps_this_run": result.step - result.start_step,
                    "preempted": result.preempted}))


def make_run(config, workdir: str) -> Run:
  """The task, model, mesh and optimizer of ``config`` (nothing traced or allocated yet)."""
  task = tasks_lib.get_task(config.task)
  config_lib.validate(config, task)  # Every bad field named before anything is built.
  tx, schedule = optim_lib.make_optimizer(config.optim, config.train.num_steps)
  return Run(config=config, workdir=workdir, task=task,
             model=model_lib.build_model(config), mesh=shard_lib.make_mesh(config.mesh),
             tx=tx, schedule=schedule, is_main=jax.process_index() == 0)


def train_and_evaluate(config, workdir: str) -> dict[str, float]:
  """Trains ``config`` in ``workdir`` (resuming from its latest checkpoint).

  Args:
    config: the experiment config (``longtext_jax.config.base_config`` and its fields).
    workdir: the run directory: checkpoints, best checkpoint, metrics.jsonl, TensorBoard.

  Returns:
    The final evaluation metrics by name, and the test metrics as 'test/<name>' when
    ``data.test_path`` is set (:func:`evaluate_test_split`).

  Raises:
    NonFiniteLossError: on a NaN/Inf loss, gradient or update (the update is not applied;
      the last checkpoint saved is finite).
    workdir_lock.WorkdirLockedError: another run holds the workdir (nothing was written).
    checkpointing.AllCheckpointsDamagedError: every checkpoint is damaged (nothing moved;
      ``config.train.start_fresh_if_all_damaged`` starts afresh instead).
  """
  # From here on SIGTERM and a first Ctrl-C are a flag the loop reads (the step is saved, the
  # run stops), and the workdir lock is released when the run ends, by an exception too.
  with Preemption() as preemption, contextlib.ExitStack() as stack:
    workdir = setup_workdir(config, workdir, stack)
    # Tokenizer, num_classes, vocab_size, epochs from the training data (train/prepare.py),
    # once the workdir is held (a trained tokenizer is cached in it).
    config = prepare_lib.prepare_config(config, workdir)
    run = make_run(config, workdir)
    run.preemption = preemption
    return _train_and_evaluate(config, run)


def _train_and_evaluate(config, run: Run) -> dict[str, float]:
  """The steps of :func:`train_and_evaluate` once the workdir is held."""
  check_resume_config(config, run.workdir)
  data_files = data_file_digests(config)
  check_resume_data(config, run.workdir, data_files)
  splits = build_data(config, run.task)
  check_warm_start_tokenizer(config, run.workdir, splits)
  spec = build_state(run, _strip_host_keys(
      _first_batch_shapes(splits["train"], 2, run.pad_multiple, run.pad_offset)))
  init_rng, dropout_rng = jax.random.split(jax.random.key(config.seed))
  tcfg = config.train
  ckpt = checkpointing.Checkpointer(run.workdir, tcfg.keep_checkpoints, tcfg.async_checkpoint,
                                    tcfg.best_metric, tcfg.best_mode)
  writer = log_lib.MetricWriter(run.workdir, enabled=run.is_main, config=config)
  finished = False
  try:
    train_it = make_train_iterator(config, splits["train"])
    state = restore_or_init(run, spec, ckpt, train_it, init_rng)
    # Records of steps after the restored one are about to be written again.
    writer.truncate_after(int(jax.device_get(state.step)))
    # The data and the checkpoint fit the config: record it, and the label names and
    # tokenizer (the run is usable without its training data). Not before: a launch that
    # is refused keeps the previous run's files.
    if run.is_main:
      data_lib.save_data_info(run.workdir, splits, config.data.tokenizer, data_files)
    write_config(run)
    train_step, eval_step = compile_steps(run, spec)
    run_eval = make_evaluator(run, eval_step, splits)
    result = train_loop(run, state, train_step, train_it, run_eval, ckpt, writer, dropout_rng)
    metrics = final_eval(run, result, run_eval, writer)
    test_metrics = {} if result.preempted else evaluate_test_split(
        run, spec, ckpt, eval_step, splits, result, writer)
    finished = True
  finally:
    try:
      ckpt.wait()
      ckpt.close()
    except Exception as e:  # pylint: disable=broad-except
      if finished:
        raise
      # The run is already stopping on an error (often this same failed save): that one
      # is what the caller sees.
      logging.warning("While stopping on an error, finishing the checkpoints failed too: %s",
                      str(e).splitlines()[0] if str(e) else type(e).__name__)
    finally:
      writer.close()
  report(run, result, metrics)
  return {**metrics, **test_metrics}
