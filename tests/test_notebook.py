"""The notebooks: committed with the outputs of their current cells, Colab install cell, a
kernel interrupt during training.

Fast checks: every committed notebook has exactly the cells that ``notebooks/src/`` builds
(so its outputs came from the current cells: ``notebooks/execute.py`` is the one command that
rebuilds and reruns them), every code cell ran without an error, plots are inline images,
and the install cell installs from a local checkout (pip dry run) keeping jax. The full
executions are ``long`` (minutes each on 2 CPUs).
"""
import contextlib
import io
import os
import stat

import nbformat
import pytest

from conftest import ROOT, load_script

nb_execute = load_script("notebooks/execute.py")


@pytest.mark.parametrize("name", nb_execute.NOTEBOOKS)
def test_committed_notebook_is_current_and_ran_cleanly(name):
  assert nb_execute.stale_cells(name) == [], (
      "rebuild and rerun: python notebooks/execute.py " + name)
  assert nb_execute.output_problems(name) == []
  nb = nbformat.read(nb_execute.path_of(name), as_version=4)
  code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
  assert "matplotlib.use(" not in code and "%matplotlib inline" in code
  images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if "image/png" in o.get("data", {})]
  assert images, f"{name}: no inline plot in the outputs"
  assert f"colab.research.google.com/github/{nb_execute.GITHUB_REPO}/blob/main/notebooks/" \
         f"{name}.ipynb" in nb.cells[0].source
  assert nb.cells[1].source == nb_execute.install_cell().strip("\n")


def test_check_names_outputs_from_other_code(tmp_path, monkeypatch, capsys):
  """Stale saved outputs (the cells current, the code changed since they ran) went unnoticed:
  each execution records the code's digest; --check warns (--strict fails) when it differs
  or is missing, and a change to any library or config file changes the digest."""
  nb = nbformat.read(nb_execute.path_of("quickstart"), as_version=4)
  nb.metadata["longtext_jax"] = {"source_digest": nb_execute.source_digest()}
  assert nb_execute.stale_outputs("quickstart", nb) == []
  nb.metadata["longtext_jax"]["source_digest"] = "0" * 16
  (line,) = nb_execute.stale_outputs("quickstart", nb)
  assert "other code" in line and "python notebooks/execute.py quickstart" in line
  del nb.metadata["longtext_jax"]
  assert "not recorded" in nb_execute.stale_outputs("quickstart", nb)[0]
  # The digest reads longtext_jax/ and configs/ under ROOT.
  for top in ("longtext_jax", "configs"):
    (tmp_path / top).mkdir()
    (tmp_path / top / "a.py").write_text("x = 1\n")
  monkeypatch.setattr(nb_execute, "ROOT", str(tmp_path))
  before = nb_execute.source_digest()
  (tmp_path / "configs" / "a.py").write_text("x = 2\n")
  assert nb_execute.source_digest() != before
  # --check: a warning (exit 0) unless --strict, for notebooks whose cells are current.
  monkeypatch.setattr(nb_execute, "stale_cells", lambda name: [])
  monkeypatch.setattr(nb_execute, "output_problems", lambda name: [])
  assert nb_execute.main(["--check", "quickstart"]) == 0
  assert "warning: quickstart: its outputs came from other code" in capsys.readouterr().out
  assert nb_execute.main(["--check", "--strict", "quickstart"]) == 1


def test_sources_parse_and_bad_sources_are_named():
  cells = nb_execute.parse_source("# %% [markdown]\n# # Title\n#\n# text\n\n# %%\nx = 1\n"
                                  "# %% [install]\n", install="print('install')\n")
  assert cells == [("markdown", "# Title\n\ntext"), ("code", "x = 1"),
                   ("code", "print('install')")]
  for name in (*nb_execute.NOTEBOOKS, "install"):  # Sources are valid Python files.
    path = os.path.join(ROOT, "notebooks", "src", f"{name}.py")
    compile(open(path, encoding="utf-8").read(), path, "exec")
  # Magics are commented out in the (valid Python) sources and restored in the notebook.
  assert nb_execute.parse_source("# %%\n# %matplotlib inline\n# a comment\nx = 1\n") == [
      ("code", "%matplotlib inline\n# a comment\nx = 1")]
  with pytest.raises(ValueError, match="before the first"):
    nb_execute.parse_source("x = 1\n# %%\n")
  with pytest.raises(ValueError, match="does not start with '#'"):
    nb_execute.parse_source("# %% [markdown]\nplain text\n")
  with pytest.raises(ValueError, match="unknown notebook 'nope'"):
    nb_execute.build("nope")
  stale = nb_execute.build("quickstart")
  stale.cells[2].source += "\n# edited"
  assert nb_execute.stale_cells("quickstart", stale) == [
      f"quickstart cell 2: differs from notebooks/src/quickstart.py (first line there: "
      f"{nb_execute.build('quickstart').cells[2].source.splitlines()[0][:60]!r})"]


def _run_install_cell(monkeypatch, tmp_path, fake_gpu):
  """Executes the install cell in this process with SOURCE = this checkout, pip in
  dry-run mode (nothing is installed or changed) and, optionally, a fake nvidia-smi."""
  pytest.importorskip("setuptools", reason="the checkout is built without build isolation")
  monkeypatch.setenv("LONGTEXT_JAX_SOURCE", ROOT)
  monkeypatch.setenv("PIP_DRY_RUN", "1")
  monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")  # Build with this venv's setuptools.
  monkeypatch.setenv("PIP_NO_INDEX", "1")  # Everything must already be satisfied here.
  monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
  monkeypatch.delenv("COLAB_TPU_ADDR", raising=False)
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  if fake_gpu:
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: fake'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
  path = os.environ["PATH"].split(os.pathsep)
  keep = [p for p in path if not os.path.exists(os.path.join(p, "nvidia-smi"))]
  monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir)] + keep))
  monkeypatch.chdir(tmp_path)
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    exec(compile(nb_execute.install_cell(), "install_cell", "exec"), {"__name__": "cell"})
  return out.getvalue()


def test_install_cell_installs_the_checkout_and_keeps_the_runtime_jax(monkeypatch, tmp_path):
  import jax  # pylint: disable=g-import-not-at-top
  out = _run_install_cell(monkeypatch, tmp_path, fake_gpu=True)
  assert "Would install longtext_jax-" in out  # The checkout builds and installs.
  assert f"kept the runtime's jax {jax.__version__} (cuda12)" in out
  assert "Would install" not in out.split("Would install longtext_jax-")[1]  # No jax swap.
  assert f"devices: {jax.devices()}" in out


@pytest.mark.long
def test_install_cell_on_a_cpu_runtime(monkeypatch, tmp_path):
  """The CPU branch: dependencies, jax included, through pip's own resolution."""
  out = _run_install_cell(monkeypatch, tmp_path, fake_gpu=False)
  assert "Would install longtext_jax-" in out and "kept the runtime's jax" not in out


@pytest.mark.long
@pytest.mark.parametrize("name", nb_execute.NOTEBOOKS)
def test_notebook_executes_from_its_source(name):
  """Builds and runs the notebook (minutes): the same as `python notebooks/execute.py`."""
  nb = nb_execute.execute(nb_execute.build(name))
  assert nb_execute.output_problems(name, nb) == []
  text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                 for o in c.outputs)
  if name == "long_documents":
    assert "streaming == one-shot: True True" in text
    accuracy = float(text.split("RAN eval accuracy:")[1].split()[0])
    assert accuracy > 0.5  # Chance is 0.25: the GPC carried the last window's marker.
  if name == "quickstart":
    assert "embeddings: (2, 64) float32" in text
    assert "dev metrics:" in text and "(2, 10, 16) (2, 16)" in text
  if name == "chunkbert":
    chunk = float(text.split("chunk_bert: test accuracy")[1].split()[0])
    first = float(text.split("bert_first: test accuracy")[1].split()[0])
    assert chunk > 0.8 and first < 0.7  # The label lies beyond BERT-first's window.


def test_interrupting_the_kernel_saves_the_step_and_the_cell_ends_interrupted(tmp_path):
  """A notebook's "interrupt" (SIGINT to the kernel) during training: the run saves the step
  it was on and reports it, then the cell ends with KeyboardInterrupt (it used to stop at
  once, saving nothing after the last periodic checkpoint). A real ipykernel, whose SIGINT
  handling during a cell is what the trainer's handler replaces and passes the signal on to."""
  import queue  # pylint: disable=import-outside-toplevel
  import time  # pylint: disable=import-outside-toplevel
  from jupyter_client.manager import start_new_kernel  # pylint: disable=import-outside-toplevel
  workdir = tmp_path / "run"
  code = (f"import sys; sys.path.insert(0, {ROOT!r})\n"
          "from longtext_jax import train\n"
          "from configs import masked_summation\n"
          "c = masked_summation.get_config('transformer,tiny')\n"
          "c.train.update(num_steps=100000, progress_bar=False, log_every=1, eval_every=1000,\n"
          "               checkpoint_every=100000)\n"
          f"train.train_and_evaluate(c, {str(workdir)!r})\n")
  km, kc = start_new_kernel(kernel_name="python3", cwd=ROOT)
  try:
    msg_id = kc.execute(code)
    metrics, t0 = workdir / "metrics.jsonl", time.time()
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
      assert time.time() - t0 < 240, "the training cell logged no steps"
      time.sleep(0.05)
    km.interrupt_kernel()
    text, errors = [], []
    while True:
      try:
        msg = kc.get_iopub_msg(timeout=120)
      except queue.Empty:
        raise AssertionError("the cell did not end after the interrupt") from None
      if msg["parent_header"].get("msg_id") != msg_id:
        continue
      if msg["msg_type"] == "stream":
        text.append(msg["content"]["text"])
      elif msg["msg_type"] == "error":
        errors.append(msg["content"]["ename"])
      elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
        break
  finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
  text = "".join(text)
  assert errors == ["KeyboardInterrupt"], text
  saved = sorted(int(n) for n in os.listdir(workdir / "checkpoints") if n.isdigit())
  assert len(saved) == 1 and saved[0] >= 3, saved
  assert f"Stopped by Ctrl-C (SIGINT) at step {saved[0]} (relaunch to resume)" in text, text
