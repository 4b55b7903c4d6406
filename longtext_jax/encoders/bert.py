"""BERT in Flax linen: the module and the shared base of the encoders built on it.

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

Parameter names mirror Hugging Face's (``embeddings/word_embeddings``, ``layer_3/attention/
query``, ``pooler/dense`` ...). Reading a Hugging Face folder into these parameters is
``encoders/bert_checkpoint.py`` (``from_pretrained``, ``apply_pretrained``); its WordPiece
tokenizer is ``data/wordpiece_tokenizer.py`` (``WordPieceTokenizer.from_pretrained``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp

from longtext_jax.encoders.base import check_prefix_mask
from longtext_jax.layers.attention import heads_major_attention
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
    # Masked keys get the most negative float, as HF's extended attention mask does; a query
    # whose keys are all masked (an all-pad chunk) then attends uniformly, never NaN. The
    # heads-major form is the fastest on CPUs and the same function elsewhere
    # (layers/attention.py).
    drop = nn.Dropout(self.dropout_rate)
    out_BLHK = heads_major_attention(
        q_BLHK, k_BLHK, v_BLHK, mask_BL[:, None, None, :],
        probs_fn=lambda p: drop(p, deterministic=deterministic))
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
      ``bert_checkpoint.HF_CONFIG_KEYS``); defaults give a tiny CPU model.
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
      ``pretrained_path`` they must match its ``config.json``
      (``bert_checkpoint.read_arch`` gives them).
    pretrained_path: a HF folder whose weights the trainer copies into every ``bert``
      subtree of the model's params after init (``bert_checkpoint.apply_pretrained``; ''
      = random init). ``init`` itself never reads it: standalone, after init take
      ``params = bert_checkpoint.load_pretrained_into(variables['params'], path)``.
    cls_id, sep_id: ids of [CLS] and [SEP] (BERT's uncased vocabulary: 101, 102).
  """
  input_kind = "ids"  # Called as encoder(input_ids_BL, mask_BL) (see encoders/base.py).

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
    """The :class:`Bert` submodule these fields describe (named ``name``): every field of
    :class:`Bert` but ``use_pooler`` is read from this module's field of the same name."""
    shared = {f: getattr(self, f) for f in bert_fields() if f != "use_pooler"}
    return Bert(**shared, use_pooler=use_pooler, name=name)

  def check_ids(self, input_ids_BL: Array, mask_BL: Array, who: str) -> None:
    """Raises a ValueError (naming ``who``) unless ids are int[B, L] and mask bool[B, L]."""
    if input_ids_BL.ndim != 2 or mask_BL.shape != input_ids_BL.shape:
      raise ValueError(f"{who}: takes input_ids int[B, L] and mask bool[B, L] "
                       f"(config.model.input='ids'), got {input_ids_BL.shape} and "
                       f"{mask_BL.shape}")
    if not jnp.issubdtype(input_ids_BL.dtype, jnp.integer):
      raise ValueError(f"{who}: input_ids must be integers, got {input_ids_BL.dtype}")
    if mask_BL.dtype != jnp.bool_:
      raise ValueError(f"{who}: mask must be bool, got {mask_BL.dtype}")
    check_prefix_mask(mask_BL, who)  # [CLS] + the first sum(mask) ids + [SEP].


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


# Names that moved to ``bert_checkpoint`` (this module does not import the checkpoint code).
_MOVED_TO_CHECKPOINT = ("HF_CONFIG_KEYS", "arch_from_hf_config", "read_arch",
                        "convert_hf_state", "load_hf_state", "bert_param_shapes",
                        "load_params", "load_pretrained_into", "apply_pretrained",
                        "find_minilm", "from_pretrained")


def __getattr__(name: str):
  """An AttributeError saying where a name that left this module lives now."""
  if name in _MOVED_TO_CHECKPOINT:
    extra = ("; tokenizer = longtext_jax.data.wordpiece_tokenizer.WordPieceTokenizer."
             "from_pretrained(path)" if name == "from_pretrained" else "")
    raise AttributeError(f"bert.{name} moved: use longtext_jax.encoders.bert_checkpoint."
                         f"{name}{extra}")
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
