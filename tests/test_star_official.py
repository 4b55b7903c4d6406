"""Star-Transformer official variant: configs/star/official.py against a float64 re-reading
of the authors' code (fastNLP ``StarTransformer``, shared/reference/official-implementations.md
section 2), outputs and gradients, and the dropout placement."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_script
from longtext_jax.encoders import StarTransformer
from longtext_jax.model import build_encoder

jax.config.update("jax_numpy_rank_promotion", "raise")

D, H, L, CYCLES = 12, 3, 7, 2


def official_config(arg):
  return load_script("configs/star/official.py").get_config(arg)


def _inputs(seed=0):
  x = jax.random.normal(jax.random.PRNGKey(seed), (2, L, D))
  mask = jnp.arange(L)[None] < jnp.asarray([7, 4])[:, None]  # Odd lengths, one padded.
  return x, mask


class _DropoutRecorder:
  """Records the output of every nn.Dropout call with a non-zero rate (a tracer inside the
  scanned cycles, concrete outside)."""

  def __init__(self):
    self.calls = []

  def __call__(self, next_fun, args, kwargs, context):
    out = next_fun(*args, **kwargs)
    if (isinstance(context.module, nn.Dropout) and context.method_name == "__call__"
        and context.module.rate > 0):
      self.calls.append(out)
    return out


@pytest.mark.parametrize("placement,places", [("embeddings_and_updates", 1 + 2 * CYCLES),
                                              ("embeddings", 1)])
def test_dropout_places(placement, places):
  model = StarTransformer(num_heads=H, num_cycles=CYCLES, dropout_rate=0.3, max_len=16,
                          ends="zero", ordering="official", dropout_placement=placement)
  x, mask = _inputs()
  params = jax.jit(model.init)(jax.random.PRNGKey(0), x, mask)
  recorder = _DropoutRecorder()
  with nn.intercept_methods(recorder):
    out = model.apply(params, x, mask, deterministic=False,
                      rngs={"dropout": jax.random.PRNGKey(1)})
  assert len(recorder.calls) == places
  if placement == "embeddings":
    # The only dropout is on e = x + P: the model equals the deterministic model fed the
    # dropped embeddings minus the positions.
    dropped_e = np.asarray(recorder.calls[0])
    pos = np.asarray(params["params"]["pos_embedding"][:L])
    det = jax.jit(model.apply)(params, jnp.asarray(dropped_e - pos[None]), mask)
    np.testing.assert_allclose(out.sequence, det.sequence, atol=2e-5)
    np.testing.assert_allclose(out.pooled, det.pooled, atol=2e-5)
    kept = dropped_e != 0
    assert 0.4 < kept.mean() < 0.95


def test_default_placement_is_unchanged_and_bad_value_raises():
  assert StarTransformer.dropout_placement == "embeddings_and_updates"
  x, mask = _inputs()
  with pytest.raises(ValueError, match="dropout_placement"):
    jax.eval_shape(StarTransformer(num_heads=H, dropout_placement="nowhere").init,
                   jax.random.PRNGKey(0), x, mask)


def test_official_config_sets_the_authors_encoder():
  c = official_config("sst")
  enc = c.model.encoder
  assert (enc.ends, enc.ordering, enc.pooling, enc.dropout_placement, enc.num_cycles,
          enc.num_heads, enc.ffn_residual, enc.share_cycle_params, enc.position) == (
              "zero", "official", "relay_max_mean", "embeddings", 2, 6, False, False,
              "learned")
  assert c.model.d_model == 300 and c.model.d_model // enc.num_heads == 50
  model = build_encoder(enc)
  assert isinstance(model, StarTransformer)
  tiny = official_config("sst,tiny")
  x = jnp.zeros((1, 5, tiny.model.d_model))
  shapes = jax.eval_shape(build_encoder(tiny.model.encoder).init, jax.random.PRNGKey(0), x,
                          jnp.ones((1, 5), bool))
  cycles = shapes["params"]["cycles"]
  assert "satellite_ln" in cycles and "relay_ln" not in cycles  # Pre-LN, no relay LN.


# ------------- the authors' code (fastNLP StarTransformer), re-read in float64 -------------
def _authors_layout(p):
  """One cycle's parameters -> fused matrices (x @ W + b), heads concatenated."""
  fuse = lambda a: {"W": a["kernel"].reshape(a["kernel"].shape[0], -1),
                    "b": a["bias"].reshape(-1)}
  out = lambda a: {"W": a["kernel"].reshape(-1, a["kernel"].shape[-1]), "b": a["bias"]}
  return {name: {"q": fuse(p[name]["query"]), "k": fuse(p[name]["key"]),
                 "v": fuse(p[name]["value"]), "o": out(p[name]["out"])}
          for name in ("satellite_attn", "relay_attn")} | {"ln": p["satellite_ln"]}


def _lin(x, a):
  y = x @ a["W"]
  return y + a["b"].reshape((1,) * (y.ndim - 1) + (-1,))


def _leaky(x):
  return jnp.where(x > 0, x, 0.01 * x)


def authors_star(params, x_LD, n_heads):
  """One unpadded document: e = x + P; per layer: pre-LN (eps 1e-6), 5-slot attention with zero
  key/value beyond the ends, LeakyReLU; relay attention over [s; h], LeakyReLU. -> (h, s)."""
  length, d = x_LD.shape
  k = d // n_heads
  e = x_LD + params["pos_embedding"][:length]
  h, s = e, e.mean(0)
  heads = lambda v: v.reshape(v.shape[:-1] + (n_heads, k))
  for t in range(CYCLES):
    w = _authors_layout(jax.tree.map(lambda a, t=t: a[t], params["cycles"]))
    sat, rel = w["satellite_attn"], w["relay_attn"]
    mu = h.mean(-1, keepdims=True)
    var = ((h - mu) ** 2).mean(-1, keepdims=True)
    xt = (h - mu) / jnp.sqrt(var + 1e-6) * w["ln"]["scale"][None] + w["ln"]["bias"][None]
    q = heads(_lin(xt, sat["q"]))
    kp, vp = heads(_lin(xt, sat["k"])), heads(_lin(xt, sat["v"]))
    zero = jnp.zeros_like(kp[:1])
    k_slots = [jnp.concatenate([zero, kp[:-1]]), kp, jnp.concatenate([kp[1:], zero]),
               heads(_lin(e, sat["k"])),
               jnp.broadcast_to(heads(_lin(s[None], sat["k"])), kp.shape)]
    v_slots = [jnp.concatenate([zero, vp[:-1]]), vp, jnp.concatenate([vp[1:], zero]),
               heads(_lin(e, sat["v"])),
               jnp.broadcast_to(heads(_lin(s[None], sat["v"])), vp.shape)]
    logits = jnp.stack([(q * ks).sum(-1) for ks in k_slots], -1) / jnp.sqrt(k)  # [L, H, 5]
    # The max shift without a gradient: jnp.max's gradient goes to the entries equal to a
    # max that XLA may recompute, rounded differently, in the backward (tests/
    # test_slstm_official.py's _softmax got NaN that way).
    att = jnp.exp(logits - jax.lax.stop_gradient(logits.max(-1, keepdims=True)))
    att = att / att.sum(-1, keepdims=True)
    mixed = sum(att[..., j:j + 1] * v_slots[j] for j in range(5))  # [L, H, K]
    h = _leaky(_lin(mixed.reshape(length, d), sat["o"]))
    nodes = jnp.concatenate([s[None], h])  # [1 + L, D]
    qs = heads(_lin(s[None], rel["q"]))[0]  # [H, K]
    kn, vn = heads(_lin(nodes, rel["k"])), heads(_lin(nodes, rel["v"]))
    logits = (kn * qs[None]).sum(-1) / jnp.sqrt(k)  # [1 + L, H]
    att = jnp.exp(logits - jax.lax.stop_gradient(logits.max(0, keepdims=True)))
    att = att / att.sum(0, keepdims=True)
    s = _leaky(_lin((att[..., None] * vn).sum(0).reshape(1, d), rel["o"]))[0]
  return h, s


def test_official_matches_authors_code_with_gradients():
  """Padded batch (odd lengths) in ours = each document alone in the authors' code (where
  it has no pads to leak), outputs and gradients within 1e-5."""
  model = build_encoder(official_config("sst").model.encoder).clone(
      num_heads=H, max_len=16, dropout_rate=0.0)
  x, mask = _inputs(seed=2)
  lengths = np.asarray(mask).sum(1)
  rng = np.random.default_rng(0)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), x, mask)["params"]
  params = jax.tree.map(
      lambda a: np.asarray(a) + 0.3 * rng.standard_normal(a.shape).astype(np.float32), params)
  out_w = [rng.standard_normal(s) for s in ((2, L, D), (2, D))]

  def ours(params, x):
    out = model.apply({"params": params}, x, mask)
    return jnp.sum(out.sequence * out_w[0]) + jnp.sum(out.pooled * out_w[1]), out
  (_, out), (gp, gx) = jax.jit(jax.value_and_grad(ours, argnums=(0, 1), has_aux=True))(
      params, x)

  with jax.enable_x64(True):
    def ref(params, x):
      total, hs, pooled = 0.0, [], []
      for b, n in enumerate(lengths):
        h, s = authors_star(params, x[b, :n], H)
        # (s + max_i h_i) / 2, the max's gradient to its argmax (jnp.max's can be 0/0:
        # tests/test_ran_official.py's max_rows).
        pool = 0.5 * (s + jnp.take_along_axis(h, jnp.argmax(h, 0)[None], 0)[0])
        total = total + jnp.sum(h * out_w[0][b, :n]) + jnp.sum(pool * out_w[1][b])
        hs.append(h)
        pooled.append(pool)
      return total, (hs, pooled)
    f64 = lambda a: jnp.asarray(np.asarray(a, np.float64))
    (_, (hs, pooled)), (rgp, rgx) = jax.jit(
        jax.value_and_grad(ref, argnums=(0, 1), has_aux=True))(
            jax.tree.map(f64, params), f64(x))
    hs, pooled, rgp, rgx = jax.tree.map(np.asarray, (hs, pooled, rgp, rgx))

  def close(got, want, what):
    err = float(np.abs(np.asarray(got, np.float64) - want).max())
    assert err <= 1e-5 * max(1.0, float(np.abs(want).max())), f"{what}: {err:.2e}"
  for b, n in enumerate(lengths):
    close(out.sequence[b, :n], hs[b], "h")
    close(out.pooled[b], pooled[b], "pooled")
  close(gx, rgx, "d/dx")
  assert np.all(np.asarray(gx)[1, lengths[1]:] == 0)
  flat_ref = dict(jax.tree_util.tree_flatten_with_path(rgp)[0])
  for path, value in jax.tree_util.tree_flatten_with_path(gp)[0]:
    close(value, flat_ref[path], "d/d" + jax.tree_util.keystr(path))
