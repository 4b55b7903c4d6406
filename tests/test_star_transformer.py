"""Star-Transformer: per-node reference (Algorithm 1 written as loops), padding, gradients."""
import numpy as np
import jax
import jax.numpy as jnp
import pytest

from conftest import run_as_users_compile

from longtext_jax.encoders import ENCODERS, StarTransformer

jax.config.update("jax_numpy_rank_promotion", "raise")

D, H = 12, 3
ZERO = "zero-slot"  # A neighbour beyond the ends with zero key and zero value.


# ----------------------------- reference (numpy, float64) -----------------------------
def _ln(x, p):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + 1e-6) * p["scale"] + p["bias"]


def _dense_hk(x, p):  # D -> [H, K]
  return np.einsum("d,dhk->hk", x, p["kernel"]) + p["bias"]


def _mha(p, query, context):
  """MultiAtt(query, C) for one node, C a python list of vectors (or ZERO slots)."""
  q = _dense_hk(query, p["query"])
  ks = [np.zeros_like(q) if c is ZERO else _dense_hk(c, p["key"]) for c in context]
  vs = [np.zeros_like(q) if c is ZERO else _dense_hk(c, p["value"]) for c in context]
  logits = np.stack([(q * k).sum(-1) for k in ks], -1) / np.sqrt(q.shape[-1])  # [H, C]
  a = np.exp(logits - logits.max(-1, keepdims=True))
  a /= a.sum(-1, keepdims=True)
  att = np.einsum("hc,chk->hk", a, np.stack(vs))
  return np.einsum("hk,hkd->d", att, p["out"]["kernel"]) + p["out"]["bias"]


def _mlp(x, p):
  h = np.einsum("d,df->f", x, p["wi"]["kernel"]) + p["wi"]["bias"]
  h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))  # tanh GELU
  return np.einsum("f,fd->d", h, p["wo"]["kernel"]) + p["wo"]["bias"]


def reference(params, x_LD, n, cfg):
  """Algorithm 1 for one document with n real tokens, node by node."""
  official = cfg.get("ordering", "paper") == "official"
  ends = cfg.get("ends", "ring")
  radial, ring = cfg.get("radial", True), cfg.get("ring", True)
  residual = cfg.get("ffn_residual", False)
  shared = cfg.get("share_cycle_params", False)
  act = (lambda v: np.where(v > 0, v, 0.01 * v)) if official else (lambda v: np.maximum(v, 0))
  e = x_LD[:n] + params["pos_embedding"][:n]
  h, s = e.copy(), e.mean(0)
  for t in range(cfg["num_cycles"]):
    p = params["cycles"] if shared else jax.tree.map(lambda a: a[t], params["cycles"])
    src = _ln(h, p["satellite_ln"]) if official else h
    new_h = []
    for i in range(n):
      ctx = [src[i]]
      if ring:
        for j in (i - 1, i + 1):
          if 0 <= j < n:
            ctx.append(src[j])
          elif ends == "ring":
            ctx.append(src[j % n])
          elif ends == "zero":
            ctx.append(ZERO)
      ctx.append(e[i])
      if radial:
        ctx.append(s)
      u = act(_mha(p["satellite_attn"], src[i], ctx))
      if not official:
        u = _ln(u, p["satellite_ln"])
      if residual:
        u = h[i] + u
        u = u + _mlp(_ln(u, p["satellite_mlp_ln"]), p["satellite_mlp"])
      new_h.append(u)
    h = np.stack(new_h)
    if radial:
      u = act(_mha(p["relay_attn"], s, [s] + list(h)))
      if not official:
        u = _ln(u, p["relay_ln"])
      if residual:
        u = s + u
        u = u + _mlp(_ln(u, p["relay_mlp_ln"]), p["relay_mlp"])
      s = u
  return h, s


def _init(cfg, x, mask, seed=0):
  model = StarTransformer(num_heads=H, dropout_rate=0.0, max_len=32, **cfg)
  variables = jax.jit(model.init)(jax.random.key(seed), x, mask)
  # Non-trivial norms and biases so the reference checks their placement too.
  rng = np.random.default_rng(seed + 1)
  return model, jax.tree.map(
      lambda a: np.asarray(a) + 0.1 * rng.standard_normal(a.shape).astype(np.float32),
      variables)


def _normal(seed, shape):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


CASES = [
    dict(ends="ring"),
    dict(ends="zero"),
    dict(ends="masked"),
    dict(ends="zero", ordering="official"),
    dict(ends="ring", ordering="official"),
    dict(ends="ring", radial=False, pooling="max"),
    dict(ends="zero", ring=False),
    dict(ends="masked", ffn_residual=True, share_cycle_params=True, mlp_dim=16),
]


@pytest.mark.parametrize("cfg", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_matches_per_node_reference(cfg):
  cfg = {"num_cycles": 2, "pooling": "relay", **cfg}
  lengths = [7, 4, 1]
  x = _normal(3, (3, 7, D))
  mask = np.arange(7)[None, :] < np.array(lengths)[:, None]
  model, variables = _init(cfg, x, mask)
  out = jax.jit(model.apply)(variables, x, mask)
  params = jax.tree.map(lambda a: np.asarray(a, np.float64), variables["params"])
  for b, n in enumerate(lengths):
    h_ref, s_ref = reference(params, np.asarray(x[b], np.float64), n, cfg)
    np.testing.assert_allclose(out.sequence[b, :n], h_ref, atol=2e-4, rtol=2e-4)
    np.testing.assert_array_equal(out.sequence[b, n:], 0)
    if cfg.get("radial", True):
      np.testing.assert_allclose(out.pooled[b], s_ref, atol=2e-4, rtol=2e-4)
    else:
      np.testing.assert_allclose(out.pooled[b], h_ref.max(0), atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("cfg", [dict(ends="ring"), dict(ends="zero", ordering="official"),
                                 dict(ends="masked", ffn_residual=True)])
def test_padding_and_batch_invariance(cfg):
  cfg = dict(num_cycles=2, pooling="relay_plus_max", **cfg)
  doc = _normal(5, (6, D))
  other = _normal(6, (2, 14, D)) * 3
  # The doc alone padded to 9, and padded to 14 among two full-length companions.
  x_a = np.zeros((1, 9, D), np.float32)
  x_a[0, :6] = doc
  mask_a = (np.arange(9) < 6)[None]
  x_b = np.concatenate([other, other[:1]], 0)
  x_b[1, :6], x_b[1, 6:] = doc, 100.0  # garbage in the pads
  mask_b = np.stack([np.ones(14, bool), np.arange(14) < 6, np.arange(14) < 11])
  model, variables = _init(cfg, x_a, mask_a)
  apply = jax.jit(model.apply)
  out_a = apply(variables, x_a, mask_a)
  out_b = apply(variables, x_b, mask_b)
  np.testing.assert_allclose(out_a.sequence[0, :6], out_b.sequence[1, :6], atol=1e-5)
  np.testing.assert_allclose(out_a.pooled[0], out_b.pooled[1], atol=1e-5)
  np.testing.assert_array_equal(out_b.sequence[1, 6:], 0)


@pytest.mark.parametrize("ends", ["ring", "zero"])
def test_relay_gradient_reaches_every_real_token_and_no_pad(ends):
  cfg = dict(num_cycles=2, pooling="relay", ends=ends)
  x = _normal(7, (2, 10, D))
  mask = np.arange(10)[None, :] < np.array([[10], [6]])
  model, variables = _init(cfg, x, mask)
  w = _normal(8, (D,))
  grad = jax.jit(jax.grad(lambda x: jnp.sum(model.apply(variables, x, mask).pooled @ w)))(x)
  norms = np.linalg.norm(np.asarray(grad), axis=-1)
  assert np.all(norms[mask] > 1e-6), norms
  np.testing.assert_array_equal(norms[~mask], 0.0)


def test_shared_cycle_params_have_no_cycle_axis_and_match_reference_count():
  x = np.ones((1, 5, D), np.float32)
  mask = np.ones((1, 5), bool)
  own = jax.eval_shape(StarTransformer(num_cycles=3, num_heads=H).init, jax.random.key(0),
                       x, mask)
  shared = jax.eval_shape(StarTransformer(num_cycles=3, num_heads=H,
                                          share_cycle_params=True).init,
                          jax.random.key(0), x, mask)
  k_own = own["params"]["cycles"]["satellite_attn"]["query"]["kernel"]
  k_shared = shared["params"]["cycles"]["satellite_attn"]["query"]["kernel"]
  assert k_own.shape == (3, D, H, D // H)
  assert k_shared.shape == (D, H, D // H)
  count = lambda v: sum(a.size for a in jax.tree.leaves(v["params"]["cycles"]))
  assert count(own) == 3 * count(shared)


def _equations(jaxpr):
  """Every equation of ``jaxpr`` and of the jaxprs inside its equations, depth first."""
  for eqn in jaxpr.eqns:
    yield eqn
    for param in eqn.params.values():
      for sub in (param if isinstance(param, (list, tuple)) else [param]):
        inner = getattr(sub, "jaxpr", sub)
        if hasattr(inner, "eqns"):
          yield from _equations(inner)


def _max_intermediate_size(jaxpr) -> int:
  return max(int(np.prod(getattr(var.aval, "shape", ())))
             for eqn in _equations(jaxpr) for var in eqn.outvars)


@pytest.mark.parametrize("ends", ["ring", "zero"])
def test_no_length_squared_intermediate(ends):
  """O(L D): no array anywhere in the forward or backward pass has L x L elements."""
  length, d = 1024, 8
  model = StarTransformer(num_heads=2, ends=ends, max_len=length)
  x = np.ones((1, length, d), np.float32)
  mask = np.arange(length)[None] < 1000
  variables = jax.eval_shape(model.init, jax.random.key(0), x, mask)
  def loss(params, x):
    return jnp.sum(model.apply({"params": params}, x, mask).pooled)
  jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(variables["params"], x)
  assert _max_intermediate_size(jaxpr.jaxpr) < length * length // 8


@pytest.mark.parametrize("unroll", [None, 1], ids=["loop_free", "rolled"])
def test_dropout_and_train_mode_run_and_differ(unroll):
  """Both ways of running the cycles (a Python loop for the loop-free default, the scan
  for the rolled loop) apply dropout: train differs from eval, a key gives the same
  output twice, another key another output."""
  x = _normal(0, (2, 8, D))
  mask = np.ones((2, 8), bool)
  model = StarTransformer(num_heads=H, dropout_rate=0.3, scan_unroll=unroll)
  variables = jax.jit(model.init)(jax.random.key(1), x, mask)
  det = jax.jit(model.apply)(variables, x, mask)
  train = jax.jit(lambda v, x, m, r: model.apply(v, x, m, deterministic=False,
                                                 rngs={"dropout": r}).sequence)
  out = train(variables, x, mask, jax.random.key(2))
  assert np.all(np.isfinite(out))
  assert not np.allclose(det.sequence, out)
  np.testing.assert_array_equal(out, train(variables, x, mask, jax.random.key(2)))
  assert not np.allclose(out, train(variables, x, mask, jax.random.key(3)))


def _projection_products(jaxpr, rows, d):
  """(row products, weight products) among the dot_generals of ``jaxpr`` and its inner
  jaxprs: [rows, d] x [d, d]-sized products (projections and their input gradients:
  ``d`` contracted, rows * d outputs) and weight gradients (``rows`` contracted, d * d
  outputs)."""
  row = weight = 0
  for eqn in _equations(jaxpr):
    if eqn.primitive.name == "dot_general":
      (lhs_contract, _), _ = eqn.params["dimension_numbers"]
      lhs_shape = eqn.invars[0].aval.shape
      contracted = int(np.prod([lhs_shape[i] for i in lhs_contract]))
      size = int(np.prod(eqn.outvars[0].aval.shape))
      row += contracted == d and size == rows * d
      weight += contracted == rows and size == d * d
  return row, weight


@pytest.mark.parametrize("cfg,forward_products", [
    (dict(), 10),
    (dict(share_cycle_params=True), 8),
    (dict(share_cycle_params=True, ordering="official"), 10),
    (dict(num_cycles=3), 16),
], ids=["paper", "shared", "shared_official", "3_cycles"])
def test_backward_does_two_products_per_forward_product(cfg, forward_products):
  """The gradient does 2 [B*L, D] x [D, D] products (input and weight gradient) per
  forward product: 3x in all, the floor of a matmul-bound module. The default 2 cycles do
  10 in the forward: q, k, v, output projection in cycle 1, whose embedding slot reuses k
  and v since h^0 = e; q, k, v, e's k and v, output in cycle 2. With shared parameters
  every cycle's keys and values of e are cycle 1's (8; 10 with the official ordering,
  whose cycle 1 projects LN(e) for its own keys). Before, the gradient transposed each
  cycle's embedding-slot products separately (24 against 10, and 24 against 8 shared)."""
  b, length, d = 2, 9, 8
  model = StarTransformer(num_heads=2, dropout_rate=0.0, max_len=length, **cfg)
  x = _normal(3, (b, length, d))
  mask = np.arange(length)[None] < np.array([[9], [5]])
  params = jax.eval_shape(model.init, jax.random.key(0), x, mask)["params"]
  def loss(params):
    out = model.apply({"params": params}, x, mask)
    return jnp.sum(out.sequence ** 2) + jnp.sum(out.pooled ** 2)
  forward = _projection_products(jax.make_jaxpr(loss)(params).jaxpr, b * length, d)
  gradient = _projection_products(jax.make_jaxpr(jax.grad(loss))(params).jaxpr, b * length, d)
  assert forward == (forward_products, 0)
  assert gradient == (2 * forward_products, forward_products)
@pytest.mark.parametrize("kw", [dict(ends="wrap"), dict(ordering="pre"), dict(pooling="cls"),
                                dict(radial=False, pooling="relay"), dict(num_cycles=0),
                                dict(position="rotary")])
def test_bad_options_raise(kw):
  x, mask = np.ones((1, 4, D), np.float32), np.ones((1, 4), bool)
  with pytest.raises(ValueError):
    jax.eval_shape(StarTransformer(num_heads=H, **kw).init, jax.random.key(0), x, mask)


def test_too_long_for_position_table_raises():
  x, mask = np.ones((1, 9, D), np.float32), np.ones((1, 9), bool)
  with pytest.raises(ValueError, match="max_len"):
    jax.eval_shape(StarTransformer(num_heads=H, max_len=8).init, jax.random.key(0), x, mask)


def test_registered_and_poolings_keep_width():
  assert ENCODERS["star_transformer"] is StarTransformer
  x = _normal(0, (2, 5, D))
  mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
  base = StarTransformer(num_heads=H, dropout_rate=0.0)
  variables = jax.jit(base.init)(jax.random.key(0), x, mask)
  poolings = ("relay", "max", "relay_plus_max", "relay_max_mean")

  @jax.jit
  def all_pooled(variables):  # Same parameters; XLA shares the encoder computation.
    return {p: base.clone(pooling=p).apply(variables, x, mask).pooled for p in poolings}
  pooled = all_pooled(variables)
  proj = StarTransformer(num_heads=H, pooling="relay_max_concat_proj")
  assert jax.eval_shape(proj.init_with_output, jax.random.key(0), x, mask)[0].pooled.shape == (
      2, D)
  np.testing.assert_allclose(pooled["relay_plus_max"], pooled["relay"] + pooled["max"],
                             atol=1e-6)
  np.testing.assert_allclose(pooled["relay_max_mean"], pooled["relay_plus_max"] / 2,
                             atol=1e-6)


@pytest.mark.parametrize("cfg", [dict(), dict(share_cycle_params=True, ends="masked"),
                                 pytest.param(dict(ordering="official", ends="zero"),
                                              marks=pytest.mark.long)],
                         ids=["paper", "shared", "official"])
def test_unrolled_cycles_equal_the_rolled_loop_values_and_grads(cfg):
  """The default runs its 2 cycles without a loop (``scan_unroll=None`` -> 2); jitted
  values and gradients equal the rolled loop's. Before the max pooling picked its position
  in the forward pass (layers/pooling.max_over_length), the jitted unrolled gradients of
  the paper ordering's satellite output projection and LayerNorm were off by up to 100%
  (XLA recomputed the pooled states inside a backward fusion, and ``x == max`` missed);
  this is the check that caught it, with the finite differences below."""
  assert StarTransformer().unroll == 2
  assert StarTransformer(num_cycles=6).unroll == 1
  assert StarTransformer(num_cycles=6, scan_unroll=3).unroll == 3
  with jax.enable_x64(True):
    x = _normal(11, (2, 9, D)).astype(np.float64)
    mask = np.arange(9)[None, :] < np.array([[9], [5]])
    w = jnp.asarray(_normal(12, (D,)), jnp.float64)
    results = []
    for unroll in (None, 1):
      model = StarTransformer(num_cycles=2, num_heads=H, dropout_rate=0.0, max_len=16,
                              dtype=jnp.float64, param_dtype=jnp.float64,
                              scan_unroll=unroll, **cfg)
      variables = jax.jit(model.init)(jax.random.key(0), x, mask)

      def loss(v, model=model):
        out = model.apply(v, x, mask, deterministic=True)
        return jnp.sum(out.pooled @ w) + jnp.sum(jnp.sin(out.sequence))

      # At the users' optimisation level, where the hazard below was found.
      results.append(run_as_users_compile(jax.value_and_grad(loss), variables))
    (l_unrolled, g_unrolled), (l_rolled, g_rolled) = results
    # The LayerNorms compute in float32: agreement to float32 rounding, not float64.
    np.testing.assert_allclose(l_unrolled, l_rolled, rtol=1e-6)
    # The key biases' gradients are 0 up to rounding (a softmax ignores a shift common to
    # every key), so the tolerance is relative to the largest gradient, not each leaf's.
    scale = max(float(np.max(np.abs(b))) for b in jax.tree.leaves(g_rolled))
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g_unrolled),
                            jax.tree.leaves(g_rolled)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * scale,
                                 err_msg=jax.tree_util.keystr(path))
  with pytest.raises(ValueError, match="scan_unroll"):
    StarTransformer(scan_unroll=0).init(jax.random.key(0), x.astype(np.float32), mask)


# 'official' long: its gradients are checked against the authors' code in
# tests/test_star_official.py (test_official_matches_authors_code_with_gradients).
@pytest.mark.parametrize("cfg", [
    dict(), pytest.param(dict(ordering="official", ends="zero"), marks=pytest.mark.long),
    dict(share_cycle_params=True, ffn_residual=True)], ids=["paper", "official", "shared-ffn"])
def test_gradients_match_finite_differences(cfg):
  """Autodiff (through the hand-written VJPs and the scan over cycles) against float64
  central differences, three entries of every parameter. The LayerNorms compute in float32
  (rounding noise ~1e-7 |loss| / step in a difference) and ReLU/max have kinks, so the step
  is 3e-4 and the tolerance 0.05 + 2%; a wrong gradient path is off by far more (the
  unrolled scan with jnp.max's pooling gradient gave -0.15 for 4.25)."""
  with jax.enable_x64(True):
    x = _normal(11, (2, 9, D)).astype(np.float64)
    mask = np.arange(9)[None, :] < np.array([[9], [5]])
    w = jnp.asarray(_normal(12, (D,)), jnp.float64)
    model = StarTransformer(num_cycles=2, num_heads=H, dropout_rate=0.0, max_len=16,
                            dtype=jnp.float64, param_dtype=jnp.float64, **cfg)
    variables = jax.jit(model.init)(jax.random.key(0), x, mask)

    def loss(v):
      out = model.apply(v, x, mask, deterministic=True)
      return jnp.sum(out.pooled @ w) + jnp.sum(jnp.sin(out.sequence))

    value = jax.jit(loss)
    grads = run_as_users_compile(jax.grad(loss), variables)  # As users compile it.
    leaves, treedef = jax.tree.flatten(variables)
    rng = np.random.default_rng(0)
    eps = 3e-4
    for i, (leaf, grad) in enumerate(zip(leaves, jax.tree.leaves(grads))):
      for _ in range(3):
        idx = tuple(int(rng.integers(n)) for n in leaf.shape)

        def at(delta, i=i, leaf=leaf, idx=idx):
          moved = list(leaves)
          moved[i] = leaf.at[idx].add(delta)
          return float(value(jax.tree.unflatten(treedef, moved)))

        fd = (at(eps) - at(-eps)) / (2 * eps)
        assert abs(float(grad[idx]) - fd) <= 0.05 + 0.02 * abs(fd), (i, idx, grad[idx], fd)
