"""Needle long-document classification: the label is written once, anywhere in a long
document of distractor symbols (the class symbols occur in the filler too, so only the symbol
after the marker counts). With ``data.needle_min_pos=512`` the evidence always lies beyond
the first 512 tokens, where a truncating model cannot see it.

arg = '[<encoder>][,tiny]': any registered encoder (transformer and bilstm have tuned
settings); ',tiny' is a seconds-long CPU run.

Launch:
  python -m longtext_jax.main --config=configs/needle.py:transformer --workdir=runs/needle
  python -m longtext_jax.main --config=configs/needle.py:transformer,tiny --workdir=/tmp/nd
"""
from configs import common
from longtext_jax.data import synthetic

# Tuned settings (common.tuned_encoder); both read the class from a max over positions.
ENCODERS = {"transformer": dict(num_layers=2, num_heads=4, dropout_rate=0.0, position="rotary",
                                max_len=4096, pooling="max"),
            "bilstm": dict(num_layers=1, pooling="max")}


def get_config(arg: str = "transformer"):
  """arg: '[<encoder>][,tiny]'."""
  args = common.parse_arg(arg, [common.ENCODER_ARG])
  c = common.experiment(
      task=dict(name="classification", num_classes=4),  # Class symbols after the marker.
      # Documents of 1024-2048 tokens, the evidence always after token 512.
      data=dict(name="needle", seq_len=2048, min_len=1024, needle_min_pos=512,
                num_train=20000, num_eval=1000, batch_size=16, eval_batch_size=32,
                pad_multiple=256,  # Pad to a multiple of a windowed model's window.
                bucket_batches=8),
      model=dict(vocab_size=synthetic.NEEDLE_VOCAB, d_model=64),
      optim=dict(learning_rate=1e-3, warmup_steps=200),
      train=common.steps(3000, 500, best_metric="accuracy"))
  if args["tiny"]:
    common.tiny(c, 40, 20, data__seq_len=96, data__min_len=48, data__needle_min_pos=40,
                data__pad_multiple=32, data__bucket_batches=4, **common.SMALL_DATA)
  c.model.encoder = common.tuned_encoder(args["encoder"], ENCODERS, c, small=args["tiny"],
                                         small_fields=dict(num_layers=1))
  return c
