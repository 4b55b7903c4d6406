"""Orbax checkpoints: model/optimizer state and data-iterator state saved together.

Layout in a workdir::

    checkpoints/<step>/{state,data}   the latest ``keep_checkpoints`` steps (resume source)
    best/<step>/{state,data}          the best evaluation so far by ``train.best_metric``
    <either>/<step>/good.json         size and SHA-256 of every file, once the save is final
    checkpoints_damaged/<step>-<tag>/ steps found damaged at restore, moved aside (never
                                      deleted), each with DAMAGED.txt saying why
    checkpoints_damaged/best-<step>-<tag>/  the same for damaged best/ steps

Restores check every parameter's shape against the model first, so a checkpoint written by a
different architecture or config fails with an error naming the offending parameter.

Good checkpoints are recorded: once a save is final (Orbax's async save has finished),
process 0 writes ``<step>/good.json``, the size and SHA-256 of every file of the step.
:meth:`Checkpointer.restore_latest` tries the newest step first; a step that fails its
record (a file missing, truncated or changed), misses a required part (an empty folder,
``state/_METADATA``, ``data/metadata``, an empty ``manifest.ocdbt``), cannot be read or is
restored with NaN or Inf values is damaged: a warning names the step and the reason, the
next older step is tried, and once one is usable the damaged ones are moved to
``checkpoints_damaged/``. When every step is damaged nothing is moved and
:class:`AllCheckpointsDamagedError` names them (unless the caller asks to start afresh). A
checkpoint whose parameters do not match the model is *not* damage: that stops the run with
an error, and nothing is moved. Damaged ``best/`` steps are moved aside by
:meth:`Checkpointer.check_best`. See docs/reliability.md.
"""
from __future__ import annotations

import dataclasses
import datetime
import errno
import json
import logging
import os
from typing import Any, Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from longtext_jax import fileio
from longtext_jax.train import loss_scale as loss_scale_lib

GOOD_FILE = "good.json"
DAMAGED_DIR = "checkpoints_damaged"
# Parts every step needs, as (path inside the step, tag used when it is missing).
_REQUIRED = (("state/_METADATA", "missing-state-metadata"),
             ("state/manifest.ocdbt", "missing-manifest"),
             ("data/metadata", "missing-data-metadata"))



def _manager(directory: str, keep: int | None, async_save: bool, best_metric: str = "",
             best_mode: str = "max") -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(
      max_to_keep=keep,
      best_fn=(lambda m: m[best_metric]) if best_metric else None,
      best_mode=best_mode,
      enable_async_checkpointing=async_save,
      create=True,
      # The `<step>.orbax-checkpoint-tmp` folders a killed or failed save leaves (a writer
      # holds the workdir lock, so none is a save in progress).
      cleanup_tmp_directories=True,
      # Each manager's own barrier names: 'checkpoints' and 'best' save the same step at once
      # (an evaluation that is the best so far at a checkpoint step), and with several
      # processes Orbax's barriers of the two saves share a key ('_async_write_complete.<step>'
      # is "already ongoing"): the save fails and the run hangs at jax.distributed's
      # shutdown (seen in tests/test_multihost.py, now and then).
      multiprocessing_options=ocp.options.MultiprocessingOptions(
          barrier_sync_key_prefix=os.path.basename(os.path.normpath(directory))),
  )
  return ocp.CheckpointManager(os.path.abspath(directory), options=options,
                               item_handlers=_handlers())


def _handlers():
  return {"state": ocp.StandardCheckpointHandler(), "data": ocp.JsonCheckpointHandler()}


def state_metadata(manager: ocp.CheckpointManager, step: int) -> Any:
  """The saved TrainState's tree of array metadata (shapes, dtypes), without reading arrays."""
  meta = manager.item_metadata(step)["state"]
  return getattr(meta, "tree", meta)


def path_str(path) -> str:
  """A pytree key path as ``"a/b/0"`` (dict keys, attribute names, sequence indices)."""
  return "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))))
                  for k in path)


def shapes_by_path(tree: Any) -> dict[str, tuple[int, ...]]:
  """``{path_str(path): shape}`` of every leaf of ``tree`` (arrays or ShapeDtypeStructs)."""
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {path_str(p): tuple(getattr(v, "shape", ())) for p, v in leaves}


def check_compatible(expected: Any, found: Any, what: str) -> None:
  """Raises ValueError naming the first parameter whose presence or shape differs."""
  want, have = shapes_by_path(expected), shapes_by_path(found)
  missing = sorted(set(want) - set(have))
  extra = sorted(set(have) - set(want))
  if missing or extra:
    raise ValueError(
        f"{what} does not match the model: parameters missing from the checkpoint: "
        f"{missing[:5]}{'...' if len(missing) > 5 else ''}; parameters in the checkpoint but "
        f"not in the model: {extra[:5]}{'...' if len(extra) > 5 else ''}. Was it written by a "
        "different encoder or config?")
  for key in sorted(want):
    if want[key] != have[key]:
      raise ValueError(f"{what} does not match the model: parameter {key!r} has shape "
                       f"{have[key]} in the checkpoint but {want[key]} in the model (config)")


def _layout(tree: Any) -> Any:
  """``tree``'s containers as Orbax stores them (named tuples as dicts, tuples as lists, an
  empty state as None), arrays as '*': equal for an optimizer state and its saved form."""
  if tree is None:
    return None
  if isinstance(tree, tuple) and hasattr(tree, "_fields"):
    return {f: _layout(v) for f, v in zip(tree._fields, tree)} if tree._fields else None
  if isinstance(tree, Mapping):
    return {str(k): _layout(v) for k, v in tree.items()} or None
  if isinstance(tree, (list, tuple)):
    return [_layout(v) for v in tree]
  return "*"


def _describe_chain(layout: Any) -> str:
  if not isinstance(layout, list):
    return "one state" if layout is not None else "no state"
  parts = [("empty" if x is None else "+".join(sorted(x)) if isinstance(x, dict)
            else f"{len(x)} parts" if isinstance(x, list) else "an array") for x in layout]
  return f"{len(layout)} transforms ({', '.join(parts)})"


def check_optimizer_layout(expected: Any, found: Any, what: str) -> None:
  """Raises ValueError when the optimizer state of the config (``expected``) is built
  otherwise than the saved one (``found``, Orbax metadata): an optim.* field that adds or
  removes a transform (clip_norm, ...) changed since the run was saved."""
  want, have = _layout(expected), _layout(found)
  if want != have:
    raise ValueError(
        f"{what}: the optimizer state differs from the checkpoint's (saved: "
        f"{_describe_chain(have)}; this config: {_describe_chain(want)}): an optim.* field "
        "that adds or removes an optimizer transform (e.g. optim.clip_norm) changed since "
        "the run was saved. Resume with the run's optim settings (its config.json), or "
        "start a new workdir with config.init_from.path set to this one to keep its weights")


class CheckpointDamagedError(ValueError):
  """A checkpoint step cannot be used as saved.

  Attributes:
    tag: short reason for folder names ('truncated', 'garbled', 'empty', ...).
    reason: what is wrong, naming the file.
  """

  def __init__(self, tag: str, reason: str):
    super().__init__(reason)
    self.tag, self.reason = tag, reason


class CheckpointSaveError(OSError):
  """Saving a checkpoint failed (a full disk, a lost mount): the step is not saved; the
  ones saved before are intact, and a relaunch resumes from the newest of them."""


def save_error(manager: Any, steps: list[int], e: Exception) -> CheckpointSaveError:
  """A CheckpointSaveError naming the steps, the folder and Orbax's first line; ENOSPC
  (with a hint) when the disk is full."""
  text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
  full = ("RESOURCE_EXHAUSTED" in text or "No space left" in text
          or getattr(e, "errno", None) == errno.ENOSPC)
  where = f"{manager.directory}/{','.join(map(str, steps)) or '?'}"
  hint = (" (the disk is full: free space and relaunch the same command, which resumes from "
          "the last saved step)" if full else
          " (the steps saved before are intact; relaunching resumes from the newest)")
  return CheckpointSaveError(errno.ENOSPC if full else errno.EIO,
                             f"saving checkpoint {where} failed: {text[:400]}{hint}")


class AllCheckpointsDamagedError(RuntimeError):
  """Every checkpoint step of the run is damaged; nothing was moved (the message names
  each step and why)."""


@jax.jit
def _finite_flags(leaves: list[jax.Array]) -> list[jax.Array]:
  return [jnp.all(jnp.isfinite(x)) for x in leaves]


def first_non_finite(tree: Any) -> str | None:
  """The path of the first floating-point leaf of ``tree`` holding NaN or Inf, else None
  (one jitted reduction over all leaves)."""
  leaves = [(path, x) for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]
            if jnp.issubdtype(x.dtype, jnp.inexact)]
  flags = jax.device_get(_finite_flags([x for _, x in leaves]))
  for (path, _), finite in zip(leaves, flags):
    if not finite:
      return path_str(path)
  return None


@dataclasses.dataclass(frozen=True)
class DamagedCheckpoint:
  """A step that restore found damaged and moved aside.

  Attributes:
    step: the training step of the checkpoint.
    tag: short reason ('truncated', 'garbled', 'missing-state-metadata', ...).
    reason: the full reason, naming the file.
    moved_to: where the step folder now lies ('' on processes other than 0, which do not
      move anything).
  """
  step: int
  tag: str
  reason: str
  moved_to: str


@dataclasses.dataclass(frozen=True)
class Restored:
  """What :meth:`Checkpointer.restore_latest` found.

  Attributes:
    step: the step restored (the newest usable one).
    state: the restored TrainState (placed like ``abstract_state``).
    data_state: the data iterator's state saved with it.
    damaged: the newer steps found damaged and moved aside, newest first.
    verified: True when the step had a ``good.json`` record and matched it (False for
      checkpoints written before records existed, restored because they could be read).
  """
  step: int
  state: Any
  data_state: dict[str, Any]
  damaged: tuple[DamagedCheckpoint, ...]
  verified: bool


def _step_files(step_dir: str) -> list[str]:
  """Relative paths of every file under ``step_dir`` except the record itself, sorted."""
  return [rel for rel in fileio.relative_files(step_dir) if rel != GOOD_FILE]


def record_good(step_dir: str) -> None:
  """Writes ``<step_dir>/good.json``: {relative path: [size, sha256]} of every file.

  Call only once the save is final. Written to a temporary file then renamed, so a record
  is either complete or absent.
  """
  files = {rel: [os.path.getsize(os.path.join(step_dir, rel)),
                 fileio.file_sha256(os.path.join(step_dir, rel))] for rel in _step_files(step_dir)}
  tmp = os.path.join(step_dir, GOOD_FILE + ".tmp")
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump({"format": 1, "files": files}, f, indent=0, sort_keys=True)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, os.path.join(step_dir, GOOD_FILE))


def check_step_dir(step_dir: str) -> bool:
  """Raises CheckpointDamagedError when the step is damaged; returns whether it was
  verified against its ``good.json`` record (False: no record, only the structure checked).
  """
  if not os.path.isdir(step_dir):
    raise CheckpointDamagedError("missing", f"{step_dir} is not a folder")
  if not os.listdir(step_dir):
    raise CheckpointDamagedError("empty", f"the step folder {step_dir} is empty")
  for rel, tag in _REQUIRED:
    if not os.path.isfile(os.path.join(step_dir, rel)):
      raise CheckpointDamagedError(tag, f"{step_dir}/{rel} is missing")
  if os.path.getsize(os.path.join(step_dir, "state/manifest.ocdbt")) == 0:
    raise CheckpointDamagedError("empty-manifest", f"{step_dir}/state/manifest.ocdbt is empty")
  record_path = os.path.join(step_dir, GOOD_FILE)
  if not os.path.isfile(record_path):
    return False
  try:
    with open(record_path, encoding="utf-8") as f:
      files = json.load(f)["files"]
  except (ValueError, KeyError, TypeError) as e:
    raise CheckpointDamagedError("bad-record", f"{record_path} is unreadable: {e}") from e
  for rel, (size, digest) in sorted(files.items()):
    path = os.path.join(step_dir, rel)
    if not os.path.isfile(path):
      raise CheckpointDamagedError("missing-file", f"{path} is missing")
    found = os.path.getsize(path)
    if found != size:
      raise CheckpointDamagedError(
          "truncated" if found < size else "size-changed",
          f"{path} has {found} bytes, {size} when saved")
    if fileio.file_sha256(path) != digest:
      raise CheckpointDamagedError("garbled", f"{path} differs from what was saved "
                                   "(SHA-256 mismatch)")
  return True


class Checkpointer:
  """The run's checkpoint managers (latest and best)."""

  def __init__(self, workdir: str, keep: int, async_save: bool = True,
               best_metric: str = "", best_mode: str = "max"):
    self.workdir = workdir
    self._keep, self._async_save, self._best_mode = keep, async_save, best_mode
    self.latest = _manager(os.path.join(workdir, "checkpoints"), keep, async_save)
    self.best = (_manager(os.path.join(workdir, "best"), 1, async_save, best_metric,
                          best_mode) if best_metric else None)
    self.best_metric = best_metric
    self._unrecorded: list[tuple[ocp.CheckpointManager, int]] = []

  @staticmethod
  def _args(state, data_state):
    return ocp.args.Composite(state=ocp.args.StandardSave(saved_tree(state)),
                              data=ocp.args.JsonSave(data_state))

  def _finish(self, manager: ocp.CheckpointManager) -> None:
    """Waits for ``manager``'s async save, then writes good.json for its finished steps.

    Hashing reads the checkpoint once more, on this thread (about 1 s per GB).
    """
    pending = [(m, step) for m, step in self._unrecorded if m is manager]
    self._unrecorded = [(m, step) for m, step in self._unrecorded if m is not manager]
    try:
      manager.wait_until_finished()
    except Exception as e:  # pylint: disable=broad-except
      raise save_error(manager, [step for _, step in pending], e) from e
    if jax.process_index() != 0:
      return
    for _, step in pending:
      step_dir = os.path.join(str(manager.directory), str(step))
      if os.path.isdir(step_dir):  # Unless already rotated out by max_to_keep.
        record_good(step_dir)

  def poll(self) -> None:
    """Records as good the saves that have finished, without waiting for any (called after
    every step: a run killed between two saves resumes from a recorded step)."""
    for manager in {id(m): m for m, _ in self._unrecorded}.values():
      if not manager.is_saving_in_progress():
        self._finish(manager)

  def save(self, step: int, state: Any, data_state: Mapping[str, Any]) -> None:
    """Saves ``state`` and the data iterator's state as step ``step`` (async; a step
    already saved is skipped). The previous save is finished and marked good first."""
    if step in self.latest.all_steps():
      return
    # The previous async save must end before this one starts anyway (Orbax waits too);
    # once it has, it is final and gets its good.json.
    self._finish(self.latest)
    try:
      self.latest.save(step, args=self._args(state, dict(data_state)), force=True)
    except Exception as e:  # pylint: disable=broad-except
      raise save_error(self.latest, [step], e) from e
    self._unrecorded.append((self.latest, step))

  def save_best(self, step: int, state: Any, data_state: Mapping[str, Any],
                metrics: Mapping[str, float]) -> None:
    """Saves into ``best/`` when ``metrics[best_metric]`` is as good as the kept one or better.

    On a tie the newer step replaces the kept one (it has trained longer), but it keeps the
    step where that value was first reached (:meth:`best_since`), from which ``train.patience``
    counts: a dev metric stuck on a plateau stops the run.

    A non-finite metric is not saved; a ``best_metric`` missing from ``metrics`` raises a
    ValueError naming the available ones. No-op when the run keeps no best checkpoint."""
    if self.best is None:
      return
    if self.best_metric not in metrics:
      raise ValueError(f"train.best_metric={self.best_metric!r} is not an eval metric; "
                       f"available: {sorted(metrics)}")
    value = float(metrics[self.best_metric])
    if not np.isfinite(value) or step in self.best.all_steps():
      return  # (A resumed run evaluates again a step it had saved as best before.)
    kept, kept_metrics = self._kept_best()
    previous = kept_metrics.get(self.best_metric)
    first = step  # The step this value was first reached at (what train.patience counts from).
    if previous is not None:
      if value == previous:  # A tie: the newer (longer trained) step becomes the best ...
        first = self._first_step(kept, kept_metrics)  # ... but is no progress.
      elif (value < previous) == (self._best_mode == "max"):
        return
    if self.best.save(step, args=self._args(state, dict(data_state)),
                      metrics={self.best_metric: value, "first_step": first},
                      force=True):
      self._unrecorded.append((self.best, step))

  def best_since(self) -> int | None:
    """The step at which the best kept value was first reached (None: no best yet).

    Read from the best checkpoint's metrics, so a resumed run agrees; a checkpoint written
    before this was recorded counts from its own step."""
    if self.best is None:
      return None
    kept, kept_metrics = self._kept_best()
    return None if kept is None else self._first_step(kept, kept_metrics)

  @staticmethod
  def _first_step(kept: int, kept_metrics: dict) -> int:
    """Where the kept best value was first reached (its own step if not recorded)."""
    return int(kept_metrics.get("first_step", kept))

  def _kept_best(self) -> tuple[int | None, dict]:
    """The best manager's one kept step (the best so far) and its metrics, after any
    pending save of it has finished."""
    self._finish(self.best)
    kept = self.best.latest_step()
    return kept, ({} if kept is None else dict(self.best.metrics(kept) or {}))

  def latest_step(self) -> int | None:
    """The newest saved step of ``latest/`` (None: nothing saved yet)."""
    return self.latest.latest_step()

  def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict[str, Any]]:
    """Restores ``step`` as is (no damage check, no fallback); see :meth:`restore_latest`."""
    return restore_from(self.latest, step, abstract_state)

  def restore_latest(self, abstract_state: Any, start_fresh_if_all_damaged: bool = False
                     ) -> Restored | None:
    """Restores the newest usable step, moving damaged newer steps aside.

    Each step, newest first, is checked (:func:`check_step_dir`), then its metadata read,
    its parameters compared with ``abstract_state``, its arrays restored and checked finite.
    A step that fails any of this for a reason other than a config mismatch is logged as a
    warning and the next older step is tried. Once a usable step is found, the damaged
    newer ones are moved to ``<workdir>/checkpoints_damaged/<step>-<tag>`` (by process 0
    only; never deleted).

    When every step is damaged nothing is moved and :class:`AllCheckpointsDamagedError`
    names them, unless ``start_fresh_if_all_damaged``: then they are moved aside and None is
    returned (the run starts from step 0).

    Args:
      abstract_state: the TrainState of ShapeDtypeStructs (with shardings) to restore into.
      start_fresh_if_all_damaged: see above (``config.train.start_fresh_if_all_damaged``).

    Returns:
      The restored step, or None when there is no checkpoint (or, when allowed, none
      usable).

    Raises:
      ValueError: the newest intact checkpoint does not match the model (nothing moved).
      AllCheckpointsDamagedError: every step is damaged (nothing moved).
    """
    found = []  # (step, step_dir, CheckpointDamagedError), newest first.
    result = None
    self.latest.reload()
    for step in sorted(self.latest.all_steps(), reverse=True):
      step_dir = os.path.join(str(self.latest.directory), str(step))
      try:
        verified = check_step_dir(step_dir)
        state, data_state = restore_from(self.latest, step, abstract_state,
                                         verified=verified)
        bad = first_non_finite(state)
        if bad is not None:
          raise CheckpointDamagedError(
              "non-finite", f"{step_dir}: {bad} holds NaN or Inf (written before the "
              "trainer checked updates for finiteness?)")
      except CheckpointDamagedError as e:
        logging.warning("Checkpoint step %d is damaged (%s): %s; trying the next older "
                        "step.", step, e.tag, e.reason)
        found.append((step, step_dir, e))
        continue
      result = Restored(step, state, data_state, (), verified)
      break
    if not found:
      return result
    if result is None and not start_fresh_if_all_damaged:
      raise AllCheckpointsDamagedError(
          f"every checkpoint in {self.latest.directory} is damaged; nothing was moved:\n  "
          + "\n  ".join(f"step {s} ({e.tag}): {e.reason}" for s, _, e in found)
          + f"\nInspect them, or relaunch with --config.train.start_fresh_if_all_damaged=True "
          f"to move them to {self.workdir}/{DAMAGED_DIR} and train from step 0.")
    damaged = tuple(self._set_aside(step, step_dir, e) for step, step_dir, e in found)
    # Orbax caches its step list: a fresh manager sees the folders that are left.
    self.latest.close()
    self.latest = _manager(os.path.join(self.workdir, "checkpoints"), self._keep,
                           self._async_save)
    if result is None:
      logging.warning("No usable checkpoint is left in %s/checkpoints (the damaged ones "
                      "are in %s/%s); starting afresh (train.start_fresh_if_all_damaged).",
                      self.workdir, self.workdir, DAMAGED_DIR)
      return None
    return dataclasses.replace(result, damaged=damaged)

  def check_best(self) -> tuple[DamagedCheckpoint, ...]:
    """Moves damaged steps of ``best/`` aside (``checkpoints_damaged/best-<step>-<tag>``).

    ``best/`` is written, never resumed from, so its steps get the file checks of
    :func:`check_step_dir` only (no restore). A damaged best step is moved aside with a
    warning; the next evaluation then becomes the best (the damaged one's score is
    forgotten).

    Returns:
      The damaged best steps, newest first (empty without ``best_metric``).
    """
    if self.best is None:
      return ()
    damaged = []
    for step in sorted(self.best.all_steps(), reverse=True):
      step_dir = os.path.join(str(self.best.directory), str(step))
      try:
        check_step_dir(step_dir)
      except CheckpointDamagedError as e:
        damaged.append(self._set_aside(step, step_dir, e, prefix="best-"))
    if damaged:
      self.best.close()
      self.best = _manager(os.path.join(self.workdir, "best"), 1, self._async_save,
                           self.best_metric, self._best_mode)
    return tuple(damaged)

  def _set_aside(self, step: int, step_dir: str, err: CheckpointDamagedError,
                 prefix: str = "") -> DamagedCheckpoint:
    moved_to = ""
    if jax.process_index() == 0 and os.path.exists(step_dir):
      base = os.path.join(self.workdir, DAMAGED_DIR, f"{prefix}{step}-{err.tag}")
      moved_to, n = base, 1
      while os.path.exists(moved_to):
        n += 1
        moved_to = f"{base}.{n}"
      os.makedirs(os.path.dirname(moved_to), exist_ok=True)
      os.rename(step_dir, moved_to)
      now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
      with open(os.path.join(moved_to, "DAMAGED.txt"), "w", encoding="utf-8") as f:
        f.write(f"step {step} moved here from {step_dir} at {now}:\n{err.reason}\n")
    logging.warning("Damaged checkpoint %s/%d (%s) moved to %s.", "best" if prefix else
                    "checkpoints", step, err.tag,
                    moved_to or "(left in place: process 0 moves it)")
    return DamagedCheckpoint(step, err.tag, err.reason, moved_to)

  def wait(self) -> None:
    """Waits for the async saves and records the finished ones as good."""
    self._finish(self.latest)
    if self.best is not None:
      self._finish(self.best)

  def close(self) -> None:
    """Waits for pending saves, marks them good and closes the managers."""
    self.wait()
    self.latest.close()
    if self.best is not None:
      self.best.close()


def restore_from(manager: ocp.CheckpointManager, step: int, abstract_state: Any,
                 verified: bool | None = None) -> tuple[Any, dict[str, Any]]:
  """Restores ``step`` of ``manager`` into ``abstract_state``.

  Args:
    manager: the checkpoint manager.
    step: the step to restore.
    abstract_state: TrainState of ShapeDtypeStructs (with shardings).
    verified: None: errors propagate as they are (no damage handling). True/False: the
      step passed its good.json record / had none; unreadable metadata, and restore errors
      of an unverified step, raise CheckpointDamagedError. A verified step's files are
      intact, so its restore errors propagate (e.g. an optimizer changed by the config).

  Returns:
    (state, data_state).

  Raises:
    ValueError: the checkpoint's parameters do not match ``abstract_state``.
  """
  where = f"checkpoint {manager.directory}/{step}"
  try:
    state_meta = state_metadata(manager, step)
    params_meta = state_meta["params"]
  except Exception as e:  # pylint: disable=broad-except
    if verified is None:
      raise
    raise CheckpointDamagedError("unreadable", f"{where}: reading its state metadata "
                                 f"failed: {type(e).__name__}: {str(e)[:500]}") from e
  # Parameters decide compatibility; then the optimizer's transforms (a changed optim.*
  # field is a config error, not damage).
  check_compatible(abstract_state.params, params_meta, where)
  if "opt_state" in state_meta:
    check_optimizer_layout(abstract_state.opt_state, state_meta["opt_state"], where)
  saved_scale = isinstance(state_meta, Mapping) and state_meta.get("loss_scale") is not None
  target, scale_fix = _loss_scale_target(abstract_state, saved_scale, where)
  try:
    restored = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(target), data=ocp.args.JsonRestore()))
  except Exception as e:  # pylint: disable=broad-except
    if verified is None or verified:
      raise
    raise CheckpointDamagedError("unreadable", f"{where}: restore failed: "
                                 f"{type(e).__name__}: {str(e)[:500]}") from e
  return scale_fix(restored["state"]), dict(restored["data"] or {})


_STATE_FIELDS = ("step", "params", "opt_state")


def saved_tree(state: Any) -> Any:
  """What a TrainState is saved as: its fields, with ``loss_scale`` only when the run has
  one (so runs without a loss scale write, and read, what they did before it existed)."""
  if getattr(state, "loss_scale", False) is None:
    return {name: getattr(state, name) for name in _STATE_FIELDS}
  return state


def _loss_scale_target(abstract_state: Any, saved_has_scale: bool, where: str):
  """The restore target for a checkpoint with or without a loss scale, and what turns the
  restored tree into a state shaped like ``abstract_state``: a run that now scales its loss
  (float16) but was saved without starts from the initial scale; one that no longer does
  drops the saved scale (both logged)."""
  if not hasattr(abstract_state, "loss_scale"):  # Not a TrainState (tests' own trees).
    return abstract_state, lambda tree: tree
  wanted = abstract_state.loss_scale
  target = {name: getattr(abstract_state, name) for name in _STATE_FIELDS}
  if saved_has_scale:
    if wanted is None:
      logging.warning("%s holds a loss scale that this run does not use "
                      "(optim.loss_scale); dropping it", where)
      place = abstract_state.step.sharding
      target["loss_scale"] = loss_scale_lib.LossScale(
          scale=jax.ShapeDtypeStruct((), jnp.float32, sharding=place),
          good_steps=jax.ShapeDtypeStruct((), jnp.int32, sharding=place))
    else:
      target["loss_scale"] = wanted
  elif wanted is not None:
    logging.warning("%s holds no loss scale (saved by a run without optim.loss_scale); "
                    "starting from the initial scale", where)

  def finish(tree):
    scale = tree.get("loss_scale") if wanted is not None else None
    if scale is None and wanted is not None:
      scale = jax.device_put(loss_scale_lib.initial(),
                             jax.tree.map(lambda x: x.sharding, wanted))
    return abstract_state.replace(**{name: tree[name] for name in _STATE_FIELDS},
                                  loss_scale=scale)
  return target, finish


def checkpoint_dir(path: str) -> str:
  """A workdir (with checkpoints/) or a checkpoint manager directory itself."""
  sub = os.path.join(path, "checkpoints")
  return sub if os.path.isdir(sub) else path


def load_param_subtrees(path: str, step: int, modules: Iterable[str], params: Any,
                        abstract_state: Any) -> Any:
  """Warm start: returns ``params`` with the top-level submodules ``modules`` replaced by
  those of the checkpoint at ``path`` (``step`` -1 = latest). Shapes must match exactly."""
  directory = checkpoint_dir(path)
  if not os.path.isdir(directory):
    raise ValueError(f"config.init_from.path={path!r}: no checkpoint directory there")
  manager = ocp.CheckpointManager(os.path.abspath(directory), item_handlers=_handlers(),
                                  options=ocp.CheckpointManagerOptions(read_only=True))
  step = manager.latest_step() if step == -1 else step
  if step is None or step not in manager.all_steps():
    raise ValueError(f"config.init_from: no checkpoint step {step} in {directory} "
                     f"(available: {manager.all_steps()})")
  try:  # The trainer's own check: another run's damaged weights are never copied.
    check_step_dir(os.path.join(directory, str(step)))
  except CheckpointDamagedError as e:
    manager.close()
    raise CheckpointDamagedError(
        e.tag, f"config.init_from: the checkpoint {directory}/{step} is damaged ({e.tag}: "
        f"{e.reason}); choose another with config.init_from.step (available: "
        f"{manager.all_steps()})") from None
  state_meta = state_metadata(manager, step)
  src_params_meta = state_meta["params"]
  modules = list(modules)
  for name in modules:
    if name not in params:
      raise ValueError(f"config.init_from.modules: the model has no submodule {name!r} "
                       f"(it has {sorted(params)})")
    if name not in src_params_meta:
      raise ValueError(f"config.init_from: the checkpoint at {directory} has no parameters "
                       f"for {name!r} (it has {sorted(src_params_meta)})")
    check_compatible({name: params[name]}, {name: src_params_meta[name]},
                     f"init_from checkpoint {directory}/{step}")
  # Restore the saved state as saved (its own optimizer may differ), placed like our params.
  mesh = jax.tree.leaves(abstract_state.params)[0].sharding.mesh
  sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=sharding),
                        state_meta)
  restored = manager.restore(step, args=ocp.args.Composite(
      state=ocp.args.StandardRestore(target)))
  manager.close()
  new_params = dict(params)
  for name in modules:
    new_params[name] = restored["state"]["params"][name]
  return new_params
