"""Rematerialisation policies by name (configs say ``remat="dots"``, not a callable).

On XLA:CPU a remat of blocks in a Python loop (BERT's layers, ``Transformer(scan_layers=
False)``) needs :data:`CPU_MEMORY_SCHEDULER`. XLA:CPU's default scheduler ("concurrency
optimized") evidently recomputes the blocks' forwards early in the backward pass and holds
them all at once, so the remat saves almost nothing (BERT, 4 layers, batch 4 x 1024
tokens, D=128, full remat: gradient temporaries 1084 -> 1005 MiB; under the
memory-optimized scheduler 778 -> 352 MiB; docs/benchmarks.md "Remat on XLA:CPU",
tests/test_remat_memory.py). Inside a rolled ``nn.scan`` the loop boundary orders the
recomputation and either scheduler works; in a scan unrolled without a loop XLA merges the
recomputation with the forward and neither does (the encoders keep their loops when a remat
is set). The trainer passes these options to its jitted train step
(``train.cpu_scheduler``).
"""
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


# XLA:CPU compiler options (``jax.jit(..., compiler_options=...)``) for the scheduler
# that orders work to keep peak memory low; GPUs and TPUs schedule for memory already.
CPU_MEMORY_SCHEDULER = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}


def uses_remat(section) -> bool:
  """Whether a (nested) config mapping sets any ``remat`` field to a policy (not 'none')."""
  if not hasattr(section, "items"):
    return False
  for key, value in section.items():
    if key == "remat" and isinstance(value, str) and value != "none":
      return True
    if uses_remat(value):
      return True
  return False


def remat_policy(name: str):
  """Returns the jax checkpoint policy called ``name`` ('none' is not accepted here)."""
  if name not in REMAT_POLICIES:
    raise ValueError(f"unknown remat policy {name!r}; choose 'none' or one of "
                     f"{sorted(REMAT_POLICIES)}")
  return REMAT_POLICIES[name]
