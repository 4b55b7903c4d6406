"""Device mesh and batch placement (data parallelism over the 'data' axis)."""
from __future__ import annotations

from typing import Any, Mapping

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def make_mesh(mesh_config) -> Mesh:
  """A 1-axis ('data',) mesh over ``mesh_config.data`` devices (-1: all devices)."""
  devices = jax.devices()
  n = mesh_config.data
  if n == -1:
    n = len(devices)
  if n < 1 or n > len(devices) or len(devices) % n:
    raise ValueError(f"config.mesh.data={mesh_config.data} does not fit the "
                     f"{len(devices)} available devices")
  return Mesh(np.asarray(devices[:n]), ("data",))


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P("data"))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def to_global(local_batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """This process's rows -> global arrays sharded over 'data' (batch axis first)."""
  sharding = batch_sharding(mesh)
  n = mesh.shape["data"] // max(jax.process_count(), 1)
  out = {}
  for key, value in local_batch.items():
    if value.shape[0] % max(n, 1):
      raise ValueError(f"per-process batch {value.shape[0]} is not divisible by this "
                       f"process's {n} devices on the data axis")
    out[key] = jax.make_array_from_process_local_data(sharding, value)
  return out


def replicate_tree(tree: Any, mesh: Mesh) -> Any:
  return jax.device_put(tree, replicated(mesh))
