"""Star-Transformer (Guo et al., NAACL 2019): satellites on a ring plus one relay node.

Each cycle t (Algorithm 1 of the paper) updates

* every satellite i with multi-head attention from its previous state over the 5-vector
  context ``C_i = [h_{i-1}; h_i; h_{i+1}; e_i; s]`` (ring neighbours, itself, its token
  embedding, the relay), then ``LayerNorm(ReLU(.))``;
* the relay with attention from its previous state over ``[s; H]`` (pads masked), then
  ``LayerNorm(ReLU(.))``.

The 5-key satellite attention is built from shifted copies of the projected keys and values
(no gather, no L x L mask), so a cycle costs O(L D) time and memory.

Padding is exact: pads are never a neighbour (see ``ends``), never a key of the relay, never
part of the initial relay mean, and their satellite states are 0 after every cycle. The
authors' code (see ``shared/reference/official-implementations.md`` section 2) leaks pads
into both; this module does not, in either ordering.
"""
from __future__ import annotations

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax.encoders.base import EncoderOutput, encoder_output, check_encoder_inputs
from longtext_jax.encoders.slstm import NormParams, layer_norm
from longtext_jax.layers.mlp import Mlp
from longtext_jax.layers.partitioning import constrain, dense_inits, named
from longtext_jax.layers.pooling import masked_max, masked_mean
from longtext_jax.layers.remat import remat_policy

Array = jax.Array

ENDS = ("ring", "zero", "masked")
ORDERINGS = ("paper", "official")
DROPOUT_PLACEMENTS = ("embeddings_and_updates", "embeddings")
POOLINGS = ("relay", "max", "mean", "relay_plus_max", "relay_max_mean",
            "relay_max_concat_proj")
# Up to this many cycles run without a loop by default (StarTransformer.scan_unroll=None);
# measured faster at 2-4 cycles on a CPU (docs/benchmarks.md).
MAX_FULL_UNROLL = 4


def shift_right(x_BL: Array, fill: Any = 0) -> Array:
  """out[:, i] = x[:, i - 1] (the left neighbour), out[:, 0] = fill. Any trailing axes."""
  pad = [(0, 0), (1, 0)] + [(0, 0)] * (x_BL.ndim - 2)
  return jnp.pad(x_BL[:, :-1], pad, constant_values=fill)


def shift_left(x_BL: Array, fill: Any = 0) -> Array:
  """out[:, i] = x[:, i + 1] (the right neighbour), out[:, L - 1] = fill."""
  pad = [(0, 0), (0, 1)] + [(0, 0)] * (x_BL.ndim - 2)
  return jnp.pad(x_BL[:, 1:], pad, constant_values=fill)


def neighbour_slots(x_BLHK: Array, mask_BL: Array, ends: str
                    ) -> tuple[Array, Array, Array, Array]:
  """Left and right ring neighbours of every position, from shifted arrays.

  Args:
    x_BLHK: projected keys or values of the satellites, [B, L, ...].
    mask_BL: bool, True on real tokens (a prefix of each row).
    ends: 'ring': the first real token's left neighbour is the last real token and vice
      versa (the paper's figure); 'zero': a neighbour beyond either end (or on a pad) is a
      zero key and zero value that still takes part in the softmax (the authors' code);
      'masked': such a neighbour is left out of the softmax.

  Returns:
    (left, right, left_valid_BL, right_valid_BL). Slots of pad queries are arbitrary.
  """
  if ends not in ENDS:
    raise ValueError(f"StarTransformer.ends must be one of {ENDS}, got {ends!r}")
  length = x_BLHK.shape[1]
  trail = (1,) * (x_BLHK.ndim - 2)
  m_BL = mask_BL.reshape(mask_BL.shape + trail)
  if ends == "zero":
    # A neighbour on a pad must be a zero key/value. With 'ring' and 'masked' a real
    # token's neighbour slot never reads a pad (the ring wraps at the last real token;
    # 'masked' marks the slot invalid), so those skip this pass over the array.
    x_BLHK = jnp.where(m_BL, x_BLHK, 0)
  left, right = shift_right(x_BLHK), shift_left(x_BLHK)
  all_valid_BL = jnp.ones(mask_BL.shape, jnp.bool_)
  if ends == "zero":
    return left, right, all_valid_BL, all_valid_BL
  if ends == "masked":
    return left, right, shift_right(mask_BL, False), shift_left(mask_BL, False)
  # Ring: wrap around between the first and the last REAL token of each row.
  last_B = jnp.maximum(jnp.sum(mask_BL, axis=-1).astype(jnp.int32) - 1, 0)
  last_BHK = jnp.take_along_axis(
      x_BLHK, last_B.reshape((-1, 1) + trail), axis=1)[:, 0]
  pos_BL = jnp.arange(length)[None, :]
  is_first_BL = (pos_BL == 0).reshape((1, length) + trail)
  is_last_BL = (pos_BL == last_B[:, None]).reshape(mask_BL.shape + trail)
  left = jnp.where(is_first_BL, last_BHK[:, None], left)
  right = jnp.where(is_last_BL, x_BLHK[:, :1], right)
  return left, right, all_valid_BL, all_valid_BL


class HeadProjections(nn.Module):
  """q/k/v projections D -> [H, K] (with bias) and the output projection [H, K] -> D."""
  num_heads: int
  head_dim: int
  d_model: int
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  def setup(self):
    """Builds the q/k/v projections and the output projection."""
    init = nn.initializers.xavier_uniform()
    proj = lambda: nn.DenseGeneral((self.num_heads, self.head_dim), dtype=self.dtype,
                                   param_dtype=self.param_dtype,
                                   **dense_inits(("embed", "heads", "kv"), ("heads", "kv"),
                                                 init))
    self.query, self.key, self.value = proj(), proj(), proj()
    self.out = nn.DenseGeneral(self.d_model, axis=(-2, -1), dtype=self.dtype,
                               param_dtype=self.param_dtype,
                               **dense_inits(("heads", "kv", "embed"), ("embed",), init))

  def __call__(self, x_BLHK: Array) -> Array:
    """The output projection [..., H, K] -> [..., D]."""
    return self.out(x_BLHK)

  def kernel_and_bias(self, name: str) -> tuple[Array, Array]:
    """(kernel [D, H, K], bias [H, K]) of the 'key' or 'value' projection, in ``dtype``.

    The projection must have been called once (so that its parameters exist at init).
    """
    params = nn.meta.unbox(getattr(self, name).variables["params"])
    return params["kernel"].astype(self.dtype), params["bias"].astype(self.dtype)


def _context(k_BLHK, v_BLHK, ke_BLHK, ve_BLHK, ks_BHK, vs_BHK, mask_BL, ends, ring):
  """The satellites' context [h_{i-1}; h_i; h_{i+1}; e_i; s] slot by slot: (keys, values,
  valid flags [B, L]); the relay's slot is [B, 1, H, K] (broadcast over positions)."""
  ones_BL = jnp.ones(mask_BL.shape, jnp.bool_)
  keys, values, valids = [k_BLHK], [v_BLHK], [ones_BL]
  if ring:
    k_left, k_right, left_ok, right_ok = neighbour_slots(k_BLHK, mask_BL, ends)
    v_left, v_right, _, _ = neighbour_slots(v_BLHK, mask_BL, ends)
    keys += [k_left, k_right]
    values += [v_left, v_right]
    valids += [left_ok, right_ok]
  keys.append(ke_BLHK)
  values.append(ve_BLHK)
  valids.append(ones_BL)
  if ks_BHK is not None:
    keys.append(ks_BHK[:, None])
    values.append(vs_BHK[:, None])
    valids.append(ones_BL)
  return keys, values, valids


def _slot_probs(q_BLHK: Array, keys: list, valids: list) -> Array:
  """float32 [B, L, H, S] softmax over the S context slots (invalid slots get 0)."""
  scale = q_BLHK.shape[-1] ** -0.5
  logits_BLHS = jnp.stack(
      [jnp.einsum("blhk,blhk->blh", q_BLHK, jnp.broadcast_to(k, q_BLHK.shape),
                  preferred_element_type=jnp.float32) for k in keys], axis=-1) * scale
  valid_BL1S = jnp.stack(valids, axis=-1)[:, :, None, :]
  logits_BLHS = jnp.where(valid_BL1S, logits_BLHS, jnp.finfo(jnp.float32).min)
  return jax.nn.softmax(logits_BLHS, axis=-1)


def _mix(probs_BLHS: Array, values: list, dtype: Any) -> Array:
  """sum_s p_s v_s, slot by slot (no [B, L, H, K, S] stack of the values)."""
  probs_BLHS = probs_BLHS.astype(dtype)
  out_BLHK = probs_BLHS[..., 0, None] * values[0]
  for slot in range(1, len(values)):
    out_BLHK = out_BLHK + probs_BLHS[..., slot, None] * values[slot]
  return out_BLHK


@functools.partial(jax.custom_vjp, nondiff_argnums=(8, 9))
def satellite_attention(q_BLHK: Array, k_BLHK: Array, v_BLHK: Array, ke_BLHK: Array,
                        ve_BLHK: Array, ks_BHK: Array | None, vs_BHK: Array | None,
                        mask_BL: Array, ends: str, ring: bool) -> Array:
  """Every satellite's attention over its context [h_{i-1}; h_i; h_{i+1}; e_i; s].

  A pure function of the projected queries/keys/values with a hand-written backward pass
  (:func:`_satellite_attention_bwd`): it keeps only the [B, L, H, S] probabilities besides
  its inputs, recomputes the neighbour shifts, and forms the gradients slot by slot, with
  the relay's key/value gradients as contractions over L (dot_generals) rather than sums
  of broadcast products. Same values as autodiff of the forward (the softmax's standard
  VJP), faster on XLA:CPU than autodiff of the rematerialised forward, which ran each
  reduction as a fusion recomputing the softmax (docs/benchmarks.md, "Star-Transformer:
  second change").

  Args:
    q_BLHK, k_BLHK, v_BLHK: the satellites' projected queries, keys and values.
    ke_BLHK, ve_BLHK: keys and values of the token embeddings e_i.
    ks_BHK, vs_BHK: key and value of the relay s, or None (no relay: ``radial=False``).
    mask_BL: bool, True on real tokens.
    ends: ring-neighbour convention (:func:`neighbour_slots`).
    ring: include the ring neighbours h_{i-1}, h_{i+1}.

  Returns:
    [B, L, H, K] attention outputs (arbitrary at pads).
  """
  keys, values, valids = _context(k_BLHK, v_BLHK, ke_BLHK, ve_BLHK, ks_BHK, vs_BHK, mask_BL,
                                  ends, ring)
  return _mix(_slot_probs(q_BLHK, keys, valids), values, q_BLHK.dtype)


def _satellite_attention_fwd(q_BLHK, k_BLHK, v_BLHK, ke_BLHK, ve_BLHK, ks_BHK, vs_BHK,
                             mask_BL, ends, ring):
  keys, values, valids = _context(k_BLHK, v_BLHK, ke_BLHK, ve_BLHK, ks_BHK, vs_BHK, mask_BL,
                                  ends, ring)
  probs_BLHS = _slot_probs(q_BLHK, keys, valids)
  residuals = (q_BLHK, k_BLHK, v_BLHK, ke_BLHK, ve_BLHK, ks_BHK, vs_BHK, mask_BL, probs_BLHS)
  return _mix(probs_BLHS, values, q_BLHK.dtype), residuals


def _satellite_attention_bwd(ends, ring, residuals, g_BLHK):
  q_BLHK, k_BLHK, v_BLHK, ke_BLHK, ve_BLHK, ks_BHK, vs_BHK, mask_BL, p_BLHS = residuals
  keys, values, _ = _context(k_BLHK, v_BLHK, ke_BLHK, ve_BLHK, ks_BHK, vs_BHK, mask_BL,
                             ends, ring)
  f32 = jnp.float32
  g_BLHK = g_BLHK.astype(f32)
  # out = sum_s p_s v_s  =>  dp_s = <g, v_s>, dv_s = p_s g.
  dp_BLHS = jnp.stack([jnp.einsum("blhk,blhk->blh", g_BLHK, jnp.broadcast_to(v, g_BLHK.shape),
                                  preferred_element_type=f32) for v in values], axis=-1)
  # Softmax VJP, then the logits' scale: dlogit_s = scale p_s (dp_s - sum_t p_t dp_t).
  dlogit_BLHS = (p_BLHS * (dp_BLHS - jnp.sum(p_BLHS * dp_BLHS, -1, keepdims=True))
                 * q_BLHK.shape[-1] ** -0.5)
  # logit_s = <q, k_s>  =>  dq = sum_s dlogit_s k_s, dk_s = dlogit_s q.
  dq_BLHK = sum(dlogit_BLHS[..., s, None] * keys[s] for s in range(len(keys)))
  per_token = len(keys) - (ks_BHK is not None)  # Slots that vary with the position.
  dkeys = [dlogit_BLHS[..., s, None] * q_BLHK for s in range(per_token)]
  dvalues = [p_BLHS[..., s, None] * g_BLHK for s in range(per_token)]
  dk_BLHK, dv_BLHK = dkeys[0], dvalues[0]
  e_slot = 1
  if ring:  # The neighbour slots are shifts of k and v: map their gradients back.
    neighbours = lambda x: neighbour_slots(x, mask_BL, ends)[:2]
    _, k_back = jax.vjp(neighbours, k_BLHK)
    _, v_back = jax.vjp(neighbours, v_BLHK)
    dk_BLHK = dk_BLHK + k_back(tuple(d.astype(k_BLHK.dtype) for d in dkeys[1:3]))[0]
    dv_BLHK = dv_BLHK + v_back(tuple(d.astype(v_BLHK.dtype) for d in dvalues[1:3]))[0]
    e_slot = 3
  dks_BHK = dvs_BHK = None
  if ks_BHK is not None:  # The relay's slot is broadcast over L: contract over L.
    dks_BHK = jnp.einsum("blh,blhk->bhk", dlogit_BLHS[..., e_slot + 1], q_BLHK,
                         preferred_element_type=f32).astype(ks_BHK.dtype)
    dvs_BHK = jnp.einsum("blh,blhk->bhk", p_BLHS[..., e_slot + 1], g_BLHK,
                         preferred_element_type=f32).astype(vs_BHK.dtype)
  return (dq_BLHK.astype(q_BLHK.dtype), dk_BLHK.astype(k_BLHK.dtype),
          dv_BLHK.astype(v_BLHK.dtype), dkeys[e_slot].astype(ke_BLHK.dtype),
          dvalues[e_slot].astype(ve_BLHK.dtype), dks_BHK, dvs_BHK, None)


satellite_attention.defvjp(_satellite_attention_fwd, _satellite_attention_bwd)


class StarCycle(nn.Module):
  """One cycle: all satellites, then the relay. Carry (h_BLD, s_BD); returns (carry, None).

  :meth:`step` is the cycle itself; it also takes and returns the embedding slot's keys and
  values, so that a Python loop over cycles can compute them once
  (StarTransformer._cycles_without_loop).
  """
  num_heads: int
  head_dim: int
  ends: str
  ordering: str
  radial: bool
  ring: bool
  ffn_residual: bool
  mlp_dim: int
  dropout_rate: float
  dropout_placement: str
  deterministic: bool
  dtype: Any
  param_dtype: Any

  def __call__(self, carry: tuple[Array, Array], e_BLD: Array, mask_BL: Array):
    """The body of ``nn.scan``: (new carry, None)."""
    return self.step(carry, e_BLD, mask_BL)[0], None

  @nn.compact
  def step(self, carry: tuple[Array, Array], e_BLD: Array, mask_BL: Array,
           embedding_kv: tuple[Array, Array] | None = None):
    """One cycle.

    Args:
      carry: (h_BLD, s_BD), the satellites' and the relay's states.
      e_BLD: the embeddings (the e_i slot's source).
      mask_BL: bool, True on real tokens.
      embedding_kv: the e_i slot's keys and values ``(sat.key(e), sat.value(e))`` when the
        caller has them (cycles sharing their parameters), else None (projected here).

    Returns:
      ((h_BLD, s_BD), (ke_BLHK, ve_BLHK)): the new states and the embedding slot's keys
      and values this cycle used.
    """
    h_BLD, s_BD = carry
    # The first cycle of a loop-free stack gets the embeddings themselves as its states
    # (StarTransformer._cycles_without_loop): then the embedding slot's keys and values are
    # the satellites' own (below).
    states_are_embeddings = h_BLD is e_BLD
    h_BLD, s_BD = constrain(h_BLD), constrain(s_BD, ("batch", "embed"))
    d_model = h_BLD.shape[-1]
    official = self.ordering == "official"
    # nn.LayerNorm's parameters and formula (epsilon 1e-6), with the backward pass of
    # slstm.layer_norm (several times faster on CPU than autodiff's; same values).
    norm = lambda name: lambda x: layer_norm(
        x, *NormParams((d_model,), ("embed",), self.param_dtype, name=name)(), eps=1e-6)
    act = (lambda x: nn.leaky_relu(x, 0.01)) if official else nn.relu
    m_BL1 = mask_BL[..., None]
    # Dropout inside the cycle: on every attention (and FFN) output, or nowhere (the authors'
    # code drops only the embeddings, outside the cycles).
    if self.dropout_placement == "embeddings_and_updates":
      dropout = lambda x: nn.Dropout(self.dropout_rate)(x, deterministic=self.deterministic)
    else:
      dropout = lambda x: x

    # ---- satellites: attention over [h_{i-1}; h_i; h_{i+1}; e_i; s] ----
    sat = HeadProjections(self.num_heads, self.head_dim, d_model, self.dtype,
                          self.param_dtype, name="satellite_attn")
    if official:  # pre-LN: queries and ring contexts read LN(h); pads stay 0.
      src_BLD = jnp.where(m_BL1, norm("satellite_ln")(h_BLD), 0).astype(self.dtype)
    else:
      src_BLD = h_BLD
    q_BLHK = sat.query(src_BLD)
    k_BLHK, v_BLHK = sat.key(src_BLD), sat.value(src_BLD)
    ks_BHK = sat.key(s_BD) if self.radial else None
    vs_BHK = sat.value(s_BD) if self.radial else None
    if embedding_kv is not None:  # The same parameters' projections of e, made once.
      ke_BLHK, ve_BLHK = embedding_kv
    elif states_are_embeddings and not official:
      # h = e: the e_i slot's keys and values are k and v. XLA merged the two equal
      # forward products already; reusing them also sums both slots' gradients before
      # the projections' transposes: 2 matmuls per projection fewer in the backward
      # (docs/benchmarks.md, "The first cycle's embedding slot").
      ke_BLHK, ve_BLHK = k_BLHK, v_BLHK
    else:
      ke_BLHK, ve_BLHK = sat.key(e_BLD), sat.value(e_BLD)
    upd_BLD = sat(satellite_attention(q_BLHK, k_BLHK, v_BLHK, ke_BLHK, ve_BLHK,
                                      ks_BHK, vs_BHK, mask_BL, self.ends, self.ring))
    upd_BLD = act(dropout(upd_BLD))
    if not official:
      upd_BLD = norm("satellite_ln")(upd_BLD).astype(self.dtype)
    h_new_BLD = h_BLD + upd_BLD if self.ffn_residual else upd_BLD
    if self.ffn_residual:
      h_new_BLD = h_new_BLD + dropout(Mlp(
          self.mlp_dim, dtype=self.dtype, param_dtype=self.param_dtype,
          name="satellite_mlp")(norm("satellite_mlp_ln")(h_new_BLD).astype(self.dtype),
                                self.deterministic))
    h_new_BLD = jnp.where(m_BL1, h_new_BLD, 0).astype(self.dtype)

    if not self.radial:  # No relay node at all (ablation (a) of the paper).
      return (h_new_BLD, s_BD), (ke_BLHK, ve_BLHK)

    # ---- relay: attention from s over [s; H^t], pads masked ----
    rel = HeadProjections(self.num_heads, self.head_dim, d_model, self.dtype,
                          self.param_dtype, name="relay_attn")
    q_BHK = rel.query(s_BD)
    ks_BHK, vs_BHK = rel.key(s_BD), rel.value(s_BD)
    scale = self.head_dim ** -0.5
    logit_s_BH = jnp.einsum("bhk,bhk->bh", q_BHK, ks_BHK,
                            preferred_element_type=jnp.float32) * scale
    # The same attention with the projections moved: q . (W_k h_l + b_k) =
    # h_l . (W_k q) + b_k . q (the query folded into the key kernel, [D, H] per row) and
    # sum_l p_l (W_v h_l + b_v) = W_v (sum_l p_l h_l) + (sum_l p_l) b_v, so the [B, L, H, K]
    # keys and values of the satellites are never formed: two [L, D] x [D, H] products
    # instead of two [L, D] x [D, D] projections and the transposes of their gradients
    # (docs/benchmarks.md, "Star-Transformer: second change").
    wk_DHK, bk_HK = rel.kernel_and_bias("key")
    wv_DHK, bv_HK = rel.kernel_and_bias("value")
    a_BDH = jnp.einsum("dhk,bhk->bdh", wk_DHK, q_BHK)
    c_BH = jnp.einsum("hk,bhk->bh", bk_HK, q_BHK)
    logits_BLH = (jnp.einsum("bld,bdh->blh", h_new_BLD, a_BDH,
                             preferred_element_type=jnp.float32) + c_BH[:, None]) * scale
    logits_BLH = jnp.where(mask_BL[..., None], logits_BLH, jnp.finfo(jnp.float32).min)
    logits_BSH = jnp.concatenate([logit_s_BH[:, None], logits_BLH], axis=1)
    probs_BSH = jax.nn.softmax(logits_BSH, axis=1).astype(self.dtype)
    p_BLH = probs_BSH[:, 1:]
    hbar_BHD = jnp.einsum("blh,bld->bhd", p_BLH, h_new_BLD)
    att_BHK = (probs_BSH[:, 0, :, None] * vs_BHK
               + jnp.einsum("bhd,dhk->bhk", hbar_BHD, wv_DHK)
               + jnp.sum(p_BLH, axis=1)[..., None] * bv_HK[None])
    upd_BD = act(dropout(rel(att_BHK)))
    if not official:
      upd_BD = norm("relay_ln")(upd_BD).astype(self.dtype)
    s_new_BD = s_BD + upd_BD if self.ffn_residual else upd_BD
    if self.ffn_residual:
      s_new_BD = s_new_BD + dropout(Mlp(
          self.mlp_dim, dtype=self.dtype, param_dtype=self.param_dtype,
          name="relay_mlp")(norm("relay_mlp_ln")(s_new_BD).astype(self.dtype),
                            self.deterministic))
    return (h_new_BLD, s_new_BD.astype(self.dtype)), (ke_BLHK, ve_BLHK)


class StarTransformer(nn.Module):
  """Star-Transformer encoder: O(L D) per cycle.

  Attributes:
    num_cycles: T, rounds of (satellites, relay) updates.
    num_heads: attention heads.
    head_dim: width per head (default D // num_heads; the paper uses 6 x 50 at D=300).
    ends: ring-neighbour convention at the sequence ends: 'ring' (wrap-around between the
      first and last real token, as in the paper's figure), 'zero' (zero key/value beyond
      the ends, as in the authors' code) or 'masked' (no neighbour beyond the ends).
    ordering: 'paper' (attention -> ReLU -> LayerNorm for satellites and relay, Eq. 5-8) or
      'official' (the authors' code: pre-LayerNorm on the satellites, LeakyReLU, no
      LayerNorm on the relay).
    radial: keep the radial connections (relay <-> satellites). False is ablation (a): no
      relay node; satellites see only their ring context; poolings read the relay as 0.
    ring: keep the ring connections (h_{i-1}, h_{i+1}). False is ablation (b).
    ffn_residual: add residual connections and a pre-LN feed-forward block to both updates
      (the authors' advice for deep stacks).
    mlp_dim: feed-forward width when ``ffn_residual`` (default 4 D).
    share_cycle_params: one set of parameters for every cycle (scanned with broadcast
      parameters) instead of one per cycle.
    position: 'learned' (absolute positions added to the embeddings, as in the paper) or
      'none'.
    max_len: size of the learned position table; longer inputs raise an error.
    dropout_rate: dropout rate.
    dropout_placement: where it acts: 'embeddings_and_updates' (default; the embeddings and
      every attention output before the activation, and the FFN outputs: 1 + 2T places
      without ``ffn_residual``) or 'embeddings' (the authors' code: the embeddings only).
    pooling: the ``pooled`` output: 'relay' (s^T), 'max' / 'mean' (masked, of H^T),
      'relay_plus_max' (s^T + max H^T, the paper), 'relay_max_mean' ((s^T + max H^T) / 2,
      the authors' code) or 'relay_max_concat_proj' (Dense_D([s^T; max H^T])).
    remat: 'none' or a policy name from ``longtext_jax.layers.remat.REMAT_POLICIES``.
    scan_unroll: cycles per iteration of the compiled loop over cycles (``nn.scan``'s
      ``unroll``); None (default): all of them (no loop) up to ``MAX_FULL_UNROLL`` cycles,
      else 1; 1 with ``remat`` (without the loop XLA merges the recomputation with the
      forward and the remat saves no memory; an explicit value > 1 with ``remat`` does
      the same). Same values and gradients (to float rounding). Without the loop XLA fuses
      across cycles and stacks no per-cycle residuals: at 2 cycles on a CPU, forward
      1.05-1.25x and forward+backward 1.09-1.26x faster than the rolled loop (3-4 cycles
      1.06-1.17x); unrolling 2 of 6 cycles was slower, so longer stacks keep the loop
      (docs/benchmarks.md, "Unrolling the Star-Transformer's cycles"). With the paper
      ordering or shared parameters such a stack runs as a Python loop over the scanned
      parameters, so that the first cycle reuses the satellites' keys and values for the
      embedding slot (h^0 = e) and shared-parameter cycles the first one's (1.08-1.29x
      faster forward+backward on a CPU, docs/benchmarks.md, "The first cycle's embedding
      slot"); with dropout its masks are other draws than the rolled loop's.
    dtype: compute dtype; LayerNorm and softmax run in float32.
    param_dtype: parameter dtype.
  """
  input_kind = "embeddings"  # Called as encoder(x_BLD, mask_BL) (encoders/base.py).
  num_cycles: int = 2
  num_heads: int = 4
  head_dim: int | None = None
  ends: str = "ring"
  ordering: str = "paper"
  radial: bool = True
  ring: bool = True
  ffn_residual: bool = False
  mlp_dim: int | None = None
  share_cycle_params: bool = False
  position: str = "learned"
  max_len: int = 4096
  dropout_rate: float = 0.1
  dropout_placement: str = "embeddings_and_updates"
  pooling: str = "relay_plus_max"
  remat: str = "none"
  scan_unroll: int | None = None
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @property
  def unroll(self) -> int:
    """Cycles per loop iteration: ``scan_unroll``, or for None all ``num_cycles`` when
    there are at most ``MAX_FULL_UNROLL`` and no ``remat``, else 1."""
    if self.scan_unroll is not None:
      return self.scan_unroll
    if self.remat != "none":  # Unrolled, XLA merges the recomputation with the forward
      return 1                # and the remat saves nothing (tests/test_remat_memory.py).
    return self.num_cycles if self.num_cycles <= MAX_FULL_UNROLL else 1

  def _check(self, d_model: int, length: int) -> int:
    if self.ends not in ENDS:
      raise ValueError(f"StarTransformer.ends must be one of {ENDS}, got {self.ends!r}")
    if self.ordering not in ORDERINGS:
      raise ValueError(f"StarTransformer.ordering must be one of {ORDERINGS}, got "
                       f"{self.ordering!r}")
    if self.dropout_placement not in DROPOUT_PLACEMENTS:
      raise ValueError(f"StarTransformer.dropout_placement must be one of "
                       f"{DROPOUT_PLACEMENTS}, got {self.dropout_placement!r}")
    if self.pooling not in POOLINGS:
      raise ValueError(f"StarTransformer.pooling must be one of {POOLINGS}, got "
                       f"{self.pooling!r}")
    if self.pooling == "relay" and not self.radial:
      raise ValueError("StarTransformer: pooling='relay' needs the relay (radial=True)")
    if self.position not in ("learned", "none"):
      raise ValueError(f"StarTransformer.position must be learned|none, got "
                       f"{self.position!r}")
    if self.position == "learned" and length > self.max_len:
      raise ValueError(f"StarTransformer: length {length} exceeds max_len={self.max_len} "
                       "of the learned position table")
    if self.num_cycles < 1:
      raise ValueError(f"StarTransformer.num_cycles must be >= 1, got {self.num_cycles}")
    if self.scan_unroll is not None and self.scan_unroll < 1:
      raise ValueError(f"StarTransformer.scan_unroll must be >= 1 or None, got "
                       f"{self.scan_unroll}")
    if self.head_dim is None and d_model % self.num_heads:
      raise ValueError(f"StarTransformer: width {d_model} is not divisible by "
                       f"num_heads={self.num_heads}")
    return self.head_dim or d_model // self.num_heads

  @nn.compact
  def __call__(self, x_BLD: Array, mask_BL: Array, deterministic: bool = True
               ) -> EncoderOutput:
    """Encodes a batch of embedded documents.

    Args:
      x_BLD: float[B, L, D] embeddings (the model's ``Inputs``; learned positions added when
        ``position='learned'``).
      mask_BL: bool[B, L], True on real tokens (any pattern).
      deterministic: False turns dropout on (needs a 'dropout' RNG).

    Returns:
      ``EncoderOutput``: ``sequence`` float32[B, L, D], zero at pads; ``pooled``
      float32[B, D]: the relay and/or the satellites' masked max or mean, as ``pooling``
      says.
    """
    check_encoder_inputs(x_BLD, mask_BL, "StarTransformer")
    _, length, d_model = x_BLD.shape
    head_dim = self._check(d_model, length)
    m_BL1 = mask_BL[..., None]
    if self.position == "learned":
      pos_LD = self.param("pos_embedding", named(nn.initializers.normal(0.02),
                                                 ("position", "embed")),
                          (self.max_len, d_model), self.param_dtype)[:length]
      x_BLD = x_BLD + pos_LD[None].astype(x_BLD.dtype)
    e_BLD = nn.Dropout(self.dropout_rate)(x_BLD, deterministic=deterministic)
    e_BLD = jnp.where(m_BL1, e_BLD, 0).astype(self.dtype)
    s_BD = masked_mean(e_BLD, mask_BL)  # s^0: mean of the REAL tokens' embeddings.

    cycle = StarCycle
    if self.remat != "none":
      cycle = nn.remat(cycle, policy=remat_policy(self.remat), prevent_cse=False)
    if self.share_cycle_params:
      scan_kw = dict(variable_broadcast="params",
                     split_rngs={"params": False, "dropout": True})
    else:
      scan_kw = dict(variable_axes={"params": 0},
                     split_rngs={"params": True, "dropout": True},
                     metadata_params={nn.PARTITION_NAME: "layers"})
    stack = nn.scan(cycle, in_axes=(nn.broadcast, nn.broadcast), length=self.num_cycles,
                    unroll=self.unroll, **scan_kw)
    cycle_kw = dict(
        num_heads=self.num_heads, head_dim=head_dim, ends=self.ends,
        ordering=self.ordering, radial=self.radial, ring=self.ring,
        ffn_residual=self.ffn_residual, mlp_dim=self.mlp_dim or 4 * d_model,
        dropout_rate=self.dropout_rate, dropout_placement=self.dropout_placement,
        deterministic=deterministic, dtype=self.dtype,
        param_dtype=self.param_dtype)
    if self._python_loop_over_cycles():
      h_BLD, s_BD = self._cycles_without_loop(cycle_kw, e_BLD, s_BD, mask_BL, deterministic)
    else:
      (h_BLD, s_BD), _ = stack(**cycle_kw, name="cycles")((e_BLD, s_BD), e_BLD, mask_BL)
    h_BLD = constrain(jnp.where(m_BL1, h_BLD, 0))
    any_B1 = jnp.any(mask_BL, axis=-1, keepdims=True)
    relay_BD = jnp.where(any_B1, s_BD, 0) if self.radial else jnp.zeros_like(s_BD)
    return encoder_output(h_BLD, self._pool(h_BLD, relay_BD, mask_BL))

  def _python_loop_over_cycles(self) -> bool:
    """Whether the cycles run as a Python loop over the scanned parameters: when they
    run without a loop anyway (``unroll`` covers them all, no ``remat``) and the loop
    saves products: the paper ordering (h^0 = e, so the first cycle's keys and values of
    the embeddings are the satellites' own; the official one reads LN(h) instead) or
    parameters shared by the cycles (every cycle's keys and values of the embeddings are
    the first one's). At init the scan creates the parameters."""
    return (self.unroll >= self.num_cycles and self.remat == "none"
            and (self.ordering == "paper" or self.share_cycle_params)
            and not self.is_initializing())

  def _cycles_without_loop(self, cycle_kw: dict, e_BLD: Array, s_BD: Array,
                           mask_BL: Array, deterministic: bool) -> tuple[Array, Array]:
    """The cycles one after another, each applied to its slice of the parameters that
    ``nn.scan`` created (same tree, same values as the scan to float rounding).

    Inside a scan the first cycle cannot tell that its states are the embeddings (the
    carry and the broadcast input are different tracers); here cycle 0 is called with
    ``e`` itself as its states, so it reuses their keys and values for the embedding slot
    (:class:`StarCycle`) and the backward saves 4 of the 24 [B*L, D] x [D, D] products of
    the default 2 cycles (20 against the forward's 10; docs/benchmarks.md, "The first
    cycle's embedding slot"). With ``share_cycle_params`` the later cycles take the first
    one's keys and values of the embeddings too (16 against 8 at 2 cycles, where the
    scan transposed 24). With dropout, each cycle's masks come from
    ``make_rng('dropout')`` rather than the scan's split key: other masks than
    ``scan_unroll=1`` draws, from the same distribution.
    """
    params = nn.meta.unbox(self.variables["params"]["cycles"])
    carry, embedding_kv = (e_BLD, s_BD), None
    for t in range(self.num_cycles):
      p_t = params if self.share_cycle_params else jax.tree.map(lambda a, t=t: a[t], params)
      rngs = ({} if deterministic or self.dropout_rate == 0
              else {"dropout": self.make_rng("dropout")})
      carry, kv = StarCycle(**cycle_kw).apply(
          {"params": p_t}, carry, e_BLD, mask_BL,
          embedding_kv if self.share_cycle_params else None, rngs=rngs,
          method=StarCycle.step)
      embedding_kv = kv
    return carry

  def _pool(self, h_BLD: Array, relay_BD: Array, mask_BL: Array) -> Array:
    if self.pooling == "relay":
      return relay_BD
    if self.pooling == "mean":
      return masked_mean(h_BLD, mask_BL)
    max_BD = masked_max(h_BLD, mask_BL)
    if self.pooling == "max":
      return max_BD
    if self.pooling == "relay_plus_max":
      return relay_BD + max_BD
    if self.pooling == "relay_max_mean":
      return 0.5 * (relay_BD + max_BD)
    both_B2D = jnp.concatenate([relay_BD, max_BD], axis=-1)
    return nn.Dense(h_BLD.shape[-1], dtype=self.dtype, param_dtype=self.param_dtype,
                    **dense_inits(("embed", "mlp")),
                    name="pool_proj")(both_B2D)
