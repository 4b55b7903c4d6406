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
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp

from longtext_jax.encoders import RAN, Transformer, WindowedAttention


def build(name, args):
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
  raise ValueError(name)


def compile_step(name, length, args):
  """Compiles one forward+backward step; returns (row, run) with run() -> seconds."""
  model = build(name, args)
  x = jax.random.normal(jax.random.PRNGKey(0), (args.batch, length, args.d_model))
  mask = jnp.ones((args.batch, length), jnp.bool_)
  params = jax.jit(model.init)(jax.random.PRNGKey(1), x[:, :args.window], mask[:, :args.window])

  def loss(p, x):
    out = model.apply(p, x, mask)
    return jnp.mean(out.sequence ** 2) + jnp.mean(out.pooled ** 2)

  step = jax.jit(jax.value_and_grad(loss))
  t0 = time.perf_counter()
  compiled = step.lower(params, x).compile()
  compile_s = time.perf_counter() - t0
  mem = compiled.memory_analysis()
  mem_bytes = None
  if mem is not None:
    mem_bytes = (mem.temp_size_in_bytes + mem.argument_size_in_bytes
                 + mem.output_size_in_bytes - getattr(mem, "alias_size_in_bytes", 0))
  row = dict(model=name, length=length, compile_s=compile_s, mem_bytes=mem_bytes,
             temp_bytes=None if mem is None else mem.temp_size_in_bytes)

  def run():
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(params, x))
    return time.perf_counter() - t0
  return row, run


def measure_length(length, args):
  """All models at one length; timing rounds interleave the models so that a shared,
  fluctuating CPU load affects them alike (the ratios come from the same rounds)."""
  rows, runs = [], {}
  for name in args.models.split(","):
    limit = args.transformer_max_time_len if name == "transformer" else args.max_time_len
    row, run = compile_step(name, length, args)
    rows.append(row)
    if length <= limit:
      run()  # warm-up
      runs[name] = (row, run, [])
  for _ in range(args.repeats):
    for row, run, times in runs.values():
      times.append(run())
  for row, _, times in runs.values():
    row["time_s"] = statistics.median(times)
    row["times_s"] = times
  return rows


def main():
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
  args = ap.parse_args()
  rows = []
  print(f"device: {jax.devices()[0].device_kind} x{jax.device_count()}, backend "
        f"{jax.default_backend()}", flush=True)
  for length in [int(s) for s in args.lengths.split(",")]:
    for row in measure_length(length, args):
      rows.append(row)
      print(json.dumps(row), flush=True)
  print_table(rows)
  if args.out:
    with open(args.out, "w") as f:
      json.dump(dict(args=vars(args), device=str(jax.devices()[0]), rows=rows), f, indent=1)
  if args.plot:
    plot(rows, args.plot)


def print_table(rows):
  by = {(r["model"], r["length"]): r for r in rows}
  models = sorted({r["model"] for r in rows}, key=lambda m: [
      "ran_parallel", "ran_scan", "windowed", "transformer"].index(m))
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


def plot(rows, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  for m in sorted({r["model"] for r in rows}):
    rs = sorted((r for r in rows if r["model"] == m), key=lambda r: r["length"])
    t = [(r["length"], r["time_s"]) for r in rs if r.get("time_s")]
    if t:
      axes[0].loglog(*zip(*t), marker="o", label=m)
    mm = [(r["length"], r["mem_bytes"] / 2**20) for r in rs if r.get("mem_bytes")]
    if mm:
      axes[1].loglog(*zip(*mm), marker="o", label=m)
  axes[0].set(xlabel="length L", ylabel="fwd+bwd time (s)", title="median step time")
  axes[1].set(xlabel="length L", ylabel="compiled memory (MiB)", title="memory_analysis")
  for a in axes:
    a.legend()
    a.grid(True, which="both", alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=110)


if __name__ == "__main__":
  main()
