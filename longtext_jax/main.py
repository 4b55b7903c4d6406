"""Command line: trains a config in a workdir. Intentionally thin: it validates the config
(``longtext_jax.config.validate``) and calls the trainer. Run it from the repository root
(the config files import the ``configs`` package).

  python -m longtext_jax.main --config=configs/masked_summation.py:transformer \
      --workdir=runs/msum --config.train.num_steps=500

SIGTERM stops a run cleanly at any time, exit status 0: before the trainer starts (while
JAX loads) nothing is written yet and the process just exits; from then on the trainer saves
the current step and exits (``longtext_jax.train.loop``).
"""
import signal
import sys

if __name__ == "__main__":  # First, before JAX loads (glibc reads it at process start).
  from longtext_jax import hostenv  # pylint: disable=g-import-not-at-top
  hostenv.reexec_with_hugepages(__file__)


_TRAINER_STARTED = False


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
from longtext_jax.train import workdir_lock

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Experiment config file (path[:arg]).", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints and logs go.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  """The CLI entry point: validates ``--config`` and calls ``train_and_evaluate``."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:  # Orbax logs every file at INFO.
    logging.set_verbosity(logging.WARNING)
  config = _CONFIG.value
  task = tasks.get_task(config.task)
  # Until every Task lists metric_names (issue 14 item 1), best_metric is checked where it can.
  config_lib.validate(config, task if hasattr(task, "metric_names") else None)
  distributed.initialize(config.distributed)
  global _TRAINER_STARTED
  _TRAINER_STARTED = True
  try:
    train.train_and_evaluate(config, _WORKDIR.value)
  except workdir_lock.WorkdirLockedError as e:  # No traceback: the message says it all.
    sys.exit(f"WorkdirLockedError: {e}")


_HELP_FLAGS = frozenset({"--help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml"})

if __name__ == "__main__":
  try:
    app.run(main)
  except SystemExit as e:  # absl exits 1 after printing the help: asking for it is no error.
    if e.code == 1 and _HELP_FLAGS & set(sys.argv[1:]):
      sys.exit(0)
    raise
