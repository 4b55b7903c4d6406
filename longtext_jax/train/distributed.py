"""Multi-host start-up on JAX's own runtime (``jax.distributed``).

Every process runs the same command; the trainer then shards data per process
(``jax.process_index()``) and builds global arrays with
``jax.make_array_from_process_local_data``. On TPU pod slices, SLURM and Open MPI, JAX
detects the cluster itself: set only ``--config.distributed.initialize=True``. Elsewhere
(e.g. several GPU hosts, or CPU processes on one machine) pass the coordinator, the number
of processes and each one's id, from the config or the environment
(``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``).
"""
from __future__ import annotations

import os

import jax


def initialize(dist_config) -> None:
  """Calls ``jax.distributed.initialize`` when ``dist_config.initialize`` is set."""
  if not dist_config.initialize:
    return
  address = dist_config.coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS")
  num = dist_config.num_processes or int(os.environ.get("JAX_NUM_PROCESSES", 0)) or None
  pid = dist_config.process_id
  if pid < 0:
    pid = int(os.environ["JAX_PROCESS_ID"]) if "JAX_PROCESS_ID" in os.environ else None
  if dist_config.cpu_collectives:
    # CPU collectives across processes need an implementation (gloo ships with jaxlib);
    # this only concerns the CPU client, so it is harmless on GPU/TPU hosts. (Asking for the
    # backend here would start JAX before jax.distributed, which must come first.)
    jax.config.update("jax_cpu_collectives_implementation", dist_config.cpu_collectives)
  jax.distributed.initialize(coordinator_address=address, num_processes=num, process_id=pid)
