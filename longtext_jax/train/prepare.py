"""What a run learns from its own data before the model is built (``data.name='local'``).

:func:`prepare_config` is called by :func:`longtext_jax.train.train_and_evaluate` before
anything is built, and returns a copy of the config with these fields filled in from the
training file:

* ``task.num_classes`` = 0: the size of the training label set (label names, or the largest
  integer id + 1);
* ``data.tokenizer.kind`` 'sentencepiece' or 'word' with an empty ``path``: a tokenizer of
  ``data.tokenizer_vocab_size`` ids (0: ``model.vocab_size``, or 8000) is trained on the
  training texts and cached as ``<workdir>/tokenizer/<kind>-<vocab>.{model,txt}``; a resumed
  run (same workdir) reuses the file, and its path is what data_info.json records, so
  inference loads the same tokenizer;
* ``model.vocab_size`` = 0: the tokenizer's vocabulary (and, for an encoder that embeds ids
  itself and is not loaded from a checkpoint, its ``vocab_size``, ``cls_id`` and ``sep_id``;
  for one loaded from a checkpoint, its table size is checked against the tokenizer: an
  error, not a run that embeds an id past the table as NaN);
* ``train.num_epochs`` > 0: ``train.num_steps = ceil(num_epochs * training examples /
  batch_size)`` (after ``data.eval_fraction`` has split off the dev set), with an
  evaluation and a checkpoint every epoch (``train.eval_every``, ``checkpoint_every``), so
  ``train.patience`` counts epochs; the warmup is cut to at most a tenth of the steps.
  ``train.min_steps`` is a floor on that count: a small training set gets more epochs.

The config written to ``<workdir>/config.json`` is the prepared one, so a reader of the run
(inference, a resumed run) sees the concrete values.
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
import os
from absl import logging

from longtext_jax import encoders
from longtext_jax import fileio
from longtext_jax import tasks
from longtext_jax.data import local_files
from longtext_jax.data import text as text_lib
from longtext_jax.data import tokenizers

TOKENIZER_DIR = "tokenizer"  # Under the workdir.
# What train.num_epochs > 0 sets from the training set's size (prepare_config): a value given
# for them is replaced, so the command lines refuse one (main.py, own_corpus_table.py).
EPOCH_SET_FIELDS = ("train.num_steps", "train.eval_every", "train.checkpoint_every")
DEFAULT_TRAINED_VOCAB = 8000  # Ids of a trained tokenizer when no size is configured.


def trained_tokenizer_path(workdir: str, kind: str, vocab_size: int) -> str:
  """Where a tokenizer trained for the run in ``workdir`` lives."""
  ext = ".model" if kind == "sentencepiece" else ".txt"
  return os.path.join(os.path.abspath(workdir), TOKENIZER_DIR, f"{kind}-{vocab_size}{ext}")


def _needs_preparing(config) -> bool:
  d = config.data
  trainable = d.tokenizer.kind in tokenizers.TRAINABLE_KINDS and not d.tokenizer.path
  return (trainable or config.task.num_classes == 0 or config.train.num_epochs > 0
          or config.model.vocab_size == 0)


def _num_classes(records: list[dict], layout: str, label_names) -> int:
  """The classes of the training labels: their names, or for integer ids max + 1 (warning
  when ids are left unused: 1-based ids, codes or years make classes no example teaches)."""
  values = local_files._label_values(records, layout)  # pylint: disable=protected-access
  vocab = text_lib.LabelVocab.build(list(label_names), values)
  if vocab.names is not None:
    return len(vocab)
  if not values:
    return 0
  ids = sorted({int(x) for x in values})
  n = ids[-1] + 1
  if ids[0] > 0 or len(ids) < n / 2:
    logging.warning(
        "the training labels are integers, read as class ids, but only %d of the %d ids "
        "[0, %d) occur (%s): the unused ones are classes no example teaches; if the "
        "labels are codes or 1-based, set config.data.label_names to them in id order",
        len(ids), n, n, ", ".join(map(str, ids[:10])) + (", ..." if len(ids) > 10 else ""))
  return n


def _texts_digest(texts: list[str]) -> str:
  """SHA-256 of the texts a tokenizer is trained on (each length-prefixed)."""
  digest = hashlib.sha256()
  for text in texts:
    data = text.encode("utf-8", "surrogatepass")
    digest.update(len(data).to_bytes(8, "little") + data)
  return digest.hexdigest()


def _trained_on(record: str) -> str | None:
  """The digest a trained tokenizer's record holds (None: no record, or unreadable)."""
  try:
    with open(record, encoding="utf-8") as f:
      return json.load(f).get("sha256")
  except (OSError, ValueError, AttributeError):
    return None


def _listdir(folder: str) -> list[str]:
  try:
    return os.listdir(folder)
  except OSError:
    return []


def _texts(records: list[dict]) -> list[str]:
  out = []
  for r in records:
    if "words" in r:
      out.append(" ".join(r["words"]))
      continue
    out.append(r.get("text", ""))
    if r.get("text_pair"):
      out.append(r["text_pair"])
  return out


def _hf_folder(config) -> str:
  """The Hugging Face folder the encoder's weights come from ('' if none): the legacy
  ``model.encoder.pretrained_path`` or an ``init_from`` source of kind 'hf_bert'."""
  path = config.model.encoder.get("pretrained_path", "")
  if not path and config.init_from.kind == "hf_bert":
    path = config.init_from.path
  return path


def _check_checkpoint_vocabulary(enc, tok, tokenizer_path: str, folder: str) -> None:
  """A checkpoint's embedding table must hold every id of the run's tokenizer: an id past
  the table embeds as NaN, without an error from the model. (Its [CLS]/[SEP] ids are
  checked against the folder when the weights are loaded: ``init_from``.)"""
  if "vocab_size" in enc and tok.vocab_size > enc.vocab_size:
    raise ValueError(f"config.model.encoder has vocab_size={enc.vocab_size}, but the tokenizer "
                     f"{tokenizer_path} has {tok.vocab_size} ids, more than the embedding "
                     f"table of the checkpoint {folder} holds: use the checkpoint's own "
                     "vocabulary")


def prepare_config(config, workdir: str):
  """A copy of ``config`` with the fields that depend on the training data filled in.

  Only for ``data.name='local'`` (other sources: ``config`` itself, unless
  ``train.num_epochs`` is set, which is an error there). See the module docstring for what
  is filled in.

  Args:
    config: the experiment config.
    workdir: the run's folder (the trained tokenizer is cached under it).

  Returns:
    The prepared config (a copy; ``config`` is not changed).

  Raises:
    ValueError: ``train.num_epochs`` with a source other than 'local', or a label set that
      cannot size the task.
  """
  if config.data.name != "local":
    if config.train.num_epochs > 0:
      raise ValueError(f"config.train.num_epochs={config.train.num_epochs} needs "
                       f"data.name='local' (got {config.data.name!r}); set train.num_steps")
    return config
  if not _needs_preparing(config):
    return config
  config = copy.deepcopy(config)
  d, notes = config.data, []
  task = tasks.get_task(config.task)
  layout = task.label_layout
  options = local_files.LocalOptions.from_config(d)
  # Only the training file (after the dev split is cut off): the other files are read
  # once, when the data is built.
  records, _, _, _ = local_files.read_splits(options, layout, only=["train"])
  train = records["train"]

  if config.task.num_classes == 0 and layout in ("label", "multi_hot", "tags"):
    n = _num_classes(train, layout, d.label_names)
    if n < 1:
      raise ValueError(f"config.task.num_classes=0: no labels in {options.path('train')} "
                       "to count; set config.task.num_classes")
    config.task.num_classes = n
    notes.append(f"task.num_classes={n} (the training labels)")

  kind = d.tokenizer.kind
  if kind in tokenizers.TRAINABLE_KINDS and not d.tokenizer.path:
    size = d.tokenizer_vocab_size or config.model.vocab_size or DEFAULT_TRAINED_VOCAB
    path = trained_tokenizer_path(workdir, kind, size)
    texts = _texts(train)
    digest = _texts_digest(texts)
    record = os.path.splitext(path)[0] + ".trained_on.json"
    if os.path.exists(path) and _trained_on(record) not in (None, digest) and not any(
        x.isdigit() for x in _listdir(os.path.join(workdir, "checkpoints"))):
      # Trained by a launch killed before its first checkpoint, on other training data:
      # nothing depends on it yet. (With checkpoints the model's embeddings do, and the
      # resume's data check names the changed file: train/loop.py:check_resume_data.)
      logging.warning("%s was trained on other training texts (by a launch that saved no "
                      "checkpoint): training it again on this run's", path)
      os.remove(path)
    if os.path.exists(path):
      notes.append(f"tokenizer {path} (trained before, reused)")
    else:
      tokenizers.train_tokenizer(kind, texts, size, path)
      fileio.write_text_atomic(record, json.dumps({"texts": len(texts), "sha256": digest}))
      notes.append(f"tokenizer {path} (trained on {len(train)} training texts)")
    d.tokenizer.path = path

  if config.model.vocab_size == 0:
    tok = tokenizers.build_tokenizer(d.tokenizer)
    config.model.vocab_size = tok.vocab_size
    notes.append(f"model.vocab_size={tok.vocab_size} (the tokenizer's)")
    enc = config.model.encoder
    cls = encoders.ENCODERS.get(enc.name)
    # Weights from a HF folder (either route): the table size is the checkpoint's
    # (config.json's vocab_size, often padded past the vocabulary), never the tokenizer's.
    folder = _hf_folder(config)
    if cls is not None and encoders.input_kind(cls) == "ids" and not folder:
      enc.vocab_size = tok.vocab_size
      enc.cls_id, enc.sep_id = tok.cls_id, tok.sep_id
    elif cls is not None and folder:
      _check_checkpoint_vocabulary(enc, tok, d.tokenizer.path, folder)

  if config.train.num_epochs > 0:
    per_epoch = max(1, math.ceil(len(train) / d.batch_size))
    steps = max(1, math.ceil(config.train.num_epochs * len(train) / d.batch_size))
    floor = config.train.min_steps
    # Epochs of data seen: the loader repeats the shuffled data before batching, so batches
    # run across epoch boundaries and steps * batch / examples is what is trained on.
    epochs = lambda n: n * d.batch_size / len(train)
    if floor > steps:  # A small training set: more epochs, up to the floor.
      notes.append(f"train.min_steps={floor} raises {steps} steps "
                   f"({config.train.num_epochs:g} epochs) to {epochs(floor):.3g} epochs")
      steps = floor
    given = config.train.num_steps
    config.train.num_steps = steps
    config.train.eval_every = config.train.checkpoint_every = per_epoch
    config.optim.warmup_steps = min(config.optim.warmup_steps, steps // 10)
    notes.append(f"train.num_steps={steps} ({epochs(steps):.3g} epochs of {len(train)} "
                 f"examples, batch {d.batch_size}; evaluated every {per_epoch} steps, "
                 f"{epochs(per_epoch):.3g} epochs; from train.num_epochs="
                 f"{config.train.num_epochs:g}, the config's num_steps={given} counts only "
                 "with train.num_epochs=0)")
  if notes:
    logging.warning("Prepared from the training data: %s", "; ".join(notes))
  return config

