"""Baseline encoders (Transformer, BiLSTM, LSTM) and the Model: the encoder contract."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import assert_pool_input_is_before_dropout, load_script, run_as_users_compile
from longtext_jax import encoders
from longtext_jax.encoders import BiLSTM, LSTM, Transformer
from longtext_jax.layers import pooling

D = 16

ENCODERS = {
    "transformer_rotary": Transformer(num_layers=2, num_heads=2, dropout_rate=0.0),
    "transformer_learned_unscanned": Transformer(num_layers=2, num_heads=2, position="learned",
                                                 scan_layers=False, pooling="max"),
    "transformer_causal": Transformer(num_layers=1, num_heads=2, causal=True),
    "bilstm": BiLSTM(num_layers=2),
    "bilstm_mean": BiLSTM(pooling="mean"),
    "lstm": LSTM(),
    "windowed": encoders.WindowedAttention(window_size=4, num_heads=2),
}


def _doc(key, length):
  return jax.random.normal(key, (length, D))


@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_padding_and_batch_composition_invariance(name):
  """The same document padded to two lengths next to different companions: same outputs."""
  enc = ENCODERS[name]
  k = jax.random.split(jax.random.key(0), 4)
  doc = _doc(k[0], 9)
  # Batch A: doc padded to 12, beside a 12-token companion.
  xa = jnp.stack([jnp.pad(doc, ((0, 3), (0, 0)), constant_values=7.0), _doc(k[1], 12)])
  ma = jnp.array([[True] * 9 + [False] * 3, [True] * 12])
  # Batch B: a 5-token companion first, doc padded to 20 (garbage in the pads).
  xb = jnp.stack([_doc(k[2], 20), jnp.concatenate([doc, _doc(k[3], 11)])])
  mb = jnp.array([[True] * 5 + [False] * 15, [True] * 9 + [False] * 11])
  params = jax.jit(enc.init)(jax.random.key(1), xa, ma)
  apply = jax.jit(enc.apply)
  oa, ob = apply(params, xa, ma), apply(params, xb, mb)
  np.testing.assert_allclose(oa.pooled[0], ob.pooled[1], atol=1e-5)
  np.testing.assert_allclose(oa.sequence[0, :9], ob.sequence[1, :9], atol=1e-5)
  assert oa.sequence.shape == xa.shape and oa.pooled.shape == (2, D)
  np.testing.assert_array_equal(ob.sequence[1, 9:], 0.0)  # Pads are exactly zero.


def test_windowed_attention_never_crosses_a_window_boundary():
  """Changing window 1 changes only window 1's outputs."""
  enc = encoders.WindowedAttention(window_size=4, num_heads=2)
  x = jax.random.normal(jax.random.key(0), (1, 12, D))
  m = jnp.ones((1, 12), bool)
  params = jax.jit(enc.init)(jax.random.key(1), x, m)
  x2 = x.at[:, 5].add(jax.random.normal(jax.random.key(2), (D,)))  # Not a constant: LN removes it.
  apply = jax.jit(enc.apply)
  s1, s2 = apply(params, x, m).sequence, apply(params, x2, m).sequence
  np.testing.assert_array_equal(s1[:, :4], s2[:, :4])
  np.testing.assert_array_equal(s1[:, 8:], s2[:, 8:])
  assert not np.allclose(s1[:, 4:8], s2[:, 4:8])


def test_windowed_attention_max_pools_the_outputs_before_their_dropout():
  """Training, dropout 0.5: the returned outputs are dropped (0 or 2x), the pooled max reads
  them before the dropout (pool_dropped=True: after, as RAN's authors' order); evaluation
  is the same either way (docs/ran.md, "Max-pooling the dropped outputs")."""
  enc = encoders.WindowedAttention(window_size=4, num_heads=2, dropout_rate=0.5)
  x = jax.random.normal(jax.random.key(0), (2, 10, D))
  m = jnp.arange(10)[None] < jnp.array([[10], [7]])
  params = jax.jit(enc.init)(jax.random.key(1), x, m)
  train = jax.jit(lambda p, flag: enc.clone(pool_dropped=flag).apply(
      p, x, m, deterministic=False, rngs={"dropout": jax.random.key(2)},
      mutable=["intermediates"]), static_argnums=1)
  mm = np.asarray(m)[..., None]
  for flag in (False, True):
    out, state = train(params, flag)
    pool_in = np.asarray(state["intermediates"]["pool_input"][0])
    seq = np.asarray(out.sequence)
    np.testing.assert_array_equal(out.pooled, np.max(np.where(mm, pool_in, -np.inf), axis=1))
    if flag:
      np.testing.assert_array_equal(pool_in, seq)
    else:
      assert_pool_input_is_before_dropout(seq, pool_in, m, 0.5)
  ev = [jax.jit(enc.clone(pool_dropped=flag).apply)(params, x, m) for flag in (False, True)]
  np.testing.assert_array_equal(ev[0].pooled, ev[1].pooled)


@pytest.mark.parametrize("name", ["transformer_causal", "lstm"])
def test_causal_encoders_ignore_the_future(name):
  enc = ENCODERS[name]
  x = jax.random.normal(jax.random.key(0), (1, 10, D))
  m = jnp.ones((1, 10), bool)
  params = jax.jit(enc.init)(jax.random.key(1), x, m)
  t = 4
  x2 = x.at[:, t + 1:].add(jax.random.normal(jax.random.key(2), (1, 5, D)))
  apply = jax.jit(enc.apply)
  s1, s2 = apply(params, x, m).sequence, apply(params, x2, m).sequence
  np.testing.assert_array_equal(s1[:, :t + 1], s2[:, :t + 1])
  assert not np.allclose(s1[:, t + 1:], s2[:, t + 1:])


def test_bf16_compute_keeps_fp32_params_and_is_close():
  x = jax.random.normal(jax.random.key(0), (2, 8, D))
  m = jnp.ones((2, 8), bool)
  f32 = Transformer(num_layers=1, num_heads=2)
  bf16 = Transformer(num_layers=1, num_heads=2, dtype=jnp.bfloat16)
  params = jax.jit(f32.init)(jax.random.key(1), x, m)
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(params))
  np.testing.assert_allclose(jax.jit(bf16.apply)(params, x, m).pooled.astype(jnp.float32),
                             jax.jit(f32.apply)(params, x, m).pooled, atol=0.1)


def test_learned_positions_reject_overlong_input():
  enc = Transformer(position="learned", max_len=8)
  x, m = jnp.zeros((1, 9, D)), jnp.ones((1, 9), bool)
  with pytest.raises(ValueError, match="exceeds max_len=8"):
    enc.init(jax.random.key(0), x, m)


@pytest.mark.parametrize("name", sorted(
    n for n, c in encoders.ENCODERS.items() if encoders.input_kind(c) == "embeddings"))
def test_contract_errors_are_clear(name):
  """Every embeddings encoder names a wrong rank, a mask of another shape and an int mask
  (WindowedAttention gave 'not enough values to unpack' and took int masks)."""
  enc = encoders.ENCODERS[name]()
  key, x = jax.random.key(0), jnp.zeros((1, 4, D))
  with pytest.raises(ValueError, match=r"mask must be bool\[B, L\]"):
    enc.init(key, x, jnp.ones((1, 5), bool))
  with pytest.raises(ValueError, match=r"x must be float\[B, L, D\]"):
    enc.init(key, jnp.zeros((4, D)), jnp.ones((4,), bool))
  with pytest.raises(ValueError, match="mask must be bool, got int32"):
    enc.init(key, x, jnp.ones((1, 4), jnp.int32))
  with pytest.raises(ValueError, match="x has length 0"):  # An IndexError deep inside before.
    enc.init(key, jnp.zeros((1, 0, D)), jnp.ones((1, 0), bool))


def test_contract_errors_name_the_width():
  with pytest.raises(ValueError, match="even width"):
    BiLSTM().init(jax.random.key(0), jnp.zeros((1, 4, 7)), jnp.ones((1, 4), bool))


def test_every_registered_encoder_is_a_linen_module_with_cpu_defaults():
  x = jax.random.normal(jax.random.key(0), (2, 8, 32))
  m = jnp.arange(8)[None] < jnp.array([[8], [3]])
  for name, cls in encoders.ENCODERS.items():
    if encoders.input_kind(cls) == "ids":
      continue  # Encoders that own their embeddings are tested in their own files.
    enc = cls()
    out = jax.jit(enc.apply)(jax.jit(enc.init)(jax.random.key(1), x, m), x, m)
    assert out.sequence.shape == x.shape, name
    assert out.pooled.shape == (2, 32), name
    np.testing.assert_array_equal(out.sequence[1, 3:], 0.0)


def _small_encoder(name, dtype):
  """A small instance of registered encoder ``name`` computing in ``dtype``, and its input."""
  from longtext_jax.model import build_encoder  # pylint: disable=import-outside-toplevel
  from longtext_jax.config import encoder_config  # pylint: disable=import-outside-toplevel
  cls = encoders.ENCODERS[name]
  if encoders.input_kind(cls) == "embeddings":
    return cls(dtype=dtype), jax.random.normal(jax.random.key(0), (2, 16, 32))
  kw = dict(vocab_size=30, hidden_size=8, num_layers=1, num_heads=2, intermediate_size=16,
            max_position_embeddings=64, cls_id=2, sep_id=3, dtype=jnp.dtype(dtype).name,
            **{"chunk_bert": dict(chunk_size=8, num_last_layers=1, kernel_sizes=(2, 3),
                                  num_filters=5),
               "bert_first": dict(max_length=8), "bert_random": dict(max_length=8),
               "tobert": dict(segment_length=8, overlap=2)}[name])
  return build_encoder(encoder_config(name, **kw)), jnp.full((2, 16), 7, jnp.int32)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("name", sorted(encoders.ENCODERS))
def test_outputs_are_float32_with_the_documented_pooled_width(name, dtype):
  """encoders/base.py: sequence float32[B, L, D], pooled float32[B, P] whatever the compute
  dtype (bf16 windowed / S-LSTM / Star / BERT-family encoders returned bf16, ToBERT one of
  each), P = D but for BertRandom (2 x hidden) and ChunkBert (kernels x filters)."""
  enc, x = _small_encoder(name, dtype)
  m = jnp.arange(16)[None] < jnp.array([[16], [5]])
  out = jax.eval_shape(lambda: enc.init_with_output(jax.random.key(1), x, m)[0])
  width = 32 if x.ndim == 3 else 8
  pooled = {"bert_random": 2 * width, "chunk_bert": 2 * 5}.get(name, width)
  assert (out.sequence.shape, out.pooled.shape) == ((2, 16, width), (2, pooled))
  assert (out.sequence.dtype, out.pooled.dtype) == (jnp.float32, jnp.float32)


def test_float64_encoders_keep_float64_outputs():
  """encoder_output raises lower precisions to float32 but never lowers float64 (x64)."""
  with jax.enable_x64(True):
    x, m = jnp.ones((1, 4, D), jnp.float64), jnp.ones((1, 4), bool)
    enc = encoders.StarTransformer(dtype=jnp.float64, param_dtype=jnp.float64)
    out = jax.eval_shape(lambda: enc.init_with_output(jax.random.key(0), x, m)[0])
    assert (out.sequence.dtype, out.pooled.dtype) == (jnp.float64, jnp.float64)


@pytest.mark.parametrize("kind", sorted(pooling.POOLINGS))
def test_masked_pooling_ignores_pads(kind):
  x = jax.random.normal(jax.random.key(0), (3, 6, 4))
  m = jnp.array([[1, 1, 1, 0, 0, 0], [1] * 6, [0] * 6], bool)
  out = pooling.pool(kind, x, m)
  x_garbage = jnp.where(m[..., None], x, 1e6)
  np.testing.assert_allclose(pooling.pool(kind, x_garbage, m), out)
  np.testing.assert_array_equal(out[2], 0.0)  # An empty row pools to 0, never NaN.
  ref = {"mean": x[0, :3].mean(0), "max": x[0, :3].max(0), "sum": x[0, :3].sum(0),
         "first": x[0, 0]}[kind]
  np.testing.assert_allclose(out[0], ref, rtol=1e-6)


@settings(max_examples=20, deadline=None)
@given(length=st.integers(1, 9), real=st.integers(0, 9), seed=st.integers(0, 2**31 - 1),
       ties=st.booleans(), dtype=st.sampled_from(["float32", "bfloat16"]))
def test_masked_max_gradient_goes_to_the_first_maximal_real_position(length, real, seed,
                                                                     ties, dtype):
  """pooling.masked_max: the value is jnp.max's over the real positions, and the gradient
  is the upstream one at the first maximal real position (0 elsewhere, 0 for an empty
  row), the same jitted and eager, and forward mode picks the tangent there. The forward picks the position (max_over_length) so
  that a recomputed input cannot make the backward miss it, as jnp.max's ``x == max``
  comparison did for the unrolled Star-Transformer (test_star_transformer.py)."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((2, length, 3))
  if ties:  # Exact ties: the gradient must go to the first one only.
    x = np.round(x)
  x = jnp.asarray(x, dtype)
  real = min(real, length)
  mask = jnp.asarray(np.arange(length)[None] < np.array([[real], [length]]))
  up = jnp.asarray(rng.standard_normal((2, 3)), dtype)
  loss = lambda x: jnp.sum((pooling.masked_max(x, mask) * up).astype(jnp.float32))
  out = pooling.masked_max(x, mask)
  grad, grad_jit = jax.grad(loss)(x), run_as_users_compile(jax.grad(loss), x)
  xn, mn, upn = np.asarray(x, np.float32), np.asarray(mask), np.asarray(up, np.float32)
  want = np.zeros_like(xn)
  for b in range(2):
    if not mn[b].any():
      np.testing.assert_array_equal(np.asarray(out[b], np.float32), 0.0)
      continue
    masked = np.where(mn[b][:, None], xn[b], -np.inf)
    first = np.argmax(masked, axis=0)  # NumPy's argmax: the first maximal position.
    np.testing.assert_array_equal(np.asarray(out[b], np.float32), masked.max(0))
    want[b, first, np.arange(3)] = upn[b]
  np.testing.assert_array_equal(np.asarray(grad, np.float32), want)
  np.testing.assert_array_equal(np.asarray(grad_jit, np.float32), want)
  assert grad.dtype == x.dtype
  # Forward mode (a custom JVP): the tangent at the same position.
  t = jnp.asarray(rng.standard_normal(x.shape), dtype)
  _, tangent = jax.jvp(lambda x: pooling.masked_max(x, mask), (x,), (t,))
  picked = np.where(want != 0, np.asarray(t, np.float32), 0).sum(1)
  np.testing.assert_array_equal(np.asarray(tangent, np.float32), picked)


def test_transformer_remat_unroll_and_scan_do_not_change_values_or_grads():
  """Remat ('full', 'dots') and ``scan_unroll=num_layers`` (the stacked layers without a
  loop) give the jitted values and gradients of the default (rolled loop, no remat), with
  padding, max pooling and dropout on (the same key gives the same masks: the scan splits
  its keys per layer however it is unrolled or rematerialised); the same parameter tree.
  Unscanned layers hold the same weights, one subtree per layer."""
  x = jax.random.normal(jax.random.key(0), (2, 9, D))
  m = jnp.arange(9)[None] < jnp.array([[9], [5]])
  w = jax.random.normal(jax.random.key(3), (D,))
  kw = dict(num_layers=2, num_heads=2, pooling="max", dropout_rate=0.2)
  base = Transformer(**kw)
  params = jax.jit(base.init)(jax.random.key(1), x, m)

  def loss(p, enc):
    out = enc.apply(p, x, m, deterministic=False, rngs={"dropout": jax.random.key(2)})
    return jnp.sum(out.pooled @ w) + jnp.sum(jnp.sin(out.sequence))

  loss_and_grad = jax.jit(jax.value_and_grad(loss), static_argnums=1)
  ref_v, ref_g = loss_and_grad(params, base)
  for variant in (dict(remat="full"), dict(remat="dots"), dict(scan_unroll=2)):
    enc = Transformer(**kw, **variant)
    assert (jax.tree.structure(jax.eval_shape(enc.init, jax.random.key(1), x, m))
            == jax.tree.structure(params))
    v, g = loss_and_grad(params, enc)
    np.testing.assert_allclose(v, ref_v, rtol=1e-5, err_msg=str(variant))
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g), jax.tree.leaves(ref_g)):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5,
                                 err_msg=f"{variant} {jax.tree_util.keystr(path)}")
  with pytest.raises(ValueError, match="scan_unroll"):
    Transformer(scan_unroll=0).init(jax.random.key(0), x, m)
  unscanned = Transformer(scan_layers=False, **kw)
  layers = params["params"]["layers"]
  p2 = {"params": {k: v for k, v in params["params"].items() if k != "layers"}}
  for i in range(2):
    p2["params"][f"layers_{i}"] = jax.tree.map(lambda a, i=i: a[i], layers)
  np.testing.assert_allclose(jax.jit(unscanned.apply)(p2, x, m).pooled,
                             jax.jit(base.apply)(params, x, m).pooled, atol=1e-5)


def test_bert_encoders_that_read_a_prefix_refuse_another_mask_eagerly():
  """The BERT family reads a row's first sum(mask) positions: a left-padded row or a hole
  was read silently (BERT dropped real tokens). An eager call names the row; right padding
  passes. (The (Bi)LSTM did the same until 2 Dec 2026; it now reads any mask exactly.)"""
  from longtext_jax.model import build_encoder  # pylint: disable=import-outside-toplevel
  from longtext_jax.config import encoder_config  # pylint: disable=import-outside-toplevel
  enc = build_encoder(encoder_config("bert_first", vocab_size=30, hidden_size=8,
                                     num_layers=1, num_heads=2, intermediate_size=16,
                                     max_length=8, max_position_embeddings=16,
                                     cls_id=2, sep_id=3))
  x = jnp.full((2, 6), 7, jnp.int32)
  right = jnp.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]], bool)
  left = jnp.array([[1, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 1]], bool)
  params = enc.init(jax.random.key(0), x, right)
  with pytest.raises(ValueError, match="row 1 of the mask has a True after a False"):
    enc.apply(params, x, left)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_lstm_equals_flax_rnn_on_right_padding_and_skips_any_masked_position(bidirectional):
  """The (Bi)LSTM's masked recurrence (the carry passes through masked positions) computes
  what flax's nn.RNN with seq_lengths did on right-padded rows, with the same parameter tree
  (checkpoints of before load); on left padding and holes, where that form read the wrong
  positions (and under jit nothing could check the mask), each row equals its real tokens
  alone."""
  enc = BiLSTM(num_layers=2, bidirectional=bidirectional)
  old = load_script("tests/oracles/bilstm_v0.py").BiLSTM(num_layers=2,
                                                         bidirectional=bidirectional)
  x = jax.random.normal(jax.random.key(0), (3, 7, D))
  right = jnp.arange(7)[None] < jnp.array([[7], [4], [0]])
  params = enc.init(jax.random.key(1), x, right)
  assert (jax.tree.structure(params)
          == jax.tree.structure(old.init(jax.random.key(2), x, right)))
  out, ref = jax.jit(enc.apply)(params, x, right), jax.jit(old.apply)(params, x, right)
  np.testing.assert_allclose(out.sequence, ref.sequence, atol=1e-6)
  np.testing.assert_allclose(out.pooled, ref.pooled, atol=1e-6)
  apply = jax.jit(enc.apply)
  for row in ([0, 1, 1, 0, 1, 0, 1], [0, 0, 0, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0, 1]):
    mask = jnp.array([row], bool)
    real = np.flatnonzero(row)
    holes = apply(params, x[:1], mask)
    alone = apply(params, x[:1, real], jnp.ones((1, len(real)), bool))
    np.testing.assert_allclose(holes.sequence[0, real], alone.sequence[0], atol=1e-6)
    np.testing.assert_array_equal(holes.sequence[0, np.flatnonzero(1 - np.array(row))], 0.0)
    np.testing.assert_allclose(holes.pooled, alone.pooled, atol=1e-6)


@pytest.mark.parametrize("model", ["transformer", "bilstm", "lstm", "star", "slstm", "ran"])
def test_non_finite_features_at_padding_change_nothing(model):
  """Feature inputs padded with NaN / inf (a caller's own padding value): the loss and the
  gradient equal those with zero padding, finite (they were NaN through the BiLSTM's and
  attention's masked branches: 0 x NaN in the backward)."""
  from conftest import load_config  # pylint: disable=import-outside-toplevel
  from longtext_jax import build_model, tasks  # pylint: disable=import-outside-toplevel
  config = load_config("masked_summation.py", f"{model},tiny")
  task = tasks.get_task(config.task)
  net = build_model(config)
  rng = np.random.default_rng(0)
  lengths = np.array([12, 5])
  mask = np.arange(12)[None] < lengths[:, None]
  dim = config.data.feature_dim
  features = np.where(mask[..., None], rng.normal(size=(2, 12, dim)), 0.0).astype(np.float32)
  batch = {"features": features, "mask": mask,
           "target": rng.normal(size=(2, config.task.num_outputs)).astype(np.float32)}
  params = jax.jit(net.init)(jax.random.key(0), batch)["params"]

  def loss(p, b):
    return task.loss(net.apply({"params": p}, b), b)[0]
  grad = jax.jit(jax.value_and_grad(loss))
  want = grad(params, batch)
  for pad in (np.nan, np.inf):
    padded = dict(batch, features=np.where(mask[..., None], features, pad).astype(np.float32))
    got = grad(params, padded)
    assert np.isfinite(float(got[0]))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
      np.testing.assert_array_equal(a, b)
