"""experiments/benchmark.py --smoke produces its JSON and table for every encoder."""
import json
import os
import subprocess
import sys

from conftest import ROOT
from longtext_jax import encoders


def test_benchmark_smoke(tmp_path):
  r = subprocess.run([sys.executable, "experiments/benchmark.py", "--smoke",
                      f"--out={tmp_path}"], cwd=ROOT, capture_output=True, text=True,
                     timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  result = json.load(open(tmp_path / "results.json"))
  rows = result["rows"]
  expected = set(encoders.ENCODERS) | {"bert"}  # Every registered encoder and full BERT.
  assert {r["encoder"] for r in rows} == expected
  for row in rows:
    assert "skipped" not in row, row
    assert row["fwd_s"] > 0 and row["fwd_bwd_s"] > 0
    assert row["fwd_bwd_mem_bytes"] > 0
  assert result["meta"]["matmul_flops_per_s"] > 0
  table = open(tmp_path / "table.md").read()
  assert table.count("\n| ") == len(rows) + 1  # Header + one line per row.
  assert os.path.exists(tmp_path / "scaling.png")
