"""Masked summation (Star-Transformer paper, Sec. 5.1): sum the rows whose mask bit is 1.

Inputs X in R^{n x d}: column 0 is a 0/1 mask with exactly k ones, columns 1..d-1 are
uniform in [0, 1); the target is the (d-1)-vector sum of the masked rows; loss MSE. Always
guessing k/2 gives MSE k/12 (0.83 for k=10).

arg = '[<encoder>][,tiny]': any registered encoder (transformer, bilstm and lstm have tuned
settings; others get configs.common.encoder_for sizes); ',tiny' is a seconds-long CPU run.

Launch:
  python -m longtext_jax.main --config=configs/masked_summation.py:transformer \
      --workdir=runs/msum_transformer
  python -m longtext_jax.main --config=configs/masked_summation.py:bilstm,tiny \
      --workdir=/tmp/msum --config.train.num_steps=50
"""
from configs import common

ENCODERS = {  # Tuned settings (common.tuned_encoder).
    "transformer": dict(num_layers=2, num_heads=4, dropout_rate=0.0, position="learned",
                        max_len=1024, pooling="mean"),
    "bilstm": dict(num_layers=1, pooling="mean"),
    "lstm": dict(num_layers=1, pooling="mean"),
}


def get_config(arg: str = "transformer"):
  """arg: '[<encoder>][,tiny]'."""
  args = common.parse_arg(arg, [common.ENCODER_ARG])
  c = common.experiment(
      task=dict(name="regression", num_outputs=9),  # d - 1 outputs.
      # n = 200 rows of d = 10 features, k = 10 of them masked.
      data=dict(name="masked_summation", seq_len=200, num_masked=10, feature_dim=10,
                num_train=8192, num_eval=1024, batch_size=64),
      model=dict(input="features", d_model=64),
      optim=dict(learning_rate=3e-3, warmup_steps=100, weight_decay=0.0),
      train=dict(num_steps=1500, log_every=50, eval_every=500, checkpoint_every=500,
                 best_metric="mse", best_mode="min"))
  if args["tiny"]:
    common.tiny(c, 60, 30, data__seq_len=24, data__num_masked=3, data__feature_dim=4,
                task__num_outputs=3, **common.SMALL_DATA)
  name = args["encoder"]
  c.model.encoder = common.tuned_encoder(name, ENCODERS, c, small=args["tiny"])
  return c
