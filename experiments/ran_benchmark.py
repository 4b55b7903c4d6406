"""RAN speed and memory: parallel vs scan vs windowed attention vs the full Transformer.

For each length L: median forward+backward time of one training-style step (loss on the
sequence and pooled outputs, gradients w.r.t. parameters), compile time, and the compiled
memory (``jax.jit(f).lower(...).compile().memory_analysis()``: temporaries + arguments +
outputs). Times are reported as ratios to RAN 'parallel' from the same run.

Models, same width D, depth, heads and window W:
  * ran_parallel: RAN impl='parallel' (GPC-only scan, token attention of all windows at once).
  * ran_scan: RAN impl='scan' (one (1 + W)-row attention per scan step).
  * windowed: the floor: RAN's token path without GPC or memory review (LN, q/k/v, attention
    inside each window, output projection, SN), all windows in parallel.
  * transformer: longtext_jax.encoders.Transformer (full O(L^2) attention, with its MLP).

Usage (CPU, a few minutes):
  python experiments/ran_benchmark.py --lengths=1024,2048,4096,8192,16384 \
      --max_time_len=16384 --transformer_max_time_len=4096 --out=/tmp/ran_bench.json \
      --plot=docs/ran_benchmark.png
  # Redraw the recorded figure from its JSON (no measuring):
  python experiments/ran_benchmark.py --replot=docs/ran_benchmark_cpu_run2.json \
      --plot=docs/ran_benchmark.png
"""
from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp

from longtext_jax import fileio
from longtext_jax.encoders import RAN, Transformer, WindowedAttention
from longtext_jax.train import benchmark as harness

MODELS = ("ran_parallel", "ran_scan", "windowed", "transformer")


def build(name, args):
  """Model ``name`` (see the module docstring) at the command line's width and depth."""
  common = dict(num_layers=args.layers, num_heads=args.heads)
  if name == "ran_parallel":
    return RAN(window_size=args.window, impl="parallel", attention_block=args.attention_block,
               **common)
  if name == "ran_scan":
    return RAN(window_size=args.window, impl="scan", **common)
  if name == "windowed":
    return WindowedAttention(window_size=args.window, attention_block=args.attention_block,
                             **common)
  if name == "transformer":
    return Transformer(dropout_rate=0.0, scan_layers=True, **common)
  raise ValueError(f"unknown model {name!r}; choose from {MODELS}")


def compile_step(name, length, args):
  """Compiles one forward+backward step; returns (row, (compiled, inputs))."""
  model = build(name, args)
  x = jax.random.normal(jax.random.PRNGKey(0), (args.batch, length, args.d_model))
  mask = jnp.ones((args.batch, length), jnp.bool_)
  params = jax.jit(model.init)(jax.random.PRNGKey(1), x[:, :args.window], mask[:, :args.window])

  def loss(p, x):
    out = model.apply(p, x, mask)
    return jnp.mean(out.sequence ** 2) + jnp.mean(out.pooled ** 2)

  compiled, compile_s = harness.compile_fn(jax.value_and_grad(loss), (params, x))
  mem = harness.memory(compiled)
  row = dict(model=name, length=length, compile_s=compile_s, mem_bytes=mem["mem_bytes"],
             temp_bytes=mem["temp_bytes"])
  return row, (compiled, (params, x))


def measure_length(length, args):
  """All models at one length; timing rounds interleave the models so that a shared,
  fluctuating CPU load affects them alike (the ratios come from the same rounds)."""
  rows, entries = [], {}
  for name in args.models.split(","):
    limit = args.transformer_max_time_len if name == "transformer" else args.max_time_len
    row, entry = compile_step(name, length, args)
    rows.append(row)
    if length <= limit:
      entries[name] = entry
  seconds, times = harness.time_interleaved(entries, args.repeats, reduce="median")
  for row in rows:
    if row["model"] in seconds:
      row["time_s"], row["times_s"] = seconds[row["model"]], times[row["model"]]
  return rows


def main(argv=None):
  """Command line: see the module docstring."""
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--lengths", default="1024,2048,4096,8192,16384")
  ap.add_argument("--models", default="ran_parallel,ran_scan,windowed,transformer")
  ap.add_argument("--d_model", type=int, default=128)
  ap.add_argument("--layers", type=int, default=2)
  ap.add_argument("--heads", type=int, default=4)
  ap.add_argument("--window", type=int, default=256)
  ap.add_argument("--batch", type=int, default=1)
  ap.add_argument("--attention_block", type=int, default=0,
                  help="ran_parallel and windowed: windows per attention call (0 = all; "
                       "1 is fastest on CPUs)")
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--max_time_len", type=int, default=16384,
                  help="time models only up to this length (memory/compile for all)")
  ap.add_argument("--transformer_max_time_len", type=int, default=4096)
  ap.add_argument("--out", default="")
  ap.add_argument("--plot", default="")
  ap.add_argument("--replot", default="",
                  help="a recorded --out JSON: only redraw its figure into --plot")
  args = ap.parse_args(argv)
  if args.replot:
    replot(args.replot, args.plot or args.replot.replace(".json", ".png"))
    return
  rows = []
  print(f"device: {jax.devices()[0].device_kind} x{jax.device_count()}, backend "
        f"{jax.default_backend()}", flush=True)
  for length in [int(s) for s in args.lengths.split(",")]:
    for row in measure_length(length, args):
      rows.append(row)
      harness.emit(row)
  print_table(rows)
  if args.out:
    fileio.write_json_atomic(
        args.out, dict(args=vars(args), device=str(jax.devices()[0]), rows=rows))
  if args.plot:
    plot(rows, args.plot, title=f"{jax.devices()[0]}: D={args.d_model}, {args.layers} layers, "
         f"{args.heads} heads, window {args.window}, batch {args.batch}")


def print_table(rows):
  """Prints the markdown table of times (ratio to ran_parallel), memory and compile time."""
  by = {(r["model"], r["length"]): r for r in rows}
  models = sorted({r["model"] for r in rows}, key=MODELS.index)
  lengths = sorted({r["length"] for r in rows})
  print("\n| L | " + " | ".join(f"{m} time (x par.)" for m in models) + " | "
        + " | ".join(f"{m} mem MiB" for m in models) + " | "
        + " | ".join(f"{m} compile s" for m in models) + " |")
  print("|---" * (1 + 3 * len(models)) + "|")
  for length in lengths:
    base = by.get(("ran_parallel", length), {}).get("time_s")
    cells = []
    for m in models:
      t = by.get((m, length), {}).get("time_s")
      cells.append("-" if t is None else f"{t * 1e3:.0f} ms" + (
          f" ({t / base:.2f}x)" if base else ""))
    for m in models:
      mb = by.get((m, length), {}).get("mem_bytes")
      cells.append("-" if mb is None else f"{mb / 2**20:.0f}")
    for m in models:
      c = by.get((m, length), {}).get("compile_s")
      cells.append("-" if c is None else f"{c:.1f}")
    print(f"| {length} | " + " | ".join(cells) + " |")


def plot(rows, path, title=""):
  """Time and compiled memory against length (log axes), saved to ``path``.

  One colour and marker per model (``longtext_jax.plot.MODEL_STYLES``).

  Args:
    rows: the measured rows (``rows`` of the ``--out`` JSON).
    path: the PNG to write.
    title: the figure's title (device and sizes).

  Returns:
    The figure.
  """
  from matplotlib.figure import Figure
  from longtext_jax import plot as plot_lib
  names = [m for m in ("ran_parallel", "ran_scan", "windowed", "transformer")
           if any(r["model"] == m for r in rows)]
  names += sorted({r["model"] for r in rows} - set(names))
  styles = plot_lib.styles_for(names)
  fig = Figure(figsize=(11, 4.3), layout="constrained")
  axes = fig.subplots(1, 2)
  for m in names:
    rs = sorted((r for r in rows if r["model"] == m), key=lambda r: r["length"])
    t = [(r["length"], r["time_s"]) for r in rs if r.get("time_s")]
    if t:
      axes[0].plot(*zip(*t), label=m, **styles[m])
    mm = [(r["length"], r["mem_bytes"] / 2**20) for r in rs if r.get("mem_bytes")]
    if mm:
      axes[1].plot(*zip(*mm), label=m, **styles[m])
  axes[0].set(ylabel="forward+backward time per step (s)", title="median step time")
  axes[1].set(ylabel="compiled memory (MiB)", title="XLA memory_analysis")
  for a in axes:
    plot_lib.set_length_ticks(a, [r["length"] for r in rows])
    a.set_xlabel("sequence length L (tokens)")
    a.set_yscale("log")
    a.grid(True, which="both", alpha=0.3)
    a.legend(fontsize=8)
  if title:
    fig.suptitle(title, fontsize=9)
  fileio.save_figure_atomic(fig, path, dpi=110)
  return fig


def replot(json_path, path):
  """Redraws the figure of a recorded run (the ``--out`` JSON) into ``path``."""
  with open(json_path) as f:
    rec = json.load(f)
  a = rec["args"]
  plot(rec["rows"], path, title=f"{rec.get('device', '?')}: D={a['d_model']}, "
       f"{a['layers']} layers, {a['heads']} heads, window {a['window']}, batch {a['batch']}")


if __name__ == "__main__":
  main()
