"""The shared skeleton of every experiment config (each field commented).

Experiment files in ``configs/`` call :func:`base_config` and fill in the data, model and
task. The CLI loads them with ``lock_config=True``, so ``--config.train.num_stpes=5`` fails
with an error naming the field.
"""
from __future__ import annotations

import ast
import dataclasses
import os

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
  """The config schema: every field the library reads, with its default and meaning.

  Experiment configs (``configs/``) start from this and change values; they add no fields
  except encoder fields (``model.encoder`` is :func:`encoder_config`). Sections of ``data``
  are grouped by the source that reads them (``data.name``). :func:`validate` checks the
  choices when a run starts.

  Returns:
    A ConfigDict with sections task, data, model, optim, train, mesh, distributed, init_from.
  """
  c = ml_collections.ConfigDict()
  c.seed = 0  # Seeds parameter init, dropout and the data order.

  c.task = ml_collections.ConfigDict()
  c.task.name = "classification"  # A task of longtext_jax.tasks.TASKS (see validate()).
  c.task.num_classes = 2  # Classes / labels / tags (classification, multilabel, tagging);
  # 0 with data.name='local': the size of the training label set.
  c.task.num_outputs = 1  # regression: output values.
  c.task.vocab_size = 0  # mlm, lm (must equal model.vocab_size).
  c.task.head_hidden_dim = 0  # >0 adds a hidden GELU layer to pooled heads.
  c.task.head_dropout = 0.0  # Dropout before the head's layers.
  c.task.tie_embeddings = True  # mlm/lm: output projection = input embedding transposed.
  c.task.tag_names = ()  # span_tagging/crf_tagging: BIO tag names in id order.
  c.task.constrained_decoding = True  # crf_tagging + tag_names: decode well-formed BIO/IOBES.
  c.task.threshold = 0.5  # multilabel/binary: probability above which a label is predicted.

  c.data = ml_collections.ConfigDict()
  # -- Every source.
  c.data.name = "masked_summation"  # A source in longtext_jax.data.SOURCES.
  c.data.pad_multiple = 1  # Pad batch lengths to a multiple of this (window/chunk size).
  c.data.pad_offset = 0  # ... minus this: lengths k * pad_multiple - pad_offset (ChunkBERT: 2,
  # its [CLS]/[SEP] then complete whole chunks).
  c.data.batch_size = 32  # Global batch (split over processes and the mesh's data axis).
  c.data.eval_batch_size = 64  # Global evaluation batch; the last one is padded, not dropped.
  c.data.long_threshold = 0  # > 0: also evaluate 'eval_long', the eval examples longer than this.
  c.data.num_workers = 0  # Grain worker processes (0: load in the training process).
  c.data.bucket_batches = 0  # Length bucketing: sort each window of this many batches by
  # length (0: off); needs an in-memory source.
  c.data.seq_len = 200  # Generated sources: (longest) sequence length; text sources: rows.
  c.data.num_train = 2048  # Generated sources: training examples (pydoc_pairs: 0 = all).
  c.data.num_eval = 512  # Generated sources: evaluation examples (pydoc_pairs: 0 = all).
  c.data.min_len = 0  # listops/needle/recall/long_tasks: shortest sequence.
  # -- Tokenizer of the text sources ('local', 'tfds', 'local_text', '*_mlm', 'pydoc_pairs').
  c.data.tokenizer = ml_collections.ConfigDict()
  c.data.tokenizer.kind = "byte"  # byte (UTF-8 bytes, no files) | word | sentencepiece |
  # wordpiece. 'word'/'sentencepiece' with no path: trained on the 'local' training texts and
  # cached in <workdir>/tokenizer/ (reused on resume; its path goes to data_info.json).
  c.data.tokenizer.path = ""  # word list; sentencepiece .model; wordpiece folder,
  # tokenizer.json or vocab.txt.
  c.data.tokenizer.lowercase = True  # wordpiece vocab.txt only.
  c.data.tokenizer_vocab_size = 0  # Pieces of a tokenizer trained here (0: model.vocab_size,
  # or 8000 when that is 0 too).
  # -- masked_summation (Star-Transformer Sec. 5.1) and npz.
  c.data.num_masked = 10  # masked_summation: k, rows whose values are summed.
  c.data.feature_dim = 10  # masked_summation: d, 1 mask column + d-1 values.
  c.data.path = ""  # npz: the .npz file.
  # -- listops, needle, recall (longtext_jax/data/synthetic.py).
  c.data.listops_max_depth = 10  # listops: deepest nesting of operators.
  c.data.listops_max_args = 10  # listops: most arguments of one operator.
  c.data.listops_train_min_len = 0  # listops: shortest training expression (0: min_len); the
  # dev split (and a study's test split) keep min_len: short expressions mixed into training.
  c.data.needle_min_pos = 0  # needle: the needle starts at or after this token.
  c.data.recall_kind = "associative"  # recall: 'copy' or 'associative'.
  c.data.recall_vocab = 16  # recall: symbols to copy / keys and values to recall.
  # -- long_tasks (longtext_jax/data/long_tasks.py).
  c.data.task = "last_window"  # long_tasks: the generator (longtext_jax.data.long_tasks.TASKS).
  c.data.window = 64  # long_tasks: last_window/binary: the label token lies in the last window.
  c.data.vocab_size = 64  # long_tasks: token ids (5 special, then markers, then fillers).
  # -- local and tfds (longtext_jax/data/{local_files,tfds_source,text}.py).
  c.data.train_path = ""  # local: training file or folder.
  c.data.eval_path = ""  # local: evaluation (dev) file or folder.
  c.data.test_path = ""  # local: held-out test file, evaluated once at the end with the best
  # checkpoint and reported apart ('test' in metrics.jsonl, test_metrics.json).
  c.data.eval_fraction = 0.0  # local, no eval_path: this fraction of the training file
  # becomes the dev split (stratified by label; recorded in data_info.json).
  c.data.split_seed = 0  # Seed of that split (fixed across config.seed: one dev set).
  c.data.format = ""  # local: jsonl|csv|tsv|text_dir|conll|conllu; '' infers it from the extension.
  c.data.data_dir = ""  # local: replaces '{data_dir}' in train_path/eval_path (GLUE/CLUE roots).
  c.data.columns = ()  # local csv/tsv: column names of a headerless file (empty: header row).
  c.data.skip_unlabeled = False  # local: drop (and count) rows whose label is '', '-' or null.
  c.data.text_field = "text"  # local/tfds: the field (column, key) holding the text.
  c.data.text_pair_field = ""  # local/tfds: second text of a pair ('' = single text).
  c.data.label_field = "label"  # local/tfds: one label, or a list of labels (multilabel).
  c.data.label_names = ()  # local/tfds/local_text: label names in id order; () = integer
  # labels as ids (local/tfds: else the sorted set of the training labels).
  c.data.label_separator = "|"  # csv/tsv multilabel: separator inside the label cell.
  c.data.tag_column = -1  # conll: column of the tag (the word is column 0); conllu: -1 = UPOS.
  c.data.max_tokens = 0  # Truncate longer examples to this many tokens (0: keep whole).
  c.data.long_documents = "cut"  # local/tfds, a document longer than max_tokens: 'cut' (the
  # rest dropped, counted) or 'split' (task lm: consecutive examples of at most
  # max_tokens tokens, every token kept; tfds needs max_examples > 0).
  c.data.on_empty = "error"  # Empty texts: 'error' (naming file:line), 'skip' (counted), 'keep'.
  c.data.add_special_tokens = True  # [CLS] a [SEP] (b [SEP]); never for tagging.
  c.data.max_examples = 0  # Use at most this many examples per split (0: all; documents
  # before long_documents splits them).
  c.data.skip_labels = ()  # tfds (in memory): drop examples with these labels, e.g. (-1,) for SNLI.
  c.data.tfds_name = ""  # tfds/tfds_mlm: dataset name, e.g. 'imdb_reviews', 'glue/sst2'.
  c.data.tfds_train_split = "train"  # tfds: split (TFDS slicing syntax allowed).
  c.data.tfds_eval_split = "test"  # tfds: evaluation split ('validation' for glue).
  c.data.tfds_data_dir = ""  # tfds/tfds_mlm: data_dir with prepared data ('' = TFDS default).
  # -- local_text: alias of 'local' with the former S-LSTM field names (data_dir and columns
  # as above; rows without a gold label are always dropped).
  c.data.train_file = ""  # Training .tsv/.json(l) file.
  c.data.eval_file = ""  # Evaluation file.
  c.data.text_a = "sentence"  # Field of the first text.
  c.data.text_b = ""  # Field of the second text ('' for single-text tasks).
  c.data.label = "label"  # Field of the label.
  # -- pydoc_pairs (next-chunk pairs from Python's documentation topics).
  c.data.chunk_words = 24  # Words per chunk.
  # -- Masked-LM corpora: pydoc_mlm, text_mlm, tfds_mlm (longtext_jax/data/mlm.py); the
  # held-out split (eval_one_in) also serves pydoc_pairs.
  c.data.text_dir = ""  # text_mlm: folder of documents.
  c.data.text_pattern = "*.txt"  # text_mlm: files to read under text_dir.
  c.data.one_per_line = False  # text_mlm: every non-empty line is a document.
  c.data.tfds_split = "train"  # tfds_mlm: split to read (slicing allowed).
  c.data.tfds_text_key = "text"  # tfds_mlm: feature holding the text.
  c.data.max_documents = 0  # tfds_mlm: read at most this many documents (0 = all).
  c.data.eval_one_in = 10  # 1 document in eval_one_in goes to the eval split (>= 2).
  c.data.mask_prob = 0.15  # BERT: 15% of the tokens, 80/10/10 <mask>/random/kept.
  c.data.whole_word_mask = False  # Mask whole words ('▁' pieces and continuations).
  c.data.mask_copies = 1000  # Virtual epochs, each with its own (seeded) masks.

  c.model = ml_collections.ConfigDict()
  c.model.input = "tokens"  # 'tokens' (input_ids -> Embed), 'features' (features -> Dense)
  # or 'ids' (input_ids straight to an encoder that embeds them itself, e.g. chunk_bert).
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
  c.optim.b1 = 0.9  # Adam beta1.
  c.optim.b2 = 0.999  # Adam beta2.
  c.optim.eps = 1e-8  # Adam epsilon.
  c.optim.weight_decay = 0.01  # Decoupled (AdamW); never applied to biases and norm scales.
  c.optim.clip_norm = 1.0  # Global-norm gradient clipping; 0 disables.
  c.optim.grad_accum_steps = 1  # Micro-batches per step (batch_size must divide by it).
  c.optim.mu_dtype = "float32"  # Adam first moment dtype ('bfloat16' halves its memory).
  c.optim.loss_scale = "auto"  # 'auto': dynamic for float16 compute (model.encoder.dtype),
  # else none; 'dynamic' or 'none' (train/loss_scale.py).

  c.train = ml_collections.ConfigDict()
  c.train.num_steps = 1000  # Optimizer steps.
  c.train.num_epochs = 0.0  # > 0 (data.name='local'): num_steps = ceil(epochs * training
  # examples / batch_size) instead, evaluating and checkpointing once per epoch.
  c.train.min_steps = 0  # With num_epochs: at least this many steps (more epochs on a
  # small training set; the evaluation stays once per epoch).
  c.train.patience = 0  # > 0: stop when best_metric has not improved for this many evals.
  c.train.log_every = 50  # Training metrics (a window: its loss over its tokens, last lr).
  c.train.eval_every = 250  # Evaluate every this many steps (and at the last step).
  c.train.checkpoint_every = 250  # Periodic checkpoints (also at the last step and on SIGTERM).
  c.train.keep_checkpoints = 3  # Most recent checkpoints to keep.
  c.train.best_metric = ""  # e.g. 'accuracy': keep the best eval checkpoint in workdir/best.
  c.train.best_mode = "max"  # 'max' or 'min' for best_metric.
  c.train.async_checkpoint = True  # Write checkpoints in the background.
  c.train.force_lock = False  # Take over the workdir's writer lock even if its holder may
  # be alive (another host, a garbled lock file); a second live run on a workdir is refused.
  c.train.start_fresh_if_all_damaged = False  # Every checkpoint damaged: False stops naming
  # them (nothing moved); True moves them to checkpoints_damaged/ and trains from step 0.
  c.train.progress_bar = True  # tqdm bar with rate and ETA (stderr): live on a terminal or in a
  # notebook, redrawn once a minute in a log file or pipe (train.logging.progress_bar).
  c.train.profile_start_step = -1  # >=0: write a jax.profiler trace to workdir/profile ...
  c.train.profile_num_steps = 3  # ... covering this many steps from that step.
  c.train.cpu_scheduler = "auto"  # XLA:CPU's scheduler for the train step: 'memory'
  # (peak memory first), 'xla' (XLA's default, concurrency first), or 'auto': 'memory'
  # when the model sets a remat policy (with 'xla' a remat of layers that are not in a
  # rolled scan saves nothing on a CPU: layers/remat.py). Ignored on GPU/TPU.
  c.train.allow_config_change = ""  # Resuming: comma-separated fields that may differ from
  # the workdir's config.json besides those a resume may always change (how long, how often,
  # where: train/loop.RESUME_MAY_CHANGE), e.g. 'optim.learning_rate'; 'all': no check.

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


CHOICES = {  # Fields with a fixed set of values (the open sets are checked in validate()).
    "model.input": ("tokens", "features", "ids"),
    "optim.schedule": ("cosine", "linear", "constant"),
    "optim.mu_dtype": ("float32", "bfloat16"),
    "optim.loss_scale": ("auto", "dynamic", "none"),
    "train.best_mode": ("max", "min"),
    "train.cpu_scheduler": ("auto", "memory", "xla"),
    "data.on_empty": ("error", "skip", "keep"),
    "data.long_documents": ("cut", "split"),
    "data.recall_kind": ("copy", "associative"),
}


def _get(config, dotted: str):
  for key in dotted.split("."):
    config = config[key]
  return config


# The built-in tasks' metrics by direction: train.best_mode must agree (validate).
LOWER_IS_BETTER = ("loss", "mse", "perplexity")
HIGHER_IS_BETTER = ("accuracy", "macro_f1", "micro_f1", "mcc", "f1", "exact_match",
                    "token_accuracy", "span_precision", "span_recall", "span_f1")


def validate(config, task=None) -> None:
  """Checks a config before a run starts; raises one error listing every problem.

  Checks each field with a fixed set of values (:data:`CHOICES`, ``task.name``,
  ``data.name``, ``model.encoder.name``, ``data.tokenizer.kind``, ``data.format``,
  ``data.task`` of 'long_tasks'), that the encoder fits the task and the inputs (a causal
  encoder for 'lm'; ``model.input='ids'`` exactly for encoders that embed ids themselves),
  that mlm/lm vocabularies agree, that ``data.long_threshold`` can be exceeded, given
  ``task``, that ``train.best_metric`` is one of ``task.metric_names``, that ``best_mode``
  is the direction of a built-in metric (:data:`LOWER_IS_BETTER`, :data:`HIGHER_IS_BETTER`),
  that a tagging task's ``data.label_names``, when both are set, is ``task.tag_names`` in the
  same order, and that the logging, evaluation and checkpoint intervals are >= 1.

  Args:
    config: a config built on :func:`base_config`.
    task: the run's Task (its ``metric_names``, ``needs_causal_encoder`` and
      ``predicts_tokens`` are read, and ``label_layout`` when both ``data.label_names`` and
      ``task.tag_names`` are set); None builds it from ``config.task``.

  Raises:
    ValueError: naming each bad field, its value and the valid choices.
  """
  # pylint: disable=g-import-not-at-top
  from longtext_jax import data as data_lib
  from longtext_jax import encoders, tasks
  from longtext_jax.data import local_files, long_tasks, tokenizers
  from longtext_jax.data import text as text_data
  problems = []

  def check(field, valid):
    value = _get(config, field)
    if value not in valid:
      problems.append(f"config.{field}={value!r}: choose one of {sorted(valid)}")

  for field, valid in CHOICES.items():
    check(field, valid)
  check("task.name", tasks.TASKS)
  check("data.name", data_lib.SOURCES)
  check("model.encoder.name", encoders.ENCODERS)
  check("data.tokenizer.kind", tokenizers.TOKENIZER_KINDS)
  check("data.format", ("",) + tuple(local_files.FORMATS))
  if config.data.name == "long_tasks":
    check("data.task", long_tasks.TASKS)

  if task is None and config.task.name in tasks.TASKS:
    task = tasks.get_task(config.task)
  cls = encoders.ENCODERS.get(config.model.encoder.name)
  if cls is not None and task is not None:
    enc = config.model.encoder
    if task.needs_causal_encoder and not encoders.is_causal(enc):
      problems.append(f"task {config.task.name!r} needs a causal encoder: "
                      f"{encoders.causal_fix(enc.name)} (encoder {enc.name!r} as configured "
                      "reads both directions)")
    takes_ids = encoders.input_kind(cls) == "ids"
    if takes_ids and config.model.input != "ids":
      problems.append(f"encoder {enc.name!r} embeds ids itself: set config.model.input='ids' "
                      f"(it is {config.model.input!r})")
    elif not takes_ids and config.model.input == "ids":
      problems.append(f"config.model.input='ids' is only for encoders that embed ids "
                      f"themselves; encoder {enc.name!r} takes embeddings (use 'tokens')")
  if (task is not None and task.predicts_tokens
      and config.task.vocab_size != config.model.vocab_size):
    problems.append(f"config.task.vocab_size={config.task.vocab_size} must equal "
                    f"config.model.vocab_size={config.model.vocab_size} for task "
                    f"{config.task.name!r}")
  longest = config.data.max_tokens if config.data.name in ("local", "tfds") else (
      config.data.seq_len)
  if config.data.long_threshold and longest and config.data.long_threshold >= longest:
    problems.append(f"config.data.long_threshold={config.data.long_threshold}: no eval example "
                    f"can be longer (examples have at most {longest} tokens)")
  if config.data.long_documents == "split":
    if config.data.name not in ("local", "tfds"):
      problems.append(f"config.data.long_documents='split' is read by the 'local' and 'tfds' "
                      f"sources only (data.name={config.data.name!r} "
                      + ("cuts its documents into rows of data.seq_len itself)"
                         if config.data.name in ("pydoc_mlm", "text_mlm", "tfds_mlm")
                         else "does not read it)"))
    elif task is not None and task.label_layout not in text_data.SPLIT_LAYOUTS:
      problems.append(f"config.data.long_documents='split' is for unlabelled text (task "
                      f"lm): task {config.task.name!r} has a label per document; use 'cut'")
    elif not config.data.max_tokens:
      problems.append("config.data.long_documents='split' needs config.data.max_tokens > 0 "
                      "(the length of the pieces)")
    elif config.data.name == "tfds" and not config.data.max_examples:
      problems.append("config.data.long_documents='split' with data.name='tfds' needs the "
                      "examples in memory: set config.data.max_examples > 0")
  if not 0 <= config.data.pad_offset < max(config.data.pad_multiple, 1):
    problems.append(f"config.data.pad_offset={config.data.pad_offset} must be in [0, "
                    f"data.pad_multiple={config.data.pad_multiple})")
  if config.train.patience < 0:
    problems.append(f"config.train.patience={config.train.patience} must be >= 0")
  elif config.train.patience and not config.train.best_metric:
    problems.append(f"config.train.patience={config.train.patience} needs "
                    "config.train.best_metric (the dev metric it watches)")
  if task is not None and config.train.best_metric:
    names = tuple(task.metric_names)
    if config.train.best_metric not in names:
      problems.append(f"config.train.best_metric={config.train.best_metric!r}: task "
                      f"{config.task.name!r} reports {sorted(names)}")
  best = config.train.best_metric
  direction = "min" if best in LOWER_IS_BETTER else "max" if best in HIGHER_IS_BETTER else ""
  if direction and config.train.best_mode != direction:
    problems.append(f"config.train.best_mode={config.train.best_mode!r}: best_metric={best!r} "
                    f"is better {'lower' if direction == 'min' else 'higher'}; set "
                    f"config.train.best_mode={direction!r} (else the worst checkpoint is kept "
                    "and patience stops a run that is improving)")
  param_dtype = config.model.encoder.get("param_dtype", "float32")
  if param_dtype != "float32":
    problems.append(
        f"config.model.encoder.param_dtype={param_dtype!r}: training keeps no float32 master "
        "copy, so updates below the dtype's resolution are rounded away (after 10 AdamW steps "
        "at lr 1e-4, 81% of a bfloat16 model's weights had not moved); train with "
        "param_dtype='float32' and set config.model.encoder.dtype for the computation "
        "(docs/scaling.md, section 5)")
  for field in ("train.num_steps", "train.log_every", "train.eval_every",
                "train.checkpoint_every", "optim.grad_accum_steps", "data.batch_size",
                "data.eval_batch_size", "model.d_model"):
    if _get(config, field) < 1:
      problems.append(f"config.{field}={_get(config, field)} must be >= 1")
  if not config.optim.learning_rate >= 0:  # (NaN too.)
    problems.append(f"config.optim.learning_rate={config.optim.learning_rate} must be >= 0")
  tag_names, label_names = tuple(config.task.tag_names), tuple(config.data.label_names)
  if (tag_names and label_names and tuple(map(str, tag_names)) != tuple(map(str, label_names))
      and task is not None and task.label_layout == "tags"):
    problems.append(f"config.data.label_names={label_names!r} (the order of the data's tag "
                    f"ids) differs from config.task.tag_names={tag_names!r} (the order span "
                    "F1 reads them in); set config.data.label_names = config.task.tag_names")
  for field in ("data.label_names", "data.columns", "task.tag_names"):
    value = _get(config, field)
    if (isinstance(value, (tuple, list)) and len(value) == 1 and isinstance(value[0], str)
        and "," in value[0]):  # --config.data.label_names=neg,pos gives ('neg,pos',).
      names = tuple(x.strip() for x in value[0].split(","))
      problems.append(f"config.{field}={tuple(value)!r} is one name holding commas; for "
                      f"{len(names)} names write --config.{field}=\"{names!r}\"")
  if problems:
    raise ValueError("bad config:\n  " + "\n  ".join(problems))


def config_package_root(argv) -> str | None:
  """The folder holding the ``configs`` package of the ``--config`` file in ``argv`` (the
  parent of the outermost ``configs/`` folder with an ``__init__.py`` above the file), or
  None (no such flag, or the file is not in such a package)."""
  spec = None
  for i, arg in enumerate(argv[1:], 1):
    for prefix in ("--config=", "-config="):
      if arg.startswith(prefix):
        spec = arg[len(prefix):]
    if arg in ("--config", "-config") and i + 1 < len(argv):
      spec = argv[i + 1]
  if not spec:
    return None
  folder = os.path.dirname(os.path.abspath(spec.split(":", 1)[0]))
  root = None
  while os.path.isfile(os.path.join(folder, "__init__.py")):
    if os.path.basename(folder) == "configs":
      root = os.path.dirname(folder)
    parent = os.path.dirname(folder)
    if parent == folder:
      break
    folder = parent
  return root


def parse_override(item: str, current, value: str):
  """``value`` (the text after '=' in the override ``item``, 'field=value') as the type of
  the field's ``current`` value. Booleans take true/false (any case) or 1/0: ``bool('False')``
  is True, which would silently keep a switch on; tuples and lists take a Python literal
  (``tuple('ab')`` would be ``('a', 'b')``); a field that is None keeps the text."""
  if isinstance(current, bool):
    lowered = value.strip().lower()
    if lowered not in ("true", "false", "1", "0"):
      raise ValueError(f"--override {item}: a boolean field takes true or false, got "
                       f"{value!r}")
    return lowered in ("true", "1")
  if isinstance(current, (tuple, list)):
    try:
      parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError) as e:
      raise ValueError(f"--override {item}: a sequence field takes a Python literal such as "
                       f"(1, 2), got {value!r}") from e
    if not isinstance(parsed, (tuple, list)):
      parsed = (parsed,)
    return type(current)(parsed)
  if current is None:
    return value
  try:
    return type(current)(value)
  except ValueError as e:
    raise ValueError(f"--override {item}: the field is a {type(current).__name__}, got "
                     f"{value!r}") from e


def apply_overrides(config, items, refused: dict[str, str] | None = None) -> None:
  """Sets each 'a.b.c=value' of ``items`` on ``config`` (read by :func:`parse_override` as
  the type of the field's current value), in order. A field the config lacks, an item
  without '=', a value of the wrong type, or a field under one of ``refused`` (field or
  subtree -> what to use instead) raises ValueError naming the item."""
  for item in items:
    key, sep, value = item.partition("=")
    if not sep or not key:
      raise ValueError(f"--override {item!r}: expected field=value, e.g. "
                       "model.encoder.num_cycles=6")
    for field, instead in (refused or {}).items():
      if key == field or key.startswith(field + "."):
        raise ValueError(f"--override {item}: {field} is set by {instead}")
    *path, last = key.split(".")
    node = config
    try:
      for k in path:
        node = node[k]
      current = node[last]
    except (KeyError, AttributeError, TypeError):
      raise ValueError(f"--override {item}: the config has no field {key!r}") from None
    if isinstance(current, ml_collections.ConfigDict):
      raise ValueError(f"--override {item}: {key!r} is a group of fields, not a field")
    try:
      node[last] = parse_override(item, current, value)
    except TypeError as e:  # A typed field (FieldReference) refusing the value.
      raise ValueError(f"--override {item}: {e}") from None
