"""The trainer: ``train_and_evaluate(config, workdir)``, called by the CLI, tests and notebooks.

One step = one optimizer update on one global batch (optionally accumulated over
``optim.grad_accum_steps`` micro-batches inside the jitted step). Losses are sums over units
divided by the total weight of the global batch, so accumulation and data parallelism give
the same update as one big batch.
"""
from __future__ import annotations

import json
import os
import signal
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

from longtext_jax import data as data_lib
from longtext_jax import model as model_lib
from longtext_jax import tasks as tasks_lib
from longtext_jax.encoders import bert as bert_lib
from longtext_jax.layers import partitioning
from longtext_jax.train import checkpointing
from longtext_jax.train import logging as log_lib
from longtext_jax.train import optimizer as optim_lib
from longtext_jax.train import sharding as shard_lib


@flax.struct.dataclass
class TrainState:
  """Everything that changes during training (the model and optimizer live outside)."""
  step: jax.Array
  params: Any
  opt_state: Any


class NonFiniteLossError(FloatingPointError):
  """Raised when a step produced a NaN/Inf loss or gradient; the update was not applied."""


class _Preemption:
  """Turns SIGTERM into a flag the loop checks after every step."""

  def __init__(self):
    self.requested = False
    self._previous = None

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._handle)
    return self

  def _handle(self, signum, frame):
    del signum, frame
    self.requested = True

  def __exit__(self, *exc):
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)


def _strip_host_keys(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  return {k: v for k, v in batch.items() if k != "example_id"}


def make_train_step(model, task: tasks_lib.Task, tx: optax.GradientTransformation,
                    schedule: optax.Schedule, grad_accum_steps: int) -> Callable:
  """Returns step(state, batch, rng) -> (state, metrics); not yet jitted."""

  def loss_fn(params, batch, rng):
    outputs = model.apply({"params": params}, batch, train=True, rngs={"dropout": rng})
    loss_sum, weight = task.loss(outputs, batch)
    return loss_sum, weight

  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

  def step(state: TrainState, batch, rng):
    rng = jax.random.fold_in(rng, state.step)
    if grad_accum_steps == 1:
      (loss_sum, weight), grads = grad_fn(state.params, batch, rng)
    else:
      def split(x):  # Micro-batch i takes rows i, i + A, ...: each spans every device.
        b = x.shape[0]
        return jnp.swapaxes(x.reshape((b // grad_accum_steps, grad_accum_steps)
                                      + x.shape[1:]), 0, 1)
      micro = jax.tree.map(split, batch)

      def body(carry, inputs):
        i, mb = inputs
        (ls, w), g = grad_fn(state.params, mb, jax.random.fold_in(rng, i))
        acc_l, acc_w, acc_g = carry
        return (acc_l + ls, acc_w + w, jax.tree.map(jnp.add, acc_g, g)), None

      zeros = jax.tree.map(jnp.zeros_like, state.params)
      (loss_sum, weight, grads), _ = jax.lax.scan(
          body, (jnp.zeros(()), jnp.zeros(()), zeros),
          (jnp.arange(grad_accum_steps), micro))
    denom = jnp.maximum(weight, 1.0)
    grads = jax.tree.map(lambda g: g / denom, grads)
    loss = loss_sum / denom
    grad_norm = optax.global_norm(grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    ok = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
    new_state = TrainState(step=state.step + 1, params=params, opt_state=opt_state)
    # A non-finite step leaves the state untouched; the host stops the run on seeing `ok`.
    new_state = jax.tree.map(lambda n, o: jnp.where(ok, n, o), new_state, state)
    metrics = {"loss": loss, "grad_norm": grad_norm, "learning_rate": schedule(state.step),
               "weight": weight, "ok": ok}
    return new_state, metrics

  return step


def make_eval_step(model, task: tasks_lib.Task) -> Callable:
  def step(params, batch):
    outputs = model.apply({"params": params}, batch, train=False)
    return task.metrics(outputs, batch)
  return step


def evaluate(eval_step, params, batches: Iterator[Mapping[str, np.ndarray]], mesh,
             task: tasks_lib.Task) -> dict[str, float]:
  sums = None
  for batch in batches:
    out = eval_step(params, shard_lib.to_global(_strip_host_keys(batch), mesh))
    out = jax.tree.map(lambda x: np.asarray(x, np.float64), jax.device_get(out))
    sums = out if sums is None else jax.tree.map(np.add, sums, out)
  if sums is None:
    raise ValueError("the eval split produced no batch")
  return task.summarize(sums)


def _first_batch_shapes(source, batch_size, pad_multiple):
  return data_lib.pipeline.collate([source[i] for i in range(min(len(source), 2))],
                                   pad_multiple)


def train_and_evaluate(config, workdir: str) -> dict[str, float]:
  """Trains ``config`` in ``workdir`` (resuming from its latest checkpoint) and returns the
  final evaluation metrics. Raises NonFiniteLossError on NaN/Inf (last good checkpoint kept).
  """
  workdir = os.path.abspath(workdir)
  os.makedirs(workdir, exist_ok=True)
  is_main = jax.process_index() == 0
  if is_main:
    with open(os.path.join(workdir, "config.json"), "w") as f:
      f.write(config.to_json_best_effort(indent=2))

  tcfg = config.train
  task = tasks_lib.get_task(config.task)
  model = model_lib.build_model(config)
  splits = data_lib.build_splits(config, task)
  mesh = shard_lib.make_mesh(config.mesh)
  pad_multiple = config.data.pad_multiple

  if config.data.batch_size % config.optim.grad_accum_steps:
    raise ValueError(f"data.batch_size={config.data.batch_size} is not divisible by "
                     f"optim.grad_accum_steps={config.optim.grad_accum_steps}")
  tx, schedule = optim_lib.make_optimizer(config.optim, tcfg.num_steps)
  rng = jax.random.key(config.seed)
  init_rng, dropout_rng = jax.random.split(rng)

  example = _strip_host_keys(_first_batch_shapes(splits["train"], 2, pad_multiple))

  def in_context(fn):
    """fn traced with logical parameter names on and activation constraints mapped by
    config.mesh.rules onto the mesh (docs/scaling.md §2)."""
    def wrapped(*args):
      with partitioning.logical_axis_names(), \
           partitioning.activation_sharding(mesh, config.mesh.rules):
        return fn(*args)
    return wrapped

  @in_context
  def init_state(key):
    params = model.init(key, example, train=False)["params"]
    return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))

  replicated = shard_lib.replicated(mesh)
  abstract_boxed = jax.eval_shape(init_state, init_rng)
  state_sharding = shard_lib.state_shardings(abstract_boxed, mesh, config.mesh.rules,
                                             config.mesh.fsdp_min_size)
  abstract_state = jax.tree.map(
      lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
      flax.linen.meta.unbox(abstract_boxed), state_sharding)
  init_unboxed = lambda key: flax.linen.meta.unbox(init_state(key))

  ckpt = checkpointing.Checkpointer(workdir, tcfg.keep_checkpoints, tcfg.async_checkpoint,
                                    tcfg.best_metric, tcfg.best_mode)
  train_it = data_lib.train_iterator(splits["train"], config.data.batch_size, config.seed,
                                     jax.process_index(), jax.process_count(), pad_multiple,
                                     **data_lib.loader_options(config))
  latest = ckpt.latest_step()
  if latest is not None:
    state, data_state = ckpt.restore(latest, abstract_state)
    train_it.set_state(data_state)
    logging.info("Resumed from %s/checkpoints/%d", workdir, latest)
  else:
    state = jax.jit(init_unboxed, out_shardings=state_sharding)(init_rng)
    if config.init_from.path:
      params = checkpointing.load_param_subtrees(
          config.init_from.path, config.init_from.step, config.init_from.modules,
          state.params, abstract_state)
      state = jax.jit(init_from_params, out_shardings=state_sharding, static_argnums=1)(
          params, tx)
      logging.info("Initialised %s from %s", list(config.init_from.modules),
                   config.init_from.path)
    if config.model.encoder.get("pretrained_path"):
      # Pretrained BERT weights (safetensors) into a fresh model; a resumed run has them already.
      params = bert_lib.apply_pretrained(config, state.params)
      state = jax.jit(init_from_params, out_shardings=state_sharding, static_argnums=1)(
          params, tx)
      logging.info("Loaded pretrained encoder weights from %s",
                   config.model.encoder.pretrained_path)

  train_step = jax.jit(in_context(make_train_step(model, task, tx, schedule,
                                                  config.optim.grad_accum_steps)),
                       in_shardings=(state_sharding, shard_lib.batch_sharding(mesh),
                                     replicated),
                       out_shardings=(state_sharding, replicated), donate_argnums=(0,))
  eval_step = jax.jit(in_context(make_eval_step(model, task)),
                      in_shardings=(state_sharding.params, shard_lib.batch_sharding(mesh)),
                      out_shardings=replicated)
  # 'eval' decides the best checkpoint; other splits (e.g. 'eval_long') are reported beside it
  # as '<split>/<metric>'.
  eval_names = ["eval"] + sorted(set(splits) - {"train", "eval"})

  def run_eval(params):
    out = {}
    for name in eval_names:
      metrics = evaluate(eval_step, params, data_lib.eval_batches(
          splits[name], config.data.eval_batch_size, jax.process_index(),
          jax.process_count(), pad_multiple), mesh, task)
      out.update(metrics if name == "eval" else {f"{name}/{k}": v for k, v in metrics.items()})
    return out

  writer = log_lib.MetricWriter(workdir, enabled=is_main)
  step = int(jax.device_get(state.step))
  start_step = step
  bar = tqdm.tqdm(total=tcfg.num_steps, initial=step, disable=not (tcfg.progress_bar and is_main),
                  dynamic_ncols=True, desc="train")
  pending: tuple[int, Any] | None = None
  window: list[dict[str, float]] = []
  eval_metrics: dict[str, float] = {}
  t_window = time.perf_counter()
  profiling = False

  def resolve():
    """Reads the previous step's metrics (one step late) and stops on non-finite values."""
    nonlocal pending, t_window
    if pending is None:
      return
    s, metrics = pending
    pending = None
    metrics = jax.device_get(metrics)
    if not bool(metrics["ok"]):
      ckpt.wait()
      raise NonFiniteLossError(
          f"non-finite loss or gradient at step {s} (loss={float(metrics['loss'])}, "
          f"grad_norm={float(metrics['grad_norm'])}); the update was not applied and the "
          f"last good checkpoint is {ckpt.latest_step()} in {workdir}/checkpoints")
    window.append({k: float(v) for k, v in metrics.items() if k not in ("ok", "weight")})
    bar.set_postfix(loss=f"{float(metrics['loss']):.4g}")
    if s % tcfg.log_every == 0 or s == tcfg.num_steps:
      avg = {k: float(np.mean([m[k] for m in window])) for k in window[0]}
      elapsed = time.perf_counter() - t_window
      avg["steps_per_sec"] = len(window) / max(elapsed, 1e-9)
      writer.write(s, "train", avg)
      window.clear()
      t_window = time.perf_counter()

  try:
    with _Preemption() as preemption:
      while step < tcfg.num_steps:
        batch = next(train_it)
        if is_main and step == tcfg.profile_start_step:
          jax.profiler.start_trace(os.path.join(workdir, "profile"),
                                   create_perfetto_trace=True)
          profiling = True
        if profiling and step == tcfg.profile_start_step + tcfg.profile_num_steps:
          jax.block_until_ready(state)
          jax.profiler.stop_trace()
          profiling = False
        state, metrics = train_step(state, shard_lib.to_global(_strip_host_keys(batch), mesh),
                                    dropout_rng)
        step += 1
        resolve()
        pending = (step, metrics)
        bar.update(1)
        last = step == tcfg.num_steps
        if last or step % tcfg.eval_every == 0:
          resolve()
          eval_metrics = run_eval(state.params)
          writer.write(step, "eval", eval_metrics)
          ckpt.save_best(step, state, train_it.get_state(), eval_metrics)
        if last or step % tcfg.checkpoint_every == 0 or preemption.requested:
          resolve()
          ckpt.save(step, state, train_it.get_state())
        if preemption.requested:
          logging.warning("SIGTERM: saved step %d to %s/checkpoints; exiting.", step, workdir)
          break
      resolve()
  finally:
    if profiling:
      jax.profiler.stop_trace()
    bar.close()
    ckpt.wait()
    ckpt.close()
    writer.close()
  if is_main:
    print(f"Final eval at step {step}: " + ", ".join(
        f"{k}={v:.5g}" for k, v in eval_metrics.items()))
    print(f"Checkpoints: {workdir}/checkpoints"
          + (f" (best by {tcfg.best_metric}: {workdir}/best)" if tcfg.best_metric else ""))
    print(f"Logs: {workdir}/metrics.jsonl; TensorBoard: tensorboard --logdir {workdir}")
    print(json.dumps({"step": step, "eval": eval_metrics,
                      "steps_this_run": step - start_step}))
  return eval_metrics


def init_from_params(params, tx) -> TrainState:
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
