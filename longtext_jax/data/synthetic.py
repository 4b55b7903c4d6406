"""Synthetic tasks generated deterministically from a seed (no downloads)."""
from __future__ import annotations

import numpy as np


def masked_summation(num_examples: int, seq_len: int, num_masked: int, feature_dim: int,
                     seed: int) -> dict[str, np.ndarray]:
  """The Star-Transformer paper's masked summation task (Sec. 5.1).

  Args:
    num_examples: N.
    seq_len: n rows per example.
    num_masked: k rows per example have mask bit 1.
    feature_dim: d; column 0 is the mask bit, columns 1..d-1 are uniform in [0, 1).
    seed: the same seed always gives the same arrays.

  Returns:
    ``features`` float32[N, n, d], ``mask`` bool[N, n] (all real), ``target`` float32[N, d-1]
    = sum of the masked rows' values.
  """
  if not 0 < num_masked <= seq_len:
    raise ValueError(f"need 0 < k <= n, got k={num_masked}, n={seq_len}")
  if feature_dim < 2:
    raise ValueError(f"feature_dim must be >= 2 (mask bit + values), got {feature_dim}")
  rng = np.random.default_rng(seed)
  values = rng.random((num_examples, seq_len, feature_dim - 1), dtype=np.float32)
  # k distinct positions per example: the k smallest of n random keys.
  keys = rng.random((num_examples, seq_len))
  chosen = np.argsort(keys, axis=1)[:, :num_masked]
  bits = np.zeros((num_examples, seq_len), np.float32)
  np.put_along_axis(bits, chosen, 1.0, axis=1)
  features = np.concatenate([bits[..., None], values], axis=-1)
  target = np.einsum("nl,nld->nd", bits, values).astype(np.float32)
  return {"features": features, "mask": np.ones((num_examples, seq_len), bool),
          "target": target}


# ---------------------------------------------------------------------------------------------
# Long-range tasks with token inputs. Ids 0..4 are the special ids of
# ``longtext_jax.data.tokenizers.SPECIAL_IDS`` (0 = pad); task symbols start at 5.
FIRST_ID = 5

# LRA ListOps (Nangia & Bowman 2018; Tay et al. 2021): digits, four operators and ']'.
LISTOPS_OPS = ("[MAX", "[MIN", "[MED", "[SM")
LISTOPS_TOKENS = tuple(str(i) for i in range(10)) + LISTOPS_OPS + ("]",)
LISTOPS_IDS = {t: FIRST_ID + i for i, t in enumerate(LISTOPS_TOKENS)}
LISTOPS_VOCAB = FIRST_ID + len(LISTOPS_TOKENS)  # 20


def listops_apply(op: str, values: list[int]) -> int:
  """MAX, MIN, MED (the median, its fraction dropped: int(np.median)) and SM (sum mod 10)."""
  if op == "[MAX":
    return max(values)
  if op == "[MIN":
    return min(values)
  if op == "[MED":
    return int(np.median(values))
  if op == "[SM":
    return sum(values) % 10
  raise ValueError(f"unknown ListOps operator {op!r}")


def _listops_expr(rng, depth, budget, max_depth, max_args):
  """(tokens, value) of an expression of at most ``budget`` tokens inside ``depth`` operators.

  An operator takes k arguments; s of them (chosen at random, at least one while the budget
  allows) are sub-expressions sharing the budget left after the digit arguments, so lengths
  come close to the budget up to the limits of depth and arity.
  """
  if budget < 4 or depth >= max_depth:
    d = int(rng.integers(10))
    return [str(d)], d
  op = LISTOPS_OPS[rng.integers(len(LISTOPS_OPS))]
  inner = budget - 2
  k = int(rng.integers(2, min(max_args, inner) + 1))
  s_max = min(k, (inner - k) // 3) if depth + 1 < max_depth else 0  # 4s + (k - s) <= inner.
  s = int(rng.integers(1, s_max + 1)) if s_max >= 1 else 0
  nested = set(rng.choice(k, s, replace=False).tolist()) if s else set()
  extra = inner - (k - s) - 4 * s  # Tokens beyond the minimum 4 of each sub-expression.
  cuts = np.sort(rng.integers(0, extra + 1, max(s - 1, 0)))
  shares = iter(4 + np.diff(np.concatenate([[0], cuts, [extra]])))
  tokens, values = [op], []
  for j in range(k):
    if j in nested:
      t, v = _listops_expr(rng, depth + 1, int(next(shares)), max_depth, max_args)
    else:
      v = int(rng.integers(10))
      t = [str(v)]
    tokens += t
    values.append(v)
  return tokens + ["]"], listops_apply(op, values)


def listops(num_examples: int, seed: int, min_len: int = 0, max_len: int = 2000,
            max_depth: int = 10, max_args: int = 10) -> list[dict[str, np.ndarray]]:
  """LRA ListOps: nested MAX/MIN/MED/SM expressions over digits; the label is the value (10
  classes).

  Args:
    num_examples: how many expressions.
    seed: the same seed gives the same examples.
    min_len, max_len: token count range (LRA: up to 2000); each example draws a length budget
      uniformly in the range and is redrawn until it falls inside it.
    max_depth: most nested operators (LRA: 10).
    max_args: most arguments of one operator (LRA: 10).

  Returns:
    Examples ``{'input_ids': int32[n], 'mask': bool[n], 'label': int32}`` (ids: see
    ``LISTOPS_IDS``; vocabulary size ``LISTOPS_VOCAB``).
  """
  if not 4 <= max_len or min_len > max_len:
    raise ValueError(f"need 4 <= max_len and min_len <= max_len, got {min_len}, {max_len}")
  if max_depth < 1 or max_args < 2:
    raise ValueError(f"need max_depth >= 1 and max_args >= 2, got {max_depth}, {max_args}")
  rng = np.random.default_rng(seed)
  out = []
  while len(out) < num_examples:
    budget = int(rng.integers(max(min_len, 4), max_len + 1))
    tokens, value = _listops_expr(rng, 0, budget, max_depth, max_args)
    if not min_len <= len(tokens) <= max_len or len(tokens) == 1:
      continue
    ids = np.array([LISTOPS_IDS[t] for t in tokens], np.int32)
    out.append({"input_ids": ids, "mask": np.ones(len(ids), bool),
                "label": np.int32(value)})
  return out


def listops_tree(input_ids) -> int | tuple:
  """The expression tree of a ListOps token sequence (ids of ``LISTOPS_IDS``; padding and
  masks removed first).

  Returns:
    A digit (int), or ``(operator, [argument trees])`` with operator in ``LISTOPS_OPS``.

  Raises:
    ValueError: an id that is not a ListOps symbol, an unclosed or extra ']', an operator
      with fewer than two arguments, or tokens after the expression, naming the position.
  """
  names = {i: t for t, i in LISTOPS_IDS.items()}
  tokens = [int(i) for i in input_ids]
  for pos, i in enumerate(tokens):
    if i not in names:
      raise ValueError(f"token {pos}: id {i} is not a ListOps symbol "
                       f"({FIRST_ID}..{LISTOPS_VOCAB - 1})")
  stack: list[tuple[str, list, int]] = []  # (operator, arguments so far, its position)
  tree = None
  for pos, i in enumerate(tokens):
    t = names[i]
    if tree is not None:
      raise ValueError(f"token {pos}: {t!r} after the complete expression")
    if t in LISTOPS_OPS:
      stack.append((t, [], pos))
      continue
    if t == "]":
      if not stack:
        raise ValueError(f"token {pos}: ']' closes no operator")
      op, args, start = stack.pop()
      if len(args) < 2:
        raise ValueError(f"token {pos}: {op} opened at token {start} has {len(args)} "
                         "argument(s); operators take at least 2")
      node = (op, args)
    else:
      node = int(t)
    if stack:
      stack[-1][1].append(node)
    else:
      tree = node
  if stack:
    raise ValueError(f"end of input (token {len(tokens)}): {stack[-1][0]} opened at token "
                     f"{stack[-1][2]} is not closed")
  if tree is None:
    raise ValueError("empty ListOps expression")
  return tree


def listops_depth(tree) -> int:
  """Nesting depth: 0 for a digit, 1 for an operator over digits, and so on."""
  if isinstance(tree, int):
    return 0
  return 1 + max(listops_depth(a) for a in tree[1])


def listops_value(tree, levels: int | None = None, guess=None) -> int:
  """The value of an expression tree, evaluated ``levels`` operators deep.

  Args:
    tree: from :func:`listops_tree`.
    levels: None: the whole tree (the label). k >= 1: the top k levels of operators are
      applied; each sub-expression below them is replaced by ``guess(subtree)`` (a reader
      who looks no deeper than k levels). 0: ``guess(tree)``.
    guess: the value a sub-expression is given without evaluating it (needed when
      ``levels`` is not None and the tree is deeper than ``levels``).
  """
  if isinstance(tree, int):
    return tree
  if levels is not None and levels <= 0:
    if guess is None:
      raise ValueError("listops_value: levels cuts the tree and no guess is given")
    return int(guess(tree))
  deeper = None if levels is None else levels - 1
  return listops_apply(tree[0], [listops_value(a, deeper, guess) for a in tree[1]])


# Needle: filler symbols anywhere, one marker followed by a class symbol. The class symbols
# also occur in the filler, so only the symbol right after the marker tells the label.
NEEDLE_MARKER = FIRST_ID
NEEDLE_VOCAB = 64


def needle_class_id(label: int) -> int:
  """The token id that stands for class ``label`` in the needle task."""
  return NEEDLE_MARKER + 1 + label


def needle(num_examples: int, seed: int, min_len: int, max_len: int, num_classes: int,
           min_pos: int = 0) -> list[dict[str, np.ndarray]]:
  """Long-document classification whose only evidence is one needle.

  Each document is ``max(min_len, ...)``..``max_len`` filler symbols drawn uniformly from
  every symbol except the marker (class symbols included); the needle ``[marker, class_k]``
  starts at a uniform position in ``[min_pos, n - 2]`` (e.g. min_pos=512: always beyond
  BERT's first 512 tokens); the label is k.

  Returns:
    Examples ``{'input_ids': int32[n], 'mask': bool[n], 'label': int32}``; vocabulary size
    ``NEEDLE_VOCAB``.
  """
  if not 2 <= num_classes <= NEEDLE_VOCAB - NEEDLE_MARKER - 2:
    raise ValueError(f"needle: num_classes must be in [2, {NEEDLE_VOCAB - NEEDLE_MARKER - 2}]")
  min_len = max(min_len, min_pos + 2, 2)
  if min_len > max_len:
    raise ValueError(f"needle: documents of at most {max_len} tokens cannot hold a needle at "
                     f"or after position {min_pos}")
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(num_examples):
    n = int(rng.integers(min_len, max_len + 1))
    ids = rng.integers(NEEDLE_MARKER + 1, NEEDLE_VOCAB, n).astype(np.int32)
    label = int(rng.integers(num_classes))
    pos = int(rng.integers(min_pos, n - 1))
    ids[pos], ids[pos + 1] = NEEDLE_MARKER, needle_class_id(label)
    out.append({"input_ids": ids, "mask": np.ones(n, bool), "label": np.int32(label)})
  return out


def recall(num_examples: int, seed: int, kind: str, seq_len: int, num_symbols: int
           ) -> list[dict[str, np.ndarray]]:
  """Copy and associative recall for causal language models.

  * 'copy': ``<s> x_1..x_m </s> x_1..x_m`` with m = (seq_len - 2) // 2 symbols; the second
    copy is the target.
  * 'associative': ``<s> k_1 v_1 .. k_m v_m </s> k_q v_q`` with m = min((seq_len - 4) // 2,
    num_symbols) distinct keys, values from a separate alphabet, k_q one of the keys; the
    target is v_q, the value that followed k_q.

  ``target_mask`` marks the positions whose token the LM loss counts (the answer); the rest
  of the sequence is context that no model can predict.

  Returns:
    Examples ``{'input_ids', 'mask', 'target_mask'}`` of length seq_len; vocabulary size
    ``FIRST_ID + 2 * num_symbols``.
  """
  if kind not in ("copy", "associative"):
    raise ValueError(f"recall kind must be 'copy' or 'associative', got {kind!r}")
  if seq_len < 6 or num_symbols < 2:
    raise ValueError(f"recall needs seq_len >= 6 and num_symbols >= 2, got {seq_len}, "
                     f"{num_symbols}")
  rng = np.random.default_rng(seed)
  cls_, sep = 2, 3
  out = []
  for _ in range(num_examples):
    if kind == "copy":
      m = (seq_len - 2) // 2
      x = rng.integers(FIRST_ID, FIRST_ID + num_symbols, m)
      ids = np.concatenate([[cls_], x, [sep], x])
      target = np.zeros(len(ids), bool)
      target[m + 2:] = True
    else:
      m = min((seq_len - 4) // 2, num_symbols)
      keys = FIRST_ID + rng.permutation(num_symbols)[:m]
      values = FIRST_ID + num_symbols + rng.integers(0, num_symbols, m)
      q = int(rng.integers(m))
      pairs = np.stack([keys, values], 1).reshape(-1)
      ids = np.concatenate([[cls_], pairs, [sep, keys[q], values[q]]])
      target = np.zeros(len(ids), bool)
      target[-1] = True
    ids = ids.astype(np.int32)
    out.append({"input_ids": ids, "mask": np.ones(len(ids), bool), "target_mask": target})
  return out
