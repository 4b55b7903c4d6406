"""The quickstart notebook runs top to bottom (as on Colab, minus the install)."""
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
