"""S-LSTM official variants against a float64 re-reading of the authors' code.

The reference below is written from the description of ylwangy/slstm_pytorch
(``models/slstm/model.py``, ``SLSTM_block.forward``; facts in
shared/reference/official-implementations.md, section 3), in the authors' layout: fused
Linear layers over concatenations ([h; h_before; h_after; g] -> 7 gates, [g; mean h] ->
(f_g, o_g), [h (+pos); g] -> f_i), an additive -1e25 pad mask in the sentence softmax, dropout
as explicit multipliers. Our parameters are copied into that layout by ``authors_weights``
(pure reshapes and concatenations, so jax.grad maps the reference's gradients back onto our
parameter tree). Forward and gradients are compared for every architecture of
configs/slstm/official.py, k in {1, 2}, with padding and odd lengths.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_script
from longtext_jax.encoders import SLSTM
from longtext_jax.model import build_encoder

jax.config.update("jax_numpy_rank_promotion", "raise")

D, L, STEPS, MAX_LEN = 8, 7, 3, 12
LENGTHS = (7, 4)  # Odd lengths, one row padded.


def official_config(arch):
  module = load_script("configs/slstm/official.py")
  return module, module.get_config(arch)


ARCHS = tuple(official_config("slstm")[0].ARCHS)


# ------------------------- the authors' code, re-read (float64) -------------------------
def authors_weights(p, d):
  """Our parameter tree -> the authors' fused weights (``x @ W + b`` convention)."""
  tw, tv = p["step"]["token_w"], p["step"]["token_v"]["kernel"]
  flat = lambda k: k.reshape(k.shape[0], -1)  # [in, Q, D] -> [in, Q*D], gate-major.
  w = {
      # Input order of the authors' token Linear: [h_i; h_before; h_after; g].
      "WV": jnp.concatenate([flat(tw["kernel"][d:2 * d]), flat(tw["kernel"][:d]),
                             flat(tw["kernel"][2 * d:]), flat(tv)], axis=0),
      "bV": tw["bias"].reshape(-1),
      "U": flat(p["input_u"]["kernel"]),
      # Sentence Linear on [g; mean h] -> (f_g, o_g).
      "Wfo": jnp.concatenate([flat(p["step"]["sent_go_w"]["kernel"]),
                              flat(p["step"]["sent_go_u"]["kernel"])], axis=0),
      "bfo": p["step"]["sent_go_w"]["bias"].reshape(-1),
      # Token forget Linear on [h_i (+pos); g] -> f_i.
      "Wf_": jnp.concatenate([p["step"]["sent_f_u"]["kernel"],
                              p["step"]["sent_f_w"]["kernel"]], axis=0),
      "bf_": p["step"]["sent_f_u"]["bias"],
      "emb_ln": p["embed_ln"],
  }
  if "token_ln" in p["step"]:
    ln = p["step"]["token_ln"]
    for q, name in enumerate("ilrfsou"):
      w[name + "_norm"] = {"scale": ln["scale"][q], "bias": ln["bias"][q]}
    go = p["step"]["sent_go_ln"]
    w["gf_norm"] = {"scale": go["scale"][0], "bias": go["bias"][0]}
    w["go_norm"] = {"scale": go["scale"][1], "bias": go["bias"][1]}
    w["gf__norm"] = p["step"]["sent_f_ln"]
  if "pos_embedding" in p:
    w["pos_input"] = p["pos_embedding"]
  if "block_pos_embedding" in p["step"]:
    w["pos_block"] = p["step"]["block_pos_embedding"]
  return w


def _bc(v, like):
  """v broadcast to the rank of ``like`` over its leading axes (explicit, no promotion)."""
  return v.reshape((1,) * (like.ndim - v.ndim) + v.shape)


def _layer_norm(x, p):  # fairseq LayerNorm, eps 1e-5, over the last axis.
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / jnp.sqrt(var + 1e-5) * _bc(p["scale"], x) + _bc(p["bias"], x)


def _sigmoid(z):
  return 1.0 / (1.0 + jnp.exp(-z))


def _softmax(z, axis):
  # The shift by the max carries no gradient (softmax does not depend on it). Through
  # jnp.max's gradient it would: that gradient goes to the entries equal to the max, and a
  # max that XLA recomputes in the backward pass, fused and rounded differently, can equal
  # none of them: 0/0. It did, every gradient NaN, with the suite's older CPU fusion
  # emitters (tests/conftest.py; docs/architecture.md "Tests", 1 Dec).
  e = jnp.exp(z - jax.lax.stop_gradient(z.max(axis=axis, keepdims=True)))
  return e / e.sum(axis=axis, keepdims=True)


def _before(x, s):  # x[:, i - s], zero padding at the front.
  return jnp.concatenate([jnp.zeros_like(x[:, :s]), x[:, :-s]], axis=1)


def _after(x, s):  # x[:, i + s], zero padding at the end.
  return jnp.concatenate([x[:, s:], jnp.zeros_like(x[:, :s])], axis=1)


def authors_forward(w, x, mask, *, k, steps, ln, pos_g2h, pos_h2g, drops=None):
  """SlstmEncoder.forward_embedding + SLSTM_block.forward, as read; returns (h, g).

  ``drops``: multipliers of the dropouts in call order (embedding, then h and g per step).
  """
  drops = list(drops) if drops is not None else None
  drop = (lambda v: v * drops.pop(0)) if drops is not None else (lambda v: v)
  length, d = x.shape[1], x.shape[2]
  seq = mask[..., None].astype(x.dtype)
  if "pos_input" in w and not pos_g2h and not pos_h2g:
    x = x + _bc(w["pos_input"][:length], x)
  x = drop(_layer_norm(x, w["emb_ln"]))
  h = x * seq
  c = h
  ux = h @ w["U"]
  lengths = seq.sum(1)
  g, gc = h.sum(1) / lengths, c.sum(1) / lengths
  pad_score = -(1.0 - seq) * 1e25
  pos = w["pos_block"][None, :length] if (pos_g2h or pos_h2g) else None
  for _ in range(steps):
    h_before = sum(_before(h, s) * seq for s in range(1, k + 1))
    h_after = sum(_after(h, s) * seq for s in range(1, k + 1))
    c_before = sum(_before(c, s) * seq for s in range(1, k + 1))
    c_after = sum(_after(c, s) * seq for s in range(1, k + 1))
    g_expand = g[:, None, :] * seq  # The sentence node of the previous step.
    v = jnp.concatenate([h, h_before, h_after, g_expand], axis=-1) @ w["WV"]
    v = v + _bc(w["bV"], v) + ux
    v = {name: v[..., j * d:(j + 1) * d] for j, name in enumerate("ilrfsou")}
    if ln:
      v = {name: _layer_norm(z, w[name + "_norm"]) for name, z in v.items()}
    gates = [_sigmoid(v[name]) for name in "ilrf"]
    gates.append(_sigmoid(v["s"] + pos) if pos_g2h else _sigmoid(v["s"]))
    g_i, g_l, g_r, g_f, g_s = jnp.split(_softmax(jnp.stack(gates, axis=2), axis=2), 5, axis=2)
    g_i, g_l, g_r, g_f, g_s = (z[:, :, 0] for z in (g_i, g_l, g_r, g_f, g_s))
    g_o, g_u = _sigmoid(v["o"]), jnp.tanh(v["u"])
    c = g_u * g_i + c_before * g_l + c_after * g_r + c * g_f + gc[:, None] * g_s
    h = drop(g_o * jnp.tanh(c))
    h, c = h * seq, c * seq
    # Sentence node, from the new (dropped) h and the new c.
    h_avg = h.sum(1) / lengths
    fo = jnp.concatenate([g, h_avg], axis=-1) @ w["Wfo"]
    fo = fo + _bc(w["bfo"], fo)
    f_g, o_g = _sigmoid(fo[:, :d]), _sigmoid(fo[:, d:])
    h_in = h + pos if pos_h2g else h
    f_tok = jnp.concatenate([h_in, g_expand], axis=-1) @ w["Wf_"]
    f_tok = f_tok + _bc(w["bf_"], f_tok)
    if ln:  # LayerNorm after the sigmoid on f_g, o_g; before it on the f_i.
      f_g, o_g = _layer_norm(f_g, w["gf_norm"]), _layer_norm(o_g, w["go_norm"])
      f_tok = _layer_norm(f_tok, w["gf__norm"])
    f_tok = _sigmoid(f_tok)
    weights = _softmax(jnp.concatenate([f_tok + pad_score, f_g[:, None]], axis=1), axis=1)
    gc = jnp.sum(weights[:, :length] * c, axis=1) + weights[:, length] * gc
    g = drop(o_g * jnp.tanh(gc))
  return h, g


# ---------------------------------------- tests ----------------------------------------
def _model(arch, window, **kw):
  _, config = official_config(arch)
  model = build_encoder(config.model.encoder)
  return model.clone(num_steps=STEPS, window=window, max_len=MAX_LEN, dtype=jnp.float32,
                     **kw), config.model.encoder


def _setup(model, seed):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(len(LENGTHS), L, D)).astype(np.float32)
  mask = np.arange(L)[None] < np.asarray(LENGTHS)[:, None]
  params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.asarray(x),
                               jnp.asarray(mask))["params"]
  # Random values for every parameter (LayerNorm scales and biases included), so that the
  # LayerNorm placement and the position tables matter.
  params = jax.tree_util.tree_map(
      lambda a: np.asarray(a) + rng.normal(scale=0.5, size=a.shape).astype(np.float32), params)
  out_w = [rng.normal(size=s) for s in ((len(LENGTHS), L, D), (len(LENGTHS), D))]
  return x, mask, params, out_w


def _ours(model, params, x, mask, out_w, rngs=None):
  """Our (h, g) and the gradients of a fixed linear readout w.r.t. x and the parameters."""
  def loss(params, x):
    out = model.apply({"params": params}, x, mask, deterministic=rngs is None, rngs=rngs)
    return (jnp.sum(out.sequence * out_w[0]) + jnp.sum(out.pooled * out_w[1]),
            (out.sequence, out.pooled))
  (_, (h, g)), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(
      params, jnp.asarray(x))
  return jax.tree_util.tree_map(np.asarray, (h, g, grads))


def _reference(enc, params, x, mask, out_w, window, drops=None):
  with jax.enable_x64(True):
    f64 = lambda a: jnp.asarray(np.asarray(a, np.float64))
    def loss(params, x):
      h, g = authors_forward(authors_weights(params, D), x, f64(mask), k=window,
                             steps=STEPS, ln=enc.gate_norm, pos_g2h=enc.pos_g2h,
                             pos_h2g=enc.pos_h2g,
                             drops=None if drops is None else [f64(m) for m in drops])
      return jnp.sum(h * out_w[0]) + jnp.sum(g * out_w[1]), (h, g)
    (_, (h, g)), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(
        jax.tree_util.tree_map(f64, params), f64(x))
    return jax.tree_util.tree_map(np.asarray, (h, g, grads))


def _assert_close(got, want, what):
  scale = max(1.0, float(np.abs(want).max()))
  err = float(np.abs(np.asarray(got, np.float64) - want).max())
  assert err <= 1e-5 * scale, f"{what}: max error {err:.2e} (scale {scale:.1f})"


def _compare(ours, ref):
  (h, g, (gp, gx)), (rh, rg, (rgp, rgx)) = ours, ref
  _assert_close(h, rh, "h")
  _assert_close(g, rg, "g")
  _assert_close(gx, rgx, "d/dx")
  assert np.all(gx[1, LENGTHS[1]:] == 0)  # Pads do not matter.
  flat_ref = dict(jax.tree_util.tree_flatten_with_path(rgp)[0])
  for path, value in jax.tree_util.tree_flatten_with_path(gp)[0]:
    _assert_close(value, flat_ref[path], "d/d" + jax.tree_util.keystr(path))


# At test scale the five archs are two computations (gate LayerNorms off + in-block
# positions, or LayerNorms on + input positions; width and step count are set by the test):
# one of each kind. test_official_configs_set_every_field checks every arch's fields.
@pytest.mark.parametrize("arch,window", [  # Each computation kind at k=1 and k=2 fast.
    ("slstm1792_ln_posinput", 1), ("slstm1280", 2),
    pytest.param("slstm1792_ln_posinput", 2, marks=pytest.mark.long),
    pytest.param("slstm1280", 1, marks=pytest.mark.long)])
def test_official_arch_matches_authors_code(arch, window):
  model, enc = _model(arch, window)
  x, mask, params, out_w = _setup(model, seed=window)
  _compare(_ours(model, params, x, mask, out_w),
           _reference(enc, params, x, mask, out_w, window))


class _DropoutRecorder:
  """Records the multiplier (0 or 1/keep) of every nn.Dropout call, in call order."""

  def __init__(self):
    self.multipliers = []

  def __call__(self, next_fun, args, kwargs, context):
    out = next_fun(*args, **kwargs)
    if isinstance(context.module, nn.Dropout) and context.method_name == "__call__":
      keep = 1.0 - context.module.rate
      self.multipliers.append(np.where(np.asarray(out) != 0, 1.0 / keep, 0.0))
    return out


@pytest.mark.parametrize("arch", ["slstm1280",
                                  pytest.param("slstm1792_ln_posinput", marks=pytest.mark.long)])
def test_official_dropout_placement_matches_authors_code(arch):
  # A Python loop over the steps (same outputs as the scan) so the masks can be read.
  model, enc = _model(arch, 1, dropout_rate=0.3, scan_steps=False)
  x, mask, params, out_w = _setup(model, seed=3)
  rngs = {"dropout": jax.random.PRNGKey(7)}
  recorder = _DropoutRecorder()
  with nn.intercept_methods(recorder):
    model.apply({"params": params}, jnp.asarray(x), jnp.asarray(mask), deterministic=False,
                rngs=rngs)
  assert len(recorder.multipliers) == 1 + 2 * STEPS  # Embedding, then h and g per step.
  assert 0 < np.mean([np.mean(m == 0) for m in recorder.multipliers]) < 0.6
  _compare(_ours(model, params, x, mask, out_w, rngs=rngs),
           _reference(enc, params, x, mask, out_w, 1, drops=recorder.multipliers))


def test_dropout_placements_differ_only_where_the_sentence_node_reads_new_h():
  x, mask, *_ = _setup(SLSTM(num_steps=1), seed=4)
  rngs = {"dropout": jax.random.PRNGKey(1)}
  outs = {}
  for update in ("sync", "async"):
    for placement in ("after_sentence", "before_sentence"):
      model = SLSTM(num_steps=1, update=update, dropout_rate=0.5, dropout_placement=placement)
      params = jax.jit(model.init)(jax.random.PRNGKey(0), x, mask)
      outs[update, placement] = jax.jit(
          lambda p, m=model: m.apply(p, x, mask, deterministic=False, rngs=rngs))(params)
  for update in ("sync", "async"):  # Same masks: the token states are the same.
    np.testing.assert_array_equal(outs[update, "after_sentence"].sequence,
                                  outs[update, "before_sentence"].sequence)
  np.testing.assert_array_equal(outs["sync", "after_sentence"].pooled,
                                outs["sync", "before_sentence"].pooled)
  assert np.abs(np.asarray(outs["async", "after_sentence"].pooled
                           - outs["async", "before_sentence"].pooled)).max() > 1e-3


def test_sentence_softmax_is_safe_for_large_layer_norm_logits():
  # With the authors' LN after the sigmoid, f_g is a LayerNorm output: a large LN scale makes
  # logits far outside (0, 1), where an exp without the max subtracted overflows.
  model = SLSTM(num_steps=2, sentence_gate_norm="after_sigmoid", update="async", max_len=L)
  x, mask, *_ = _setup(model, seed=5)
  params = jax.jit(model.init)(jax.random.PRNGKey(0), x, mask)
  params = jax.tree_util.tree_map_with_path(
      lambda path, a: a * 1e3 if "sent_go_ln" in jax.tree_util.keystr(path) else a, params)
  out = jax.jit(model.apply)(params, x, mask)
  grad = jax.jit(jax.grad(lambda x: jnp.sum(model.apply(params, x, mask).pooled)))(
      jnp.asarray(x))
  assert np.all(np.isfinite(out.pooled)) and np.all(np.isfinite(grad))


def test_official_configs_set_every_field():
  expected = {  # (D, steps, gate_norm, pos_g2h = pos_h2g, position)
      "slstm": (1792, 10, False, True, "none"),
      "slstm1280": (1280, 10, False, True, "none"),
      "slstm1792": (1792, 10, False, True, "none"),
      "slstm1792_ln_posinput": (1792, 10, True, False, "learned"),
      "slstm1280_ln_posinput_layer24": (1280, 24, True, False, "learned"),
  }
  assert set(ARCHS) == set(expected)
  for arch, (width, steps, ln, block_pos, position) in expected.items():
    _, c = official_config(arch)
    enc = c.model.encoder
    assert (c.model.d_model, enc.num_steps, enc.gate_norm, enc.pos_g2h, enc.pos_h2g,
            enc.position) == (width, steps, ln, block_pos, block_pos, position)
    assert (enc["update"], enc.sentence_gate_norm, enc.dropout_placement, enc.window,
            enc.embed_norm, enc.init_std) == ("async", "after_sigmoid", "before_sentence",
                                              1, True, 0.02)
    model = build_encoder(enc)  # Every field is a field of the encoder.
    assert isinstance(model, SLSTM)
    # The parameter shapes at the real width (no computation).
    x = jnp.zeros((1, 4, width))
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0), x, jnp.ones((1, 4), bool))
    step = shapes["params"]["step"]
    assert ("token_ln" in step) == ln and ("sent_go_ln" in step) == ln
    assert ("block_pos_embedding" in step) == block_pos
    assert ("pos_embedding" in shapes["params"]) == (position == "learned")
  with pytest.raises(ValueError, match="slstm1792_ln_posinput"):
    official_config("slstm2048")


def test_bad_options_name_the_field_and_choices():
  x, mask, *_ = _setup(SLSTM(num_steps=1), seed=0)
  for field, value in (("sentence_gate_norm", "middle"), ("dropout_placement", "never"),
                       ("update", "later"), ("position", "rotary")):
    with pytest.raises(ValueError, match=field):
      jax.eval_shape(SLSTM(**{field: value}).init, jax.random.PRNGKey(0), x, mask)
  with pytest.raises(ValueError, match="pos_g2h"):
    jax.eval_shape(SLSTM(position="none", pos_g2h=True, max_len=4).init,
                   jax.random.PRNGKey(0), x, mask)
