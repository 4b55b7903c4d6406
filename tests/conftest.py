"""Shared test setup: strict numpy rank promotion, tiny configs, subprocess helpers."""
import importlib
import os
import subprocess
import sys

import jax
import pytest

jax.config.update("jax_numpy_rank_promotion", "raise")



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


def load_config(path: str, arg: str | None = None):
  """Imports ``configs/<path>`` as a module of the ``configs`` package and calls its
  get_config(arg), locked as the CLI locks it."""
  module = importlib.import_module("configs." + path.removesuffix(".py").replace("/", "."))
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


@pytest.fixture
def tiny_msum():
  """Factory: the tiny masked-summation config for an encoder (locked: typos fail)."""
  def make(encoder="transformer"):
    config = load_config("masked_summation.py", f"{encoder},tiny")
    config.train.progress_bar = False
    return config
  return make
