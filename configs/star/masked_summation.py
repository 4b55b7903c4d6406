"""Masked summation (paper Sec. 5.1) with the Star-Transformer and its Table 6 ablations.

Builds on ``configs/masked_summation.py`` (same data, task and optimiser) and swaps in the
Star-Transformer. The full sweep over n and models is ``experiments/masked_summation.py``.

arg = '<variant>[,tiny][,encoder=<name>]' with variant in star|star_no_radial|star_no_ring.

Launch:
  python -m longtext_jax.main --config=configs/star/masked_summation.py:star \
      --workdir=runs/msum_star
  python -m longtext_jax.main --config=configs/star/masked_summation.py:star_no_ring,tiny \
      --workdir=/tmp/msum_star --config.train.num_steps=50
"""
from configs import common
from configs import masked_summation
from longtext_jax.config import encoder_config

STAR = dict(num_cycles=2, num_heads=4, dropout_rate=0.0,
            ends="ring", pooling="relay_plus_max", max_len=1024)
VARIANTS = {
    "star": STAR,
    "star_no_radial": dict(STAR, radial=False),  # Table 6 (a): ring only.
    "star_no_ring": dict(STAR, ring=False),  # Table 6 (b): radial only.
}


def get_config(arg: str = "star"):
  """arg: '<variant>[,tiny][,encoder=<name>]'."""
  args = common.parse_arg(arg, [common.Positional("variant", VARIANTS, "star")])
  # Data, task and optimiser of configs/masked_summation.py.
  c = masked_summation.get_config("transformer,tiny" if args["tiny"] else "transformer")
  c.model.encoder = encoder_config("star_transformer", **VARIANTS[args["variant"]])
  common.apply_encoder_option(c, args)
  return c
