"""RAN on masked summation (Star-Transformer paper, Sec. 5.1): features input, regression.

Launch:
  python -m longtext_jax.main --config=configs/ran/masked_sum.py \
      --workdir=runs/msum_ran
  python -m longtext_jax.main --config=configs/ran/masked_sum.py:tiny --workdir=/tmp/m
"""
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
from long_tasks import ran_encoder  # pylint: disable=g-import-not-at-top,wrong-import-position

_spec = importlib.util.spec_from_file_location(
    "configs_masked_summation", os.path.join(os.path.dirname(_HERE), "masked_summation.py"))
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)


def get_config(arg: str = ""):
  """arg: '' or 'tiny'."""
  if arg not in ("", "tiny"):
    raise ValueError(f"config arg {arg!r}: expected '' or 'tiny'")
  c = base.get_config("transformer,tiny" if arg == "tiny" else "transformer")
  c.model.encoder = ran_encoder(
      window_size=8 if arg == "tiny" else 32,  # n = 200 rows -> 7 windows of 32.
      pooling="mean",  # A sum is better read from a mean than a max.
      dropout_rate=0.0)
  return c
