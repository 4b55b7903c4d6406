"""Use a trained run: load a workdir (or an export) and predict, embed or evaluate.

  from longtext_jax import inference
  p = inference.load("runs/x")             # best checkpoint (else the latest); step= picks one
  p.predict(["a document", "another"])    # one dict per document (see Predictor.predict)
  p.embed(["a document"])                 # float[N, D]: the encoder's pooled vectors
  p.evaluate("test.jsonl")                # the task's metrics (+ per class, confusion matrix)

``load`` rebuilds everything from the folder alone (``config.json``, ``data_info.json``
with the label names and the tokenizer, the checkpoint's parameters; the optimizer state is
not read), so the training data need not be present. The same works on a folder written by
``python -m longtext_jax.export`` (``params.safetensors``, no pickle).

Documents of any length are sorted by length and batched per *length bucket*: lengths are
padded to ``pad_multiple * 2**k - pad_offset`` (``config.data``: the window / chunk size,
and ChunkBERT's 2 specials) and each bucket has a fixed number of rows (``batch_size``, fewer for long buckets so that
a batch holds at most ``max_batch_tokens`` tokens), so each jitted function compiles once
per bucket. The encoders' padding invariance makes a prediction independent of the batch
a document lands in. Text is encoded as the training loader encoded it (the tokenizer,
``[CLS]``/``[SEP]``, the cut and empty-text rule of :func:`training_options`, pairs where
:func:`pair_source` says training read them); a document longer than the model can read
(learned position tables, BERT's 512) is cut to what it can read, and its prediction says
``truncated: True``. See docs/inference.md.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging as std_logging
import math
import os
from typing import Any, Callable, Iterable, Mapping, Sequence

from absl import logging
import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from longtext_jax import config as config_lib
from longtext_jax import data as data_lib
from longtext_jax import fileio
from longtext_jax import metrics_conll
from longtext_jax import model as model_lib
from longtext_jax import tasks as tasks_lib
from longtext_jax.data import pipeline
from longtext_jax.data import text as text_lib
from longtext_jax.data import tokenizers as tokenizers_lib
from longtext_jax.encoders import base as encoders_base
from longtext_jax.tasks import classification

EXPORT_PARAMS = "params.safetensors"  # The parameter file of an export folder.
EXPORT_INFO = "export_info.json"  # Its step, source and the digest of every file (written last).
CONFIG_FILE = "config.json"
# Default tokens per batch (rows x bucket length): long buckets get fewer rows.
DEFAULT_MAX_BATCH_TOKENS = 1 << 16
# RAN batches padded past this many tokens are streamed through the encoder this many tokens
# at a time (rounded down to a multiple of the window): see Predictor.stream_chunk.
DEFAULT_STREAM_CHUNK = 8192


# ---------------------------------------------------------------------------------------------
# The config and the model of a run.


def _as_schema_value(value: Any, default: Any) -> Any:
  """A JSON value in the type of the schema's ``default`` (lists -> tuples)."""
  if isinstance(value, list) and isinstance(default, tuple):
    return tuple(_as_schema_value(v, ()) if isinstance(v, list) else v for v in value)
  if isinstance(value, int) and not isinstance(value, bool) and isinstance(default, float):
    return float(value)
  return value


def _update(config: ml_collections.ConfigDict, values: Mapping[str, Any], where: str,
            source: str) -> None:
  for key, value in values.items():
    if key not in config:
      raise ValueError(f"{source}: field {where}{key} is not in this version's config schema "
                       "(longtext_jax.config.base_config); was the run written by another "
                       "version of longtext_jax?")
    current = config[key]
    if isinstance(current, ml_collections.ConfigDict):
      if not isinstance(value, Mapping):
        raise ValueError(f"{source}: field {where}{key} must be a section, got {value!r}")
      _update(current, value, f"{where}{key}.", source)
    elif value is not None:
      config[key] = _as_schema_value(value, current)


def config_from_json(values: Mapping[str, Any], source: str = "config.json"
                     ) -> ml_collections.ConfigDict:
  """Rebuilds a run's config from the dict its ``config.json`` holds.

  Starts from :func:`longtext_jax.config.base_config` with the encoder's own fields
  (:func:`longtext_jax.config.encoder_config`), then sets every value of ``values``.

  Args:
    values: the parsed ``config.json``.
    source: names the file in errors.

  Returns:
    The config (unlocked).

  Raises:
    ValueError: a field that the schema does not have (naming it), or a section given as a
      value.
  """
  c = config_lib.base_config()
  name = values.get("model", {}).get("encoder", {}).get("name")
  if name is not None:
    c.model.encoder = config_lib.encoder_config(name)
  _update(c, values, "", source)
  return c


def read_config(folder: str) -> ml_collections.ConfigDict:
  """The config saved in ``<folder>/config.json`` (a workdir or an export).

  Raises:
    FileNotFoundError: no config.json there (not a workdir or export).
  """
  path = os.path.join(folder, CONFIG_FILE)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path} not found: {folder!r} is not a run directory (written by "
                            "python -m longtext_jax.main) nor an export (python -m "
                            "longtext_jax.export)")
  with open(path, encoding="utf-8") as f:
    try:
      values = json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}: not valid JSON ({e})") from None
  return config_from_json(values, path)


def example_batch(config, task: tasks_lib.Task, length: int = 16) -> dict[str, np.ndarray]:
  """A one-row batch of zeros with the keys and dtypes the model reads (for ``init``)."""
  length = pipeline.padded_length(length, config.data.pad_multiple, config.data.pad_offset)
  batch = {"mask": np.ones((1, length), bool)}
  if config.model.input == "features":
    batch["features"] = np.zeros((1, length, config.data.feature_dim), np.float32)
  else:
    batch["input_ids"] = np.zeros((1, length), np.int32)
  if task.pairs:
    batch["token_type_ids"] = np.zeros((1, length), np.int32)
  return batch


def abstract_params(model, config, task: tasks_lib.Task) -> Any:
  """The model's parameter tree as ``jax.ShapeDtypeStruct`` leaves (nothing allocated)."""
  batch = example_batch(config, task)
  boxed = jax.eval_shape(lambda: model.init(jax.random.key(0), batch, train=False)["params"])
  return flax.linen.meta.unbox(boxed)


# ---------------------------------------------------------------------------------------------
# Checkpoints and exports.


class _NoReadOnlyNotice(std_logging.Filter):
  """Drops Orbax's warning that a read-only manager's directory is read only (what we asked
  for; printed twice by every load)."""

  def filter(self, record: std_logging.LogRecord) -> bool:
    return record.msg != "Given directory is read only=%s"


def _managers(workdir: str) -> list[tuple[str, Any]]:
  """(name, read-only CheckpointManager) for ``best/`` and ``checkpoints/`` that exist."""
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  out = []
  quiet = _NoReadOnlyNotice()
  absl_logger = logging.get_absl_logger()
  absl_logger.addFilter(quiet)
  try:
    for name in ("best", "checkpoints"):
      directory = os.path.join(workdir, name)
      if os.path.isdir(directory):
        out.append((name, ocp.CheckpointManager(
            os.path.abspath(directory),
            item_handlers={"state": ocp.PyTreeCheckpointHandler(),
                           "data": ocp.JsonCheckpointHandler()},
            options=ocp.CheckpointManagerOptions(read_only=True, create=False,
                                                 save_interval_steps=0))))
  finally:
    absl_logger.removeFilter(quiet)
  return out


def restore_params(workdir: str, abstract: Any, step: int | None = None
                   ) -> tuple[Any, int, str]:
  """Reads only the parameters of a checkpoint of ``workdir`` (not the optimizer state).

  Args:
    workdir: the run directory.
    abstract: the model's parameter tree of ShapeDtypeStructs (:func:`abstract_params`).
    step: None: the best checkpoint (``best/``), else the latest of ``checkpoints/``; an int
      picks that step in ``checkpoints/`` (or ``best/``).

  Returns:
    (params on the default device, the step, the checkpoint folder it came from).

  Raises:
    FileNotFoundError: no checkpoint (or not that step), naming the available steps.
    ValueError: the checkpoint's parameters do not match the model built from the config
      (naming the first parameter that differs).
  """
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  from longtext_jax.train import checkpointing  # pylint: disable=import-outside-toplevel
  managers = _managers(workdir)
  available = {name: sorted(m.all_steps()) for name, m in managers}
  if step is None:  # best/'s step, then checkpoints/ newest first.
    candidates = [(name, m, s) for name, m in managers
                  for s in sorted(m.all_steps(), reverse=True)]
  else:
    candidates = [(name, m, step) for name, m in
                  sorted(managers, key=lambda nm: nm[0] != "checkpoints")
                  if step in m.all_steps()][:1]
  try:
    if not candidates:
      if not any(available.values()):
        raise FileNotFoundError(
            f"{workdir}: no checkpoint in checkpoints/ or best/ (train first: python -m "
            "longtext_jax.main --config=... --workdir=...; a run saves at "
            "train.checkpoint_every steps and at its end)")
      raise FileNotFoundError(f"{workdir}: no checkpoint at step {step}; available: "
                              + ", ".join(f"{k}/ {v}" for k, v in available.items()))
    name, manager, step = _first_intact(workdir, candidates, available)
    where = f"checkpoint {workdir}/{name}/{step}"
    saved = checkpointing.state_metadata(manager, step)["params"]
    checkpointing.check_compatible(abstract, saved, where)
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device),
                          abstract)
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(
        {"params": target}, restore_args={"params": ocp.checkpoint_utils.construct_restore_args(
            target)}, partial_restore=True)))
  finally:
    for _, m in managers:
      m.close()
  return restored["state"]["params"], int(step), os.path.join(workdir, name, str(step))


def _first_intact(workdir: str, candidates: Sequence[tuple[str, Any, int]],
                  available: Mapping[str, Sequence[int]]) -> tuple[str, Any, int]:
  """The first of ``candidates`` whose files match their ``good.json`` record (the
  trainer's check: a step without a record, written before records existed or by a save
  still running, is checked for its structure only); each damaged one is logged, naming
  the file and why, and skipped.

  Raises:
    CheckpointDamagedError: every candidate is damaged (naming each, and the steps
      available).
  """
  from longtext_jax.train import checkpointing  # pylint: disable=import-outside-toplevel
  damaged = []
  for name, manager, step in candidates:
    try:
      checkpointing.check_step_dir(os.path.join(workdir, name, str(step)))
    except checkpointing.CheckpointDamagedError as e:
      damaged.append(f"{name}/{step} ({e.tag}: {e.reason})")
      continue
    if damaged:
      logging.warning("%s: skipped damaged checkpoint%s %s; using %s/%d instead%s", workdir,
                      "s" * (len(damaged) > 1), "; ".join(damaged), name, step,
                      " (not the best dev step)" if name != "best" else "")
    return name, manager, step
  raise checkpointing.CheckpointDamagedError(
      "damaged", f"{workdir}: the checkpoint{'s' * (len(damaged) > 1)} to read "
      f"{'are' if len(damaged) > 1 else 'is'} damaged: " + "; ".join(damaged)
      + ". Available: " + ", ".join(f"{k}/ {list(v)}" for k, v in available.items())
      + " (choose another with --step=N)")


def flatten_params(params: Any) -> dict[str, Any]:
  """{'encoder/layers_0/query/kernel': array, ...}: a nested parameter dict, flattened."""
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    out["/".join(str(getattr(k, "key", k)) for k in path)] = leaf
  return out


def unflatten_params(flat: Mapping[str, Any]) -> dict[str, Any]:
  """The inverse of :func:`flatten_params`."""
  out: dict[str, Any] = {}
  for key, value in flat.items():
    node = out
    *parents, leaf = key.split("/")
    for p in parents:
      node = node.setdefault(p, {})
    node[leaf] = value
  return out


def check_export(folder: str) -> dict[str, Any]:
  """Checks that an export folder's files are the ones its ``export_info.json`` lists.

  An export replaces the files of an existing folder one by one, ``export_info.json`` last;
  if it is killed in between, the folder mixes two exports (e.g. new parameters with the old
  config), which this names instead of loading. Exports written before the list existed
  are not checked.

  Returns:
    The contents of ``export_info.json`` (empty when there is none).

  Raises:
    ValueError: a listed file is missing or differs, naming it.
  """
  meta_path = os.path.join(folder, EXPORT_INFO)
  if not os.path.isfile(meta_path):
    return {}
  with open(meta_path, encoding="utf-8") as f:
    try:
      meta = json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{meta_path}: not valid JSON ({e}); export the run again") from None
  files = meta.get("files") or {}
  for rel, want in sorted(files.items()):
    path = os.path.join(folder, rel)
    if not os.path.isfile(path):
      problem = "is missing"
    elif fileio.file_sha256(path) != want:
      problem = "differs from the file that export wrote"
    else:
      continue
    raise ValueError(
        f"export {folder} is incomplete or mixes two exports: {path} {problem} (listed in "
        f"{meta_path}); an export killed while replacing an older one leaves this. Export "
        f"the run again (python -m longtext_jax.export).")
  return meta


def read_export_params(folder: str, abstract: Any | None = None) -> Any:
  """The parameters of an export folder (``params.safetensors``, no pickle).

  Args:
    folder: written by :func:`longtext_jax.export.export`.
    abstract: the model's parameter tree; given, shapes are checked (naming the first
      parameter that differs) and dtypes cast to the model's.

  Returns:
    The nested parameter dict (jax arrays).
  """
  from safetensors import flax as st_flax  # pylint: disable=import-outside-toplevel
  path = os.path.join(folder, EXPORT_PARAMS)
  params = unflatten_params(st_flax.load_file(path))
  if abstract is not None:
    from longtext_jax.train import checkpointing  # pylint: disable=import-outside-toplevel
    checkpointing.check_compatible(abstract, params, f"export {path}")
    params = jax.tree.map(lambda a, p: jnp.asarray(p, a.dtype), abstract, params)
  return params


# ---------------------------------------------------------------------------------------------
# Lengths: buckets and what a model can read.


def _round_up(n: int, multiple: int) -> int:
  return -(-int(n) // max(int(multiple), 1)) * max(int(multiple), 1)


def model_length_limit(encoder_config) -> tuple[int, bool]:
  """The longest input the encoder reads, and whether it cuts longer inputs itself.

  Returns:
    ``(limit, internal)``: ``limit`` 0 when any length works (RAN, rotary Transformer,
    ChunkBERT, ...); learned position tables (``position='learned'``, S-LSTM's ``pos_g2h``
    / ``pos_h2g``) give ``max_len`` and fail beyond it (``internal`` False: the predictor
    cuts the input); ``bert_first`` reads the first ``max_length - 2`` tokens and ignores the
    rest (``internal`` True: nothing is cut, the output is flagged).
  """
  e = encoder_config
  name = e.name
  if name == "bert_first":
    return int(e.max_length) - 2, True
  uses_table = (e.get("position", None) == "learned" or bool(e.get("pos_g2h", False))
                or bool(e.get("pos_h2g", False)))
  if uses_table and "max_len" in e:
    return int(e.max_len), False
  return 0, False


def bucket_length(n: int, pad_multiple: int, limit: int = 0, pad_offset: int = 0) -> int:
  """The padded length of a batch whose longest example has ``n`` tokens: the shortest
  ``pad_multiple * 2**k - pad_offset`` >= n, capped at ``limit`` (rounded down to such a
  length; never below ``n``)."""
  m = max(int(pad_multiple), 1)
  b = m
  while b - pad_offset < n:
    b *= 2
  b -= pad_offset
  if limit:
    b = min(b, max(_fit_length(limit, m, pad_offset), n))
  return b


def _fit_length(limit: int, pad_multiple: int, pad_offset: int = 0) -> int:
  """The longest padded length ``k * pad_multiple - pad_offset`` <= ``limit`` (at least 1)."""
  m = max(int(pad_multiple), 1)
  return max((int(limit) + pad_offset) // m * m - pad_offset, 1)


# ---------------------------------------------------------------------------------------------
# The predictor.


class _TaskKey:
  """A Task as a static jit argument: equal when the kind and its config are equal."""

  def __init__(self, task: tasks_lib.Task):
    self.task = task
    cfg = task.config.to_dict() if hasattr(task.config, "to_dict") else dict(task.config)
    self.key = (type(task).__name__, json.dumps(cfg, sort_keys=True, default=str))

  def __hash__(self):
    return hash(self.key)

  def __eq__(self, other):
    return isinstance(other, _TaskKey) and self.key == other.key


# Traces of the jitted functions below, by (function name, model).
_TRACES: dict[tuple[str, Any], int] = {}


def _count(name: str, model) -> None:
  _TRACES[(name, model)] = _TRACES.get((name, model), 0) + 1


@functools.partial(jax.jit, static_argnums=(0, 1))
def _jit_predict(model, task, params, batch):
  """The head's output (``task.output_key``) for a batch: jitted once per model and shape."""
  _count("predict", model)
  return model.apply({"params": params}, batch, train=False)[task.task.output_key]


def _encode(module, batch):
  x = module.inputs(batch, deterministic=True)
  return module.encoder(x, batch["mask"], deterministic=True)


@functools.partial(jax.jit, static_argnums=(0,))
def _jit_embed(model, params, batch):
  """The encoder's ``pooled`` and ``sequence`` for a batch (inputs + encoder only)."""
  _count("embed", model)
  out = model.apply({"params": params}, batch, method=_encode)
  return {"pooled": out.pooled, "sequence": out.sequence}


@functools.partial(jax.jit, static_argnums=(0, 1))
def _jit_evaluate(model, task, params, batch):
  """(the task's summable metric sums, the head's output) for a labelled batch."""
  _count("evaluate", model)
  outputs = model.apply({"params": params}, batch, train=False)
  return task.task.metrics(outputs, batch), outputs[task.task.output_key]


# Streaming (RAN): the inputs, then the encoder chunk by chunk (one compiled step per chunk
# shape and pass), then the head on the concatenated states.


def _inputs(module, batch):
  return module.inputs(batch, deterministic=True)


@functools.partial(jax.jit, static_argnums=(0,))
def _jit_inputs(model, params, batch):
  """x_BLD for a batch (the model's input embedding, no dropout)."""
  _count("stream_inputs", model)
  return model.apply({"params": params}, batch, method=_inputs)


def _init_stream(module, batch_size, d_model, max_len):
  return module.encoder.init_stream(batch_size, d_model, max_len)


def _begin_stage(module, state, stage):
  return module.encoder.begin_stage(state, stage)


def _encode_chunk(module, x_BLD, mask_BL, state, stage):
  return module.encoder.encode_chunk(x_BLD, mask_BL, state, stage)


@functools.partial(jax.jit, static_argnums=(0, 4))
def _jit_stream_chunk(model, params, x_BLD, mask_BL, stage, state):
  """One chunk of one pass of ``RAN.encode_chunk``: (states or None, the new state)."""
  _count("stream_chunk", model)
  return model.apply({"params": params}, x_BLD, mask_BL, state, stage, method=_encode_chunk)


def _stream_head(module, state, sequence_BLD):
  pooled_BD = module.encoder.finish_stream(state)
  enc = encoders_base.EncoderOutput(sequence=sequence_BLD, pooled=pooled_BD)
  embed = module.inputs if module.inputs.kind == "tokens" else None
  return module.head(enc, deterministic=True, embed=embed), pooled_BD


@functools.partial(jax.jit, static_argnums=(0, 1))
def _jit_stream_head(model, task, params, state, sequence_BLD):
  """The model's outputs (as ``Model.__call__`` gives them) from the last pass's state and
  the concatenated token states."""
  _count("stream_head", model)
  out, pooled_BD = model.apply({"params": params}, state, sequence_BLD, method=_stream_head)
  return {task.task.output_key: out, "sequence": sequence_BLD, "pooled": pooled_BD}


@functools.partial(jax.jit, static_argnums=(0,))
def _jit_metrics(task, outputs, batch):
  return task.task.metrics(outputs, batch)


def _to_python(value: Any) -> Any:
  """numpy scalars/arrays -> plain Python (JSON-able) values."""
  if isinstance(value, np.ndarray):
    return value.tolist()
  if isinstance(value, np.generic):
    return value.item()
  if isinstance(value, Mapping):
    return {k: _to_python(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_to_python(v) for v in value]
  return value


def jsonable(prediction: Mapping[str, Any]) -> dict[str, Any]:
  """A prediction dict with numpy values turned into lists and numbers (for JSON)."""
  return _to_python(dict(prediction))


def _check_encoded(examples: Sequence[Mapping[str, Any]], vocab_size: int = 0,
                   label_keys: Sequence[str] = ()) -> None:
  """Raises a ValueError naming ``examples[i]`` when an encoded example lacks its ``mask``
  or its input, when their lengths differ (instead of a KeyError deep in batching), when an
  ``input_ids`` entry is outside ``[0, vocab_size)`` (``vocab_size`` > 0; the embedding
  lookup would give NaN) or when one of ``label_keys`` is missing (evaluation)."""
  for i, ex in enumerate(examples):
    if "mask" not in ex or not any(k in ex for k in ("input_ids", "features")):
      raise ValueError(
          f"examples[{i}]: an encoded example needs 'mask' (bool[n], True at real "
          f"positions) and 'input_ids' (int[n]) or 'features' (float[n, F]); it has "
          f"{sorted(ex)}")
    n = len(ex["mask"])
    for k in ("input_ids", "features", "token_type_ids"):
      if k in ex and len(ex[k]) != n:
        raise ValueError(f"examples[{i}]: '{k}' has {len(ex[k])} positions and 'mask' {n}")
    if vocab_size and "input_ids" in ex and n:
      ids = np.asarray(ex["input_ids"])
      bad = np.flatnonzero((ids < 0) | (ids >= vocab_size))
      if len(bad):
        raise ValueError(f"examples[{i}]: input_ids[{bad[0]}]={ids[bad[0]]} is outside the "
                         f"model's vocabulary [0, {vocab_size}) (encoded with another "
                         "tokenizer?)")
    missing = [k for k in label_keys if k not in ex]
    if missing:
      raise ValueError(f"examples[{i}]: no {missing[0]!r} (evaluation needs the labels; "
                       f"it has {sorted(ex)})")


def _check_finite(out: Any, batch: Mapping[str, np.ndarray], idx: np.ndarray,
                  names: Sequence[str]) -> None:
  """Raises a ValueError naming the documents whose model output (any float leaf of ``out``
  with a row per batch row; per-token outputs at real positions only) is NaN or infinite,
  so that such output is never reported as probabilities."""
  mask_BL = np.asarray(batch["mask"])
  b = len(idx)
  bad = np.zeros(b, bool)
  for leaf in jax.tree.leaves(out):
    x = np.asarray(leaf)
    if (not np.issubdtype(x.dtype, np.floating) or x.ndim == 0
        or x.shape[0] != mask_BL.shape[0]):
      continue
    finite = np.isfinite(x[:b])
    if finite.ndim >= 2 and finite.shape[1] == mask_BL.shape[1]:  # Per token: real ones.
      real = mask_BL[:b].reshape(mask_BL[:b].shape + (1,) * (finite.ndim - 2))
      finite = finite | ~real
    bad |= ~finite.reshape(b, -1).all(1)
  if bad.any():
    which = [names[i] for i in np.asarray(idx)[bad]]
    more = f" and {len(which) - 5} more" if len(which) > 5 else ""
    raise ValueError(f"{', '.join(which[:5])}{more}: the model's output is not finite (NaN "
                     "or inf), not reported; are the input ids those of the run's tokenizer "
                     "(ids beyond the model's vocabulary give NaN), and are the parameters "
                     "finite?")


@dataclasses.dataclass
class Predictor:
  """A trained model ready to use on new documents (build it with :func:`load`).

  Attributes:
    config: the run's config.
    task: its :class:`longtext_jax.tasks.Task`.
    model: the flax Module (inputs + encoder + head).
    params: its parameters (on the default device).
    tokenizer: the tokenizer the run was trained with (None for sources without text).
    label_names: label / tag names in id order (None: labels are ids).
    step: the training step of the parameters.
    source: the checkpoint folder or export the parameters came from.
    batch_size: rows of a batch (short buckets).
    max_batch_tokens: rows x padded length of a batch at most (long buckets get fewer rows).
    max_tokens: tokens kept per document (0: whole; default ``config.data.max_tokens``, the
      training loader's truncation); never more than the model can read.
    progress: show a progress bar (None: when there are more than 20 batches).
    tokenizer_spec: ``{'kind', 'path', 'lowercase'}`` of ``tokenizer`` (what an export
      copies), None when unknown.
    stream_chunk: RAN only (single texts, ``min_window_size=0``): a batch padded past this
      many tokens goes through the encoder this many tokens at a time
      (``RAN.encode_chunk``; a multiple of the window), so the encoder holds one chunk's
      activations and its GPC memory instead of the whole document's. Equal outputs (tested);
      0 never streams; None: ``DEFAULT_STREAM_CHUNK`` rounded down to the window.
  """
  config: Any
  task: tasks_lib.Task
  model: Any
  params: Any
  tokenizer: Any
  label_names: list[str] | None
  step: int
  source: str
  batch_size: int = 32
  max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS
  max_tokens: int = 0
  progress: bool | None = None
  tokenizer_spec: dict[str, Any] | None = None
  stream_chunk: int | None = None

  @classmethod
  def from_config(cls, config, params: Any = None, *, seed: int = 0,
                  label_names: Sequence[str] | None = None, tokenizer: Any = None,
                  **options: Any) -> "Predictor":
    """A predictor for ``config`` with given (or freshly initialised) parameters.

    For models that were not trained here (benchmarks, tests, a random-init baseline).

    Args:
      config: a config built on :func:`longtext_jax.config.base_config`.
      params: the parameter tree; None initialises it from ``seed``.
      seed: the init seed when ``params`` is None.
      label_names: label / tag names in id order.
      tokenizer: the tokenizer (None: ``config.data.tokenizer``'s, whose files an export
        copies).
      **options: ``batch_size``, ``max_batch_tokens``, ``max_tokens`` (default: training's
        cut, :func:`training_options`), ``progress``, ``stream_chunk``.

    Returns:
      The Predictor (``step`` -1 and ``source`` 'init' for fresh parameters).
    """
    task = tasks_lib.get_task(config.task)
    model = model_lib.build_model(config)
    source = "params"
    if params is None:
      batch = example_batch(config, task)
      params = flax.linen.meta.unbox(jax.jit(lambda key: model.init(
          key, batch, train=False)["params"])(jax.random.key(seed)))
      source = "init"
    spec = None
    if tokenizer is None and config.model.input != "features":
      tokenizer = tokenizers_lib.build_tokenizer(config.data.tokenizer)
      spec = {"kind": config.data.tokenizer.kind, "path": config.data.tokenizer.path,
              "lowercase": config.data.tokenizer.lowercase}
    options.setdefault("batch_size", int(config.data.eval_batch_size))
    options.setdefault("max_tokens", int(training_options(config).max_tokens))
    return cls(config=config, task=task, model=model, params=params, tokenizer=tokenizer,
               label_names=None if label_names is None else list(label_names), step=-1,
               source=source, tokenizer_spec=spec, **options)

  def __post_init__(self):
    self.pad_multiple = int(self.config.data.pad_multiple)
    self.pad_offset = int(self.config.data.pad_offset)
    enc = self.model.encoder
    if hasattr(enc, "batch_padding"):  # ChunkBERT: whole chunks, also for runs saved before
      # data.pad_offset existed or with a chunk size changed on the command line.
      self.pad_multiple, self.pad_offset = enc.batch_padding()
    self.length_limit, self.limit_internal = model_length_limit(self.config.model.encoder)
    self.stream_length = self._stream_length()
    # How training read text (cut, empty texts) and whether it read pairs: the loaders' rules.
    self.options = training_options(self.config)
    self.pairs_reason = pair_source(self.config, self.task)
    tok, vocab = self.tokenizer, self.vocab_size
    if tok is not None and vocab and int(tok.vocab_size) > vocab:
      path = (self.tokenizer_spec or {}).get("path") or getattr(tok, "path", "") or "?"
      raise ValueError(
          f"the tokenizer {path!r} has {tok.vocab_size} ids but the model's vocabulary has "
          f"{vocab} (config.model.vocab_size; ids beyond it have no embedding and give NaN): "
          "is it the run's tokenizer? pass the right one (tokenizer_path=, "
          "--tokenizer_path)")

  @property
  def vocab_size(self) -> int:
    """Rows of the model's token embedding (0: the model reads features)."""
    if self.config.model.input == "tokens":
      return int(self.config.model.vocab_size)
    if self.config.model.input == "ids":  # The encoder embeds ids itself (BERT family).
      return int(self.config.model.encoder.get("vocab_size", 0) or 0)
    return 0

  @property
  def trained_on_pairs(self) -> bool:
    """Whether the run was trained on sentence pairs (:func:`pair_source`): then
    :meth:`predict` needs ``pairs``."""
    return bool(self.pairs_reason)

  @property
  def on_empty(self) -> str:
    """What training did with an empty text ('error', 'skip' or 'keep'; ``local_text``
    runs keep them)."""
    return self.options.on_empty

  def _stream_length(self) -> int:
    """Chunk length of streamed batches (0: this model does not stream)."""
    enc = self.model.encoder
    if (not hasattr(enc, "encode_chunk") or self.task.pairs
        or int(getattr(enc, "min_window_size", 0)) > 0 or self.stream_chunk == 0):
      return 0
    w = int(enc.window_size)
    if self.stream_chunk is None:
      return max(DEFAULT_STREAM_CHUNK // w, 1) * w
    n = int(self.stream_chunk)
    if n < 0 or n % w:
      raise ValueError(f"stream_chunk={n} must be a positive multiple of the RAN window "
                       f"(window_size={w}), or 0 to never stream")
    return n

  def streams(self, length: int) -> bool:
    """Whether a batch padded to ``length`` tokens is streamed (see ``stream_chunk``)."""
    return bool(self.stream_length) and length > self.stream_length

  def _stream_outputs(self, batch: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The model's outputs for a batch, with the encoder run chunk by chunk.

    Each pass (``RAN.num_stream_stages``: 1, or more when memory review needs the whole
    document's GPCs first) feeds the chunks in order; the last pass gives the token states,
    then the head reads them as ``Model.__call__`` would.
    """
    x_BLD = _jit_inputs(self.model, self.params, batch)
    mask_BL = np.asarray(batch["mask"])
    b, l = mask_BL.shape
    n = self.stream_length
    total = _round_up(l, n)
    if total > l:  # The last chunk is padded (mask False).
      x_BLD = jnp.pad(x_BLD, ((0, 0), (0, total - l), (0, 0)))
      mask_BL = np.pad(mask_BL, ((0, 0), (0, total - l)))
    variables = {"params": self.params}
    state = self.model.apply(variables, b, int(x_BLD.shape[-1]), total, method=_init_stream)
    pieces = []
    for stage in range(self.model.encoder.num_stream_stages):
      if stage:
        state = self.model.apply(variables, state, stage, method=_begin_stage)
      for start in range(0, total, n):
        seq_BLD, state = _jit_stream_chunk(self.model, self.params, x_BLD[:, start:start + n],
                                           mask_BL[:, start:start + n], stage, state)
        if seq_BLD is not None:
          pieces.append(seq_BLD)
    sequence_BLD = jnp.concatenate(pieces, axis=1)[:, :l]
    return _jit_stream_head(self.model, _TaskKey(self.task), self.params, state, sequence_BLD)

  # ----------------------------------------------------------------- jitted functions
  @property
  def traces(self) -> dict[str, int]:
    """How often each jitted function ('predict', 'embed', 'evaluate') was traced, i.e.
    compiled, for this model: once per batch shape. Predictors of equal models (the same
    config) share their compiled programs."""
    return {name: n for (name, model), n in _TRACES.items() if model == self.model}

  def _outputs_fn(self) -> Callable:
    return lambda params, batch: _jit_predict(self.model, _TaskKey(self.task), params,
                                                    batch)

  def _embed_fn(self) -> Callable:
    return lambda params, batch: _jit_embed(self.model, params, batch)

  def _eval_fn(self) -> Callable:
    return lambda params, batch: _jit_evaluate(self.model, _TaskKey(self.task), params,
                                                      batch)

  # ----------------------------------------------------------------- encoding
  def _limit(self) -> int:
    """Tokens kept per document (0: all)."""
    limits = [x for x in (self.max_tokens, 0 if self.limit_internal else self.length_limit)
              if x]
    if not limits:
      return 0
    if self.length_limit and not self.limit_internal:
      # Batches are padded to k * pad_multiple - pad_offset: keep what such a batch holds.
      limits.append(_fit_length(self.length_limit, self.pad_multiple, self.pad_offset))
    return min(limits)

  def text_encoder(self, layout: str = "none") -> text_lib.TextEncoder:
    """The training loader's text -> example encoder for this run.

    Args:
      layout: 'none' for unlabelled texts, or the task's ``label_layout`` to encode labels
        too (what :meth:`evaluate` does with a file).

    Returns:
      A :class:`longtext_jax.data.text.TextEncoder` with the run's tokenizer, label names,
      special tokens and the Predictor's token limit.

    Raises:
      ValueError: the run has no tokenizer (its data were ids or features).
    """
    if self.tokenizer is None:
      raise ValueError(f"this run was trained on data.name={self.config.data.name!r}, which "
                       "gives token ids or features, not text: there is no tokenizer to "
                       "encode texts with; pass encoded examples to predict_examples()")
    names = self.label_names
    vocab = text_lib.LabelVocab(names, 0 if names is not None else
                                self.task.num_label_classes)
    return text_lib.TextEncoder(self.tokenizer, layout, self.task.num_label_classes, vocab,
                                self._limit(),
                                bool(self.config.data.add_special_tokens) and layout != "tags",
                                getattr(self.task, "cut_fields", None) if layout == "tags"
                                else None,
                                long_documents=self.config.data.long_documents)

  def encode(self, texts: Sequence[str], pairs: Sequence[str] | None = None,
             names: Sequence[str] | None = None, *, single: bool = False
             ) -> list[dict[str, np.ndarray]]:
    """Encodes documents as the training loader did.

    Args:
      texts: N documents (tagging: a str, or a list of its words; see :meth:`predict`).
      pairs: N second texts for sentence-pair tasks, else None.
      names: how errors name each document (default ``texts[i]``).
      single: encode each text alone even for a pair task (what :meth:`embed` does).

    Returns:
      N examples: ``input_ids`` int32[n], ``mask`` bool[n], ``token_type_ids`` for pairs,
      ``truncated`` (bool), ``num_tokens`` (tokens before any cut, specials included);
      tagging kinds also ``word_starts`` int[words] (the first token of each word).

    Raises:
      TypeError: ``texts`` (or ``pairs``) is one str, not a list of them.
      ValueError: no texts, a non-string or empty text (naming it), pairs missing for a
        run trained on pairs (:attr:`trained_on_pairs`) or given to another, a tagging
        text without words.
    """
    for arg, value in (("texts", texts), ("pairs", pairs)):
      if isinstance(value, (str, bytes)):
        raise TypeError(f"{arg} must be a list of documents, got one {type(value).__name__} "
                        f"(which would be read character by character): pass [{arg[:-1]}]")
    texts = list(texts)
    if not texts:
      raise ValueError("no documents to encode (the input is empty)")
    names = list(names) if names is not None else [f"texts[{i}]" for i in range(len(texts))]
    if self.trained_on_pairs and pairs is None and not single:
      raise ValueError(f"this run was trained on sentence pairs ({self.pairs_reason}): pass "
                       "pairs= (the second text of each pair); on the command line the "
                       "input file's --text_pair_field (standard input carries no pairs)")
    if pairs is not None:
      if not self.trained_on_pairs:
        raise ValueError(f"task {self.task.name!r} was trained on single texts; pairs= is "
                         "only for runs trained on pairs")
      pairs = list(pairs)
      if len(pairs) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(pairs)} pairs")
    keep_empty = self.on_empty == "keep"
    tagging = self.task.label_layout == "tags"
    for i, t in enumerate(texts):
      if tagging and isinstance(t, (list, tuple)):  # Words, split already (CoNLL files).
        if not all(isinstance(w, str) for w in t):
          raise ValueError(f"{names[i]}: a document of words must be a list of str")
        t = " ".join(t)
      others = [] if pairs is None else [pairs[i]]
      for x in [t] + others:
        if not isinstance(x, str):
          raise ValueError(f"{names[i]}: a document must be a str, got {type(x).__name__}")
        if not x.strip() and not keep_empty:
          raise ValueError(f"{names[i]}: empty text (the run was trained with "
                           f"on_empty={self.on_empty!r})")
    if tagging:
      return [self._encode_words(t if isinstance(t, (list, tuple)) else t.split(), names[i])
              for i, t in enumerate(texts)]
    encoder = self.text_encoder()
    out = []
    for i, t in enumerate(texts):
      record = {"text": t, "where": names[i]}
      if pairs is not None:
        record["text_pair"] = pairs[i]
      stats = text_lib.LoadStats()
      ex = encoder(record, stats)
      ex["truncated"] = bool(stats.truncated) or self._cut_inside(len(ex["input_ids"]))
      ex["num_tokens"] = int(stats.max_tokens_seen)
      out.append(ex)
    return out

  def _cut_inside(self, n: int) -> bool:
    """Whether the model itself reads fewer than ``n`` tokens (bert_first)."""
    return bool(self.limit_internal and self.length_limit and n > self.length_limit)

  def _encode_words(self, words: Sequence[str], name: str = "text") -> dict[str, np.ndarray]:
    """A tagging document's words encoded as the CoNLL loader does (no words, a text kept
    by ``on_empty='keep'``, is an error naming ``name``)."""
    tok = self.tokenizer
    if tok is None:
      self.text_encoder()  # Raises the no-tokenizer error.
    words = list(words)
    if not words:
      raise ValueError(f"{name}: no words to tag (an empty text; the run keeps empty texts, "
                       "but a tagging prediction needs at least one word)")
    pieces, starts = [], []
    n = 0
    for j, word in enumerate(words):
      ids = np.asarray(tok.encode(word if j == 0 else " " + word), np.int32)
      if len(ids) == 0:
        ids = np.asarray([tok.unk_id], np.int32)
      starts.append(n)
      n += len(ids)
      pieces.append(ids)
    ids = np.concatenate(pieces)
    limit = self._limit()
    truncated = bool(limit) and len(ids) > limit
    if truncated:
      ids = ids[:limit]
    tag_mask = np.zeros(len(ids), bool)
    tag_mask[[s for s in starts if s < len(ids)]] = True
    return {"input_ids": ids, "mask": np.ones(len(ids), bool), "tag_mask": tag_mask,
            "truncated": truncated, "num_tokens": n, "words": words,
            "word_starts": np.asarray(starts, np.int64)}

  # ----------------------------------------------------------------- batching
  def batches(self, examples: Sequence[Mapping[str, Any]], keys: Sequence[str] | None = None
              ) -> Iterable[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Length-bucketed batches of ``examples``.

    Args:
      examples: dicts of arrays (``mask`` bool[n] and the model's inputs).
      keys: the keys to batch (default: every sequence key and label of the first example).

    Yields:
      ``(indices int[b], batch)``: which examples fill the first b rows of ``batch`` (the
      rows after them are filler: mask False); every batch of a bucket has the same shape.

    Raises:
      ValueError: an example lacks its ``mask`` or input, their lengths differ, or an id is
        outside the model's vocabulary (named ``examples[i]``), before any batch is made.
    """
    _check_encoded(examples, self.vocab_size)
    return self._batches(examples, keys)

  def _batches(self, examples, keys=None):
    """:meth:`batches` for examples already checked (the public entry points check once)."""
    if keys is None:
      keys = [k for k, v in examples[0].items()
              if isinstance(v, (np.ndarray, np.generic, int, float)) and k not in (
                  "truncated", "num_tokens", "word_starts", "example_id")]
    lengths = np.array([len(ex["mask"]) for ex in examples])
    limit = 0 if self.limit_internal else self.length_limit
    buckets = np.array([bucket_length(n, self.pad_multiple, limit, self.pad_offset)
                        for n in lengths])
    order = np.lexsort((lengths, buckets))
    start = 0
    while start < len(order):
      b = buckets[order[start]]
      rows = max(1, min(self.batch_size, self.max_batch_tokens // int(b)))
      stop = start
      while stop < len(order) and stop - start < rows and buckets[order[stop]] == b:
        stop += 1
      idx = order[start:stop]
      batch = pipeline.collate([{k: examples[i][k] for k in keys} for i in idx],
                               length=int(b))
      if len(idx) < rows:
        filler = pipeline.filler_like(batch, rows - len(idx))
        batch = {k: np.concatenate([batch[k], filler[k]]) for k in batch}
      yield idx, batch
      start = stop

  def _bar(self, total: int, desc: str):
    from longtext_jax.train import logging as log_lib  # pylint: disable=import-outside-toplevel
    show = self.progress if self.progress is not None else total > 20
    return log_lib.progress_bar(total, desc, enabled=show)

  def _num_batches(self, examples) -> int:
    limit = 0 if self.limit_internal else self.length_limit
    counts: dict[int, int] = {}
    for ex in examples:
      b = bucket_length(len(ex["mask"]), self.pad_multiple, limit, self.pad_offset)
      counts[b] = counts.get(b, 0) + 1
    return sum(math.ceil(n / max(1, min(self.batch_size, self.max_batch_tokens // b)))
               for b, n in counts.items())

  # ----------------------------------------------------------------- predict
  def predict_examples(self, examples: Sequence[Mapping[str, Any]], *,
                       names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Predictions for encoded examples (e.g. ``source[i]`` of a data source).

    Args:
      examples: dicts with ``mask`` bool[n] and the model's inputs (``input_ids`` int[n] or
        ``features`` float[n, F]; ``token_type_ids`` for pairs).
      names: how errors name each example (default ``examples[i]``).

    Returns:
      One dict per example, from ``task.decode`` (see :meth:`predict`), in input order.

    Raises:
      ValueError: a malformed example or an id outside ``[0, vocab_size)`` (naming
        ``examples[i]``); a model output that is not finite (NaN, inf: naming the examples),
        which is never returned as probabilities.
    """
    if not len(examples):
      raise ValueError("no examples to predict (the input is empty)")
    _check_encoded(examples, self.vocab_size)
    names = (list(names) if names is not None
             else [f"examples[{i}]" for i in range(len(examples))])
    fn = self._outputs_fn()
    inputs = [k for k in ("input_ids", "features", "token_type_ids", "mask", "tag_mask")
              if k in examples[0]]  # tag_mask: a tagging decode reads words.
    results: list[dict[str, Any] | None] = [None] * len(examples)
    with self._bar(self._num_batches(examples), "predict") as bar:
      for idx, batch in self._batches(examples, inputs):
        if self.streams(batch["mask"].shape[1]):
          out = jax.device_get(self._stream_outputs(batch)[self.task.output_key])
        else:
          out = jax.device_get(fn(self.params, batch))
        _check_finite(out, batch, idx, names)
        if self.task.name == "mlm" and self.tokenizer is not None and "input_ids" in batch:
          # Fill the [MASK] tokens of the input, keep the others.
          batch = dict(batch, mlm_mask=batch["input_ids"] == self.tokenizer.mask_id)
        decoded = self.task.decode({self.task.output_key: out}, self.label_names, batch)
        for row, i in enumerate(idx):
          results[i] = decoded[row]
        bar.update(1)
    return results  # type: ignore[return-value]

  def predict(self, texts: Sequence[str], pairs: Sequence[str] | None = None
              ) -> list[dict[str, Any]]:
    """What the model predicts for each document.

    Args:
      texts: N documents (str). Tagging kinds split them into words at whitespace, or take
        each as a list of words (str) split already (e.g. a CoNLL file's, where a word may
        hold a space).
      pairs: N second texts (sentence-pair tasks).

    Returns:
      N dicts, with ``truncated`` (the model read only part of the document) and
      ``num_tokens`` (its length in tokens, special tokens included) besides:

      * classification, pair_classification, binary: ``label`` (name, or id without
        names) and ``probabilities`` float[C] (binary: [P(0), P(1)]);
      * multilabel: ``labels`` (those with probability > ``task.threshold``) and
        ``probabilities`` float[C];
      * regression: ``value`` float[T];
      * tagging kinds: ``words``, ``tags`` (one per word: the tag of its first token) and
        ``spans`` [(type, first word, last word)] for BIO tags;
      * lm: ``token_log_likelihood`` float[n - 1], ``log_likelihood``, ``perplexity``;
      * mlm: ``tokens`` (ids with the masked positions filled) and ``text`` (decoded).
    """
    examples = self.encode(texts, pairs)
    preds = self.predict_examples(examples, names=[f"texts[{i}]" for i in range(len(examples))])
    out = []
    for ex, pred in zip(examples, preds):
      pred = dict(pred)
      if "word_starts" in ex:
        pred = self._words_view(ex, pred)
      elif self.task.name == "lm":
        n = len(pred["token_log_likelihood"])
        pred["perplexity"] = float(np.exp(-pred["log_likelihood"] / max(n, 1)))
      elif self.task.predicts_tokens and "tokens" in pred:
        pred["text"] = self.tokenizer.decode(np.asarray(
            [t for t in pred["tokens"] if isinstance(t, (int, np.integer))], np.int64))
      pred["truncated"] = bool(ex["truncated"])
      pred["num_tokens"] = int(ex["num_tokens"])
      out.append(pred)
    return out

  def _words_view(self, ex: Mapping[str, Any], pred: dict[str, Any]) -> dict[str, Any]:
    """Token tags -> one tag per word (its first token's) and BIO spans over words."""
    tags = pred["tags"]
    n = len(tags)
    words = ex["words"]
    word_tags = [tags[s] if s < n else None for s in ex["word_starts"]]
    kept = [t for t in word_tags if t is not None]
    spans = []
    if kept and all(isinstance(t, str) for t in kept):
      spans = [(typ, int(a), int(b)) for typ, a, b in metrics_conll.chunks(kept)]
    return {"words": words, "tags": word_tags, "spans": spans}

  # ----------------------------------------------------------------- embed
  def embed(self, texts: Sequence[str] | None = None, pairs: Sequence[str] | None = None,
            tokens: bool = False, examples: Sequence[Mapping[str, Any]] | None = None
            ) -> np.ndarray | tuple[np.ndarray, list[np.ndarray]]:
    """Document vectors: the encoder's pooled output.

    Pair tasks: each text is encoded alone (``pairs`` is ignored for the vectors).

    Args:
      texts: N documents (or give ``examples``, already encoded).
      pairs: ignored by the encoder alone; accepted so that pair inputs can be passed as is.
      tokens: also return each document's token states.
      examples: encoded examples instead of ``texts``.

    Returns:
      ``float32[N, D]``; with ``tokens``, ``(pooled float32[N, D], [float32[n_i, D]])`` where
      n_i is document i's number of tokens (the model's input, special tokens included).
    """
    del pairs
    names = "texts" if examples is None else "examples"
    if examples is None:
      if texts is None:
        raise ValueError("embed: give texts or examples")
      examples = self.encode(texts, single=True)
    if not len(examples):
      raise ValueError("no documents to embed (the input is empty)")
    _check_encoded(examples, self.vocab_size)
    names = [f"{names}[{i}]" for i in range(len(examples))]
    fn = self._embed_fn()
    inputs = [k for k in ("input_ids", "features", "mask") if k in examples[0]]
    pooled: list[np.ndarray | None] = [None] * len(examples)
    states: list[np.ndarray | None] = [None] * len(examples)
    with self._bar(self._num_batches(examples), "embed") as bar:
      for idx, batch in self._batches(examples, inputs):
        out = (self._stream_outputs(batch) if self.streams(batch["mask"].shape[1])
               else fn(self.params, batch))
        pooled_BD = np.asarray(out["pooled"], np.float32)
        _check_finite(pooled_BD, batch, idx, names)
        seq_BLD = np.asarray(out["sequence"], np.float32) if tokens else None
        for row, i in enumerate(idx):
          pooled[i] = pooled_BD[row]
          if tokens:
            states[i] = seq_BLD[row, :len(examples[i]["mask"])]
        bar.update(1)
    vectors = np.stack(pooled)
    return (vectors, states) if tokens else vectors

  # ----------------------------------------------------------------- evaluate
  def read(self, path: str, labelled: bool = False, **fields: Any
           ) -> tuple[list[dict[str, Any]], list[str]]:
    """Reads a file (or folder, or '-' for stdin lines) as the training loader reads it.

    Args:
      path: JSONL, CSV, TSV, a text folder, a CoNLL file, or '-' (stdin: one document
        per line).
      labelled: read the labels too (for :meth:`evaluate`).
      **fields: ``config.data`` field overrides (``format``, ``text_field``,
        ``text_pair_field``, ``label_field``, ``columns``).

    Returns:
      (records, where): the loader's records and their ``file:line``.
    """
    return read_records(self.config, self.task, path, labelled, **fields)

  def encode_labelled(self, path: str, **fields: Any
                      ) -> tuple[list[dict[str, np.ndarray]], int]:
    """The labelled documents of ``path`` encoded for the model, and how many were cut at
    the length read (the model's, or ``max_tokens``; logged as a warning when any were: the
    ``evaluate`` command and :meth:`evaluate` both say so).

    Args:
      path: as :meth:`read`.
      **fields: ``config.data`` field overrides (as :meth:`read`).

    Returns:
      (examples, the number of documents cut). A run trained with
      ``data.long_documents='split'`` (unlabelled text) gives each long document as its
      pieces, none cut.
    """
    stats = text_lib.LoadStats()
    records, _ = self.read(path, labelled=True, **fields)
    encoder = self.text_encoder(self.task.label_layout)
    # As the training loader: a run trained with data.long_documents='split' is evaluated
    # on every piece of each long document (e.g. perplexity over whole articles).
    examples = [ex for r in records for ex in encoder.encode_all(r, stats)]
    if stats.truncated:
      model = 0 if self.limit_internal else self.length_limit
      if model and not (self.max_tokens and self.max_tokens < model):
        why = f"the model reads ({self._limit()} tokens)"
      else:  # The cut is max_tokens' (the length trained on), not a limit of the model.
        why = (f"the {self._limit()} tokens read per document (max_tokens: by default the "
               "run's data.max_tokens; max_tokens=0 reads them whole"
               + (f", up to the model's {model}" if model else "") + ")")
      logging.warning("evaluate: %d of %d documents of %s are longer than %s and were "
                      "cut%s", stats.truncated, len(examples), path, why,
                      "; span F1 counts the gold spans past each cut as "
                      "missed" if "gold_spans_cut" in examples[0] else "")
    return examples, stats.truncated

  def evaluate(self, data: str | Sequence[Mapping[str, Any]] | Any, **fields: Any
               ) -> dict[str, Any]:
    """The task's metrics on labelled data (and, for classification, per class).

    Args:
      data: a path (as :meth:`read`), a data source (``ArraySource``/``ExampleSource``, e.g.
        ``data.build_splits(config, task)['eval']``) or a list of encoded examples with
        their labels.
      **fields: ``config.data`` field overrides for a path.

    Returns:
      ``{'metrics': {name: value} (as the trainer reports them), 'num_examples', 'step',
      'source'}``, with ``'truncated'`` (documents cut at the length read; tagging's
      span F1 counts their gold spans past the cut as missed) for a path; for single-label
      and multi-label kinds also ``'per_class'`` ({label:
      {'precision', 'recall', 'f1', 'support'}}) and, single-label, ``'confusion_matrix'``
      ({'labels': names, 'matrix': int[C, C], rows gold, columns predicted}).
    """
    truncated = None
    if isinstance(data, str):
      examples, truncated = self.encode_labelled(data, **fields)
    elif hasattr(data, "__getitem__") and not isinstance(data, (list, tuple)):
      examples = [data[i] for i in range(len(data))]
    else:
      examples = list(data)
    if not examples:
      raise ValueError("evaluate: no labelled examples (the input is empty)")
    _check_encoded(examples, self.vocab_size, self.task.label_keys)
    for start in range(0, len(examples), 256):  # Labels outside the label set: named.
      self.task.validate(pipeline.collate(examples[start:start + 256]),
                         list(range(start, start + 256)))  # 'example i' (input order).
    keys = [k for k in examples[0] if k in pipeline.SEQUENCE_KEYS or k in self.task.batch_keys
            or k in ("input_ids", "features")]
    fn = self._eval_fn()
    sums = None
    gold, pred = [], []
    with self._bar(self._num_batches(examples), "evaluate") as bar:
      for idx, batch in self._batches(examples, keys):
        if self.streams(batch["mask"].shape[1]):
          outputs = self._stream_outputs(batch)
          s, out = jax.device_get((_jit_metrics(_TaskKey(self.task), outputs, batch),
                                   outputs[self.task.output_key]))
        else:
          s, out = jax.device_get(fn(self.params, batch))
        s = jax.tree.map(lambda x: np.asarray(x, np.float64), s)
        sums = s if sums is None else jax.tree.map(np.add, sums, s)
        if self.task.label_layout in ("label", "multi_hot"):
          out = np.asarray(out)[:len(idx)]
          key = "label" if self.task.label_layout == "label" else "labels"
          gold.append(np.asarray(batch[key])[:len(idx)])
          pred.append(self._predicted_classes(out))
        bar.update(1)
    result = {"metrics": self.task.summarize(sums), "num_examples": len(examples),
              "step": self.step, "source": self.source}
    if truncated is not None:
      result["truncated"] = truncated
    if gold:
      result.update(class_report(np.concatenate(gold), np.concatenate(pred),
                                 self._class_names(), self.task.label_layout == "label"))
    return result

  def _predicted_classes(self, logits: np.ndarray) -> np.ndarray:
    # The metrics' and predict's rule: probability > task.threshold.
    if self.task.label_layout == "multi_hot":
      return (logits > classification.threshold_logit(self.config.task)).astype(np.int64)
    if logits.shape[-1] == 1:  # binary: one logit.
      return (logits[:, 0] > classification.threshold_logit(self.config.task)).astype(np.int64)
    return np.argmax(logits, -1)

  def _class_names(self) -> list[str]:
    n = self.task.num_label_classes
    if self.label_names is not None and len(self.label_names) == n:
      return [str(x) for x in self.label_names]
    return [str(i) for i in range(n)]


def class_report(gold: np.ndarray, pred: np.ndarray, names: Sequence[str],
                 single_label: bool) -> dict[str, Any]:
  """Per-class precision/recall/F1/support (and the confusion matrix for single labels).

  Args:
    gold: int[N] class ids, or int/float[N, C] multi-hot for multi-label.
    pred: the same layout, predicted.
    names: the C class names.
    single_label: gold/pred are ids (then the confusion matrix is returned too).

  Returns:
    ``{'per_class': {name: {'precision', 'recall', 'f1', 'support'}}}`` and, single-label,
    ``'confusion_matrix': {'labels': names, 'matrix': int[C][C]}`` (rows gold, columns
    predicted). A precision or recall with nothing to divide is 0.
  """
  c = len(names)
  if single_label:
    gold_NC = np.eye(c, dtype=np.int64)[np.asarray(gold, np.int64)]
    pred_NC = np.eye(c, dtype=np.int64)[np.asarray(pred, np.int64)]
  else:
    gold_NC, pred_NC = np.asarray(gold) > 0.5, np.asarray(pred) > 0.5
  tp = np.sum(gold_NC & pred_NC, 0) if not single_label else np.sum(gold_NC * pred_NC, 0)
  n_pred, n_gold = np.sum(pred_NC, 0), np.sum(gold_NC, 0)
  per_class = {}
  for i, name in enumerate(names):
    p = float(tp[i] / n_pred[i]) if n_pred[i] else 0.0
    r = float(tp[i] / n_gold[i]) if n_gold[i] else 0.0
    per_class[name] = {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0,
                       "support": int(n_gold[i])}
  out: dict[str, Any] = {"per_class": per_class}
  if single_label:
    matrix = np.zeros((c, c), np.int64)
    np.add.at(matrix, (np.asarray(gold, np.int64), np.asarray(pred, np.int64)), 1)
    out["confusion_matrix"] = {"labels": list(names), "matrix": matrix.tolist()}
  return out


def format_report(result: Mapping[str, Any]) -> str:
  """A readable table of :meth:`Predictor.evaluate`'s result."""
  lines = [f"{result['num_examples']} examples, step {result['step']} ({result['source']})"]
  if result.get("truncated"):
    lines[0] += f"; {result['truncated']} cut at the length read"
  width = max([len(k) for k in result["metrics"]] + [6])
  lines += [f"  {k:<{width}}  {v:.5g}" for k, v in result["metrics"].items()]
  if "per_class" in result:
    names = list(result["per_class"])
    w = max([len(n) for n in names] + [5])
    lines.append("")
    lines.append(f"  {'class':<{w}}  precision  recall      f1  support")
    for n, r in result["per_class"].items():
      lines.append(f"  {n:<{w}}  {r['precision']:9.4f}  {r['recall']:6.4f}  {r['f1']:6.4f}"
                   f"  {r['support']:7d}")
  if "confusion_matrix" in result:
    cm = result["confusion_matrix"]
    w = max([len(n) for n in cm["labels"]] + [max(len(str(v)) for row in cm["matrix"]
                                                    for v in row), 4])
    lines.append("")
    lines.append("  confusion matrix (rows: gold, columns: predicted)")
    lines.append("  " + " " * w + "  " + "  ".join(f"{n:>{w}}" for n in cm["labels"]))
    for n, row in zip(cm["labels"], cm["matrix"]):
      lines.append(f"  {n:>{w}}  " + "  ".join(f"{v:>{w}d}" for v in row))
  return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Reading input files.


def check_utf8(path: str) -> None:
  """Raises a ValueError naming ``path:line`` of the first invalid UTF-8 byte sequence."""
  with open(path, "rb") as f:
    raw = f.read()
  try:
    raw.decode("utf-8")
  except UnicodeDecodeError as e:
    line = raw.count(b"\n", 0, e.start) + 1
    raise ValueError(f"{path}:{line}: invalid UTF-8 (byte {raw[e.start]:#04x} at offset "
                     f"{e.start}: {e.reason}); save the file as UTF-8") from None


def read_stdin_lines(stream=None) -> list[dict[str, Any]]:
  """Records of standard input, one document per non-blank line (``<stdin>:line``).

  A UTF-8 byte-order mark at the start of the stream (Windows tools write one) is dropped, as
  the file readers drop it; it is no part of the first document.

  Raises:
    ValueError: a line that is not valid UTF-8 (naming it).
  """
  import sys  # pylint: disable=import-outside-toplevel
  stream = stream if stream is not None else sys.stdin.buffer
  records = []
  for n, raw in enumerate(stream.read().split(b"\n"), 1):
    try:
      line = raw.decode("utf-8").rstrip("\r")
      if n == 1:
        line = line.removeprefix("\ufeff")
    except UnicodeDecodeError as e:
      raise ValueError(f"<stdin>:{n}: invalid UTF-8 (byte {raw[e.start]:#04x} at column "
                       f"{e.start + 1}: {e.reason})") from None
    if line.strip():
      records.append({"text": line, "where": f"<stdin>:{n}"})
  return records


FIELD_OVERRIDES = ("format", "text_field", "text_pair_field", "label_field", "columns")


def training_options(config) -> Any:
  """The local loader's options (:class:`longtext_jax.data.local_files.LocalOptions`) with
  which training read this run's text: the field names, the cut (``max_tokens``) and the
  empty-text rule (``on_empty``).

  ``local_text`` runs map their fields as training did
  (``LocalOptions.from_local_text_config``: cut to ``data.seq_len``, empty texts kept,
  unlabelled rows skipped); ``pydoc_pairs`` runs were cut to ``data.seq_len``; every other
  run reads ``config.data`` (``LocalOptions.from_config``). A ``tfds`` run whose dataset has a
  preset (``tfds_source.PRESETS``, which training used instead of ``config.data``'s fields)
  reads the preset's field names: ``glue/mnli`` files have ``premise``, ``hypothesis``,
  ``label``, as the dataset does; except presets that join several text fields
  (``ag_news_subset``: title and description) and tagging sets, whose files keep the
  config's names (a ``text`` field; CoNLL files).
  """
  from longtext_jax.data import local_files  # pylint: disable=import-outside-toplevel
  from longtext_jax.data import tfds_source  # pylint: disable=import-outside-toplevel
  d = config.data
  if d.name == "local_text":
    return local_files.LocalOptions.from_local_text_config(d)
  options = local_files.LocalOptions.from_config(d)
  if d.name == "pydoc_pairs":  # data/text_classification.py: TextEncoder(max_tokens=seq_len).
    options = dataclasses.replace(options, max_tokens=int(d.seq_len))
  if d.name == "tfds":
    fields = tfds_source.preset(d.tfds_name)
    if (fields and len(fields[0]) == 1
        and tasks_lib.get_task(config.task).label_layout != "tags"):
      text_fields, pair_field, label_field = fields
      options = dataclasses.replace(options, text_field=text_fields[0],
                                    text_pair_field=pair_field or "",
                                    label_field=label_field or options.label_field)
  return options


def pair_source(config, task: tasks_lib.Task | None = None) -> str:
  """What made a run train on sentence pairs, as a phrase for messages ('' = single texts).

  The training loaders' own rules: a pair task (``task.pairs``); ``pydoc_pairs``; the
  local loader's pair field (``data.text_pair_field``, or ``data.text_b`` of a
  ``local_text`` run, through :func:`training_options`); for ``tfds``, the dataset's preset
  (``tfds_source.preset``: ``glue/mnli``, ``snli``, ...) else ``data.text_pair_field``.
  """
  from longtext_jax.data import tfds_source  # pylint: disable=import-outside-toplevel
  task = task if task is not None else tasks_lib.get_task(config.task)
  d = config.data
  if task.pairs:
    return f"task {task.name!r} classifies sentence pairs"
  if d.name == "pydoc_pairs":
    return "data.name='pydoc_pairs' reads (chunk, next chunk) pairs"
  if d.name == "tfds":
    fields = tfds_source.preset(d.tfds_name) or ((d.text_field,), d.text_pair_field or None,
                                                 None)
    return (f"data.tfds_name={d.tfds_name!r} has the pair field {fields[1]!r}"
            if fields[1] else "")
  if d.name in ("local", "local_text"):
    field = training_options(config).text_pair_field
    if field:
      key = "data.text_b" if d.name == "local_text" else "data.text_pair_field"
      return f"{key}={field!r}"
  return ""


def read_records(config, task: tasks_lib.Task, path: str, labelled: bool = False,
                 **fields: Any) -> tuple[list[dict[str, Any]], list[str]]:
  """Reads documents as the run's training loader read them (``data/local_files.py``).

  Args:
    config: the run's config (its ``data`` fields say which fields hold text and label).
    task: the run's task (its ``label_layout`` when ``labelled``).
    path: a JSONL/CSV/TSV/CoNLL file, a folder of ``*.txt`` files, or '-' (stdin lines).
    labelled: read labels too (evaluation); else only text.
    **fields: overrides of ``config.data``'s ``format``, ``text_field``,
      ``text_pair_field``, ``label_field``, ``columns`` (None: the config's).

  Returns:
    (records, where): records (``text``, ``text_pair``, labels when ``labelled``; tagging
    files: ``words``) and their ``file:line``.

  Raises:
    ValueError: invalid UTF-8 (naming file:line), a missing field (naming file:line and the
      fields found), an empty file or no documents, an empty text (unless the run was
      trained with ``data.on_empty='keep'``).
  """
  from longtext_jax.data import local_files  # pylint: disable=import-outside-toplevel
  unknown = sorted(set(fields) - set(FIELD_OVERRIDES))
  if unknown:
    raise ValueError(f"unknown field override(s) {unknown}; choose from {FIELD_OVERRIDES}")
  trained = training_options(config)
  overrides = {k: (tuple(v) if k == "columns" else v) for k, v in fields.items()
               if v is not None}
  options = dataclasses.replace(trained, train_path=path, eval_path=path, data_dir="",
                                **overrides)
  layout = task.label_layout if labelled else "none"
  stats = text_lib.LoadStats()
  if path == "-":
    if labelled:
      raise ValueError("evaluation needs labels: give a file (--input), not stdin")
    records = read_stdin_lines()
    source = "<stdin>"
  else:
    if not os.path.exists(path):
      raise FileNotFoundError(f"no such file or folder: {path}")
    # Strict UTF-8, file by file: exactly the files the loader reads (not .git/ etc.).
    files = ([f for f, _ in local_files.text_dir_files(
        path, options.label_names if layout in ("label", "multi_hot") else ())[0]]
             if os.path.isdir(path) else [path])
    for f in files:
      check_utf8(f)
    fmt = input_format(path, fields.get("format"), trained.format)
    if fmt in ("conll", "conllu") and not labelled:
      layout = "tags"  # CoNLL files always have a tag column; it is read and ignored.
    records = local_files.read_records(path, fmt, options, layout, stats)
    source = path
  if labelled and options.skip_unlabeled:
    records = text_lib.drop_labels(records, (None,) + local_files.UNLABELLED, stats)
  if not records:
    raise ValueError(f"{source}: no documents")
  if options.on_empty != "keep":
    for r in records:
      if text_lib.is_empty(r):
        raise ValueError(f"{r.get('where', '?')}: empty text (the run was trained with "
                         f"on_empty={options.on_empty!r}; remove the line)")
  if _has_words(records) and not labelled:
    for r in records:  # The words as the file splits them, and a text of them.
      r["text"] = " ".join(r["words"])
      r.pop("tags", None)
  return records, [r.get("where", "?") for r in records]


def input_format(path: str, given: str | None = None, trained: str = "") -> str:
  """The format to read ``path`` in: ``given`` (``format=``, CLI ``--format``), else the
  one its extension says (a folder: 'text_dir'), else the run's ``config.data.format``.

  Raises:
    ValueError: ``given`` is not a format, or none of the three says one (naming the
      file and the flag).
  """
  from longtext_jax.data import local_files  # pylint: disable=import-outside-toplevel
  if given:
    if given not in local_files.FORMATS:
      raise ValueError(f"--format={given} (Python: format=) is not a format; choose one of "
                       f"{', '.join(local_files.FORMATS)}")
    return given
  try:
    return local_files.infer_format(path)
  except ValueError:
    if trained:
      return local_files.infer_format(path, trained)
  ext = os.path.splitext(path)[1]
  # A plain text file: one document a line is what stdin reads; a folder of .txt files is
  # read one document per file.
  lines = (f"; a plain text file of one document a line reads from stdin: --input=- < {path} "
           "(a folder of .txt files: one document per file)" if ext.lower() == ".txt" else "")
  raise ValueError(
      f"cannot tell the format of {path} from its extension "
      f"({repr(ext) if ext else 'none'}), and the run's config.data.format is not set: pass "
      f"--format (Python: format=) with one of {', '.join(local_files.FORMATS)}{lines}")


def _has_words(records: Sequence[Mapping[str, Any]]) -> bool:
  """Whether records hold CoNLL ``words`` rather than a ``text``."""
  return bool(records) and "words" in records[0]


# ---------------------------------------------------------------------------------------------
# load.


TEXT_SOURCES = ("local", "tfds", "local_text", "pydoc_mlm", "text_mlm", "tfds_mlm",
                "pydoc_pairs")  # Data sources that tokenize text (the others give ids).


def _tokenizer(config, info: Mapping[str, Any] | None, folder: str,
               tokenizer_path: str | None) -> tuple[Any, dict[str, Any] | None]:
  """The run's tokenizer and its ``{'kind', 'path', 'lowercase'}``: ``data_info.json``'s
  (else the config's), the path resolved relative to ``folder`` first; a tokenizer the run
  trained into ``<workdir>/tokenizer/`` is read from ``folder/tokenizer/<its file name>``
  when that exists (a run moved or copied elsewhere reads its own copy), else as given; the
  vocabulary size check below still applies.
  (None, None) for runs whose data was not text (features, generated token ids).

  Raises:
    FileNotFoundError: the tokenizer is not there.
    ValueError: its vocabulary size differs from the one ``data_info.json`` saved (another
      tokenizer: its ids would mean other pieces), naming both sizes and paths.
  """
  saved = (info or {}).get("tokenizer")
  if config.model.input == "features" or (
      config.data.name not in TEXT_SOURCES and tokenizer_path is None):
    return None, None
  tc = ml_collections.ConfigDict({"kind": config.data.tokenizer.kind,
                                  "path": config.data.tokenizer.path,
                                  "lowercase": config.data.tokenizer.lowercase})
  if saved:
    for k in ("kind", "path", "lowercase"):
      if saved.get(k) not in (None, ""):
        tc[k] = saved[k]
  if tokenizer_path is not None:
    tc.path = tokenizer_path
  if tc.kind != "byte" and tc.path:
    here = os.path.join(folder, tc.path)
    # A tokenizer the run trained sits in <workdir>/tokenizer/, recorded by its absolute
    # path: a run moved or copied elsewhere finds it in its own tokenizer/ folder.
    from longtext_jax.train import prepare as prepare_lib  # pylint: disable=import-outside-toplevel
    own = os.path.join(folder, prepare_lib.TOKENIZER_DIR, os.path.basename(tc.path))
    if not os.path.isabs(tc.path) and os.path.exists(here):
      tc.path = here  # Relative paths: the folder's first (exports copy the tokenizer).
    elif (tokenizer_path is None and os.path.isfile(own)
          and os.path.basename(os.path.dirname(tc.path)) == prepare_lib.TOKENIZER_DIR):
      # The run's own copy, even where the recorded one still exists (a copied run reads
      # what it holds, not a file its original may have rewritten since).
      if not os.path.exists(tc.path):
        logging.warning("the run's tokenizer %s is not there (was the run moved?); using "
                        "its copy %s", tc.path, own)
      tc.path = own
    elif not os.path.exists(tc.path):
      raise FileNotFoundError(
          f"the run's {tc.kind} tokenizer {tc.path!r} was not found (as given, nor under "
          f"{folder}); pass tokenizer_path= (CLI: --tokenizer_path) or export the run "
          "(python -m longtext_jax.export), which copies the tokenizer")
  tokenizer = tokenizers_lib.build_tokenizer(tc)
  saved_size = (saved or {}).get("vocab_size")
  if saved_size and int(saved_size) != int(tokenizer.vocab_size):
    raise ValueError(
        f"the {tc.kind} tokenizer {tc.path!r} has {tokenizer.vocab_size} ids, but the run "
        f"was trained with one of {saved_size} ids ({saved.get('path')!r}, recorded in "
        f"{os.path.join(folder, 'data_info.json')}): another tokenizer's ids would be read "
        "as other pieces; pass the run's tokenizer (tokenizer_path=, --tokenizer_path)")
  return tokenizer, {"kind": tc.kind, "path": tc.path, "lowercase": tc.lowercase}


def _data_info(folder: str) -> dict[str, Any] | None:
  try:
    return data_lib.load_data_info(folder)
  except FileNotFoundError:
    logging.warning("%s has no data_info.json (a run from before it was written): labels "
                    "are reported as ids", folder)
    return None


def is_export(folder: str) -> bool:
  """Whether ``folder`` is an export (holds ``params.safetensors``)."""
  return os.path.isfile(os.path.join(folder, EXPORT_PARAMS))


def _note_training(workdir: str, step: int) -> None:
  """A warning when a run still holds ``workdir`` (its ``writer.lock``): the checkpoint
  loaded is the latest so far, not the run's result."""
  from longtext_jax.train import workdir_lock  # pylint: disable=import-outside-toplevel
  try:
    holder = workdir_lock.read_lock(os.path.join(workdir, workdir_lock.LOCK_NAME))
  except (OSError, ValueError):  # No lock (the usual case), or one that cannot be read.
    return
  state, why = workdir_lock.holder_state(holder)
  if state == "running":
    logging.warning("%s is still being trained (%s): step %d is its checkpoint so far, "
                    "not the run's result", workdir, holder.describe(), step)
  elif state == "unknown":
    logging.warning("%s may still be being trained (%s; %s, so this process cannot tell): "
                    "step %d may be its checkpoint so far", workdir, holder.describe(), why,
                    step)


def load(path: str, step: int | None = None, *, batch_size: int | None = None,
         max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS, max_tokens: int | None = None,
         tokenizer_path: str | None = None, progress: bool | None = None,
         stream_chunk: int | None = None) -> Predictor:
  """Loads a trained run (a workdir) or an export folder for prediction.

  Args:
    path: a workdir of ``python -m longtext_jax.main`` / ``train_and_evaluate``, or a folder
      written by ``python -m longtext_jax.export``.
    step: None: the best checkpoint (``best/``, kept when ``train.best_metric`` is set),
      else the latest; an int: that step. An export holds one step: None or that step
      (another is an error; exports without ``export_info.json`` are not checked).
    batch_size: rows per batch (default ``config.data.eval_batch_size``).
    max_batch_tokens: at most this many (padded) tokens per batch.
    max_tokens: tokens kept per document; None: as in training (``config.data.max_tokens``;
      ``data.seq_len`` for ``local_text`` and ``pydoc_pairs`` runs: :func:`training_options`),
      0: the whole document (up to what the model can read).
    tokenizer_path: where the tokenizer is, if not where the run saw it.
    progress: progress bars (None: on long inputs).
    stream_chunk: RAN: stream batches longer than this many tokens through the encoder in
      chunks of this many (None: ``DEFAULT_STREAM_CHUNK``; 0: never). See :class:`Predictor`.

  Returns:
    The :class:`Predictor`.

  Raises:
    FileNotFoundError: not a workdir or export, no checkpoint (or not ``step``), or the
      tokenizer is missing.
    ValueError: ``step`` is not the step of an export (naming both); the checkpoint does
      not match the config (naming the parameter); the tokenizer's vocabulary is not the
      run's or exceeds the model's (naming both sizes and the tokenizer).
  """
  path = os.path.abspath(path)
  export_info = check_export(path) if is_export(path) else {}
  exported_step = int(export_info.get("step", -1))
  if "step" in export_info and step is not None and int(step) != exported_step:
    raise ValueError(
        f"{path} is an export of step {exported_step}; step={step} (--step) was asked: an "
        "export holds one step's parameters. Leave step (--step) unset to use it, or export "
        f"step {step} from the run directory (python -m longtext_jax.export "
        f"--workdir=RUN --out=... --step={step})")
  config = read_config(path)
  task = tasks_lib.get_task(config.task)
  model = model_lib.build_model(config)
  abstract = abstract_params(model, config, task)
  if is_export(path):
    params = read_export_params(path, abstract)
    done_step = exported_step
    source = os.path.join(path, EXPORT_PARAMS)
  else:
    params, done_step, source = restore_params(path, abstract, step)
    _note_training(path, done_step)
  info = _data_info(path)
  label_names = None if info is None else info.get("label_names")
  tokenizer, spec = _tokenizer(config, info, path, tokenizer_path)
  return Predictor(
      config=config, task=task, model=model, params=params, tokenizer=tokenizer,
      label_names=label_names, step=done_step, source=source,
      batch_size=int(batch_size or config.data.eval_batch_size),
      max_batch_tokens=max_batch_tokens,
      max_tokens=int(training_options(config).max_tokens if max_tokens is None
                     else max_tokens),
      progress=progress, tokenizer_spec=spec, stream_chunk=stream_chunk)


# ---------------------------------------------------------------------------------------------
# A pretrained Hugging Face BERT folder, without training.

POOLINGS = ("mean", "cls", "pooler")
LONG_MODES = ("chunks", "truncate")


def _check_table_fits(tokenizer, table_rows: int, folder: str, who: str) -> None:
  """Refuses a folder whose tokenizer has more ids than the model's embedding table."""
  if tokenizer.vocab_size > table_rows:
    raise ValueError(f"{who}: the tokenizer of {folder} has {tokenizer.vocab_size} ids, but "
                     f"the model's embedding table (config.json vocab_size) has {table_rows} "
                     "rows: ids past it would embed as NaN (a token added to the tokenizer "
                     "without resizing the model?)")


@functools.partial(jax.jit, static_argnums=(0, 1))
def _jit_bert_pool(bert, pooling: str, params, batch):
  """float[B, D] document vectors of a Bert (one program per model, pooling and shape)."""
  out = bert.apply({"params": params}, batch["input_ids"], batch["mask"])
  if pooling == "pooler":
    return out.pooled
  if pooling == "cls":
    return out.sequence[:, 0]
  count_B1 = jnp.maximum(jnp.sum(batch["mask"], -1, keepdims=True), 1)
  return jnp.sum(out.sequence, 1) / count_B1


def embed_pretrained(folder: str, texts: Sequence[str], *, pooling: str = "mean",
                     long: str = "chunks", batch_size: int = 32,
                     max_length: int | None = None, progress: bool | None = None
                     ) -> np.ndarray:
  """Document vectors from a pretrained Hugging Face BERT folder, in one call.

  Reads the folder's weights (``model.safetensors``) and tokenizer
  (``WordPieceTokenizer.from_pretrained``); rows are ``[CLS] pieces [SEP]``, length-bucketed
  and padded, and one jitted BERT call runs per bucket.

  Args:
    folder: a HF BERT folder (``config.json``, ``model.safetensors``, ``tokenizer.json`` or
      ``vocab.txt``), e.g. all-MiniLM-L6-v2.
    texts: N documents.
    pooling: 'mean' (masked mean of the last layer, sentence-transformers' rule), 'cls'
      (the last layer at [CLS]) or 'pooler' (BERT's tanh pooler on [CLS]).
    long: documents longer than ``max_length``: 'chunks' (ChunkBERT-style: cut into
      consecutive chunks of ``max_length - 2`` pieces, each embedded, the vectors averaged
      weighted by their pieces) or 'truncate' (the first ``max_length - 2`` pieces only).
    batch_size: rows per batch.
    max_length: ids per row, special tokens included (default: the tokenizer's
      ``model_max_length``, at most the model's position table).
    progress: progress bar (None: when there are more than 20 batches).

  Returns:
    float32[N, D].

  Raises:
    TypeError: one string given for ``texts`` (a list of documents is wanted).
    ValueError: an unknown pooling or long mode (naming the choices), no texts,
      rows shorter than 3 ids (``max_length``), a tokenizer with more ids than the model's embedding table
      (those ids would embed as NaN), or a folder that is not a BERT's.
  """
  from longtext_jax.data import wordpiece_tokenizer  # pylint: disable=import-outside-toplevel
  from longtext_jax.encoders import bert_checkpoint  # pylint: disable=import-outside-toplevel
  if pooling not in POOLINGS:
    raise ValueError(f"pooling={pooling!r}: choose one of {POOLINGS}")
  if long not in LONG_MODES:
    raise ValueError(f"long={long!r}: choose one of {LONG_MODES}")
  if isinstance(texts, (str, bytes)):
    raise TypeError(f"embed_pretrained: texts must be a list of documents, got one "
                    f"{type(texts).__name__} (which would be read character by character): "
                    "pass [text]")
  texts = list(texts)
  if not texts:
    raise ValueError("embed_pretrained: no texts (the input is empty)")
  # The pooler only when it is used: MLM checkpoints have none.
  bert, params = bert_checkpoint.from_pretrained(folder, use_pooler=pooling == "pooler")
  tok = wordpiece_tokenizer.WordPieceTokenizer.from_pretrained(folder)
  _check_table_fits(tok, bert.vocab_size, folder, "embed_pretrained")
  limit = min(int(max_length or tok.model_max_length), bert.max_position_embeddings)
  if limit < 3:
    raise ValueError(f"embed_pretrained: rows of {limit} ids (max_length={max_length}, "
                     f"model_max_length={tok.model_max_length}, max_position_embeddings="
                     f"{bert.max_position_embeddings}), but a row must hold [CLS], [SEP] "
                     "and at least one word piece")
  body = limit - 2
  rows, owner, weight = [], [], []  # One row per chunk: its document and its pieces.
  for i, pieces in enumerate(tok.encode_batch(texts)):
    parts = [pieces[s:s + body] for s in range(0, max(len(pieces), 1), body)]
    if long == "truncate":
      parts = parts[:1]
    for part in parts:
      ids, _, _ = tokenizers_lib.build_inputs(tok, part)
      rows.append({"input_ids": ids, "mask": np.ones(len(ids), bool)})
      owner.append(i)
      weight.append(max(len(part), 1))

  lengths = np.array([len(r["mask"]) for r in rows])
  buckets = np.array([bucket_length(n, 8, limit) for n in lengths])
  order = np.lexsort((lengths, buckets))
  vectors = [None] * len(rows)
  from longtext_jax.train import logging as log_lib  # pylint: disable=import-outside-toplevel
  starts = [s for s in range(0, len(order), batch_size)]
  show = progress if progress is not None else len(starts) > 20
  with log_lib.progress_bar(len(order), "embed", enabled=show) as bar:
    start = 0
    while start < len(order):
      b = buckets[order[start]]
      stop = start
      while stop < len(order) and stop - start < batch_size and buckets[order[stop]] == b:
        stop += 1
      idx = order[start:stop]
      batch = pipeline.collate([rows[i] for i in idx], length=int(b))
      if len(idx) < batch_size:
        filler = pipeline.filler_like(batch, batch_size - len(idx))
        batch = {k: np.concatenate([batch[k], filler[k]]) for k in batch}
      out = np.asarray(_jit_bert_pool(bert, pooling, params, batch), np.float32)
      for row, i in enumerate(idx):
        vectors[i] = out[row]
      bar.update(len(idx))
      start = stop
  d = vectors[0].shape[-1]
  sums = np.zeros((len(texts), d), np.float64)
  totals = np.zeros((len(texts), 1), np.float64)
  for v, i, w in zip(vectors, owner, weight):
    sums[i] += w * v
    totals[i] += w
  return (sums / totals).astype(np.float32)


def pretrained_encoder(name: str, folder: str, *, seed: int = 0, allow_pickle: bool = False,
                       **fields) -> tuple[Any, Any, Any]:
  """A BERT-family encoder with a Hugging Face BERT folder's weights, for your own Flax code.

  The weights ``config.model.encoder.pretrained_path`` gives a training run, as three
  objects: the encoder (its BERT's architecture from the folder's ``config.json``, its
  [CLS]/[SEP] ids from the folder's vocabulary, every other field the encoder class's
  default unless given: e.g. ChunkBERT's TextCNN has 32 filters a kernel here, 128 in
  ``configs/text_classification.py``'s BERT settings), its parameters (every ``bert``
  subtree the folder's weights; the rest, e.g. ChunkBERT's TextCNN or ToBERT's segment
  Transformer, a fresh initialisation from ``seed``) and the folder's tokenizer. Call it as
  any ``ids`` encoder:
  ``module.apply({'params': params}, ids_BL, mask_BL)`` with word pieces *without*
  [CLS]/[SEP] (``tokenizer.encode``), right-padded; it returns ``EncoderOutput``.

  Args:
    name: one of the registry's ``ids`` encoders: 'chunk_bert', 'bert_first', 'bert_random',
      'tobert'.
    folder: a HF BERT folder (``config.json``, ``model.safetensors``, ``vocab.txt`` or
      ``tokenizer.json``), e.g. :func:`encoders.bert_checkpoint.find_minilm`'s.
    seed: initialises the parameters the folder does not hold.
    allow_pickle: read ``pytorch_model.bin`` (a pickle; needs torch).
    **fields: the encoder's other dataclass fields (e.g. ``chunk_size=128``,
      ``max_length=256``, ``dtype='bfloat16'``); architecture fields that change the BERT's
      shapes make loading fail.

  Returns:
    (module, params, tokenizer).

  Raises:
    ValueError: an encoder that does not take ids (naming those that do), a folder that is
      not a BERT's, a length field (``chunk_size``, ``max_length``, ``segment_length``)
      past the folder's ``max_position_embeddings``, a tokenizer with more ids than the
      model's embedding table, or a shape mismatch (naming the parameter and the file).
  """
  # pylint: disable=import-outside-toplevel
  from longtext_jax import encoders as encoders_lib
  from longtext_jax.data import wordpiece_tokenizer
  from longtext_jax.encoders import bert_checkpoint
  family = sorted(n for n, c in encoders_lib.ENCODERS.items()
                  if encoders_lib.input_kind(c) == "ids")
  if name not in family:
    raise ValueError(f"pretrained_encoder: {name!r} does not take a pretrained BERT; "
                     f"choose one of {family}")
  settings = {**bert_checkpoint.read_arch(folder), **wordpiece_tokenizer.special_ids(folder),
              **fields}
  module = model_lib.build_encoder(config_lib.encoder_config(name, **settings))
  positions = module.max_position_embeddings
  for field in ("chunk_size", "max_length", "segment_length"):  # Positions BERT reads.
    if getattr(module, field, 0) > positions:
      raise ValueError(f"pretrained_encoder: {name}'s {field}={getattr(module, field)} "
                       f"exceeds the max_position_embeddings={positions} of {folder}; pass "
                       f"{field}=<at most {positions}>"
                       + (" (and overlap < segment_length - 2)" if field == "segment_length"
                          else ""))
  tokenizer = wordpiece_tokenizer.WordPieceTokenizer.from_pretrained(folder)
  _check_table_fits(tokenizer, module.vocab_size, folder, "pretrained_encoder")
  ids = jnp.full((1, 8), tokenizer.cls_id, jnp.int32)  # Any ids: the shapes do not depend.
  params = jax.jit(module.init)(jax.random.key(seed), ids, jnp.ones((1, 8), bool))["params"]
  return module, bert_checkpoint.load_pretrained_into(params, folder, allow_pickle), tokenizer


__all__ = ["Predictor", "load", "embed_pretrained", "pretrained_encoder", "config_from_json", "read_config",
           "restore_params", "read_export_params", "read_records", "check_utf8", "flatten_params", "unflatten_params", "class_report",
           "format_report", "jsonable", "bucket_length", "model_length_limit", "is_export",
           "training_options", "pair_source", "input_format"]
