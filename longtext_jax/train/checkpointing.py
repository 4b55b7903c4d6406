"""Orbax checkpoints: model/optimizer state and data-iterator state saved together.

Layout in a workdir::

    checkpoints/<step>/{state,data}   the latest ``keep_checkpoints`` steps (resume source)
    best/<step>/{state,data}          the best evaluation so far by ``train.best_metric``

Restores check every parameter's shape against the model first, so a checkpoint written by a
different architecture or config fails with an error naming the offending parameter.
"""
from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

import jax
import numpy as np
import orbax.checkpoint as ocp



def _manager(directory: str, keep: int | None, async_save: bool, best_metric: str = "",
             best_mode: str = "max") -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(
      max_to_keep=keep,
      best_fn=(lambda m: m[best_metric]) if best_metric else None,
      best_mode=best_mode,
      enable_async_checkpointing=async_save,
      create=True,
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
  return "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))))
                  for k in path)


def shapes_by_path(tree: Any) -> dict[str, tuple[int, ...]]:
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


class Checkpointer:
  """The run's checkpoint managers (latest and best)."""

  def __init__(self, workdir: str, keep: int, async_save: bool = True,
               best_metric: str = "", best_mode: str = "max"):
    self.latest = _manager(os.path.join(workdir, "checkpoints"), keep, async_save)
    self.best = (_manager(os.path.join(workdir, "best"), 1, async_save, best_metric,
                          best_mode) if best_metric else None)
    self.best_metric = best_metric

  @staticmethod
  def _args(state, data_state):
    return ocp.args.Composite(state=ocp.args.StandardSave(state),
                              data=ocp.args.JsonSave(data_state))

  def save(self, step: int, state: Any, data_state: Mapping[str, Any]) -> None:
    if step in self.latest.all_steps():
      return
    self.latest.save(step, args=self._args(state, dict(data_state)), force=True)

  def save_best(self, step: int, state: Any, data_state: Mapping[str, Any],
                metrics: Mapping[str, float]) -> None:
    if self.best is None:
      return
    if self.best_metric not in metrics:
      raise ValueError(f"train.best_metric={self.best_metric!r} is not an eval metric; "
                       f"available: {sorted(metrics)}")
    if not np.isfinite(metrics[self.best_metric]):
      return
    self.best.save(step, args=self._args(state, dict(data_state)),
                   metrics={self.best_metric: float(metrics[self.best_metric])}, force=True)

  def latest_step(self) -> int | None:
    return self.latest.latest_step()

  def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict[str, Any]]:
    return restore_from(self.latest, step, abstract_state)

  def wait(self) -> None:
    self.latest.wait_until_finished()
    if self.best is not None:
      self.best.wait_until_finished()

  def close(self) -> None:
    self.latest.close()
    if self.best is not None:
      self.best.close()


def restore_from(manager: ocp.CheckpointManager, step: int, abstract_state: Any
                 ) -> tuple[Any, dict[str, Any]]:
  state_meta = state_metadata(manager, step)
  # Parameters decide compatibility (the optimizer state mirrors them).
  check_compatible(abstract_state.params, state_meta["params"],
                   f"checkpoint {manager.directory}/{step}")
  restored = manager.restore(step, args=ocp.args.Composite(
      state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore()))
  return restored["state"], dict(restored["data"] or {})


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
  sharding = jax.tree.leaves(abstract_state.params)[0].sharding
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=sharding),
                        state_meta)
  restored = manager.restore(step, args=ocp.args.Composite(
      state=ocp.args.StandardRestore(target)))
  manager.close()
  new_params = dict(params)
  for name in modules:
    new_params[name] = restored["state"]["params"][name]
  return new_params
