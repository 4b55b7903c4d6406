"""The default experiment of `make demo`: masked summation (n=100, k=10, d=10) with the
full-attention Transformer; about 2 minutes on 2 CPU cores.

  python -m longtext_jax.main --config=configs/default.py --workdir=runs/demo
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import masked_summation  # pylint: disable=g-import-not-at-top,wrong-import-position


def get_config():
  c = masked_summation.get_config("transformer")
  c.data.seq_len = 100  # n: half the paper's 200 keeps the demo within minutes on a CPU.
  c.data.batch_size = 32
  c.data.num_train = 4096
  c.train.num_steps = 800
  c.train.eval_every = 400
  c.train.checkpoint_every = 400
  return c
