"""What the ListOps models learned: their predictions against readers that evaluate k levels.

Every model of experiments/listops_study.py stops at 33-35% test accuracy (docs/reproduction.md,
section 2). This study asks what that plateau is. Each test expression is parsed into its tree
(``synthetic.listops_tree``) and read by rule-based "readers":

* the majority class of the training labels;
* level 0: the most frequent label of the expression's outermost operator in training (MAX
  -> 9, MIN -> 0, ...): the operator token alone, no argument read;
* level k >= 1: the top k levels of operators applied to their arguments, each deeper
  sub-expression replaced by its operator's most frequent training label.

Then every trained run (``<workdir>/<size>_<model>_s<seed>[_spt<N>|_cur<N>[_mid<M>]]`` with a
``best/`` checkpoint and the study's ``result.json``; a run of ``--override`` is left out)
predicts its own test split through the library's inference API (``inference.load`` +
``Predictor.predict_examples``; the recomputed accuracy is checked against the study's
``result.json``), and the study reports how often
each model's prediction is the level-0 reader's, its accuracy where that reader is right and
where it is wrong, and its accuracy by outermost operator.

``--short`` asks how far each model's skill reaches below its training lengths: the readers
and every run are scored on the size's short expressions instead (8-64 tokens,
``configs/listops.py:<size>,short``: the curriculum's first phase), and the curriculum's
short models (``<run>_cur<N>_short``, and the middle steps ``<run>_cur<N>_mid<M>_medium``) are
read too (in both calls: on the long expressions they show what the short phase carries over
before the long one). The study's stored
accuracy is checked wherever a run is scored on its own test lengths.

  python experiments/listops_analysis.py                 # the reduced runs of runs/listops
  python experiments/listops_analysis.py --size full --fit_examples 20000   # LRA sizes
  python experiments/listops_analysis.py --short         # the same runs on 8-64 tokens
  python experiments/listops_analysis.py --tiny --workdir runs/listops_tiny   # tests
  python experiments/listops_analysis.py --docs_only     # redraw the docs' tables from --out
  python experiments/listops_analysis.py --only 'reduced_slstm_s[12]'   # score new runs only

Results: ``--out`` (default docs/reproduction/listops_analysis.json) and the table between
the markers of ``--docs`` (default docs/reproduction.md when ``--out`` is the default).
"""
from __future__ import annotations

import argparse
import collections
import copy
import fnmatch
import glob
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
from longtext_jax import data as data_lib  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax import fileio  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax import inference  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.data import synthetic  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import loop  # noqa: E402  pylint: disable=wrong-import-position
import listops_study  # noqa: E402  pylint: disable=wrong-import-position
import study_lib  # noqa: E402  pylint: disable=wrong-import-position

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MARKERS = ("<!-- listops analysis: begin -->", "<!-- listops analysis: end -->")
# The study's run folders: <size>_<model>_s<seed>[_<first phase's suffix><steps>[_<a later
# step's suffix><steps>]][_<MIN_LEN_SUFFIX><train_min_len>][_<STEPS_SUFFIX><steps>], and the
# classification first phases' own folders (<size>_<model>_s<seed>_cur<steps>_short: a model
# of its own, on short expressions; ..._cur<steps>_mid<steps>_medium: the middle step).
CLASSIFYING_PHASES = [p for p in listops_study.FIRST_PHASES.values()
                      if "head" in p["modules"]]


def _phase_pattern(name: str) -> str:
  """The regex of first phase ``name``'s suffix and the optional later steps after it."""
  phase = listops_study.FIRST_PHASES[name]
  later = [n for n, p in listops_study.FIRST_PHASES.items() if p.get("after") == name]
  return (f"_{phase['suffix']}(?P<{phase['flag']}>\\d+)"
          + "".join(f"(?:{_phase_pattern(n)})?" for n in later))


RUN_NAME = re.compile(
    r"^(?P<size>[a-z]+)_(?P<model>[a-z_]+)_s(?P<seed>\d+)(?:" + "|".join(
        _phase_pattern(n) for n, p in listops_study.FIRST_PHASES.items() if not p.get("after"))
    + f")?(?:(?:_{listops_study.MIN_LEN_SUFFIX}(?P<train_min_len>\\d+))?"
    + f"(?:_{listops_study.STEPS_SUFFIX}(?P<steps>\\d+))?"
    + "|(?P<first_phase>" + "|".join(p["folder"] for p in CLASSIFYING_PHASES) + "))$")
# What a classification first phase's own row says it is.
PHASE_LABELS = {"_short": ", its short first phase",
                "_medium": f", its {listops_study.LENGTHS['medium']}-token middle step"}
# Runs' accuracy is also given per number of the study's RAN windows (of this many tokens)
# an expression spans.
WINDOW = listops_config.RAN_WINDOW
LEVELS = (0, 1, 2, 3)  # Readers that evaluate this many levels of operators.
OPS = synthetic.LISTOPS_OPS


def operator_modes(trees, labels) -> dict[str, int]:
  """The most frequent label of the expressions each outermost operator heads (ties: the
  smaller label)."""
  counts = {op: np.zeros(10, np.int64) for op in OPS}
  for t, y in zip(trees, labels):
    counts[t[0]][int(y)] += 1
  return {op: int(np.argmax(c)) for op, c in counts.items()}


def reader(modes: dict[str, int], levels: int):
  """The level-``levels`` reader: the tree evaluated ``levels`` operators deep, each deeper
  sub-expression guessed as its operator's most frequent training label."""
  return lambda tree: synthetic.listops_value(tree, levels, guess=lambda s: modes[s[0]])


def split_trees(source) -> tuple[list, np.ndarray]:
  """The parsed trees and labels of a ListOps split (example i of ``source``)."""
  trees, labels = [], []
  for i in range(len(source)):
    ex = source[i]
    trees.append(synthetic.listops_tree(np.asarray(ex["input_ids"])[np.asarray(ex["mask"])]))
    labels.append(int(ex["label"]))
  return trees, np.array(labels)


def train_split(config, num_examples: int):
  """The first ``num_examples`` training expressions of ``config``'s run (0: all of them; the
  generator draws them one after another from the split's seed, so they are the run's own)."""
  c = copy.deepcopy(config)
  c.unlock()
  c.data.num_train = min(int(num_examples) or int(config.data.num_train),
                         int(config.data.num_train))
  c.data.num_eval = 2  # Not used.
  task = loop.make_run(c, "/nonexistent").task
  return data_lib.build_splits(c, task)["train"]


def readers_row(config, num_test: int, fit_examples: int) -> tuple[dict, dict]:
  """The rule readers' test accuracy on the study's test split of ``config`` (its seed), the
  modes fitted on its first ``fit_examples`` training expressions (0: all). Returns (the
  row, the parsed test split)."""
  train_trees, train_labels = split_trees(train_split(config, fit_examples))
  modes = operator_modes(train_trees, train_labels)
  majority = int(np.bincount(train_labels, minlength=10).argmax())
  trees, labels = split_trees(study_lib.test_split(config, num_test))
  row = {"seed": int(config.seed), "num_test": len(labels), "fit_examples": len(train_labels),
         "operator_modes": modes, "majority_label": majority,
         "majority": float(np.mean(labels == majority)),
         "levels": {}, "levels_by_operator": {},
         "depths": {str(d): n for d, n in sorted(collections.Counter(
             synthetic.listops_depth(t) for t in trees).items())}}
  outer = np.array([t[0] for t in trees])
  predictions = {k: np.array([reader(modes, k)(t) for t in trees]) for k in LEVELS}
  for k, p in predictions.items():
    right = p == labels
    row["levels"][str(k)] = float(np.mean(right))
    row["levels_by_operator"][str(k)] = {op: float(np.mean(right[outer == op]))
                                         for op in OPS if np.any(outer == op)}
  return row, {"trees": trees, "labels": labels, "modes": modes, "outer": outer,
               "predictions": predictions}


def run_row(workdir: str, parsed: dict, stored: dict | None, readers_config) -> dict:
  """A trained run's predictions on the readers' test expressions (``readers_config``'s
  test split) against the level-0 reader. ``stored``: the study's result of the run (its
  accuracy is checked when the readers' expressions are the run's own test split; None: a
  first phase, which has none)."""
  predictor = inference.load(workdir, progress=False)
  # The run's own test split at the readers' lengths: the same expressions unless the run
  # was made with other data (seed, depth, arguments: another --size).
  c = copy.deepcopy(predictor.config)
  c.unlock()
  own_lengths = all(c.data[k] == readers_config.data[k] for k in ("min_len", "seq_len"))
  c.data.min_len, c.data.seq_len = readers_config.data.min_len, readers_config.data.seq_len
  source = study_lib.test_split(c, len(parsed["labels"]))
  labels, outer = parsed["labels"], parsed["outer"]
  if not np.array_equal([int(source[i]["label"]) for i in range(len(source))], labels):
    raise SystemExit(f"{workdir}: its config's test split is not the one the readers were "
                     "scored on (another --size?)")
  examples = [{k: v for k, v in source[i].items() if k in ("input_ids", "mask")}
              for i in range(len(source))]
  pred = np.array([int(p["label"]) for p in predictor.predict_examples(examples)])
  level0, level1 = parsed["predictions"][0], parsed["predictions"][1]
  right = level0 == labels
  acc = float(np.mean(pred == labels))
  # By the number of WINDOW-token windows an expression spans (RAN's windows in the study).
  spans = np.array([-(-int(np.sum(ex["mask"])) // WINDOW) for ex in examples])
  by_windows = {}
  for n in sorted(set(spans.tolist())):
    wrong = (spans == n) & ~right
    by_windows[str(n)] = {
        "expressions": int(np.sum(spans == n)),
        "accuracy": float(np.mean(pred[spans == n] == labels[spans == n])),
        "level0_wrong": int(np.sum(wrong)),
        "accuracy_where_level0_wrong": float(np.mean(pred[wrong] == labels[wrong]))
                                       if wrong.any() else None,
        "level1_where_level0_wrong": float(np.mean(level1[wrong] == labels[wrong]))
                                     if wrong.any() else None}
  return {
      "accuracy": acc,
      "study_accuracy": (float(stored["test"]["accuracy"]) if stored and own_lengths
                         else None),
      "agrees_level0": float(np.mean(pred == level0)),
      "agrees_level1": float(np.mean(pred == level1)),
      "accuracy_where_level0_right": float(np.mean(pred[right] == labels[right])),
      "accuracy_where_level0_wrong": float(np.mean(pred[~right] == labels[~right])),
      "accuracy_by_operator": {op: float(np.mean(pred[outer == op] == labels[outer == op]))
                               for op in OPS if np.any(outer == op)},
      "by_windows": by_windows}


def find_runs(workdir: str, size: str) -> list[tuple[str, dict]]:
  """The finished study runs of ``size`` in ``workdir`` (and the classification first
  phases a finished run started from: ``<base>_short`` once ``<base>`` or any run
  ``<base>_...`` after it finished, e.g. ``<base>_mid<M>``): (folder, its name's fields)."""
  found = []
  for name in sorted(os.listdir(workdir)) if os.path.isdir(workdir) else []:
    m = RUN_NAME.match(name)
    path = os.path.join(workdir, name)
    if m and m["first_phase"]:
      base = path[:-len(m["first_phase"])]
      finished = (os.path.exists(os.path.join(base, "result.json"))
                  or bool(glob.glob(glob.escape(base) + "_*/result.json")))
    else:
      finished = os.path.exists(os.path.join(path, "result.json"))
    if m and m["size"] == size and os.path.isdir(os.path.join(path, "best")) and finished:
      found.append((path, {"model": m["model"], "seed": int(m["seed"]),
                           **{p["flag"]: int(m[p["flag"]] or 0)
                              for p in listops_study.FIRST_PHASES.values()},
                           "train_min_len": int(m["train_min_len"] or 0),
                           "steps": int(m["steps"] or 0),
                           "first_phase": m["first_phase"] or ""}))
  return found


def pct(x: float) -> str:
  return f"{100 * x:.1f}%"


def mean_sd(values) -> str:
  v = [100 * x for x in values]
  return f"{np.mean(v):.2f} ± {np.std(v, ddof=1):.2f}%" if len(v) > 1 else f"{v[0]:.2f}%"


def _size_name(size: str) -> str:
  """A size's table label with the lengths its config trains on ('reduced': 'reduced budget:
  100-500 tokens'; 'reduced_short': that size's runs on the curriculum's short expressions)."""
  base, _, phase = size.partition("_")
  c = listops_study.run_config("transformer", 0, base, short=phase == "short")
  lengths = f"{c.data.min_len:,}-{c.data.seq_len:,} tokens"
  if phase:
    return f"the {SIZE_LABELS[base][1]} runs on short expressions: {lengths}"
  return f"{SIZE_LABELS[base][0]}: {lengths}"


# Each size's label alone, and as the runs' adjective for its --short table.
SIZE_LABELS = {"reduced": ("reduced budget", "reduced"), "full": ("LRA sizes", "LRA-size"),
               "tiny": ("tiny", "tiny")}
# --short: the runs of a size on its short expressions.
SIZE_NAMES = {size: _size_name(size) for size in
              [*SIZE_LABELS, *(f"{s}_short" for s in SIZE_LABELS)]}


def label(r: dict) -> str:
  """What sets a run apart from a from-scratch one, as its table row says it."""
  return ((f", self-pretrained {r['pretrain_steps']:,} steps" if r["pretrain_steps"] else
           f", curriculum {r['curriculum_steps']:,} steps" if r.get("curriculum_steps")
           else "")
          + (f" then {r['curriculum_mid_steps']:,} on {listops_study.LENGTHS['medium']} tokens"
             if r.get("curriculum_mid_steps") else "")
          + (f", trained from {r['train_min_len']:,} tokens" if r.get("train_min_len") else "")
          + (f", {r['steps']:,} steps" if r.get("steps") else "")
          + (PHASE_LABELS.get(r["first_phase"], ", its short first phase")
             if r.get("first_phase") else ""))


def tables(sizes: dict[str, dict]) -> list[str]:
  """The readers' test accuracy per size (mean ± sd over the test seeds) and one line per
  trained run, from the results file's ``sizes``."""
  order = [s for s in SIZE_NAMES if s in sizes]
  lines = []
  for size in order:
    rd = sizes[size]["readers"]
    lines.append(f"- {SIZE_NAMES[size]}: test splits of seeds "
                 f"{', '.join(str(r['seed']) for r in rd)} ({rd[0]['num_test']:,} expressions "
                 f"each), modes fitted on the first {rd[0]['fit_examples']:,} training "
                 f"expressions of each seed (seed {rd[0]['seed']}: "
                 + ", ".join(f"{op[1:]} -> {v}" for op, v in rd[0]["operator_modes"].items())
                 + f"; majority label {rd[0]['majority_label']}); "
                 f"`{sizes[size]['command'].strip()}`")
  names = {0: "level 0: the outermost operator's most frequent label (no argument read)",
           1: "level 1: the outermost operator applied to its arguments, each nested one "
              "guessed as its operator's most frequent label"}
  rows = [("the majority label", lambda r: r["majority"])] + [
      (names.get(k, f"level {k}: {k} levels of operators applied, deeper ones guessed"),
       lambda r, k=k: r["levels"][str(k)]) for k in LEVELS]
  lines += ["", "Test accuracy, mean ± sd over the seeds (in brackets: by outermost operator, "
            "MAX / MIN / MED / SM, %):", "",
            "| reader | " + " | ".join(SIZE_NAMES[s] for s in order) + " |",
            "|---|" + "---|" * len(order)]
  def by_op(size, k):  # Mean over the seeds, per outermost operator.
    if k is None:
      return ""
    per = [r["levels_by_operator"][str(k)] for r in sizes[size]["readers"]]
    return " (" + " / ".join(f"{100 * np.mean([p[op] for p in per if op in p]):.0f}"
                             for op in OPS) + ")"

  for (name, get), k in zip(rows, [None, *LEVELS]):
    lines.append(f"| {name} | " + " | ".join(
        mean_sd([get(r) for r in sizes[s]["readers"]]) + by_op(s, k) for s in order) + " |")
  lines.append("| every level (the label) | " + " | ".join("100%" for _ in order) + " |")
  runs = [(s, r) for s in order for r in sizes[s]["runs"]]
  if runs:
    lines += ["", "Trained runs of `experiments/listops_study.py` (best dev checkpoint) on "
              "their seed's test split (rows 'on short expressions': on the short one, "
              "`--short`), predicted through `longtext_jax.inference`:", "",
              "| run | test accuracy | same prediction as level 0 | as level 1 | accuracy "
              "where level 0 is right / wrong | accuracy by outermost operator (MAX / MIN / "
              "MED / SM) |", "|---|---|---|---|---|---|"]
    for size, r in runs:
      spt = label(r)
      by_op = " / ".join(pct(r["accuracy_by_operator"].get(op, float("nan"))) for op in OPS)
      lines.append(
          f"| {r['model']}, {size.replace('_short', ', on short expressions')}, seed "
          f"{r['seed']}{spt} | {pct(r['accuracy'])} | "
          f"{pct(r['agrees_level0'])} | {pct(r['agrees_level1'])} | "
          f"{pct(r['accuracy_where_level0_right'])} / {pct(r['accuracy_where_level0_wrong'])}"
          f" | {by_op} |")
  spans = [(s, r) for s, r in runs if not s.endswith("_short") and "by_windows" in r]
  if spans:
    most = max(int(n) for _, r in spans for n in r["by_windows"])
    lines += ["", f"Where the level-0 rule is wrong, accuracy by the {WINDOW}-token windows an "
              "expression spans (RAN's windows here; in brackets: the level-1 rule's accuracy "
              "on the same expressions, and how many there are):", "",
              "| run | " + " | ".join(f"{n} window{'s' if n > 1 else ''}"
                                     for n in range(1, most + 1)) + " |",
              "|---|" + "---|" * most]
    for size, r in spans:
      def cell(n, r=r):
        b = r["by_windows"].get(str(n))
        if not b or b["accuracy_where_level0_wrong"] is None:
          return "-"
        return (f"{pct(b['accuracy_where_level0_wrong'])} "
                f"({pct(b['level1_where_level0_wrong'])}, {b['level0_wrong']:,})")
      lines.append(f"| {r['model']}, {size}, seed {r['seed']}{label(r)} | "
                   + " | ".join(cell(n) for n in range(1, most + 1)) + " |")
  return lines


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--size", default="reduced", choices=("reduced", "full", "tiny"))
  parser.add_argument("--tiny", action="store_const", dest="size", const="tiny",
                      help="the same as --size tiny")
  parser.add_argument("--short", action="store_true",
                      help="score the readers and the runs on the size's short expressions "
                           "(configs/listops.py:<size>,short; results under '<size>_short')")
  parser.add_argument("--docs_only", action="store_true",
                      help="only redraw --docs' tables from --out (nothing scored)")
  parser.add_argument("--seeds", default="0,1,2", help="test splits the readers are scored on")
  parser.add_argument("--num_test", type=int, default=None,
                      help="test expressions (default the study's: 2,000; 16 with --tiny)")
  parser.add_argument("--fit_examples", type=int, default=0,
                      help="training expressions the operator modes are fitted on (0: all "
                           "of the config's training split)")
  parser.add_argument("--workdir", default=None,
                      help="the study's run folders (default runs/listops, with --tiny "
                           "runs/listops_tiny)")
  parser.add_argument("--out", default=None,
                      help="results file (default docs/reproduction/listops_analysis.json; "
                           "with --tiny runs/listops_tiny/listops_analysis.json); rows of runs "
                           "it holds that this call does not find are kept (same --num_test "
                           "and --fit_examples)")
  parser.add_argument("--only", default="",
                      help="comma-separated shell patterns of run folder names (e.g. "
                           "'reduced_slstm_s[12]*'): score only the runs they match and keep "
                           "the other runs' rows of --out as they are (a new run is added in "
                           "a minute instead of rescoring every run)")
  parser.add_argument("--docs", default=None,
                      help="markdown file whose analysis table is rewritten (default "
                           "docs/reproduction.md when --out is the default)")
  args = parser.parse_args(argv)
  tiny = args.size == "tiny"
  home = os.path.join(ROOT, "runs", "listops_tiny" if tiny else "listops")
  args.workdir = args.workdir or home
  if args.docs is None:
    args.docs = "" if tiny or args.out else os.path.join(ROOT, "docs", "reproduction.md")
  args.out = args.out or (os.path.join(home, "listops_analysis.json") if tiny else
                          os.path.join(ROOT, "docs", "reproduction", "listops_analysis.json"))
  default_test = 16 if tiny else 2000
  num_test = args.num_test or default_test
  if args.fit_examples < 0:
    parser.error(f"--fit_examples must be >= 0, got {args.fit_examples}")
  if args.docs_only:
    if not args.docs:
      parser.error("--docs_only needs --docs (the markdown file to redraw)")
    with open(args.out, encoding="utf-8") as f:
      write_docs(args.docs, args.out, json.load(f)["sizes"])
    return None

  key = args.size + ("_short" if args.short else "")
  sizes = {}
  if os.path.exists(args.out):  # Each size keeps its own entry; this call rewrites its own.
    with open(args.out, encoding="utf-8") as f:
      sizes = json.load(f).get("sizes", {})
  # Runs scored by an earlier call with the same settings whose folders this call does not
  # read (gone, in another --workdir, or left out by --only) keep their rows, as the study
  # keeps its results; a run read again replaces its row. Entries from before the settings
  # were stored were made with the defaults.
  old = sizes.get(key)
  same_settings = bool(old) and (old.get("num_test", default_test),
                                 old.get("fit_examples", 0)) == (num_test, args.fit_examples)
  only = [p for p in args.only.split(",") if p]
  found = find_runs(args.workdir, args.size)
  if only:
    found = [(path, info) for path, info in found
             if any(fnmatch.fnmatchcase(os.path.basename(path), p) for p in only)]
    if not found:
      parser.error(f"--only {args.only!r}: no finished {args.size} run in {args.workdir} "
                   "matches (patterns match whole folder names: end one with '*' for the "
                   "run's phases)")
    if old and not same_settings:
      parser.error(f"--only: {args.out}'s {key!r} rows were scored with other settings "
                   "(--num_test, --fit_examples), so the runs left out could not be kept; "
                   "score every run (no --only) or give those settings")

  def config_of(seed):
    c = listops_config.get_config("transformer" + ("" if args.size == "full" else
                                                    f",{args.size}")
                                  + (",short" if args.short else ""))
    c.seed = seed  # The data depend on the seed and size only, not on the model.
    return c

  readers, parsed = [], {}
  for seed in sorted({int(s) for s in args.seeds.split(",")}):
    c = config_of(seed)
    row, parsed[seed] = readers_row(c, num_test, args.fit_examples)
    readers.append(row)
    print(json.dumps({"seed": seed, "majority": row["majority"], "levels": row["levels"]}),
          flush=True)
  runs = []
  for path, info in found:
    stored = None
    if not info["first_phase"]:
      with open(os.path.join(path, "result.json")) as f:
        stored = json.load(f)
    if info["seed"] not in parsed:
      c = config_of(info["seed"])
      parsed[info["seed"]] = readers_row(c, num_test, args.fit_examples)[1]
    if stored and stored.get("num_test", num_test) != num_test:
      print(f"{path}: tested on {stored.get('num_test')} expressions, not {num_test}; "
            "skipped", flush=True)
      continue
    inside = os.path.abspath(path).startswith(os.path.abspath(ROOT) + os.sep)
    row = {**info, "workdir": os.path.relpath(path, ROOT) if inside else os.path.abspath(path),
           **run_row(path, parsed[info["seed"]], stored, config_of(info["seed"]))}
    if (row["study_accuracy"] is not None
        and abs(row["accuracy"] - row["study_accuracy"]) > 1.5 / num_test):
      raise SystemExit(f"{path}: the test accuracy recomputed here ({row['accuracy']:.4f}) is "
                       f"not the study's ({row['study_accuracy']:.4f}): the predictions "
                       "are not the ones the study scored")
    runs.append(row)
    print(json.dumps({k: row[k] for k in ("model", "seed", "pretrain_steps", "accuracy",
                                          "agrees_level0")}), flush=True)
  # The command that scores every row of the entry: an --only call's, less --only (the rows
  # it keeps came from earlier calls of the same settings).
  given = list(sys.argv[1:] if argv is None else argv)
  for k in range(len(given) - 1, -1, -1):
    if given[k] == "--only":
      del given[k:k + 2]
    elif given[k].startswith("--only="):
      del given[k]
  command = " ".join(["python experiments/listops_analysis.py", *given])
  result = {"command": command, "size": key, "device": study_lib.device_string(),
            "num_test": num_test, "fit_examples": args.fit_examples,
            "readers": readers, "runs": runs}
  if same_settings:
    scored = {r["workdir"] for r in runs}
    kept = [r for r in old["runs"] if r["workdir"] not in scored]
    result["runs"] = sorted(kept + runs, key=lambda r: r["workdir"])
  elif old and old["runs"]:
    print(f"{args.out}: the {len(old['runs'])} runs of its {key!r} entry were scored with other "
          "settings (--num_test, --fit_examples); replaced by this call's", flush=True)
  sizes[key] = result
  fileio.write_json_atomic(args.out, {"sizes": sizes})
  if args.docs:
    write_docs(args.docs, args.out, sizes)
  return result


def write_docs(docs: str, out: str, sizes: dict[str, dict]) -> None:
  """The tables of the results file ``out`` (its ``sizes``) between ``docs``' markers."""
  rel = os.path.relpath(out, os.path.dirname(os.path.abspath(docs)))
  study_lib.write_between_markers(docs, MARKERS, [
      "", f"Generated from [{os.path.basename(out)}]({rel}) by "
      "`experiments/listops_analysis.py` (one call per size; redraw: `--docs_only`):", "",
      *tables(sizes), ""], what="ListOps analysis")


if __name__ == "__main__":
  main()
