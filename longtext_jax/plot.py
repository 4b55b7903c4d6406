"""Training curves from ``metrics.jsonl`` and the house plot style (one colour+marker a model).

Command line (several workdirs share one figure, one colour and marker per run)::

  python -m longtext_jax.plot --workdir=runs/x --workdir=runs/y --out=curves.png

From Python (a notebook shows the returned figure inline)::

  from longtext_jax import plot
  fig = plot.plot_runs(["runs/x", "runs/y"])

The figures are plain ``matplotlib.figure.Figure`` objects made without ``pyplot``: no
backend is chosen here, so a notebook keeps its inline backend and a script needs no display.
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import os
import sys
from typing import Iterable, Mapping, Sequence

from absl import logging

from longtext_jax import fileio

# Fixed styles for the models the experiments compare, so a model looks the same in every
# figure. Aliases of one model (ran / ran_parallel) share its style; different models
# share neither colour nor marker.
MODEL_STYLES: dict[str, tuple[str, str]] = {
    "transformer": ("tab:blue", "o"),
    "windowed": ("tab:orange", "s"),
    "windowed_attention": ("tab:orange", "s"),
    "ran": ("tab:green", "^"),
    "ran_parallel": ("tab:green", "^"),
    "ran_scan": ("tab:olive", "v"),
    "star_transformer": ("tab:red", "D"),
    "star": ("tab:red", "D"),
    "star_ffn": ("darkred", "d"),
    "slstm": ("tab:purple", "P"),
    "bilstm": ("tab:brown", "X"),
    "lstm": ("tab:pink", "*"),
    "bert": ("tab:cyan", "<"),
    "bert_first": ("tab:gray", ">"),
    "bert_random": ("navy", "h"),
    "to_bert": ("darkgoldenrod", "p"),
    "tobert": ("darkgoldenrod", "p"),
    "chunk_bert": ("black", "8"),
    "chunkbert": ("black", "8"),
}
# Styles for names not in MODEL_STYLES (and for runs), taken in order, skipping the
# colours already used in the same figure.
_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
            "tab:pink", "tab:gray", "tab:olive", "tab:cyan", "black", "navy", "darkred",
            "darkgoldenrod", "teal", "magenta")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p", "8", "d", "H", "1")


def styles_for(names: Sequence[str], fixed: bool = True) -> dict[str, dict[str, str]]:
  """One distinct ``{'color', 'marker'}`` per name (for ``ax.plot(..., **style)``).

  Args:
    names: the series of one figure (model names, run labels).
    fixed: use ``MODEL_STYLES`` for the names it knows (the same look in every figure).

  Returns:
    ``{name: {'color': c, 'marker': m}}``; within one call no two names share a colour or
    a marker as long as there are at most 16 names, and never a (colour, marker) pair.
  """
  out: dict[str, dict[str, str]] = {}
  used_colours, used_markers, used_pairs = set(), set(), set()
  for name in names:
    if fixed and name in MODEL_STYLES and MODEL_STYLES[name][0] not in used_colours:
      colour, marker = MODEL_STYLES[name]
      out[name] = {"color": colour, "marker": marker}
      used_colours.add(colour)
      used_markers.add(marker)
      used_pairs.add((colour, marker))
  colours = [c for c in _COLOURS if c not in used_colours] or list(_COLOURS)
  markers = [m for m in _MARKERS if m not in used_markers] or list(_MARKERS)
  k = 0
  for name in names:
    if name in out:
      continue
    colour, j = colours[k % len(colours)], k
    while (colour, markers[j % len(markers)]) in used_pairs:
      j += 1
    out[name] = {"color": colour, "marker": markers[j % len(markers)]}
    used_pairs.add((colour, markers[j % len(markers)]))
    k += 1
  return out


def spans_decades(values: Iterable[float], ratio: float = 30.0) -> bool:
  """Whether ``values`` are all positive and their max/min is at least ``ratio``.

  Args:
    values: the data of one axis.
    ratio: the spread from which a log scale reads better than a linear one.

  Returns:
    True when a log scale should be used.
  """
  vs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
  return bool(vs) and min(vs) > 0 and max(vs) / min(vs) >= ratio


def set_length_ticks(ax, lengths: Iterable[int]) -> None:
  """Log-2 x axis ticked at exactly ``lengths``, written as plain numbers (512, 2048, 32k).

  Args:
    ax: a matplotlib Axes.
    lengths: the sequence lengths measured.
  """
  from matplotlib.ticker import NullLocator  # pylint: disable=g-import-not-at-top
  ls = sorted({int(n) for n in lengths})
  ax.set_xscale("log", base=2)
  ax.xaxis.set_minor_locator(NullLocator())
  ax.set_xticks(ls, [f"{n // 1024}k" if n >= 16384 and n % 1024 == 0 else str(n) for n in ls])


def read_metrics(workdir: str) -> list[dict]:
  """The records of ``workdir/metrics.jsonl`` (``{"step", "split", <metric>: float}``).

  A step logged twice (a run resumed from an earlier checkpoint) keeps its last record.

  Args:
    workdir: a run directory written by ``longtext_jax.train.train_and_evaluate``.

  Returns:
    The records sorted by (split, step).

  Raises:
    FileNotFoundError: no ``metrics.jsonl`` in ``workdir``.
    ValueError: a line is not a JSON object with ``step`` and ``split`` (file and line named;
      a last line without its newline, cut by a kill, is skipped with a warning).
  """
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    raise FileNotFoundError(
        f"{path} not found: --workdir must be a run directory written by training "
        f"(it holds config.json, metrics.jsonl, checkpoints/)")
  latest: dict[tuple[str, int], dict] = {}
  with open(path) as f:
    lines = f.read().split("\n")
  for n, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      rec = json.loads(line)
      key = (str(rec["split"]), int(rec["step"]))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
      if n == len(lines):  # The last line, without its newline: cut by a kill. The trainer
        # drops it when the run resumes; a plot of a running or killed run skips it.
        logging.warning("%s:%d: skipped the last line, cut short (a run killed while "
                        "writing it)", path, n)
        continue
      raise ValueError(f"{path}:{n}: not a metrics record with 'step' and 'split' "
                       f"({e}): {line.strip()[:120]}") from None
    latest[key] = rec
  return [latest[k] for k in sorted(latest)]


def default_metrics(runs: Mapping[str, list[dict]]) -> list[str]:
  """The panels drawn by default: ``loss``, then every other eval metric (first seen first).

  Args:
    runs: ``{label: records}``.

  Returns:
    Metric names.
  """
  names = ["loss"]
  for recs in runs.values():
    for r in recs:
      if r["split"] != "train":
        names += [k for k in r if k not in ("step", "split") and k not in names]
  return names


def plot_runs(workdirs: Sequence[str], metrics: Sequence[str] | None = None,
              labels: Sequence[str] | None = None, ncols: int = 3):
  """Train (solid) and eval (dashed, hollow markers) curves of one or more runs.

  One panel per metric; one colour and marker per run. A panel's y axis is logarithmic
  when its values span decades (e.g. a loss falling from 2 to 1e-4).

  Args:
    workdirs: run directories (each with a ``metrics.jsonl``).
    metrics: the metrics to draw, one panel each; default: ``loss`` and every eval metric.
    labels: the legend name of each run; default: the workdir's base name (made unique).
    ncols: panels per row.

  Returns:
    The ``matplotlib.figure.Figure`` (no pyplot state: save it or let a notebook show it).

  Raises:
    ValueError: no workdir, labels of the wrong length, or a metric that no run logged
      (the logged names are listed).
  """
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  if not workdirs:
    raise ValueError("plot_runs: give at least one workdir")
  if labels is None:
    labels = [os.path.basename(os.path.normpath(w)) or w for w in workdirs]
    if len(set(labels)) < len(labels):
      labels = [os.path.normpath(w) for w in workdirs]
  if len(labels) != len(workdirs):
    raise ValueError(f"plot_runs: {len(labels)} labels for {len(workdirs)} workdirs")
  runs = {label: read_metrics(w) for label, w in zip(labels, workdirs)}
  metrics = list(metrics) if metrics else default_metrics(runs)
  logged = sorted({k for recs in runs.values() for r in recs for k in r
                   if k not in ("step", "split")})
  missing = [m for m in metrics if m not in logged]
  if missing:
    raise ValueError(f"metric(s) {missing} not in any metrics.jsonl of {list(workdirs)}; "
                     f"logged: {logged}")
  ncols = max(1, min(ncols, len(metrics)))
  nrows = math.ceil(len(metrics) / ncols)
  fig = Figure(figsize=(4.2 * ncols, 3.2 * nrows), layout="constrained")
  axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
  style = styles_for(list(runs), fixed=False)
  for ax, metric in zip(axes, metrics):
    values = []
    for label, recs in runs.items():
      by_split = collections.defaultdict(list)
      for r in recs:
        if metric in r:
          by_split[r["split"]].append((r["step"], float(r[metric])))
      for split, points in sorted(by_split.items(), key=lambda kv: kv[0] != "train"):
        steps, ys = zip(*points)
        values += ys
        train = split == "train"
        # Solid train, dashed eval, dotted test (a held-out split must not pass for eval).
        ax.plot(steps, ys, label=f"{label} {split}",
                linestyle="-" if train else ":" if split == "test" else "--",
                markersize=4 if train else 6,
                markerfacecolor=style[label]["color"] if train else "none", **style[label])
    ax.set_xlabel("training step")
    ax.set_ylabel(metric)
    ax.set_title(metric)
    if spans_decades(values):
      ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
  for ax in axes[len(metrics):]:
    ax.set_visible(False)
  return fig


def main(argv: Sequence[str] | None = None) -> int:
  """``python -m longtext_jax.plot --workdir=A [--workdir=B ...] --out=curves.png``."""
  p = argparse.ArgumentParser(prog="python -m longtext_jax.plot",
                              description="Train/eval curves of runs from their metrics.jsonl.")
  p.add_argument("--workdir", action="append", required=True,
                 help="a run directory; repeat to compare runs on one figure")
  p.add_argument("--out", default="",
                 help="the PNG to write (default: <first workdir>/curves.png)")
  p.add_argument("--metrics", default="",
                 help="comma-separated metrics, one panel each (default: loss + eval metrics)")
  p.add_argument("--labels", default="", help="comma-separated legend names, one per workdir")
  args = p.parse_args(argv)
  try:
    fig = plot_runs(args.workdir,
                    metrics=[m for m in args.metrics.split(",") if m] or None,
                    labels=[s for s in args.labels.split(",") if s] or None)
  except (FileNotFoundError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  out = args.out or os.path.join(args.workdir[0], "curves.png")
  fileio.save_figure_atomic(fig, out, dpi=110)
  print(f"Curves: {out}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
