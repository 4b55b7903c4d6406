"""Shared test setup: strict numpy rank promotion, tiny configs, subprocess helpers."""
import importlib.util
import os
import subprocess
import sys

import jax
import pytest

jax.config.update("jax_numpy_rank_promotion", "raise")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_config(path: str, arg: str | None = None):
  """Loads ``configs/<path>`` and calls its get_config(arg), as the CLI does."""
  full = os.path.join(ROOT, "configs", path)
  spec = importlib.util.spec_from_file_location(f"cfg_{abs(hash(full))}", full)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config(arg) if arg is not None else module.get_config()
  config.lock()
  return config


def run_cli(args, env_extra=None, timeout=300, **kwargs):
  """Runs ``python -m longtext_jax.main`` in a subprocess (a fresh JAX)."""
  env = dict(os.environ)
  env.update(env_extra or {})
  env.setdefault("PYTHONUNBUFFERED", "1")
  return subprocess.run([sys.executable, "-m", "longtext_jax.main", *args], cwd=ROOT,
                        env=env, capture_output=True, text=True, timeout=timeout, **kwargs)


@pytest.fixture
def tiny_msum():
  """Factory: the tiny masked-summation config for an encoder (locked: typos fail)."""
  def make(encoder="transformer"):
    config = load_config("masked_summation.py", f"{encoder},tiny")
    config.train.progress_bar = False
    return config
  return make
