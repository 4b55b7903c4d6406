"""Multi-head attention: ``jax.nn.dot_product_attention`` or, on CPUs, a heads-major form.

On XLA:CPU the batched matmuls of attention run fastest with the batch axes (batch, heads)
leading both operands; ``jax.nn.dot_product_attention`` contracts [B, T, H, K] operands as
they are, which costs transposed copies inside the forward and backward passes. The
'heads_major' implementation moves the heads axis first once, then runs the two matmuls and
the float32 softmax (same function; docs/benchmarks.md "Attention on CPU" has the
measurement). The 'blocked' implementation computes the same heads-major attention a block of
batch rows (or queries) at a time and recomputes each block's probabilities in the backward
pass: for large [B, H, T, S] logits it is faster on CPU (the softmax's passes stay in the
caches) and keeps no probabilities for the backward ("Attention on CPU in blocks").
``implementation=None`` picks one of the two on CPU by the logits' size and leaves the choice
to JAX elsewhere.
"""
from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax.layers import partitioning
from longtext_jax.layers.rotary import apply_rotary

Array = jax.Array


def padding_mask(q_mask_BT: Array, kv_mask_BS: Array) -> Array:
  """bool[B, 1, T, S]: query t may attend key s when s is a real token.

  Pad queries still attend to real keys (their outputs are discarded by the encoders);
  this keeps every row of the softmax non-empty and so free of NaNs.
  """
  del q_mask_BT
  return kv_mask_BS[:, None, None, :]


def causal_mask(length: int) -> Array:
  """bool[1, 1, L, L] lower-triangular."""
  return jnp.tril(jnp.ones((length, length), jnp.bool_))[None, None]


class MultiHeadAttention(nn.Module):
  """Multi-head (self- or cross-) attention with optional rotary positions.

  Attributes:
    num_heads: number of heads H.
    head_dim: width K of each head; defaults to D // H.
    use_rotary: rotate queries and keys by their positions.
    rotary_base: wavelength base of the rotary embedding.
    use_bias: biases on the q/k/v/o projections.
    dtype: compute dtype; the softmax runs in float32 whatever this is.
    param_dtype: parameter dtype.
    implementation: one of ``IMPLEMENTATIONS``: None (default: on CPU 'heads_major', or
      'blocked' for logits over ``AUTO_BLOCKED_BYTES``; JAX's choice elsewhere),
      'heads_major', 'blocked', or a ``jax.nn.dot_product_attention``
      implementation ('xla'; 'cudnn' selects the fused kernel on GPUs, for right-padding
      key masks: see :func:`key_padding_attention`).
  """
  num_heads: int
  head_dim: int | None = None
  use_rotary: bool = False
  rotary_base: float = 10_000.0
  use_bias: bool = True
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  kernel_init: Any = nn.initializers.xavier_uniform()
  implementation: str | None = None
  # Name parameter axes ('embed', 'heads', 'kv') always; False names them only inside
  # ``partitioning.logical_axis_names()`` (as the trainer does).
  logical_axes: bool = False

  @nn.compact
  def __call__(self, xq_BTD: Array, xkv_BSD: Array, mask: Array | None = None,
               q_positions: Array | None = None,
               kv_positions: Array | None = None) -> Array:
    """Args: queries' and keys' inputs, a bool mask broadcastable to [B, H, T, S],
    and positions ([B, T], [B, S]) when rotary is on. Returns float[B, T, D_out]."""
    d_model = xq_BTD.shape[-1]
    head_dim = self.head_dim or d_model // self.num_heads
    if self.head_dim is None and d_model % self.num_heads:
      raise ValueError(f"width {d_model} is not divisible by num_heads={self.num_heads}")
    names = _namer(self.logical_axes)
    proj = lambda name: nn.DenseGeneral(
        (self.num_heads, head_dim), use_bias=self.use_bias, dtype=self.dtype,
        param_dtype=self.param_dtype,
        kernel_init=names(self.kernel_init, ("embed", "heads", "kv")),
        bias_init=names(nn.initializers.zeros_init(), ("heads", "kv")), name=name)
    q_BTHK = proj("query")(xq_BTD)
    k_BSHK = proj("key")(xkv_BSD)
    v_BSHK = proj("value")(xkv_BSD)
    if self.use_rotary:
      if q_positions is None or kv_positions is None:
        raise ValueError("rotary attention needs q_positions and kv_positions")
      q_BTHK = apply_rotary(q_BTHK, q_positions, self.rotary_base)
      k_BSHK = apply_rotary(k_BSHK, kv_positions, self.rotary_base)
    out_BTHK = dot_product_attention(q_BTHK, k_BSHK, v_BSHK, mask, self.implementation)
    return nn.DenseGeneral(d_model, axis=(-2, -1), use_bias=self.use_bias, dtype=self.dtype,
                           param_dtype=self.param_dtype,
                           kernel_init=names(self.kernel_init, ("heads", "kv", "embed")),
                           bias_init=names(nn.initializers.zeros_init(), ("embed",)),
                           name="out")(out_BTHK)


def _namer(enabled: bool):
  """init, names -> init boxed with logical axis names when ``enabled`` or when naming is on
  (``partitioning.logical_axis_names``); otherwise unchanged."""
  return lambda init, names: partitioning.named(init, names, force=enabled)


IMPLEMENTATIONS = (None, "heads_major", "blocked", "xla", "cudnn")


# The CPU default's switch to :func:`blocked_attention`: float32 logits [B, H, T, S] larger
# than this (docs/benchmarks.md, "Attention on CPU in blocks").
AUTO_BLOCKED_BYTES = 32 << 20


def resolve_implementation(implementation: str | None, backend: str | None = None,
                           logits_bytes: int | None = None) -> str | None:
  """The implementation :func:`dot_product_attention` runs: None becomes 'heads_major' on
  CPU (``backend``, default ``jax.default_backend()``), or 'blocked' there when the
  attention's logits take more than ``AUTO_BLOCKED_BYTES`` (``logits_bytes``, when known),
  and stays None (JAX's choice) elsewhere.

  Raises:
    ValueError: ``implementation`` is not one of ``IMPLEMENTATIONS``.
  """
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"attention implementation must be one of {IMPLEMENTATIONS}, got "
                     f"{implementation!r}")
  if implementation is None and (backend or jax.default_backend()) == "cpu":
    big = logits_bytes is not None and logits_bytes > AUTO_BLOCKED_BYTES
    return "blocked" if big else "heads_major"
  return implementation


def heads_major_attention(q_BTHK: Array, k_BSHK: Array, v_BSHK: Array, mask: Array | None,
                          probs_fn: Callable[[Array], Array] | None = None) -> Array:
  """Scaled dot-product attention with the heads axis moved first for the two matmuls.

  Logits and softmax in float32, or float64 for float64 inputs (matmul inputs in their own
  dtype); a masked key gets the most negative value of that type, so a query whose keys are
  all masked attends uniformly (never NaN).

  Args:
    q_BTHK, k_BSHK, v_BSHK: queries, keys, values.
    mask: bool broadcastable to [B, H, T, S] (True: may attend), or None.
    probs_fn: applied to the probabilities [B, H, T, S] (float32, or float64) before the
      weighted sum (e.g. dropout), or None.

  Returns:
    float[B, T, H, K] in the dtype of ``v_BSHK``.
  """
  q_BHTK, k_BHSK, v_BHSK = (jnp.swapaxes(x, 1, 2) for x in (q_BTHK, k_BSHK, v_BSHK))
  return jnp.swapaxes(_attend_heads_major(q_BHTK, k_BHSK, v_BHSK, mask, probs_fn), 1, 2)


def _attend_heads_major(q_BHTK: Array, k_BHSK: Array, v_BHSK: Array, mask: Array | None,
                        probs_fn: Callable[[Array], Array] | None = None) -> Array:
  """:func:`heads_major_attention` on heads-major operands: float[B, H, T, K]."""
  acc = jnp.promote_types(q_BHTK.dtype, jnp.float32)
  logits_BHTS = jnp.einsum("bhtk,bhsk->bhts", q_BHTK, k_BHSK,
                           preferred_element_type=acc) * q_BHTK.shape[-1] ** -0.5
  if mask is not None:
    logits_BHTS = jnp.where(mask, logits_BHTS, jnp.finfo(acc).min)
  probs_BHTS = jax.nn.softmax(logits_BHTS, axis=-1)
  if probs_fn is not None:
    probs_BHTS = probs_fn(probs_BHTS)
  return jnp.einsum("bhts,bhsk->bhtk", probs_BHTS.astype(v_BHSK.dtype), v_BHSK)


# Float32 logits per block of :func:`blocked_attention` (docs/benchmarks.md, "Attention on
# CPU in blocks"): a block this size stays in the caches between the logits, the softmax and
# the weighted sum, where the whole [B, H, T, S] tensor goes through memory several times.
BLOCK_BYTES = 8 << 20


def _largest_divisor_at_most(n: int, limit: int) -> int:
  return max(d for d in range(1, max(1, min(n, limit)) + 1) if n % d == 0)


def blocked_attention(q_BTHK: Array, k_BSHK: Array, v_BSHK: Array, mask: Array | None,
                      block_bytes: int = BLOCK_BYTES) -> Array:
  """:func:`heads_major_attention` computed a block of batch rows (and, for long rows, of
  queries) at a time, each block's probabilities recomputed in the backward pass.

  The same function as the heads-major form (tests/test_attention.py): what changes is the
  memory. The whole form writes the [B, H, T, S] logits, reads them for the softmax, writes
  the probabilities, reads them for the weighted sum and keeps them for the backward pass;
  here a block of at most ``block_bytes`` of logits is made, used and dropped while it is
  in the caches, and the backward pass keeps only q, k and v. On a CPU with many heads of
  few dimensions (the masked-summation Transformer: 10 heads of 10) the softmax's memory
  traffic is most of attention's time.

  Args:
    q_BTHK, k_BSHK, v_BSHK: queries, keys, values.
    mask: bool broadcastable to [B, H, T, S] (True: may attend), or None.
    block_bytes: the most float32 logits one block holds; a block is one or more whole
      batch rows, or a run of queries of one row when a row is larger.

  Returns:
    float[B, T, H, K] in the dtype of ``v_BSHK``.
  """
  batch, t, heads, _ = q_BTHK.shape
  s = k_BSHK.shape[1]
  acc = jnp.promote_types(q_BTHK.dtype, jnp.float32)
  row_bytes = heads * s * jnp.dtype(acc).itemsize  # Logits of one query of one batch row.
  if mask is not None:
    mask = jnp.asarray(mask, bool)
    mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
  if row_bytes * t <= block_bytes:  # Whole rows: as many as fit, dividing the batch.
    rows, tq = _largest_divisor_at_most(batch, block_bytes // (row_bytes * t)), t
  else:  # One row at a time, its queries in runs of tq (the last run padded).
    rows, tq = 1, max(1, min(t, block_bytes // row_bytes))
  nq = -(-t // tq)
  pad = nq * tq - t
  q_BHTK, k_BHSK, v_BHSK = (jnp.swapaxes(x, 1, 2) for x in (q_BTHK, k_BSHK, v_BSHK))
  if pad:
    q_BHTK = jnp.pad(q_BHTK, ((0, 0), (0, 0), (0, pad), (0, 0)))
    if mask is not None and mask.shape[2] == t > 1:
      mask = jnp.pad(mask, ((0, 0), (0, 0), (0, pad), (0, 0)), constant_values=True)
  mask_per_row = mask is not None and mask.shape[0] == batch > 1
  mask_per_query = mask is not None and mask.shape[2] == t + pad > 1 and nq > 1

  block = jax.checkpoint(_attend_heads_major)  # One block, heads-major in and out.

  def one_row_block(xs):
    q_rhtk, k_rhsk, v_rhsk, m_row = xs
    m_row = mask if not mask_per_row else m_row
    if nq == 1:
      return block(q_rhtk, k_rhsk, v_rhsk, m_row)
    # Runs of queries: [nq, rows, H, tq, K], keys and values shared by the runs.
    runs = lambda x: jnp.moveaxis(x.reshape(x.shape[:2] + (nq, tq) + x.shape[3:]), 2, 0)
    q_runs = runs(q_rhtk)
    m_runs = runs(m_row) if mask_per_query else None
    out = jax.lax.map(
        lambda ys: block(ys[0], k_rhsk, v_rhsk, ys[1] if mask_per_query else m_row),
        (q_runs, m_runs))
    return jnp.moveaxis(out, 0, 2).reshape(q_rhtk.shape[:2] + (nq * tq,) + out.shape[-1:])

  blocks = lambda x: x.reshape((batch // rows, rows) + x.shape[1:])
  mask_rows = blocks(mask) if mask_per_row else None
  out_BHTK = jax.lax.map(one_row_block,
                         (blocks(q_BHTK), blocks(k_BHSK), blocks(v_BHSK), mask_rows))
  out_BHTK = out_BHTK.reshape((batch,) + out_BHTK.shape[2:])[:, :, :t]
  return jnp.swapaxes(out_BHTK, 1, 2)


def key_padding_attention(q_BTHK: Array, k_BSHK: Array, v_BSHK: Array, mask: Array,
                          implementation: str = "cudnn") -> Array:
  """``jax.nn.dot_product_attention`` with a key-padding mask passed as per-row key counts
  (``key_value_seq_lengths``): cuDNN's fused kernel takes no [B, 1, 1, S] mask.

  Only right padding (each row's real keys first) can be given as counts; a row whose mask
  is not a prefix gets NaN outputs (the trainer stops on them), never a silently different
  attention. A row without real keys attends to its first key (the encoders discard the
  outputs of padding rows).

  Raises:
    ValueError: ``mask`` is not a key mask [B or 1, 1, 1, S] (a causal or per-query mask).
  """
  if mask.ndim != 4 or mask.shape[1] != 1 or mask.shape[2] != 1:
    raise ValueError(f"attention implementation {implementation!r} takes a key-padding mask "
                     f"of shape [B, 1, 1, S] (right padding), got {mask.shape}; use "
                     "implementation='xla' (or 'heads_major') for causal or per-query masks")
  batch, keys = q_BTHK.shape[0], k_BSHK.shape[1]
  keys_BS = jnp.broadcast_to(mask[:, 0, 0, :], (batch, keys))
  lengths_B = keys_BS.sum(-1, dtype=jnp.int32)
  right_padded_B = jnp.all(keys_BS == (jnp.arange(keys)[None] < lengths_B[:, None]), -1)
  out_BTHK = jax.nn.dot_product_attention(
      q_BTHK, k_BSHK, v_BSHK, key_value_seq_lengths=jnp.maximum(lengths_B, 1),
      implementation=implementation)
  return jnp.where(right_padded_B[:, None, None, None], out_BTHK,
                   jnp.asarray(jnp.nan, out_BTHK.dtype))


def dot_product_attention(q_BTHK: Array, k_BSHK: Array, v_BSHK: Array,
                          mask: Array | None, implementation: str | None = None) -> Array:
  """Scaled dot-product attention, float32 softmax whatever the input dtype.

  Args:
    q_BTHK, k_BSHK, v_BSHK: queries, keys, values.
    mask: bool broadcastable to [B, H, T, S] (True: may attend), or None.
    implementation: see :func:`resolve_implementation` (on CPU by default 'heads_major',
      or 'blocked' for large logits).

  Returns:
    float[B, T, H, K].
  """
  batch, t, heads, _ = q_BTHK.shape
  logits_bytes = (batch * heads * t * k_BSHK.shape[1]
                  * jnp.dtype(jnp.promote_types(q_BTHK.dtype, jnp.float32)).itemsize)
  implementation = resolve_implementation(implementation, logits_bytes=logits_bytes)
  if implementation == "cudnn" and mask is not None:
    return key_padding_attention(q_BTHK, k_BSHK, v_BSHK, mask, "cudnn")
  if implementation == "blocked":
    return blocked_attention(q_BTHK, k_BSHK, v_BSHK, mask)
  if implementation == "heads_major" or (
      q_BTHK.dtype not in (jnp.float32, jnp.float64) and implementation != "cudnn"):
    # Low-precision inputs off cuDNN take this path too: float32 logits and softmax.
    return heads_major_attention(q_BTHK, k_BSHK, v_BSHK, mask)
  return jax.nn.dot_product_attention(q_BTHK, k_BSHK, v_BSHK, mask=mask,
                                      implementation=implementation)
