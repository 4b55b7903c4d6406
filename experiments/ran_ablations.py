"""RAN ablations (RAN paper, Table 4): memory review, window residual, rotary, max pooling.

Every cell is ``configs/ran/ablations.py:<ablation>,<task>[,tiny]`` trained by the trainer
(best dev checkpoint kept), then tested on a fresh test split (experiments/study_lib.py);
seeds give the spread. Mean pooling only exists on a pooled task (not on 'tagging').

Resumable: every run lives in ``<workdir>/<task>_<ablation>_s<seed>`` and is skipped once
it has its result.json; an interrupted run continues from its latest checkpoint.

  python experiments/ran_ablations.py --seeds 0,1,2                     # the table
  python experiments/ran_ablations.py --tasks last_window --ablations full,mean_pool
  python experiments/ran_ablations.py --tiny   # seconds (tests; runs/ran_ablations_tiny/)
  # On a CPU: 5 checkpoints per dev evaluation, so a killed run loses less (same results):
  python experiments/ran_ablations.py --seeds 0,1,2 --checkpoints_per_eval 5
  # The table of docs/reproduction.md (between its markers) from a results file, no training:
  python experiments/ran_ablations.py --docs_only \
      --out docs/reproduction/ran_ablations_250steps_cpu.json --docs docs/reproduction.md
  # A second table in the same document, between markers of its own name (--table):
  python experiments/ran_ablations.py --tasks tagging --seeds 0,1,2 --checkpoints_per_eval 5 \
      --workdir runs/ran_ablations_1000 --out docs/reproduction/ran_ablations_1000steps_cpu.json \
      --docs docs/reproduction.md --table 1000steps
  # The same switches on a real corpus: rows of experiments/own_corpus_table.py run with
  # one ablation's --override each (the 'ran' encoder of configs/text_classification.py),
  # tabled between their own markers:
  python experiments/ran_ablations.py --docs_only --docs docs/reproduction.md \
      --corpus_results docs/reproduction/ran_ablations_news_outlets.jsonl
  # Rows run at another budget (every row also given --override train.num_epochs=6), in a
  # corpus table of their own name:
  python experiments/ran_ablations.py --docs_only --docs docs/reproduction.md \
      --table 6epochs --budget train.num_epochs=6 \
      --corpus_results docs/reproduction/ran_ablations_news_outlets_6epochs.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":  # Before JAX loads: huge pages for XLA's CPU buffers.
  from longtext_jax import hostenv  # noqa: E402  pylint: disable=g-import-not-at-top
  hostenv.reexec_with_hugepages(__file__)
from configs.ran import ablations as abl_config  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax import fileio  # noqa: E402  pylint: disable=wrong-import-position
import own_corpus_table  # noqa: E402  pylint: disable=wrong-import-position
import study_lib  # noqa: E402  pylint: disable=wrong-import-position

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PAPER = {"full": 83.36, "mean_pool": 82.24, "no_residual": 81.76, "no_review": 80.85,
         "no_rotary": 82.13}  # Table 4, Arxiv accuracy (%).
METRIC = {"tagging": "token_accuracy", "last_window": "accuracy"}


def corpus_markers(name: str = "") -> tuple[str, str]:
  """The markers of the corpus table called ``name`` (``--table`` with ``--corpus_results``;
  "": CORPUS_MARKERS)."""
  tag = f"ran ablations corpus table {name}" if name else "ran ablations corpus table"
  return f"<!-- {tag}: begin -->", f"<!-- {tag}: end -->"


CORPUS_MARKERS = corpus_markers()  # "<!-- ran ablations corpus table: begin -->", ...


def table_markers(name: str = "") -> tuple[str, str]:
  """The markers of the docs table called ``name`` (``--table``; "": BEGIN, END)."""
  tag = f"ran ablations table {name}" if name else "ran ablations table"
  return f"<!-- {tag}: begin -->", f"<!-- {tag}: end -->"


BEGIN, END = table_markers()  # The default table's: "<!-- ran ablations table: begin -->".


def cells(tasks, ablations):
  """The (task, ablation) pairs to run: mean pooling only on pooled tasks."""
  return [(t, a) for t in tasks for a in ablations if not (a == "mean_pool" and
                                                            t == "tagging")]


def table(rows) -> list[str]:
  """Markdown rows: test metric mean ± sample sd (n - 1) over seeds, and the change from
  'full'."""
  out = ["| task | ablation | test metric (mean ± sd, seeds) | Δ vs full | paper Δ (Arxiv) |",
         "|---|---|---|---|---|"]
  by = {}
  for r in rows:  # A corpus (not a generated task): accuracy.
    by.setdefault((r["task"], r["ablation"]), []).append(
        r["test"][METRIC.get(r["task"], "accuracy")])
  for (task, ablation), values in by.items():
    full = by.get((task, "full"))
    delta = "" if full is None or ablation == "full" else (
        f"{100 * (np.mean(values) - np.mean(full)):+.2f}")
    paper = "" if ablation == "full" else f"{PAPER[ablation] - PAPER['full']:+.2f}"
    spread = (f" ± {100 * np.std(values, ddof=1):.2f}" if len(values) > 1 else "")  # 1 seed:
    out.append(f"| {task} | {ablation} | {100 * np.mean(values):.2f}{spread} "   # no spread.
               f"({len(values)}) | {delta} | {paper} |")
  return out


def ablation_of(overrides: list[str]) -> str | None:
  """The ablation (``configs/ran/ablations.py``'s ABLATIONS) that a row's config overrides
  make of the 'ran' encoder, or None for any other overrides. Each value is read as
  own_corpus_table.py read it when it ran the row (``parse_override``, as the type of the
  ablation's own value)."""
  for name, changed in abl_config.ABLATIONS.items():
    fields = {}
    for item in overrides:
      key, _, value = item.partition("=")
      field = key[len("model.encoder."):] if key.startswith("model.encoder.") else None
      if field not in changed:
        break
      try:
        fields[field] = own_corpus_table.parse_override(item, changed[field], value)
      except ValueError:
        break
    else:
      if fields == changed:
        return name
  return None


def corpus_runs(path: str, budget: list[str] = ()) -> list[dict]:
  """The RAN rows of an own-corpus results file (experiments/own_corpus_table.py, JSON
  lines) as ablation runs: task = the corpus, ablation from the overrides, test accuracy;
  rows of other encoders, other overrides or without a test result are left out.

  ``budget``: overrides every row of the table was run with besides its ablation's (say
  ``train.num_epochs=6``: the same switches at another training budget); a row is taken
  when it has every one of them and its other overrides make an ablation, so rows of two
  budgets in one file never share a cell. A budget item that is not ``field=value``, a
  budget that no row has, and a line that is not JSON (named by file and line) are
  errors."""
  for item in budget:
    if "=" not in item or not item.partition("=")[0].strip():
      raise ValueError(f"--budget {item!r}: expected field=value, as the rows' --override")
  runs, with_budget = [], 0
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        r = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{number}: not a JSON line ({e})") from e
      overrides = list(r.get("overrides", []))
      if not all(item in overrides for item in budget):
        continue
      with_budget += 1
      ablation = ablation_of([o for o in overrides if o not in budget])
      if r.get("encoder") != "ran" or ablation is None or "test/accuracy" not in r:
        continue
      runs.append({"task": r["corpus"], "ablation": ablation, "seed": r["seed"],
                   "test": {"accuracy": r["test/accuracy"]},
                   "dev": {"accuracy": r.get("dev/accuracy")}, "command": r.get("command"),
                   "device": r.get("device"), "cpu_s": r.get("cpu_s")})
  if budget and not with_budget:  # A misspelt budget would draw an empty table.
    raise ValueError(f"{path}: no row was run with every override of --budget "
                     f"{list(budget)} (they must match the rows' 'overrides' exactly)")
  return sorted(runs, key=lambda r: (r["task"], list(abl_config.ABLATIONS).index(
      r["ablation"]), r["seed"]))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--tiny", action="store_true", help="seconds-long runs (tests)")
  parser.add_argument("--tasks", default=",".join(abl_config.TASKS))
  parser.add_argument("--ablations", default=",".join(abl_config.ABLATIONS))
  parser.add_argument("--seeds", default="0,1,2")
  parser.add_argument("--num_test", type=int, default=None,
                      help=f"test examples per run (default {512:,}; 16 with the tiny size)")
  parser.add_argument("--steps", type=int, default=0,
                      help="override train.num_steps (0: the config's)")
  checkpoints_flag = study_lib.add_checkpoints_flag(parser)
  parser.add_argument("--workdir", default=None,
                      help="run folders (default runs/ran_ablations; with --tiny "
                           "runs/ran_ablations_tiny)")
  parser.add_argument("--out", default=None,
                      help="results file (default docs/reproduction/ran_ablations.json; with "
                           "--tiny runs/ran_ablations_tiny/ran_ablations.json: a tiny run "
                           "never writes into the docs unless told to)")
  parser.add_argument("--docs", default="",
                      help="a markdown file whose ablation table (between the markers "
                           f"{BEGIN!r} and {END!r}, or --table's) is rewritten from "
                           "--out's runs")
  parser.add_argument("--table", default="",
                      help="with --docs: rewrite the table between the markers "
                           f"{table_markers('NAME')[0]!r} and {table_markers('NAME')[1]!r} "
                           "instead (another results file's table in the same document)")
  parser.add_argument("--docs_only", action="store_true",
                      help="only rewrite --docs from --out (no training)")
  parser.add_argument("--corpus_results", default="",
                      help="with --docs_only: table the RAN rows of this own-corpus "
                           "results file (JSON lines) between the corpus-table markers "
                           "(with --table NAME: those of the corpus table NAME)")
  parser.add_argument("--budget", action="append", default=[],
                      help="with --corpus_results: an override (field=value) every row of "
                           "the table was run with besides its ablation's, e.g. "
                           "train.num_epochs=6 (repeatable)")
  args = parser.parse_args(argv)
  if args.num_test is None:  # Given with a tiny size too, it is used (it was ignored).
    args.num_test = 16 if args.tiny else 512
  home = os.path.join(ROOT, "runs", "ran_ablations_tiny") if args.tiny else None
  args.workdir = args.workdir or home or os.path.join(ROOT, "runs", "ran_ablations")
  args.out = args.out or (os.path.join(home, "ran_ablations.json") if home else
                          os.path.join(ROOT, "docs", "reproduction", "ran_ablations.json"))
  if args.budget and not args.corpus_results:
    parser.error("--budget selects rows of --corpus_results; give that too")
  if args.docs_only:
    if not args.docs:
      parser.error("--docs_only needs --docs (the markdown file to rewrite)")
    if args.corpus_results:
      runs = corpus_runs(args.corpus_results, args.budget)
      commands = sorted({r["command"] for r in runs if r.get("command")})
      written_by = (f"`{commands[0]}`" if commands else "no recorded command") + (
          f" and {len(commands) - 1} more (one per row)" if len(commands) > 1 else "")
      redo = "".join(f"--budget {b} " for b in args.budget) + "--corpus_results"
      write_docs(args.docs, {"runs": runs}, args.corpus_results,
                 corpus_markers(args.table), redo_flag=redo, written_by=written_by,
                 table_name=args.table)
      return runs
    with open(args.out, encoding="utf-8") as f:
      write_docs(args.docs, json.load(f), args.out, table_name=args.table)
    return []
  command = "python experiments/ran_ablations.py " + " ".join(
      sys.argv[1:] if argv is None else argv)
  rows = []
  for seed in [int(s) for s in args.seeds.split(",")]:
    for task, ablation in cells(args.tasks.split(","), args.ablations.split(",")):
      config = abl_config.get_config(f"{ablation},{task}" + (",tiny" if args.tiny else ""))
      config.seed = seed
      config.train.progress_bar = False
      if args.steps:
        config.train.num_steps = args.steps
      study_lib.set_checkpoint_every(parser, config, args, checkpoints_flag)
      workdir = os.path.join(args.workdir, f"{task}_{ablation}_s{seed}"
                             + ("_tiny" if args.tiny else ""))
      result = study_lib.train_and_test(config, workdir, patience=0,
                                        num_test=args.num_test,
                                        command=command)
      rows.append({"task": task, "ablation": ablation, "seed": seed, **result})
      print(json.dumps({"task": task, "ablation": ablation, "seed": seed,
                        "test": result["test"], "wall_s": round(result["wall_s"])}),
            flush=True)
      saved = write_rows(args.out, rows, command)
      if args.docs:
        write_docs(args.docs, {"command": command, "runs": saved}, args.out,
                   table_name=args.table)
  print("\n".join(table(rows)))
  return rows


def write_docs(path: str, results: dict, results_path: str, markers=None,
               redo_flag: str = "--out", written_by: str | None = None,
               table_name: str = "") -> None:
  """Rewrites the table between the ``markers`` (default: those of the table called
  ``table_name``, ``table_markers``) in the markdown file ``path`` from the runs of a
  results file (its ``command`` and ``runs``); a file without both markers is an error
  (nothing is appended to a document by surprise). ``redo_flag`` names the option that
  reads ``results_path`` in the redraw command; ``written_by`` (markdown) says what wrote
  the runs (default: the results' ``command``)."""
  markers = markers or table_markers(table_name)
  if table_name:
    redo_flag = f"--table {table_name} {redo_flag}"
  rel = os.path.relpath(results_path, os.path.dirname(os.path.abspath(path)))
  redo = (f"python experiments/ran_ablations.py --docs_only {redo_flag} "
          f"{os.path.relpath(results_path, ROOT)} --docs {os.path.relpath(path, ROOT)}")
  written_by = written_by or f"`{results['command']}`"
  study_lib.write_between_markers(
      path, markers, ["", f"Generated from [{os.path.basename(results_path)}]({rel}) (its "
                      f"runs last written by {written_by}) by `{redo}`.", "",
                      *table(results["runs"]), ""], what="ablation-table")


def write_rows(path: str, rows: list[dict], command: str) -> list[dict]:
  """Writes ``rows`` into the results file ``path``, keeping its rows of other (task,
  ablation, seed) cells (``study_lib.merge_results``); the table is the merged rows'."""
  merged = study_lib.merge_results(path, rows, ("task", "ablation", "seed"))
  fileio.write_json_atomic(path, {"command": command, "runs": merged, "table": table(merged)})
  return merged


if __name__ == "__main__":
  main()
