"""The sped-up recurrent encoders against copies of their previous implementations.

``tests/oracles/*_v0.py`` are verbatim copies of ``longtext_jax/encoders/{slstm,
star_transformer,ran}.py`` as they were before issue 20 (speed) changed how they compute
(rematerialised elementwise cells, fused projections, layout defaults). The parameter trees
did not change, so each test checks that both trees are equal (paths, shapes, logical
axes), draws one parameter set for them, applies both versions to it and compares values and gradients (w.r.t. every parameter and the input), for
every option that changes the computation, with padding.

Unmarked cases (one per encoder) run in float32 and must agree to 1e-5 of each array's
scale. The ``long`` cases run in float64 and must agree to 1e-9: there the two versions
are the same arithmetic in another order, which agrees to ~1e-14, while float32 rounding
can exceed 1e-5 where a gradient is a small difference of large terms (the relay-attention
key gradient of the Star-Transformer with dropout, ordering='official': 3.2e-5 in float32,
9e-15 in float64).
"""
import functools
from unittest import mock

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_script
from longtext_jax import encoders

jax.config.update("jax_numpy_rank_promotion", "raise")

B, L, D = 2, 9, 8
LENGTHS = (9, 5)  # One full row, one padded row.


@functools.cache
def oracle(name):
  """The pre-speed-up module ``tests/oracles/<name>.py``."""
  return load_script(f"tests/oracles/{name}.py")


def inputs(seed=0):
  """x [B, L, D] standard normal (drawn on the host) and mask [B, L] of LENGTHS."""
  x = np.random.default_rng(seed).standard_normal((B, L, D)).astype(np.float32)
  mask = np.arange(L)[None, :] < np.asarray(LENGTHS)[:, None]
  return jnp.asarray(x), jnp.asarray(mask)


def assert_same_tree(a, b):
  """Same parameter paths and shapes (and logical axes where boxed)."""
  fa = flax.traverse_util.flatten_dict(flax.core.unfreeze(a))
  fb = flax.traverse_util.flatten_dict(flax.core.unfreeze(b))
  assert sorted(fa) == sorted(fb)
  for k in fa:
    assert np.shape(fa[k]) == np.shape(fb[k]), k
    assert getattr(fa[k], "names", None) == getattr(fb[k], "names", None), k


def assert_close(new, old, tol, err_msg=""):
  """|new - old| <= tol * max(1, max|old|) elementwise: float32 rounding of two orders of
  the same computation, measured against the array's scale."""
  scale = max(1.0, float(np.max(np.abs(old)))) if np.size(old) else 1.0
  np.testing.assert_allclose(new, old, rtol=0, atol=tol * scale, err_msg=err_msg)


# Compiling dominates these tiny cases; LLVM's expensive passes are skipped (same results
# here), and the suite's XLA_FLAGS set backend level 0 (tests/conftest.py). Old and new
# compile alike, so what is compared is the two implementations. (Before the max pooling
# picked its position in the forward, the default level's build gave the Star-Transformer
# at num_cycles=1 gradients off by up to 1.26 (old) and 0.15 (new) from level 0's right
# ones; tests/test_star_transformer.py guards that at the users' level.)
FAST_COMPILE = {"xla_llvm_disable_expensive_passes": True}


def run_compiled(f, *args):
  """``jax.jit(f)(*args)`` compiled with :data:`FAST_COMPILE`."""
  return jax.jit(f).lower(*args).compile(compiler_options=FAST_COMPILE)(*args)


def random_params(shapes):
  """Parameters of the shapes/dtypes in ``shapes``, drawn on the host (no init run or
  random-number program to compile, which would cost more than the test): LayerNorm scales
  1 + N(0, 0.3^2), everything else N(0, 0.3^2), so that every parameter, LayerNorm ones
  included, is non-trivial and has a gradient to compare."""
  rng = np.random.default_rng(7)
  flat = flax.traverse_util.flatten_dict(shapes)
  return flax.traverse_util.unflatten_dict({
      path: jnp.asarray((path[-1] == "scale") + 0.3 * rng.standard_normal(s.shape), s.dtype)
      for path, s in sorted(flat.items())})


def check_equal(new_cls, old_cls, kw, rngs=None, x64=False):
  """Values and gradients of ``new_cls(**kw)`` and ``old_cls(**kw)`` on one parameter set
  agree: in float32 to 1e-5, or with ``x64`` in float64 to 1e-9 (of each array's scale).

  With ``x64`` the modules get float64 dtypes and ``jnp.float32`` (which both versions
  name for their LayerNorms and softmaxes) reads float64 while they are traced.
  """
  if x64:
    with jax.enable_x64(True), mock.patch.object(jnp, "float32", jnp.float64):
      f64 = dict(dtype=jnp.float64, param_dtype=jnp.float64)
      return _check_equal(new_cls(**kw, **f64), old_cls(**kw, **f64), rngs, 1e-9, jnp.float64)
  return _check_equal(new_cls(**kw), old_cls(**kw), rngs, 1e-5, jnp.float32)


def _check_equal(new, old, rngs, tol, dtype):
  x, mask = inputs()
  x = x.astype(dtype)
  deterministic = rngs is None
  boxed_new = jax.eval_shape(new.init, jax.random.key(1), x, mask)
  assert_same_tree(boxed_new, jax.eval_shape(old.init, jax.random.key(1), x, mask))
  shapes = flax.core.meta.unbox(boxed_new)
  assert {p.dtype for p in jax.tree.leaves(shapes)} == {jnp.dtype(dtype)}
  params = random_params(shapes)

  def loss(module, p, x):
    out = module.apply(p, x, mask, deterministic=deterministic, rngs=rngs)
    w = jnp.cos(jnp.arange(out.sequence.size, dtype=dtype)).reshape(out.sequence.shape)
    return jnp.sum(out.sequence * w) + jnp.sum(jnp.sin(out.pooled)), out

  def both(params, x):  # One program for both versions: one compile instead of two.
    return [jax.value_and_grad(functools.partial(loss, m), argnums=(0, 1), has_aux=True)(
        params, x) for m in (new, old)]

  ((l_new, o_new), g_new), ((l_old, o_old), g_old) = run_compiled(both, params, x)
  assert o_new.sequence.dtype == dtype
  assert_close(o_new.sequence, o_old.sequence, tol)
  assert_close(o_new.pooled, o_old.pooled, tol)
  assert_close(l_new, l_old, tol)
  flat_new = flax.traverse_util.flatten_dict(g_new[0])
  flat_old = flax.traverse_util.flatten_dict(g_old[0])
  assert sorted(flat_new) == sorted(flat_old)
  for k in flat_new:
    assert_close(flat_new[k], flat_old[k], tol, err_msg=str(k))
  assert_close(g_new[1], g_old[1], tol)


LONG = pytest.mark.long  # The unmarked float32 case of each encoder runs in make test.
DROPOUT = {"dropout": jax.random.key(3)}


def case_id(kw):
  return ",".join(f"{k}={v}" for k, v in kw.items()) or "default"


def slstm_pair(kw):
  return encoders.SLSTM, oracle("slstm_v0").SLSTM, {"num_steps": 3, "max_len": 16, **kw}


def star_pair(kw):
  return (encoders.StarTransformer, oracle("star_transformer_v0").StarTransformer,
          {"num_cycles": 2, "num_heads": 2, "max_len": 16, "dropout_rate": 0.0, **kw})


SLSTM_FAST = dict(sentence_gate_norm="after_sigmoid", pos_g2h=True, pos_h2g=True,
                  update="async", window=2)
SLSTM_CASES = [  # (options, with dropout)
    (SLSTM_FAST, False),
    (dict(gate_norm=False), False),
    (dict(), False),
    (dict(update="async", window=2), False),
    (dict(sentence_gate_norm="after_sigmoid", pos_g2h=True, pos_h2g=True, window=3), False),
    (dict(scan_steps=False, position="sinusoidal", embed_norm=False), False),
    (dict(remat="dots", update="async"), False),
    # Dropout through the unrolled loop: the scanned path runs its last step outside the
    # scan (so pooled-only callers skip its token update, tests/test_slstm.py), which draws
    # that step's dropout mask from another key than the previous all-steps scan did; the
    # loop draws the same masks in both implementations, so the placements are compared
    # mask for mask there.
    (dict(update="async", dropout_rate=0.3, dropout_placement="after_sentence",
          scan_steps=False), True),
    (dict(update="async", dropout_rate=0.3, dropout_placement="before_sentence",
          scan_steps=False), True),
]
STAR_CASES = [
    (dict(), False),
    (dict(ends="zero", ordering="official", share_cycle_params=True), False),
    (dict(ends="masked", ffn_residual=True, mlp_dim=16), False),
    (dict(radial=False, pooling="max"), False),
    (dict(ring=False, remat="dots"), False),
    (dict(num_cycles=1), False),
    (dict(dropout_rate=0.3, dropout_placement="embeddings_and_updates", ordering="official",
          ends="zero"), True),
    (dict(dropout_rate=0.3, dropout_placement="embeddings", ordering="official",
          ends="zero"), True),
]


def test_slstm_equals_previous_implementation():
  check_equal(*slstm_pair(SLSTM_FAST))


def test_star_equals_previous_implementation():
  check_equal(*star_pair({}))


@LONG
@pytest.mark.parametrize("kw,dropout", SLSTM_CASES, ids=[case_id(c[0]) for c in SLSTM_CASES])
def test_slstm_equals_previous_implementation_f64(kw, dropout):
  check_equal(*slstm_pair(kw), rngs=DROPOUT if dropout else None, x64=True)


@LONG
@pytest.mark.parametrize("kw,dropout", STAR_CASES, ids=[case_id(c[0]) for c in STAR_CASES])
def test_star_equals_previous_implementation_f64(kw, dropout):
  check_equal(*star_pair(kw), rngs=DROPOUT if dropout else None, x64=True)


def test_ran_auto_layout_per_backend():
  resolve = encoders.ran.resolve_layout
  assert resolve("auto", None, "cpu") == ("scan", 1)
  # An explicit attention_block asks for the parallel form (the knob is that form's).
  assert resolve("auto", 4, "cpu") == ("parallel", 4)
  assert resolve("auto", 0, "cpu") == ("parallel", 0)
  assert resolve("auto", None, "gpu") == ("parallel", 0)
  assert resolve("auto", None, "tpu") == ("parallel", 0)
  assert resolve("scan", 3, "gpu") == ("scan", 3)  # Explicit choices are kept.
  assert resolve("parallel", 0, "cpu") == ("parallel", 0)
  assert encoders.RAN().layout == resolve("auto", None, jax.default_backend())
  with pytest.raises(ValueError, match="attention_block"):
    encoders.RAN(attention_block=-1).init(jax.random.key(0), *inputs())


def test_ran_auto_unroll_per_backend():
  """``scan_unroll=None`` is 8 windows per loop iteration on GPUs (measured on an H100), 1
  elsewhere; explicit values are kept; what a module runs is ``RAN().unroll``."""
  resolve = encoders.ran.resolve_unroll
  assert resolve(None, "gpu") == encoders.ran.GPU_UNROLL == 8
  assert resolve(None, "cpu") == resolve(None, "tpu") == 1
  assert resolve(3, "gpu") == resolve(3, "cpu") == 3
  assert encoders.RAN().unroll == resolve(None, jax.default_backend())
  assert encoders.RAN(scan_unroll=5).unroll == 5
  with pytest.raises(ValueError, match="scan_unroll"):
    encoders.RAN(scan_unroll=0).init(jax.random.key(0), *inputs())


def test_ran_default_layout_equals_previous_default():
  """The 'auto' default against the previous default (parallel, one batched window-attention
  call)."""
  check_equal(encoders.RAN, oracle("ran_v0").RAN, dict(num_layers=1, num_heads=2, window_size=4))


@LONG
@pytest.mark.parametrize("kw", [dict(), dict(impl="scan"), dict(mask_type="causal")],
                         ids=["auto", "scan", "auto_causal"])
def test_ran_layouts_equal_previous_default_f64(kw):
  """'auto' and 'scan' (bidirectional and causal) against the previous default, in float64."""
  def old(impl="parallel", **k):  # The previous default whatever the new one is given.
    del impl
    return oracle("ran_v0").RAN(**k, impl="parallel", attention_block=0)

  check_equal(encoders.RAN, old, dict(num_layers=2, num_heads=2, window_size=4, **kw),
              x64=True)


@pytest.mark.parametrize("ends", ["ring", "zero", "masked"])
@pytest.mark.parametrize("ring,radial", [(True, True), (False, True), (True, False)])
def test_star_satellite_attention_vjp_equals_autodiff(ends, ring, radial):
  """The hand-written backward of the satellite attention against autodiff of its own
  forward (``.fun``: the function without the custom VJP), rows of different lengths, an
  empty row included, every input's cotangent."""
  attend = encoders.star_transformer.satellite_attention
  b, length, h, k = 3, 7, 2, 4
  keys = iter(jax.random.split(jax.random.key(3), 8))
  arr = lambda *shape: jax.random.normal(next(keys), shape, jnp.float32)
  q, kk, v, ke, ve = (arr(b, length, h, k) for _ in range(5))
  ks, vs = (arr(b, h, k), arr(b, h, k)) if radial else (None, None)
  mask = jnp.arange(length)[None] < jnp.array([[7], [3], [0]])
  g = arr(b, length, h, k) * mask[..., None, None]  # Pads' outputs are masked downstream.
  args = (q, kk, v, ke, ve, ks, vs)
  out_new, vjp_new = jax.vjp(lambda *a: attend(*a, mask, ends, ring), *args)
  out_ref, vjp_ref = jax.vjp(lambda *a: attend.fun(*a, mask, ends, ring), *args)
  np.testing.assert_allclose(out_new, out_ref, rtol=0, atol=0)
  for new, ref in zip(vjp_new(g), vjp_ref(g)):
    if ref is None:
      assert new is None
    else:
      np.testing.assert_allclose(new, ref, rtol=1e-5, atol=1e-6)
