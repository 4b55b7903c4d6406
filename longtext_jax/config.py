"""The shared skeleton of every experiment config (each field commented).

Experiment files in ``configs/`` call :func:`base_config` and fill in the data, model and
task. The CLI loads them with ``lock_config=True``, so ``--config.train.num_stpes=5`` fails
with an error naming the field.
"""
from __future__ import annotations

import ml_collections


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
  c.data.num_train = 2048  # Synthetic sources: training examples.
  c.data.num_eval = 512  # Synthetic sources: evaluation examples.
  c.data.seq_len = 200  # Synthetic sources: sequence length n.
  c.data.num_masked = 10  # masked_summation: k, rows whose values are summed.
  c.data.feature_dim = 10  # masked_summation: d, 1 mask column + d-1 values.

  c.model = ml_collections.ConfigDict()
  c.model.input = "tokens"  # 'tokens' (input_ids -> Embed) or 'features' (features -> Dense).
  c.model.vocab_size = 0  # Token inputs only.
  c.model.d_model = 64  # Width D of the encoder.
  c.model.embed_dropout = 0.0  # Dropout on the input embeddings.
  c.model.encoder = ml_collections.ConfigDict()
  c.model.encoder.name = "transformer"  # Key of longtext_jax.encoders.ENCODERS; other fields
  # of this dict are that encoder class's dataclass fields.

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

  c.mesh = ml_collections.ConfigDict()
  c.mesh.data = -1  # Devices on the data-parallel axis (-1: all).

  # Multi-host (jax.distributed); see longtext_jax/train/distributed.py.
  c.distributed = ml_collections.ConfigDict()
  c.distributed.initialize = False  # Call jax.distributed.initialize() first.
  c.distributed.coordinator_address = ""  # host:port of process 0; '' = env or auto-detect.
  c.distributed.num_processes = 0  # 0 = env (JAX_NUM_PROCESSES) or auto-detect.
  c.distributed.process_id = -1  # -1 = env (JAX_PROCESS_ID) or auto-detect.
  c.distributed.cpu_collectives = "gloo"  # Cross-process collectives on CPU.

  # Warm start: copy parameter subtrees from another run's checkpoint.
  c.init_from = ml_collections.ConfigDict()
  c.init_from.path = ""  # A workdir (its checkpoints/) or a checkpoint manager directory.
  c.init_from.step = -1  # -1: the latest step.
  c.init_from.modules = ("inputs", "encoder")  # Top-level submodules of Model to copy.
  return c
