"""RAN's official variant against a float64 reference of the authors' code.

The reference below is written from the facts about the authors' TensorFlow code
(4AI/RAN ``rannet/ran.py``, ``rannet/rannet.py``, ``rannet/utils.py`` and langml's LayerNorm;
see ../shared/reference/official-implementations.md Sec. 1), one document at a time on its
real tokens only, with plain array operations, not with our module. It runs on numpy float64
(forward values) and on jax.numpy float64 (gradients, through ``jax.grad``), with our
module's parameters copied in. The official code's padding bugs are not reproduced (each
document is encoded on its own, so it has no pad windows).
"""
import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longtext_jax.encoders.ran import RAN, stream_encode, window_layout

D, HEADS, HEAD_DIM, W, MIN_W = 16, 2, 6, 8, 3
LENGTHS, TOTAL = (18, 11, 17, 5), 24  # 18, 17: a trailing 2- / 1-token window merges.


# ------------------------------------------------------------------ the reference
def sigmoid(xp, x):
  return 1.0 / (1.0 + xp.exp(-x))


def swish(xp, x):
  return x * sigmoid(xp, x)


def langml_ln(xp, p, x):
  """langml LayerNorm: (x - mean) / sqrt(mean(x^2) + 1e-7) * gamma + beta."""
  mu = xp.mean(x, -1, keepdims=True)
  return (x - mu) / xp.sqrt(xp.mean(x * x, -1, keepdims=True) + 1e-7) * p["scale"] + p["bias"]


def standard_normalize(xp, x):
  """rannet/utils.py: the mean is subtracted, the divisor is the root mean square."""
  mu = xp.mean(x, -1, keepdims=True)
  return (x - mu) / xp.sqrt(xp.mean(x * x, -1, keepdims=True) + 1e-7)


def dense(p, x):
  """Keras Dense (kernel [in, out] flattened from ours, + bias)."""
  return x @ p["kernel"] + p["bias"]


def heads_dense(p, x):
  """A Dense whose output units are the flattened (heads, head width) of ours."""
  k = p["dense"]["kernel"]
  return x @ k.reshape(k.shape[0], -1) + p["dense"]["bias"].reshape(-1)


def out_dense(p, x):
  k = p["dense"]["kernel"]
  return x @ k.reshape(-1, k.shape[-1]) + p["dense"]["bias"]


def glu(xp, p, x):
  """GatedLinearUnit: Dense_t(x) * sigmoid(Dense_g(x))."""
  return dense(p["value"], x) * sigmoid(xp, dense(p["gate"], x))


def softmax(xp, e):
  m = xp.max(e, -1, keepdims=True)  # A shift without a gradient (see max_rows).
  a = xp.exp(e - (m if xp is np else jax.lax.stop_gradient(m)))
  return a / xp.sum(a, -1, keepdims=True)


def max_rows(xp, x):
  """max over axis 0 whose gradient goes to the argmax. jnp.max's gradient goes to the
  entries equal to a max that XLA may recompute, fused and rounded differently, in the
  backward: 0/0 when none is. It was, NaN in 40 of this reference's float64 gradients
  (memory_review=False, backend level 0, AMD EPYC family 26 model 2, 6 Dec): the hazard of
  docs/benchmarks.md's Star-Transformer and tests/test_slstm_official.py's oracle."""
  return xp.take_along_axis(x, xp.argmax(x, 0)[None], 0)[0]


def rope_interleaved(xp, x_THK):
  """RoPE rotating feature pairs (2i, 2i + 1) by pos * 10000^(-2i / K); positions
  0..T-1 (the cell at 0)."""
  t, _, k = x_THK.shape
  theta = 10000.0 ** (-np.arange(0, k, 2) / k)
  ang = np.arange(t)[:, None, None] * theta[None, None, :]
  cos, sin = xp.asarray(np.cos(ang)), xp.asarray(np.sin(ang))
  even, odd = x_THK[..., 0::2], x_THK[..., 1::2]
  rot_even = even * cos - odd * sin
  rot_odd = odd * cos + even * sin
  return xp.stack([rot_even, rot_odd], -1).reshape(x_THK.shape)


def official_windows(n, window, min_window):
  """[start, end) per window; a trailing window shorter than min_window merges into the
  previous one (rannet/ran.py's rearranged ranges)."""
  starts = list(range(0, n, window))
  if len(starts) >= 2 and n - starts[-1] < min_window:
    starts = starts[:-1]
  return [(s, starts[i + 1] if i + 1 < len(starts) else n) for i, s in enumerate(starts)]


def encode_attn(xp, p, z):
  """PosMultiHeadAttention with swish projections, RoPE, GLU residual and LayerNorm."""
  r = z.shape[0]
  q, k, v = (swish(xp, heads_dense(p[n], z)).reshape(r, HEADS, HEAD_DIM)
             for n in ("query", "key", "value"))
  q, k = rope_interleaved(xp, q), rope_interleaved(xp, k)
  a = softmax(xp, xp.einsum("jhd,khd->hjk", q, k) / np.sqrt(HEAD_DIM))
  o = xp.einsum("hjk,khd->jhd", a, v).reshape(r, HEADS * HEAD_DIM)
  o = swish(xp, out_dense(p["out"], o))
  return langml_ln(xp, p["ln_block"], o + glu(xp, p["glu_block"], z))


def ran_layer(xp, p, x_nD, cell, review):
  """One official RAN layer on one document: returns (outputs, last cell)."""
  if cell is None:  # cell_initializer on zeros: LN(swish(0 W)) = the LN's beta.
    cell = langml_ln(xp, p["ln_gpc0"], xp.zeros((1, D)))[0]
  outputs, cells, prev = [], [], None
  for k, (s, e) in enumerate(official_windows(x_nD.shape[0], W, MIN_W)):
    z = langml_ln(xp, p["ln_in"], xp.concatenate([cell[None], x_nD[s:e]], 0))
    a = encode_attn(xp, p, z)
    c = standard_normalize(xp, a[0])
    outputs.append(standard_normalize(xp, a[1:]))
    cells.append(c)
    cell = c if k == 0 else langml_ln(xp, p["ln_gpc"], c + glu(xp, p["glu_gpc"], prev))
    prev = c
  o = xp.concatenate(outputs, 0)
  if not review:
    return langml_ln(xp, p["ln_out"], o), cell
  c = xp.stack(cells)
  q = swish(xp, heads_dense(p["review_query"], o))
  kk = swish(xp, heads_dense(p["review_key"], c))
  vv = swish(xp, heads_dense(p["review_value"], c))
  r = softmax(xp, q @ kk.T / np.sqrt(D)) @ vv
  r = swish(xp, out_dense(p["review_out"], r))
  return langml_ln(xp, p["ln_review"], r + glu(xp, p["glu_review"], q)), cell


def reference(xp, params, x_nD, review=True, num_layers=2):
  """The encoder on one unpadded document: (sequence [n, D], classification features [D])."""
  x = langml_ln(xp, params["ln_input"], x_nD)  # Embedding-LayerNorm
  cell = None
  for l in range(num_layers):
    x, cell = ran_layer(xp, params[f"layers_{l}"], x, cell, review)
  h = swish(xp, dense(params["gpc_out"]["dense"], cell))
  feat = glu(xp, params["gpc_glu"], h) + dense(params["pool_out"]["dense"], max_rows(xp, x))
  return x, feat


# ------------------------------------------------------------------ the module
def official_model(**overrides):
  kw = dict(num_layers=2, num_heads=HEADS, head_dim=HEAD_DIM, window_size=W,
            min_window_size=MIN_W, rotary_layout="interleaved", gpc_residual="official",
            block_residual="glu", projection_activation="swish", memory_review=True,
            review_heads=1, review_residual="official", review_memory="cell",
            layer_norm="official", sn_kind="official", sn_epsilon=1e-7, input_norm=True,
            pooled_output="official", output_norm=True, dropout_rate=0.0)
  kw.update(overrides)
  return RAN(**kw)


def batch(lengths=LENGTHS, total=TOTAL, seed=0):
  x = jax.random.normal(jax.random.PRNGKey(seed), (len(lengths), total, D))
  mask = jnp.arange(total)[None] < jnp.asarray(lengths)[:, None]
  return x.at[~mask].set(50.0), mask  # Garbage in the pads must not matter.


def loss_weights(total=TOTAL, n=len(LENGTHS)):
  return (np.asarray(jax.random.normal(jax.random.PRNGKey(7), (n, total, D))),
          np.asarray(jax.random.normal(jax.random.PRNGKey(8), (n, D))))


def test_window_layout_merges_per_row():
  """The merge rule reads each row's real length, whatever the padded length."""
  mask = jnp.arange(40)[None] < jnp.asarray([18, 11, 17, 5, 16, 0])[:, None]
  for total in (24, 40):
    _, m_BNS, end_BN, _ = window_layout(mask[:, :total], W, MIN_W)
    sizes = np.asarray(m_BNS.sum(-1))
    for b, n in enumerate((18, 11, 17, 5, 16, 0)):
      want = [e - s for s, e in official_windows(n, W, MIN_W)] if n else []
      got = [int(v) for v in sizes[b]]
      assert got[:len(want)] == want and not any(got[len(want):]), (n, got)
    np.testing.assert_array_equal(end_BN[0, :2], [8, 18])  # merged window ends at n
    np.testing.assert_array_equal(end_BN[1, :2], [8, 16])


@pytest.mark.parametrize("review", [True, pytest.param(False, marks=pytest.mark.long)])
def test_official_forward_and_gradients_match_the_authors_code(review):
  """2 layers, padding, odd lengths, short trailing windows merged: values and gradients of
  every parameter equal the float64 reference within 1e-5, for both impls."""
  x, mask = batch()
  model = official_model(memory_review=review)
  variables = jax.jit(model.init)(jax.random.PRNGKey(1), x, mask)
  params = variables["params"]
  w_seq, w_pool = loss_weights()
  ref = functools.partial(reference, review=review)

  p64 = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
  x64 = np.asarray(x, np.float64)
  ref_out = [ref(np, p64, x64[b, :n]) for b, n in enumerate(LENGTHS)]

  def ours_loss(p, impl):  # (loss, outputs): one compilation gives values and gradients.
    # 'parallel' with all windows in one block (the GPU layout); the CPU's one window per
    # block is checked against the scan in test_official_padding_invariance_....
    out = model.clone(impl=impl, attention_block=0).apply({"params": p}, x, mask)
    return (jnp.sum(jnp.tanh(out.sequence) * w_seq) + jnp.sum(jnp.tanh(out.pooled) * w_pool)
            ) / len(LENGTHS), out

  # float64 only here; numpy-style broadcasting for the numpy-style reference.
  with jax.enable_x64(True), jax.numpy_rank_promotion("allow"):
    def ref_loss(p):
      total = 0.0
      for b, n in enumerate(LENGTHS):
        seq, feat = ref(jnp, p, jnp.asarray(x64[b, :n]))
        total = total + jnp.sum(jnp.tanh(seq) * w_seq[b, :n]) + jnp.sum(jnp.tanh(feat) *
                                                                          w_pool[b])
      return total / len(LENGTHS)
    p64j = jax.tree_util.tree_map(jnp.asarray, p64)
    # The reference is one long unrolled float64 program, compiled once: XLA's backend
    # optimisations off (10.7 -> 6.5 s to compile here; its gradients move by ~4e-11, far
    # below the 1e-5 compared; not for our module, whose float32 rounding they would move).
    ref_grad = jax.jit(jax.grad(ref_loss)).lower(p64j).compile(
        compiler_options={"xla_backend_optimization_level": 0})
    ref_grads = jax.tree_util.tree_map(np.asarray, ref_grad(p64j))

  for impl in ("scan", "parallel"):
    grads, out = jax.jit(jax.grad(ours_loss, has_aux=True), static_argnums=1)(params, impl)
    for b, n in enumerate(LENGTHS):
      seq, feat = ref_out[b]
      np.testing.assert_allclose(out.sequence[b, :n], seq, atol=1e-5, rtol=1e-5,
                                 err_msg=f"{impl} row {b} sequence")
      np.testing.assert_allclose(out.pooled[b], feat, atol=1e-5, rtol=1e-5,
                                 err_msg=f"{impl} row {b} pooled")
      assert np.all(np.asarray(out.sequence[b, n:]) == 0)
    flat = jax.tree_util.tree_leaves_with_path(grads)
    assert len(flat) == len(jax.tree_util.tree_leaves(ref_grads))
    for path, g in flat:
      name = jax.tree_util.keystr(path)
      want = functools.reduce(lambda t, k: t[k.key], path, ref_grads)
      np.testing.assert_allclose(g, want, atol=1e-5, rtol=1e-4, err_msg=f"{impl} {name}")
      # Every parameter is used but G_0's LayerNorm (its scale multiplies zeros; layer 2
      # starts from layer 1's final cell).
      if "ln_gpc0" not in name:
        assert np.abs(want).max() > 0, name


def test_official_padding_invariance_and_causal_options():
  """The merged windows follow each row's own length: the same document padded further and
  batched with others gives the same outputs; under the causal mask (no merging: see
  test_a_causal_official_model_reads_no_document_length) later tokens never change earlier
  outputs."""
  x, mask = batch()
  model = official_model(impl="parallel")
  variables = jax.jit(model.init)(jax.random.PRNGKey(2), x, mask)
  fwd = jax.jit(model.apply)  # Jitted: op-by-op dispatch of the scans is 3x slower.
  base = fwd(variables, x[:1, :18], mask[:1, :18])
  total = 33  # Two more windows of pads than the document's own (3, the last merged: 2).
  xx = jnp.concatenate([x[:1, :18], jnp.full((1, total - 18, D), 9.0)], 1)
  mm = jnp.arange(total)[None] < 18
  out = fwd(variables, jnp.concatenate([xx, xx[:, ::-1]], 0),
            jnp.concatenate([mm, jnp.ones_like(mm)], 0))
  np.testing.assert_allclose(out.sequence[0, :18], base.sequence[0], atol=1e-5)
  np.testing.assert_allclose(out.pooled[0], base.pooled[0], atol=1e-5)

  causal = official_model(mask_type="causal", impl="parallel", min_window_size=0)
  cvars = jax.jit(causal.init)(jax.random.PRNGKey(3), x, mask)
  xs, ms = x[:1, :18], mask[:1, :18]
  apply = jax.jit(lambda x: causal.apply(cvars, x, ms).sequence)
  ref = apply(xs)
  for t in (3, 8, 15, 16):  # 16, 17: the short last window
    # New random tokens (a constant shift would vanish in the mean-subtracting norms).
    later = jax.random.normal(jax.random.PRNGKey(t), xs[:, t + 1:].shape)
    changed = apply(xs.at[:, t + 1:].set(later))
    np.testing.assert_array_equal(changed[:, :t + 1], ref[:, :t + 1])
    assert not np.allclose(changed[:, t + 1:], ref[:, t + 1:])
  scan = jax.jit(causal.clone(impl="scan").apply)(cvars, x, mask)
  par = jax.jit(causal.apply)(cvars, x, mask)
  np.testing.assert_allclose(scan.sequence, par.sequence, atol=1e-5)
  np.testing.assert_allclose(scan.pooled, par.pooled, atol=1e-5)


def test_a_causal_official_model_reads_no_document_length():
  """Merging a short last window depends on how many tokens follow, so a causal (or prefix)
  RAN refuses min_window_size > 1; the official LM config does not merge, and a prefix
  scored alone equals the same tokens inside the longer document (the test above changes
  later tokens' values at a fixed length, which cannot see this)."""
  x, mask = batch()
  for mask_type in ("causal", "prefix"):
    with pytest.raises(ValueError, match="reads the document's length"):
      official_model(mask_type=mask_type, prefix_length=4).init(jax.random.PRNGKey(0), x, mask)
  from conftest import load_config  # pylint: disable=import-outside-toplevel
  from longtext_jax.model import build_model  # pylint: disable=import-outside-toplevel
  for arg in ("lm,tiny", "lm"):
    assert load_config("ran/official.py", arg).model.encoder.min_window_size == 0
  c = load_config("ran/official.py", "lm,tiny")
  assert load_config("ran/official.py", "mlm,tiny").model.encoder.min_window_size == 4
  model = build_model(c)
  n = 24
  ids = jax.random.randint(jax.random.PRNGKey(1), (1, n), 5, c.model.vocab_size)
  whole = {"input_ids": ids, "mask": jnp.ones((1, n), bool)}
  variables = jax.jit(model.init)(jax.random.PRNGKey(0), whole)
  apply = jax.jit(model.apply)
  ref = apply(variables, whole)["logits"]
  for k in (9, 13, 17):  # Prefixes whose last window is short (window 8).
    part = apply(variables, {"input_ids": ids[:, :k], "mask": jnp.ones((1, k), bool)})
    np.testing.assert_allclose(part["logits"][0], ref[0, :k], atol=1e-5)


def test_official_options_fail_loudly():
  x, mask = batch()
  for bad in (dict(min_window_size=W), dict(min_window_size=-1), dict(layer_norm="rms"),
              dict(sn_kind="std"), dict(review_residual="glu"), dict(review_memory="g"),
              dict(rotary_layout="x"), dict(pooled_output="eq10")):
    with pytest.raises(ValueError, match=next(iter(bad))):
      official_model(**bad).init(jax.random.PRNGKey(0), x, mask)
  model = official_model()
  variables = jax.jit(model.init)(jax.random.PRNGKey(0), x, mask)
  with pytest.raises(ValueError, match="min_window_size=0"):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      stream_encode(model, variables, lambda: [(x, mask)], 4, D, max_len=TOTAL)


def test_official_config_sets_every_official_field():
  from conftest import load_config
  from longtext_jax.model import build_model
  c = load_config("ran/official.py", "last_window,tiny")
  enc = c.model.encoder
  assert (enc.gpc_residual, enc.block_residual, enc.projection_activation,
          enc.review_residual, enc.review_memory, enc.layer_norm, enc.sn_kind,
          enc.rotary_layout, enc.pooled_output) == (
              "official", "glu", "swish", "official", "cell", "official", "official",
              "interleaved", "official")
  assert enc.input_norm and enc.output_norm and enc.min_window_size == 4
  assert c.task.head_dropout == 0.1
  model = build_model(c)
  ids = jnp.ones((2, c.data.seq_len), jnp.int32)
  b = {"input_ids": ids, "mask": jnp.arange(c.data.seq_len)[None] < jnp.asarray([[30], [64]])}
  out = jax.jit(model.apply)(jax.jit(model.init)(jax.random.PRNGKey(0), b), b)
  assert out["logits"].shape == (2, c.task.num_classes)
  full = load_config("ran/official.py", "last_window")
  assert (full.model.d_model, full.model.encoder.num_heads, full.model.encoder.head_dim,
          full.model.encoder.window_size, full.model.encoder.min_window_size) == (
              512, 8, 128, 256, 16)
