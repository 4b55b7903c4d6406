"""LRA ListOps at one matched budget: RAN vs Transformer vs Star-Transformer vs S-LSTM.

Every model is ``configs/listops.py:<model>[,reduced]`` (width 128, the same generated data,
batch, steps, optimiser and schedule), trained by the trainer with the best dev checkpoint
kept, then tested on a fresh test split (experiments/study_lib.py). The LRA paper's
Transformer scores 36.4% (Tay et al. 2021, Table 1); the RAN paper's goal is >= 40%.

Resumable: every run lives in ``<workdir>/<model>_s<seed>`` and is skipped once it has its
result.json; an interrupted run continues from its latest checkpoint.

  python experiments/listops_study.py --full        # LRA sizes: 500-2,000 tokens, 96k, 5k steps
  python experiments/listops_study.py --reduced     # the CPU budget of docs/reproduction.md
  python experiments/listops_study.py --tiny   # seconds (tests; runs/listops_tiny/)
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":  # Before JAX loads: huge pages for XLA's CPU buffers.
  from longtext_jax import hostenv  # noqa: E402  pylint: disable=g-import-not-at-top
  hostenv.reexec_with_hugepages(__file__)
from configs import listops as listops_config  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax import fileio  # noqa: E402  pylint: disable=wrong-import-position
import study_lib  # noqa: E402  pylint: disable=wrong-import-position

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
LRA_TRANSFORMER = 0.364  # LRA paper, Table 1 (ListOps, Transformer).


def run_config(model: str, seed: int, size: str):
  """configs/listops.py:<model>[,<size>] with ``seed`` (size: 'full', 'reduced', 'tiny')."""
  c = listops_config.get_config(model + ("" if size == "full" else f",{size}"))
  c.seed = seed
  c.train.progress_bar = False
  return c


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  size = parser.add_mutually_exclusive_group(required=True)
  size.add_argument("--full", action="store_const", dest="size", const="full")
  size.add_argument("--reduced", action="store_const", dest="size", const="reduced")
  size.add_argument("--tiny", action="store_const", dest="size", const="tiny")
  parser.add_argument("--models", default=",".join(listops_config.STUDY_MODELS))
  parser.add_argument("--seeds", default="0")
  parser.add_argument("--num_test", type=int, default=2000)
  parser.add_argument("--steps", type=int, default=0,
                      help="override train.num_steps (0: the config's)")
  checkpoints_flag = study_lib.add_checkpoints_flag(parser)
  parser.add_argument("--workdir", default=None,
                      help="run folders (default runs/listops; with --tiny runs/listops_tiny)")
  parser.add_argument("--out", default=None,
                      help="results file (default docs/reproduction/listops.json; with "
                           "--tiny runs/listops_tiny/listops.json: a tiny run never writes "
                           "into the docs unless told to)")
  args = parser.parse_args(argv)
  home = os.path.join(ROOT, "runs", "listops_tiny") if args.size == "tiny" else None
  args.workdir = args.workdir or home or os.path.join(ROOT, "runs", "listops")
  args.out = args.out or (os.path.join(home, "listops.json") if home else
                          os.path.join(ROOT, "docs", "reproduction", "listops.json"))
  models = args.models.split(",")
  unknown = set(models) - set(listops_config.STUDY_MODELS)
  if unknown:
    parser.error(f"--models: unknown {sorted(unknown)}; choose from "
                 f"{list(listops_config.STUDY_MODELS)}")
  command = "python experiments/listops_study.py " + " ".join(
      sys.argv[1:] if argv is None else argv)
  rows = []
  for seed in [int(s) for s in args.seeds.split(",")]:
    for model in models:
      config = run_config(model, seed, args.size)
      if args.steps:
        config.train.num_steps = args.steps
      study_lib.set_checkpoint_every(parser, config, args, checkpoints_flag)
      workdir = os.path.join(args.workdir, f"{args.size}_{model}_s{seed}")
      result = study_lib.train_and_test(config, workdir, patience=0,
                                        num_test=16 if args.size == "tiny" else args.num_test,
                                        command=command)
      rows.append({"model": model, "seed": seed, "size": args.size, **result})
      print(json.dumps({"model": model, "seed": seed, "test": result["test"],
                        "wall_s": round(result["wall_s"])}), flush=True)
      write_rows(args.out, rows, command)
  return rows


def write_rows(path: str, rows: list[dict], command: str) -> None:
  """Writes ``rows`` into the results file ``path``, keeping its rows of other (model, seed,
  size) runs (``study_lib.merge_results``); each row keeps the ``command`` that finished
  it, the file's own ``command`` is the latest call's."""
  order = {m: i for i, m in enumerate(listops_config.STUDY_MODELS)}
  merged = study_lib.merge_results(
      path, rows, ("model", "seed", "size"),
      order=lambda r: (str(r.get("size")), order.get(r["model"], 99), r["seed"]))
  fileio.write_json_atomic(path, {"command": command, "lra_transformer": LRA_TRANSFORMER,
                              "runs": merged})


if __name__ == "__main__":
  main()
