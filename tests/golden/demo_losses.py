"""The golden losses of the demo config (configs/default.py): its first 20 training losses.

The demo's model and data (RAN on 4096 generated documents, seed 0), trained for 20 steps
instead of 600 (so the learning-rate schedule is that of a 20-step run) with the loss
logged every step and a 32-document eval split (the eval split does not change training).

Regenerate (after a change that is meant to change results, say why in the commit):

  python tests/golden/demo_losses.py          # writes tests/golden/demo_losses.json
"""
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GOLDEN = os.path.join(HERE, "demo_losses.json")
COMMAND = "python tests/golden/demo_losses.py"
NUM_STEPS = 20
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]  # This checkout's longtext_jax, conftest.


def demo_config():
  """configs/default.py, shortened to NUM_STEPS logged steps."""
  from conftest import load_config  # pylint: disable=import-outside-toplevel
  config = load_config("default.py")
  config.train.num_steps = NUM_STEPS
  config.train.log_every = 1
  config.train.eval_every = config.train.checkpoint_every = NUM_STEPS
  config.train.progress_bar = False
  config.train.async_checkpoint = False
  config.data.num_eval = 32
  return config


def compute(workdir: str) -> list[float]:
  """Trains the shortened demo in ``workdir``; returns its NUM_STEPS training losses."""
  from longtext_jax import train  # pylint: disable=import-outside-toplevel
  train.train_and_evaluate(demo_config(), workdir)
  return read_losses(workdir)


def read_losses(workdir: str) -> list[float]:
  """The training losses a finished run in ``workdir`` logged."""
  with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
    rows = [json.loads(line) for line in f]
  return [r["loss"] for r in rows if r["split"] == "train"]


def main():
  """Writes GOLDEN with the losses, the command and the versions that produced them."""
  import jax  # pylint: disable=import-outside-toplevel
  with tempfile.TemporaryDirectory() as workdir:
    losses = compute(workdir)
  with open(GOLDEN, "w") as f:
    json.dump({"command": COMMAND, "config": "configs/default.py (num_steps=20, log_every=1, "
               "num_eval=32)", "jax": jax.__version__, "backend": jax.default_backend(),
               "losses": losses}, f, indent=1)
    f.write("\n")
  print(f"wrote {GOLDEN}: {losses}")


if __name__ == "__main__":
  main()
