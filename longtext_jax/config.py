"""The shared skeleton of every experiment config (each field commented).

Experiment files in ``configs/`` call :func:`base_config` and fill in the data, model and
task. The CLI loads them with ``lock_config=True``, so ``--config.train.num_stpes=5`` fails
with an error naming the field.
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import ml_collections

_NONE_TYPES = (("int", int), ("float", float), ("str", str), ("bool", bool))


def encoder_config(name: str, **overrides) -> ml_collections.ConfigDict:
  """``config.model.encoder`` for encoder ``name``: every dataclass field of the encoder
  with its default (so any of them can be overridden from the command line), then
  ``overrides``. dtypes are stored by name ('float32', 'bfloat16')."""
  from longtext_jax import encoders  # pylint: disable=g-import-not-at-top
  if name not in encoders.ENCODERS:
    raise ValueError(f"unknown encoder {name!r}; choose one of {sorted(encoders.ENCODERS)}")
  cls = encoders.ENCODERS[name]
  c = ml_collections.ConfigDict()
  c.name = name
  fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in ("parent", "name")}
  for key, f in fields.items():
    if f.default is not dataclasses.MISSING:
      value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
      value = f.default_factory()  # type: ignore[misc]
    else:
      continue
    if key in ("dtype", "param_dtype"):
      value = jnp.dtype(value).name
    if value is None:  # Keep the type so the CLI can set a value later.
      ftype = next((t for n, t in _NONE_TYPES if n in str(f.type)), str)
      value = ml_collections.FieldReference(None, field_type=ftype)
    elif isinstance(value, tuple):
      value = tuple(value)
    elif not isinstance(value, (int, float, str, bool)):
      continue  # Callables (initialisers) stay code-level.
    c[key] = value
  unknown = sorted(set(overrides) - set(fields))
  if unknown:
    raise ValueError(f"encoder {name!r} has no field(s) {unknown}; its fields are "
                     f"{sorted(fields)}")
  for key, value in overrides.items():
    c[key] = value
  return c


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0  # Seeds parameter init, dropout and the data order.

  c.task = ml_collections.ConfigDict()
  c.task.name = "classification"  # classification|binary|multilabel|regression|tagging|mlm|lm
  c.task.num_classes = 2  # classification, multilabel, tagging.
  c.task.num_outputs = 1  # regression.
  c.task.vocab_size = 0  # mlm, lm (must equal model.vocab_size).
  c.task.head_hidden_dim = 0  # >0 adds a hidden GELU layer to pooled heads.
  c.task.head_dropout = 0.0  # Dropout before the head's layers.
  c.task.tie_embeddings = True  # mlm/lm: output projection = input embedding transposed.

  c.data = ml_collections.ConfigDict()
  c.data.name = "masked_summation"  # A source in longtext_jax.data.SOURCES.
  c.data.path = ""  # Local data (e.g. the .npz of the 'npz' source).
  c.data.pad_multiple = 1  # Pad batch lengths to a multiple of this (window/chunk size).
  c.data.batch_size = 32  # Global batch (split over processes and the mesh's data axis).
  c.data.eval_batch_size = 64  # Global evaluation batch; the last one is padded, not dropped.
  c.data.long_threshold = 0  # > 0: also evaluate 'eval_long', the eval examples longer than this.
  c.data.num_train = 2048  # Synthetic sources: training examples.
  c.data.num_eval = 512  # Synthetic sources: evaluation examples.
  c.data.seq_len = 200  # Synthetic sources: sequence length n.
  c.data.num_masked = 10  # masked_summation: k, rows whose values are summed.
  c.data.feature_dim = 10  # masked_summation: d, 1 mask column + d-1 values.
  # Text sources ('local', 'tfds'): see longtext_jax/data/{local_files,tfds_source,text}.py.
  c.data.train_path = ""  # local: training file or folder.
  c.data.eval_path = ""  # local: evaluation file or folder.
  c.data.format = ""  # local: jsonl|csv|tsv|text_dir|conll; '' infers it from the extension.
  c.data.text_field = "text"  # local/tfds: the field (column, key) holding the text.
  c.data.text_pair_field = ""  # local/tfds: second text of a pair ('' = single text).
  c.data.label_field = "label"  # local/tfds: one label, or a list of labels (multilabel).
  c.data.label_names = ()  # Label/tag names in id order; () = integer labels as ids, else
  # the sorted set of the training labels.
  c.data.label_separator = "|"  # csv/tsv multilabel: separator inside the label cell.
  c.data.tag_column = -1  # conll: column of the tag (the word is column 0).
  c.data.max_tokens = 0  # Truncate longer examples to this many tokens (0: keep whole).
  c.data.on_empty = "error"  # Empty texts: 'error' (naming file:line) or 'skip' (counted).
  c.data.add_special_tokens = True  # [CLS] a [SEP] (b [SEP]); never for tagging.
  c.data.max_examples = 0  # Use at most this many examples per split (0: all).
  c.data.skip_labels = ()  # tfds (in memory): drop examples with these labels, e.g. (-1,) for SNLI.
  c.data.tfds_name = ""  # tfds: dataset name, e.g. 'imdb_reviews', 'glue/sst2'.
  c.data.tfds_train_split = "train"  # tfds: split (TFDS slicing syntax allowed).
  c.data.tfds_eval_split = "test"  # tfds: evaluation split ('validation' for glue).
  c.data.tfds_data_dir = ""  # tfds: data_dir with prepared data ('' = TFDS default).
  c.data.tokenizer = ml_collections.ConfigDict()
  c.data.tokenizer.kind = "byte"  # byte (UTF-8 bytes, no files) | sentencepiece | wordpiece.
  c.data.tokenizer.path = ""  # sentencepiece .model; wordpiece folder, tokenizer.json or vocab.
  c.data.tokenizer.lowercase = True  # wordpiece vocab.txt only.
  # Grain loading of training batches.
  c.data.num_workers = 0  # Grain worker processes (0: load in the training process).
  c.data.bucket_batches = 0  # Length bucketing: sort each window of this many batches by
  # length (0: off); needs an in-memory source.
  # Synthetic long-range tasks (longtext_jax/data/synthetic.py).
  c.data.min_len = 0  # listops/needle/recall: shortest sequence (seq_len is the longest).
  c.data.listops_max_depth = 10  # listops: deepest nesting of operators.
  c.data.listops_max_args = 10  # listops: most arguments of one operator.
  c.data.needle_min_pos = 0  # needle: the needle starts at or after this token.
  c.data.recall_kind = "associative"  # recall: 'copy' or 'associative'.
  c.data.recall_vocab = 16  # recall: symbols to copy / keys and values to recall.

  c.model = ml_collections.ConfigDict()
  c.model.input = "tokens"  # 'tokens' (input_ids -> Embed) or 'features' (features -> Dense).
  c.model.vocab_size = 0  # Token inputs only.
  c.model.d_model = 64  # Width D of the encoder.
  c.model.embed_dropout = 0.0  # Dropout on the input embeddings.
  # Key 'name' picks a class of longtext_jax.encoders.ENCODERS; the other fields are that
  # class's dataclass fields, all present with their defaults (see encoder_config).
  c.model.encoder = encoder_config("transformer")

  c.optim = ml_collections.ConfigDict()
  c.optim.learning_rate = 1e-3  # Peak learning rate.
  c.optim.warmup_steps = 100  # Linear warmup from 0.
  c.optim.schedule = "cosine"  # After warmup: 'cosine', 'linear' (to end_lr_factor) or 'constant'.
  c.optim.end_lr_factor = 0.0  # Final lr as a fraction of the peak.
  c.optim.b1 = 0.9
  c.optim.b2 = 0.999
  c.optim.eps = 1e-8
  c.optim.weight_decay = 0.01  # Decoupled (AdamW); never applied to biases and norm scales.
  c.optim.clip_norm = 1.0  # Global-norm gradient clipping; 0 disables.
  c.optim.grad_accum_steps = 1  # Micro-batches per step (batch_size must divide by it).
  c.optim.mu_dtype = "float32"  # Adam first moment dtype ('bfloat16' halves its memory).

  c.train = ml_collections.ConfigDict()
  c.train.num_steps = 1000  # Optimizer steps.
  c.train.log_every = 50  # Training metrics to TensorBoard / metrics.jsonl.
  c.train.eval_every = 250  # Evaluation on the eval split (and at the last step).
  c.train.checkpoint_every = 250  # Periodic checkpoints (also at the last step and on SIGTERM).
  c.train.keep_checkpoints = 3  # Most recent checkpoints to keep.
  c.train.best_metric = ""  # e.g. 'accuracy': keep the best eval checkpoint in workdir/best.
  c.train.best_mode = "max"  # 'max' or 'min' for best_metric.
  c.train.async_checkpoint = True  # Write checkpoints in the background.
  c.train.progress_bar = True  # tqdm bar with rate and ETA (stderr).
  c.train.profile_start_step = -1  # >=0: write a jax.profiler trace to workdir/profile ...
  c.train.profile_num_steps = 3  # ... covering this many steps from that step.

  # Device mesh (data, fsdp, tensor); one axis may be -1 (fill the remaining devices).
  c.mesh = ml_collections.ConfigDict()
  c.mesh.data = -1  # Data parallelism: batch split, parameters replicated.
  c.mesh.fsdp = 1  # Batch split AND parameters/optimizer state sharded (ZeRO-3).
  c.mesh.tensor = 1  # Tensor parallelism over the logical axes mapped to 'tensor'.
  c.mesh.fsdp_min_size = 2 ** 14  # Smaller parameters stay replicated.
  # Logical axis name -> mesh axis (or None). Parameters named with
  # nn.with_logical_partitioning use these; others fall back to FSDP on their largest dim.
  # Earlier rules win a mesh axis: 'batch' comes first so that activations [batch, length,
  # embed] split the batch over data x fsdp and leave 'embed' whole.
  c.mesh.rules = (("batch", ("data", "fsdp")), ("length", None),
                  ("embed", "fsdp"), ("mlp", "tensor"), ("heads", "tensor"),
                  ("kv", None), ("joined_kv", "tensor"), ("vocab", "tensor"),
                  ("layers", None), ("gates", None), ("hidden", None), ("recurrent", None),
                  ("position", None), ("token_types", None), ("features", None),
                  ("classes", None), ("next_classes", None), ("conv_window", None),
                  ("filters", None))

  # Multi-host (jax.distributed); see longtext_jax/train/distributed.py.
  c.distributed = ml_collections.ConfigDict()
  c.distributed.initialize = False  # Call jax.distributed.initialize() first.
  c.distributed.coordinator_address = ""  # host:port of process 0; '' = env or auto-detect.
  c.distributed.num_processes = 0  # 0 = env (JAX_NUM_PROCESSES) or auto-detect.
  c.distributed.process_id = -1  # -1 = env (JAX_PROCESS_ID) or auto-detect.
  c.distributed.cpu_collectives = "gloo"  # Cross-process collectives on CPU.

  # Warm start of a new run (longtext_jax/train/init_from.py; never applied on resume).
  c.init_from = ml_collections.ConfigDict()
  c.init_from.kind = "checkpoint"  # Source of init_from.path: checkpoint|hf_bert.
  c.init_from.path = ""  # checkpoint: a workdir or checkpoint dir; hf_bert: HF BERT folder.
  c.init_from.step = -1  # -1: the latest step.
  c.init_from.modules = ("inputs", "encoder")  # Top-level submodules of Model to copy.
  return c
