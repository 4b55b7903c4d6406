"""`make demo` (via configs/default.py): RAN on a generated long-document task.

Documents of 256-512 tokens, up to 8 windows of 64; the label is the class of one marker token in
the document's last 64 tokens, so the GPC recurrence and memory review must carry it to the
output. A model reading a fixed prefix of at most 192 tokens (BERT-first reads 128) never
sees it and stays at chance (25%).

arg = '[tiny][,encoder=<name>]' (configs/ran/long_tasks.py's last_window task, shorter).

Launch:
  python -m longtext_jax.main --config=configs/ran/demo.py --workdir=runs/demo
"""
from configs import common
from configs.ran import long_tasks


def get_config(arg: str = ""):
  """arg: '[tiny][,encoder=<name>]'."""
  args = common.parse_arg(arg)
  if args["tiny"]:
    c = long_tasks.get_config("last_window,tiny")
  else:  # Keep the demo to a few CPU minutes: 8 windows of 64.
    c = common.experiment(long_tasks.get_config("last_window"),
                          data=dict(seq_len=512, min_len=256, num_train=4096),
                          train=common.steps(600, 200))
  common.apply_encoder_option(c, args)
  return c
