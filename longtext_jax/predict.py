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

The flags live in this module's own ``FLAGS`` (not absl's global registry), so tests and
notebooks can call :func:`main` with an argv list in-process.
"""
from __future__ import annotations

if __name__ == "__main__":  # First, before JAX loads (glibc reads it at process start).
  from longtext_jax import hostenv  # pylint: disable=g-import-not-at-top
  hostenv.reexec_with_hugepages(__file__)

import io
import json
import logging as std_logging
import os
import sys
from typing import Sequence

from absl import flags
from absl import logging
import numpy as np

from longtext_jax import fileio
from longtext_jax import inference

def define_run_flags(flag_values: flags.FlagValues, input_help: str, module_name: str
                     ) -> None:
  """The flags that ``predict`` and ``evaluate`` share: the run, the input and its fields.

  Args:
    flag_values: the command's own FlagValues.
    input_help: the help of ``--input``.
    module_name: the command's ``__name__`` (its usage message lists these flags).
  """
  if module_name == "__main__":  # absl files a program's own flags under its argv[0].
    module_name = sys.argv[0]
  fv = {"flag_values": flag_values, "module_name": module_name}
  flags.DEFINE_string("workdir", None, "A run directory or an export folder.", **fv)
  flags.DEFINE_string("input", None, input_help, **fv)
  flags.DEFINE_integer("step", None, "Checkpoint step (default: best, else latest).", **fv)
  flags.DEFINE_integer("batch_size", None, "Rows per batch (default: "
                       "config.data.eval_batch_size).", **fv)
  flags.DEFINE_string("embed", None, "Also write document vectors to this .npy file.", **fv)
  flags.DEFINE_string("tokenizer_path", None, "The tokenizer, if it moved.", **fv)
  flags.DEFINE_string("format", None, "jsonl|csv|tsv|text_dir|conll|conllu (default: from the "
                      "extension; a plain text file of one document per line: --input=- from "
                      "standard input).", **fv)
  flags.DEFINE_string("text_field", None, "Field of the text (default: the run's).", **fv)
  flags.DEFINE_string("text_pair_field", None, "Field of the second text of a pair.", **fv)
  flags.DEFINE_list("columns", None, "Column names of a headerless CSV/TSV.", **fv)
  flags.DEFINE_bool("progress", None, "Progress bar (default: on long inputs).", **fv)
  flags.DEFINE_integer("stream_chunk", None, "RAN: stream documents longer than this many "
                       "tokens through the encoder in chunks of this many (default 8192 "
                       "rounded to the window; 0: never).", **fv)


HELP_ARGS = ("-h", "--help", "-help", "--helpshort", "--helpfull", "-?")


class UsageRequested(Exception):
  """``--help`` (or ``-h``) was given: the caller prints the usage and exits 0."""


def parse_flags(flag_values: flags.FlagValues, argv: Sequence[str]) -> flags.FlagValues:
  """Parses ``argv`` (argv[0] is the program name) into ``flag_values`` from the defaults
  (a second in-process call does not inherit the first one's flags).

  Raises:
    UsageRequested: one of :data:`HELP_ARGS` was given.
    flags.Error: a bad, missing or unexpected argument.
  """
  if any(a in HELP_ARGS for a in argv[1:]):
    raise UsageRequested()
  flag_values.unparse_flags()
  rest = flag_values(list(argv))
  if len(rest) > 1:
    raise flags.Error(f"unexpected arguments: {rest[1:]}")
  return flag_values


def check_writable(flag: str, path: str) -> None:
  """Fails at once, naming ``--flag``, when ``path`` cannot be written (a folder, or a file in
  a folder that does not exist or is not writable): before the model loads and predicts."""
  if not path or path == "-":
    return
  folder = os.path.dirname(os.path.abspath(path))
  if os.path.isdir(path):
    raise ValueError(f"--{flag}={path}: is a folder; give a file name")
  if not os.path.isdir(folder):
    raise ValueError(f"--{flag}={path}: the folder {folder} does not exist")
  if not os.access(folder, os.W_OK):
    raise ValueError(f"--{flag}={path}: the folder {folder} is not writable")


def save_npy_atomic(path: str, array: np.ndarray) -> str:
  """``np.save`` through :func:`longtext_jax.fileio.write_bytes_atomic` (adding ``.npy`` as
  ``np.save`` does); returns the path written."""
  path = path if path.endswith(".npy") else path + ".npy"
  buffer = io.BytesIO()
  np.save(buffer, np.asarray(array))
  fileio.write_bytes_atomic(path, buffer.getvalue())
  return path


FLAGS = flags.FlagValues()
define_run_flags(FLAGS, "File or folder of documents; '-' = stdin lines.", __name__)
flags.DEFINE_string("output", "-", "JSONL file for the predictions ('-': stdout).",
                    flag_values=FLAGS)
flags.DEFINE_integer("max_tokens", None, "Tokens kept per document (default: "
                     "config.data.max_tokens; 0: whole, up to the model's limit).",
                     flag_values=FLAGS)
flags.mark_flags_as_required(["workdir", "input"], flag_values=FLAGS)


def named_probabilities(pred: dict, names) -> dict:
  """``probabilities`` as {label name: probability} when the run has label names."""
  probs = pred.get("probabilities")
  if names is not None and probs is not None and len(probs) == len(names):
    pred = dict(pred, probabilities={str(n): float(p) for n, p in zip(names, probs)})
  return pred


def main(argv: Sequence[str]) -> int:
  """Runs the command line ``argv`` (argv[0] is the program name); returns the exit code.

  Raises:
    flags.Error: a bad or missing flag.
    ValueError, FileNotFoundError: bad input (naming the file:line or field).
  """
  f = parse_flags(FLAGS, argv)
  check_writable("output", f.output)
  check_writable("embed", f.embed)
  p = inference.load(f.workdir, f.step, batch_size=f.batch_size, max_tokens=f.max_tokens,
                     tokenizer_path=f.tokenizer_path, progress=f.progress,
                     stream_chunk=f.stream_chunk)
  fields = {"format": f.format, "text_field": f.text_field,
            "text_pair_field": f.text_pair_field, "columns": f.columns}
  records, where = p.read(f.input, labelled=False, **fields)
  texts = [r["text"] for r in records]
  pairs = [r["text_pair"] for r in records] if "text_pair" in records[0] else None
  # A CoNLL file's words as the file splits them (a word may hold a no-break space).
  docs = ([r.get("words", r["text"]) for r in records] if p.task.label_layout == "tags"
          else texts)
  preds = p.predict(docs, pairs)
  names = p.label_names if p.task.label_layout in ("label", "multi_hot") else None
  lines = [json.dumps({"where": w, **inference.jsonable(named_probabilities(pred, names))},
                      ensure_ascii=False) + "\n" for w, pred in zip(where, preds)]
  if f.output == "-":
    # A line per write: one large write to an unbuffered stdout (python -u) can be cut
    # short silently when the pipe fills; each small one completes or raises BrokenPipeError.
    for line in lines:
      sys.stdout.write(line)
  else:  # Whole or not at all: a killed run leaves no cut file that looks complete.
    fileio.write_text_atomic(f.output, "".join(lines))
  if f.embed:
    save_npy_atomic(f.embed, p.embed(texts))
  if f.output != "-":
    print(f"{len(preds)} predictions (step {p.step}) -> {f.output}", file=sys.stderr)
  return 0


def usage(flag_values: flags.FlagValues) -> str:
  """The command's flags and their help (absl files a program's flags under its argv[0]; a
  command run another way, e.g. in-process, still gets every flag of its FlagValues)."""
  return flag_values.main_module_help() or flag_values.get_help()


class _OwnWarningsOnly(std_logging.Filter):
  """Passes this package's warnings and everyone's errors (Orbax and JAX log a lot at
  INFO/WARNING that a command-line user cannot act on; our warnings they can)."""

  def filter(self, record: std_logging.LogRecord) -> bool:
    if record.levelno >= std_logging.ERROR:
      return True
    return (record.levelno >= std_logging.WARNING
            and os.path.abspath(record.pathname).startswith(_PACKAGE_DIR))


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def quiet_other_libraries() -> None:
  """The commands' logging: warnings of longtext_jax itself (a document cut, a killed
  export's folder removed, ...) and errors of any library; nothing else."""
  logging.set_verbosity(logging.WARNING)
  absl_logger = logging.get_absl_logger()  # Ours and Orbax's messages go through it.
  if not any(isinstance(f, _OwnWarningsOnly) for f in absl_logger.filters):
    absl_logger.addFilter(_OwnWarningsOnly())
  std_logging.getLogger("jax").setLevel(std_logging.ERROR)


def run_cli(main_fn, flag_values: flags.FlagValues) -> None:
  """Runs ``main_fn(sys.argv)`` as a program: ``--help`` prints the usage to stdout (exit
  0), flag errors print the usage (exit 2), input errors print one line naming the problem
  (exit 1), Ctrl-C one line (exit 130), no traceback."""
  quiet_other_libraries()
  try:
    code = main_fn(sys.argv)
  except UsageRequested:
    print(usage(flag_values))
    code = 0
  except flags.Error as e:
    print(f"error: {e}\n\n{usage(flag_values)}", file=sys.stderr)
    code = 2
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    code = 1
  except BrokenPipeError:  # The reader went away (`... | head`): stop quietly, as Unix tools.
    # Python flushes stdout again at exit; point it at /dev/null so that raises nothing.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    code = 1
  except KeyboardInterrupt:  # Ctrl-C: one line, the shell's status for an interrupt.
    if os.environ.get("LONGTEXT_JAX_TRACEBACK"):
      raise
    print("Interrupted (Ctrl-C).", file=sys.stderr)
    code = 130
  sys.exit(code)


if __name__ == "__main__":
  run_cli(main, FLAGS)
