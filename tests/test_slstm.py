"""S-LSTM encoder: one step against a per-node loop of Eq. 1-2, shared parameters, padding."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longtext_jax.encoders import ENCODERS, SLSTM
from longtext_jax.encoders.slstm import SLSTMStep

jax.config.update("jax_numpy_rank_promotion", "raise")

D = 8


def _sigmoid(z):
  return 1.0 / (1.0 + np.exp(-z))


def _layer_norm(z, scale, bias, eps=1e-5):
  mu = z.mean()
  var = ((z - mu) ** 2).mean()
  return (z - mu) / np.sqrt(var + eps) * scale + bias


def _softmax(zs):
  e = np.exp(np.stack(zs) - np.max(np.stack(zs), axis=0))
  return list(e / e.sum(axis=0))


def reference_token_node(p, h, c, g, cg, x_u, mask, i, window):
  """Eq. 1 for one token node i, written out with loops (float64)."""
  n = len(h)
  neighbours = lambda states, offsets: sum(
      (states[j] for j in offsets if 0 <= j < n and mask[j]), np.zeros(D))
  left = range(i - window, i)
  right = range(i + 1, i + window + 1)
  xi = np.concatenate([neighbours(h, left), h[i], neighbours(h, right)])
  w, b = p["token_w"]["kernel"], p["token_w"]["bias"]
  v = p["token_v"]["kernel"]
  scale, bias = p["token_ln"]["scale"], p["token_ln"]["bias"]
  z = {}
  for q, name in enumerate("ilrfsou"):
    pre = xi @ w[:, q, :] + b[q] + x_u[q] + g @ v[:, q, :]
    z[name] = _layer_norm(pre, scale[q], bias[q])
  gi, gl, gr, gf, gs = _softmax([_sigmoid(z[k]) for k in "ilrfs"])
  o = _sigmoid(z["o"])
  u = np.tanh(z["u"])
  c_new = (gl * neighbours(c, left) + gf * c[i] + gr * neighbours(c, right) + gs * cg
           + gi * u)
  return o * np.tanh(c_new), c_new


def reference_sentence_node(p, h, c, g, cg, mask):
  """Eq. 2 for the sentence node, with a loop over the real token nodes (float64)."""
  real = [i for i in range(len(h)) if mask[i]]
  hbar = sum(h[i] for i in real) / len(real)
  fz = []
  for i in real:
    pre = g @ p["sent_f_w"]["kernel"] + h[i] @ p["sent_f_u"]["kernel"] + p["sent_f_u"]["bias"]
    fz.append(_sigmoid(_layer_norm(pre, p["sent_f_ln"]["scale"], p["sent_f_ln"]["bias"])))
  go = []
  for q in range(2):
    pre = (g @ p["sent_go_w"]["kernel"][:, q] + p["sent_go_w"]["bias"][q]
           + hbar @ p["sent_go_u"]["kernel"][:, q])
    go.append(_sigmoid(_layer_norm(pre, p["sent_go_ln"]["scale"][q],
                                   p["sent_go_ln"]["bias"][q])))
  f_g, o_g = go
  weights = _softmax(fz + [f_g])
  cg_new = weights[-1] * cg + sum(wt * c[i] for wt, i in zip(weights[:-1], real))
  return o_g * np.tanh(cg_new), cg_new


def _random_state(rng, batch, length, lengths):
  mask = np.arange(length)[None] < np.asarray(lengths)[:, None]
  h, c = (rng.normal(size=(batch, length, D)) * mask[..., None] for _ in range(2))
  g, cg = (rng.normal(size=(batch, D)) for _ in range(2))
  ux = rng.normal(size=(batch, length, 7, D)) * mask[..., None, None]
  return mask, h, c, g, cg, ux


def _perturb(params, rng):
  """Random values for every parameter (LayerNorm scales/biases included)."""
  return jax.tree_util.tree_map(
      lambda a: np.asarray(a) + rng.normal(scale=0.5, size=a.shape).astype(np.float32),
      params)


@pytest.mark.parametrize("update", ["sync", "async"])
@pytest.mark.parametrize("window", [1, 2])
def test_one_step_equals_per_node_loop(update, window):
  rng = np.random.default_rng(0)
  mask, h, c, g, cg, ux = _random_state(rng, 2, 6, [6, 4])
  as32 = lambda a: jnp.asarray(a, jnp.float32)
  carry = tuple(map(as32, (h, c, g, cg)))
  step = SLSTMStep(window=window, update=update)
  params = step.init(jax.random.PRNGKey(0), carry, as32(ux), jnp.asarray(mask))["params"]
  params = _perturb(params, rng)
  (h1, c1, g1, cg1), _ = step.apply({"params": params}, carry, as32(ux), jnp.asarray(mask))
  p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
  for b in range(2):
    want_h, want_c = np.zeros((6, D)), np.zeros((6, D))
    for i in range(6):
      if mask[b, i]:
        want_h[i], want_c[i] = reference_token_node(p, h[b], c[b], g[b], cg[b], ux[b, i],
                                                    mask[b], i, window)
    np.testing.assert_allclose(h1[b], want_h, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(c1[b], want_c, atol=2e-5, rtol=1e-4)
    # Paper (sync): g^t from h^{t-1}, c^{t-1}; authors' code (async): from h^t, c^t.
    src_h, src_c = (h[b], c[b]) if update == "sync" else (want_h, want_c)
    want_g, want_cg = reference_sentence_node(p, src_h, src_c, g[b], cg[b], mask[b])
    np.testing.assert_allclose(g1[b], want_g, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(cg1[b], want_cg, atol=2e-5, rtol=1e-4)


def _inputs(lengths, length, seed=0):
  x = jax.random.normal(jax.random.PRNGKey(seed), (len(lengths), length, D))
  mask = jnp.arange(length)[None] < jnp.asarray(lengths)[:, None]
  return x, mask


def _count(params):
  return sum(a.size for a in jax.tree_util.tree_leaves(params))


def test_parameter_count_independent_of_steps_and_scan_equals_loop():
  x, mask = _inputs([9, 5], 9)
  counts = set()
  for steps in (1, 3, 10):
    params = jax.eval_shape(SLSTM(num_steps=steps).init, jax.random.PRNGKey(0), x, mask)
    counts.add(_count(params["params"]))
  assert len(counts) == 1
  # The scanned steps and an unrolled loop over the same shared step module agree, with and
  # without rematerialisation.
  params = jax.jit(SLSTM(num_steps=3).init)(jax.random.PRNGKey(1), x, mask)
  ref = jax.jit(SLSTM(num_steps=3).apply)(params, x, mask)
  for kw in (dict(scan_steps=False), dict(remat="full")):
    out = jax.jit(SLSTM(num_steps=3, **kw).apply)(params, x, mask)
    np.testing.assert_allclose(out.pooled, ref.pooled, atol=1e-6)
    np.testing.assert_allclose(out.sequence, ref.sequence, atol=1e-6)
  # bfloat16 compute (cells and gates in float32) stays close to float32.
  out = jax.jit(SLSTM(num_steps=3, dtype=jnp.bfloat16).apply)(params, x, mask)
  assert out.pooled.dtype == jnp.float32  # The contract's output dtype (base.encoder_output).
  np.testing.assert_allclose(out.pooled, ref.pooled, atol=5e-2)
  assert np.abs(np.asarray(out.pooled - ref.pooled)).max() > 0  # It did compute in bf16.
  # More steps change the output (the recurrence is applied num_steps times).
  out4 = jax.jit(SLSTM(num_steps=4).apply)(params, x, mask)
  assert np.abs(np.asarray(out4.pooled - ref.pooled)).max() > 1e-4


def _token_update_dots(model, params, x, mask, output):
  """The token-gate matmuls left in the compiled program of ``sum(<output>)``."""
  f = lambda p: jnp.sum(getattr(model.apply(p, x, mask), output))
  hlo = jax.jit(f).lower(params).compile().as_text()
  return len(set(re.findall(r"(\S+) = f32\[[^\]]*\][^=]*? (?:dot|fusion)\([^\n]*"
                            r"token_w/dot_general", hlo)))


@pytest.mark.parametrize("num_steps,update", [  # Both updates and both step counts fast.
    (3, "sync"), (2, "async"),
    pytest.param(2, "sync", marks=pytest.mark.long),
    pytest.param(3, "async", marks=pytest.mark.long)])
def test_pooled_only_callers_skip_the_last_token_update(update, num_steps):
  # With update='sync', g^T reads the step T-1 token states, so step T's token update is
  # dead for a caller of ``pooled`` alone (classification and regression heads): the last
  # step runs outside the scan, where XLA drops it (inside a scan it would run). Its
  # gradients equal the unrolled loop's (where XLA drops it too).
  x, mask = _inputs([9, 5], 9)
  model = SLSTM(num_steps=num_steps, update=update)
  params = jax.jit(model.init)(jax.random.PRNGKey(1), x, mask)
  pooled = _token_update_dots(model, params, x, mask, "pooled")
  sequence = _token_update_dots(model, params, x, mask, "sequence")
  if update == "sync":
    assert 0 < pooled < sequence
  else:  # g^T reads h^T: nothing is dead.
    assert pooled == sequence
  loss = lambda m: lambda p: jnp.sum(m.apply(p, x, mask).pooled ** 2)
  grads = jax.jit(jax.grad(loss(model)))(params)
  ref = jax.jit(jax.grad(loss(SLSTM(num_steps=num_steps, update=update,
                                    scan_steps=False))))(params)
  for a, b in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("update,position", [("sync", "learned"), ("async", "sinusoidal")])
def test_padding_invariance(update, position):
  model = SLSTM(num_steps=3, window=2, update=update, position=position)
  doc = jax.random.normal(jax.random.PRNGKey(3), (6, D))
  x_a, mask_a = _inputs([6, 8], 8, seed=4)
  x_a = x_a.at[0, :6].set(doc)
  x_b, mask_b = _inputs([3, 6, 11], 11, seed=5)
  x_b = x_b.at[1, :6].set(doc)
  x_b = x_b.at[1, 6:].set(100.0)  # garbage in the pads
  params = jax.jit(model.init)(jax.random.PRNGKey(0), x_a, mask_a)
  apply = jax.jit(model.apply)
  out_a = apply(params, x_a, mask_a)
  out_b = apply(params, x_b, mask_b)
  np.testing.assert_allclose(out_a.pooled[0], out_b.pooled[1], atol=1e-5)
  np.testing.assert_allclose(out_a.sequence[0, :6], out_b.sequence[1, :6], atol=1e-5)
  assert np.all(np.asarray(out_b.sequence[1, 6:]) == 0)
  assert np.all(np.asarray(out_a.sequence[1, 8:]) == 0)


@pytest.mark.parametrize("update", ["sync", "async"])
def test_g_depends_on_every_real_token_and_no_pad(update):
  model = SLSTM(num_steps=2, update=update)
  x, mask = _inputs([7, 4], 7, seed=6)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), x, mask)
  grad = jax.jit(jax.grad(lambda x: jnp.sum(model.apply(params, x, mask).pooled[1] ** 2)))(x)
  per_token = np.abs(np.asarray(grad[1])).sum(-1)
  assert np.all(per_token[:4] > 0), per_token
  assert np.all(per_token[4:] == 0), per_token  # exactly zero for pads
  assert np.all(np.asarray(grad[0]) == 0)  # other documents do not matter


def test_dropout_and_errors():
  x, mask = _inputs([5, 3], 5)
  model = SLSTM(num_steps=2, dropout_rate=0.5)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), x, mask)
  det = jax.jit(model.apply)(params, x, mask)
  drop = jax.jit(lambda x, rng: model.apply(params, x, mask, deterministic=False,
                                            rngs={"dropout": rng}))
  a, b = drop(x, jax.random.PRNGKey(1)), drop(x, jax.random.PRNGKey(2))
  assert np.abs(np.asarray(a.pooled - det.pooled)).max() > 1e-3
  assert np.abs(np.asarray(a.pooled - b.pooled)).max() > 1e-3
  assert np.all(np.asarray(a.sequence)[1, 3:] == 0)
  with pytest.raises(ValueError, match="update"):
    jax.eval_shape(SLSTM(update="later").init, jax.random.PRNGKey(0), x, mask)
  with pytest.raises(ValueError, match="max_len"):
    jax.eval_shape(SLSTM(max_len=4).init, jax.random.PRNGKey(0), x, mask)
  with pytest.raises(ValueError, match="window"):
    jax.eval_shape(SLSTM(window=0).init, jax.random.PRNGKey(0), x, mask)
  assert ENCODERS["slstm"] is SLSTM
