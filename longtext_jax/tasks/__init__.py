"""Tasks: what a task kind needs, owned by one :class:`Task` object per kind.

Rooms: ``base.py`` (the :class:`Task` contract and the label layouts loaders produce),
``heads.py`` (flax heads), ``losses.py`` (jnp losses and additive metric statistics), and one
file per family of kinds (``classification.py``, ``regression.py``, ``tagging.py``,
``language_model.py``). ``get_task(config.task)`` picks the kind named
``config.task.name`` from :data:`TASKS`.

A new task kind is one new file defining a ``Task`` subclass (its ``name``, label fields and
layout, head, loss, metrics, ``decode``) plus one line in ``_KINDS`` below.
"""
from __future__ import annotations

from longtext_jax.tasks.base import LAYOUTS, Task
from longtext_jax.tasks.classification import (Binary, Classification, MultiLabel,
                                               PairClassification)
from longtext_jax.tasks.heads import CrfHead, LanguageModelHead, PooledHead, TokenHead
from longtext_jax.tasks.language_model import CausalLM, MaskedLM
from longtext_jax.tasks.losses import example_weight, matthews_corrcoef
from longtext_jax.tasks.regression import Regression
from longtext_jax.tasks.tagging import CrfTagging, SpanTagging, Tagging

# The registry: one line per task kind (its class carries its registry ``name``).
_KINDS = (
    Classification,
    Binary,
    MultiLabel,
    Regression,
    Tagging,
    MaskedLM,
    CausalLM,
    SpanTagging,
    CrfTagging,
    PairClassification,
)
TASKS: dict[str, type[Task]] = {kind.name: kind for kind in _KINDS}
assert len(TASKS) == len(_KINDS), "two task kinds share a name"


def get_task(task_config) -> Task:
  """The task kind named ``task_config.name`` (one of :data:`TASKS`), holding the config."""
  name = task_config.name
  if name not in TASKS:
    raise ValueError(f"unknown task {name!r} (config.task.name); choose one of "
                     f"{sorted(TASKS)}")
  return TASKS[name](task_config)


__all__ = ["LAYOUTS", "TASKS", "Task", "get_task", "Classification", "Binary", "MultiLabel",
           "PairClassification", "Regression", "Tagging", "SpanTagging", "CrfTagging",
           "MaskedLM", "CausalLM", "PooledHead", "TokenHead", "LanguageModelHead", "CrfHead",
           "example_weight", "matthews_corrcoef"]
