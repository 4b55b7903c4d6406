"""Recurrent Attention Network (RAN; Li et al., ACL 2023), paper equations in JAX/Flax.

The document is cut into windows of ``window_size`` W (the last one padded). A global
perception cell (GPC) vector G is carried from window to window (paper Sec. 3):

* Eq. 1  G_0 = LayerNorm(W_g 0). ``W_g 0`` is the zero vector, so G_0 is the LayerNorm's
  bias (its scale gets no gradient); we apply a LayerNorm to zeros and keep no W_g.
* Eq. 2-4  O_i = pMHSA(LayerNorm([G_{i-1}; X_i])): multi-head self-attention over the 1 + W
  rows, rotary positions restarting in every window (GPC at 0, tokens at 1..W).
* Eq. 5  G'_i = SN(O_i[0]), O^w_i = SN(O_i[1:]), SN(x) = (x - mean) / std (no parameters).
* Eq. 6  G_i = LayerNorm(G'_i + G_{i-1}).
* Eq. 7-9  memory review: the token outputs O^w attend over S = [G_1 .. G_m].
* Eq. 10-11  pooled = W^g G_m + W^o MaxPool(O) + b.

Two implementations with identical parameters, values and gradients (``impl``):

* ``"scan"``: the straightforward recurrence, one ``nn.scan`` step per window running the
  (1 + W)-row attention.
* ``"parallel"``: LayerNorm acts per row, so the token rows' queries/keys/values never depend
  on G. They are computed for all windows at once; the only sequential work is the GPC row's
  one-query attention over [G_{i-1}; X_i] and the update of Eq. 6 (O(W D + D^2) per step);
  then all windows' token rows attend in parallel to their window plus the incoming GPC.
  With ``attention_block`` k > 0 this runs block by block (k windows at once, a loop over
  the blocks carrying G), which bounds its memory by the block instead of the document.

The authors' code (4AI/RAN) differs from the paper in several places; each difference is an
option, off by default (``layer_norm``, ``sn_kind``, ``min_window_size``, ``rotary_layout``,
``projection_activation``, ``block_residual``, ``gpc_residual``, ``review_memory``,
``review_residual``, ``output_norm``, ``input_norm``, ``pooled_output``), and
configs/ran/official.py sets them all. With ``min_window_size`` a row's short last window
joins the previous one; windows then have W + min_window_size - 1 slots and each row its own
token-to-slot assignment (:func:`window_layout`), so padding never changes the windows.

See docs/ran.md for the masks, the two layer-stacking modes, streaming, and the table
"Paper vs authors' code vs ours".
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Iterable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax.encoders.base import EncoderOutput, encoder_output, check_encoder_inputs
from longtext_jax.layers.attention import dot_product_attention
from longtext_jax.layers.partitioning import constrain, dense_inits, norm_inits
from longtext_jax.layers.pooling import masked_max, masked_mean
from longtext_jax.layers.rotary import apply_rotary

Array = jax.Array

MASK_TYPES = ("bidirectional", "causal", "prefix")
IMPLS = ("auto", "scan", "parallel")
LAYER_MODES = ("stacked", "serial")
GPC_RESIDUALS = ("paper", "none", "official")
BLOCK_RESIDUALS = ("none", "glu")
REVIEW_RESIDUALS = ("add", "none", "official")
REVIEW_MEMORIES = ("gpc", "cell")
NORM_KINDS = ("standard", "official")
ROTARY_LAYOUTS = ("half", "interleaved")
POOLED_OUTPUTS = ("paper", "official")
ACTIVATIONS = {"none": lambda x: x, "swish": nn.swish}
POOLINGS = {"max": masked_max, "mean": masked_mean}
OFFICIAL_LN_EPSILON = 1e-7  # langml's LayerNorm default, used by the authors' code.

_init = nn.initializers.xavier_uniform()
_WINDOWED = ("batch", None, None, "embed")  # Logical axes of windowed states [B, N, W, D].


def standardize(x: Array, eps: float, kind: str = "standard") -> Array:
  """SN of Eq. 5 over the last axis, in float32.

  Args:
    x: float[..., D].
    eps: added under the square root.
    kind: 'standard' (the paper): (x - mean) / sqrt(var + eps); 'official' (the authors'
      rannet/utils.py): (x - mean) / sqrt(mean(x^2) + eps), i.e. the mean is subtracted but
      the divisor is the root mean square of x, not the standard deviation.

  Returns:
    float32[..., D].
  """
  x = x.astype(jnp.float32)
  mean = jnp.mean(x, axis=-1, keepdims=True)
  if kind == "official":
    second = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
  else:
    second = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(second + eps)


class OfficialLayerNorm(nn.Module):
  """The authors' LayerNorm (langml): (x - mean) / sqrt(mean(x^2) + 1e-7) * scale + bias.

  Parameters ``scale`` and ``bias`` as in ``nn.LayerNorm``; computed in float32.
  """
  epsilon: float = OFFICIAL_LN_EPSILON
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: Array) -> Array:
    d = x.shape[-1]
    inits = norm_inits()
    scale = self.param("scale", inits["scale_init"], (d,), self.param_dtype)
    bias = self.param("bias", inits["bias_init"], (d,), self.param_dtype)
    y = standardize(x, self.epsilon, "official")
    lead = (1,) * (x.ndim - 1)
    return (y * scale.astype(jnp.float32).reshape(lead + (d,))
            + bias.astype(jnp.float32).reshape(lead + (d,)))


def window_layout(mask_BL: Array, window: int, min_window: int):
  """Per-row assignment of tokens to windows, merging a short trailing window.

  Windows are [0, W), [W, 2W), ... of each row's own real length n (right padding). When
  ``min_window`` > 1 and a row has two or more windows whose last one holds fewer than
  ``min_window`` real tokens, those tokens join the previous window (the authors' code,
  rannet/ran.py), which then holds up to W + min_window - 1 tokens; the layout's windows
  therefore have S = W + min_window - 1 slots (S = W when ``min_window`` <= 1). The rule
  reads the row's real length only, so it does not depend on how far the batch is padded.

  Args:
    mask_BL: bool[B, L], True on real tokens (right-padded).
    window: W.
    min_window: the shortest trailing window kept on its own (0 or 1: never merge).

  Returns:
    (idx_NS int[N, S]: the source position of every slot (clipped to L - 1),
     mask_BNS bool[B, N, S]: slot holds a real token of that window,
     end_BN int[B, N]: one past the last position window n may hold (n + 1) W, plus the
       merged tokens for a row's merged window,
     flat_BL int[B, L]: the flat slot n * S + s holding each token).
  """
  mask_BL = jnp.asarray(mask_BL)  # A host (numpy) mask cannot be indexed by traced slots.
  b, length = mask_BL.shape
  n = -(-length // window)
  merge = min_window > 1
  s = window + min_window - 1 if merge else window
  win_N1 = jnp.arange(n)[:, None]
  pos_NS = win_N1 * window + jnp.arange(s)[None]
  idx_NS = jnp.minimum(pos_NS, length - 1)
  pos_L = jnp.arange(length)
  if not merge:
    own_BNS = jnp.broadcast_to(pos_NS < length, (b, n, s))
    extra_BN = jnp.zeros((b, n), jnp.int32)
    flat_BL = jnp.broadcast_to(pos_L, (b, length))
  else:
    len_B = jnp.sum(mask_BL, axis=-1).astype(jnp.int32)
    nwin_B = -(-len_B // window)
    tail_B = len_B - (nwin_B - 1) * window
    merged_B = (nwin_B >= 2) & (tail_B < min_window)
    last_B = nwin_B - 1 - merged_B.astype(jnp.int32)
    tok_win_BNS = jnp.minimum(pos_NS[None] // window, last_B[:, None, None])
    own_BNS = (tok_win_BNS == win_N1[None]) & (pos_NS < length)[None]
    extra_BN = jnp.where((jnp.arange(n)[None] == last_B[:, None]) & merged_B[:, None],
                         tail_B[:, None], 0)
    win_BL = jnp.minimum(pos_L[None] // window, jnp.maximum(last_B, 0)[:, None])
    flat_BL = win_BL * s + pos_L[None] - win_BL * window
  mask_BNS = own_BNS & mask_BL[:, idx_NS]
  end_BN = (jnp.arange(n)[None] + 1) * window + extra_BN
  return idx_NS, mask_BNS, end_BN, flat_BL


def interleave_to_half(x_BLHK: Array) -> Array:
  """Reorders head features (0, 1, 2, 3, ...) -> (0, 2, 4, ..., 1, 3, 5, ...).

  Half-split rotary on the reordered queries and keys rotates the pairs (2i, 2i + 1) (the
  interleaved RoPE of the authors' code); applied to both, it leaves q . k unchanged.
  """
  k = x_BLHK.shape[-1]
  perm = jnp.concatenate([jnp.arange(0, k, 2), jnp.arange(1, k, 2)])
  return x_BLHK[..., perm]


def rule_visible(q_pos: Array, k_pos: Array, mask_type: str, prefix_B: Array) -> Array:
  """bool[B, T, S]: token at absolute position q_pos[t] may see token at k_pos[s].

  Args:
    q_pos: int[T] absolute positions of the queries.
    k_pos: int[S] absolute positions of the keys.
    mask_type: 'bidirectional', 'causal' or 'prefix'.
    prefix_B: int[B] prefix lengths (prefix mask only).
  """
  t_1T1, s_11S = q_pos[None, :, None], k_pos[None, None, :]
  if mask_type == "bidirectional":
    return jnp.ones((prefix_B.shape[0], q_pos.shape[0], k_pos.shape[0]), jnp.bool_)
  causal_1TS = s_11S <= t_1T1
  if mask_type == "causal":
    return jnp.broadcast_to(causal_1TS, (prefix_B.shape[0],) + causal_1TS.shape[1:])
  return causal_1TS | (s_11S < prefix_B[:, None, None])


def memory_visible(q_win: Array, m_win: Array, m_end_BM: Array, mask_type: str,
                   prefix_B: Array) -> Array:
  """bool[B, T, M]: may a token of window q_win[t] read the GPC produced by window m_win[m]?

  G produced by window i has read every token of windows <= i, so a token may read it only
  when it may see all of those: always (bidirectional), i < its own window (causal), or that
  plus every window lying entirely inside the prefix (prefix: the window's end
  ``m_end_BM`` <= the prefix length).
  """
  i_11M, j_1T1 = m_win[None, None, :], q_win[None, :, None]
  if mask_type == "bidirectional":
    return jnp.ones((prefix_B.shape[0], q_win.shape[0], m_win.shape[0]), jnp.bool_)
  earlier_1TM = i_11M < j_1T1
  if mask_type == "causal":
    return jnp.broadcast_to(earlier_1TM, (prefix_B.shape[0],) + earlier_1TM.shape[1:])
  in_prefix_B1M = m_end_BM[:, None, :] <= prefix_B[:, None, None]
  return earlier_1TM | in_prefix_B1M


def blocked_window_attention(q_BNWHK: Array, k_BNSHK: Array, v_BNSHK: Array,
                             vis_BNWS: Array, block: int) -> Array:
  """Attention inside each of N windows, all at once (block=0) or ``block`` windows at a
  time in a ``lax.map`` (same values; on CPUs the small per-block logits stay in cache and
  run several times faster, on GPUs one batched call is best). Returns float[B, N, W, H, K].
  """
  b, n, w = q_BNWHK.shape[:3]
  s, hk = k_BNSHK.shape[2], q_BNWHK.shape[3:]
  if block <= 0 or block >= n:
    return dot_product_attention(
        q_BNWHK.reshape((b * n, w) + hk), k_BNSHK.reshape((b * n, s) + hk),
        v_BNSHK.reshape((b * n, s) + hk), vis_BNWS.reshape(b * n, 1, w, s)
    ).reshape((b, n, w) + hk)
  block = math.gcd(n, block)
  g = n // block
  to_groups = lambda a: jnp.moveaxis(a.reshape((b, g, block) + a.shape[2:]), 1, 0)
  def one(args):
    q, k, v, vis = args
    return blocked_window_attention(q, k, v, vis, 0)
  out_GBbWHK = jax.lax.map(one, tuple(map(to_groups, (q_BNWHK, k_BNSHK, v_BNSHK, vis_BNWS))))
  return jnp.moveaxis(out_GBbWHK, 0, 1).reshape((b, n, w) + hk)


def resolve_layout(impl: str, attention_block: int | None, backend: str | None = None
                   ) -> tuple[str, int]:
  """The concrete (impl, attention_block) of RAN's 'auto' settings for a backend.

  Measured (docs/ran.md "Defaults", docs/benchmarks.md "RAN layouts"): on CPUs the scan
  (one full window attention per step) is the fastest layout, forward and forward+backward,
  with the least memory and the shortest compilation, at W=256, L=1k-16k, D=64-128; the
  parallel form's batched token attention over all windows is 1.5-2.8x slower there. On
  GPUs/TPUs one batched call over all windows is the point of the parallel form. All choices
  give the same values and gradients.

  Args:
    impl: 'auto', 'scan' or 'parallel'. 'auto' is 'scan' on CPU, 'parallel' elsewhere,
      and 'parallel' wherever ``attention_block`` is given (it is that form's knob).
    attention_block: windows per block of impl='parallel' (0: all windows in one block), or
      None for the backend's best: 1 on CPU, 0 elsewhere.
    backend: platform name ('cpu', 'gpu', 'tpu', ...); default ``jax.default_backend()``.

  Returns:
    ``(impl, attention_block)`` with no 'auto'/None left.
  """
  backend = backend or jax.default_backend()
  if impl == "auto":
    impl = "scan" if backend == "cpu" and attention_block is None else "parallel"
  if attention_block is None:
    attention_block = 1 if backend == "cpu" else 0
  return impl, attention_block


# Windows per loop iteration on a GPU: an H100 (jax 0.11.2) ran RAN's GPU layout at L=16k,
# W=256 1.50-1.51x faster forward+backward with 8 than with 1 (fp32 D=64 and bf16 D=128,
# batch 1; docs/benchmarks.md "GPU: RAN's loop over windows unrolled"); compile 2x longer
# (19-23 s).
GPU_UNROLL = 8


def resolve_unroll(scan_unroll: int | None, backend: str | None = None) -> int:
  """The concrete ``scan_unroll`` of RAN's None (auto) for a backend.

  A GPU pays every iteration of the compiled loop over windows (the GPC recurrence is many
  small sequential steps: launch-bound), so several windows per iteration are faster there
  (GPU_UNROLL, measured). CPUs keep 1 (8 windows measured 0.90-0.95x the rolled loop's
  forward+backward speed at L=4k, with 2-3x the compile time), as do TPUs (not measured).
  Same values and gradients.

  Args:
    scan_unroll: the field, None for the backend's best.
    backend: platform name; default ``jax.default_backend()``.
  """
  if scan_unroll is not None:
    return scan_unroll
  return GPU_UNROLL if (backend or jax.default_backend()) == "gpu" else 1


class HeadsIn(nn.Module):
  """x[..., D] -> [..., H, K] affine projection with an optional activation
  (K = head_dim, or D // H when None)."""
  num_heads: int
  head_dim: int | None = None
  activation: str = "none"
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: Array) -> Array:
    head_dim = self.head_dim or x.shape[-1] // self.num_heads
    y = nn.DenseGeneral((self.num_heads, head_dim), dtype=self.dtype,
                        param_dtype=self.param_dtype, name="dense",
                        **dense_inits(("embed", "heads", "kv"), ("heads", "kv"), _init))(x)
    return ACTIVATIONS[self.activation](y)


class HeadsOut(nn.Module):
  """[..., H, K] -> [..., D] affine projection (pMHSA's W and b, Eq. 2)."""
  activation: str = "none"
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: Array, features: int) -> Array:
    y = nn.DenseGeneral(features, axis=(-2, -1), dtype=self.dtype,
                        param_dtype=self.param_dtype, name="dense",
                        **dense_inits(("heads", "kv", "embed"), ("embed",), _init))(x)
    return ACTIVATIONS[self.activation](y)


class Glu(nn.Module):
  """GLU(x) = Dense(x) * sigmoid(Dense(x)), same width (the official code's residual)."""
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: Array) -> Array:
    d = x.shape[-1]
    dense = lambda name: nn.Dense(d, dtype=self.dtype, param_dtype=self.param_dtype,
                                  name=name, **dense_inits(("embed", "mlp"), None, _init))
    return dense("value")(x) * nn.sigmoid(dense("gate")(x))


class SameWidthDense(nn.Module):
  """Dense layer whose output width equals its input width."""
  use_bias: bool = True
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: Array) -> Array:
    return nn.Dense(x.shape[-1], use_bias=self.use_bias, dtype=self.dtype,
                    param_dtype=self.param_dtype, name="dense",
                    **dense_inits(("embed", "mlp"), None, _init))(x)


def _layer_norm(param_dtype, kind: str = "standard", name=None):
  """A LayerNorm of ``kind`` 'standard' (nn.LayerNorm, epsilon 1e-6) or 'official'
  (:class:`OfficialLayerNorm`); same parameter names."""
  if kind == "official":
    return OfficialLayerNorm(param_dtype=param_dtype, name=name)
  return nn.LayerNorm(epsilon=1e-6, dtype=jnp.float32, param_dtype=param_dtype, name=name,
                      **norm_inits())


class RANLayer(nn.Module):
  """One RAN layer: the GPC recurrence over windows (Eq. 1-6) and memory review (Eq. 7-9).

  Not an encoder by itself; :class:`RAN` drives it. The public methods work on windowed
  tensors ``x_BNWD`` (N windows of W rows) and are shared by the one-shot and the streaming
  paths. See :class:`RAN` for the meaning of the fields.
  """
  num_heads: int
  head_dim: int | None
  window_size: int
  mask_type: str
  use_rotary: bool
  rotary_base: float
  gpc_residual: str
  block_residual: str
  projection_activation: str
  memory_review: bool
  review_heads: int
  review_residual: str
  sn_epsilon: float
  dtype: Any
  param_dtype: Any
  attention_block: int = 0
  scan_unroll: int = 1
  layer_norm: str = "standard"
  sn_kind: str = "standard"
  review_memory: str = "gpc"
  rotary_layout: str = "half"
  output_norm: bool = False

  def setup(self):
    """Builds the projections, norms and MLP of one layer (shared by every window)."""
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    ln = lambda: _layer_norm(self.param_dtype, self.layer_norm)
    self.ln_gpc0 = ln()  # Eq. 1
    self.ln_in = ln()  # Eq. 4's input LayerNorm
    act = self.projection_activation
    self.query = HeadsIn(self.num_heads, self.head_dim, act, **kw)
    self.key = HeadsIn(self.num_heads, self.head_dim, act, **kw)
    self.value = HeadsIn(self.num_heads, self.head_dim, act, **kw)
    self.out = HeadsOut(act, **kw)
    if self.block_residual == "glu":
      self.glu_block = Glu(**kw)
      self.ln_block = ln()
    self.ln_gpc = ln()  # Eq. 6
    if self.gpc_residual == "official":
      self.glu_gpc = Glu(**kw)
    if self.memory_review:
      self.review_query = HeadsIn(self.review_heads, None, act, **kw)
      self.review_key = HeadsIn(self.review_heads, None, act, **kw)
      self.review_value = HeadsIn(self.review_heads, None, act, **kw)
      if self.review_residual == "official":
        self.review_out = HeadsOut(act, **kw)
        self.glu_review = Glu(**kw)
        self.ln_review = ln()
    elif self.output_norm:
      self.ln_out = ln()  # The official code's output LayerNorm when there is no review.

  # ---------------------------------------------------------------- building blocks
  def initial_gpc(self, batch: int, d_model: int) -> Array:
    """G_0 = LayerNorm(W_g 0) = the LayerNorm bias (Eq. 1), float32[B, D]."""
    g_1D = self.ln_gpc0(jnp.zeros((1, d_model), jnp.float32))
    return jnp.broadcast_to(g_1D, (batch, d_model))

  def initial_carry(self, batch: int, d_model: int, g_BD: Array | None = None) -> dict:
    """The recurrent state before the first window: G, the official code's previous raw
    GPC, and whether a real window was seen yet (for the official residual)."""
    g_BD = self.initial_gpc(batch, d_model) if g_BD is None else g_BD
    return {"g": g_BD, "c": jnp.zeros_like(g_BD), "seen": jnp.zeros((batch,), jnp.bool_)}

  def _qkv(self, hn: Array, positions: Array):
    q, k, v = self.query(hn), self.key(hn), self.value(hn)
    if self.use_rotary:
      if self.rotary_layout == "interleaved":  # Same logits as rotating pairs (2i, 2i + 1).
        q, k = interleave_to_half(q), interleave_to_half(k)
      q = apply_rotary(q, positions, self.rotary_base)
      k = apply_rotary(k, positions, self.rotary_base)
    return q, k, v

  def _rows_out(self, att: Array, hn: Array) -> Array:
    """Eq. 2's output projection (+ the official GLU residual), then SN (Eq. 5)."""
    o = self.out(att, hn.shape[-1])
    if self.block_residual == "glu":
      o = self.ln_block(o + self.glu_block(hn))
    return standardize(o, self.sn_epsilon, self.sn_kind)

  def update_gpc(self, carry: dict, gp_BD: Array, valid_B: Array) -> dict:
    """Eq. 6 (or its ablation / the official variant); windows without a real token
    leave the state unchanged."""
    g_prev, c_prev, seen = carry["g"], carry["c"], carry["seen"]
    if self.gpc_residual == "paper":
      g_new = self.ln_gpc(gp_BD + g_prev)
    elif self.gpc_residual == "none":
      g_new = self.ln_gpc(gp_BD)
    else:  # official: LN(c_k + GLU(c_{k-1})); the first window passes c_0 on unchanged.
      g_new = jnp.where(seen[:, None], self.ln_gpc(gp_BD + self.glu_gpc(c_prev)), gp_BD)
    v = valid_B[:, None]
    return {"g": jnp.where(v, g_new, g_prev), "c": jnp.where(v, gp_BD, c_prev),
            "seen": seen | valid_B}

  def window_rows_visible(self, mask_BW: Array, win: Array, prefix_B: Array) -> Array:
    """bool[B, S, 1 + S]: token rows of window ``win`` (S slots) over [GPC; tokens] keys."""
    pos_W = win * self.window_size + jnp.arange(mask_BW.shape[1])
    vis_BWW = rule_visible(pos_W, pos_W, self.mask_type, prefix_B) & mask_BW[:, None, :]
    gpc_BW1 = jnp.ones(vis_BWW.shape[:2] + (1,), jnp.bool_)
    return jnp.concatenate([gpc_BW1, vis_BWW], axis=-1)

  # ---------------------------------------------------------------- scan implementation
  def attend_window(self, g_BD: Array, x_BWD: Array, mask_BW: Array, win: Array,
                    prefix_B: Array, g_tok_BD: Array | None = None):
    """The whole (1 + W)-row pMHSA of one window (Eq. 2-5).

    ``g_tok_BD`` (serial stacking under a causal/prefix mask): the GPC the token rows see
    instead of ``g_BD``. There, layer l > 1 receives the GPC that layer l - 1 computed from
    this whole window; the GPC row may read it, token rows must not, so they see the
    window's incoming GPC G_{i-1} (an extra row at position 0 whose output is dropped).

    Returns:
      (G'_i float[B, D], O^w_i float[B, W, D]).
    """
    b, w = mask_BW.shape
    gs = [g_BD] if g_tok_BD is None else [g_BD, g_tok_BD]
    ng = len(gs)
    rows_BRD = jnp.concatenate([g[:, None].astype(x_BWD.dtype) for g in gs] + [x_BWD], axis=1)
    hn_BRD = self.ln_in(rows_BRD).astype(self.dtype)
    positions = jnp.concatenate([jnp.zeros((ng,), jnp.int32), jnp.arange(1, w + 1)])[None]
    q, k, v = self._qkv(hn_BRD, positions)
    tok_BWR = self.window_rows_visible(mask_BW, win, prefix_B)  # [GPC; tokens] keys
    ones_B11 = jnp.ones((b, 1, 1), jnp.bool_)
    zeros_B11 = jnp.zeros((b, 1, 1), jnp.bool_)
    gpc_B1R = jnp.concatenate([ones_B11, mask_BW[:, None, :]], axis=-1)
    if ng == 2:  # row/col 0: the chain GPC (GPC row only); row/col 1: G_{i-1} (tokens only)
      gpc_B1R = jnp.concatenate([ones_B11, zeros_B11, mask_BW[:, None, :]], axis=-1)
      tok_BWR = jnp.concatenate([jnp.zeros((b, w, 1), jnp.bool_), tok_BWR], axis=-1)
      extra_B1R = jnp.concatenate([zeros_B11, ones_B11, jnp.zeros((b, 1, w), jnp.bool_)],
                                  axis=-1)
      gpc_B1R = jnp.concatenate([gpc_B1R, extra_B1R], axis=1)
    vis_B1RR = jnp.concatenate([gpc_B1R, tok_BWR], axis=1)[:, None]
    att = dot_product_attention(q, k, v, vis_B1RR)
    o_BRD = self._rows_out(att, hn_BRD)
    return o_BRD[:, 0], o_BRD[:, ng:]

  def _scan_step(self, carry, xs, prefix_B):
    x_BWD, mask_BW, win, keep_BD = xs
    gp_BD, ow_BWD = self.attend_window(carry["g"], x_BWD, mask_BW, win, prefix_B)
    if keep_BD is not None:
      gp_BD = gp_BD * keep_BD
    carry = self.update_gpc(carry, gp_BD, jnp.any(mask_BW, axis=-1))
    return carry, (carry["g"], carry["c"], ow_BWD)

  # ---------------------------------------------------------------- parallel implementation
  def _gpc_step(self, carry, xs):
    """The GPC row only: one query over [G_{i-1}; X_i] (O(W D + D^2))."""
    k_BWHK, v_BWHK, mask_BW, keep_BD = xs
    g_BD = carry["g"]
    gn_B1D = self.ln_in(g_BD[:, None]).astype(self.dtype)
    qg, kg, vg = self._qkv(gn_B1D, jnp.zeros((1, 1), jnp.int32))
    k = jnp.concatenate([kg, k_BWHK], axis=1)
    v = jnp.concatenate([vg, v_BWHK], axis=1)
    vis_B11R = jnp.concatenate([jnp.ones((mask_BW.shape[0], 1), jnp.bool_), mask_BW],
                               axis=-1)[:, None, None, :]
    gp_BD = self._rows_out(dot_product_attention(qg, k, v, vis_B11R), gn_B1D)[:, 0]
    if keep_BD is not None:
      gp_BD = gp_BD * keep_BD
    new = self.update_gpc(carry, gp_BD, jnp.any(mask_BW, axis=-1))
    return new, (new["g"], new["c"], kg[:, 0], vg[:, 0])

  # ---------------------------------------------------------------- the recurrence
  def recur(self, x_BNWD: Array, mask_BNW: Array, carry: dict, win0: Array,
            prefix_B: Array, keep_NBD: Array | None, impl: str, tokens: bool = True):
    """Runs the GPC recurrence over N windows starting at absolute window ``win0``.

    Args:
      x_BNWD: windowed layer input.
      mask_BNW: real-token mask.
      carry: state from :meth:`initial_carry` or a previous call.
      win0: absolute index of the first window (int scalar; positions for the masks).
      prefix_B: int[B] prefix lengths (prefix mask).
      keep_NBD: dropout multipliers for G'_i, or None.
      impl: 'scan' or 'parallel'.
      tokens: also compute the token outputs O^w (False: only the GPCs).

    Returns:
      (carry, gpcs float[B, N, D] = G_i after each window, cells float[B, N, D] = the raw
       GPC output G'_i of each window (kept from the last real window on pad windows),
       O^w float[B, N, W, D] or None).
    """
    n = x_BNWD.shape[1]
    if impl == "scan":
      wins_N = win0 + jnp.arange(n)
      mask_NBW = jnp.swapaxes(mask_BNW, 0, 1)
      scan = nn.scan(lambda mdl, c, xs, p: mdl._scan_step(c, xs, p),
                     variable_broadcast="params", split_rngs={"params": False},
                     in_axes=(0, nn.broadcast), out_axes=0, unroll=self.scan_unroll)
      carry, (g_NBD, c_NBD, ow_NBWD) = scan(
          self, carry, (jnp.swapaxes(x_BNWD, 0, 1), mask_NBW, wins_N, keep_NBD), prefix_B)
      ow = jnp.swapaxes(ow_NBWD, 0, 1) if tokens else None
      return carry, jnp.swapaxes(g_NBD, 0, 1), jnp.swapaxes(c_NBD, 0, 1), ow

    block = math.gcd(n, self.attention_block) if self.attention_block > 0 else n
    if block < n:  # Blocks of windows in a loop: each block's work at once (see below).
      return self._blocked_recur(x_BNWD, mask_BNW, carry, win0, prefix_B, keep_NBD, block,
                                 tokens)
    return self._parallel_recur(x_BNWD, mask_BNW, carry, win0, prefix_B, keep_NBD, tokens)

  def _blocked_recur(self, x_BNWD, mask_BNW, carry, win0, prefix_B, keep_NBD, block,
                     tokens):
    """impl='parallel' with ``attention_block`` k: a loop over N / k blocks of k windows,
    each running the whole parallel form (projections, the GPC rows' recurrence, the token
    attention) on its k windows, carrying G from block to block: the same recurrence, so
    the values and gradients of the all-windows form. Only one block's queries/keys/values
    (and logits) live at a time, which bounds the forward pass's memory by the block, not
    by L."""
    b, n, w, d = x_BNWD.shape
    g = n // block
    to_blocks = lambda a: jnp.swapaxes(a.reshape((b, g, block) + a.shape[2:]), 0, 1)
    keep_GbBD = None if keep_NBD is None else keep_NBD.reshape((g, block) + keep_NBD.shape[1:])

    def step(mdl, c, xs, prefix_B):
      x, m, w0, keep = xs
      c, g_BbD, c_BbD, ow = mdl._parallel_recur(x, m, c, w0, prefix_B, keep, tokens)
      return c, (g_BbD, c_BbD, ow)

    scan = nn.scan(step, variable_broadcast="params", split_rngs={"params": False},
                   in_axes=(0, nn.broadcast), out_axes=0)
    carry, (g_GBbD, c_GBbD, ow_GBbWD) = scan(
        self, carry, (to_blocks(x_BNWD), to_blocks(mask_BNW), win0 + block * jnp.arange(g),
                      keep_GbBD), prefix_B)
    from_blocks = lambda a: jnp.swapaxes(a, 0, 1).reshape((b, n) + a.shape[3:])
    ow = from_blocks(ow_GBbWD) if tokens else None
    return carry, from_blocks(g_GBbD), from_blocks(c_GBbD), ow

  def _parallel_recur(self, x_BNWD, mask_BNW, carry, win0, prefix_B, keep_NBD, tokens):
    """impl='parallel' over all N windows at once (see :meth:`recur`)."""
    b, n, w, _ = x_BNWD.shape
    wins_N = win0 + jnp.arange(n)
    mask_NBW = jnp.swapaxes(mask_BNW, 0, 1)
    hn_BNWD = self.ln_in(x_BNWD).astype(self.dtype)
    q, k, v = self._qkv(hn_BNWD, jnp.arange(1, w + 1)[None, None])
    scan = nn.scan(lambda mdl, c, xs: mdl._gpc_step(c, xs),
                   variable_broadcast="params", split_rngs={"params": False},
                   in_axes=0, out_axes=0, unroll=self.scan_unroll)
    carry, (g_NBD, c_NBD, kg_NBHK, vg_NBHK) = scan(
        self, carry, (jnp.swapaxes(k, 0, 1), jnp.swapaxes(v, 0, 1), mask_NBW, keep_NBD))
    g_BND, c_BND = jnp.swapaxes(g_NBD, 0, 1), jnp.swapaxes(c_NBD, 0, 1)
    if not tokens:
      return carry, g_BND, c_BND, None
    # Token rows of every window at once; the incoming GPC is key/value 0 of its window.
    hk = q.shape[-2:]
    k_all = jnp.concatenate([jnp.swapaxes(kg_NBHK, 0, 1)[:, :, None], k], axis=2)
    v_all = jnp.concatenate([jnp.swapaxes(vg_NBHK, 0, 1)[:, :, None], v], axis=2)
    vis_NBWR = jax.vmap(self.window_rows_visible, in_axes=(0, 0, None))(
        mask_NBW, wins_N, prefix_B)
    vis_BNWR = jnp.swapaxes(vis_NBWR, 0, 1)
    att = blocked_window_attention(q, k_all, v_all, vis_BNWR, 0)
    ow_BNWD = self._rows_out(att.reshape((b, n, w) + hk), hn_BNWD)
    return carry, g_BND, c_BND, ow_BNWD

  # ---------------------------------------------------------------- memory review
  def output(self, ow_BNWD: Array, mem_BMD: Array, mem_valid_BM: Array, mem_end_BM: Array,
             win0: Array, prefix_B: Array) -> Array:
    """The layer's token outputs: memory review, else the official output LayerNorm
    (``output_norm``), else O^w unchanged. float32[B, N, W, D]."""
    if self.memory_review:
      return self.review(ow_BNWD, mem_BMD, mem_valid_BM, mem_end_BM, win0, prefix_B)
    if self.output_norm:
      return self.ln_out(ow_BNWD)
    return ow_BNWD.astype(jnp.float32)

  def review(self, ow_BNWD: Array, mem_BMD: Array, mem_valid_BM: Array, mem_end_BM: Array,
             win0: Array, prefix_B: Array) -> Array:
    """Eq. 9: R = softmax(Q K^T / sqrt(d_k)) V with Q from O^w, K/V from the memory.

    The memory is S = [G_1..G_m] (``review_memory='gpc'``, the paper) or the raw cells
    [G'_1..G'_m] (``'cell'``, the authors' code). Memory entry m is the one produced by
    absolute window m; a token reads only the entries :func:`memory_visible` allows and never
    a window without real tokens. A token with no visible entry (the first window under the
    causal mask) gets a zero R. Output per ``review_residual``: 'add' O^w + R, 'none' R,
    'official' LN(act(W_o R + b_o) + GLU(Q)) (Q = act(W_q O^w + b_q), the projected query).

    Args:
      ow_BNWD: float[B, N, W, D] token outputs O^w.
      mem_BMD: float[B, M, D] memory entries.
      mem_valid_BM: bool[B, M] entries of windows with real tokens.
      mem_end_BM: int[B, M] one past the last position each entry's window may hold.
      win0: absolute index of window 0 of ``ow_BNWD``.
      prefix_B: int[B] prefix lengths (prefix mask).

    Returns:
      float32[B, N, W, D].
    """
    b, n, w, d = ow_BNWD.shape
    q_BLHK = self.review_query(ow_BNWD.reshape(b, n * w, d).astype(self.dtype))
    k_BMHK = self.review_key(mem_BMD.astype(self.dtype))
    v_BMHK = self.review_value(mem_BMD.astype(self.dtype))
    q_win_L = win0 + jnp.arange(n * w) // w
    vis_BLM = memory_visible(q_win_L, jnp.arange(mem_BMD.shape[1]), mem_end_BM,
                             self.mask_type, prefix_B) & mem_valid_BM[:, None, :]
    logits_BHLM = jnp.einsum("blhk,bmhk->bhlm", q_BLHK, k_BMHK,
                             preferred_element_type=jnp.float32)
    logits_BHLM = logits_BHLM / math.sqrt(q_BLHK.shape[-1])
    vis_B1LM = vis_BLM[:, None]
    logits_BHLM = jnp.where(vis_B1LM, logits_BHLM, -1e30)
    probs_BHLM = jax.nn.softmax(logits_BHLM, axis=-1)
    probs_BHLM = jnp.where(vis_B1LM, probs_BHLM, 0).astype(v_BMHK.dtype)
    rev_BLHK = jnp.einsum("bhlm,bmhk->blhk", probs_BHLM, v_BMHK)
    if self.review_residual == "official":
      o_BLD = self.review_out(rev_BLHK, d).astype(jnp.float32)
      q_BLD = q_BLHK.reshape(b, n * w, d)
      out_BLD = self.ln_review(o_BLD + self.glu_review(q_BLD).astype(jnp.float32))
      return out_BLD.reshape(b, n, w, d)
    rev_BLD = rev_BLHK.reshape(b, n * w, d).astype(jnp.float32)
    if self.review_residual == "add":
      rev_BLD = ow_BNWD.reshape(b, n * w, d).astype(jnp.float32) + rev_BLD
    return rev_BLD.reshape(b, n, w, d)


class RAN(nn.Module):
  """Recurrent Attention Network encoder (paper Eq. 1-11), see the module docstring.

  Attributes:
    num_layers: RAN layers.
    num_heads: heads of the window attention (pMHSA).
    head_dim: width per head (default D // num_heads).
    window_size: W, tokens per window.
    mask_type: 'bidirectional' (classification, tagging, MLM), 'causal' (LM) or 'prefix'
      (prefix-causal, seq2seq; the prefix is ``prefix_length`` tokens or the call's
      ``prefix_len_B``). Under every mask the GPC row reads its whole window (it only feeds
      later windows); token rows see the incoming GPC and the tokens the mask allows; memory
      review shows a token only the GPCs of windows it may fully see.
    prefix_length: default prefix length for mask_type='prefix'.
    impl: 'auto' (default: the fastest form for the backend, :func:`resolve_layout`),
      'parallel' (the GPC-only scan, token attention of all windows at once) or 'scan'
      (one full window attention per scan step). Same parameters, values and gradients.
    layer_mode: 'stacked' (the official code: each layer runs its own recurrence over all
      windows and, under the bidirectional mask, hands its final GPC to the next layer as
      G_0; every layer has its own memory review) or 'serial' (the paper's Sec. 4.5.2
      reading: inside each window the GPC passes through all layers before the next window;
      one memory review after the last layer). 'serial' always runs the 'scan' recurrence.
    pooling: 'max' (Eq. 11) or 'mean' (ablation).
    use_rotary: rotary positions restarting in every window (ablation: off).
    rotary_base: rotary wavelength base.
    rotary_layout: 'half' (features k and k + K/2 rotate together) or 'interleaved'
      (features 2i and 2i + 1, the authors' code).
    gpc_residual: 'paper' (Eq. 6), 'none' (ablation: G_i = LN(G'_i)) or 'official'
      (the authors' code: LN(G'_i + GLU(G'_{i-1})), the first window passes G'_1 on).
    block_residual: 'none' (the paper) or 'glu' (the official code: LN(A + GLU(input))).
    projection_activation: 'none' (the paper) or 'swish' (the official code's q/k/v/o and
      memory-review projections).
    memory_review: Eq. 7-9 on/off (ablation).
    review_heads: heads of the memory-review attention (1 is Eq. 9 as written).
    review_residual: 'add' (O = O^w + R), 'none' (Eq. 9 literally: O = R) or 'official'
      (the authors' code: O = LN(act(W_o R + b_o) + GLU(Q)), Q the projected query).
    review_memory: what memory review reads: 'gpc' (S = [G_1..G_m], the paper) or 'cell'
      (the raw cells G'_i as each window's attention emits them after SN, before the GPC
      residual: the authors' code).
    output_norm: without memory review, LayerNorm each layer's token outputs (the authors'
      code); no effect when memory_review is on.
    min_window_size: a row whose last window holds fewer real tokens than this (and which has
      2+ windows) merges it into the previous window (the authors' code: 16); 0 never merges.
      Per row, from its real length, so padding does not change the windows. Must be below
      window_size. Streaming needs 0.
    layer_norm: 'standard' LayerNorm (epsilon 1e-6) or 'official' (the authors' langml
      LayerNorm: (x - mean) / sqrt(mean(x^2) + 1e-7) * scale + bias), for every LayerNorm
      of the encoder.
    sn_kind: 'standard' (Eq. 5: (x - mean) / sqrt(var + sn_epsilon)) or 'official'
      ((x - mean) / sqrt(mean(x^2) + sn_epsilon), rannet/utils.py).
    input_norm: LayerNorm the input embeddings first (the authors' Embedding-LayerNorm).
    pooled_output: 'paper' (Eq. 10: W^g G_m + W^o pool(O) + b) or 'official' (the authors'
      classification features: GLU(Dropout(swish(W^g G_m + b^g))) + W^o pool(O) + b^o;
      the task head's dropout + Dense(C) complete their head).
    dropout_rate: dropout on G'_i and on the layer outputs (training only).
    pool_dropped: the pooled features read the last layer's outputs after their dropout (the
      authors' code) instead of before it (default). Training only: evaluation is the same
      either way. With max pooling, dropout's zeros bound every feature's training-time
      max from below by 0, which evaluation never sees, and a model can come to rely on it:
      on ListOps (seed 1, docs/reproduction.md section 2) the same checkpoint scored 36%
      with the output dropout on and 24% without it.
    sn_epsilon: epsilon of the standard normalisation SN.
    attention_block: impl='parallel': windows per block; 0 = all windows in one block (one
      batched call each for the projections and the token attention: best on GPUs), k > 0
      = a loop over blocks of k windows (gcd(k, windows) when k does not divide them), each
      block's projections, GPC rows and token attention at once. Only one block's
      queries/keys/values live at a time, so the memory is about the scan's (forward
      1.00-1.04x with k = 1, training 1.02-1.04x; all windows: 1.8-4.1x / 1.24-1.32x;
      docs/benchmarks.md "RAN: the parallel form in blocks of windows"). None (default) =
      the backend's best (1 on CPU, 0 elsewhere; :func:`resolve_layout`). Given with
      impl='auto', it selects the parallel form on every backend. Same values.
    scan_unroll: windows per iteration of the compiled loop over windows (``nn.scan``'s
      ``unroll``; every impl and layer mode); None (default) = the backend's best
      (:func:`resolve_unroll`: 8 on GPUs, 1 elsewhere). Larger values trade compile time
      for fewer loop iterations, which a GPU pays per window: at L=16k on an H100, 8 makes
      the GPU layout's forward+backward 1.5x faster (docs/benchmarks.md, "GPU: RAN's loop
      over windows unrolled"). Same values and gradients.
    dtype: compute dtype; norms, SN and softmax in float32.
    param_dtype: parameter dtype.
  """
  input_kind = "embeddings"  # Called as encoder(x_BLD, mask_BL) (encoders/base.py).
  num_layers: int = 2
  num_heads: int = 4
  head_dim: int | None = None
  window_size: int = 64
  mask_type: str = "bidirectional"
  prefix_length: int = 0
  impl: str = "auto"
  layer_mode: str = "stacked"
  pooling: str = "max"
  use_rotary: bool = True
  rotary_base: float = 10_000.0
  rotary_layout: str = "half"
  gpc_residual: str = "paper"
  block_residual: str = "none"
  projection_activation: str = "none"
  memory_review: bool = True
  review_heads: int = 1
  review_residual: str = "add"
  review_memory: str = "gpc"
  output_norm: bool = False
  min_window_size: int = 0
  layer_norm: str = "standard"
  sn_kind: str = "standard"
  input_norm: bool = False
  pooled_output: str = "paper"
  dropout_rate: float = 0.0
  pool_dropped: bool = False
  sn_epsilon: float = 1e-6
  attention_block: int | None = None
  scan_unroll: int | None = None
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @property
  def unroll(self) -> int:
    """The loop unroll this module runs: ``scan_unroll``, None resolved for the default
    backend (:func:`resolve_unroll`)."""
    return resolve_unroll(self.scan_unroll)

  @property
  def layout(self) -> tuple[str, int]:
    """The (impl, attention_block) this module runs: 'auto'/None resolved for the default
    backend (:func:`resolve_layout`)."""
    return resolve_layout(self.impl, self.attention_block)

  def setup(self):
    """Checks the fields, then builds the layers, the input norm and the pooled head (Eq. 10)."""
    self._check()
    kw = dict(dtype=self.dtype, param_dtype=self.param_dtype)
    outputs = lambda i: self.layer_mode == "stacked" or i == self.num_layers - 1
    self.layers = [RANLayer(
        num_heads=self.num_heads, head_dim=self.head_dim, window_size=self.window_size,
        mask_type=self.mask_type, use_rotary=self.use_rotary, rotary_base=self.rotary_base,
        gpc_residual=self.gpc_residual, block_residual=self.block_residual,
        projection_activation=self.projection_activation,
        memory_review=self.memory_review and outputs(i),
        review_heads=self.review_heads, review_residual=self.review_residual,
        sn_epsilon=self.sn_epsilon, attention_block=self.layout[1],
        scan_unroll=self.unroll,
        layer_norm=self.layer_norm, sn_kind=self.sn_kind, review_memory=self.review_memory,
        rotary_layout=self.rotary_layout, output_norm=self.output_norm and outputs(i), **kw)
                   for i in range(self.num_layers)]
    if self.input_norm:
      self.ln_input = _layer_norm(self.param_dtype, self.layer_norm)
    official = self.pooled_output == "official"
    self.gpc_out = SameWidthDense(use_bias=official, **kw)  # W^g of Eq. 10
    if official:
      self.gpc_glu = Glu(**kw)
    self.pool_out = SameWidthDense(use_bias=True, **kw)  # W^o and b^o of Eq. 10

  def _check(self):
    for field, value, allowed in (
        ("mask_type", self.mask_type, MASK_TYPES), ("impl", self.impl, IMPLS),
        ("layer_mode", self.layer_mode, LAYER_MODES),
        ("pooling", self.pooling, tuple(POOLINGS)),
        ("gpc_residual", self.gpc_residual, GPC_RESIDUALS),
        ("block_residual", self.block_residual, BLOCK_RESIDUALS),
        ("projection_activation", self.projection_activation, tuple(ACTIVATIONS)),
        ("review_residual", self.review_residual, REVIEW_RESIDUALS),
        ("review_memory", self.review_memory, REVIEW_MEMORIES),
        ("layer_norm", self.layer_norm, NORM_KINDS), ("sn_kind", self.sn_kind, NORM_KINDS),
        ("rotary_layout", self.rotary_layout, ROTARY_LAYOUTS),
        ("pooled_output", self.pooled_output, POOLED_OUTPUTS)):
      if value not in allowed:
        raise ValueError(f"RAN.{field} must be one of {allowed}, got {value!r}")
    if not 0 <= self.min_window_size < max(self.window_size, 1):
      raise ValueError(f"RAN.min_window_size must be in [0, window_size={self.window_size}), "
                       f"got {self.min_window_size}")
    if self.min_window_size > 1 and self.mask_type != "bidirectional":
      # Whether a short last window joins the previous one depends on how many tokens
      # follow: a token's output would read the document's length (the authors' code does).
      raise ValueError(f"RAN.min_window_size={self.min_window_size} with mask_type="
                       f"{self.mask_type!r}: merging a short last window reads the document's "
                       "length, which a causal or prefix model must not see (a prefix scored "
                       "alone would differ from the same tokens inside a longer document); "
                       "set min_window_size=0")
    if self.num_layers < 1 or self.window_size < 1 or self.review_heads < 1:
      raise ValueError(f"RAN: num_layers ({self.num_layers}), window_size "
                       f"({self.window_size}) and review_heads ({self.review_heads}) must "
                       "be >= 1")
    if self.scan_unroll is not None and self.scan_unroll < 1:
      raise ValueError(f"RAN.scan_unroll must be None (auto) or >= 1 (windows per "
                       f"iteration of the loop over windows), got {self.scan_unroll}")
    if self.attention_block is not None and self.attention_block < 0:
      raise ValueError(f"RAN.attention_block must be None (auto) or >= 0, got "
                       f"{self.attention_block}")
    if not 0.0 <= self.dropout_rate < 1.0:
      raise ValueError(f"RAN.dropout_rate must be in [0, 1), got {self.dropout_rate}")

  def _check_width(self, d_model: int) -> None:
    head_dim = self.head_dim or d_model // self.num_heads
    if self.head_dim is None and d_model % self.num_heads:
      raise ValueError(f"RAN: width {d_model} not divisible by num_heads={self.num_heads}")
    if self.use_rotary and head_dim % 2:
      raise ValueError(f"RAN: rotary positions need an even head width, got {head_dim}")
    if self.memory_review and d_model % self.review_heads:
      raise ValueError(f"RAN: width {d_model} not divisible by review_heads="
                       f"{self.review_heads}")

  @property
  def causal(self) -> bool:
    """True for the causal (LM) mask; build_model's check for task 'lm'."""
    return self.mask_type == "causal"

  def _handoff(self) -> bool:
    # Only the bidirectional mask may start layer l+1 from layer l's final GPC: under a
    # causal or prefix mask that GPC has read tokens the first windows must not see.
    return self.layer_mode == "stacked" and self.mask_type == "bidirectional"

  def _prefix(self, batch: int, prefix_len_B: Array | None) -> Array:
    if prefix_len_B is None:
      return jnp.full((batch,), self.prefix_length, jnp.int32)
    if self.mask_type != "prefix":
      raise ValueError("RAN: prefix_len_B is only used with mask_type='prefix'")
    return jnp.asarray(prefix_len_B, jnp.int32).reshape(batch)

  def _keep(self, shape, deterministic: bool):
    if deterministic or self.dropout_rate == 0.0:
      return None
    keep = jax.random.bernoulli(self.make_rng("dropout"), 1.0 - self.dropout_rate, shape)
    return keep.astype(jnp.float32) / (1.0 - self.dropout_rate)

  def _dropout(self, x, deterministic: bool):
    keep = self._keep(x.shape, deterministic)
    return x if keep is None else x * keep

  def _serial_recur(self, x_BNWD, mask_BNW, carries, win0, prefix_B, keeps):
    """Serial stacking: per window, the GPC passes through every layer (scan only).
    Returns (carries, G_i [B, N, D], the last layer's raw cells [B, N, D], O^w)."""
    def step(mdl, cs, xs, prefix_B):
      x_BWD, mask_BW, win, keep_LBD = xs
      valid_B = jnp.any(mask_BW, axis=-1)
      g_BD, new_cs = cs[0]["g"], []
      g_tok_BD = None if mdl.mask_type == "bidirectional" else g_BD
      for l, layer in enumerate(mdl.layers):
        gp_BD, x_BWD = layer.attend_window(g_BD, x_BWD.astype(mdl.dtype), mask_BW, win,
                                           prefix_B, g_tok_BD if l else None)
        if keep_LBD is not None:
          gp_BD = gp_BD * keep_LBD[l]
        c = layer.update_gpc(dict(cs[l], g=g_BD), gp_BD, valid_B)
        g_BD = c["g"]
        new_cs.append(c)
      # Every layer's carry holds the window's final GPC, the next window's input GPC.
      new_cs = [dict(c, g=g_BD) for c in new_cs]
      return new_cs, (g_BD, new_cs[-1]["c"], x_BWD)

    n = x_BNWD.shape[1]
    scan = nn.scan(step, variable_broadcast="params", split_rngs={"params": False},
                   in_axes=(0, nn.broadcast), out_axes=0, unroll=self.unroll)
    carries, (g_NBD, c_NBD, ow_NBWD) = scan(self, carries, (
        jnp.swapaxes(x_BNWD, 0, 1), jnp.swapaxes(mask_BNW, 0, 1), win0 + jnp.arange(n),
        keeps), prefix_B)
    return (carries, jnp.swapaxes(g_NBD, 0, 1), jnp.swapaxes(c_NBD, 0, 1),
            jnp.swapaxes(ow_NBWD, 0, 1))

  def _windows(self, x_BLD: Array, mask_BL: Array):
    """Pads L up to N * W and reshapes to windows; pad rows are zeroed."""
    b, length, d = x_BLD.shape
    w = self.window_size
    n = -(-length // w)
    pad = n * w - length
    x_BLD = jnp.pad(x_BLD, ((0, 0), (0, pad), (0, 0)))
    mask_BL = jnp.pad(mask_BL, ((0, 0), (0, pad)))
    x_BLD = jnp.where(mask_BL[..., None], x_BLD, 0)
    return x_BLD.reshape(b, n, w, d), mask_BL.reshape(b, n, w)

  def _memory(self, gpcs_BND: Array, cells_BND: Array) -> Array:
    return cells_BND if self.review_memory == "cell" else gpcs_BND

  def classify(self, g_BD: Array, pooled_BD: Array, deterministic: bool = True) -> Array:
    """Eq. 10: O_clf = W^g G_m + W^o O^p + b^o (``pooled_output='paper'``), or the authors'
    GLU(Dropout(swish(W^g G_m + b^g))) + W^o O^p + b^o ('official'). float32[B, D]."""
    g_BD = g_BD.astype(self.dtype)
    if self.pooled_output == "official":
      h_BD = self._dropout(nn.swish(self.gpc_out(g_BD)), deterministic)
      gpc_BD = self.gpc_glu(h_BD.astype(self.dtype))
    else:
      gpc_BD = self.gpc_out(g_BD)
    return (gpc_BD + self.pool_out(pooled_BD.astype(self.dtype))).astype(jnp.float32)

  def __call__(self, x_BLD: Array, mask_BL: Array, deterministic: bool = True,
               prefix_len_B: Array | None = None) -> EncoderOutput:
    """Encodes a batch; see :class:`RAN`.

    Args:
      x_BLD: float[B, L, D] embedded tokens (right-padded).
      mask_BL: bool[B, L], True on real tokens.
      deterministic: no dropout when True.
      prefix_len_B: int[B] prefix lengths for mask_type='prefix' (default: prefix_length).

    Returns:
      EncoderOutput(sequence = O (zero at pads), pooled = O_clf of Eq. 10).
    """
    check_encoder_inputs(x_BLD, mask_BL, "RAN")
    b, length, d = x_BLD.shape
    self._check_width(d)
    prefix_B = self._prefix(b, prefix_len_B)
    if self.input_norm:
      x_BLD = self.ln_input(x_BLD)
    merge = self.min_window_size > 1
    idx_NS, mask_BNW, end_BN, flat_BL = window_layout(mask_BL, self.window_size,
                                                      self.min_window_size)
    n, w = idx_NS.shape
    if merge:  # Per-row windows: gather the tokens into their slots.
      x_BNWD = constrain(x_BLD).astype(self.dtype)[:, idx_NS]
      x_BNWD = jnp.where(mask_BNW[..., None], x_BNWD, 0)
    else:  # Fixed windows: pad and reshape.
      x_BNWD, _ = self._windows(constrain(x_BLD).astype(self.dtype), mask_BL)
    x_BNWD = constrain(x_BNWD, _WINDOWED)
    valid_BN = jnp.any(mask_BNW, axis=-1)
    zero = jnp.zeros((), jnp.int32)
    if self.layer_mode == "serial":
      if self.impl == "parallel":  # Asked for explicitly ('auto' falls back silently).
        warnings.warn("RAN: layer_mode='serial' has no parallel form (layer l's token rows "
                      "depend on layer l-1's GPC); running impl='scan'", stacklevel=2)
      c0 = self.layers[0].initial_carry(b, d)
      carries = [dict(c0) for _ in self.layers]
      keeps = self._keep((n, self.num_layers, b, d), deterministic)
      carries, s_BND, c_BND, ow_BNWD = self._serial_recur(x_BNWD, mask_BNW, carries, zero,
                                                          prefix_B, keeps)
      self.sow("intermediates", "gpcs", s_BND)
      o_BNWD = self.layers[-1].output(ow_BNWD, self._memory(s_BND, c_BND), valid_BN, end_BN,
                                      zero, prefix_B)
      clean_BNWD = o_BNWD
      o_BNWD = self._dropout(o_BNWD, deterministic)
      g_BD = carries[-1]["g"]
    else:
      g_BD = None
      for layer in self.layers:
        carry = layer.initial_carry(b, d, g_BD if self._handoff() else None)
        keep = self._keep((n, b, d), deterministic)
        carry, s_BND, c_BND, ow_BNWD = layer.recur(x_BNWD, mask_BNW, carry, zero, prefix_B,
                                                   keep, self.layout[0])
        self.sow("intermediates", "gpcs", s_BND)
        o_BNWD = layer.output(ow_BNWD, self._memory(s_BND, c_BND), valid_BN, end_BN, zero,
                              prefix_B)
        clean_BNWD = o_BNWD
        o_BNWD = self._dropout(o_BNWD, deterministic)
        x_BNWD = jnp.where(mask_BNW[..., None], o_BNWD, 0).astype(self.dtype)
        x_BNWD = constrain(x_BNWD, _WINDOWED)
        g_BD = carry["g"]
    def unwindow(o_BNWD):
      seq_BLD = o_BNWD.reshape(b, n * w, d)
      seq_BLD = (jnp.take_along_axis(seq_BLD, flat_BL[..., None], axis=1) if merge
                 else seq_BLD[:, :length])
      return constrain(jnp.where(mask_BL[..., None], seq_BLD, 0).astype(jnp.float32))
    seq_BLD = unwindow(o_BNWD)
    # The pooled path reads the outputs before their dropout (see pool_dropped); with the
    # dropout off, _dropout hands back its input and there is one array to unwindow.
    pool_in_BLD = (seq_BLD if self.pool_dropped or clean_BNWD is o_BNWD
                   else unwindow(clean_BNWD))
    self.sow("intermediates", "pool_input", pool_in_BLD)
    pooled_BD = self.classify(g_BD, POOLINGS[self.pooling](pool_in_BLD, mask_BL), deterministic)
    return encoder_output(seq_BLD, pooled_BD)

  # ------------------------------------------------------------------ streaming
  @property
  def num_stream_stages(self) -> int:
    """Passes over the document that streaming needs (see :meth:`encode_chunk`).

    1 when nothing needs the future: causal mask (memory review only reads earlier
    windows, each layer starts from its own G_0), or no memory review and no GPC handoff.
    Otherwise each layer's memory S (and, stacked + bidirectional, its final GPC for the next
    layer) must be complete before anything reads it: stacked needs num_layers + 1 passes
    (pass s completes layer s), serial needs 2 (GPCs, then outputs).
    """
    needs_memory = self.memory_review and self.mask_type != "causal"
    if not (needs_memory or self._handoff()):
      return 1
    return self.num_layers + 1 if self.layer_mode == "stacked" else 2

  def init_stream(self, batch_size: int, d_model: int, max_len: int,
                  prefix_len_B: Array | None = None) -> dict:
    """The streaming state before the first chunk.

    Args:
      batch_size: B.
      d_model: D.
      max_len: an upper bound on the document length (sizes the GPC memory buffers).
      prefix_len_B: int[B] prefix lengths for mask_type='prefix' (default prefix_length).

    Returns:
      A pytree: per layer its recurrent carry, GPC memory [B, M, D] with validity, and the
      final GPC of a completed pass; the next window index; pooling accumulators.
    """
    self._check_width(d_model)
    if self.min_window_size > 0:
      raise ValueError("RAN streaming needs min_window_size=0 (merging a short last window "
                       f"needs the document's length up front), got {self.min_window_size}")
    m = -(-max_len // self.window_size)
    layers = []
    for l in range(self.num_layers):
      layers.append({"carry": self._start_carry(l, batch_size, d_model, None),
                     "mem": jnp.zeros((batch_size, m, d_model), jnp.float32),
                     "mem_valid": jnp.zeros((batch_size, m), jnp.bool_),
                     "g_final": jnp.zeros((batch_size, d_model), jnp.float32)})
    return {"layers": layers, "win": jnp.zeros((), jnp.int32),
            "prefix": self._prefix(batch_size, prefix_len_B),
            "pool_max": jnp.full((batch_size, d_model), jnp.finfo(jnp.float32).min),
            "pool_sum": jnp.zeros((batch_size, d_model), jnp.float32),
            "count": jnp.zeros((batch_size,), jnp.int32)}

  def _start_carry(self, l: int, b: int, d: int, prev_final_g: Array | None) -> dict:
    """Layer l's carry at the document start, as in the one-shot path."""
    if self.layer_mode == "serial":
      return self.layers[0].initial_carry(b, d)  # one GPC enters layer 0 of window 1
    if self._handoff() and l > 0:
      g = jnp.zeros((b, d), jnp.float32) if prev_final_g is None else prev_final_g
      return self.layers[l].initial_carry(b, d, g)  # layer l - 1's final GPC
    return self.layers[l].initial_carry(b, d)

  def begin_stage(self, state: dict, stage: int) -> dict:
    """Rewinds ``state`` to the document's start for pass ``stage`` (0-based), keeping the
    memories completed so far. Call before the first chunk of every pass but the first."""
    if not 0 <= stage < self.num_stream_stages:
      raise ValueError(f"RAN: stage {stage} out of range({self.num_stream_stages})")
    b, d = state["pool_sum"].shape
    layers = [dict(s) for s in state["layers"]]
    if stage > 0 and self.layer_mode == "stacked":
      # The previous pass completed layer stage - 1: keep its final GPC for the handoff.
      layers[stage - 1]["g_final"] = layers[stage - 1]["carry"]["g"]
    for l in range(self.num_layers):
      layers[l]["carry"] = self._start_carry(l, b, d, layers[l - 1]["g_final"] if l else None)
    return dict(state, layers=layers, win=jnp.zeros((), jnp.int32),
                pool_max=jnp.full((b, d), jnp.finfo(jnp.float32).min),
                pool_sum=jnp.zeros((b, d), jnp.float32),
                count=jnp.zeros((b,), jnp.int32))

  @staticmethod
  def _write(mem: dict, s_BND: Array, valid_BN: Array, win: Array) -> dict:
    m = mem["mem"].shape[1]
    n = s_BND.shape[1]
    try:
      end = int(win) + n
    except (TypeError, jax.errors.ConcretizationTypeError):
      end = None  # traced: the caller promised max_len
    if end is not None and end > m:
      raise ValueError(f"RAN streaming: document exceeds max_len ({m} windows)")
    zero = jnp.zeros((), jnp.int32)
    return dict(mem,
                mem=jax.lax.dynamic_update_slice(mem["mem"], s_BND.astype(jnp.float32),
                                                 (zero, win, zero)),
                mem_valid=jax.lax.dynamic_update_slice(mem["mem_valid"], valid_BN,
                                                       (zero, win)))

  def encode_chunk(self, x_BLD: Array, mask_BL: Array, state: dict, stage: int = 0
                   ) -> tuple[Array | None, dict]:
    """Encodes the next L tokens of a streamed document (inference, no dropout).

    The document is fed in order as chunks whose length L is a multiple of window_size
    (pad the last chunk, mask False). With ``num_stream_stages == 1`` one pass gives the
    outputs. Otherwise run passes 0 .. num_stream_stages - 1 over the same chunks, calling
    :meth:`begin_stage` before each pass after the first; only the last pass returns
    outputs. Each call holds one chunk's activations plus O(document length / W * D) of GPC memory.
    :func:`stream_encode` drives all of this.

    Returns:
      (sequence float[B, L, D] (zero at pads) in the last pass, else None; new state).
    """
    check_encoder_inputs(x_BLD, mask_BL, "RAN.encode_chunk")
    b, c, d = x_BLD.shape
    w = self.window_size
    if c % w:
      raise ValueError(f"RAN streaming: chunk length {c} is not a multiple of "
                       f"window_size={w}; pad the chunk (mask False)")
    stages = self.num_stream_stages
    if not 0 <= stage < stages:
      raise ValueError(f"RAN: stage {stage} out of range({stages})")
    final = stage == stages - 1
    if self.input_norm:
      x_BLD = self.ln_input(x_BLD)
    x_BNWD, mask_BNW = self._windows(x_BLD.astype(self.dtype), mask_BL)
    valid_BN = jnp.any(mask_BNW, axis=-1)
    win, prefix_B = state["win"], state["prefix"]
    layers = [dict(s) for s in state["layers"]]
    m = layers[0]["mem"].shape[1]
    mem_end_BM = jnp.broadcast_to((jnp.arange(m) + 1) * self.window_size, (b, m))
    o_BNWD = None
    if self.layer_mode == "serial":
      carries, s_BND, c_BND, ow_BNWD = self._serial_recur(
          x_BNWD, mask_BNW, [s["carry"] for s in layers], win, prefix_B, None)
      for s, cr in zip(layers, carries):
        s["carry"] = cr
      if stages == 1 or not final:
        layers[-1] = self._write(layers[-1], self._memory(s_BND, c_BND), valid_BN, win)
      if final:
        last = layers[-1]
        o_BNWD = self.layers[-1].output(ow_BNWD, last["mem"], last["mem_valid"], mem_end_BM,
                                        win, prefix_B)
    else:
      for l, layer in enumerate(self.layers):
        collect = stages > 1 and l == stage and not final
        carry, s_BND, c_BND, ow_BNWD = layer.recur(x_BNWD, mask_BNW, layers[l]["carry"], win,
                                                   prefix_B, None, self.layout[0],
                                                   tokens=not collect)
        layers[l]["carry"] = carry
        if stages == 1 or collect:
          layers[l] = self._write(layers[l], self._memory(s_BND, c_BND), valid_BN, win)
        if collect:
          break
        o_BNWD = layer.output(ow_BNWD, layers[l]["mem"], layers[l]["mem_valid"], mem_end_BM,
                              win, prefix_B)
        x_BNWD = jnp.where(mask_BNW[..., None], o_BNWD, 0).astype(self.dtype)
    new = dict(state, layers=layers, win=win + x_BNWD.shape[1])
    if not final:
      return None, new
    seq_BLD = jnp.where(mask_BL[..., None], o_BNWD.reshape(b, c, d), 0).astype(jnp.float32)
    m = mask_BL[..., None]
    new["pool_max"] = jnp.maximum(state["pool_max"], jnp.max(
        jnp.where(m, seq_BLD, jnp.finfo(jnp.float32).min), axis=1))
    new["pool_sum"] = state["pool_sum"] + jnp.sum(seq_BLD, axis=1)
    new["count"] = state["count"] + jnp.sum(mask_BL, axis=1).astype(jnp.int32)
    return seq_BLD, new

  def finish_stream(self, state: dict) -> Array:
    """The pooled output O_clf (Eq. 10) after the last pass."""
    seen_B1 = state["count"][:, None] > 0
    if self.pooling == "max":
      pooled_BD = jnp.where(seen_B1, state["pool_max"], 0)
    else:
      pooled_BD = state["pool_sum"] / jnp.maximum(state["count"][:, None], 1)
    return self.classify(state["layers"][-1]["carry"]["g"], pooled_BD)


def stream_encode(model: RAN, variables, chunks: Callable[[], Iterable[tuple[Array, Array]]],
                  batch_size: int, d_model: int, max_len: int,
                  prefix_len_B: Array | None = None, jit: bool = True
                  ) -> tuple[list[Array], Array]:
  """Encodes a document fed as chunks; equals ``model.apply(variables, x, mask)``.

  Args:
    model: a RAN.
    variables: its variables.
    chunks: called once per pass, returns an iterable of (x float[B, L, D], mask bool[B, L])
      chunks in document order (L a multiple of window_size; e.g. read from disk).
    batch_size, d_model: B and D.
    max_len: upper bound on the document length.
    prefix_len_B: prefix lengths for mask_type='prefix'.
    jit: compile the per-chunk step (one compilation per chunk shape and pass).

  Returns:
    (the sequence outputs per chunk, pooled float[B, D]).
  """
  def call(method, *args, **kw):
    return model.apply(variables, *args, method=method, **kw)

  encode = (jax.jit(lambda x, m, s, stage: call(RAN.encode_chunk, x, m, s, stage),
                    static_argnums=3) if jit else
            (lambda x, m, s, stage: call(RAN.encode_chunk, x, m, s, stage)))
  state = call(RAN.init_stream, batch_size, d_model, max_len, prefix_len_B)
  outputs = []
  for stage in range(model.num_stream_stages):
    if stage:
      state = call(RAN.begin_stage, state, stage)
    for x_BLD, mask_BL in chunks():
      seq, state = encode(x_BLD, mask_BL, state, stage)
      if seq is not None:
        outputs.append(seq)
  return outputs, call(RAN.finish_stream, state)
