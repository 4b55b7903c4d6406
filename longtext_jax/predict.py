"""Command line: predictions of a trained run for new documents, one JSON line each.

  python -m longtext_jax.predict --workdir=runs/x --input=docs.jsonl --output=preds.jsonl
  cat docs.txt | python -m longtext_jax.predict --workdir=runs/x --input=-   # one per line
  python -m longtext_jax.predict --workdir=exported/ --input=folder/ --embed=vectors.npy

``--input`` is read as the run's training loader reads its files (JSONL, CSV, TSV, a folder
of ``*.txt`` documents, a CoNLL file; the field flags override the run's ``config.data``
fields), or '-' for standard input, one document per line. Each output line holds
``where`` (``file:line``) and the prediction (see ``longtext_jax.inference.Predictor.predict``);
probabilities are keyed by label name when the run has names. ``--embed`` also writes the
documents' vectors (float32[N, D], in input order) to a ``.npy`` file.
"""
import json
import sys

from absl import app
from absl import flags
from absl import logging
import numpy as np

from longtext_jax import inference

_WORKDIR = flags.DEFINE_string("workdir", None, "A run directory or an export folder.")
_INPUT = flags.DEFINE_string("input", None, "File or folder of documents; '-' = stdin lines.")
_OUTPUT = flags.DEFINE_string("output", "-", "JSONL file for the predictions ('-': stdout).")
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: best, else latest).")
_BATCH = flags.DEFINE_integer("batch_size", None, "Rows per batch (default: "
                              "config.data.eval_batch_size).")
_MAX_TOKENS = flags.DEFINE_integer("max_tokens", None, "Tokens kept per document (default: "
                                   "config.data.max_tokens; 0: whole, up to the model's "
                                   "limit).")
_EMBED = flags.DEFINE_string("embed", None, "Also write document vectors to this .npy file.")
_TOKENIZER = flags.DEFINE_string("tokenizer_path", None, "The tokenizer, if it moved.")
_FORMAT = flags.DEFINE_string("format", None, "jsonl|csv|tsv|text_dir|conll (default: from "
                              "the extension).")
_TEXT = flags.DEFINE_string("text_field", None, "Field of the text (default: the run's).")
_PAIR = flags.DEFINE_string("text_pair_field", None, "Field of the second text of a pair.")
_COLUMNS = flags.DEFINE_list("columns", None, "Column names of a headerless CSV/TSV.")
flags.mark_flags_as_required(["workdir", "input"])


def field_overrides(**extra) -> dict:
  """The field flags that were given, as ``read_records`` overrides."""
  out = {"format": _FORMAT.value, "text_field": _TEXT.value,
         "text_pair_field": _PAIR.value, "columns": _COLUMNS.value}
  out.update(extra)
  return {k: v for k, v in out.items() if v is not None}


def named_probabilities(pred: dict, names) -> dict:
  """``probabilities`` as {label name: probability} when the run has label names."""
  probs = pred.get("probabilities")
  if names is not None and probs is not None and len(probs) == len(names):
    pred = dict(pred, probabilities={str(n): float(p) for n, p in zip(names, probs)})
  return pred


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  p = inference.load(_WORKDIR.value, _STEP.value, batch_size=_BATCH.value,
                     max_tokens=_MAX_TOKENS.value, tokenizer_path=_TOKENIZER.value)
  records, where = p.read(_INPUT.value, labelled=False, **field_overrides())
  texts = [r["text"] for r in records]
  pairs = [r["text_pair"] for r in records] if "text_pair" in records[0] else None
  preds = p.predict(texts, pairs)
  names = p.label_names if p.task.label_layout in ("label", "multi_hot") else None
  out = sys.stdout if _OUTPUT.value == "-" else open(_OUTPUT.value, "w", encoding="utf-8")
  try:
    for w, pred in zip(where, preds):
      row = {"where": w, **inference.jsonable(named_probabilities(pred, names))}
      out.write(json.dumps(row, ensure_ascii=False) + "\n")
  finally:
    if out is not sys.stdout:
      out.close()
  if _EMBED.value:
    np.save(_EMBED.value, p.embed(texts))
  if _OUTPUT.value != "-":
    print(f"{len(preds)} predictions (step {p.step}) -> {_OUTPUT.value}", file=sys.stderr)


if __name__ == "__main__":
  app.run(main)
