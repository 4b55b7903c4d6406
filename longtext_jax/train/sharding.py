"""Device mesh, parameter and batch shardings.

The mesh has three axes, sized by ``config.mesh`` (one of them may be -1: fill the rest):

* ``data``: data parallelism (batch split, parameters replicated);
* ``fsdp``: the batch is split over it too, and parameters/optimizer state are sharded over
  it (ZeRO-3 / fully sharded data parallelism);
* ``tensor``: tensor (model) parallelism of the dimensions named by logical axes.

Parameters created with ``nn.with_logical_partitioning`` carry logical axis names which
``config.mesh.rules`` maps onto mesh axes. A parameter without logical names (or whose names
map to nothing) still gets sharded over ``fsdp`` along its largest dimension divisible by the
``fsdp`` size, once it holds at least ``config.mesh.fsdp_min_size`` elements. So every encoder
gets FSDP memory savings, and those that name their axes also get tensor parallelism.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from longtext_jax.layers import partitioning

AXES = ("data", "fsdp", "tensor")
BATCH_AXES = ("data", "fsdp")


def mesh_shape(mesh_config, num_devices: int) -> tuple[int, ...]:
  """The (data, fsdp, tensor) sizes of ``config.mesh``, its one -1 axis filled in.

  Args:
    mesh_config: ``config.mesh`` (fields ``data``, ``fsdp``, ``tensor``).
    num_devices: devices available.

  Returns:
    Three positive sizes whose product is at most ``num_devices``.

  Raises:
    ValueError: more than one -1, a -1 that cannot be filled, or too many devices asked for.
  """
  sizes = [int(mesh_config[a]) for a in AXES]
  if sizes.count(-1) > 1:
    raise ValueError(f"config.mesh: at most one axis may be -1, got {dict(zip(AXES, sizes))}")
  known = int(np.prod([s for s in sizes if s != -1]))
  if -1 in sizes:
    if num_devices % known:
      raise ValueError(f"config.mesh {dict(zip(AXES, sizes))} does not divide the "
                       f"{num_devices} devices")
    sizes[sizes.index(-1)] = num_devices // known
  if any(s < 1 for s in sizes) or int(np.prod(sizes)) > num_devices:
    raise ValueError(f"config.mesh {dict(zip(AXES, sizes))} needs {int(np.prod(sizes))} "
                     f"devices; {num_devices} are available")
  return tuple(sizes)


def make_mesh(mesh_config) -> Mesh:
  """The (data, fsdp, tensor) mesh over the first prod(sizes) devices."""
  devices = jax.devices()
  shape = mesh_shape(mesh_config, len(devices))
  n = int(np.prod(shape))
  if n < len(devices) and jax.process_count() > 1:
    # Every process feeds its slice of the batch to its own devices: the mesh must cover them.
    raise ValueError(f"mesh {dict(zip(AXES, shape))} uses {n} of {len(devices)} devices; with "
                     f"{jax.process_count()} processes it must use all of them (set one axis "
                     "to -1)")
  check_batch_shards(dict(zip(AXES, shape)), jax.process_count())
  return Mesh(np.asarray(devices[:n]).reshape(shape), AXES)


def check_batch_shards(shape: Mapping[str, int], process_count: int) -> None:
  """Each process loads its own rows of a batch (``global / process_count``), so the batch
  must split into a whole number of shards per process: ``data x fsdp`` a multiple of
  ``process_count``. Fewer shards than processes (e.g. ``data=1`` with the tensor axis
  across hosts) would make processes that share a shard feed it different rows, which JAX
  cannot tell: each would train on its own half while their parameters should agree.

  Raises:
    ValueError: naming the mesh and the process count.
  """
  shards = int(shape["data"]) * int(shape["fsdp"])
  if process_count > 1 and shards % process_count:
    raise ValueError(
        f"mesh {dict(shape)}: the batch is split into data x fsdp = {shards} shards, not a "
        f"multiple of the {process_count} processes; each process loads its own rows, so each "
        "needs whole shards of its own: give the data (or fsdp) axis a multiple of the "
        "process count (e.g. mesh.data=-1 and tensor parallelism within each host)")


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Batch axis split over data x fsdp; everything else replicated."""
  return NamedSharding(mesh, P(BATCH_AXES))


def replicated(mesh: Mesh) -> NamedSharding:
  """Every device holds the whole array."""
  return NamedSharding(mesh, P())


def _auto_fsdp(spec: P, shape: Sequence[int], mesh: Mesh, min_size: int) -> P:
  fsdp = mesh.shape["fsdp"]
  used = {a for s in spec if s is not None for a in ((s,) if isinstance(s, str) else s)}
  if fsdp == 1 or "fsdp" in used or int(np.prod(shape, dtype=np.int64)) < min_size:
    return spec
  entries = list(spec) + [None] * (len(shape) - len(spec))
  free = [i for i, n in enumerate(shape) if entries[i] is None and n % fsdp == 0]
  if not free:
    return spec
  dim = max(free, key=lambda i: shape[i])
  entries[dim] = "fsdp"
  return P(*entries)


def state_shardings(abstract_boxed: Any, mesh: Mesh, rules: Sequence, min_size: int) -> Any:
  """NamedShardings for a (possibly ``nn.LogicallyPartitioned``-boxed) abstract tree."""
  logical = nn.get_partition_spec(abstract_boxed)
  unboxed = nn.meta.unbox(abstract_boxed)
  rules = partitioning.normalize_rules(rules)

  def one(spec, leaf):
    mesh_spec = nn.logical_to_mesh_axes(tuple(spec), rules) if len(spec) else P()
    mesh_spec = P(*[a if a is None or isinstance(a, str) or len(a) != 1 else a[0]
                    for a in mesh_spec])
    mesh_spec = _drop_trivial(_auto_fsdp(mesh_spec, leaf.shape, mesh, min_size), mesh,
                              leaf.shape)
    return NamedSharding(mesh, mesh_spec)

  return jax.tree.map(one, logical, unboxed, is_leaf=lambda x: isinstance(x, P))


def _drop_trivial(spec: P, mesh: Mesh, shape) -> P:
  """Removes axes that do not divide their dimension (e.g. a tiny head count)."""
  out = []
  for dim, entry in zip(shape, list(spec) + [None] * (len(shape) - len(spec))):
    if entry is None:
      out.append(None)
      continue
    axes = (entry,) if isinstance(entry, str) else tuple(entry)
    size = int(np.prod([mesh.shape[a] for a in axes]))
    out.append(entry if dim % size == 0 else None)
  return P(*out)


def to_global(local_batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """This process's rows -> global arrays whose batch axis is split over data x fsdp."""
  sharding = batch_sharding(mesh)
  processes = max(jax.process_count(), 1)
  check_batch_shards(mesh.shape, processes)
  n = mesh.shape["data"] * mesh.shape["fsdp"] // processes
  out = {}
  for key, value in local_batch.items():
    if value.shape[0] % max(n, 1):
      raise ValueError(f"per-process batch {value.shape[0]} is not divisible by this "
                       f"process's {n} batch shards (mesh data x fsdp)")
    # The global shape stated: rows that do not add up to it raise instead of being taken
    # as the whole batch.
    out[key] = jax.make_array_from_process_local_data(
        sharding, value, (value.shape[0] * processes,) + value.shape[1:])
  return out


def eval_batch_size(requested: int, mesh: Mesh) -> int:
  """``requested`` rounded up to a multiple of the batch shards (data x fsdp): evaluation
  completes its batches with filler rows that no metric counts, so any
  ``data.eval_batch_size`` works on any mesh."""
  shards = int(mesh.shape["data"]) * int(mesh.shape["fsdp"])
  return -(-max(int(requested), 1) // shards) * shards
