"""Masked-summation study (Star-Transformer paper, Sec. 5.1, Fig. 3a/3b, Table 6).

Sweeps the sequence length n, the models of ``configs/masked_summation.py`` (STUDY_MODELS:
Star-Transformer and its two Table 6 ablations as the authors' code computes them,
Transformer, LSTM, BiLSTM, RAN, S-LSTM) and seeds. Each run is that config ('paper': 10k
train / 10k dev, hidden size 100, 10 heads x 10, Adam), trained by the trainer
(``train_and_evaluate``) with early stopping on the dev MSE (experiments/study_lib.py;
patience per model, ``PATIENCE``, or ``--patience``), then
its best checkpoint is tested on a fresh 10k test set and its inference timed by the
benchmark harness. Outputs:

  docs/masked_summation.md            the tables (between the generated-results markers)
  docs/masked_summation_mse.png       Fig. 3a: test MSE vs n
  docs/masked_summation_time.png      Fig. 3b: test (inference) time vs n
  docs/masked_summation_curves.png    dev MSE vs epoch (learning curves)
  docs/masked_summation_results.json  every run's numbers
  docs/reproduction.md                its summary table (between its own markers)

Resumable: every run lives in ``<workdir>/<model>_n<n>_s<seed>`` and is skipped once it has
its result.json; an interrupted run continues from its last checkpoint.

  python experiments/masked_summation.py --full                    # everything (GPU-sized)
  python experiments/masked_summation.py --full --models star --lengths 200
  python experiments/masked_summation.py --full --max_epochs cpu   # the CPU runs' caps
  python experiments/masked_summation.py --full ... --checkpoints_per_epoch 3  # a killed run
                                            # loses at most a third of an epoch (CPU runs)
  python experiments/masked_summation.py --tiny    # seconds (tests; runs/masked_summation_tiny/)
  python experiments/masked_summation.py --docs_only               # redraw from the runs
  python experiments/masked_summation.py --full --restore ...      # lost workdir: do not
                                            # retrain runs recorded in the results JSON

The docs show the workdir's finished runs and every other run recorded in
docs/masked_summation_results.json (``docs_rows``): a fresh clone's or another machine's
workdir adds its runs, it never drops the recorded ones. They are redrawn after each run a
call finishes; a call that finishes none (``--docs_only``, or every run already done)
redraws them once.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":  # Before JAX loads: huge pages for XLA's CPU buffers.
  from longtext_jax import hostenv  # noqa: E402  pylint: disable=g-import-not-at-top
  hostenv.reexec_with_hugepages(__file__)
import jax  # noqa: E402  pylint: disable=wrong-import-position

from configs import masked_summation as msum_config  # noqa: E402
from longtext_jax import fileio  # noqa: E402
import study_lib  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PAPER_N200 = {"star": 0.0284, "star_no_radial": 0.1536, "star_no_ring": 0.0359}  # Table 6.
STYLE = {  # model -> (colour, marker): one distinct pair per model in every figure.
    "star": ("tab:red", "o"), "star_no_radial": ("tab:orange", "v"),
    "star_no_ring": ("tab:pink", "^"), "transformer": ("tab:blue", "s"),
    "lstm": ("tab:green", "D"), "bilstm": ("tab:olive", "P"),
    "ran": ("tab:purple", "X"), "slstm": ("tab:brown", "*")}
BEGIN, END = "<!-- generated results: begin -->", "<!-- generated results: end -->"
TIMES = ("time_ms", "wall_min")  # Cells whose GPU runs are shown apart from the CPU's.
# docs/reproduction.md's table of the study at a glance, rewritten with this page's tables.
SUMMARY = ("<!-- masked summation summary: begin -->", "<!-- masked summation summary: end -->")
NAMES = {"star": "Star-Transformer", "star_no_radial": "Star -radial (Table 6 a)",
         "star_no_ring": "Star -ring (Table 6 b)", "transformer": "Transformer",
         "lstm": "LSTM", "bilstm": "BiLSTM", "ran": "RAN (not in the paper)",
         "slstm": "S-LSTM (not in the paper)"}


def on_gpu(run: dict) -> bool:
  """Whether a run trained on a GPU (its ``device`` says so; CPU runs say 'CPU ...' or
  predate the field): its times are another machine's."""
  return run.get("device", "CPU").startswith("GPU")


def run_config(model: str, n: int, seed: int, tiny: bool):
  """The config of one run: configs/masked_summation.py:<model>,paper,n=<n>[,tiny]."""
  c = msum_config.get_config(f"{model},paper,n={n}" + (",tiny" if tiny else ""))
  c.seed = seed
  c.train.progress_bar = False
  return c


def guess_mse(k: int) -> float:
  """MSE of always guessing the expectation k/2 (per output): Var(sum of k U[0,1)) = k/12."""
  return k / 12


def collect(workdir: str) -> list[dict]:
  """Every finished run under ``workdir`` (its result.json, plus model, n and seed)."""
  rows = []
  if not os.path.isdir(workdir):
    return rows
  for name in sorted(os.listdir(workdir)):
    m = re.fullmatch(r"(\w+?)_n(\d+)_s(\d+)", name)
    path = os.path.join(workdir, name, "result.json")
    if m and os.path.exists(path):
      with open(path) as f:
        rows.append({"model": m[1], "n": int(m[2]), "seed": int(m[3]), **json.load(f)})
  return rows


def docs_rows(workdir: str, results_path: str) -> list[dict]:
  """The runs the docs show: every finished run under ``workdir`` and, for the cells it lacks,
  the runs recorded in ``results_path`` (the docs' masked_summation_results.json). A call in
  a new or partial workdir (a fresh clone, another machine, a GPU queue's folder) adds its
  runs to the docs instead of dropping every other run from them; a workdir's run replaces
  the recorded run of its cell. Ordered by run folder name, as ``collect``."""
  return study_lib.merge_results(results_path, collect(workdir), ("model", "n", "seed"),
                                 order=lambda r: f"{r['model']}_n{r['n']}_s{r['seed']}")


def restore(results_path: str, workdir: str) -> list[str]:
  """Writes ``<workdir>/<run>/result.json`` for each run in ``results_path`` (the study's
  masked_summation_results.json) that has no folder in ``workdir``; returns the run names
  written.

  The runs' checkpoints are not restored: a restored run counts as finished (the study skips
  it), it cannot be trained further. A run whose folder exists is left alone, also without a
  result.json: it is being trained (or resumed to train on), and an older recorded result
  must not end it.
  """
  if not os.path.exists(results_path):
    raise FileNotFoundError(f"--restore: {results_path} does not exist (it is written by "
                            f"every study run next to the docs; nothing to restore from)")
  with open(results_path) as f:
    runs = json.load(f)["runs"]
  written = []
  for r in runs:
    name = f"{r['model']}_n{r['n']}_s{r['seed']}"
    path = os.path.join(workdir, name, "result.json")
    if os.path.exists(os.path.join(workdir, name)):
      continue
    fileio.write_json_atomic(path, {k: v for k, v in r.items() if k not in ("model", "n", "seed")})
    written.append(name)
  return written


def summarize(rows):
  """(model, n) -> {'mse': [per seed], 'time_ms': [...], ...}."""
  out = {}
  for r in rows:
    cell = out.setdefault((r["model"], r["n"]), {"mse": [], "time_ms": [], "epochs": [],
                                                 "wall_min": [], "num_test": [],
                                                 "wall_partial": [], "epochs_run": [],
                                                 "gpu": [], "epochs_ended": set()})
    cell["gpu"].append(on_gpu(r))  # Its times are shown apart from the CPU runs'.
    cell["mse"].append(r["test"]["mse"])
    cell["time_ms"].append(r["infer_ms_per_batch"])
    cell["epochs"].append(r["best_step"])
    # Epochs run and the best one (an epoch is one dev evaluation: the first one's step).
    epoch = r["eval_history"][0]["step"]
    cell["epochs_run"].append(f"{r['stopped_step'] // epoch} ({r['best_step'] // epoch})"
                              + ("*" if r["early_stopped"] else ""))
    if not r["early_stopped"]:  # Ended by its command's cap or by a SIGTERM.
      cell["epochs_ended"].add(r["stopped_step"] // epoch)
    # Runs from before study_clock.json have only their last call's wall time.
    cell["wall_min"].append(r.get("wall_s_total", r["wall_s"]) / 60)
    cell["wall_partial"].append("wall_s_total" not in r)
    # Runs before result.json recorded it were tested on the default 10k examples unless
    # their result.json says otherwise.
    cell["num_test"].append(r.get("num_test", 10_000))
  return out


def budgets_note(cell) -> str:
  """' (epochs run a, b)' when a cell's seeds that patience did not stop ran different
  numbers of epochs (their caps differed, or one was cut by a SIGTERM: their mean mixes
  training budgets; the 'Epochs run' table gives each seed's), else ''."""
  ended = sorted(cell["epochs_ended"])
  return f" (epochs run {', '.join(map(str, ended))})" if len(ended) > 1 else ""


def _fmt(values, fmt):
  """One seed's value, or 'mean ± sd (seeds)' with the sample standard deviation (n - 1)."""
  if len(values) == 1:
    return format(values[0], fmt)
  return (f"{format(np.mean(values), fmt)} ± {format(np.std(values, ddof=1), fmt)} "
          f"({len(values)})")


def commands_table(rows) -> list[str]:
  """Markdown rows: each command that finished runs (result.json's ``command``), and which."""
  by_command = {}
  for r in sorted(rows, key=lambda r: (r["n"], r["seed"], r["model"])):
    command = r.get("command", "not recorded (finished before runs kept their command; "
                               "the prose above gives it)")
    by_command.setdefault(command, []).append(f"{r['model']} n={r['n']} s{r['seed']}")
  return ["| command | runs |", "|---|---|"] + [
      f"| {c if c.startswith('not recorded') else f'`{c}`'} | {', '.join(runs)} |"
      for c, runs in by_command.items()]


def summary_table(rows) -> list[str]:
  """The study at a glance (docs/reproduction.md): each model's test MSE at every n, mean ±
  sample sd with the number of seeds (one seed: '(1)'), a test set under 10k marked, and the
  paper's Table 6 value at n=200 beside; a cell without a finished run says 'not run'."""
  cells = summarize(rows)
  models = [m for m in msum_config.STUDY_MODELS if any(k[0] == m for k in cells)]
  lengths = sorted({k[1] for k in cells})

  def cell(m, n):
    if (m, n) not in cells:
      return "not run"
    values, num_test = cells[(m, n)]["mse"], min(cells[(m, n)]["num_test"])
    return ((_fmt(values, ".4f") if len(values) > 1 else f"{values[0]:.4f} (1)")
            + (f" (test {num_test:,})" if num_test < 10_000 else "") + budgets_note(cells[(m, n)]))

  return (["| model | paper, n=200 | " + " | ".join(f"n={n}" for n in lengths) + " |",
           "|---|---|" + "---|" * len(lengths)]
          + [f"| {NAMES[m]} | {PAPER_N200.get(m, '-')} | "
             + " | ".join(cell(m, n) for n in lengths) + " |" for m in models])


def write_docs(rows, out_dir: str, command: str, tiny: bool) -> None:
  """Writes the figures, the raw numbers and the generated tables of masked_summation.md,
  and the summary table of ``out_dir``/reproduction.md where that page is."""
  os.makedirs(out_dir, exist_ok=True)
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  import matplotlib.ticker  # pylint: disable=g-import-not-at-top
  cells = summarize(rows)
  models = [m for m in msum_config.STUDY_MODELS if any(k[0] == m for k in cells)]
  lengths = sorted({k[1] for k in cells})
  fileio.write_json_atomic(os.path.join(out_dir, "masked_summation_results.json"),
                       {"command": command, "runs": rows})
  k = run_config("star", 200, 0, tiny).data.num_masked
  for key, fname, ylabel in (
      ("mse", "masked_summation_mse.png", "test MSE (mean over seeds)"),
      ("time_ms", "masked_summation_time.png", "CPU test time per batch of 500 (ms)")):
    plt.figure(figsize=(5.5, 3.8))
    for m in models:
      # Fig. 3b: CPU runs only (a GPU run's time is another machine's).
      points = [(n, [v for v, g in zip(cells[(m, n)][key], cells[(m, n)]["gpu"])
                     if key not in TIMES or not g])
                for n in lengths if (m, n) in cells]
      points = [(n, v) for n, v in points if v]
      colour, marker = STYLE[m]
      plt.plot([n for n, _ in points], [np.mean(v) for _, v in points], color=colour,
               marker=marker, label=m)
    if key == "mse":
      plt.axhline(guess_mse(k), ls="--", c="gray", label="k/2 guess")
      plt.yscale("log")
    plt.xscale("log")
    plt.gca().xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    plt.xticks(lengths, [str(n) for n in lengths])
    plt.xlabel("sequence length n (rows)")
    plt.ylabel(ylabel)
    plt.title("Fig. 3" + ("a" if key == "mse" else "b") + f" (k={k}, d=10)", fontsize=9)
    plt.legend(fontsize=7)
    plt.tight_layout()
    fileio.save_figure_atomic(plt.gcf(), os.path.join(out_dir, fname), dpi=110)
    plt.close()
  # Learning curves (dev MSE per epoch): a panel per model, a colour per n, every seed drawn
  # (one legend entry per n: a legend entry per run squeezed the axes away at ~40 runs).
  cols = max(1, (len(models) + 1) // 2)
  fig, axes = plt.subplots(-(-len(models) // cols), cols, figsize=(2.6 * cols + 0.6, 5.2),
                           sharey=True, squeeze=False)
  shade = {n: plt.get_cmap("viridis")(i / max(1, len(lengths) - 1) * 0.9)
           for i, n in enumerate(lengths)}
  for ax, m in zip(axes.flat, models):
    drawn = set()
    for r in sorted((r for r in rows if r["model"] == m), key=lambda r: (r["n"], r["seed"])):
      steps = [h["step"] for h in r["eval_history"]]
      epoch = steps[0] if steps else 1
      ax.plot([s / epoch for s in steps], [h["mse"] for h in r["eval_history"]],
              color=shade[r["n"]], marker=STYLE[m][1], markersize=2, lw=0.8,
              label=None if r["n"] in drawn else f"n={r['n']}")
      drawn.add(r["n"])
    ax.axhline(guess_mse(k), ls="--", c="gray", lw=0.8)
    ax.set_yscale("log")
    ax.set_title(m, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6)
  for ax in axes.flat[len(models):]:
    ax.axis("off")
  fig.supxlabel("epoch (10k examples); dashed: the k/2 guess", fontsize=8)
  fig.supylabel("dev MSE", fontsize=8)
  fig.tight_layout()
  fileio.save_figure_atomic(fig, os.path.join(out_dir, "masked_summation_curves.png"), dpi=110)
  plt.close(fig)

  def table(key, fmt, mark_small_test=False, mark_partial_wall=False, mark_budgets=False):
    out = ["| model | " + " | ".join(f"n={n}" for n in lengths) + " |",
           "|---|" + "---|" * len(lengths)]

    def cell(m, n):
      if (m, n) not in cells:
        return "not run"
      values = cells[(m, n)][key]
      gpu = cells[(m, n)]["gpu"]
      if key in TIMES and any(gpu):  # CPU runs' value, then the GPU runs' apart.
        cpu_values = [v for v, g in zip(values, gpu) if not g]
        return "; ".join(([_fmt(cpu_values, fmt)] if cpu_values else [])
                         + [f"GPU {_fmt([v for v, g in zip(values, gpu) if g], fmt)}"])
      text = ", ".join(values) if fmt == "s" else _fmt(values, fmt)
      if mark_small_test and min(cells[(m, n)]["num_test"]) < 10_000:
        text += f" (test {min(cells[(m, n)]['num_test']):,})"
      if mark_partial_wall and any(cells[(m, n)]["wall_partial"]):
        text += " (last call only)"
      if mark_budgets:
        text += budgets_note(cells[(m, n)])
      return text

    for m in models:
      out.append(f"| {m} | " + " | ".join(cell(m, n) for n in lengths) + " |")
    return out

  dev = jax.devices()[0]
  # Times of two CPU models do not compare; runs before 25 Nov 2026 did not record theirs.
  # From 25 Nov (ninth session) runs also record their allocator (longtext_jax/hostenv.py).
  counts = collections.Counter(
      r.get("host", "not recorded") + (f"; {r['allocator']}" if "allocator" in r else "")
      + (f"; {r['device']}" if on_gpu(r) else "")
      for r in rows)
  hosts = "; ".join(f"{h} ({c} run{'s' * (c > 1)})" for h, c in sorted(counts.items()))
  lines = [BEGIN, "",
           f"Tables last written by `{command}` (the command that finished each run: the "
           f"last table); device: {dev.platform.upper()} ({os.cpu_count()} cores, "
           f"shared, noisy), jax {jax.__version__}; host CPU of the runs: {hosts}. Cells: "
           "mean ± sample sd (n - 1; number of seeds) or the one seed's value; in the time "
           "tables a run on a GPU is given apart ('GPU ...'; Fig. 3b draws CPU runs "
           "only).", "",
           "### Test MSE (best dev checkpoint, 10k fresh test examples unless marked; "
           "'epochs run a, b': seeds not stopped by patience ran different numbers of "
           "epochs, by their caps or a SIGTERM)", "",
           *table("mse", ".4f", mark_small_test=True, mark_budgets=True), "",
           f"The k/2 guess has MSE k/12 = {guess_mse(k):.3f}. Paper, n=200 (Table 6): " +
           ", ".join(f"{m} {v}" for m, v in PAPER_N200.items()) + ".", "",
           "### Test time (ms per batch of 500, jit forward, median of 3 after a warm-up)", "",
           *table("time_ms", ".1f"), "",
           "### Training steps to the best dev MSE", "",
           *table("epochs", ".0f"), "",
           "### Epochs run (best epoch); * = stopped by patience, otherwise by the epoch cap "
           "of its command or by SIGTERM (the prose says which)", "",
           *table("epochs_run", "s"), "",
           "### Wall minutes per run (training over every call that trained it, then test "
           "and timing; runs from before the study clock count only their last call)", "",
           *table("wall_min", ".0f", mark_partial_wall=True), "",
           "![Fig. 3a: test MSE vs n](masked_summation_mse.png) "
           "![Fig. 3b: test time vs n](masked_summation_time.png)", "",
           "![dev MSE per epoch](masked_summation_curves.png)", "",
           "### The command that finished each run (earlier calls may have trained it)", "",
           *commands_table(rows), "", END]
  path = os.path.join(out_dir, "masked_summation.md")
  text = open(path).read() if os.path.exists(path) else "# Masked summation\n\n"
  if BEGIN in text and END in text:
    text = text[:text.index(BEGIN)] + "\n".join(lines) + text[text.index(END) + len(END):]
  else:
    text = text.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
  fileio.write_text_atomic(path, text)  # A hand-written page: never left cut.
  summary = os.path.join(out_dir, "reproduction.md")
  if os.path.exists(summary):
    study_lib.write_between_markers(summary, SUMMARY, [
        "", "Generated from [masked_summation_results.json](masked_summation_results.json) "
        f"({len(rows)} finished runs) by `experiments/masked_summation.py` (redraw: `python "
        "experiments/masked_summation.py --docs_only`): test MSE of the best dev checkpoint "
        "on 10k fresh examples, mean ± sample sd (seeds); the k/2 guess is "
        f"{guess_mse(k):.3f}. Per run and per epoch: [masked_summation.md]"
        "(masked_summation.md).", "", *summary_table(rows), ""], what="masked-summation summary")


# Dev evaluations (epochs) without improvement before a run stops: DEFAULT_PATIENCE for every
# model except the LSTMs. They sit on the k/2 guess (dev MSE ~0.83) for an initial plateau
# that grows with n (2, 6, 8 and 12 epochs at n = 50, 100, 200, 400; docs/masked_summation.md),
# so patience 5 stopped the LSTM at n=400 on its plateau and reported the guess, not the model.
DEFAULT_PATIENCE = 5
PATIENCE = {"lstm": 30, "bilstm": 30}
# The epoch caps the CPU runs of docs/masked_summation.md used (``--max_epochs cpu``): 12
# for the attention models, RAN and the S-LSTM (their dev MSE flattens within it or the
# session ends), 30 for the LSTMs, whose plateau at the guess alone lasts up to 12 epochs.
CPU_MAX_EPOCHS = "12,lstm=30,bilstm=30"


def epoch_caps(text: str, models: list[str]) -> dict[str, int]:
  """``--max_epochs``: model -> epoch cap, 0 keeping the config's (PAPER_MAX_EPOCHS).

  ``text`` is an integer for every model, ``cpu`` (CPU_MAX_EPOCHS), or a comma list of
  ``<model>=<epochs>`` entries with at most one bare integer for the models not named.
  """
  text = CPU_MAX_EPOCHS if text.strip() == "cpu" else text
  default, caps = None, {}
  for item in text.split(","):
    name, eq, value = item.strip().rpartition("=")
    if not value.isdigit() or (eq and not name):
      raise ValueError(f"--max_epochs: {item.strip()!r} is neither <epochs> nor "
                       "<model>=<epochs> (epochs a whole number)")
    if not eq:
      if default is not None:
        raise ValueError(f"--max_epochs {text!r}: more than one cap without a model")
      default = int(value)
    elif name not in msum_config.STUDY_MODELS:
      raise ValueError(f"--max_epochs: unknown model {name!r}; choose from "
                       f"{list(msum_config.STUDY_MODELS)}")
    else:
      caps[name] = int(value)
  return {m: caps.get(m, default or 0) for m in models}


def recorded_command(argv: list[str]) -> str:
  """The command line kept in each result.json and the docs, less ``--out_dir``: where the
  tables go changes no run, and a scratch folder's path would only mislead a reader."""
  kept, skip = [], False
  for arg in argv:
    if skip:
      skip = False
    elif arg == "--out_dir":
      skip = True
    elif not arg.startswith("--out_dir="):
      kept.append(arg)
  return " ".join(["python experiments/masked_summation.py"] + kept)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  size = parser.add_mutually_exclusive_group()
  size.add_argument("--full", action="store_true",
                    help="the paper's setting (configs/masked_summation.py:<model>,paper)")
  size.add_argument("--tiny", action="store_true", help="seconds-long runs (tests)")
  parser.add_argument("--models", default=",".join(msum_config.STUDY_MODELS))
  parser.add_argument("--lengths", default="50,100,200,400,800")
  parser.add_argument("--seeds", default="0,1,2")
  parser.add_argument("--patience", type=int, default=None,
                      help="dev evaluations (epochs) without improvement before stopping; "
                           "default: PATIENCE per model (the LSTMs' initial plateau at the "
                           "k/2 guess lasts longer as n grows)")
  parser.add_argument("--max_epochs", default="0",
                      help="epoch cap: N for every model, 'cpu' (the caps of the CPU runs: "
                           f"{CPU_MAX_EPOCHS}), or '<model>=N,...' with one bare N for "
                           "the rest; 0 keeps the config's cap")
  checkpoints_flag = study_lib.add_checkpoints_flag(parser, "epoch")
  parser.add_argument("--num_test", type=int, default=None,
                      help=f"test examples per run (default {10_000:,}; 16 with the tiny size)")
  parser.add_argument("--workdir", default=None,
                      help="run folders (default runs/masked_summation; with --tiny "
                           "runs/masked_summation_tiny)")
  parser.add_argument("--out_dir", default=None,
                      help="where the tables, figures and results JSON go (default docs/; "
                           "with --tiny runs/masked_summation_tiny/docs: a tiny run never "
                           "writes into the docs, nor its runs among the paper-setting "
                           "runs, unless told to)")
  parser.add_argument("--docs_only", action="store_true",
                      help="only redraw the docs from the finished runs in --workdir "
                           "and those recorded in the results JSON")
  parser.add_argument("--restore", action="store_true",
                      help="first write the result.json of every run recorded in "
                           "<out_dir>/masked_summation_results.json that --workdir lacks (a "
                           "lost or new workdir): those runs are not trained again (the "
                           "docs keep every recorded run with or without it)")
  args = parser.parse_args(argv)
  if args.num_test is None:  # Given with a tiny size too, it is used (it was ignored).
    args.num_test = 16 if args.tiny else 10_000
  if not (args.full or args.tiny or args.docs_only):
    parser.error("choose --full (the paper's setting), --tiny or --docs_only")
  home = os.path.join(ROOT, "runs", "masked_summation_tiny") if args.tiny else None
  args.workdir = args.workdir or home or os.path.join(ROOT, "runs", "masked_summation")
  args.out_dir = args.out_dir or (os.path.join(home, "docs") if home else
                                  os.path.join(ROOT, "docs"))
  models = args.models.split(",")
  unknown = set(models) - set(msum_config.STUDY_MODELS)
  if unknown:
    parser.error(f"--models: unknown {sorted(unknown)}; choose from "
                 f"{list(msum_config.STUDY_MODELS)}")
  try:
    caps = epoch_caps(args.max_epochs, models)
  except ValueError as e:
    parser.error(str(e))
  command = recorded_command(sys.argv[1:] if argv is None else argv)
  results_path = os.path.join(args.out_dir, "masked_summation_results.json")
  if args.restore:
    restored = restore(results_path, args.workdir)
    print(f"restored {len(restored)} finished runs into {args.workdir}", flush=True)
  drawn = False  # Whether this call drew the docs after a run it finished.
  if not args.docs_only:
    for n in [int(x) for x in args.lengths.split(",")]:
      for seed in [int(x) for x in args.seeds.split(",")]:
        for model in models:
          config = run_config(model, n, seed, args.tiny)
          if caps[model]:
            config.train.num_steps = caps[model] * config.train.eval_every
          study_lib.set_checkpoint_every(parser, config, args, checkpoints_flag)
          workdir = os.path.join(args.workdir, f"{model}_n{n}_s{seed}")
          finished = os.path.exists(os.path.join(workdir, "result.json"))
          t0 = time.perf_counter()
          patience = (PATIENCE.get(model, DEFAULT_PATIENCE) if args.patience is None
                      else args.patience)
          result = study_lib.train_and_test(config, workdir, patience,
                                            args.num_test,
                                            command=command)
          print(json.dumps({"model": model, "n": n, "seed": seed,
                            "test_mse": result["test"]["mse"],
                            "best_step": result["best_step"],
                            "s": round(time.perf_counter() - t0, 1)}), flush=True)
          if not finished:  # Drawn as each run finishes; a skipped run changes nothing.
            write_docs(docs_rows(args.workdir, results_path), args.out_dir, command,
                       args.tiny)
            drawn = True
  rows = docs_rows(args.workdir, results_path)
  if not rows:
    print(f"no finished runs in {args.workdir} nor recorded in {results_path}: nothing to "
          "draw", flush=True)
    return rows
  if not drawn:  # --docs_only, or every run already finished.
    write_docs(rows, args.out_dir, command, args.tiny)
  return rows


if __name__ == "__main__":
  main()
