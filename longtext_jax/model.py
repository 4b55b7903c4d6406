"""A model = inputs (token embedding or feature projection) + encoder + task head.

``build_model(config)`` returns a :class:`Model`; ``model.apply(variables, batch, train=False)``
returns a dict with ``logits`` (or ``predictions`` for regression), ``sequence`` and ``pooled``.
The same Model, heads and trainer serve every encoder in ``longtext_jax.encoders.ENCODERS``.
What differs per task kind (head, output key, pairs, causal encoder, vocabulary) is asked of
the :class:`longtext_jax.tasks.Task`; what differs per encoder (embeddings or ids) of the
encoder class's ``input_kind``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax import encoders as encoders_lib
from longtext_jax import pair_model
from longtext_jax import tasks as tasks_lib
from longtext_jax.layers.partitioning import dense_inits, embed_init

Array = jax.Array

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


class Inputs(nn.Module):
  """Maps a batch to x_BLD: ``nn.Embed`` of ``input_ids`` int[B, L] or ``Dense`` of
  ``features`` float[B, L, F]; kind 'ids' passes ``input_ids`` through unchanged for
  encoders that embed ids themselves (``input_kind = "ids"``, e.g. ChunkBert).

  Attributes:
    kind: ``config.model.input``: 'tokens', 'features' or 'ids'.
    d_model: D, the embedding width.
    vocab_size: rows of the embedding table ('tokens').
    dropout_rate: dropout on the embeddings.
    param_dtype: parameter dtype.
  """
  kind: str
  d_model: int
  vocab_size: int = 0
  dropout_rate: float = 0.0
  param_dtype: Any = jnp.float32

  def setup(self):
    """Builds the embedding (``tokens``) or the projection (``features``) and dropout."""
    if self.kind == "tokens":
      self.embed = nn.Embed(self.vocab_size, self.d_model, param_dtype=self.param_dtype,
                            **embed_init(nn.initializers.normal(0.02), ("vocab", "embed")))
    elif self.kind == "features":
      self.proj = nn.Dense(self.d_model, param_dtype=self.param_dtype,
                           **dense_inits(("features", "embed")))
    elif self.kind == "ids":
      return
    else:
      raise ValueError(f"config.model.input must be 'tokens', 'features' or 'ids', got "
                       f"{self.kind!r}")
    self.dropout = nn.Dropout(self.dropout_rate)

  def __call__(self, batch: Mapping[str, Array], deterministic: bool) -> Array:
    """x_BLD float[B, L, D] (or the ids int[B, L] for kind 'ids')."""
    if self.kind == "ids":
      return batch["input_ids"]
    if self.kind == "tokens":
      x_BLD = self.embed(batch["input_ids"])
    else:
      features = batch["features"]
      if "mask" in batch:  # Padding is zeros: a NaN or inf a caller padded with would reach
        # the gradient (0 x NaN) through every encoder's masked branch.
        features = jnp.where(batch["mask"][..., None], features, 0)
      x_BLD = self.proj(features)
    return self.dropout(x_BLD, deterministic=deterministic)

  def attend(self, h_BLD: Array) -> Array:
    """Tied output projection onto the vocabulary (token inputs only): float[B, L, D] ->
  float[B, L, V]."""
    return self.embed.attend(h_BLD)


class Model(nn.Module):
  """Inputs -> encoder -> head. Submodule names ``inputs``, ``encoder``, ``head`` are stable
  (``config.init_from`` copies subtrees by these names)."""
  inputs: nn.Module
  encoder: nn.Module
  head: nn.Module
  output_key: str = "logits"

  def __call__(self, batch: Mapping[str, Array], train: bool = False) -> dict[str, Array]:
    """``{output_key: head output, "sequence": float[B, L, D], "pooled": float[B, D]}``."""
    mask_BL = batch["mask"]
    x_BLD = self.inputs(batch, deterministic=not train)
    enc = self.encoder(x_BLD, mask_BL, deterministic=not train)
    embed = self.inputs if self.inputs.kind == "tokens" else None
    out = self.head(enc, deterministic=not train, embed=embed)
    return {self.output_key: out, "sequence": enc.sequence, "pooled": enc.pooled}


def encoder_kwargs(encoder_config) -> dict[str, Any]:
  """Config fields -> encoder dataclass kwargs (dtype names become jnp dtypes)."""
  kwargs = dict(encoder_config.to_dict() if hasattr(encoder_config, "to_dict")
                else encoder_config)
  kwargs.pop("name")
  for key in ("dtype", "param_dtype"):
    if isinstance(kwargs.get(key), str):
      if kwargs[key] not in DTYPES:
        raise ValueError(f"unknown {key} {kwargs[key]!r}; choose one of {sorted(DTYPES)}")
      kwargs[key] = DTYPES[kwargs[key]]
  return kwargs


def build_encoder(encoder_config) -> nn.Module:
  """The encoder named ``encoder_config.name`` with the config's other fields."""
  name = encoder_config.name
  if name not in encoders_lib.ENCODERS:
    raise ValueError(f"unknown encoder {name!r}; choose one of "
                     f"{sorted(encoders_lib.ENCODERS)}")
  cls = encoders_lib.ENCODERS[name]
  kwargs = encoder_kwargs(encoder_config)
  fields = {f.name for f in dataclasses.fields(cls)} - {"parent", "name"}
  unknown = sorted(set(kwargs) - fields)
  if unknown:
    raise ValueError(f"encoder {name!r} has no field(s) {unknown}; its fields are "
                     f"{sorted(fields)}")
  return cls(**kwargs)


def build_model(config) -> nn.Module:
  """Builds the model described by ``config.model`` and ``config.task``.

  The task kind decides the head, the output key and the model class (a
  :class:`~longtext_jax.pair_model.PairModel` for pair tasks); the encoder class's
  ``input_kind`` decides which ``config.model.input`` values fit it.

  Raises:
    ValueError: an unknown task or encoder, an encoder field it does not have, an input
      kind the encoder cannot take, a task needing a causal encoder with a bidirectional
      one, or a token-predicting task whose vocabulary differs from the model's.
  """
  task = tasks_lib.get_task(config.task)
  encoder = build_encoder(config.model.encoder)
  name = config.model.encoder.name
  if task.needs_causal_encoder and not encoders_lib.is_causal(encoder):
    raise ValueError(f"task {task.name!r} needs a causal encoder: "
                     f"{encoders_lib.causal_fix(name)}")
  mcfg = config.model
  kind = encoders_lib.input_kind(type(encoder))
  if (mcfg.input == "ids") != (kind == "ids"):
    raise ValueError(f"encoder {name!r} "
                     + ("embeds ids itself: set config.model.input='ids'" if kind == "ids" else
                        "takes embeddings: config.model.input='ids' is only for encoders "
                        "that embed ids themselves"))
  if task.predicts_tokens and config.task.vocab_size != mcfg.vocab_size:
    raise ValueError(f"config.task.vocab_size={config.task.vocab_size} differs from "
                     f"config.model.vocab_size={mcfg.vocab_size}")
  inputs = Inputs(kind=mcfg.input, d_model=mcfg.d_model, vocab_size=mcfg.vocab_size,
                  dropout_rate=mcfg.embed_dropout)
  model_cls = pair_model.PairModel if task.pairs else Model  # Pairs: one shared encoder.
  return model_cls(inputs=inputs, encoder=encoder, head=task.head(),
                   output_key=task.output_key)
