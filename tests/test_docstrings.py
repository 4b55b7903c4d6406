"""Every public module, class, function and method of longtext_jax has a docstring, and
shape-suffixed names use the letters of docs/architecture.md's Naming table.

Parsed with ``ast`` (nothing is imported). Public: the name does not start with ``_``
(dunder methods such as ``__call__`` follow their class's docstring). A method that
overrides a documented method of a base class defined in longtext_jax (a ``Task`` kind's
``loss``, ``metrics``, ...) inherits that docstring, as ``inspect.getdoc`` shows it.
Functions nested in functions are private to them.
"""
from __future__ import annotations

import ast
import os
import re

from conftest import ROOT

PACKAGE = os.path.join(ROOT, "longtext_jax")


def _classes_and_modules(sources: dict[str, str]):
  """(class name -> (base names, {method: has docstring})), module trees."""
  classes, trees = {}, {}
  for path, source in sources.items():
    tree = trees[path] = ast.parse(source)
    for node in ast.walk(tree):
      if isinstance(node, ast.ClassDef):
        bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")
                 for b in node.bases]
        methods = {n.name: ast.get_docstring(n) is not None for n in node.body
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        classes.setdefault(node.name, (bases, methods))
  return classes, trees


def _inherited_doc(classes, class_name: str, method: str, seen=()) -> bool:
  """Whether a base of ``class_name`` (in the tree) documents ``method``."""
  for base in classes.get(class_name, ((), {}))[0]:
    if base in seen or base not in classes:
      continue
    if classes[base][1].get(method) or _inherited_doc(classes, base, method, seen + (base,)):
      return True
  return False


def missing_docstrings(sources: dict[str, str]) -> list[str]:
  """'path:line name' of every public module/class/function/method without a docstring.

  Args:
    sources: relative path -> Python source.

  Returns:
    The missing ones, in file order.
  """
  classes, trees = _classes_and_modules(sources)
  missing = []
  for path, tree in trees.items():
    if ast.get_docstring(tree) is None:
      missing.append(f"{path}:1 (module)")

    def visit(node, owner: str | None):
      for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
          if not child.name.startswith("_"):
            if ast.get_docstring(child) is None:
              missing.append(f"{path}:{child.lineno} {child.name}")
            visit(child, child.name)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
          if child.name.startswith("_") or ast.get_docstring(child) is not None:
            continue
          if owner and _inherited_doc(classes, owner, child.name):
            continue
          missing.append(f"{path}:{child.lineno} {owner + '.' if owner else ''}{child.name}")

    visit(tree, None)
  return missing


def _sources() -> dict[str, str]:
  out = {}
  for dirpath, _, files in os.walk(PACKAGE):
    for name in sorted(files):
      if name.endswith(".py"):
        path = os.path.join(dirpath, name)
        with open(path) as f:
          out[os.path.relpath(path, ROOT)] = f.read()
  return out


def test_every_public_name_has_a_docstring():
  assert missing_docstrings(_sources()) == []


def test_the_checker_finds_what_is_missing():
  """Injected cases: an undocumented function, class, method and module are reported; a
  private name, a nested function and an override of a documented base method are not."""
  source = '''"""Doc."""
class Base:
  """Doc."""
  def loss(self):
    """Doc."""

class Kind(Base):
  """Doc."""
  def loss(self):
    return 1
  def extra(self):
    def inner():
      pass
  def _private(self):
    pass

class Bare:
  pass

def public(x_BL):
  return x_BL
'''
  assert missing_docstrings({"m.py": source, "empty.py": "x = 1\n"}) == [
      "m.py:11 Kind.extra", "m.py:17 Bare", "m.py:20 public", "empty.py:1 (module)"]


# ------------------------------------------------------------------ shape-suffix names

_SHAPE_NAME = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)*_([A-Z0-9]+)\b")
# Where class-shaped tensors live: the task kinds, the CRF, the CoNLL span metric.
_CLASS_ROOMS = ("longtext_jax/tasks/", "longtext_jax/layers/crf.py",
                "longtext_jax/metrics_conll.py",
                "longtext_jax/inference.py")  # Per-class precision/recall/F1 (evaluate).


def documented_letters() -> set[str]:
  """The letters of docs/architecture.md's Naming table (rows like ``| `H`, `K` | ...``)."""
  with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
    text = f.read()
  table = text[text.index("## Naming"):]
  table = table[:table.index("\n## ")]
  letters = set()
  for line in table.splitlines():
    cells = line.split("|")
    if len(cells) > 2:
      letters.update(re.findall(r"`([A-Z0-9])`", cells[1]))
  return letters


def test_shape_letters_are_the_documented_ones_and_c_means_classes():
  """Every letter of a shape suffix (``x_BLD``) in longtext_jax is in the docs' Naming
  table (digits are literal sizes), and ``C`` (classes) appears only where classes live."""
  letters = documented_letters()
  assert {"B", "L", "D", "C", "W", "N"} <= letters, letters
  undocumented, c_outside = {}, {}
  for path, source in _sources().items():
    for suffix in _SHAPE_NAME.findall(source):
      for letter in set(suffix) - letters:
        if not letter.isdigit():
          undocumented.setdefault(letter, path)
      if "C" in suffix and not path.startswith(_CLASS_ROOMS):
        c_outside.setdefault(path, suffix)
  assert undocumented == {}, "add these letters to docs/architecture.md 'Naming'"
  assert c_outside == {}, "C means classes; chunks/windows are W, key lists S"
