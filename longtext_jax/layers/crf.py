"""Linear-chain conditional random field: log-space forward algorithm and Viterbi decoding.

Scores of a tag path y over the real positions t_1 < ... < t_m of a row (the positions
where ``mask`` is True, in order; masked positions are removed from the chain, wherever they
are)::

  score(y) = start[y_1] + sum_j emissions[t_j, y_j] + sum_{j>1} transitions[y_{j-1}, y_j]
             + end[y_m]

``log p(y | x) = score(y) - log Z`` with ``log Z = logsumexp over all paths``, computed with
``lax.scan`` in float32. A row without real positions has score 0, log Z 0 and an empty
path. Every function is batched over the leading axis and reusable by any encoder.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax.layers.partitioning import named

Array = jax.Array


def _check(emissions_BLC: Array, mask_BL: Array, transitions_CC: Array) -> None:
  if emissions_BLC.ndim != 3:
    raise ValueError(f"CRF emissions must be float[B, L, C], got {emissions_BLC.shape}")
  if mask_BL.shape != emissions_BLC.shape[:2]:
    raise ValueError(f"CRF mask must be [B, L] = {emissions_BLC.shape[:2]}, got "
                     f"{mask_BL.shape}")
  num_tags = emissions_BLC.shape[-1]
  if transitions_CC.shape != (num_tags, num_tags):
    raise ValueError(f"CRF transitions must be [{num_tags}, {num_tags}], got "
                     f"{transitions_CC.shape}")


def crf_log_partition(emissions_BLC: Array, mask_BL: Array, transitions_CC: Array,
                      start_C: Array, end_C: Array) -> Array:
  """log Z: float[B], the log-sum-exp of the scores of all tag paths (forward algorithm)."""
  _check(emissions_BLC, mask_BL, transitions_CC)
  em_LBC = jnp.swapaxes(emissions_BLC.astype(jnp.float32), 0, 1)
  m_LB = jnp.swapaxes(mask_BL, 0, 1)
  trans_CC = transitions_CC.astype(jnp.float32)
  start_C = start_C.astype(jnp.float32)
  batch, num_tags = emissions_BLC.shape[0], emissions_BLC.shape[-1]

  def step(carry, inputs):
    alpha_BC, seen_B = carry
    em_BC, m_B = inputs
    cont_BC = jax.nn.logsumexp(alpha_BC[:, :, None] + trans_CC[None], axis=1) + em_BC
    first_BC = start_C[None] + em_BC
    new_BC = jnp.where(seen_B[:, None], cont_BC, first_BC)
    alpha_BC = jnp.where(m_B[:, None], new_BC, alpha_BC)
    return (alpha_BC, seen_B | m_B), None

  init = (jnp.zeros((batch, num_tags), jnp.float32), jnp.zeros((batch,), jnp.bool_))
  (alpha_BC, seen_B), _ = jax.lax.scan(step, init, (em_LBC, m_LB))
  log_z_B = jax.nn.logsumexp(alpha_BC + end_C.astype(jnp.float32)[None], axis=-1)
  return jnp.where(seen_B, log_z_B, 0.0)


def crf_path_score(emissions_BLC: Array, tags_BL: Array, mask_BL: Array,
                   transitions_CC: Array, start_C: Array, end_C: Array) -> Array:
  """score(y): float[B] for the given tags (values at masked positions are ignored)."""
  _check(emissions_BLC, mask_BL, transitions_CC)
  mask_BL = jnp.asarray(mask_BL)
  tags_BL = jnp.where(mask_BL, tags_BL, 0).astype(jnp.int32)
  em_BL = jnp.take_along_axis(jnp.asarray(emissions_BLC, jnp.float32), tags_BL[..., None],
                              axis=-1)[..., 0]
  trans_CC = jnp.asarray(transitions_CC, jnp.float32)
  start_C = jnp.asarray(start_C, jnp.float32)

  def step(carry, inputs):
    prev_B, seen_B, score_B = carry
    tag_B, m_B = inputs
    link_B = jnp.where(seen_B, trans_CC[prev_B, tag_B], start_C[tag_B])
    score_B = score_B + jnp.where(m_B, link_B, 0.0)
    return (jnp.where(m_B, tag_B, prev_B), seen_B | m_B, score_B), None

  batch = tags_BL.shape[0]
  init = (jnp.zeros((batch,), jnp.int32), jnp.zeros((batch,), jnp.bool_),
          jnp.zeros((batch,), jnp.float32))
  (last_B, seen_B, score_B), _ = jax.lax.scan(
      step, init, (jnp.swapaxes(tags_BL, 0, 1), jnp.swapaxes(mask_BL, 0, 1)))
  score_B = score_B + jnp.sum(jnp.where(mask_BL, em_BL, 0.0), axis=-1)
  return score_B + jnp.where(seen_B, jnp.asarray(end_C, jnp.float32)[last_B], 0.0)


def crf_log_likelihood(emissions_BLC: Array, tags_BL: Array, mask_BL: Array,
                       transitions_CC: Array, start_C: Array, end_C: Array) -> Array:
  """log p(tags | emissions): float[B] (0 for rows without real positions)."""
  return (crf_path_score(emissions_BLC, tags_BL, mask_BL, transitions_CC, start_C, end_C)
          - crf_log_partition(emissions_BLC, mask_BL, transitions_CC, start_C, end_C))


_FORBIDDEN = -1e9  # Added to the score of a transition that constrained decoding forbids.


def crf_viterbi(emissions_BLC: Array, mask_BL: Array, transitions_CC: Array, start_C: Array,
                end_C: Array, allowed: tuple[Array, Array, Array] | None = None
                ) -> tuple[Array, Array]:
  """Most likely tag path.

  Args:
    emissions_BLC, mask_BL, transitions_CC, start_C, end_C: as for the likelihood.
    allowed: None, or ``(allowed bool[C, C], may_start bool[C], may_end bool[C])``
      (``metrics_conll.allowed_transitions``): the path is the best among those that use
      only allowed transitions, first and last tags (constrained decoding).

  Returns:
    (tags int32[B, L], score float[B]): the argmax path (0 at masked positions) and its
    score.
  """
  _check(emissions_BLC, mask_BL, transitions_CC)
  em_LBC = jnp.swapaxes(emissions_BLC.astype(jnp.float32), 0, 1)
  m_LB = jnp.swapaxes(mask_BL, 0, 1)
  trans_CC = transitions_CC.astype(jnp.float32)
  if allowed is not None:
    allowed_CC, may_start_C, may_end_C = (jnp.asarray(a, bool) for a in allowed)
    trans_CC = jnp.where(allowed_CC, trans_CC, _FORBIDDEN)
    start_C = jnp.where(may_start_C, start_C.astype(jnp.float32), _FORBIDDEN)
    end_C = jnp.where(may_end_C, end_C.astype(jnp.float32), _FORBIDDEN)
  batch, num_tags = emissions_BLC.shape[0], emissions_BLC.shape[-1]
  identity_BC = jnp.broadcast_to(jnp.arange(num_tags, dtype=jnp.int32), (batch, num_tags))

  def forward(carry, inputs):
    delta_BC, seen_B = carry
    em_BC, m_B = inputs
    cand_BCC = delta_BC[:, :, None] + trans_CC[None]
    best_prev_BC = jnp.argmax(cand_BCC, axis=1).astype(jnp.int32)
    cont_BC = jnp.max(cand_BCC, axis=1) + em_BC
    first_BC = start_C.astype(jnp.float32)[None] + em_BC
    new_BC = jnp.where(seen_B[:, None], cont_BC, first_BC)
    # Back-pointers: identity where nothing links (masked steps, the first real step).
    back_BC = jnp.where((m_B & seen_B)[:, None], best_prev_BC, identity_BC)
    return (jnp.where(m_B[:, None], new_BC, delta_BC), seen_B | m_B), back_BC

  init = (jnp.zeros((batch, num_tags), jnp.float32), jnp.zeros((batch,), jnp.bool_))
  (delta_BC, seen_B), back_LBC = jax.lax.scan(forward, init, (em_LBC, m_LB))
  final_BC = delta_BC + end_C.astype(jnp.float32)[None]
  last_B = jnp.argmax(final_BC, axis=-1).astype(jnp.int32)

  def backward(tag_B, back_BC):
    return jnp.take_along_axis(back_BC, tag_B[:, None], axis=-1)[:, 0], tag_B

  _, tags_LB = jax.lax.scan(backward, last_B, back_LBC, reverse=True)
  tags_BL = jnp.where(mask_BL, jnp.swapaxes(tags_LB, 0, 1), 0)
  score_B = jnp.where(seen_B, jnp.max(final_BC, axis=-1), 0.0)
  return tags_BL, score_B


class CRF(nn.Module):
  """Learned CRF parameters: ``transitions`` [C, C] (from, to), ``start`` [C], ``end`` [C].

  ``CRF(C)()`` returns the three arrays so that a head can pass them on to the loss.
  """
  num_tags: int

  @nn.compact
  def __call__(self) -> tuple[Array, Array, Array]:
    init = named(nn.initializers.normal(0.01), ("classes", "next_classes"))
    zeros = named(nn.initializers.zeros, ("classes",))
    return (self.param("transitions", init, (self.num_tags, self.num_tags)),
            self.param("start", zeros, (self.num_tags,)),
            self.param("end", zeros, (self.num_tags,)))
