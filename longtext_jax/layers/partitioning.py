"""Logical axis names for parameters and activations (see docs/scaling.md §2).

Every module names its parameter axes with :func:`named` (or the ``*_inits`` helpers) and
its key activations with :func:`constrain`, in one vocabulary: ``embed`` (model width),
``heads``/``kv`` (attention heads and their width), ``joined_kv`` (heads x kv flattened),
``mlp`` (feed-forward / projection outputs), ``vocab``, ``layers`` (stacked layers),
``gates``, ``hidden``/``recurrent`` (recurrent state units), ``position``, ``classes``,
``next_classes``, ``conv_window``, ``filters`` and, for activations, ``batch``/``length``.
``config.mesh.rules`` maps every name to a mesh axis or to None.

Both are opt-in, so that ``module.init`` outside the trainer returns plain arrays:

* parameters are boxed (``nn.LogicallyPartitioned``) only while
  :func:`logical_axis_names` is active; the values and the RNG use are the same either way.
* :func:`constrain` is a no-op unless :func:`activation_sharding` (mesh + rules) is active.

The trainer (``train/loop.py``) turns both on around ``model.init`` and the jitted steps.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Sequence

import flax.linen as nn
import jax

_NAMES_ON = contextvars.ContextVar("longtext_jax_logical_axis_names", default=False)
_MESH = contextvars.ContextVar("longtext_jax_activation_mesh", default=None)

BATCH_LENGTH_EMBED = ("batch", "length", "embed")


@contextlib.contextmanager
def logical_axis_names(enabled: bool = True):
  """While active, parameters created by this library carry logical axis names."""
  token = _NAMES_ON.set(enabled)
  try:
    yield
  finally:
    _NAMES_ON.reset(token)


def normalize_rules(rules: Sequence) -> tuple:
  """Config rules (lists from JSON/ml_collections) -> flax's ((name, axis-or-tuple), ...)."""
  return tuple((name, tuple(ax) if isinstance(ax, (list, tuple)) else ax)
               for name, ax in rules)


@contextlib.contextmanager
def activation_sharding(mesh: jax.sharding.Mesh, rules: Sequence):
  """While active (also during jit tracing), :func:`constrain` maps logical names through
  ``rules`` onto ``mesh``; ``nn.logical_axis_rules(rules)`` is active too."""
  token = _MESH.set(mesh)
  try:
    with nn.logical_axis_rules(normalize_rules(rules)):
      yield
  finally:
    _MESH.reset(token)


def named(init: Any, axes: Sequence[str | None], force: bool = False) -> Any:
  """``init`` boxed with logical axis names when naming is on (or ``force``)."""
  if force or _NAMES_ON.get():
    return nn.with_logical_partitioning(init, tuple(axes))
  return init


def dense_inits(kernel_axes: Sequence[str], bias_axes: Sequence[str] | None = None,
                kernel_init: Any = nn.linear.default_kernel_init,
                bias_init: Any = nn.initializers.zeros_init()) -> dict[str, Any]:
  """kernel_init/bias_init kwargs for nn.Dense/DenseGeneral/Conv; the bias takes the
  kernel's output axes unless ``bias_axes`` is given."""
  if bias_axes is None:
    bias_axes = kernel_axes[-1:]
  return {"kernel_init": named(kernel_init, kernel_axes),
          "bias_init": named(bias_init, bias_axes)}


def norm_inits(axes: Sequence[str] = ("embed",)) -> dict[str, Any]:
  """scale_init/bias_init kwargs for nn.LayerNorm (the defaults: ones and zeros)."""
  return {"scale_init": named(nn.initializers.ones_init(), axes),
          "bias_init": named(nn.initializers.zeros_init(), axes)}


def embed_init(init: Any = nn.linear.default_embed_init,
               axes: Sequence[str] = ("vocab", "embed")) -> dict[str, Any]:
  """embedding_init kwarg for nn.Embed."""
  return {"embedding_init": named(init, axes)}


def constrain(x: jax.Array, axes: Sequence[str | None] = BATCH_LENGTH_EMBED) -> jax.Array:
  """``nn.with_logical_constraint`` on the mesh of :func:`activation_sharding`; a no-op
  outside it."""
  mesh = _MESH.get()
  if mesh is None:
    return x
  return nn.with_logical_constraint(x, tuple(axes), mesh=mesh)
