"""Masked summation (paper Sec. 5.1) with the Star-Transformer and its Table 6 ablations.

Builds on ``configs/masked_summation.py`` (same data, task and optimiser) and swaps in the
Star-Transformer. The full sweep over n and models is ``experiments/masked_summation.py``.

arg = '<variant>[,tiny]' with variant in star|star_no_radial|star_no_ring.

Launch:
  python -m longtext_jax.main --config=configs/star/masked_summation.py:star \
      --workdir=runs/msum_star
  python -m longtext_jax.main --config=configs/star/masked_summation.py:star_no_ring,tiny \
      --workdir=/tmp/msum_star --config.train.num_steps=50
"""
import importlib.util
import os

from longtext_jax.config import encoder_config

_BASE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "masked_summation.py")

STAR = dict(num_cycles=2, num_heads=4, dropout_rate=0.0,
            ends="ring", pooling="relay_plus_max", max_len=1024)
VARIANTS = {
    "star": STAR,
    "star_no_radial": dict(STAR, radial=False),  # Table 6 (a): ring only.
    "star_no_ring": dict(STAR, ring=False),  # Table 6 (b): radial only.
}


def get_config(arg: str = "star"):
  """arg: '<variant>[,tiny]'."""
  parts = arg.split(",")
  if parts[0] not in VARIANTS or set(parts[1:]) - {"tiny"}:
    raise ValueError(f"config arg {arg!r}: expected one of {sorted(VARIANTS)} optionally "
                     "followed by ',tiny'")
  spec = importlib.util.spec_from_file_location("msum_base", _BASE)
  base = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(base)
  c = base.get_config(",".join(["transformer"] + parts[1:]))  # data/task/optim/train
  c.model.encoder = encoder_config("star_transformer", **VARIANTS[parts[0]])
  return c
