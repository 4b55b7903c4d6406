"""LRA ListOps at one matched budget: RAN vs Transformer vs Star-Transformer vs S-LSTM.

Every model is ``configs/listops.py:<model>[,reduced]`` (width 128, the same generated data,
batch, steps, optimiser and schedule), trained by the trainer with the best dev checkpoint
kept, then tested on a fresh test split (experiments/study_lib.py). The LRA paper's
Transformer scores 36.4% (Tay et al. 2021, Table 1); the RAN paper's goal is >= 40%.

Resumable: every run lives in ``<workdir>/<size>_<model>_s<seed>`` and is skipped once it
has its result.json; an interrupted run continues from its latest checkpoint. Each call
merges its rows into the results file (``--out``) and, for the reduced and full sizes,
rewrites the summary table of docs/reproduction.md (``--docs``) from the merged rows.

  python experiments/listops_study.py --full        # LRA sizes: 500-2,000 tokens, 96k, 5k steps
  python experiments/listops_study.py --reduced     # the CPU budget of docs/reproduction.md
  python experiments/listops_study.py --tiny   # seconds (tests; runs/listops_tiny/)
  python experiments/listops_study.py --docs_only   # redraw the summary from --out
  python experiments/listops_study.py --reduced --models ran --pretrain_steps 3000
  python experiments/listops_study.py --reduced --models ran --curriculum_steps 2000 \
      --curriculum_mid_steps 2000
  python experiments/listops_study.py --reduced --models star --curriculum_steps 8000 \
      --curriculum_mid_steps 2000 --override model.encoder.num_cycles=6

``--pretrain_steps N`` first trains each model N steps with masked-LM on the same training
expressions, labels unread (self-pretraining: Amos et al. 2024, "Never train from scratch";
``configs/listops.py:<model>,mlm``, in ``<run>_pretrain``), then the classification run starts
from its embedding and encoder (``config.init_from``) with the same budget as the others. Its
rows carry ``pretrain_steps`` and ``pretrain`` (the masked-LM run's dev loss and minutes) and
are a row of their own in the summary: a budget N steps larger. The classification run's
``result.json`` keeps that summary too, so a finished run is read back (not pretrained again)
once ``<run>_pretrain`` is deleted.

``--curriculum_steps N`` is the same two-phase run with a classification first phase: N
steps on short expressions (8-64 tokens, ``configs/listops.py:<model>,<size>,short``, in
``<run>_short``), then the classification run starts from all of it (embedding, encoder
and head) with the same budget as the others; its rows carry ``curriculum_steps`` and
``curriculum`` (the short run's dev accuracy and minutes).

``--curriculum_mid_steps M`` (with ``--curriculum_steps N``) puts a second step between
them: M steps on 32-200-token expressions (``configs/listops.py:<model>,<size>,medium``, in
``<run>_cur<N>_mid<M>_medium``) started from all of the short run (the same
``<run>_cur<N>_short`` as the two-phase run's), and the classification run
``<run>_cur<N>_mid<M>`` starts from all of it; its rows carry ``curriculum_mid_steps`` and
``curriculum_mid`` (the middle run's summary).

``--train_min_len N`` trains the classification runs on expressions of N tokens and more
(``config.data.listops_train_min_len``: short expressions mixed into the size's long ones,
the same number of steps; dev and test unchanged), in ``<run>_min<N>``; with
``--curriculum_steps`` the run starts from the same short first phase as the run without
(``<size>_<model>_s<seed>_cur<steps>_short``). Its rows carry ``train_min_len``.

``--steps N`` (N other than the size's ``train.num_steps``) trains the classification runs N
steps (the schedule's decay stretched to N) in ``<run>_st<N>``, after every other suffix: the
run starts from the same first phases as the one with the size's steps. Its rows carry
``steps``. A step-matched control of a chain: ``--steps`` = the chain's steps in all.

``--override field=value`` (repeatable) sets a config field in every run of the call and in
each of its first phases (a change of the model is one of the whole chain), e.g.
``--models star --override model.encoder.num_cycles=6``: the runs live in
``<size>_<model>_s<seed>_<field>-<value>[...]`` (the first phases' suffixes after it: no
folder is shared with the run without), their rows carry ``overrides`` and are rows of
their own in the summary; ``listops_analysis.py`` leaves them out. A field no config has, a
value not of the field's type, or a field the study sets (``seed``, ``train.num_steps``,
``init_from``, ``data.listops_train_min_len``, ``train.checkpoint_every``: their flags) is
refused before anything trains.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":  # Before JAX loads: huge pages for XLA's CPU buffers.
  from longtext_jax import hostenv  # noqa: E402  pylint: disable=g-import-not-at-top
  hostenv.reexec_with_hugepages(__file__)
from configs import listops as listops_config  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax import config as config_lib  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax import fileio  # noqa: E402  pylint: disable=wrong-import-position
import study_lib  # noqa: E402  pylint: disable=wrong-import-position

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
LRA_TRANSFORMER = 0.364  # LRA paper, Table 1 (ListOps, Transformer).
NUM_TEST = 2000  # Fresh test expressions per run (``--num_test``; the summary's prose).
# docs/reproduction.md's table of the study at a glance (between these markers).
SUMMARY = ("<!-- listops summary: begin -->", "<!-- listops summary: end -->")
NAMES = {"transformer": "Transformer (4 layers, rotary)", "ran": "RAN (authors' encoder)",
         "star": "Star-Transformer (authors' encoder)",
         "slstm": "S-LSTM (authors' switches, 6 steps)"}
PAPER = {"transformer": f"{100 * LRA_TRANSFORMER:.1f}% (LRA)", "ran": "goal >= 40%"}
# The curriculum steps' lengths as the summary and the flags' help say them ('8-64').
LENGTHS = {step: f"{lo}-{hi}" for step, ((lo, hi), _) in
           listops_config.CURRICULUM_LENGTHS.items()}


def run_config(model: str, seed: int, size: str, mlm: bool = False, short: bool = False,
               medium: bool = False, overrides=()):
  """configs/listops.py:<model>[,<size>][,mlm][,short][,medium] with ``seed`` (size: 'full',
  'reduced', 'tiny'; mlm: the self-pretraining run; short: the curriculum's first run;
  medium: its middle one) and the 'field=value' ``overrides`` (``--override``)."""
  c = listops_config.get_config(model + ("" if size == "full" else f",{size}")
                                + (",mlm" if mlm else "") + (",short" if short else "")
                                + (",medium" if medium else ""))
  c.seed = seed
  c.train.progress_bar = False
  config_lib.apply_overrides(c, overrides, refused=REFUSED_OVERRIDES)
  return c


# Fields the study sets itself: an --override of one is refused, naming what sets it.
REFUSED_OVERRIDES = {"seed": "--seeds", "train.num_steps": "--steps (and each first phase's "
                     "flag)", "init_from": "the chain of first phases",
                     "data.listops_train_min_len": "--train_min_len",
                     "train.checkpoint_every": "--checkpoints_per_eval"}


def check_overrides(parser, args, models) -> None:
  """Refuses (``parser.error``, before anything trains) an ``--override`` that no config of
  the call takes (an unknown field, a value of the wrong type, a field the study sets) or
  whose text would not make a plain folder name."""
  for item in args.override:
    if not re.fullmatch(r"[A-Za-z0-9_.]+=[A-Za-z0-9_.+-]+", item):
      parser.error(f"--override {item!r}: expected field=value with letters, digits, '_', "
                   "'.', '+' or '-' (the value names the run's folder)")
  phases = [p["config"] for p in FIRST_PHASES.values() if getattr(args, p["flag"])]
  for model in models:
    for phase in [{}] + phases:
      try:
        run_config(model, 0, args.size, overrides=args.override, **phase)
      except ValueError as e:
        parser.error(f"{e} (configs/listops.py:{model})")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  size = parser.add_mutually_exclusive_group(required=True)
  size.add_argument("--full", action="store_const", dest="size", const="full")
  size.add_argument("--reduced", action="store_const", dest="size", const="reduced")
  size.add_argument("--tiny", action="store_const", dest="size", const="tiny")
  size.add_argument("--docs_only", action="store_const", dest="size", const="docs_only",
                    help="only rewrite --docs' summary table from --out (no training)")
  parser.add_argument("--models", default=",".join(listops_config.STUDY_MODELS))
  parser.add_argument("--seeds", default="0")
  parser.add_argument("--num_test", type=int, default=None,
                      help=f"test examples per run (default {NUM_TEST:,}; 16 with the tiny size)")
  parser.add_argument("--steps", type=int, default=0,
                      help="override the classification runs' train.num_steps (0: the config's; "
                           "a first phase trains its own flag's steps); a count other than the "
                           f"size's is a run of its own: folder suffix _{STEPS_SUFFIX}<steps>, "
                           "row key 'steps'")
  parser.add_argument("--pretrain_steps", type=int, default=0,
                      help="masked-LM steps on the training expressions before each run "
                           "(self-pretraining; 0: none, every model from scratch)")
  parser.add_argument("--curriculum_steps", type=int, default=0,
                      help=f"classification steps on short expressions ({LENGTHS['short']} "
                           "tokens) before each run, which then continues from all of that model "
                           "(a curriculum; 0: none)")
  parser.add_argument("--curriculum_mid_steps", type=int, default=0,
                      help="with --curriculum_steps: classification steps on "
                           f"{LENGTHS['medium']}-token expressions between the short run and "
                           "the long one, started from all of the short run (0: none)")
  parser.add_argument("--train_min_len", type=int, default=0,
                      help="the classification runs train on expressions of this many tokens "
                           "and more (short ones mixed in; config.data.listops_train_min_len); "
                           "dev and test keep the size's lengths (0: the size's minimum)")
  parser.add_argument("--override", action="append", default=[], metavar="FIELD=VALUE",
                      help="a config field for every run of the call and each of its first "
                           "phases (repeatable; e.g. model.encoder.num_cycles=6): a run of its "
                           "own, folder suffix _<field>-<value>, row key 'overrides'")
  checkpoints_flag = study_lib.add_checkpoints_flag(parser)
  parser.add_argument("--workdir", default=None,
                      help="run folders (default runs/listops; with --tiny runs/listops_tiny)")
  parser.add_argument("--out", default=None,
                      help="results file (default docs/reproduction/listops.json; with "
                           "--tiny runs/listops_tiny/listops.json: a tiny run never writes "
                           "into the docs unless told to)")
  parser.add_argument("--docs", default=None,
                      help="the markdown file whose summary table (between the markers "
                           f"{SUMMARY[0]!r} and {SUMMARY[1]!r}) is rewritten from --out's "
                           "rows (default docs/reproduction.md when --out is the default; "
                           "otherwise none)")
  args = parser.parse_args(argv)
  if args.num_test is None:  # Given with a tiny size too, it is used (it was ignored).
    args.num_test = 16 if args.size == "tiny" else NUM_TEST
  # The docs' table is drawn from the docs' results file only: a call writing elsewhere
  # (--out, --tiny) leaves it alone unless --docs is given.
  own_out = args.out is not None
  home = os.path.join(ROOT, "runs", "listops_tiny") if args.size == "tiny" else None
  args.workdir = args.workdir or home or os.path.join(ROOT, "runs", "listops")
  args.out = args.out or (os.path.join(home, "listops.json") if home else
                          os.path.join(ROOT, "docs", "reproduction", "listops.json"))
  if args.docs is None:
    args.docs = "" if home or own_out else os.path.join(ROOT, "docs", "reproduction.md")
  if args.size == "docs_only":
    if not args.docs:
      parser.error("--docs_only needs --docs (the markdown file to rewrite)")
    with open(args.out, encoding="utf-8") as f:
      rows = json.load(f)["runs"]
    write_summary(args.docs, rows, args.out)
    return []
  counts = VARIANT  # Each a flag of the same name.
  if any(getattr(args, flag) < 0 for flag in counts):
    parser.error(", ".join(f"--{flag}" for flag in counts) + " must be >= 0, got "
                 + ", ".join(str(getattr(args, flag)) for flag in counts))
  for phase in FIRST_PHASES.values():
    after = phase.get("after")
    if after and getattr(args, phase["flag"]) and not getattr(args, FIRST_PHASES[after]["flag"]):
      parser.error(f"--{phase['flag']} is a step after --{FIRST_PHASES[after]['flag']}; "
                   "give both")
  if args.pretrain_steps and args.curriculum_steps:
    parser.error("--pretrain_steps and --curriculum_steps are two first phases; give one")
  models = args.models.split(",")
  unknown = set(models) - set(listops_config.STUDY_MODELS)
  if unknown:
    parser.error(f"--models: unknown {sorted(unknown)}; choose from "
                 f"{list(listops_config.STUDY_MODELS)}")
  check_overrides(parser, args, models)
  command = "python experiments/listops_study.py " + " ".join(
      sys.argv[1:] if argv is None else argv)
  rows = []
  for seed in [int(s) for s in args.seeds.split(",")]:
    for model in models:
      config = run_config(model, seed, args.size, overrides=args.override)
      steps = args.steps if args.steps != config.train.num_steps else 0
      study_lib.set_checkpoint_every(parser, config, args, checkpoints_flag)
      workdir = os.path.join(args.workdir, f"{args.size}_{model}_s{seed}"
                             + "".join(f"_{o.replace('=', '-')}" for o in args.override))
      phases = [(name, phase) for name, phase in FIRST_PHASES.items()
                if getattr(args, phase["flag"])]
      # Each first phase's folder names the phases up to it (a later step or
      # --train_min_len does not change it: a run with them starts from the same first
      # phase as one without), then the phase's own folder; the run's names them all.
      first_dirs = []
      for _, phase in phases:
        workdir += f"_{phase['suffix']}{getattr(args, phase['flag'])}"
        first_dirs.append(workdir + phase["folder"])
      extra = {"overrides": list(args.override)} if args.override else {}
      if args.train_min_len:
        if args.train_min_len > config.data.seq_len:
          parser.error(f"--train_min_len={args.train_min_len} is longer than the size's "
                       f"longest expression ({config.data.seq_len} tokens)")
        workdir += f"_{MIN_LEN_SUFFIX}{args.train_min_len}"
        config.data.listops_train_min_len = args.train_min_len
        extra["train_min_len"] = args.train_min_len
      if steps:
        # After every first phase's suffix: the run starts from the same first phases as one
        # with the size's steps, and trains (its schedule stretched or shrunk) to ``steps``.
        workdir += f"_{STEPS_SUFFIX}{steps}"
        config.train.num_steps = steps
        extra["steps"] = steps
      # Each phase starts from the one before it (a chain), the run from the last.
      for (name, phase), first_dir, before in zip(phases, first_dirs, [None] + first_dirs):
        # A finished run holds its first phases' summaries: their folders are not needed
        # (nor retrained) once the run they started has its result.
        done = (study_lib.stored_result(workdir) or {}).get(name)
        extra.update({phase["flag"]: getattr(args, phase["flag"]),
                      name: done or first_phase(parser, args, checkpoints_flag, name, model,
                                                seed, first_dir, init_from=before)})
        config.init_from.path = first_dir
        config.init_from.modules = phase["modules"]
      result = study_lib.train_and_test(config, workdir, patience=0,
                                        num_test=args.num_test,
                                        command=command, record=extra)
      rows.append({"model": model, "seed": seed, "size": args.size, **extra, **result})
      print(json.dumps({"model": model, "seed": seed, "test": result["test"],
                        "wall_s": round(result["wall_s"])}), flush=True)
      merged = write_rows(args.out, rows, command)
      if args.docs:
        write_summary(args.docs, merged, args.out)
  return rows


# What makes a run other than from scratch at the size's lengths (a row key besides model,
# seed and size; each is 0 or absent in a plain run's row).
VARIANT = ("pretrain_steps", "curriculum_steps", "curriculum_mid_steps", "train_min_len",
           "steps")

# The run-folder suffixes of --train_min_len (after the first phases') and of --steps (a
# count other than the size's; last).
MIN_LEN_SUFFIX = "min"
STEPS_SUFFIX = "st"

# Two-phase runs: the first phase's flag, run-folder suffix, its own folder (beside the
# run's), its config flags, the dev metric its summary keeps, the modules the run copies and
# (a later step of a chain) the phase it starts from, all of which it copies.
FIRST_PHASES = {
    # Self-pretraining: masked-LM on the same expressions; the classification head is new.
    "pretrain": dict(flag="pretrain_steps", suffix="spt", folder="_pretrain",
                     config=dict(mlm=True), metric="loss", modules=("inputs", "encoder")),
    # Curriculum: the same classification on short expressions; all of the model carries on.
    "curriculum": dict(flag="curriculum_steps", suffix="cur", folder="_short",
                       config=dict(short=True), metric="accuracy",
                       modules=("inputs", "encoder", "head")),
    # The curriculum's middle step: 32-200 tokens, from all of the short run.
    "curriculum_mid": dict(flag="curriculum_mid_steps", suffix="mid", folder="_medium",
                           config=dict(medium=True), metric="accuracy",
                           modules=("inputs", "encoder", "head"), after="curriculum"),
}


def first_phase(parser, args, checkpoints_flag: str, name: str, model: str, seed: int,
                workdir: str, init_from: str | None = None) -> dict:
  """The first phase ``name`` of ``FIRST_PHASES`` in ``workdir`` (resumed; a finished one is
  only read), started from all of the run in ``init_from`` when given (a chain's later
  step): its steps, dev metric (best and last), the step of the best and its training
  time."""
  phase = FIRST_PHASES[name]
  config = run_config(model, seed, args.size, **phase["config"], overrides=args.override)
  config.train.num_steps = getattr(args, phase["flag"])
  if init_from:
    config.init_from.path = init_from
    config.init_from.modules = FIRST_PHASES[phase["after"]]["modules"]
  study_lib.set_checkpoint_every(parser, config, args, checkpoints_flag)
  trained = study_lib.train_early_stopped(config, workdir, patience=0)
  history, metric = trained["eval_history"], phase["metric"]
  return {"steps": config.train.num_steps, "best_step": trained["best_step"],
          f"best_dev_{metric}": trained["best_dev"], f"last_dev_{metric}": history[-1][metric],
          "train_s_total": trained["train_s_total"], "eval_history": history}


def write_rows(path: str, rows: list[dict], command: str) -> list[dict]:
  """Writes ``rows`` into the results file ``path``, keeping its rows of other (model, seed,
  size, ``VARIANT``, overrides) runs (``study_lib.merge_results``); each row keeps the
  ``command`` that finished it, the file's own ``command`` is the latest call's. Returns the
  merged rows."""
  order = {m: i for i, m in enumerate(listops_config.STUDY_MODELS)}
  merged = study_lib.merge_results(
      path, rows, ("model", "seed", "size") + VARIANT + ("overrides",),
      order=lambda r: (str(r.get("size")), order.get(r["model"], 99),
                       *(r.get(k) or 0 for k in VARIANT), tuple(r.get("overrides") or ()),
                       r["seed"]))
  fileio.write_json_atomic(path, {"command": command, "lra_transformer": LRA_TRANSFORMER,
                              "runs": merged})
  return merged


def summary_table(rows: list[dict]) -> list[str]:
  """The study at a glance: each model's test accuracy at the reduced budget and at the LRA
  sizes, mean ± sample sd (n - 1) over seeds with their number ('(1)': one seed), 'not
  run' where no run finished; tiny rows (the tests') are left out. A cell with a run tested
  on fewer than ``NUM_TEST`` expressions (``--num_test``) says so: '(test N)', N its
  smallest (rows from before ``num_test`` was recorded used the default)."""
  cells = {}
  for r in rows:
    if r.get("size") in ("reduced", "full"):
      cells.setdefault((r["model"], r["size"], *(r.get(k) or 0 for k in VARIANT),
                        tuple(r.get("overrides") or ())), []).append(r)

  def cell(m, size, variant):
    runs = cells.get((m, size, *variant))
    if not runs:
      return "not run"
    v = [100 * r["test"]["accuracy"] for r in runs]
    text = (f"{np.mean(v):.2f} ± {np.std(v, ddof=1):.2f}% ({len(v)})" if len(v) > 1
            else f"{v[0]:.2f}% (1)")
    fewest = min(r.get("num_test", NUM_TEST) for r in runs)
    return text + (f" (test {fewest:,})" if fewest < NUM_TEST else "")

  def line(m, variant=(0,) * len(VARIANT) + ((),)):
    spt, cur, mid, min_len, steps, overrides = variant
    what = "".join([f", self-pretrained ({spt:,} masked-LM steps first)" if spt else "",
                    f", curriculum ({cur:,} steps on {LENGTHS['short']}-token expressions first)"
                    if cur and not mid else "",
                    f", curriculum ({cur:,} steps on {LENGTHS['short']}-token expressions, then "
                    f"{mid:,} on {LENGTHS['medium']} first)" if mid else "",
                    f", trained on expressions from {min_len:,} tokens up" if min_len else "",
                    f", {steps:,} steps" + (" on the size's lengths" if spt or cur else "")
                    if steps else "",
                    ", with " + ", ".join(f"`{o}`" for o in overrides) if overrides else ""])
    return (f"| {NAMES.get(m, m)}{what} | {PAPER.get(m, '-')} | {cell(m, 'reduced', variant)}"
            f" | {cell(m, 'full', variant)} |")

  # Per model: from scratch, then the variants (self-pretrained before the curriculum, each
  # before its mixed-length runs; a run with --override after the same one without).
  return (["| model | paper (LRA sizes) | reduced budget (seeds) | LRA sizes, `--full` (seeds) |",
           "|---|---|---|---|"]
          + [text for m in listops_config.STUDY_MODELS for text in [line(m)] + [
              line(m, v) for v in sorted({k[2:] for k in cells if k[0] == m and any(k[2:])},
                                         key=lambda v: (not v[0], *v[1:], v[0]))]])


def write_summary(docs: str, rows: list[dict], results_path: str) -> None:
  """Rewrites the summary table between ``SUMMARY``'s markers in ``docs`` (an error naming
  the file if it lacks them) from the results file's rows."""
  rel = os.path.relpath(results_path, os.path.dirname(os.path.abspath(docs)))
  study_lib.write_between_markers(docs, SUMMARY, [
      "", f"Generated from [{os.path.basename(results_path)}]({rel}) "
      f"({sum(r.get('size') != 'tiny' for r in rows)} finished runs) by "
      "`experiments/listops_study.py` (redraw: `python experiments/listops_study.py "
      f"--docs_only`): test accuracy of the best dev checkpoint on {NUM_TEST:,} fresh "
      "expressions unless marked, "
      "mean ± sample sd over seeds. Reduced budget: 100-500 tokens, 20k training "
      "expressions, 3,000 steps of 32; LRA sizes: 500-2,000 tokens, 96k, 5,000 steps.", "",
      *summary_table(rows), ""], what="ListOps summary")


if __name__ == "__main__":
  main()
