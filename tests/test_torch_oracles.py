"""The PyTorch counterparts of experiments/torch_{slstm,star}.py compute our modules' function.

The speed comparisons against PyTorch (docs/benchmarks.md, issue 20) are only meaningful if
the PyTorch module computes what ours does; each script's ``--check`` asserts it (values of
both outputs on a padded batch, and for the Star-Transformer every parameter's gradient).
This test runs those checks so that a change to an encoder that the counterpart does not
follow is caught here rather than as a silently unfair benchmark. Skipped without torch
(a test-only oracle, ``make oracle``).
"""
import json
import os
import sys

import pytest

from conftest import load_script

torch = pytest.importorskip("torch")

EXPERIMENTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "experiments")


def _load(name):
  if EXPERIMENTS not in sys.path:
    sys.path.insert(0, EXPERIMENTS)
  return load_script(f"experiments/{name}.py")


def test_torch_slstm_equals_jax_slstm():
  assert _load("torch_slstm").main(["--check"]) == 0


def test_torch_star_equals_jax_star_values_and_gradients():
  assert _load("torch_star").check(2, 4) < 1e-4


@pytest.mark.long  # A check of the check (the oracle's sharpness), not of the library.
def test_torch_star_check_catches_a_wrong_ring():
  """The check is sharp: a counterpart without the ring's wrap-around fails it."""
  star = _load("torch_star")

  def no_wrap(x, mask):
    x = x * mask[:, :, None, None].to(x.dtype)
    zero = torch.zeros_like(x[:, :1])
    return torch.cat([zero, x[:, :-1]], 1), torch.cat([x[:, 1:], zero], 1)

  star._ring = no_wrap  # pylint: disable=protected-access
  with pytest.raises(AssertionError):
    star.check(1, 2)


@pytest.mark.parametrize("timing", [  # Each framework in its own process: 2 more starts.
    pytest.param("separate", marks=pytest.mark.long), "interleaved"])
def test_torch_star_timing_rows(tmp_path, timing):
  """The timing path (shared with torch_slstm.py) at a tiny size: one JSONL row per length
  with both frameworks' forward and forward+backward times, each framework in its own
  process (the default) or both in one."""
  out = tmp_path / "rows.jsonl"
  assert _load("torch_star").main(["--d_model=8", "--batch=1", "--heads=2", "--lengths=8,12",
                                   "--cycles=1", "--repeats=1", "--rounds=1",
                                   f"--timing={timing}", f"--out={out}"]) == 0
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r["length"] for r in rows] == [8, 12]
  for row in rows:
    assert row["encoder"] == "star_transformer" and row["d_model"] == 8
    assert row["timing"].startswith(timing)
    for name in ("jax_fwd", "torch_fwd", "jax_fwd_bwd", "torch_fwd_bwd"):
      assert row[f"{name}_cpu_s"] >= 0 and row[f"{name}_wall_s"] > 0


def test_matmul_cpu_times_the_same_products_in_both_frameworks():
  """experiments/matmul_cpu.py (docs/benchmarks.md, "Matmuls: XLA:CPU against PyTorch's
  BLAS"): both frameworks' three products agree (and JAX's feature-major forms with them),
  and a worker row summarises into the ratios the docs quote."""
  mm = _load("matmul_cpu")
  assert mm.check() < 1e-5
  row = {**mm.results("jax", 64, 16, 24, 1, feature_major=True),
         **mm.results("torch", 64, 16, 24, 1)}
  summary = mm.summarize(row, 16, 24)
  for form in mm.FORMS:
    assert row[f"jax_{form}_s"] > 0 and row[f"torch_{form}_s"] > 0
    assert summary[f"{form}_jax_over_torch"] == pytest.approx(
        row[f"jax_{form}_s"] / row[f"torch_{form}_s"], rel=1e-2, abs=1e-3)
    assert summary[f"{form}_fm_over_row"] == pytest.approx(  # The feature-major forms.
        row[f"jax_{form}_fm_s"] / row[f"jax_{form}_s"], rel=1e-2, abs=1e-3)
