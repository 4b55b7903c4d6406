"""RAN ablations (RAN paper, Table 4) on the generated long-document tasks.

The paper ablates, on Arxiv: average instead of max pooling (-1.12 accuracy), no residual
connection between windows (-1.60), no memory review (-2.51), no rotary positions (-1.23).
Here the same four switches act on the paper's RAN (configs/ran/long_tasks.py's encoder:
GPC residual of Eq. 6, memory review, rotary, max pooling) on a task of
``longtext_jax.data.long_tasks`` where they can matter:

  tagging      tag = 1 + class of the latest marker at or before each token, markers about
               one per 64 tokens, RAN windows of 32: state must cross windows (GPC, review)
               and order within a window matters (rotary). Pooling is unused (token head).
  last_window  the class of the one marker in the last 64 tokens of a 512-1024 token
               document: the pooled vector must keep one token's evidence (max vs mean).

arg = '<ablation>[,<task>][,tiny]', ablation one of ``ABLATIONS``:
  full         the paper's RAN
  mean_pool    average pooling instead of max (Eq. 11)
  no_residual  no residual between windows: G_i = LN(G'_i) (gpc_residual='none')
  no_rotary    no rotary positions (RAN then has no position information at all)
  no_review    no memory review (Eq. 7-9)

Launch (one cell of the table; experiments/ran_ablations.py runs the table with seeds):
  python -m longtext_jax.main --config=configs/ran/ablations.py:no_review,tagging \
      --workdir=runs/ran_abl_no_review
  python -m longtext_jax.main --config=configs/ran/ablations.py:full,tagging,tiny \
      --workdir=/tmp/ran_abl
"""
from configs import common
from configs.ran import long_tasks

ABLATIONS = {  # ablation -> encoder fields changed from the full RAN.
    "full": {},
    "mean_pool": dict(pooling="mean"),
    "no_residual": dict(gpc_residual="none"),
    "no_rotary": dict(use_rotary=False),
    "no_review": dict(memory_review=False),
}
TASKS = ("tagging", "last_window")
ARGS = dict(positional=[common.Positional("ablation", tuple(ABLATIONS)),
                        common.Positional("task", TASKS, "tagging")])


def get_config(arg: str = "full,tagging"):
  """arg: '<ablation>[,<task>][,tiny]'."""
  args = common.parse_arg(arg, **ARGS)
  c = long_tasks.get_config(args["task"] + (",tiny" if args["tiny"] else ""))
  if not args["tiny"]:  # The study's CPU size: 512-1024 tokens, windows of 32.
    common.set_fields(c, {
        "data.seq_len": 1024, "data.min_len": 512, "data.num_train": 4096,
        "data.num_eval": 512, "data.batch_size": 16, "data.eval_batch_size": 64,
        "data.pad_multiple": 32,
        "model.encoder.window_size": 32, "model.encoder.dropout_rate": 0.0,
        "optim.learning_rate": 2e-3,
        "train.num_steps": 1000, "train.eval_every": 250, "train.checkpoint_every": 250,
        "train.progress_bar": False})
  for key, value in ABLATIONS[args["ablation"]].items():
    c.model.encoder[key] = value
  return c
