"""S-LSTM: the graph recurrent network of "Pre-Training a Graph Recurrent Network for Language
Representation" (Wang et al., 2022; Eq. 1-2), after the sentence-state LSTM of Zhang et al. (2018).

Every token i is a node with hidden/cell states (h_i, c_i); one extra sentence node keeps
(g, c_g). At each recurrent step every token node reads its neighbours within a window k, its
own input x_i and the sentence node; the sentence node reads all token nodes. **One set of
parameters serves every step** (an ``nn.scan`` with broadcast parameters), so depth costs time
but no parameters, and the cost per step is O(L D^2): linear in the length.

Token node (Eq. 1), with xi_i = [sum_{s=1..k} h_{i-s} ; h_i ; sum_{s=1..k} h_{i+s}]:

  z_q = LN_q(W_q xi_i + U_q x_i + V_q g + b_q)         q in {i, l, r, f, s, o, u}
  (i, l, r, f, s) = softmax over the five gates of sigmoid(z_q), per unit
  o = sigmoid(z_o),  u = tanh(z_u)
  c_i' = l * sum_s c_{i-s} + f * c_i + r * sum_s c_{i+s} + s * c_g + i * u
  h_i' = o * tanh(c_i')

Sentence node (Eq. 2), h_bar = mean of the real h_i:

  f_i = sigmoid(LN(W_f g + U_f h_i + b_f)),  f_g = sigmoid(LN(W_g g + U_g h_bar + b_g)),
  o_g = sigmoid(LN(W_o g + U_o h_bar + b_o))
  (f_1..f_n, f_g) = softmax over the real tokens and the sentence node, per unit
  c_g' = f_g * c_g + sum_i f_i * c_i,  g' = o_g * tanh(c_g')

The authors' code (ylwangy/slstm_pytorch) differs in options, all selectable here:

* ``sentence_gate_norm='after_sigmoid'``: f_g = LN(sigmoid(z_f)), o_g = LN(sigmoid(z_o)) (the
  normalised f_g is a softmax logit as it is; o_g may be negative); only f_i is LN before the
  sigmoid. ``'before_sigmoid'`` (default) is Eq. 2 as printed.
* ``gate_norm=False``: no LayerNorm on any gate (the registered ``slstm``, ``slstm1280``,
  ``slstm1792`` architectures).
* ``pos_g2h``: a learned in-block position table added to the s-gate pre-activation (after
  its LayerNorm); ``pos_h2g``: the same table added to h_i in the input of the f_i gates.
* ``update='async'``: g^t from the new token states (h^t, c^t); ``'sync'`` (default) is Eq. 2.
* ``dropout_placement='before_sentence'``: the new h is dropped as soon as it is computed, so
  the sentence node (async) reads the dropped h.

``update='sync'`` (the paper) computes the sentence node from the step t-1 token states;
``update='async'`` (the authors' PyTorch code) from the new ones (h^t, c^t). For k = 1 the
neighbour sums are exactly the concatenation of Eq. 1; for k > 1 they follow the authors' code.

Initial states (the authors' code; the paper does not say): h^0 = c^0 = x (after the embedding
LayerNorm), g^0 = c_g^0 = mean of the real x_i. Padding is exact: pads hold zero states, so they
add nothing to the neighbour sums or the mean, and they are removed from the sentence softmax.
"""
from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from longtext_jax.encoders.base import EncoderOutput, encoder_output, check_encoder_inputs
from longtext_jax.layers.partitioning import constrain, dense_inits, named, norm_inits
from longtext_jax.layers.pooling import masked_mean
from longtext_jax.layers.remat import remat_policy

Array = jax.Array

# Order of the seven token gates in the fused projections (and in the LayerNorm params).
TOKEN_GATES = ("i", "l", "r", "f", "s", "o", "u")
# Order of the two sentence-node gates computed from (g, h_bar).
SENTENCE_GATES = ("f_g", "o_g")
UPDATES = ("sync", "async")
SENTENCE_GATE_NORMS = ("before_sigmoid", "after_sigmoid")
DROPOUT_PLACEMENTS = ("after_sentence", "before_sentence")
POSITIONS = ("learned", "sinusoidal", "none")


def neighbour_sums(x_BLD: Array, window: int) -> tuple[Array, Array]:
  """(sum_{s=1..k} x_{i-s}, sum_{s=1..k} x_{i+s}), zero beyond the sequence ends.

  Args:
    x_BLD: float[B, L, D] states (zero at pads, so pads add nothing).
    window: k >= 1.

  Returns:
    (left_BLD, right_BLD).
  """
  length = x_BLD.shape[1]
  left_BLD = jnp.zeros_like(x_BLD)
  right_BLD = jnp.zeros_like(x_BLD)
  for s in range(1, min(window, length - 1) + 1):
    pad = jnp.zeros_like(x_BLD[:, :s])
    left_BLD = left_BLD + jnp.concatenate([pad, x_BLD[:, :-s]], axis=1)
    right_BLD = right_BLD + jnp.concatenate([x_BLD[:, s:], pad], axis=1)
  return left_BLD, right_BLD


def sinusoidal_positions(length: int, d_model: int) -> np.ndarray:
  """float32[L, D] fixed sin/cos position table (Vaswani et al., 2017)."""
  pos_L1 = np.arange(length, dtype=np.float64)[:, None]
  inv_freq = 1.0 / (10000.0 ** (np.arange(0, d_model, 2, dtype=np.float64) / d_model))
  table = np.zeros((length, d_model))
  table[:, 0::2] = np.sin(pos_L1 * inv_freq)
  table[:, 1::2] = np.cos(pos_L1 * inv_freq)[:, :d_model // 2]
  return table.astype(np.float32)


def _ln_forward(z, scale, bias, eps):
  mean = jnp.mean(z, axis=-1, keepdims=True)
  var = jnp.maximum(jnp.mean(z * z, axis=-1, keepdims=True) - mean * mean, 0.0)
  rstd = jax.lax.rsqrt(var + eps)
  zhat = (z - mean) * rstd
  lead = (1,) * (z.ndim - scale.ndim)
  return zhat * scale.reshape(lead + scale.shape) + bias.reshape(lead + bias.shape), (zhat, rstd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _layer_norm(z: Array, scale: Array, bias: Array, eps: float) -> Array:
  """float32 LayerNorm over the last axis with a hand-written backward pass."""
  return _ln_forward(z, scale, bias, eps)[0]


def _layer_norm_fwd(z, scale, bias, eps):
  y, (zhat, rstd) = _ln_forward(z, scale, bias, eps)
  return y, (zhat, rstd, scale)


def _layer_norm_bwd(eps, res, g):
  # dz = rstd * (g' - mean(g') - zhat * mean(g' zhat)), g' = g * scale: two row reductions,
  # where autodiff of mean/var/rsqrt makes XLA:CPU run several reductions and divisions.
  # The parameter gradients reduce over every leading (batch, length) axis; left to XLA:CPU
  # that reduction is fused with the broadcast rsqrt and runs several times slower than a
  # plain reduction of a materialised array (profile in docs/benchmarks.md), hence the
  # barrier. Same values as autodiff of _ln_forward, to rounding.
  del eps
  zhat, rstd, scale = res
  lead = tuple(range(zhat.ndim - scale.ndim))
  gs = g * scale.reshape((1,) * len(lead) + scale.shape)
  dz = rstd * (gs - jnp.mean(gs, axis=-1, keepdims=True)
               - zhat * jnp.mean(gs * zhat, axis=-1, keepdims=True))
  gz, g = jax.lax.optimization_barrier((g * zhat, g))
  return dz, jnp.sum(gz, axis=lead), jnp.sum(g, axis=lead)


_layer_norm.defvjp(_layer_norm_fwd, _layer_norm_bwd)


def layer_norm(z: Array, scale: Array | None, bias: Array | None, eps: float = 1e-5) -> Array:
  """LayerNorm over the last axis in float32 (``nn.LayerNorm``'s formula: variance as
  E[z^2] - E[z]^2, clipped at 0), with a backward pass written for XLA:CPU.

  Args:
    z: float[..., D] pre-activations.
    scale, bias: float[..., D] (the trailing shape of ``z``; broadcast over its leading
      axes), or None for the identity (no gate LayerNorm).
    eps: added to the variance.

  Returns:
    float32 array of the shape of ``z``.
  """
  z = z.astype(jnp.float32)
  if scale is None:
    return z
  return _layer_norm(z, scale, bias, eps)


def token_cell(z_BLQD: Array, scale_QD: Array | None, bias_QD: Array | None,
               pos_LD: Array | None, c_BLD: Array, cg_BD: Array, mask_BL: Array,
               window: int) -> tuple[Array, Array]:
  """The elementwise part of Eq. 1: gate LayerNorms, gates, new cells and hidden states.

  A pure function of the gate pre-activations, so that :class:`SLSTMStep` can
  rematerialise it in the backward pass (it keeps z and c instead of the ~30 gate-sized
  intermediates the backward pass would otherwise store and read back).

  Args:
    z_BLQD: float32[B, L, 7, D] pre-activations W xi + V g + b + U x of the gates
      ``TOKEN_GATES``.
    scale_QD, bias_QD: float[7, D] per-gate LayerNorm parameters (None: no LayerNorm).
    pos_LD: float32[L, D] in-block positions added to the s gate after its LayerNorm
      (``pos_g2h``), or None.
    c_BLD: float32[B, L, D] cells of step t-1 (0 at pads).
    cg_BD: float32[B, D] sentence cell of step t-1.
    mask_BL: bool[B, L], True on real tokens.
    window: neighbour window k.

  Returns:
    ``(h_BLD, c_BLD)`` of step t, float32, 0 at pads.
  """
  num_q = len(TOKEN_GATES)
  z_BLQD = layer_norm(z_BLQD, scale_QD, bias_QD)
  cl_BLD, cr_BLD = neighbour_sums(c_BLD, window)
  # One split into the seven gates (its transpose is one concatenate; indexing the gate axis
  # gate by gate makes a much slower backward pass on CPU).
  z_i, z_l, z_r, z_f, z_s, z_o, z_u = (
      z[..., 0, :] for z in jnp.split(z_BLQD, num_q, axis=-2))
  if pos_LD is not None:  # Authors' code: added after the gate's LayerNorm, before the sigmoid.
    z_s = z_s + pos_LD[None]
  # Softmax over the five sigmoid gates, per unit. Its inputs lie in (0, 1), so exp cannot
  # overflow and no max-subtraction is needed; written out elementwise (no reduction over
  # the gate axis).
  e_i, e_l, e_r, e_f, e_s = (jnp.exp(jax.nn.sigmoid(z)) for z in (z_i, z_l, z_r, z_f, z_s))
  inv_BLD = 1.0 / (e_i + e_l + e_r + e_f + e_s)
  i_g, l_g, r_g, f_g, s_g = (e * inv_BLD for e in (e_i, e_l, e_r, e_f, e_s))
  o_BLD = jax.nn.sigmoid(z_o)
  u_BLD = jnp.tanh(z_u)
  new_c_BLD = (l_g * cl_BLD + f_g * c_BLD + r_g * cr_BLD + s_g * cg_BD[:, None]
               + i_g * u_BLD)
  new_h_BLD = o_BLD * jnp.tanh(new_c_BLD)
  real_BL1 = mask_BL[..., None]
  return jnp.where(real_BL1, new_h_BLD, 0), jnp.where(real_BL1, new_c_BLD, 0)


def sentence_cell(zf_BLD: Array, zg_BQD: Array, f_norm: tuple | None, go_norm: tuple | None,
                  after_sigmoid: bool, c_BLD: Array, cg_BD: Array, mask_BL: Array
                  ) -> tuple[Array, Array]:
  """The elementwise part of Eq. 2: gates f_i, f_g, o_g, the softmax over the real tokens
  and the sentence node, the new sentence cell and state. Pure (rematerialised like
  :func:`token_cell`).

  Args:
    zf_BLD: float[B, L, D] pre-activations W_f g + U_f h_i + b_f of the token forget gates.
    zg_BQD: float[B, 2, D] pre-activations of (f_g, o_g).
    f_norm: (scale_D, bias_D) of the f_i LayerNorm, or None (no gate LayerNorm).
    go_norm: (scale_QD, bias_QD) of the (f_g, o_g) LayerNorm, or None.
    after_sigmoid: LN(sigmoid(z)) for f_g, o_g (authors' code) instead of sigmoid(LN(z)).
    c_BLD: float32[B, L, D] token cells read by the sentence node (0 at pads).
    cg_BD: float32[B, D] sentence cell of step t-1.
    mask_BL: bool[B, L], True on real tokens.

  Returns:
    ``(g_BD, cg_BD)`` of step t, float32.
  """
  num_q = len(SENTENCE_GATES)
  real_BL1 = mask_BL[..., None]
  f_BLD = jax.nn.sigmoid(layer_norm(zf_BLD, *(f_norm or (None, None))))
  if after_sigmoid:  # Authors' code: LN(sigmoid(z)); f_g is then any real logit, o_g may be < 0.
    go_BQD = layer_norm(jax.nn.sigmoid(zg_BQD.astype(jnp.float32)), *(go_norm or (None, None)))
  else:  # Eq. 2: sigmoid(LN(z)).
    go_BQD = jax.nn.sigmoid(layer_norm(zg_BQD, *(go_norm or (None, None))))
  fg_BD, og_BD = (z[:, 0] for z in jnp.split(go_BQD, num_q, axis=1))
  # Softmax over {f_1..f_n (real tokens only), f_g} per unit. The f_i are sigmoids but f_g
  # may be a LayerNorm output, so the maximum is subtracted (a constant: no gradient).
  max_BD = jax.lax.stop_gradient(jnp.maximum(
      fg_BD, jnp.max(jnp.where(real_BL1, f_BLD, fg_BD[:, None]), axis=1)))
  ef_BLD = jnp.where(real_BL1, jnp.exp(f_BLD - max_BD[:, None]), 0)
  eg_BD = jnp.exp(fg_BD - max_BD)
  denom_BD = eg_BD + jnp.sum(ef_BLD, axis=1)
  new_cg_BD = (eg_BD * cg_BD + jnp.sum(ef_BLD * c_BLD, axis=1)) / denom_BD
  return og_BD * jnp.tanh(new_cg_BD), new_cg_BD


class NormParams(nn.Module):
  """The scale and bias that ``nn.LayerNorm`` would create under this name (same names,
  shapes, initialisers and logical axes, so parameter trees and checkpoints are unchanged),
  returned instead of applied: the normalisation itself runs inside the rematerialised
  :func:`token_cell` / :func:`sentence_cell`.

  Attributes:
    shape: feature shape, e.g. (7, D) or (D,).
    axes: logical axis names of ``shape``.
    param_dtype: parameter dtype.
  """
  shape: tuple[int, ...]
  axes: tuple[str, ...]
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self) -> tuple[Array, Array]:
    """Returns ``(scale, bias)`` as float32 arrays of ``shape``."""
    inits = norm_inits(self.axes)
    scale = self.param("scale", inits["scale_init"], self.shape, self.param_dtype)
    bias = self.param("bias", inits["bias_init"], self.shape, self.param_dtype)
    return scale.astype(jnp.float32), bias.astype(jnp.float32)


class SLSTMStep(nn.Module):
  """One recurrent step of Eq. 1-2. Scanned with broadcast parameters by :class:`SLSTM`.

  Called as ``step(carry, ux_BLQD, mask_BL)`` with ``carry = (h_BLD, c_BLD, g_BD, cg_BD)``
  and ``ux_BLQD = U x`` (the input term of the seven token gates, computed once before the
  recurrence); returns ``(new_carry, None)``. The attributes are those of :class:`SLSTM`.

  Speed: each update is one matmul (all seven token gates at once, from [h_{i-k..i-1};
  h_i; h_{i+1..i+k}]) plus small ones from g; everything elementwise after it (LayerNorms,
  gates, cells, the sentence softmax) is a pure function under ``jax.checkpoint``, so the
  backward pass keeps only the gate pre-activations and recomputes the rest in a few fused
  loops (docs/benchmarks.md, "Recurrent backward passes").
  """
  window: int = 1
  update: str = "sync"
  gate_norm: bool = True
  sentence_gate_norm: str = "before_sigmoid"
  pos_g2h: bool = False
  pos_h2g: bool = False
  max_len: int = 4096
  dropout_rate: float = 0.0
  dropout_placement: str = "after_sentence"
  deterministic: bool = True
  init_std: float = 0.02
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def _dense(self, features, name, use_bias=True):
    out_axes = ("gates", "hidden") if isinstance(features, tuple) else ("hidden",)
    return nn.DenseGeneral(features, use_bias=use_bias, dtype=self.dtype,
                           param_dtype=self.param_dtype, name=name,
                           **dense_inits(("embed",) + out_axes, out_axes,
                                         nn.initializers.normal(self.init_std)))

  def _norm_params(self, name, shape):
    """(scale, bias) of the gate LayerNorm ``name``, or None when ``gate_norm`` is off."""
    if not self.gate_norm:
      return None
    axes = ("gates", "hidden") if len(shape) == 2 else ("hidden",)
    return NormParams(shape, axes, self.param_dtype, name=name)()

  def token_update(self, h_BLD, c_BLD, g_BD, cg_BD, ux_BLQD, mask_BL, pos_LD):
    """Eq. 1: new (h, c) of every token node, zero at pads."""
    num_q, d_model = len(TOKEN_GATES), h_BLD.shape[-1]
    hl_BLD, hr_BLD = neighbour_sums(h_BLD, self.window)
    xi_BL3D = jnp.concatenate([hl_BLD, h_BLD, hr_BLD], axis=-1)
    z_BLQD = self._dense((num_q, d_model), "token_w")(xi_BL3D)  # W xi + b
    z_BLQD = z_BLQD + self._dense((num_q, d_model), "token_v", use_bias=False)(g_BD)[:, None]
    z_BLQD = z_BLQD.astype(jnp.float32) + ux_BLQD
    norm = self._norm_params("token_ln", (num_q, d_model)) or (None, None)
    cell = jax.checkpoint(token_cell, static_argnums=(7,), prevent_cse=False)
    new_h_BLD, new_c_BLD = cell(z_BLQD, *norm, pos_LD if self.pos_g2h else None,
                                c_BLD.astype(jnp.float32), cg_BD.astype(jnp.float32),
                                mask_BL, self.window)
    return new_h_BLD.astype(h_BLD.dtype), new_c_BLD.astype(c_BLD.dtype)

  def sentence_update(self, h_BLD, c_BLD, g_BD, cg_BD, mask_BL, pos_LD):
    """Eq. 2: new (g, c_g) from the token states (h, c) given and the previous (g, c_g)."""
    d_model = h_BLD.shape[-1]
    num_q = len(SENTENCE_GATES)
    hbar_BD = masked_mean(h_BLD, mask_BL)
    # Token forget gates f_i: W_f g + U_f h_i + b_f (h_i + position with pos_h2g).
    hf_BLD = h_BLD + pos_LD[None].astype(h_BLD.dtype) if self.pos_h2g else h_BLD
    zf_BLD = (self._dense(d_model, "sent_f_u")(hf_BLD)
              + self._dense(d_model, "sent_f_w", use_bias=False)(g_BD)[:, None])
    f_norm = self._norm_params("sent_f_ln", (d_model,))
    # Sentence forget gate f_g and output gate o_g: W g + U h_bar + b.
    zg_BQD = (self._dense((num_q, d_model), "sent_go_w")(g_BD)
              + self._dense((num_q, d_model), "sent_go_u", use_bias=False)(hbar_BD))
    go_norm = self._norm_params("sent_go_ln", (num_q, d_model))
    cell = jax.checkpoint(sentence_cell, static_argnums=(4,), prevent_cse=False)
    new_g_BD, new_cg_BD = cell(zf_BLD, zg_BQD, f_norm, go_norm,
                               self.sentence_gate_norm == "after_sigmoid",
                               c_BLD.astype(jnp.float32), cg_BD.astype(jnp.float32), mask_BL)
    return new_g_BD.astype(g_BD.dtype), new_cg_BD.astype(cg_BD.dtype)

  @nn.compact
  def __call__(self, carry, ux_BLQD, mask_BL):
    h_BLD, c_BLD, g_BD, cg_BD = carry
    h_BLD, c_BLD = constrain(h_BLD), constrain(c_BLD)
    g_BD, cg_BD = constrain(g_BD, ("batch", "embed")), constrain(cg_BD, ("batch", "embed"))
    length, d_model = h_BLD.shape[1:]
    pos_LD = None
    if self.pos_g2h or self.pos_h2g:
      pos_LD = self.param("block_pos_embedding",
                          named(nn.initializers.normal(self.init_std), ("position", "embed")),
                          (self.max_len, d_model), self.param_dtype)[:length]
      pos_LD = pos_LD.astype(jnp.float32)
    new_h_BLD, new_c_BLD = self.token_update(h_BLD, c_BLD, g_BD, cg_BD, ux_BLQD, mask_BL,
                                             pos_LD)
    # Dropout on the hidden states passed on (the cells are kept intact), as the authors do;
    # one module, called on h then on g, in both placements.
    drop = nn.Dropout(self.dropout_rate)
    if self.dropout_placement == "before_sentence":  # The authors' code.
      new_h_BLD = drop(new_h_BLD, deterministic=self.deterministic)
    if self.update == "sync":
      new_g_BD, new_cg_BD = self.sentence_update(h_BLD, c_BLD, g_BD, cg_BD, mask_BL, pos_LD)
    else:
      new_g_BD, new_cg_BD = self.sentence_update(new_h_BLD, new_c_BLD, g_BD, cg_BD, mask_BL,
                                                 pos_LD)
    if self.dropout_placement == "after_sentence":
      new_h_BLD = drop(new_h_BLD, deterministic=self.deterministic)
    new_g_BD = drop(new_g_BD, deterministic=self.deterministic)
    return (new_h_BLD, new_c_BLD, new_g_BD, new_cg_BD), None


class SLSTM(nn.Module):
  """Graph recurrent network (S-LSTM) encoder; ``pooled`` is the sentence node g.

  ``configs/slstm/official.py:<arch>`` sets every field for each architecture registered in
  the authors' code; docs/slstm.md compares paper, authors' code and defaults field by field.

  Attributes:
    num_steps: recurrent steps T (the paper's "layers"); all share one parameter set.
    window: neighbour window k (k tokens each side; default 1 as in the paper).
    update: 'sync' (paper Eq. 2: g^t from the step t-1 token states) or 'async' (authors'
      code: g^t from the new h^t, c^t).
    gate_norm: LayerNorm on the gates (paper Eq. 1-2; the authors' ``ln``). False: no gate
      LayerNorm at all (the authors' ``slstm``, ``slstm1280``, ``slstm1792``).
    sentence_gate_norm: where that LayerNorm sits on the sentence gates f_g, o_g:
      'before_sigmoid' (paper Eq. 2, sigmoid(LN(z))) or 'after_sigmoid' (authors' code,
      LN(sigmoid(z))). The token forget gates f_i are LN before the sigmoid in both.
    pos_g2h: add a learned in-block position table (``max_len`` rows) to the pre-activation
      of every token's s gate (authors' code, after that gate's LayerNorm).
    pos_h2g: add the same in-block table to h_i in the input of the sentence node's f_i
      gates (authors' code).
    position: position embedding added to the input: 'learned' (table of ``max_len``, the
      paper), 'sinusoidal' or 'none'.
    max_len: size of the learned position tables; longer inputs raise an error.
    embed_norm: LayerNorm on x + position embedding before the recurrence (authors' code).
    dropout_rate: dropout on the input and on h and g at every step (the cells are intact).
    dropout_placement: 'after_sentence' (h dropped at the end of the step, after the
      sentence node has read it) or 'before_sentence' (authors' code: h dropped as soon as
      computed, so with ``update='async'`` the sentence node reads the dropped h; identical
      to 'after_sentence' with ``update='sync'``).
    init_std: std of the normal initialiser of every projection (authors: 0.02).
    scan_steps: run steps 1..T-1 through ``nn.scan`` (one compiled step) and step T after
      it, outside the scan, so that a caller of ``pooled`` alone skips step T's dead token
      update (``update='sync'``); False unrolls a Python loop over the same shared step
      module (same parameters, same results).
    remat: 'none' or a policy name of ``longtext_jax.layers.remat.REMAT_POLICIES``, applied
      to each step.
    dtype: compute dtype of the projections; LayerNorms, gates and softmaxes run in float32.
    param_dtype: parameter dtype.
  """
  input_kind = "embeddings"  # Called as encoder(x_BLD, mask_BL) (encoders/base.py).
  num_steps: int = 4
  window: int = 1
  update: str = "sync"
  gate_norm: bool = True
  sentence_gate_norm: str = "before_sigmoid"
  pos_g2h: bool = False
  pos_h2g: bool = False
  position: str = "learned"
  max_len: int = 4096
  embed_norm: bool = True
  dropout_rate: float = 0.0
  dropout_placement: str = "after_sentence"
  init_std: float = 0.02
  scan_steps: bool = True
  remat: str = "none"
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def _check(self, length: int):
    choices = (("update", UPDATES), ("position", POSITIONS),
               ("sentence_gate_norm", SENTENCE_GATE_NORMS),
               ("dropout_placement", DROPOUT_PLACEMENTS))
    for field, valid in choices:
      if getattr(self, field) not in valid:
        raise ValueError(f"SLSTM.{field} must be one of {valid}, got "
                         f"{getattr(self, field)!r}")
    if self.window < 1:
      raise ValueError(f"SLSTM.window must be >= 1, got {self.window}")
    if self.num_steps < 1:
      raise ValueError(f"SLSTM.num_steps must be >= 1, got {self.num_steps}")
    tables = ((self.position == "learned" and "position='learned'"),
              (self.pos_g2h and "pos_g2h"), (self.pos_h2g and "pos_h2g"))
    used = [t for t in tables if t]
    if used and length > self.max_len:
      raise ValueError(f"SLSTM: length {length} exceeds max_len={self.max_len} of the "
                       f"learned position table ({', '.join(used)})")

  @nn.compact
  def __call__(self, x_BLD: Array, mask_BL: Array, deterministic: bool = True
               ) -> EncoderOutput:
    """Encodes a batch.

    Args:
      x_BLD: float[B, L, D] token embeddings.
      mask_BL: bool[B, L], True on real tokens.
      deterministic: no dropout when True.

    Returns:
      ``EncoderOutput(sequence=h_BLD (0 at pads), pooled=g_BD)``.
    """
    check_encoder_inputs(x_BLD, mask_BL, "SLSTM")
    _, length, d_model = x_BLD.shape
    self._check(length)
    if self.position == "learned":
      pos_LD = self.param("pos_embedding", named(nn.initializers.normal(self.init_std),
                                                 ("position", "embed")),
                          (self.max_len, d_model), self.param_dtype)[:length]
      x_BLD = x_BLD + pos_LD[None].astype(x_BLD.dtype)
    elif self.position == "sinusoidal":
      x_BLD = x_BLD + jnp.asarray(sinusoidal_positions(length, d_model), x_BLD.dtype)[None]
    if self.embed_norm:
      x_BLD = nn.LayerNorm(epsilon=1e-5, dtype=jnp.float32, param_dtype=self.param_dtype,
                           name="embed_ln", **norm_inits())(x_BLD)
    x_BLD = nn.Dropout(self.dropout_rate)(x_BLD, deterministic=deterministic)
    x_BLD = jnp.where(mask_BL[..., None], x_BLD, 0).astype(self.dtype)

    # The input term U x of the seven token gates does not change over the steps.
    ux_BLQD = nn.DenseGeneral((len(TOKEN_GATES), d_model), use_bias=False, dtype=self.dtype,
                              param_dtype=self.param_dtype,
                              kernel_init=named(nn.initializers.normal(self.init_std),
                                                ("embed", "gates", "hidden")),
                              name="input_u")(x_BLD).astype(jnp.float32)
    g_BD = masked_mean(x_BLD, mask_BL)
    # Hidden states in the compute dtype; memory cells always in float32.
    carry = (x_BLD, x_BLD.astype(jnp.float32), g_BD, g_BD.astype(jnp.float32))

    step_cls = SLSTMStep
    if self.remat != "none":
      step_cls = nn.remat(step_cls, policy=remat_policy(self.remat),
                          prevent_cse=not self.scan_steps)
    kwargs = dict(window=self.window, update=self.update, gate_norm=self.gate_norm,
                  sentence_gate_norm=self.sentence_gate_norm, pos_g2h=self.pos_g2h,
                  pos_h2g=self.pos_h2g, max_len=self.max_len, dropout_rate=self.dropout_rate,
                  dropout_placement=self.dropout_placement, deterministic=deterministic,
                  init_std=self.init_std, dtype=self.dtype, param_dtype=self.param_dtype)
    step = step_cls(name="step", **kwargs)
    if self.scan_steps:
      # Steps 1..T-1 scanned, step T outside the scan (same module, same parameters). With
      # update='sync', g^T reads only the step T-1 states, so a caller that uses only
      # ``pooled`` (classification and regression heads) leaves step T's token update dead
      # and XLA drops it, forward and backward: one token update in T fewer, the bulk of a
      # step's work. Inside a scan every step's token update would run.
      if self.num_steps > 1:
        steps = nn.scan(lambda mdl, c, ux, m: mdl(c, ux, m), variable_broadcast="params",
                        split_rngs={"params": False, "dropout": True},
                        in_axes=(nn.broadcast, nn.broadcast), length=self.num_steps - 1)
        carry, _ = steps(step, carry, ux_BLQD, mask_BL)
      carry, _ = step(carry, ux_BLQD, mask_BL)
    else:
      for _ in range(self.num_steps):
        carry, _ = step(carry, ux_BLQD, mask_BL)
    h_BLD, _, g_BD, _ = carry
    h_BLD = constrain(jnp.where(mask_BL[..., None], h_BLD, 0))
    g_BD = jnp.where(jnp.any(mask_BL, axis=-1, keepdims=True), g_BD, 0)
    return encoder_output(h_BLD, g_BD)
