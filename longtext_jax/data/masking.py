"""BERT-style masked-language-model corruption (host side, numpy, deterministic from a rng).

Of the real, non-special tokens of an example, ``mask_prob`` (15%) are selected for prediction
(the count is ``floor(mask_prob * n + u)``, u ~ U[0, 1), so its expectation is exactly
``mask_prob * n``). Each selected token is replaced by ``<mask>`` with probability 0.8, by a
random non-special token with 0.1 and kept with 0.1. With whole-word masking a word (a
SentencePiece '▁' piece and the pieces that continue it) is selected or left as a whole;
words are taken in random order while they fit into the same token budget. Pads and special
tokens (<s>, </s>, ...) are never selected or replaced.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def _word_spans(candidates: np.ndarray, word_starts: np.ndarray | None) -> list[np.ndarray]:
  """Position groups that are selected together: single tokens, or whole words."""
  positions = np.flatnonzero(candidates)
  if word_starts is None:
    return [positions[k:k + 1] for k in range(len(positions))]
  spans, current = [], []
  for pos in positions:
    # A word starts at a '▁' piece or right after a non-candidate (pad, special, text start).
    if current and (word_starts[pos] or pos == 0 or not candidates[pos - 1]):
      spans.append(np.asarray(current))
      current = []
    current.append(pos)
  if current:
    spans.append(np.asarray(current))
  return spans


def mask_example(ids_L: np.ndarray, mask_L: np.ndarray, rng: np.random.Generator,
                 mask_id: int, vocab_size: int, special_ids: Sequence[int],
                 mask_prob: float = 0.15, replace_probs: tuple[float, float, float] = (
                     0.8, 0.1, 0.1), word_starts_L: np.ndarray | None = None
                 ) -> dict[str, np.ndarray]:
  """Corrupts one example for MLM.

  Args:
    ids_L: int[L] token ids.
    mask_L: bool[L], True on real tokens (pads are never touched).
    rng: numpy Generator; the same rng state gives the same corruption.
    mask_id: id of ``<mask>``.
    vocab_size: random replacements are drawn from the non-special ids below this.
    special_ids: ids never selected nor used as random replacements.
    mask_prob: fraction of the candidate tokens selected for prediction.
    replace_probs: probabilities of (<mask>, random token, unchanged) for a selected token.
    word_starts_L: bool[L] for whole-word masking (True where a piece starts a word), or
      None for token-level masking.

  Returns:
    ``input_ids`` int32[L] (corrupted), ``mlm_targets`` int32[L] (the original ids),
    ``mlm_mask`` bool[L] (selected positions).
  """
  ids_L = np.asarray(ids_L)
  mask_L = np.asarray(mask_L, bool)
  if ids_L.shape != mask_L.shape or ids_L.ndim != 1:
    raise ValueError(f"ids and mask must both be [L], got {ids_L.shape} and {mask_L.shape}")
  if not 0.0 <= mask_prob <= 1.0:
    raise ValueError(f"mask_prob must be in [0, 1], got {mask_prob}")
  if len(replace_probs) != 3 or abs(sum(replace_probs) - 1.0) > 1e-6 or min(replace_probs) < 0:
    raise ValueError(f"replace_probs must be 3 probabilities summing to 1, got "
                     f"{replace_probs}")
  special = np.asarray(sorted(set(int(s) for s in special_ids)))
  candidates = mask_L & ~np.isin(ids_L, special)
  budget = int(np.floor(mask_prob * candidates.sum() + rng.random()))
  selected = np.zeros_like(candidates)
  if budget:
    spans = _word_spans(candidates, word_starts_L)
    if word_starts_L is None:
      chosen = rng.choice(len(spans), size=budget, replace=False)
      selected[np.concatenate([spans[k] for k in chosen])] = True
    else:
      count = 0
      for k in rng.permutation(len(spans)):
        if count + len(spans[k]) <= budget:
          selected[spans[k]] = True
          count += len(spans[k])
        if count == budget:
          break
  action = rng.choice(3, size=ids_L.shape, p=np.asarray(replace_probs, np.float64))
  allowed = np.setdiff1d(np.arange(vocab_size), special)
  if not len(allowed):
    raise ValueError(f"vocab_size {vocab_size} leaves no non-special token to sample")
  random_ids = allowed[rng.integers(0, len(allowed), size=ids_L.shape)]
  corrupted = np.where(selected & (action == 0), mask_id, ids_L)
  corrupted = np.where(selected & (action == 1), random_ids, corrupted)
  return {"input_ids": corrupted.astype(np.int32), "mlm_targets": ids_L.astype(np.int32),
          "mlm_mask": selected}


def mask_batch(ids_BL: np.ndarray, mask_BL: np.ndarray, seed: int, **kwargs
               ) -> dict[str, np.ndarray]:
  """:func:`mask_example` on every row; row b uses ``default_rng([seed, b])``.

  ``word_starts_BL`` (bool[B, L]) switches on whole-word masking; other keyword arguments are
  those of :func:`mask_example`.
  """
  word_starts_BL = kwargs.pop("word_starts_BL", None)
  rows = [mask_example(ids_BL[b], mask_BL[b], np.random.default_rng([seed, b]),
                       word_starts_L=None if word_starts_BL is None else word_starts_BL[b],
                       **kwargs) for b in range(len(ids_BL))]
  return {k: np.stack([r[k] for r in rows]) for k in rows[0]}
