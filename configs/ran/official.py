"""RAN as the authors' code computes it (4AI/RAN v0.3.x, rannet.py defaults), every field set.

Each encoder field below is the authors' choice; docs/ran.md ("Paper vs authors' code vs
ours") lists what the paper says, what their code does and our default for each. The
official code's padding bugs are not reproduced (pad windows never update G, memory review
and max-pooling skip pads, the GPC reads its window under the causal mask, a causal model does
not merge its short last window, which would read the document's length, and the max-pool
reads the outputs before their dropout, whose zeros would floor a training-time max at 0:
``pool_dropped``), and dropout acts where ours does (on G'_i and the layer outputs), so the
two agree exactly at evaluation time.
tests/test_ran_official.py checks this model against a float64 re-reading of their code.

Heads: classification uses the authors' features GLU(Dropout(swish(Dense(G)))) +
Dense(max_t O) (``pooled_output='official'``) then the task head's Dropout(0.1) -> Dense(C),
as in their examples. MLM/LM use this project's LM head (Dense -> GELU -> LayerNorm -> tied
embedding), not theirs (Dense + swish -> their LayerNorm -> tied embedding).

Data: the generated long-document tasks of configs/ran/long_tasks.py.
  arg = '<task>[,tiny]', task in last_window|binary|multilabel|tagging|mlm|lm.
  python -m longtext_jax.main --config=configs/ran/official.py:last_window \
      --workdir=runs/ran_official
  python -m longtext_jax.main --config=configs/ran/official.py:last_window,tiny \
      --workdir=/tmp/ran_official
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import long_tasks  # pylint: disable=g-import-not-at-top,wrong-import-position


def official_encoder(**overrides):
  """``config.model.encoder`` with every RAN field at the authors' setting."""
  enc = dict(
      num_layers=2,  # ran_layers=2.
      num_heads=8,  # head_num=8.
      head_dim=128,  # head_size=128 (8 x 128 = 1024 > D=512).
      window_size=256,  # window_size=256.
      min_window_size=16,  # A trailing window < 16 tokens joins the previous one.
      mask_type="bidirectional",  # 'causal' for LM (their apply_lm_mask).
      prefix_length=0,  # 'prefix' mask only (their apply_seq2seq_mask).
      layer_mode="stacked",  # Each layer runs over all windows; final G -> next layer.
      pooling="max",  # Dense(max_t O) in the classification features.
      use_rotary=True,  # RoPE restarting in every window, cell at position 0.
      rotary_base=10_000.0,
      rotary_layout="interleaved",  # Pairs (2i, 2i + 1) rotate together.
      gpc_residual="official",  # G_k = LN(c_k + GLU(c_{k-1})); window 0 passes c_0 on.
      block_residual="glu",  # A = LN(MHA(Z) + GLU(Z)).
      projection_activation="swish",  # swish on q/k/v/o and the review's projections.
      memory_review=True,  # apply_memory_review=True.
      review_heads=1,  # One-head review (SelfAttention, units = D).
      review_residual="official",  # LN(swish(W_o R + b_o) + GLU(q)).
      review_memory="cell",  # Keys/values: the raw cells c_k, not the updated G_k.
      output_norm=True,  # Without review: an output LayerNorm (memory_review=False).
      layer_norm="official",  # langml: (x - mu) / sqrt(E[x^2] + 1e-7) * g + b.
      sn_kind="official",  # (x - mu) / sqrt(E[x^2] + eps).
      sn_epsilon=1e-7,  # standard_normalize's epsilon.
      input_norm=True,  # Embedding-LayerNorm before the first layer.
      pooled_output="official",  # GLU(Dropout(swish(Dense(G)))) + Dense(max_t O).
      pool_dropped=False,  # Theirs max-pools the dropped outputs (docs/ran.md): not repeated.
      dropout_rate=0.1,  # dropout_rate=0.1.
      dtype="float32",
      param_dtype="float32",
  )
  enc.update(overrides)
  return long_tasks.ran_encoder(**enc)


def get_config(arg: str = "last_window"):
  """arg: '<task>[,tiny]' as in configs/ran/long_tasks.py."""
  c = long_tasks.get_config(arg)
  tiny = "tiny" in arg.split(",")[1:]
  causal = c.model.encoder.mask_type == "causal"
  c.model.d_model = 512  # embedding_size=512.
  c.model.embed_dropout = 0.1  # Embedding dropout (theirs after the LayerNorm, ours before).
  c.task.head_dropout = 0.1  # Dropout(0.1) -> Dense(C) of their examples.
  # Causal: no merging of a short last window. Their code merges under the LM mask too,
  # which lets every token read the document's length (whether its window is the merged
  # tail depends on how many tokens follow): a leak, not repeated (RAN._check refuses it).
  merge = {"min_window_size": 0} if causal else {}
  c.model.encoder = official_encoder(mask_type="causal" if causal else "bidirectional",
                                     **merge)
  if tiny:  # Seconds on a CPU (windows of 8 as in long_tasks' tiny; min window scaled).
    c.model.d_model = 32
    c.model.encoder = official_encoder(**{
        "num_heads": 2, "head_dim": 16, "window_size": 8, "min_window_size": 4,
        "dropout_rate": 0.0, "mask_type": "causal" if causal else "bidirectional", **merge})
  return c
