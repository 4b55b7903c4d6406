"""Follows ``config`` through one tiny run: which modules and functions receive it, who
calls whom, and how often a call climbs back up the layering (docs/architecture.md).

A "stop" is a function of longtext_jax (not a lambda or comprehension) that is called with
a ``ConfigDict`` (or a section of one) among its arguments; its caller is the nearest such
function below it on the stack. A "climb" is a call from a room to a room above it in the layering of
tests/test_layering.py (e.g. data calling into the trainer through a callback).

Usage (a minute on an idle 2-core CPU; the numbers in docs/architecture.md came from this command):
  python experiments/config_trace.py [--config configs/ran/demo.py:tiny] [--steps 2]
"""
from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import sys
import tempfile

import ml_collections

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "longtext_jax") + os.sep
# Rank of each room in the layering (higher may import lower; see tests/test_layering.py).
RANK = {"layers": 0, "metrics_conll": 0, "encoders": 1, "tasks": 2, "data": 2,
        "pair_model": 3, "model": 3, "config": 4, "train": 5, "main": 6, "tokenize": 6,
        "__init__": 6}
_CONFIG_TYPES = (ml_collections.ConfigDict, ml_collections.FrozenConfigDict)


def _module(filename: str) -> str:
  """``.../longtext_jax/train/loop.py`` -> ``train/loop``."""
  return os.path.relpath(filename, PACKAGE)[:-len(".py")]


def _room(module: str) -> str:
  return module.split(os.sep)[0]


def trace(config, workdir: str) -> dict:
  """Runs ``train_and_evaluate(config, workdir)`` under a profiler hook.

  Args:
    config: the experiment config (validated by the run itself).
    workdir: the run's output folder.

  Returns:
    ``{"modules", "stops", "calls", "climbs"}``: the modules and ``module:function`` stops
    that received the config, the caller -> callee edges between stops, and the edges that
    go from a lower room to a higher one.
  """
  from longtext_jax import train  # pylint: disable=import-outside-toplevel
  carrying = set()  # Frames (ids) of stops still on the stack.
  edges = collections.Counter()
  stops = collections.Counter()

  def hook(frame, event, arg):
    del arg
    if (event != "call" or not frame.f_code.co_filename.startswith(PACKAGE)
        or frame.f_code.co_name.startswith("<")):  # Lambdas and comprehensions: no stop.
      return
    values = frame.f_locals.values()
    if not any(isinstance(v, _CONFIG_TYPES) for v in values):
      return
    stop = f"{_module(frame.f_code.co_filename)}:{frame.f_code.co_name}"
    stops[stop] += 1
    parent = frame.f_back
    while parent is not None and id(parent) not in carrying:
      parent = parent.f_back
    if parent is not None:
      edges[(f"{_module(parent.f_code.co_filename)}:{parent.f_code.co_name}", stop)] += 1
    carrying.add(id(frame))

  sys.setprofile(hook)
  try:
    train.train_and_evaluate(config, workdir)
  finally:
    sys.setprofile(None)
  climbs = [(a, b) for a, b in edges
            if RANK[_room(a.split(":")[0])] < RANK[_room(b.split(":")[0])]]
  return {"modules": sorted({s.split(":")[0] for s in stops}), "stops": sorted(stops),
          "calls": sorted(f"{a} -> {b}" for a, b in edges),
          "climbs": sorted(f"{a} -> {b}" for a, b in climbs)}


def main(argv: list[str] | None = None) -> dict:
  """Command line: see the module docstring. Prints and returns the trace."""
  parser = argparse.ArgumentParser()
  parser.add_argument("--config", default="configs/ran/demo.py:tiny")
  parser.add_argument("--steps", type=int, default=2)
  args = parser.parse_args(argv)
  sys.path.insert(0, ROOT)
  path, _, arg = args.config.partition(":")
  module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
  config = module.get_config(arg) if arg else module.get_config()
  config.lock()  # As the CLI does.
  config.train.num_steps = args.steps
  config.train.eval_every = args.steps
  config.train.progress_bar = False
  with tempfile.TemporaryDirectory() as workdir:
    result = trace(config, workdir)
  summary = {"config": args.config, "modules": len(result["modules"]),
             "stops": len(result["stops"]), "climbs": len(result["climbs"])}
  print(json.dumps({**result, "summary": summary}, indent=1))
  return result


if __name__ == "__main__":
  main()
