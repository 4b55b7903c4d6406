"""Dynamic loss scaling of float16 runs (train/loss_scale.py, loop.make_train_step)."""
import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from hypothesis import given, settings, strategies as st

from conftest import load_config
from longtext_jax import train
from longtext_jax.train import checkpointing
from longtext_jax.train import loop
from longtext_jax.train import loss_scale as ls_lib


class _Linear(nn.Module):
  """One dense layer computed in ``dtype`` (float32 parameters)."""
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, batch, train=False):
    del train
    out = nn.Dense(4, dtype=self.dtype, param_dtype=jnp.float32)(batch["x"])
    return {"y": out.astype(jnp.float32)}


class _Squared:
  """A task stub: sum of squared errors times ``factor`` over ``weight`` rows."""

  def __init__(self, factor):
    self.factor = factor

  def loss(self, outputs, batch):
    err = outputs["y"] - batch["y"]
    return self.factor * jnp.sum(err * err), jnp.asarray(batch["x"].shape[0], jnp.float32)


def _setup(dtype, factor, scale=None):
  rng = np.random.default_rng(0)
  batch = {"x": jnp.asarray(rng.normal(size=(8, 16)), jnp.float32),
           "y": jnp.asarray(rng.normal(size=(8, 4)), jnp.float32)}
  model = _Linear(dtype)
  # Zero parameters: the updated ones are minus the gradient, exactly (no rounding of a
  # small update against a larger weight).
  params = jax.tree.map(jnp.zeros_like, model.init(jax.random.key(0), batch)["params"])
  tx = optax.sgd(1.0)
  state = loop.init_from_params(params, tx, loss_scale=scale is not None)
  if scale is not None:
    state = state.replace(loss_scale=ls_lib.initial(scale))
  step = jax.jit(loop.make_train_step(model, _Squared(factor), tx))
  return state, step, batch


def _gradient(state, new_state):
  return jax.tree.map(lambda a, b: np.asarray(a, np.float64) - np.asarray(b, np.float64),
                      state.params, new_state.params)


def _rel_err(got, want):
  return np.linalg.norm(got - want) / np.linalg.norm(want)


def test_float16_gradients_underflow_without_a_scale_and_match_float32_with_one():
  """A loss of ~1e-9 per element: unscaled, its float16 cotangents (~2e-9) are below
  float16's smallest subnormal (6e-8) and the gradient is lost; scaled it is float32's to
  float16 precision."""
  factor = 1e-9
  ref_state, ref_step, batch = _setup(jnp.float32, factor)
  want = _gradient(ref_step(ref_state, batch, jax.random.key(1))[0], ref_state)
  f16_state, f16_step, _ = _setup(jnp.float16, factor)
  plain = _gradient(f16_step(f16_state, batch, jax.random.key(1))[0], f16_state)
  assert _rel_err(plain["Dense_0"]["kernel"], want["Dense_0"]["kernel"]) > 0.5  # The bug.
  scaled_state, scaled_step, _ = _setup(jnp.float16, factor, scale=2.0 ** 15)
  new_state, metrics = scaled_step(scaled_state, batch, jax.random.key(1))
  got = _gradient(new_state, scaled_state)
  assert bool(metrics["ok"]) and not bool(metrics["skipped"])
  for name in ("kernel", "bias"):
    assert _rel_err(got["Dense_0"][name], want["Dense_0"][name]) < 5e-3, name
  assert float(metrics["loss_scale"]) == 2.0 ** 15
  assert int(new_state.loss_scale.good_steps) == 1 and int(new_state.step) == 1


def test_an_overflowing_step_is_skipped_until_the_scale_fits():
  """Cotangents of ~1e5 x scale overflow float16: each such step keeps parameters and
  optimizer state, advances the step and halves the scale, until one fits; that one's
  update equals float32's."""
  factor = 1.0
  ref_state, ref_step, batch = _setup(jnp.float32, factor)
  want = _gradient(ref_step(ref_state, batch, jax.random.key(1))[0], ref_state)
  state, step, _ = _setup(jnp.float16, factor, scale=2.0 ** 15)
  scales, skipped = [], 0
  for _ in range(16):
    new_state, metrics = step(state, batch, jax.random.key(1))
    assert bool(metrics["ok"])
    scales.append(float(metrics["loss_scale"]))
    assert int(new_state.step) == int(state.step) + 1
    if not bool(metrics["skipped"]):
      break
    skipped += 1
    for a, b in zip(jax.tree.leaves(new_state.params), jax.tree.leaves(state.params)):
      np.testing.assert_array_equal(a, b)
    assert float(new_state.loss_scale.scale) == float(state.loss_scale.scale) / 2
    state = new_state
  assert skipped >= 1, scales  # The initial scale did overflow here.
  assert scales == [2.0 ** (15 - i) for i in range(len(scales))]
  got = _gradient(new_state, state)
  assert _rel_err(got["Dense_0"]["kernel"], want["Dense_0"]["kernel"]) < 5e-3


def test_a_non_finite_gradient_at_the_minimum_scale_or_a_non_finite_loss_stops():
  """At scale 1 an overflow is not skipped (``ok`` false, state unchanged), nor is a
  NaN loss at any scale."""
  state, step, batch = _setup(jnp.float16, 1e6, scale=ls_lib.MIN_SCALE)
  new_state, metrics = step(state, batch, jax.random.key(1))
  assert np.isfinite(float(metrics["loss"])) and not np.isfinite(float(metrics["grad_norm"]))
  assert not bool(metrics["ok"]) and not bool(metrics["skipped"])
  assert int(new_state.step) == 0 and float(new_state.loss_scale.scale) == ls_lib.MIN_SCALE
  state, step, batch = _setup(jnp.float16, 1.0, scale=2.0 ** 10)
  bad = dict(batch, y=batch["y"].at[0, 0].set(jnp.nan))
  new_state, metrics = step(state, bad, jax.random.key(1))
  assert not bool(metrics["ok"]) and not bool(metrics["skipped"])
  assert int(new_state.step) == 0 and float(new_state.loss_scale.scale) == 2.0 ** 10


@settings(max_examples=40, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=40), st.integers(1, 5),
       st.sampled_from([1.0, 4.0, 2.0 ** 15, ls_lib.MAX_SCALE]))
def test_adjust_follows_halve_on_overflow_double_after_interval(finite, interval, start):
  """The scale sequence equals a plain-Python statement of the rule."""
  state = ls_lib.initial(start)
  scale, good = start, 0
  adjust = jax.jit(ls_lib.adjust, static_argnums=2)
  for f in finite:
    state = adjust(state, jnp.asarray(f), interval)
    if f:
      good += 1
      if good >= interval:
        scale, good = min(scale * 2, ls_lib.MAX_SCALE), 0
    else:
      scale, good = max(scale / 2, ls_lib.MIN_SCALE), 0
    assert (float(state.scale), int(state.good_steps)) == (scale, good)


def test_enabled_by_float16_or_by_name():
  config = load_config("masked_summation.py", "transformer,tiny")
  assert not ls_lib.enabled(config)
  config.model.encoder.dtype = "bfloat16"
  assert not ls_lib.enabled(config)
  config.model.encoder.dtype = "float16"
  assert ls_lib.enabled(config)
  config.optim.loss_scale = "none"
  assert not ls_lib.enabled(config)
  config.model.encoder.dtype = "float32"
  config.optim.loss_scale = "dynamic"
  assert ls_lib.enabled(config)


def _saved_keys(workdir, step):
  manager = ocp.CheckpointManager(os.path.join(workdir, "checkpoints"),
                                  item_handlers=checkpointing._handlers(),
                                  options=ocp.CheckpointManagerOptions(read_only=True))
  return sorted(checkpointing.state_metadata(manager, step))


def _msum(steps, dtype, **optim):
  config = load_config("masked_summation.py", "transformer,tiny")
  config.train.progress_bar = False
  config.train.num_steps = steps
  config.train.log_every = 2
  config.train.eval_every = config.train.checkpoint_every = 3
  config.model.encoder.dtype = dtype
  for key, value in optim.items():
    config.optim[key] = value
  return config


def test_float16_run_learns_checkpoints_its_scale_and_resumes_exactly(tmp_path):
  """End to end: a float16 Transformer run logs its scale, saves it with the state, and a
  run stopped at step 3 and resumed to 6 ends with the parameters and scale of an
  uninterrupted one. A float32 run's checkpoint holds no loss scale (the layout of runs
  saved before loss scaling existed)."""
  whole = tmp_path / "whole"
  train.train_and_evaluate(_msum(6, "float16"), str(whole))
  part = tmp_path / "part"
  train.train_and_evaluate(_msum(3, "float16"), str(part))
  resumed = _msum(6, "float16")
  resumed.train.allow_config_change = "train.num_steps"
  train.train_and_evaluate(resumed, str(part))
  assert _saved_keys(whole, 6) == ["loss_scale", "opt_state", "params", "step"]
  states = {}
  for name in ("whole", "part"):
    manager = ocp.CheckpointManager(os.path.join(tmp_path, name, "checkpoints"),
                                    item_handlers=checkpointing._handlers(),
                                    options=ocp.CheckpointManagerOptions(read_only=True))
    states[name] = jax.device_get(manager.restore(6, args=ocp.args.Composite(
        state=ocp.args.StandardRestore()))["state"])
  for a, b in zip(jax.tree.leaves(states["whole"]), jax.tree.leaves(states["part"])):
    np.testing.assert_array_equal(a, b)
  with open(whole / "metrics.jsonl") as f:
    logged = [r for r in map(json.loads, f) if r["split"] == "train"]
  assert all("loss_scale" in r and "skipped" in r for r in logged)
  assert logged[-1]["loss"] < logged[0]["loss"]
  f32 = tmp_path / "f32"
  train.train_and_evaluate(_msum(3, "float32"), str(f32))
  assert _saved_keys(f32, 3) == ["opt_state", "params", "step"]


def test_a_checkpoint_without_a_scale_resumes_under_one_and_back(tmp_path, caplog):
  """Switching optim.loss_scale on an existing run (allowed by name): the state restores,
  starting from the initial scale, or dropping the saved one; each is logged."""
  workdir = tmp_path / "run"
  train.train_and_evaluate(_msum(3, "float32"), str(workdir))
  on = _msum(6, "float32", loss_scale="dynamic")
  on.train.allow_config_change = "train.num_steps,optim.loss_scale"
  with caplog.at_level("WARNING"):
    train.train_and_evaluate(on, str(workdir))
  assert "holds no loss scale" in caplog.text
  assert _saved_keys(workdir, 6) == ["loss_scale", "opt_state", "params", "step"]
  off = _msum(9, "float32", loss_scale="none")
  off.train.allow_config_change = "train.num_steps,optim.loss_scale"
  caplog.clear()
  with caplog.at_level("WARNING"):
    train.train_and_evaluate(off, str(workdir))
  assert "does not use" in caplog.text
  assert _saved_keys(workdir, 9) == ["opt_state", "params", "step"]


@pytest.mark.parametrize("bad", ["static", "yes"])
def test_a_misspelt_choice_is_refused_at_validation(bad):
  from longtext_jax import config as config_lib
  config = _msum(3, "float32", loss_scale=bad)
  with pytest.raises(ValueError, match="optim.loss_scale"):
    config_lib.validate(config)
