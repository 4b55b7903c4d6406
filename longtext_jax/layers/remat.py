"""Rematerialisation policies by name (configs say ``remat="dots"``, not a callable)."""
from __future__ import annotations

import jax

REMAT_POLICIES = {
    # Recompute everything in the backward pass: least memory.
    "full": jax.checkpoint_policies.nothing_saveable,
    # Keep matmul outputs, recompute elementwise work.
    "dots": jax.checkpoint_policies.checkpoint_dots,
    # Keep matmul outputs without batch dimensions (weights-side), recompute attention.
    "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    # Save everything (remat is a no-op); handy to compare memory.
    "everything": jax.checkpoint_policies.everything_saveable,
}


def remat_policy(name: str):
  """Returns the jax checkpoint policy called ``name`` ('none' is not accepted here)."""
  if name not in REMAT_POLICIES:
    raise ValueError(f"unknown remat policy {name!r}; choose 'none' or one of "
                     f"{sorted(REMAT_POLICIES)}")
  return REMAT_POLICIES[name]
