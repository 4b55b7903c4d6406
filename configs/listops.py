"""LRA ListOps (Tay et al. 2021): the value (0-9) of a nested MAX/MIN/MED/SM expression.

Expressions up to 2,000 tokens, operators nested up to 10 deep, up to 10 arguments each;
10-way classification; chance is about 10-20% (the label distribution is skewed). Sequences
are padded per batch to a multiple of ``data.pad_multiple`` (set it to a windowed encoder's
window size).

arg = '[<encoder>][,tiny]': any registered encoder (transformer and bilstm have tuned
settings); ',tiny' is a seconds-long CPU run.

Launch:
  python -m longtext_jax.main --config=configs/listops.py:transformer --workdir=runs/listops
  python -m longtext_jax.main --config=configs/listops.py:transformer,tiny --workdir=/tmp/lo
"""
from configs import common
from longtext_jax.data import synthetic

ENCODERS = {  # Tuned settings (common.tuned_encoder).
    "transformer": dict(num_layers=4, num_heads=4, dropout_rate=0.1,
                        position="rotary", max_len=2048, pooling="mean"),
    "bilstm": dict(num_layers=1, pooling="mean"),
}


def get_config(arg: str = "transformer"):
  """arg: '[<encoder>][,tiny]'."""
  args = common.parse_arg(arg, [common.ENCODER_ARG])
  c = common.experiment(
      task=dict(name="classification", num_classes=10),  # Values 0..9.
      # LRA: lengths 500-2,000, depth and arguments up to 10, 96k/2k expressions.
      data=dict(name="listops", seq_len=2000, min_len=500, listops_max_depth=10,
                listops_max_args=10, num_train=96000, num_eval=2000, batch_size=32,
                eval_batch_size=32,
                pad_multiple=128,  # Dynamic padding to a multiple of 128 tokens.
                bucket_batches=16),  # Length bucketing: less padding per batch.
      # 5 special ids + 10 digits + 4 ops + ']'.
      model=dict(vocab_size=synthetic.LISTOPS_VOCAB, d_model=128),
      optim=dict(learning_rate=5e-4, warmup_steps=1000),
      train=common.steps(5000, 1000, best_metric="accuracy"))
  if args["tiny"]:
    common.tiny(c, 40, 20, data__seq_len=64, data__min_len=8, data__listops_max_depth=3,
                data__listops_max_args=4, data__pad_multiple=16, data__bucket_batches=4,
                **common.SMALL_DATA)
  c.model.encoder = common.tuned_encoder(args["encoder"], ENCODERS, c, small=args["tiny"],
                                         small_fields=dict(num_layers=1, max_len=64))
  return c
