"""Builds the notebooks from their sources, executes them on this machine, stores the outputs.

The cells of ``notebooks/<name>.ipynb`` are written in ``notebooks/src/<name>.py`` (percent
format: a line ``# %%`` starts a code cell, ``# %% [markdown]`` a markdown cell whose lines
start with ``#``; ``# %% [install]`` is replaced by the shared install cell,
``notebooks/src/install.py``). IPython line magics are written commented out, as jupytext
does (``# %matplotlib inline``), so that the sources stay valid Python; the notebook cell
gets the magic itself. This script builds each notebook, adds the "Open in Colab"
link, runs it top to bottom in a fresh kernel (nbclient) with the checkout first on the
path and nothing installed (``LONGTEXT_JAX_SOURCE=""``), and writes it with its outputs.
``tests/test_notebook.py`` checks that the committed notebooks have the cells that the
sources build and no error output. Each executed notebook records in its metadata
(``longtext_jax``) a digest of the code its outputs came from (``longtext_jax/`` and
``configs/``), the seconds it took and the host; ``--check`` names the notebooks whose
outputs predate a change of that code (a warning: outputs are refreshed by executing,
not at every commit; ``--strict`` makes it an error).

  python notebooks/execute.py                      # every notebook (2-4 min on 2 CPUs)
  python notebooks/execute.py quickstart           # one
  python notebooks/execute.py --check              # exit 1 if a committed notebook is stale
  python notebooks/execute.py --check --strict     # ... or its outputs predate the code
"""
from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import sys
import tempfile
import time

import nbformat

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NOTEBOOKS = ("quickstart", "long_documents", "chunkbert")

if __name__ == "__main__":  # The kernels inherit the tunable (huge pages for XLA's buffers).
  sys.path.insert(0, ROOT)
  from longtext_jax import hostenv  # pylint: disable=g-import-not-at-top
  hostenv.reexec_with_hugepages(__file__)
# Where the repository is published: the Colab links and the install cell's default SOURCE.
GITHUB_REPO = "longtext-jax/longtext_jax"
COLAB_BADGE = ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
               "(https://colab.research.google.com/github/{repo}/blob/main/notebooks/{name}.ipynb)")
_CELL = re.compile(r"^# %%(?: \[(markdown|install)\])?[ \t]*$", re.M)
_MAGIC = re.compile(r"^# (%[A-Za-z].*)$", re.M)  # '# %matplotlib inline' -> the magic.


def parse_source(text: str, install: str = "") -> list[tuple[str, str]]:
  """The cells of a percent-format source.

  Args:
    text: the source file's text.
    install: the install cell's code (replaces ``# %% [install]``).

  Returns:
    ``[(cell_type, source)]`` with cell_type 'code' or 'markdown'.

  Raises:
    ValueError: text before the first ``# %%`` line, or a markdown line not starting with #.
  """
  parts = _CELL.split(text)
  if parts[0].strip():
    raise ValueError(f"text before the first '# %%' line: {parts[0].strip()[:80]!r}")
  cells = []
  for kind, body in zip(parts[1::2], parts[2::2]):
    if kind == "install":
      cells.append(("code", install.strip("\n")))
    elif kind == "markdown":
      lines = []
      for line in body.strip("\n").splitlines():
        if line and not line.startswith("#"):
          raise ValueError(f"markdown cell line does not start with '#': {line!r}")
        lines.append(line[2:] if line.startswith("# ") else line[1:])
      cells.append(("markdown", "\n".join(lines).strip("\n")))
    else:
      cells.append(("code", _MAGIC.sub(r"\1", body.strip("\n"))))
  return cells


def install_cell() -> str:
  """The install cell shared by every notebook (``notebooks/src/install.py``)."""
  with open(os.path.join(HERE, "src", "install.py")) as f:
    return f.read()


def build(name: str) -> nbformat.NotebookNode:
  """The notebook ``name`` built from ``notebooks/src/<name>.py``, without outputs.

  Args:
    name: one of NOTEBOOKS.

  Returns:
    The notebook (nbformat 4), with the Colab link at the top of its first cell.
  """
  if name not in NOTEBOOKS:
    raise ValueError(f"unknown notebook {name!r}; choose from {NOTEBOOKS}")
  with open(os.path.join(HERE, "src", f"{name}.py")) as f:
    cells = parse_source(f.read(), install_cell())
  nb = nbformat.v4.new_notebook()
  nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python",
                                "name": "python3"},
                 "language_info": {"name": "python"},
                 "colab": {"provenance": [], "toc_visible": True}}
  badge = COLAB_BADGE.format(repo=GITHUB_REPO, name=name)
  for i, (kind, source) in enumerate(cells):
    if kind == "markdown":
      nb.cells.append(nbformat.v4.new_markdown_cell(
          badge + "\n\n" + source if i == 0 else source))
    else:
      nb.cells.append(nbformat.v4.new_code_cell(source))
  for i, cell in enumerate(nb.cells):  # Stable ids: a rebuild changes no line it need not.
    cell["id"] = f"{name[:20]}-{i}"
  return nb


def execute(nb: nbformat.NotebookNode, timeout: int = 1800) -> nbformat.NotebookNode:
  """Runs ``nb`` in a fresh python3 kernel (in place), as Colab would after the install.

  The kernel imports this checkout (``PYTHONPATH``), installs nothing
  (``LONGTEXT_JAX_SOURCE=""``), runs on the CPU (``JAX_PLATFORMS=cpu``) and works in a
  temporary folder.

  Args:
    nb: a notebook from :func:`build`.
    timeout: seconds allowed per cell.

  Returns:
    ``nb`` with its outputs.
  """
  from nbclient import NotebookClient  # pylint: disable=g-import-not-at-top
  env = {"PYTHONPATH": os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
         "LONGTEXT_JAX_SOURCE": "", "JAX_PLATFORMS": "cpu"}
  saved = {k: os.environ.get(k) for k in env}
  os.environ.update(env)  # The kernel inherits this process's environment.
  try:
    with tempfile.TemporaryDirectory(prefix="nb_exec_") as cwd:
      NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                     resources={"metadata": {"path": cwd}}).execute()
  finally:
    for k, v in saved.items():
      if v is None:
        os.environ.pop(k, None)
      else:
        os.environ[k] = v
  return nb


def source_digest() -> str:
  """A digest of the code notebook outputs come from: every ``.py`` file under
  ``longtext_jax/`` and ``configs/`` (paths and contents, in sorted order)."""
  h = hashlib.sha256()
  for top in ("longtext_jax", "configs"):
    for folder, dirs, files in sorted(os.walk(os.path.join(ROOT, top))):
      dirs.sort()
      for f in sorted(files):
        if f.endswith(".py"):
          path = os.path.join(folder, f)
          h.update(os.path.relpath(path, ROOT).encode() + b"\0")
          with open(path, "rb") as fh:
            h.update(fh.read() + b"\0")
  return h.hexdigest()[:16]


def cpu_name() -> str:
  """The CPU's model name (/proc/cpuinfo), else the machine type."""
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name"):
          return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.machine()


def stale_outputs(name: str, nb: nbformat.NotebookNode | None = None) -> list[str]:
  """A line when the notebook's outputs came from other code than the checkout's ([] if
  not): its recorded :func:`source_digest` differs, or none is recorded."""
  if nb is None:
    nb = nbformat.read(path_of(name), as_version=4)
  recorded = nb.metadata.get("longtext_jax", {}).get("source_digest")
  now = source_digest()
  if recorded == now:
    return []
  return [f"{name}: its outputs came from other code (source digest {recorded or 'not recorded'}"
          f", the checkout's {now}); refresh them: python notebooks/execute.py {name}"]


def path_of(name: str) -> str:
  """Where notebook ``name`` is committed."""
  return os.path.join(HERE, f"{name}.ipynb")


def stale_cells(name: str, nb: nbformat.NotebookNode | None = None) -> list[str]:
  """How the committed notebook's cells differ from what its source builds ([] if none).

  Args:
    name: one of NOTEBOOKS.
    nb: the notebook to compare (default: the committed one).

  Returns:
    One line per difference.
  """
  if nb is None:
    nb = nbformat.read(path_of(name), as_version=4)
  want = [(c.cell_type, c.source) for c in build(name).cells]
  have = [(c.cell_type, c.source) for c in nb.cells]
  out = []
  if len(want) != len(have):
    out.append(f"{name}: {len(have)} cells, the source builds {len(want)}")
  for i, (w, h) in enumerate(zip(want, have)):
    if w != h:
      out.append(f"{name} cell {i}: differs from notebooks/src/{name}.py "
                 f"(first line there: {w[1].splitlines()[0][:60] if w[1] else ''!r})")
  return out


def output_problems(name: str, nb: nbformat.NotebookNode | None = None) -> list[str]:
  """Code cells never executed, or with an error output ([] if none).

  Args:
    name: one of NOTEBOOKS.
    nb: the notebook to check (default: the committed one).

  Returns:
    One line per problem.
  """
  if nb is None:
    nb = nbformat.read(path_of(name), as_version=4)
  out = []
  for i, cell in enumerate(nb.cells):
    if cell.cell_type != "code":
      continue
    if cell.get("execution_count") is None:
      out.append(f"{name} cell {i}: not executed")
    for o in cell.get("outputs", []):
      if o.get("output_type") == "error":
        out.append(f"{name} cell {i}: {o.get('ename')}: {o.get('evalue', '')[:200]}")
  return out


def main(argv: list[str] | None = None) -> int:
  """Command line: see the module docstring."""
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("names", nargs="*", help=f"notebooks to run (default: all of {NOTEBOOKS})")
  p.add_argument("--check", action="store_true",
                 help="only check that the committed notebooks are current and error-free")
  p.add_argument("--strict", action="store_true",
                 help="with --check: outputs from other code than the checkout's fail too")
  p.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
  args = p.parse_args(argv)
  names = args.names or list(NOTEBOOKS)
  if args.check:
    problems = [line for n in names for line in stale_cells(n) + output_problems(n)]
    old = [line for n in names for line in stale_outputs(n)]
    print("\n".join(problems + [("error: " if args.strict else "warning: ") + line
                                for line in old]) or "notebooks are current")
    return 1 if problems or (old and args.strict) else 0
  from nbclient.exceptions import CellExecutionError  # pylint: disable=g-import-not-at-top
  for name in names:
    t0 = time.time()
    nb = build(name)
    digest = source_digest()
    try:
      execute(nb, args.timeout)
    except CellExecutionError as e:  # Written anyway: the error output shows where.
      print(f"{name}: {str(e)[-2000:]}")
    nb.metadata["longtext_jax"] = {"source_digest": digest,
                                   "executed_s": round(time.time() - t0),
                                   "host": f"{cpu_name()}, {os.cpu_count()} cores"}
    nbformat.write(nb, path_of(name))
    problems = output_problems(name, nb)
    print(f"{path_of(name)}: executed in {time.time() - t0:.0f} s"
          + ("".join("\n  " + line for line in problems) if problems else ""))
    if problems:
      return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
