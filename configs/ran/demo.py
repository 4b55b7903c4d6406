"""`make demo` (via configs/default.py): RAN on a generated long-document task.

Documents of 256-512 tokens, up to 8 windows of 64; the label is the class of one marker token in
the document's last 64 tokens, so the GPC recurrence and memory review must carry it to the
output. A Transformer reading only the first 512 tokens stays at chance (25%).

  python -m longtext_jax.main --config=configs/ran/demo.py --workdir=runs/demo
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import long_tasks  # pylint: disable=g-import-not-at-top,wrong-import-position


def get_config():
  c = long_tasks.get_config("last_window")
  c.data.seq_len = 512  # Keep the demo to a few CPU minutes: 8 windows of 64.
  c.data.min_len = 256
  c.data.num_train = 4096
  c.train.num_steps = 600
  c.train.eval_every = 200
  c.train.checkpoint_every = 200
  return c
