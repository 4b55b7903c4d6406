"""The sped-up recurrent encoders against copies of their previous implementations.

``tests/oracles/*_v0.py`` are verbatim copies of ``longtext_jax/encoders/{slstm,
star_transformer,ran}.py`` as they were before issue 20 (speed) changed how they compute
(rematerialised elementwise cells, fused projections, layout defaults). The parameter trees
did not change, so each test initialises once, applies both versions to the same
parameters and compares values and gradients (w.r.t. every parameter and the input) to
1e-5, for every option that changes the computation, with padding.
"""
import functools
import importlib.util
import os
import sys

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longtext_jax import encoders

jax.config.update("jax_numpy_rank_promotion", "raise")

ORACLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "oracles")
B, L, D = 2, 9, 8
LENGTHS = (9, 5)  # One full row, one padded row.


@functools.cache
def oracle(name):
  """The pre-speed-up module ``tests/oracles/<name>.py``."""
  spec = importlib.util.spec_from_file_location(f"oracle_{name}",
                                                os.path.join(ORACLES, f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # Dataclass fields resolve their types through it.
  spec.loader.exec_module(module)
  return module


def inputs(seed=0):
  x = jax.random.normal(jax.random.key(seed), (B, L, D))
  mask = jnp.arange(L)[None, :] < jnp.asarray(LENGTHS)[:, None]
  return x, mask


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


def check_equal(new, old, rngs=None, tol=1e-5):
  """Values and gradients of ``new`` and ``old`` on one parameter set agree to ``tol``
  (relative to each array's largest entry)."""
  x, mask = inputs()
  deterministic = rngs is None
  boxed_new = new.init(jax.random.key(1), x, mask)
  boxed_old = old.init(jax.random.key(1), x, mask)
  assert_same_tree(boxed_new, boxed_old)
  params = flax.core.meta.unbox(boxed_new)
  # Non-trivial LayerNorm parameters, so that their gradients and effect are exercised.
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(7), len(leaves))
  params = jax.tree.unflatten(treedef, [
      p + 0.3 * jax.random.normal(k, p.shape, p.dtype) for p, k in zip(leaves, keys)])

  def loss(module, p, x):
    out = module.apply(p, x, mask, deterministic=deterministic, rngs=rngs)
    w = jnp.cos(jnp.arange(out.sequence.size, dtype=jnp.float32)).reshape(out.sequence.shape)
    return jnp.sum(out.sequence * w) + jnp.sum(jnp.sin(out.pooled)), out

  grad = lambda module: jax.jit(jax.value_and_grad(
      functools.partial(loss, module), argnums=(0, 1), has_aux=True))
  (l_new, o_new), g_new = grad(new)(params, x)
  (l_old, o_old), g_old = grad(old)(params, x)
  assert_close(o_new.sequence, o_old.sequence, tol)
  assert_close(o_new.pooled, o_old.pooled, tol)
  assert_close(l_new, l_old, tol)
  flat_new = flax.traverse_util.flatten_dict(g_new[0])
  flat_old = flax.traverse_util.flatten_dict(g_old[0])
  assert sorted(flat_new) == sorted(flat_old)
  for k in flat_new:
    assert_close(flat_new[k], flat_old[k], tol, err_msg=str(k))
  assert_close(g_new[1], g_old[1], tol)


LONG = pytest.mark.long  # Covered in make test by the unmarked cases of the same test.
SLSTM_CASES = [
    dict(sentence_gate_norm="after_sigmoid", pos_g2h=True, pos_h2g=True, update="async",
         window=2),
    dict(gate_norm=False),
    pytest.param(dict(), marks=LONG),
    pytest.param(dict(update="async", window=2), marks=LONG),
    pytest.param(dict(sentence_gate_norm="after_sigmoid", pos_g2h=True, pos_h2g=True,
                      window=3), marks=LONG),
    pytest.param(dict(scan_steps=False, position="sinusoidal", embed_norm=False), marks=LONG),
    pytest.param(dict(remat="dots", update="async"), marks=LONG),
]


def case_id(kw):
  return ",".join(f"{k}={v}" for k, v in kw.items()) or "default"


@pytest.mark.parametrize("kw", SLSTM_CASES, ids=case_id)
def test_slstm_equals_previous_implementation(kw):
  kw = dict(num_steps=3, max_len=16, **kw)
  check_equal(encoders.SLSTM(**kw), oracle("slstm_v0").SLSTM(**kw))


@pytest.mark.parametrize("placement", [pytest.param("after_sentence", marks=LONG),
                                       "before_sentence"])
def test_slstm_dropout_equals_previous_implementation(placement):
  kw = dict(num_steps=2, max_len=16, update="async", dropout_rate=0.3,
            dropout_placement=placement)
  check_equal(encoders.SLSTM(**kw), oracle("slstm_v0").SLSTM(**kw),
              rngs={"dropout": jax.random.key(3)})


STAR_CASES = [
    dict(),
    pytest.param(dict(ends="zero", ordering="official", share_cycle_params=True), marks=LONG),
    pytest.param(dict(ends="masked", ffn_residual=True, mlp_dim=16), marks=LONG),
    pytest.param(dict(radial=False, pooling="max"), marks=LONG),
    pytest.param(dict(ring=False, remat="dots"), marks=LONG),
]


@pytest.mark.parametrize("kw", STAR_CASES, ids=case_id)
def test_star_equals_previous_implementation(kw):
  kw = dict(num_cycles=2, num_heads=2, max_len=16, dropout_rate=0.0, **kw)
  check_equal(encoders.StarTransformer(**kw), oracle("star_transformer_v0").StarTransformer(**kw))


@pytest.mark.parametrize("placement", ["embeddings_and_updates",
                                       pytest.param("embeddings", marks=LONG)])
def test_star_dropout_equals_previous_implementation(placement):
  kw = dict(num_cycles=2, num_heads=2, max_len=16, dropout_rate=0.3,
            dropout_placement=placement, ordering="official", ends="zero")
  check_equal(encoders.StarTransformer(**kw),
              oracle("star_transformer_v0").StarTransformer(**kw),
              rngs={"dropout": jax.random.key(3)})


def test_ran_auto_layout_per_backend():
  resolve = encoders.ran.resolve_layout
  assert resolve("auto", None, "cpu") == ("parallel", 1)
  assert resolve("auto", None, "gpu") == ("parallel", 0)
  assert resolve("auto", None, "tpu") == ("parallel", 0)
  assert resolve("scan", 3, "gpu") == ("scan", 3)  # Explicit choices are kept.
  assert resolve("parallel", 0, "cpu") == ("parallel", 0)
  assert encoders.RAN().layout == resolve("auto", None, jax.default_backend())
  with pytest.raises(ValueError, match="attention_block"):
    encoders.RAN(attention_block=-1).init(jax.random.key(0), *inputs())


@pytest.mark.parametrize("kw", [dict(), pytest.param(dict(impl="scan"), marks=LONG),
                                pytest.param(dict(mask_type="causal"), marks=LONG)],
                         ids=["auto", "scan", "auto_causal"])
def test_ran_default_layout_equals_previous_default(kw):
  """The 'auto' default (and 'scan') against the previous default (parallel, one batched
  window-attention call)."""
  base = dict(num_layers=2, num_heads=2, window_size=4)
  check_equal(encoders.RAN(**base, **kw),
              oracle("ran_v0").RAN(**base, impl="parallel", attention_block=0,
                                   mask_type=kw.get("mask_type", "bidirectional")))
