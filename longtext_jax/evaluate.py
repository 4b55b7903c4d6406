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
from __future__ import annotations

if __name__ == "__main__":  # First, before JAX loads (glibc reads it at process start).
  from longtext_jax import hostenv  # pylint: disable=g-import-not-at-top
  hostenv.reexec_with_hugepages(__file__)

import json
from typing import Any, Sequence

from absl import flags
import numpy as np

from longtext_jax import data as data_lib
from longtext_jax import fileio
from longtext_jax import inference
from longtext_jax import predict as predict_cli

FLAGS = flags.FlagValues()
predict_cli.define_run_flags(FLAGS, "Labelled file or folder (default: the run's eval split).",
                             __name__)
flags.DEFINE_string("output", None, "Also write the JSON result to this file.",
                    flag_values=FLAGS)
flags.DEFINE_string("label_field", None, "Field of the label (default: the run's).",
                    flag_values=FLAGS)
flags.mark_flags_as_required(["workdir"], flag_values=FLAGS)


def evaluate_input(p: inference.Predictor, path: str | None, **fields: Any
                   ) -> tuple[dict[str, Any], list[dict[str, np.ndarray]]]:
  """The evaluation of ``path`` (None: the run's eval split, rebuilt from its config).

  Returns:
    (the result of :meth:`Predictor.evaluate` plus ``'input'``, the encoded examples).
  """
  truncated = None
  if path:  # Encoded here (not p.evaluate(path)): --embed reuses the examples.
    examples, truncated = p.encode_labelled(path, **fields)
  else:
    source = data_lib.build_splits(p.config, p.task)["eval"]
    examples = [source[i] for i in range(len(source))]
  result = p.evaluate(examples)
  if truncated is not None:  # As p.evaluate(path) reports it (before: left out).
    result["truncated"] = truncated
  result["input"] = path or "the run's eval split"
  return result, examples


def main(argv: Sequence[str]) -> int:
  """Runs the command line ``argv`` (argv[0] is the program name); returns the exit code."""
  f = predict_cli.parse_flags(FLAGS, argv)
  predict_cli.check_writable("output", f.output)
  predict_cli.check_writable("embed", f.embed)
  p = inference.load(f.workdir, f.step, batch_size=f.batch_size,
                     tokenizer_path=f.tokenizer_path, progress=f.progress,
                     stream_chunk=f.stream_chunk)
  result, examples = evaluate_input(
      p, f.input, format=f.format, text_field=f.text_field,
      text_pair_field=f.text_pair_field, label_field=f.label_field, columns=f.columns)
  print(inference.format_report(result))
  line = json.dumps(inference.jsonable(result), ensure_ascii=False)
  print(line)
  if f.output:
    fileio.write_text_atomic(f.output, line + "\n")
  if f.embed:
    predict_cli.save_npy_atomic(f.embed, p.embed(examples=examples))
  return 0


if __name__ == "__main__":
  predict_cli.run_cli(main, FLAGS)
