"""Random tiny BERTs written as Hugging Face folders (config.json, model.safetensors with HF
parameter names, optionally vocab.txt), for the tests of loading pretrained weights."""
from __future__ import annotations

import json
import os

import jax
import numpy as np

from longtext_jax.encoders import bert as bert_lib
from longtext_jax.encoders import bert_checkpoint

TINY = dict(vocab_size=16, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=24, max_position_embeddings=40, type_vocab_size=2,
            layer_norm_eps=1e-12, hidden_act="gelu", model_type="bert")


def random_state(cfg: dict, scale: float = 1.0, seed: int = 0) -> dict[str, np.ndarray]:
  """HF-named float32 weights of the BERT ``cfg`` describes, drawn N(0, scale^2) in the
  order of the Flax parameter tree (names prefixed 'bert.', as HF BertModel folders are)."""
  module = bert_lib.Bert(**bert_checkpoint.arch_from_hf_config(cfg))
  rng = np.random.default_rng(seed)
  state = {}
  hf_name = bert_checkpoint._hf_name  # pylint: disable=protected-access
  for path, leaf in jax.tree_util.tree_flatten_with_path(
      bert_checkpoint.bert_param_shapes(module))[0]:
    name, transform = hf_name(tuple(k.key for k in path))
    shape = tuple(leaf.shape)[::-1] if transform == "transpose" else tuple(leaf.shape)
    state["bert." + name] = (scale * rng.normal(size=shape)).astype(np.float32)
  return state


def write_folder(folder, cfg: dict | None = None, scale: float = 1.0,
                 vocab: list[str] | None = None, seed: int = 0) -> tuple[dict, dict]:
  """Writes config.json and model.safetensors (and vocab.txt, one piece a line, when
  ``vocab`` is given) into ``folder``; returns (config, state)."""
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  cfg = dict(TINY if cfg is None else cfg)
  if vocab is not None:
    cfg["vocab_size"] = len(vocab)
  folder = str(folder)
  os.makedirs(folder, exist_ok=True)
  state = random_state(cfg, scale, seed)
  save_file(state, os.path.join(folder, "model.safetensors"))
  with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
    json.dump(cfg, f)
  if vocab is not None:
    with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as f:
      f.write("\n".join(vocab) + "\n")
  return cfg, state
