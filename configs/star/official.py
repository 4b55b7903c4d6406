"""Star-Transformer exactly as the authors' code computes it (fastNLP ``StarTransformer``).

arg: the same as configs/star/star_transformer.py ('<dataset>[,crf][,tiny]'); the data, task,
head and optimiser come from there, and every encoder field is set here to the authors'
code (docs/star_transformer.md, "Paper vs authors' code vs ours", lists what each changes):
pre-LayerNorm satellites, LeakyReLU, no relay LayerNorm, a zero key/value beyond the ends,
pooled = (s + max_i h_i) / 2, dropout only on the embeddings, one parameter set per layer.
Padding stays exact (the authors' code lets pads leak into neighbours and the relay mean;
that bug is not reproduced).

Launch:
  python -m longtext_jax.main --config=configs/star/official.py:sst --workdir=runs/star_sst_off
"""
from configs import common
from configs.star import star_transformer
from longtext_jax.config import encoder_config


def get_config(arg: str = "sst"):
  """arg: '<dataset>[,crf][,tiny]' as in configs/star/star_transformer.py."""
  c = star_transformer.get_config(arg)
  tiny = common.parse_arg(arg, **star_transformer.ARGS)["tiny"]
  c.model.encoder = encoder_config(
      "star_transformer",
      num_cycles=2,  # num_layers = 2; own weights per layer.
      num_heads=2 if tiny else 6,  # 6 heads...
      head_dim=None,  # ...of width D / 6 = 50 at D = 300 (SNLI: 100).
      ends="zero",  # Neighbours beyond the ends: a zero key and value (no wrap-around).
      ordering="official",  # LN(h) before the satellite attention, LeakyReLU, no relay LN.
      radial=True,  # Relay <-> satellites.
      ring=True,  # Satellite <-> neighbours.
      ffn_residual=False,  # No feed-forward block, no residual.
      mlp_dim=None,  # (Unused without ffn_residual.)
      share_cycle_params=False,  # One parameter set per layer.
      position="learned",  # Learned positions added to the projected embeddings.
      max_len=256,  # Sequences cut at 256 tokens (as configs/star/star_transformer.py).
      dropout_rate=0.1,  # The encoder's dropout...
      dropout_placement="embeddings",  # ...on x + P only, not inside the cycles.
      pooling="relay_max_mean",  # (s^T + max_i h_i^T) / 2.
      remat="none",  # Implementation only.
      dtype="float32",
      param_dtype="float32",
  )
  return c
