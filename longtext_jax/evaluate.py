"""Command line: a trained run's metrics on labelled data, as a table and as JSON.

  python -m longtext_jax.evaluate --workdir=runs/x --input=test.jsonl
  python -m longtext_jax.evaluate --workdir=runs/x               # the run's own eval split
  python -m longtext_jax.evaluate --workdir=runs/x --input=test.jsonl --output=test.json \
      --embed=test_vectors.npy

Prints the task's metrics (the numbers the trainer reports) and, for single-label
classification, per-class precision / recall / F1 and the confusion matrix (multi-label:
per class), then one JSON line with all of it (also written to ``--output``). ``--input``
is read as the run's training loader reads its files; without it the run's eval split is
rebuilt from its config (the training data must then be present).
"""
import json

from absl import app
from absl import flags
from absl import logging
import numpy as np

from longtext_jax import data as data_lib
from longtext_jax import inference

_WORKDIR = flags.DEFINE_string("workdir", None, "A run directory or an export folder.")
_INPUT = flags.DEFINE_string("input", None, "Labelled file or folder (default: the run's "
                             "eval split).")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the JSON result to this file.")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: best, else latest).")
_BATCH = flags.DEFINE_integer("batch_size", None, "Rows per batch.")
_EMBED = flags.DEFINE_string("embed", None, "Also write document vectors to this .npy file.")
_TOKENIZER = flags.DEFINE_string("tokenizer_path", None, "The tokenizer, if it moved.")
_FORMAT = flags.DEFINE_string("format", None, "jsonl|csv|tsv|text_dir|conll.")
_TEXT = flags.DEFINE_string("text_field", None, "Field of the text (default: the run's).")
_PAIR = flags.DEFINE_string("text_pair_field", None, "Field of the second text of a pair.")
_LABEL = flags.DEFINE_string("label_field", None, "Field of the label (default: the run's).")
_COLUMNS = flags.DEFINE_list("columns", None, "Column names of a headerless CSV/TSV.")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  p = inference.load(_WORKDIR.value, _STEP.value, batch_size=_BATCH.value,
                     tokenizer_path=_TOKENIZER.value)
  if _INPUT.value:
    fields = {"format": _FORMAT.value, "text_field": _TEXT.value,
              "text_pair_field": _PAIR.value, "label_field": _LABEL.value,
              "columns": _COLUMNS.value}
    records, _ = p.read(_INPUT.value, labelled=True, **fields)
    encoder = p._text_encoder(p.task.label_layout)  # pylint: disable=protected-access
    examples = [encoder(r) for r in records]
  else:
    source = data_lib.build_splits(p.config, p.task)["eval"]
    examples = [source[i] for i in range(len(source))]
  result = p.evaluate(examples)
  result["input"] = _INPUT.value or "the run's eval split"
  print(inference.format_report(result))
  line = json.dumps(inference.jsonable(result), ensure_ascii=False)
  print(line)
  if _OUTPUT.value:
    with open(_OUTPUT.value, "w", encoding="utf-8") as f:
      f.write(line + "\n")
  if _EMBED.value:
    np.save(_EMBED.value, p.embed(examples=examples))


if __name__ == "__main__":
  app.run(main)
