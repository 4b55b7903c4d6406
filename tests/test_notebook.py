"""The notebooks run top to bottom (as on Colab, minus the install)."""
import os

import nbformat
from nbclient import NotebookClient

from conftest import ROOT


def test_quickstart_notebook_executes(tmp_path):
  nb = nbformat.read(os.path.join(ROOT, "notebooks", "quickstart.ipynb"), as_version=4)
  NotebookClient(nb, timeout=600, kernel_name="python3",
                 resources={"metadata": {"path": str(tmp_path)}}).execute()
  outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                    for o in c.get("outputs", []))
  assert "k/2 guess MSE" in outputs
  assert "(2, 10, 16) (2, 16)" in outputs


def test_long_documents_notebook_trains_ran_and_streams(tmp_path):
  nb = nbformat.read(os.path.join(ROOT, "notebooks", "long_documents.ipynb"), as_version=4)
  NotebookClient(nb, timeout=600, kernel_name="python3",
                 resources={"metadata": {"path": str(tmp_path)}}).execute()
  outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                    for o in c.get("outputs", []))
  accuracy = float(outputs.split("RAN eval accuracy:")[1].split()[0])
  assert accuracy > 0.5  # Chance is 0.25: the GPC carried the last window's marker.
  assert "streaming == one-shot: True True" in outputs
