"""Shared test setup: strict numpy rank promotion, a per-session compilation cache, tiny
configs, subprocess helpers."""
import atexit
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

# One persistent XLA compilation cache per test session, shared by the xdist workers and the
# subprocesses the tests start (they inherit the environment): many tests compile the very same
# tiny train/eval steps, and an executable is only reused for an identical program (the key
# is the HLO, the compile options, the devices and the jax version). The session that made
# the folder removes it, so every `make test` starts cold.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="longtext_jax_xla_cache_")
  atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")
# The suite's programs are tiny and compiled once each, so compiling is most of its time
# (tests/test_ran.py: 122 s cold, 30 s with every program already in the cache). The suite
# compiles at XLA's backend optimisation level 0 and without LLVM's expensive passes; XLA's
# HLO passes, which fix the computation, run as for users. That halves the suite (17 min 42 s
# -> 9 min 53 s on one host, docs/architecture.md) and moves float32 results by rounding
# only: every test passes either way. Level 0 also hides one thing: a fused recomputation
# rounded differently from the forward, which broke jnp.max's `x == max` gradient for the
# unrolled Star-Transformer at the level users get, not at 0 (docs/benchmarks.md). The
# tests that guard it compile at the users' level (run_as_users_compile, USER_COMPILE;
# with jnp.max in place of pooling.max_over_length they fail there, and at level 0 too),
# and `make test-long` (LONGTEXT_JAX_TEST_FULL_OPT=1) compiles everything as users do. Set
# before any backend starts; the tests' subprocesses inherit it. A level or LLVM flag
# already in XLA_FLAGS is kept. The CPU backend's older fusion emitters
# (--xla_cpu_use_fusion_emitters=false) compile the same fused HLO with less work: tests/
# test_ran.py's parallel-vs-scan pair 24 -> 17 s on an AMD EPYC (Zen 3) host, the whole suite
# 17 min 21 s -> 12 min 3 s (docs/architecture.md "Tests", 1 Dec). Our modules' values and
# gradients agree under both within the tests' tolerances; a float64 oracle's hand-written
# softmax got NaN gradients through jnp.max's gradient (the hazard above) and now shifts by a
# stop_gradient max (tests/test_slstm_official.py).
if not os.environ.get("LONGTEXT_JAX_TEST_FULL_OPT"):
  _flags = os.environ.get("XLA_FLAGS", "")
  for _flag in ("--xla_llvm_disable_expensive_passes=true",
                "--xla_backend_optimization_level=0",
                "--xla_cpu_use_fusion_emitters=false"):
    if _flag.split("=")[0] not in _flags:
      _flags = f"{_flags} {_flag}".strip()
  os.environ["XLA_FLAGS"] = _flags

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs",
                  float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))

# Hypothesis: the README's test command (and CI) draws the same examples on every run, so a
# red suite is reproducible and a rare float case cannot turn CI red at random (one did
# locally, a float32 tolerance case). `HYPOTHESIS_PROFILE=explore` draws fresh random
# examples on each run, for hunting new failures (a failure prints the example to pin).
from hypothesis import settings as _hypothesis_settings  # pylint: disable=g-import-not-at-top,wrong-import-position

_hypothesis_settings.register_profile("default", derandomize=True, deadline=None)
_hypothesis_settings.register_profile("explore", derandomize=False, deadline=None)
_hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))



@pytest.fixture(autouse=True)
def _absl_verbosity_restored():
  """The command-line entry points (``run_cli``, ``main``) set absl's verbosity for their
  process; called in-process by a test they would silence the warnings that later tests in
  the same worker assert on (caplog), making the suite depend on test order."""
  from absl import logging as absl_logging  # pylint: disable=import-outside-toplevel
  verbosity = absl_logging.get_verbosity()
  yield
  absl_logging.set_verbosity(verbosity)


def pytest_addoption(parser):
  parser.addoption("--run-long", action="store_true", default=False,
                   help="also run tests marked long (studies, full-size checks)")


def pytest_collection_modifyitems(config, items):
  """Tests marked ``long`` run only with --run-long (make test-long)."""
  if config.getoption("--run-long"):
    return
  skip = pytest.mark.skip(reason="long study: run with --run-long (make test-long)")
  for item in items:
    if "long" in item.keywords:
      item.add_marker(skip)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# XLA's default backend optimisation level, the one users compile at; a compile option
# overrides the suite's XLA_FLAGS (level 0, the older fusion emitters) for one program.
USER_COMPILE = {"xla_backend_optimization_level": 3, "xla_cpu_use_fusion_emitters": True}


def run_as_users_compile(f, *args):
  """``jax.jit(f)(*args)`` compiled at the users' optimisation level (USER_COMPILE), for
  the checks whose point is what XLA's optimised build computes (see the top of this file)."""
  return jax.jit(f).lower(*args).compile(compiler_options=USER_COMPILE)(*args)


def load_config(path: str, arg: str | None = None):
  """Imports ``configs/<path>`` as a module of the ``configs`` package and calls its
  get_config(arg), locked as the CLI locks it."""
  module = importlib.import_module("configs." + path.removesuffix(".py").replace("/", "."))
  config = module.get_config(arg) if arg is not None else module.get_config()
  config.lock()
  return config


def load_script(relpath: str, name: str | None = None):
  """Imports a repository file (not a package module) as a fresh module.

  Every call executes the file anew (nothing is cached). The module is registered in
  ``sys.modules`` before it runs, so that dataclasses defined in it can look it up.

  Args:
    relpath: the file's path relative to ROOT, e.g. 'experiments/benchmark.py'.
    name: the module's name; by default derived from ``relpath``
      ('experiments/benchmark.py' -> 'script_experiments_benchmark').

  Returns:
    The executed module.
  """
  name = name or "script_" + relpath.removesuffix(".py").replace("/", "_").replace(".", "_")
  spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, relpath))
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  spec.loader.exec_module(module)
  return module


def run_cli(args, env_extra=None, timeout=300, **kwargs):
  """Runs ``python -m longtext_jax.main`` in a subprocess (a fresh JAX)."""
  env = dict(os.environ)
  env.update(env_extra or {})
  env.setdefault("PYTHONUNBUFFERED", "1")
  return subprocess.run([sys.executable, "-m", "longtext_jax.main", *args], cwd=ROOT,
                        env=env, capture_output=True, text=True, timeout=timeout, **kwargs)


def local_config(task="classification", num_classes=2, **data_fields):
  """The tiny Transformer on the ``local`` data source with byte tokens (unlocked), the
  ``data`` fields given as keywords (``train_path=...``)."""
  from longtext_jax.data import tokenizers  # pylint: disable=import-outside-toplevel
  config = load_config("masked_summation.py", "transformer,tiny")
  config.unlock()
  config.task.name = task
  config.task.num_classes = num_classes
  config.data.name = "local"
  config.model.input = "tokens"
  config.model.vocab_size = tokenizers.ByteTokenizer().vocab_size
  for k, v in data_fields.items():
    setattr(config.data, k, v)
  return config


def learned_positions_config(max_len: int):
  """A tiny byte-level Transformer (1 layer, d=16, learned positions up to ``max_len``) on
  the ``local`` source, for inference tests that build a Predictor without training."""
  from longtext_jax import config as config_lib  # pylint: disable=import-outside-toplevel
  from longtext_jax.data import tokenizers  # pylint: disable=import-outside-toplevel
  c = config_lib.base_config()
  c.data.name = "local"
  c.data.pad_multiple = 16
  c.data.eval_batch_size = 4
  c.model.vocab_size = tokenizers.ByteTokenizer().vocab_size
  c.model.d_model = 16
  c.model.encoder = config_lib.encoder_config("transformer", num_layers=1, num_heads=2,
                                              position="learned", max_len=max_len)
  return c


@pytest.fixture
def tiny_msum():
  """Factory: the tiny masked-summation config for an encoder (locked: typos fail)."""
  def make(encoder="transformer"):
    config = load_config("masked_summation.py", f"{encoder},tiny")
    config.train.progress_bar = False
    return config
  return make


def assert_pool_input_is_before_dropout(sequence, pool_input, mask, rate):
  """Training mode, ``pool_dropped=False``: every returned (dropped) token output is 0 or
  ``1 / (1 - rate)`` x what the pooled path read; about ``rate`` of them are 0 (the dropout
  acted on the token outputs) and none of what was pooled is (it did not act there)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  seq, pool_in = np.asarray(sequence), np.asarray(pool_input)
  m = np.asarray(mask)[..., None]
  dropped = (seq == 0) & m
  assert abs(dropped[np.asarray(mask)].mean() - rate) < 0.2
  assert not np.any((pool_in == 0) & m)
  np.testing.assert_allclose(np.where(dropped, 0, seq),
                             np.where(dropped, 0, pool_in / (1 - rate)), rtol=1e-6, atol=1e-6)
