"""Span-level precision/recall/F1 with the CoNLL (``conlleval``) chunking conventions.

Tags are ``O`` or ``<K>-<TYPE>`` with K in B, I, E, S (IOB1, IOB2 and IOBES all work). A
chunk starts at B or S, or at I/E that does not continue a chunk of its type (after O,
after E/S, or after a different type); it ends before the next start, before O, after E or
S, or at the end of the sentence. A predicted chunk counts as correct when a gold chunk has
the same type, start and end.

Two implementations of the same rules:

* :func:`chunks` / :func:`span_f1`: pure Python over tag strings (for reports and tests);
* :func:`span_counts`: jit-able, over tag ids with a :class:`TagScheme`, returning additive
  (correct, predicted, gold) counts so evaluation can sum them over batches and devices.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
KINDS = ("O", "B", "I", "E", "S")


def parse_tag(tag: str) -> tuple[str, str]:
  """'B-PER' -> ('B', 'PER'); 'O' -> ('O', ''). Raises ValueError on other shapes."""
  if tag == "O":
    return "O", ""
  kind, sep, typ = tag.partition("-")
  if not sep or kind not in KINDS[1:] or not typ:
    raise ValueError(f"tag {tag!r} is not 'O' nor '<B|I|E|S>-<TYPE>'")
  return kind, typ


@functools.lru_cache(maxsize=32)
def allowed_transitions(names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Which tag sequences are well formed, for constrained decoding (``crf_viterbi``).

  Built once per tag set (cached: ``crf_tagging`` asks at every decode; read-only arrays).

  Args:
    names: tag names in id order (``O``, ``B-PER``, ``I-PER``, ...; ``E-``/``S-`` make it
      IOBES).

  Returns:
    ``(allowed bool[C, C] from -> to, may_start bool[C], may_end bool[C])``: ``I-X`` (and
    ``E-X``) only after ``B-X`` or ``I-X`` of the same type and never first; with IOBES tags,
    ``B-X`` and ``I-X`` must go on with ``I-X`` or ``E-X`` of their type and cannot be last.
  """
  parsed = [parse_tag(t) for t in names]
  iobes = any(k in ("E", "S") for k, _ in parsed)

  def ok(prev, cur):
    (pk, pt), (k, t) = prev, cur
    if k in ("I", "E") and not (pk in ("B", "I") and pt == t):
      return False
    return not (iobes and pk in ("B", "I") and not (k in ("I", "E") and t == pt))

  allowed = np.array([[ok(p, c) for c in parsed] for p in parsed], bool)
  may_start = np.array([k not in ("I", "E") for k, _ in parsed], bool)
  may_end = np.array([not (iobes and k in ("B", "I")) for k, _ in parsed], bool)
  for table in (allowed, may_start, may_end):
    table.setflags(write=False)
  return allowed, may_start, may_end


def _starts(prev_kind, prev_type, kind, typ) -> bool:
  if kind == "O":
    return False
  return (kind in ("B", "S") or prev_kind in ("O", "E", "S") or prev_type != typ)


def _ends(prev_kind, prev_type, kind, typ) -> bool:
  """Does the chunk holding the previous tag end before the current tag?"""
  if prev_kind == "O":
    return False
  return (prev_kind in ("E", "S") or kind in ("B", "S", "O") or prev_type != typ)


def chunks(tags: Sequence[str]) -> list[tuple[str, int, int]]:
  """The chunks of one sentence as (type, first, last) with inclusive positions."""
  out = []
  parsed = [parse_tag(t) for t in tags] + [("O", "")]
  prev_kind, prev_type, start = "O", "", -1
  for i, (kind, typ) in enumerate(parsed):
    if _ends(prev_kind, prev_type, kind, typ):
      out.append((prev_type, start, i - 1))
    if _starts(prev_kind, prev_type, kind, typ):
      start = i
    prev_kind, prev_type = kind, typ
  return out


def span_f1(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]
            ) -> dict[str, float]:
  """Micro precision/recall/F1 over all chunks of all sentences (CoNLL's overall score).

  Args:
    gold: gold tag sequences.
    pred: predicted tag sequences, each as long as its gold one.

  Returns:
    dict with ``precision``, ``recall``, ``f1`` (0 when undefined) and the counts
    ``correct``, ``predicted``, ``gold``.
  """
  if len(gold) != len(pred):
    raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
  correct = n_pred = n_gold = 0
  for i, (g, p) in enumerate(zip(gold, pred)):
    if len(g) != len(p):
      raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
    g_chunks, p_chunks = set(chunks(g)), set(chunks(p))
    correct += len(g_chunks & p_chunks)
    n_pred += len(p_chunks)
    n_gold += len(g_chunks)
  return f1_from_counts(correct, n_pred, n_gold)


def f1_from_counts(correct, predicted, gold) -> dict[str, float]:
  """Precision, recall and F1 from span counts (0 where a denominator is 0).

  Args:
    correct: spans predicted exactly (same type and boundaries).
    predicted: spans predicted.
    gold: spans in the gold tags.

  Returns:
    ``{"precision", "recall", "f1", "correct", "predicted", "gold"}`` as floats.
  """
  correct, predicted, gold = float(correct), float(predicted), float(gold)
  precision = correct / predicted if predicted else 0.0
  recall = correct / gold if gold else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return {"precision": precision, "recall": recall, "f1": f1, "correct": correct,
          "predicted": predicted, "gold": gold}


@dataclasses.dataclass(frozen=True)
class TagScheme:
  """Tag ids -> (kind id in KINDS, type id); built once from the tag names."""
  names: tuple[str, ...]
  kind_C: np.ndarray
  type_C: np.ndarray

  @classmethod
  def from_names(cls, names: Sequence[str]) -> "TagScheme":
    """Parses tag names (``O``, ``B-PER``, ``I-LOC``, ...) into kind_C/type_C arrays."""
    parsed = [parse_tag(t) for t in names]
    types = sorted({typ for _, typ in parsed if typ})
    kind_C = np.array([KINDS.index(k) for k, _ in parsed], np.int32)
    type_C = np.array([types.index(t) + 1 if t else 0 for _, t in parsed], np.int32)
    return cls(tuple(names), kind_C, type_C)


def _flags(ids_BL: Array, mask_BL: Array, scheme: TagScheme) -> tuple[Array, Array, Array]:
  """Per position: (chunk starts here, chunk ends here, type id). Pads read as O."""
  o, b, e, s = (KINDS.index(k) for k in ("O", "B", "E", "S"))
  kind_BL = jnp.where(mask_BL, jnp.asarray(scheme.kind_C)[ids_BL], o)
  type_BL = jnp.where(mask_BL, jnp.asarray(scheme.type_C)[ids_BL], 0)
  pad = lambda x, v, left: jnp.pad(x[:, :-1] if left else x[:, 1:],
                                   ((0, 0), (1, 0) if left else (0, 1)), constant_values=v)
  prev_kind, prev_type = pad(kind_BL, o, True), pad(type_BL, 0, True)
  next_kind, next_type = pad(kind_BL, o, False), pad(type_BL, 0, False)
  def starts(pk, pt, k, t):
    return (k != o) & ((k == b) | (k == s) | (pk == o) | (pk == e) | (pk == s) | (pt != t))
  def ends(pk, pt, k, t):  # the chunk holding pk ends before k
    return (pk != o) & ((pk == e) | (pk == s) | (k == b) | (k == s) | (k == o) | (pt != t))
  return (starts(prev_kind, prev_type, kind_BL, type_BL),
          ends(kind_BL, type_BL, next_kind, next_type), type_BL)


def span_counts(pred_BL: Array, gold_BL: Array, mask_BL: Array, scheme: TagScheme,
                open_end_B: Array | None = None) -> dict[str, Array]:
  """Chunk counts of a batch of tag-id sequences (jit-able; pads never count).

  Args:
    pred_BL, gold_BL: tag ids int[B, L].
    mask_BL: the real positions, a prefix of each row.
    scheme: the tag names of the ids.
    open_end_B: optional bool[B]: the row's gold goes on past its last real position (a
      document cut short), so a gold chunk reaching that position is longer than what is
      shown and no prediction matches it.

  Returns:
    ``span_correct``, ``span_pred``, ``span_gold``: float32 scalars.
  """
  p_start, p_end, p_type = _flags(pred_BL, mask_BL, scheme)
  g_start, g_end, g_type = _flags(gold_BL, mask_BL, scheme)
  if open_end_B is not None:
    last_BL = jnp.arange(mask_BL.shape[1])[None, :] == jnp.sum(mask_BL, -1)[:, None] - 1
    g_end &= ~(last_BL & jnp.asarray(open_end_B, bool)[:, None])
  g_inside = jnp.asarray(scheme.kind_C)[gold_BL] != 0
  g_inside &= mask_BL
  p_inside = jnp.where(mask_BL, jnp.asarray(scheme.kind_C)[pred_BL] != 0, False)

  def step(ok_B, xs):
    gs, ge, gi, gt, ps, pe, pi, pt = xs
    begin_ok = ps & (pt == gt)
    cont_ok = ok_B & pi & ~ps
    ok_B = jnp.where(gs, begin_ok, jnp.where(gi, cont_ok, False))
    return ok_B, ge & ok_B & pe

  xs = tuple(jnp.swapaxes(a, 0, 1) for a in
             (g_start, g_end, g_inside, g_type, p_start, p_end, p_inside, p_type))
  _, correct_LB = jax.lax.scan(step, jnp.zeros(pred_BL.shape[:1], jnp.bool_), xs)
  f = lambda x: jnp.sum(x).astype(jnp.float32)
  return {"span_correct": f(correct_LB), "span_pred": f(p_start), "span_gold": f(g_start)}
