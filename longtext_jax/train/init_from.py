"""Warm starts: where a fresh run's first parameters come from (``config.init_from``).

A source is one function ``load(config, path, params, abstract_state) -> params`` that takes
the freshly initialised parameters and returns them with some subtrees replaced; the
registry ``SOURCES`` names each with one line. The trainer calls :func:`apply` once, after
initialising a new run (never when resuming one: the checkpoint already holds the weights).

Sources:

* ``checkpoint``: another run of this trainer (its workdir, or a checkpoint manager
  directory); copies the top-level submodules ``config.init_from.modules`` of step
  ``config.init_from.step`` (-1: latest). Shapes must match exactly.
* ``hf_bert``: a Hugging Face BERT folder (``config.json`` + ``model.safetensors``); copies
  its weights into every ``bert`` subtree of the model (BERT, BertFirst, ChunkBERT, ...).

Adding a source: write ``def _load_mine(config, path, params, abstract_state)`` here and add
``"mine": _load_mine`` to ``SOURCES``.

``config.model.encoder.pretrained_path`` (a field of the BERT-family encoders) still works:
a non-empty value is an ``hf_bert`` source applied after ``config.init_from``'s own.
"""
from __future__ import annotations

from typing import Any, Callable

from longtext_jax.data import wordpiece_tokenizer
from longtext_jax.encoders import bert_checkpoint  # The one trainer -> BERT link.
from longtext_jax.train import checkpointing

# load(config, path, params, abstract_state) -> params.
Loader = Callable[[Any, str, Any, Any], Any]


def _load_checkpoint(config, path: str, params: Any, abstract_state: Any) -> Any:
  """Copies ``config.init_from.modules`` from another run's checkpoint at ``path``."""
  return checkpointing.load_param_subtrees(path, config.init_from.step,
                                           config.init_from.modules, params, abstract_state)


def _check_special_ids(config, path: str) -> None:
  """The encoder's [CLS]/[SEP] ids must be the folder's (when it has a vocabulary): with
  another checkpoint's ids the model reads a wrong word as [CLS], without any error."""
  enc = config.model.encoder
  if "cls_id" not in enc:
    return
  try:
    ids = wordpiece_tokenizer.special_ids(path)
  except FileNotFoundError:  # A weights-only folder: the config's ids are the user's.
    return
  for field, want in ids.items():
    if enc[field] != want:
      raise ValueError(f"config.model.encoder.{field}={enc[field]}, but the vocabulary of "
                       f"{path} puts it at {want}: set it from the folder "
                       "(longtext_jax.data.wordpiece_tokenizer.special_ids)")


def _load_hf_bert(config, path: str, params: Any, abstract_state: Any) -> Any:
  """Copies a Hugging Face BERT folder's weights into every ``bert`` subtree of ``params``
  (after checking the encoder's [CLS]/[SEP] ids against the folder's vocabulary)."""
  del abstract_state
  _check_special_ids(config, path)
  view = config.copy_and_resolve_references()
  view.unlock()
  view.model.encoder.pretrained_path = path
  return bert_checkpoint.apply_pretrained(view, params)


SOURCES: dict[str, Loader] = {
    "checkpoint": _load_checkpoint,  # Another run's workdir (config.init_from.modules).
    "hf_bert": _load_hf_bert,  # A Hugging Face BERT folder with model.safetensors.
}


def requested(config) -> list[tuple[str, str]]:
  """The warm-start sources a config asks for, in the order they are applied.

  Args:
    config: the experiment config (``init_from.kind``, ``init_from.path`` and, legacy,
      ``model.encoder.pretrained_path``).

  Returns:
    ``[(kind, path), ...]``; empty for a run that starts from its random init.

  Raises:
    ValueError: ``config.init_from.kind`` is not a registered source (naming the choices).
  """
  out = []
  kind = config.init_from.kind
  if config.init_from.path:
    if kind not in SOURCES:
      raise ValueError(f"config.init_from.kind={kind!r} is not a warm-start source; choose "
                       f"one of {sorted(SOURCES)}")
    out.append((kind, config.init_from.path))
  legacy = config.model.encoder.get("pretrained_path", "")
  if legacy and ("hf_bert", legacy) not in out:
    out.append(("hf_bert", legacy))
  return out


def apply(config, params: Any, abstract_state: Any) -> tuple[Any, list[tuple[str, str]]]:
  """Applies every requested source to freshly initialised parameters.

  Args:
    config: the experiment config.
    params: the new run's initial parameters (unboxed, placed on the mesh).
    abstract_state: the TrainState of ``jax.ShapeDtypeStruct`` leaves (with shardings)
      that the loaded parameters must fit.

  Returns:
    ``(params, applied)``: the parameters after all sources, and the ``(kind, path)`` pairs
    that were applied (empty: ``params`` is returned unchanged).
  """
  applied = requested(config)
  for kind, path in applied:
    params = SOURCES[kind](config, path, params, abstract_state)
  return params, applied
