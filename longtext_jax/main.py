"""Command line: trains a config in a workdir. Intentionally thin: it validates the config
(``longtext_jax.config.validate``) and calls the trainer. The config files import the
``configs`` package: a config file under a ``configs/`` package folder is read from any
working directory (that folder's parent goes on ``sys.path``).

  python -m longtext_jax.main --config=configs/masked_summation.py:transformer \
      --workdir=runs/msum --config.train.num_steps=500

SIGTERM stops a run cleanly at any time, exit status 0: before the trainer starts (while
JAX loads) nothing is written yet and the process just exits; from then on the trainer saves
the current step and exits (``longtext_jax.train.loop``). Ctrl-C (SIGINT) in the trainer does
the same, then exits 130 (interrupted); a second Ctrl-C stops at once, without that save.
"""
import errno
import os
import signal
import sys

if __name__ == "__main__":  # First, before JAX loads (glibc reads it at process start).
  from longtext_jax import hostenv  # pylint: disable=g-import-not-at-top
  hostenv.reexec_with_hugepages(__file__)


_TRAINER_STARTED = False
_MAIN_STARTED = False  # Set once the flags (and so the config file) have been read.


def _sigterm(signum, frame):
  """Exit 0: before the trainer (nothing written yet), or when the trainer passes its SIGTERM
  on as it returns (it has saved and reported by then)."""
  del signum, frame
  if not _TRAINER_STARTED:
    print("SIGTERM before training started: nothing to save; exiting.", file=sys.stderr)
  sys.exit(0)


# Installed before the slow imports; the trainer replaces it with its own while it runs.
signal.signal(signal.SIGTERM, _sigterm)

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import logging
from absl import flags
from ml_collections import config_flags

from longtext_jax import config as config_lib
from longtext_jax import tasks
from longtext_jax import train
from longtext_jax.train import distributed
from longtext_jax.train import prepare
from longtext_jax.train import workdir_lock

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file (path[:arg]).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints and logs go.")
flags.mark_flags_as_required(["config", "workdir"])


def given_overrides(names) -> list[str]:
  """The config fields of ``names`` that the command line sets (``--config.<name>=v`` in
  any of absl's spellings, a ``--flagfile`` included: ml_collections' record of them)."""
  given = config_flags.get_override_values(flags.FLAGS["config"])
  return [n for n in names if n in given]


def main(argv):
  """The CLI entry point: validates ``--config`` and calls ``train_and_evaluate``."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:  # Orbax logs every file at INFO.
    logging.set_verbosity(logging.WARNING)
  config = _CONFIG.value
  given = given_overrides(prepare.EPOCH_SET_FIELDS)
  if config.train.num_epochs > 0 and given:  # Would be replaced without a word.
    raise ValueError(
        f"{', '.join('--config.' + g for g in given)}: not used while "
        f"train.num_epochs={config.train.num_epochs:g} sets the run's steps, evaluations and "
        "checkpoints from the training set's size; add --config.train.num_epochs=0 to count "
        "steps yourself")
  task = tasks.get_task(config.task)
  # Until every Task lists metric_names (issue 14 item 1), best_metric is checked where it can.
  config_lib.validate(config, task if hasattr(task, "metric_names") else None)
  global _MAIN_STARTED  # The config loaded and is valid: what fails now is the run's.
  _MAIN_STARTED = True
  distributed.initialize(config.distributed)
  global _TRAINER_STARTED
  _TRAINER_STARTED = True
  try:
    train.train_and_evaluate(config, _WORKDIR.value)
  except workdir_lock.WorkdirLockedError as e:  # No traceback: the message says it all.
    sys.exit(f"WorkdirLockedError: {e}")


_HELP_FLAGS = frozenset({"--help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml"})
_OWN_DIRS = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               d) + os.sep for d in ("longtext_jax", "configs"))
_USER_ERRORS = (ValueError, KeyError, FileNotFoundError, NotADirectoryError,
                IsADirectoryError, PermissionError)


def _failing_override(e: BaseException) -> str | None:
  """The dotted path of the ``--config.`` override that ``e`` was raised for, as
  ml_collections' flag parser held it (its ``config_path`` / ``field_path``), or None."""
  path, tb = None, e.__traceback__
  while tb is not None:
    frame = tb.tb_frame
    if "ml_collections" in frame.f_code.co_filename:
      for name in ("config_path", "field_path"):
        value = frame.f_locals.get(name)
        if isinstance(value, str) and value:
          path = value
    tb = tb.tb_next
  return path


def user_error_message(e: BaseException, config_read: bool) -> str | None:
  """The one line to print instead of a traceback, or None (keep the traceback).

  A mistake in the command (a config file or override that does not load, before main) or
  an error that longtext_jax or a config file raised on purpose (its message names the
  field, file and line) is one line; an error raised inside another library once the run
  started is most likely a bug, and keeps its traceback."""
  if not isinstance(e, Exception):
    return None
  if isinstance(e, ModuleNotFoundError) and e.name in ("configs", "longtext_jax"):
    return (f"{e}: the config file imports the 'configs' package, and it is neither in "
            "a configs/ package folder nor importable from here (run from the repository "
            "root, or pass the config by its path there)")
  message = e.args[0] if isinstance(e, (KeyError, AttributeError)) and e.args else str(e)
  while isinstance(message, BaseException):  # ml_collections wraps a KeyError's text.
    message = message.args[0] if message.args else ""
  if not config_read:
    if isinstance(e, OSError) and not os.path.isdir("configs"):
      message = f"{message}\n(no configs/ folder here: run from the repository root)"
    path = _failing_override(e) if isinstance(e, (AttributeError, KeyError)) else None
    if path:  # A misspelt override: name its flag.
      message = f"--config.{path}: no such config field {message}"
    return f"{type(e).__name__}: {message}"
  tb = e.__traceback__
  while tb is not None and tb.tb_next is not None:
    tb = tb.tb_next
  raised_here = tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(
      _OWN_DIRS)
  own_kind = type(e).__name__ in ("AllCheckpointsDamagedError", "CheckpointDamagedError",
                                  "CheckpointSaveError", "NonFiniteLossError")
  # A read-only or full file system, wherever found: the message names the path and why.
  full_or_read_only = isinstance(e, OSError) and e.errno in (errno.EROFS, errno.ENOSPC,
                                                             errno.EDQUOT)
  if (isinstance(e, _USER_ERRORS) and raised_here) or own_kind or full_or_read_only:
    return f"{type(e).__name__}: {message}"
  return None


def _parse_flags(argv):
  """absl's flag parsing, with a config file's error as one line: ml_collections puts the
  file's traceback into the flag error, which absl prints whole."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    text = str(e)
    marker = "Traceback (most recent call last):"
    if marker in text and not os.environ.get("LONGTEXT_JAX_TRACEBACK"):
      head, _, tail = text.partition(marker)
      text = head.rstrip() + " " + [l for l in tail.splitlines() if l.strip()][-1].strip()
    sys.stderr.write(f"FATAL Flags parsing error: {text}\n"
                     "Pass --helpshort or --helpfull to see help on flags.\n")
    sys.exit(1)


if __name__ == "__main__":
  _root = config_lib.config_package_root(sys.argv)
  if _root and _root not in sys.path:  # --config=/elsewhere/configs/x.py from any folder.
    sys.path.insert(0, _root)
  try:
    app.run(main, flags_parser=_parse_flags)
  except SystemExit as e:  # absl exits 1 after printing the help: asking for it is no error.
    if e.code == 1 and _HELP_FLAGS & set(sys.argv[1:]):
      sys.exit(0)
    raise
  except KeyboardInterrupt:  # Ctrl-C: the trainer has said what it saved (one Ctrl-C).
    if os.environ.get("LONGTEXT_JAX_TRACEBACK"):
      raise
    print("Interrupted (Ctrl-C); relaunch the same command to resume from the last "
          "checkpoint.", file=sys.stderr)
    sys.exit(130)
  except Exception as e:  # pylint: disable=broad-except
    line = (None if os.environ.get("LONGTEXT_JAX_TRACEBACK") else
            user_error_message(e, _MAIN_STARTED))
    if line is None:
      raise
    print(f"error: {line}\n(the traceback: rerun with LONGTEXT_JAX_TRACEBACK=1)",
          file=sys.stderr)
    sys.exit(1)
