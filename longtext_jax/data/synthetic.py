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
