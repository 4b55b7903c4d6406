"""RAN on the generated long-document tasks of ``longtext_jax.data.long_tasks``.

The answer lies far from the start (e.g. a label decided by a token in the document's last
window), so a model must carry information across windows. Tasks and the task heads:

  last_window  multi-class classification (4 classes, label set in the last window)
  binary       binary classification (sigmoid/BCE head)
  multilabel   multi-label classification (which marker classes occur anywhere)
  tagging      NER-style token tagging with window_size=64: tag = latest marker so far
  mlm          masked-LM pretraining on repeated-phrase documents
  lm           causal LM (mask_type='causal') on the same documents

arg = '<task>[,tiny][,encoder=<name>]'; ',tiny' is a seconds-long CPU run; ',encoder=' swaps
the RAN for any registered encoder on the same data (e.g. ',encoder=transformer' for the
full-attention baseline; 'lm' takes a causal one: ',encoder=lstm', or 'transformer' with
--config.model.encoder.causal=True).

Launch:
  python -m longtext_jax.main --config=configs/ran/long_tasks.py:last_window \
      --workdir=runs/ran_last_window
  python -m longtext_jax.main --config=configs/ran/long_tasks.py:lm,tiny --workdir=/tmp/ran_lm
  python -m longtext_jax.main \
      --config=configs/ran/long_tasks.py:last_window,encoder=transformer \
      --workdir=runs/transformer_last_window
"""
from configs import common
from longtext_jax.config import encoder_config

TASKS = {  # task -> (config.task.name, number of classes)
    "last_window": ("classification", 4),
    "binary": ("binary", 2),
    "multilabel": ("multilabel", 6),
    "tagging": ("tagging", 4),  # tags 0 (no marker yet) + 3 marker classes
    "mlm": ("mlm", 0),
    "lm": ("lm", 0),
}
BEST_METRIC = {"classification": "accuracy", "binary": "accuracy", "multilabel": "micro_f1",
               "tagging": "token_accuracy", "mlm": "loss", "lm": "loss"}


def ran_encoder(**overrides):
  """The RAN encoder fields shared by the configs in configs/ran/ (paper defaults where
  they fit a CPU: 2 layers, max pooling, rotary, GPC residual, memory review)."""
  enc = dict(
      num_layers=2,  # Paper default (Sec. 4.2).
      num_heads=4,  # Paper: 12 heads of width 64 at D=768; 4 fits D=64.
      window_size=64,  # W tokens per window (paper: 256 for TC/LM, 64 for NER).
      mask_type="bidirectional",  # 'causal' for LM, 'prefix' for seq2seq.
      layer_mode="stacked",  # Each layer runs over all windows (official code).
      pooling="max",  # Eq. 11.
      gpc_residual="paper",  # Eq. 6.
      memory_review=True,  # Eq. 7-9.
      review_residual="add",  # O = O^w + review (Eq. 9 alone: 'none').
      dropout_rate=0.1,  # On G'_i and the layer outputs.
  )
  enc.update(overrides)
  return encoder_config("ran", **enc)


def get_config(arg: str = "last_window"):
  """arg: '<task>[,tiny][,encoder=<name>]'."""
  args = common.parse_arg(arg, [common.Positional("task", TASKS, "last_window")])
  task = args["task"]
  name, num_classes = TASKS[task]
  c = common.experiment(
      task=dict(name=name, num_classes=max(num_classes, 2)),  # Marker classes.
      data=dict(name="long_tasks", task=task,  # The generator in data.long_tasks.
                seq_len=1024,  # Padded document length L (16 windows of 64).
                min_len=512,  # Shortest document: lengths vary, so padding matters.
                window=64,  # last_window/binary: the label token lies in the last 64 tokens.
                vocab_size=64,  # Ids 0-4 special, then markers, then fillers.
                num_train=8192, num_eval=512, batch_size=32),
      model=dict(input="tokens", vocab_size=64, d_model=64,  # vocab = data.vocab_size.
                 encoder=ran_encoder(mask_type="causal" if task == "lm" else "bidirectional")),
      optim=dict(learning_rate=1e-3, warmup_steps=100),
      train=common.steps(2000, 500, best_metric=BEST_METRIC[name], best_mode="min" if name in ("mlm", "lm")
                 else "max"))
  c.task.vocab_size = c.model.vocab_size  # build_model checks they agree.
  if args["tiny"]:
    common.tiny(c, 150, 75, log_every=25, warmup_steps=10, data__seq_len=64, data__min_len=40,
                data__window=8, data__vocab_size=24, model__vocab_size=24,
                task__vocab_size=24, data__num_train=512, data__num_eval=64,
                data__batch_size=16, data__eval_batch_size=32, model__d_model=32,
                model__encoder__window_size=8, model__encoder__num_heads=2,
                model__encoder__dropout_rate=0.0, optim__learning_rate=3e-3)
  common.apply_encoder_option(c, args)
  return c
