"""The long-document benchmark's 'long subset': test documents with more than 510 word pieces.

Park et al. (2022) and ChunkBERT report every model on the full test set and on the documents
that do not fit BERT's 512 positions with [CLS] and [SEP] (more than 510 word pieces). Loaders
give the number of word pieces BEFORE any truncation in ``num_pieces`` (the ``mask`` of a
truncated document undercounts); without it the mask's count is used.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np


def long_subset(split: Mapping[str, np.ndarray], threshold: int = 510
                ) -> dict[str, np.ndarray]:
  """Rows of an in-memory split (dict of stacked arrays) with more than ``threshold`` pieces.

  Raises:
    ValueError: when no document is long (an empty split would report NaN metrics).
  """
  counts = np.asarray(split["num_pieces"] if "num_pieces" in split
                      else np.asarray(split["mask"]).sum(-1))
  keep = counts > threshold
  if not keep.any():
    raise ValueError(f"no document has more than {threshold} word pieces")
  out = {k: np.asarray(v)[keep] for k, v in split.items()}
  out.setdefault("example_id", np.flatnonzero(keep))
  return out
