"""What every experiment config shares: the config-arg parser, the `tiny` switch, `encoder=`.

A config's arg (``--config=configs/x.py:ARG``) is a comma-separated list of items:

  * positional values, in order (e.g. the dataset), each from its list of choices;
  * bare flags (e.g. ``tiny``, ``crf``);
  * ``key=value`` options (e.g. ``encoder=ran``, ``pretrained=/models/bert``); a positional
    may also be given as ``name=value``.

``tiny`` (every config) shrinks the run to seconds on a CPU (:func:`tiny`); ``encoder=<name>``
(every task config) swaps in any registered encoder with sizes fitted to the config
(:func:`encoder_for`). Errors name the item and the valid choices.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Collection, Mapping, Sequence

import ml_collections

from longtext_jax import encoders
from longtext_jax.config import base_config, encoder_config
from longtext_jax.data import tokenizers
from longtext_jax.encoders import chunk_bert

REQUIRED = object()  # Default of a positional that must be given.
ENCODER_NAMES = tuple(sorted(encoders.ENCODERS))


@dataclasses.dataclass(frozen=True)
class Positional:
  """One positional item of a config arg.

  Attributes:
    name: its name (also accepted as ``name=value``).
    choices: valid values (None: any non-empty string).
    default: value when omitted (``REQUIRED``: must be given).
  """
  name: str
  choices: Collection[str] | None
  default: Any = REQUIRED


# The first item of the configs whose arg is an encoder name (masked_summation, listops, ...).
ENCODER_ARG = Positional("encoder", ENCODER_NAMES, "transformer")


def parse_arg(arg: str | None, positional: Sequence[Positional] = (),
              flags: Collection[str] = ("tiny",),
              options: Mapping[str, Collection[str] | None] | None = None
              ) -> dict[str, Any]:
  """Parses a config arg such as ``'local,encoder=ran,tiny'``.

  Args:
    arg: the text after ``:`` in ``--config=path:arg`` ('' or None: all defaults).
    positional: the positional items in order.
    flags: names of bare flags (each becomes True when present, else False).
    options: ``key=value`` options: name -> valid values (None: any string). Every option
      defaults to None when absent. ``encoder`` is added (any registered encoder name).

  Returns:
    name -> value for every positional, flag and option.

  Raises:
    ValueError: naming the bad item and the valid choices.
  """
  options = dict(options or {})
  if not any(p.name == "encoder" for p in positional):
    options.setdefault("encoder", ENCODER_NAMES)
  spec = ",".join([f"<{p.name}>" if p.default is REQUIRED else f"[<{p.name}>]"
                   for p in positional] + [f"[{f}]" for f in sorted(flags)]
                  + [f"[{k}=...]" for k in options])
  def fail(why):
    raise ValueError(f"config arg {arg!r}: {why} (expected '{spec}')")

  out: dict[str, Any] = {f: False for f in flags}
  out.update({k: None for k in options})
  given: dict[str, str] = {}
  free = list(positional)
  for item in (arg or "").split(","):
    if not item:
      continue
    key, eq, value = item.partition("=")
    if eq:
      if key in given or (out.get(key) not in (None, False)):
        fail(f"{key!r} given twice")
      if any(p.name == key for p in free):
        given[key] = value
        free = [p for p in free if p.name != key]
      elif key in options:
        if options[key] is not None and value not in options[key]:
          fail(f"{key}={value!r}: choose one of {sorted(options[key])}")
        out[key] = value
      else:
        fail(f"unknown option {key!r}; options: {sorted(options)}, positionals: "
             f"{[p.name for p in positional]}")
    elif item in flags:
      out[item] = True
    elif free:
      given[free.pop(0).name] = item
    else:
      fail(f"unknown option {item!r}; flags: {sorted(flags)}")
  for p in positional:
    if p.name in given:
      value = given[p.name]
      if p.choices is not None and value not in p.choices:
        fail(f"{p.name} {value!r} is not one of {sorted(p.choices)}")
      out[p.name] = value
    elif p.default is REQUIRED:
      fail(f"missing {p.name} (one of {sorted(p.choices or ())})")
    else:
      out[p.name] = p.default
  return out


def set_fields(c: ml_collections.ConfigDict, values: Mapping[str, Any]) -> None:
  """Sets dotted fields, e.g. ``{'data.seq_len': 64}``; a misspelt field is an error."""
  for dotted, value in values.items():
    *path, last = dotted.split(".")
    node = c
    for key in path:
      node = node[key]
    if last not in node:
      raise KeyError(f"config has no field {dotted!r}")
    node[last] = value


def tiny(c: ml_collections.ConfigDict, num_steps: int, eval_every: int, log_every: int = 10,
         warmup_steps: int = 5, **fields: Any) -> None:
  """The one `tiny` switch: shrinks ``c`` in place to a seconds-long CPU run.

  Sets the step counts (``train.checkpoint_every`` = ``eval_every``) and the warmup, then
  the config's own smaller sizes.

  Args:
    c: the config.
    num_steps: ``train.num_steps``.
    eval_every: ``train.eval_every`` and ``train.checkpoint_every``.
    log_every: ``train.log_every``.
    warmup_steps: ``optim.warmup_steps``.
    **fields: dotted field -> value with '.' written '__' (``data__seq_len=64``).
  """
  c.train.num_steps = num_steps
  c.train.eval_every = c.train.checkpoint_every = eval_every
  c.train.log_every = log_every
  c.optim.warmup_steps = warmup_steps
  set_fields(c, {k.replace("__", "."): v for k, v in fields.items()})


# The tiny sizes of the generated sources (pass to :func:`tiny` as ``**SMALL_DATA``).
SMALL_DATA = dict(data__num_train=256, data__num_eval=64, data__batch_size=16,
                  data__eval_batch_size=32, model__d_model=32)


def steps(num_steps: int, every: int, **fields: Any) -> dict[str, Any]:
  """``train`` fields: ``num_steps``, evaluating and checkpointing ``every`` steps, then
  ``fields`` (for :func:`experiment`)."""
  return dict(num_steps=num_steps, eval_every=every, checkpoint_every=every, **fields)


def experiment(c: ml_collections.ConfigDict | None = None,
               **sections: Mapping[str, Any]) -> ml_collections.ConfigDict:
  """A config: ``c`` (default :func:`longtext_jax.config.base_config`) with fields set.

  Args:
    c: the config to change in place (None: a new base config).
    **sections: section name -> {field: value} (e.g. ``data=dict(seq_len=64)``); fields
      must exist in the schema, so a misspelling is an error.

  Returns:
    The config.
  """
  c = base_config() if c is None else c
  for section, values in sections.items():
    set_fields(c, {f"{section}.{key}": value for key, value in values.items()})
  return c


def encoder_for(name: str, c: ml_collections.ConfigDict, small: bool = False,
                **overrides: Any) -> ml_collections.ConfigDict:
  """``model.encoder`` for any registered encoder, sized for config ``c``.

  The encoder's defaults, then: 2 layers (1 when ``small``), a window/chunk of
  ``data.pad_multiple`` (or 64, 8 when ``small``), a causal mask for task 'lm', positions
  up to ``data.seq_len``; an encoder that embeds ids itself (the BERT family) gets width
  ``model.d_model``, the config's vocabulary and special ids, and ``model.input='ids'`` is
  set on ``c``.

  Args:
    name: a key of ``longtext_jax.encoders.ENCODERS``.
    c: the experiment config (read; ``model.input`` set for id encoders).
    small: tiny sizes.
    **overrides: encoder fields set last.

  Returns:
    The encoder ConfigDict.
  """
  enc = encoder_config(name)
  window = c.data.pad_multiple if c.data.pad_multiple > 1 else (8 if small else 64)
  sizes = {"num_layers": 1 if small else 2, "num_steps": 2, "num_cycles": 1 if small else 2,
           "window_size": window, "chunk_size": window, "max_length": window * 8,
           "segment_length": window * 2, "overlap": window // 2}
  for key, value in sizes.items():
    if key in enc:
      enc[key] = value
  if "max_len" in enc:
    enc.max_len = max(enc.max_len, c.data.seq_len)
  if c.task.name == "lm":
    if "causal" in enc:
      enc.causal = True
    if "mask_type" in enc:
      enc.mask_type = "causal"
  if encoders.input_kind(encoders.ENCODERS[name]) == "ids":
    c.model.input = "ids"
    enc.hidden_size = c.model.d_model
    enc.intermediate_size = 2 * c.model.d_model
    enc.num_layers = 1 if small else 2
    if "num_last_layers" in enc:  # ChunkBert averages at most every layer's output.
      enc.num_last_layers = min(enc.num_last_layers, enc.num_layers + 1)
    enc.vocab_size = c.model.vocab_size
    if c.data.tokenizer.kind != "wordpiece":
      enc.cls_id = tokenizers.SPECIAL_IDS["cls"]
      enc.sep_id = tokenizers.SPECIAL_IDS["sep"]
  elif c.model.input == "ids":  # Switching from an id encoder: embed the tokens here.
    c.model.input = "tokens"
  for key, value in overrides.items():
    enc[key] = value
  fit_padding(c, enc)
  return enc


def fit_padding(c: ml_collections.ConfigDict,
                enc: ml_collections.ConfigDict | None = None) -> None:
  """Sets ``data.pad_multiple`` / ``data.pad_offset`` to whole chunks of a ChunkBERT encoder
  (``chunk_bert.padding``; no-op for the others). ``enc``: the encoder config (default
  ``c.model.encoder``). Call it once the encoder's chunk size and layout are final: a later
  ``--config.model.encoder.chunk_size`` keeps the old padding for training (still correct,
  with up to a chunk of padding per batch; the Predictor uses the encoder's own)."""
  enc = c.model.encoder if enc is None else enc
  if enc.name == "chunk_bert":
    c.data.pad_multiple, c.data.pad_offset = chunk_bert.padding(enc.chunk_size, enc.layout)


def tuned_encoder(name: str, tuned: Mapping[str, Mapping[str, Any]],
                  c: ml_collections.ConfigDict, small: bool = False,
                  small_fields: Mapping[str, Any] | None = None) -> ml_collections.ConfigDict:
  """``model.encoder`` for ``name``: its ``tuned`` settings when it has some (the other
  fields keep the encoder's defaults; with ``small``, then those of ``small_fields`` the
  encoder has), else :func:`encoder_for` sizes."""
  if name not in tuned:
    return encoder_for(name, c, small=small)
  enc = encoder_config(name, **tuned[name])
  for key, value in (small_fields or {}).items() if small else ():
    if key in enc:
      enc[key] = value
  return enc


def apply_encoder_option(c: ml_collections.ConfigDict, args: Mapping[str, Any]) -> None:
  """``encoder=<name>`` from the parsed arg: replaces ``c.model.encoder`` (no-op if absent)."""
  if args.get("encoder"):
    c.model.encoder = encoder_for(args["encoder"], c, small=bool(args.get("tiny")))
