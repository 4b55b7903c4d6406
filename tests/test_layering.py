"""Import direction between the rooms of longtext_jax (docs/architecture.md, 'Layering'),
and no repeated code blocks in configs/.

Every ``import`` of every module under longtext_jax/ (top-level and inside functions alike)
is parsed with ``ast`` and checked against :data:`ALLOWED`: a room may import itself and the
rooms listed for it, never one above it. The rules:

  layers, metrics_conll       (nothing of longtext_jax)
  encoders                    -> layers
  tasks                       -> encoders.base (the EncoderOutput contract), layers, metrics_conll
  data                        (nothing outside data: it asks the task object it is given)
  pair_model, model           -> encoders, tasks, layers
  config                      -> encoders, tasks, data (validation reads their registries)
  train                       -> every room listed before it
  main, tokenize              the command lines (top)
  inference                   -> the rooms above train, and train (reads a workdir)
  predict, evaluate, export   -> inference (and data, model); plot: fileio only

and, inside rooms: no module of train imports ``train.loop`` (the steps sit on the trainer's
parts, never the reverse); ``encoders.bert`` does not import ``encoders.bert_checkpoint``
(the checkpoint import sits on the module); ``train.init_from`` is the trainer's only link to
a BERT module.
"""
from __future__ import annotations

import ast
import functools
import os

import pytest

from conftest import ROOT

PACKAGE = os.path.join(ROOT, "longtext_jax")

# Room -> the other rooms it may import.
ALLOWED = {
    "layers": set(),
    "metrics_conll": set(),
    "hostenv": set(),  # Standard library only: the commands run it before JAX loads.
    "fileio": set(),  # Standard library only: atomic small-file writes for every room.
    "procinfo": set(),  # Standard library only: is a pid alive (workdir lock, export).
    "encoders": {"layers"},
    "tasks": {"encoders.base", "layers", "metrics_conll"},
    "data": {"fileio"},
    "pair_model": {"encoders", "layers"},
    "model": {"encoders", "tasks", "layers", "pair_model"},
    "config": {"encoders", "tasks", "data"},
    "train": {"layers", "encoders", "tasks", "data", "model", "pair_model", "config",
              "metrics_conll", "hostenv", "fileio", "procinfo"},
    "tokenize": {"data"},
    "main": {"config", "tasks", "train", "hostenv"},
    # Using a trained run (top, beside main): the Predictor reads a workdir like the trainer.
    "inference": {"config", "data", "encoders", "layers", "metrics_conll", "model", "tasks",
                  "train", "fileio"},
    "predict": {"inference", "hostenv", "fileio"},
    "evaluate": {"data", "inference", "predict", "hostenv", "fileio"},
    "export": {"data", "inference", "model", "predict", "hostenv", "fileio", "procinfo"},
    "plot": {"fileio"},
}
# (importer prefix, imported prefix, why): imports inside a room that would run backwards.
FORBIDDEN_INSIDE = [
    ("longtext_jax.train.", "longtext_jax.train.loop", "the steps use the trainer's parts"),
    ("longtext_jax.encoders.bert", "longtext_jax.encoders.bert_checkpoint",
     "the checkpoint import sits on the module"),
]


@functools.lru_cache(maxsize=None)
def _parse(source: str) -> ast.Module:
  return ast.parse(source)


def _module_name(path: str) -> str:
  rel = os.path.relpath(path, ROOT)[:-len(".py")].replace(os.sep, ".")
  return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def imports_of(module: str, source: str, known: set[str], is_package: bool) -> set[str]:
  """The longtext_jax modules that ``source`` (module ``module``) imports, anywhere in it.

  ``from pkg import name`` counts as importing ``pkg.name`` when that is a module of the
  tree, else ``pkg``; relative imports are resolved against ``module``.
  """
  package = module if is_package else module.rpartition(".")[0]
  out = set()
  for node in ast.walk(_parse(source)):
    if isinstance(node, ast.Import):
      out.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        parts = package.split(".")
        parts = parts[:len(parts) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
      for alias in node.names:
        full = f"{base}.{alias.name}"
        out.add(full if full in known else base)
  return {m for m in out if m == "longtext_jax" or m.startswith("longtext_jax.")}


def room(module: str) -> str:
  """``longtext_jax.encoders.ran`` -> ``encoders``; the package root is ``''``."""
  parts = module.split(".")
  return parts[1] if len(parts) > 1 else ""


def _allowed(importer_room: str, imported: str) -> bool:
  target = room(imported)
  if target in ("", importer_room):
    return True  # The package root reads its members lazily; a room may import itself.
  sub = ".".join(imported.split(".")[1:3])  # e.g. 'encoders.base'.
  rules = ALLOWED[importer_room]
  return target in rules or sub in rules


def violations(sources: dict[str, tuple[str, bool]]) -> list[str]:
  """Every import that breaks the layering, as 'importer -> imported (why)'.

  Args:
    sources: module name -> (source text, whether it is a package ``__init__``).

  Returns:
    The violations, sorted; empty when the tree is layered.
  """
  known = set(sources)
  found = []
  for module, (source, is_package) in sources.items():
    importer_room = room(module)
    for imported in imports_of(module, source, known, is_package):
      if importer_room and importer_room not in ALLOWED:
        found.append(f"{module}: room {importer_room!r} has no rule in ALLOWED")
      elif importer_room and not _allowed(importer_room, imported):
        found.append(f"{module} -> {imported} (room {importer_room!r} may import only "
                     f"{sorted(ALLOWED[importer_room])})")
      for importer_prefix, imported_prefix, why in FORBIDDEN_INSIDE:
        matches = (module.startswith(importer_prefix) if importer_prefix.endswith(".")
                   else module == importer_prefix)
        if (matches and module not in (imported_prefix, "longtext_jax.train")
            and imported == imported_prefix):
          found.append(f"{module} -> {imported} ({why})")
      if (room(imported) == "encoders" and "bert" in imported.rpartition(".")[2]
          and importer_room == "train" and module != "longtext_jax.train.init_from"):
        found.append(f"{module} -> {imported} (train/init_from.py is the trainer's only "
                     "BERT link)")
  return sorted(set(found))


@functools.lru_cache(maxsize=None)
def _read_tree() -> tuple[tuple[str, str, bool], ...]:
  out = []
  for dirpath, _, files in os.walk(PACKAGE):
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(dirpath, name)
        with open(path) as f:
          out.append((_module_name(path), f.read(), name == "__init__.py"))
  return tuple(out)


def _tree() -> dict[str, tuple[str, bool]]:
  return {module: (source, is_package) for module, source, is_package in _read_tree()}


def test_no_module_imports_a_room_above_it():
  tree = _tree()
  assert set(ALLOWED) == {room(m) for m in tree} - {""}, "every room needs a rule"
  assert violations(tree) == []


@pytest.mark.parametrize("module,source,expected", [
    ("longtext_jax.encoders.ran", "from longtext_jax.train import loop\n",
     "longtext_jax.encoders.ran -> longtext_jax.train.loop"),
    ("longtext_jax.tasks.heads", "def f():\n  from longtext_jax import model\n",
     "longtext_jax.tasks.heads -> longtext_jax.model"),
    ("longtext_jax.tasks.heads", "from longtext_jax.encoders import ran\n",
     "longtext_jax.tasks.heads -> longtext_jax.encoders.ran"),
    ("longtext_jax.data.text", "from ..model import build_model\n",
     "longtext_jax.data.text -> longtext_jax.model"),
    ("longtext_jax.train.optimizer", "from longtext_jax.train.loop import TrainState\n",
     "longtext_jax.train.optimizer -> longtext_jax.train.loop"),
    ("longtext_jax.train.checkpointing", "from longtext_jax.encoders import bert\n",
     "longtext_jax.train.checkpointing -> longtext_jax.encoders.bert"),
])
def test_a_backward_import_is_reported(module, source, expected):
  """The checker itself: an injected backward import (top-level, inside a function, or
  relative) is found in a copy of the real tree."""
  tree = _tree()
  tree[module] = (tree[module][0] + source, tree[module][1])
  found = violations(tree)
  assert len(found) == 1 and found[0].startswith(expected), found


# ------------------------------------------------------------------ repeated code in configs/


def repeated_blocks(sources: dict[str, str], size: int = 6) -> list[tuple[str, str]]:
  """Pairs of places ('path:line') that start the same ``size`` consecutive code lines.

  Lines are compared stripped; blank lines and comment lines are skipped.
  """
  first, found = {}, []
  for path, source in sorted(sources.items()):
    lines = [(n, line.strip()) for n, line in enumerate(source.splitlines(), 1)
             if line.strip() and not line.strip().startswith("#")]
    for k in range(len(lines) - size + 1):
      block = tuple(text for _, text in lines[k:k + size])
      where = f"{path}:{lines[k][0]}"
      if block in first and not first[block].startswith(path + ":"):
        found.append((first[block], where))
      elif block in first:
        prev_line = int(first[block].rsplit(":", 1)[1])
        if lines[k][0] - prev_line >= size:  # Not an overlap of the same block.
          found.append((first[block], where))
      else:
        first[block] = where
  return found


def test_configs_hold_no_repeated_block_of_six_lines():
  """What experiments share lives in configs/common.py, not in copies."""
  sources = {}
  for dirpath, _, files in os.walk(os.path.join(ROOT, "configs")):
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(dirpath, name)
        with open(path) as f:
          sources[os.path.relpath(path, ROOT)] = f.read()
  assert len(sources) > 10
  assert repeated_blocks(sources) == []
  copy = dict(sources)  # The checker finds an injected copy.
  body = "\n".join(f"c.field{i} = {i}" for i in range(6))
  copy["configs/a.py"], copy["configs/b.py"] = body, "x = 1\n" + body
  assert repeated_blocks(copy) == [("configs/a.py:1", "configs/b.py:2")]
