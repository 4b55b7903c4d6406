"""The attention implementations of layers/attention.py compute one function."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from longtext_jax.layers import attention


def _inputs(batch, t, s, heads, k, seed, dtype=jnp.float32):
  rng = np.random.default_rng(seed)
  q, kk, v = (jnp.asarray(rng.normal(size=(batch, n, heads, k)) * 2, dtype)
              for n in (t, s, s))
  lengths = rng.integers(0, s + 1, size=batch)  # 0: a row whose keys are all masked.
  mask = np.arange(s)[None, None, None, :] < lengths[:, None, None, None]
  if t == s and rng.random() < 0.5:  # Sometimes causal as well.
    mask = mask & np.tril(np.ones((t, s), bool))[None, None]
  return q, kk, v, jnp.asarray(mask)


@settings(max_examples=8, deadline=None)
@given(batch=st.integers(1, 3), t=st.integers(1, 9), s=st.integers(1, 9),
       heads=st.integers(1, 3), k=st.sampled_from([1, 4, 8]), seed=st.integers(0, 10**6))
def test_heads_major_equals_jax_nn_values_and_gradients(batch, t, s, heads, k, seed):
  """Heads-major attention and jax.nn.dot_product_attention ('xla'): same outputs and the
  same gradients for queries, keys and values, with padded, fully masked and causal rows."""
  q, kk, v, mask = _inputs(batch, t, s, heads, k, seed)
  w = jnp.asarray(np.random.default_rng(seed + 1).normal(size=(batch, t, heads, k)),
                  jnp.float32)

  def loss(impl):
    return lambda q, kk, v: jnp.sum(jnp.tanh(
        attention.dot_product_attention(q, kk, v, mask, impl)) * w)

  for fn in (lambda impl: jax.jit(lambda q, kk, v: attention.dot_product_attention(
      q, kk, v, mask, impl)), lambda impl: jax.jit(jax.grad(loss(impl), argnums=(0, 1, 2)))):
    want, got = fn("xla")(q, kk, v), fn("heads_major")(q, kk, v)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
      # Two float32 summation orders: ~1e-6 apart on values of order 0.1-1 (hypothesis found
      # 4.9e-6 on a value of 0.135).
      np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5)


def test_heads_major_bfloat16_keeps_a_float32_softmax_and_probs_fn_sees_probabilities():
  """bf16 inputs: close to the float32 result (the softmax runs in float32); ``probs_fn``
  receives float32 probabilities [B, H, T, S] whose rows sum to 1 (0 for masked keys)."""
  q, kk, v, mask = _inputs(2, 5, 7, 3, 8, seed=3)
  seen = []
  exact = attention.heads_major_attention(q, kk, v, mask,
                                          probs_fn=lambda p: seen.append(p) or p)
  (probs,) = seen
  assert probs.dtype == jnp.float32 and probs.shape == (2, 3, 5, 7)
  np.testing.assert_allclose(np.asarray(probs.sum(-1)), 1.0, rtol=1e-6)
  lengths = np.asarray(mask[:, 0, 0].sum(-1))
  for b, n in enumerate(lengths):
    if n:
      assert not np.asarray(probs[b, ..., n:]).any()
  low = attention.dot_product_attention(*(x.astype(jnp.bfloat16) for x in (q, kk, v)), mask,
                                        "xla")
  assert low.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(low, np.float32), np.asarray(exact), atol=0.1)


@settings(max_examples=10, deadline=None)
@given(batch=st.integers(1, 4), t=st.integers(1, 9), s=st.integers(1, 9),
       heads=st.integers(1, 3), k=st.sampled_from([1, 4]), mask_kind=st.sampled_from(
           ["keys", "per_query", "per_head", "none"]),
       block_queries=st.integers(1, 40), seed=st.integers(0, 10**6))
def test_blocked_equals_heads_major_values_and_gradients(batch, t, s, heads, k, mask_kind,
                                                         block_queries, seed):
  """The blocked form computes heads-major attention: same outputs and gradients of q, k,
  v, whatever the blocks (several batch rows, one row, runs of queries with the last run
  padded) and the mask's shape (keys only, padded and causal; per query; per head; none)."""
  q, kk, v, mask = _inputs(batch, t, s, heads, k, seed)
  rng = np.random.default_rng(seed + 2)
  if mask_kind == "per_query":
    mask = jnp.asarray(rng.random((batch, 1, t, s)) < 0.7)
  elif mask_kind == "per_head":
    mask = jnp.asarray(rng.random((batch, heads, t, s)) < 0.7)
  elif mask_kind == "none":
    mask = None
  # Blocks of `block_queries` query rows' logits: below t, runs of queries in one row.
  block_bytes = block_queries * heads * s * 4
  w = jnp.asarray(rng.normal(size=(batch, t, heads, k)), jnp.float32)

  def fn(impl):
    return (lambda q, kk, v: attention.blocked_attention(q, kk, v, mask, block_bytes)
            if impl == "blocked" else attention.heads_major_attention(q, kk, v, mask))

  for make in (jax.jit, lambda f: jax.jit(jax.grad(
      lambda q, kk, v: jnp.sum(jnp.tanh(f(q, kk, v)) * w), argnums=(0, 1, 2)))):
    want, got = make(fn("heads_major"))(q, kk, v), make(fn("blocked"))(q, kk, v)
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
      np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-6)


def test_blocked_keeps_no_probabilities_for_the_backward_pass():
  """Compiled memory of a gradient: the heads-major form keeps the [B, H, T, S]
  probabilities (4 MiB here) for the backward pass, the blocked form one block at a time."""
  b, t, h, k = 4, 256, 4, 8
  x = jax.ShapeDtypeStruct((b, t, h, k), jnp.float32)
  mask = jnp.ones((b, 1, 1, t), bool)

  def temp_bytes(fn):
    grad = jax.grad(lambda q, kk, v: jnp.sum(fn(q, kk, v)), argnums=(0, 1, 2))
    return jax.jit(grad).lower(x, x, x).compile().memory_analysis().temp_size_in_bytes

  logits = b * h * t * t * 4
  whole = temp_bytes(lambda q, kk, v: attention.heads_major_attention(q, kk, v, mask))
  blocked = temp_bytes(lambda q, kk, v: attention.blocked_attention(q, kk, v, mask,
                                                                    logits // 16))
  assert whole >= logits, (whole, logits)
  assert blocked < whole / 3, (blocked, whole)


def test_default_implementation_by_backend_and_size_and_bad_names_fail():
  """On CPU None is heads-major, or blocked for logits over AUTO_BLOCKED_BYTES; JAX's choice
  elsewhere, at every size; dot_product_attention passes the logits' size."""
  big = attention.AUTO_BLOCKED_BYTES + 1
  assert attention.resolve_implementation(None, "cpu") == "heads_major"
  assert attention.resolve_implementation(None, "cpu", big - 1) == "heads_major"
  assert attention.resolve_implementation(None, "cpu", big) == "blocked"
  assert attention.resolve_implementation(None, "gpu", big) is None
  assert attention.resolve_implementation("heads_major", "cpu", big) == "heads_major"
  assert attention.resolve_implementation(None, "gpu") is None
  assert attention.resolve_implementation("xla", "cpu") == "xla"
  with pytest.raises(ValueError, match="heads_major"):
    attention.resolve_implementation("flash", "cpu")


def test_heads_major_keeps_float64_precision():
  """float64 inputs: the logits and softmax stay float64, equal to a numpy float64
  reference to 1e-12 (jax.nn's XLA path rounds its logits through float32: ~1e-7), in the
  heads-major and the blocked forms."""
  with jax.enable_x64(True):
    q, kk, v, mask = _inputs(2, 6, 6, 2, 4, seed=5, dtype=jnp.float64)
    got = attention.dot_product_attention(q, kk, v, mask, "heads_major")
    blocked = attention.blocked_attention(q, kk, v, mask, block_bytes=2 * 6 * 8)
  assert got.dtype == blocked.dtype == jnp.float64
  np.testing.assert_allclose(np.asarray(blocked), np.asarray(got), rtol=1e-12, atol=1e-12)
  q, kk, v, mask = (np.asarray(x) for x in (q, kk, v, mask))
  logits = np.einsum("bthk,bshk->bhts", q, kk) / np.sqrt(q.shape[-1])
  logits = np.where(mask, logits, np.finfo(np.float64).min)
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  want = np.einsum("bhts,bshk->bthk", probs, v)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


def test_transformer_names_its_field_for_an_unknown_attention_implementation():
  from longtext_jax import encoders  # pylint: disable=import-outside-toplevel
  model = encoders.Transformer(num_layers=1, num_heads=2, attention_impl="flash")
  x, mask = jnp.ones((1, 4, 8)), jnp.ones((1, 4), bool)
  with pytest.raises(ValueError, match="Transformer.attention_impl must be one of"):
    model.init(jax.random.PRNGKey(0), x, mask)


@settings(max_examples=8, deadline=None)
@given(batch=st.integers(1, 3), t=st.integers(1, 9), s=st.integers(1, 9),
       heads=st.integers(1, 3), seed=st.integers(0, 10**6))
def test_key_padding_attention_as_lengths_equals_the_masked_form(batch, t, s, heads, seed):
  """The cuDNN path's form (a right-padding key mask passed as per-row key counts), run
  through XLA here: the masked attention's values and gradients for every row with a real
  key; a mask that is not a prefix gives NaN rows, never another attention; a causal mask
  is refused with a clear error."""
  rng = np.random.default_rng(seed)
  q, kk, v = (jnp.asarray(rng.normal(size=(batch, n, heads, 8)), jnp.float32)
              for n in (t, s, s))
  lengths = rng.integers(1, s + 1, size=batch)
  mask = jnp.asarray(np.arange(s)[None, None, None, :] < lengths[:, None, None, None])
  loss = lambda f: lambda q, kk, v: jnp.sum(jnp.tanh(f(q, kk, v)))
  padded = lambda q, kk, v: attention.key_padding_attention(q, kk, v, mask, "xla")
  masked = lambda q, kk, v: attention.dot_product_attention(q, kk, v, mask, "xla")
  np.testing.assert_allclose(jax.jit(padded)(q, kk, v), jax.jit(masked)(q, kk, v),
                             rtol=1e-5, atol=1e-6)
  for a, b in zip(jax.jit(jax.grad(loss(padded), (0, 1, 2)))(q, kk, v),
                  jax.jit(jax.grad(loss(masked), (0, 1, 2)))(q, kk, v)):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
  if s > 1:  # Row 0 masks its first key but keeps a later one: left padding.
    holes = np.asarray(mask).copy()
    holes[0, 0, 0, 0], holes[0, 0, 0, -1] = False, True
    out = jax.jit(
        lambda q, kk, v, m: attention.key_padding_attention(q, kk, v, m, "xla"))(
            q, kk, v, jnp.asarray(holes))
    assert np.isnan(np.asarray(out[0])).all() and not np.isnan(np.asarray(out[1:])).any()
  if t == s > 1:
    causal = mask & jnp.tril(jnp.ones((t, s), bool))[None, None]
    with pytest.raises(ValueError, match=r"key-padding mask of shape \[B, 1, 1, S\]"):
      attention.key_padding_attention(q, kk, v, causal, "cudnn")


def test_cudnn_path_refuses_a_causal_mask_before_calling_cudnn():
  q = jnp.ones((1, 4, 2, 8))
  causal = jnp.tril(jnp.ones((4, 4), bool))[None, None]
  with pytest.raises(ValueError, match="implementation='xla'"):
    attention.dot_product_attention(q, q, q, causal, "cudnn")
