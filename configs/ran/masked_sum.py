"""RAN on masked summation (Star-Transformer paper, Sec. 5.1): features input, regression.

arg = '[tiny][,encoder=<name>]' (the data, task and schedule of configs/masked_summation.py).

Launch:
  python -m longtext_jax.main --config=configs/ran/masked_sum.py \
      --workdir=runs/msum_ran
  python -m longtext_jax.main --config=configs/ran/masked_sum.py:tiny --workdir=/tmp/m
"""
from configs import common
from configs import masked_summation
from configs.ran.long_tasks import ran_encoder


def get_config(arg: str = ""):
  """arg: '[tiny][,encoder=<name>]'."""
  args = common.parse_arg(arg)
  c = masked_summation.get_config("transformer,tiny" if args["tiny"] else "transformer")
  c.model.encoder = ran_encoder(
      window_size=8 if args["tiny"] else 32,  # n = 200 rows -> 7 windows of 32.
      pooling="mean",  # A sum is better read from a mean than a max.
      dropout_rate=0.0)
  common.apply_encoder_option(c, args)
  return c
