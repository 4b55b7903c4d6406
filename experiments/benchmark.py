"""One benchmark harness for every encoder: time, memory, compile time, FLOP/s.

For each encoder and length it jits the forward pass (inference) and the forward+backward
pass (gradient of a scalar of the outputs w.r.t. the parameters), and reports

* median wall time after warm-up (``--repeats`` runs) and tokens/s,
* compile time (lower + compile),
* compiled peak memory from ``compiled.memory_analysis()`` (arguments + outputs + temporaries),
* achieved FLOP/s (XLA's cost analysis / time) as a fraction of a large matmul timed in the
  same run (the machine's practical peak),

then writes JSON, a markdown table and log-log plots (time and memory against length).

  # The recorded CPU run (docs/benchmarks.md, "All encoders"):
  python experiments/benchmark.py --lengths=512,2048,8192,32768 --max_seconds=15 \
      --repeats=3 --out=docs/benchmarks/harness_cpu
  # Quick check (the test suite runs this):
  python experiments/benchmark.py --smoke   # outputs in runs/benchmark_smoke/
  # Redraw a recorded run's figure from its results.json (no measuring):
  python experiments/benchmark.py --replot --out=docs/benchmarks/harness_cpu
  # One encoder, longer lengths, bf16:
  python experiments/benchmark.py --encoders=transformer --lengths=1024,4096,16384 \
      --dtype=bfloat16 --out=/tmp/bench

A new encoder joins by being registered in ``longtext_jax.encoders.ENCODERS`` (and, if its
defaults are not comparable, one entry in ``SETTINGS`` below).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import jax
import jax.numpy as jnp

from longtext_jax import encoders as encoders_lib
from longtext_jax import fileio
from longtext_jax.train import benchmark as harness

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# Per-encoder overrides so that every model has comparable width/depth. Fields an encoder
# lacks are dropped automatically.
SETTINGS: dict[str, dict] = {
    "slstm": {"num_steps": 2, "position": "sinusoidal"},  # 2 shared steps, no position table.
    "ran": {"window_size": 256},  # The windows of docs/ran.md's long-document runs.
    "windowed": {"window_size": 256},
    "chunk_bert": {"num_last_layers": 3},  # Mean of all 3 hidden states of a 2-layer BERT.  # RAN's floor: the same windows without the GPC.
}
COMMON = {"num_layers": 2, "num_heads": 4, "dropout_rate": 0.0,
          # BERT-family encoders (they embed ids themselves): no dropout either.
          "hidden_dropout_rate": 0.0, "attention_dropout_rate": 0.0}
# Benchmarked beside the registered encoders (not a config encoder: it returns BertOutput).
EXTRA = {"bert": encoders_lib.Bert}
VOCAB = 1000  # Id-input encoders read random ids below this.


def reads_ids(name: str) -> bool:
  """Whether encoder ``name`` reads token ids (BERT family) rather than [B, L, D] vectors."""
  return name in EXTRA or encoders_lib.input_kind(encoders_lib.ENCODERS[name]) == "ids"


def build(name: str, dtype, d_model: int, max_len: int = 1 << 17,
          attention_impl: str | None = None) -> object:
  """Encoder ``name`` at width ``d_model`` with the shared depth/heads and its SETTINGS;
  learned position tables of ``max_len`` rows; ``attention_impl`` (when given) for encoders
  with that field (the Transformer: e.g. 'cudnn' on a GPU)."""
  cls = EXTRA.get(name) or encoders_lib.ENCODERS[name]
  fields = {f.name for f in dataclasses.fields(cls)}
  kwargs = {k: v for k, v in {**COMMON, **SETTINGS.get(name, {})}.items() if k in fields}
  if "dtype" in fields:
    kwargs["dtype"] = dtype
  if "max_len" in fields:
    kwargs["max_len"] = max_len
  if attention_impl and "attention_impl" in fields:
    kwargs["attention_impl"] = attention_impl
  if reads_ids(name):  # Same width as the others; BERT's usual 4x MLP.
    kwargs.update(vocab_size=VOCAB, hidden_size=d_model, intermediate_size=4 * d_model)
    if name == "bert":  # Full attention over the whole document.
      kwargs["max_position_embeddings"] = 1 << 17
  return cls(**kwargs)


def matmul_rate(dtype, size: int, repeats: int) -> float:
  """FLOP/s of one large square matmul: the reference for utilisation (random operands:
  constant ones or zeros can run faster than real data on a GPU)."""
  a = jax.random.normal(jax.random.key(0), (size, size), dtype)
  t, _ = harness.time_fn(jax.jit(lambda x: x @ x), (a,), repeats)
  return 2 * size ** 3 / t


def measure(name: str, length: int, batch: int, d_model: int, dtype, repeats: int,
            attention_impl: str | None = None) -> dict:
  """The forward and forward+backward rows of one encoder at one length."""
  # Position tables sized to the length: with a 2^17-row table the backward pass pads the
  # table's gradient to 2^17 x D, which was the single largest op of the Star-Transformer's
  # backward at L=2048 (docs/benchmarks.md, "Recurrent backward passes").
  enc = build(name, dtype, d_model, max_len=length, attention_impl=attention_impl)
  if reads_ids(name):
    x = jax.random.randint(jax.random.key(0), (batch, length), 5, VOCAB)
  else:
    x = jax.random.normal(jax.random.key(0), (batch, length, d_model), jnp.float32)
  mask = jnp.ones((batch, length), bool)
  init_len = length if reads_ids(name) else min(length, 256)
  params = jax.jit(enc.init)(jax.random.key(1), x[:, :init_len], mask[:, :init_len])

  def fwd(p, x, m):
    return enc.apply(p, x, m, deterministic=True).pooled

  loss = harness.speed_loss(enc)
  row = {"encoder": name, "length": length, "batch": batch, "d_model": d_model,
         "dtype": jnp.dtype(dtype).name}
  for mode, fn in (("fwd", fwd), ("fwd_bwd", jax.grad(loss))):
    case = harness.measure(fn, (params, x, mask), repeats)
    seconds = case["time_s"]
    row[f"{mode}_compile_s"] = case["compile_s"]
    row[f"{mode}_mem_bytes"] = case["mem_bytes"]
    row[f"{mode}_s"] = seconds
    row[f"{mode}_tokens_per_s"] = batch * length / seconds
    row[f"{mode}_flops_per_s"] = case["flops"] / seconds if case["flops"] else None
  return row


def write_outputs(rows: list[dict], meta: dict, out: str) -> None:
  """Writes ``out/results.json``, ``out/table.md`` and ``out/scaling.png``."""
  harness.write_results(os.path.join(out, "results.json"), meta, rows)
  peak = meta["matmul_flops_per_s"]
  lines = [f"Device: {meta['device']}; dtype {meta['dtype']}; batch {meta['batch']}; "
           f"D {meta['d_model']}; matmul reference {peak / 1e9:.1f} GFLOP/s.", "",
           "| encoder | L | fwd ms | fwd+bwd ms | fwd+bwd tok/s | fwd+bwd MiB | compile s "
           "| fwd+bwd % of matmul |", "|---|---|---|---|---|---|---|---|"]
  for r in rows:
    if "skipped" in r:
      lines.append(f"| {r['encoder']} | {r['length']} | skipped: {r['skipped']} | | | | | |")
      continue
    mem = r["fwd_bwd_mem_bytes"]
    util = r["fwd_bwd_flops_per_s"]
    lines.append(
        f"| {r['encoder']} | {r['length']} | {r['fwd_s'] * 1e3:.1f} | "
        f"{r['fwd_bwd_s'] * 1e3:.1f} | {r['fwd_bwd_tokens_per_s']:.0f} | "
        f"{mem / 2**20:.1f} | {r['fwd_bwd_compile_s']:.1f} | "
        f"{(100 * util / peak) if util else float('nan'):.0f}% |" if mem is not None else
        f"| {r['encoder']} | {r['length']} | {r['fwd_s'] * 1e3:.1f} | "
        f"{r['fwd_bwd_s'] * 1e3:.1f} | {r['fwd_bwd_tokens_per_s']:.0f} | n/a | "
        f"{r['fwd_bwd_compile_s']:.1f} | n/a |")
  fileio.write_text_atomic(os.path.join(out, "table.md"), "\n".join(lines) + "\n")
  plot_scaling(rows, meta, os.path.join(out, "scaling.png"))


def plot_scaling(rows: list[dict], meta: dict, path: str) -> None:
  """Time and compiled memory of the forward+backward pass against length.

  Length on a log-2 axis; time and memory on log axes when they span decades. One colour
  and marker per encoder (``longtext_jax.plot.MODEL_STYLES``: the same look in
  every figure of the docs); skipped lengths are left out.

  Args:
    rows: the ``rows`` of ``results.json``.
    meta: its ``meta`` (device, dtype, batch, d_model: the figure's title).
    path: the PNG to write.

  Returns:
    The figure (None without matplotlib).
  """
  try:
    from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  except ImportError:
    print("matplotlib is not installed: no scaling.png")
    return
  from longtext_jax import plot as plot_lib  # pylint: disable=g-import-not-at-top
  names = sorted({r["encoder"] for r in rows})
  styles = plot_lib.styles_for(names)
  fig = Figure(figsize=(11, 4.3), layout="constrained")
  ax_t, ax_m = fig.subplots(1, 2)
  for name in names:
    rs = sorted((r for r in rows if r["encoder"] == name and "skipped" not in r),
                key=lambda r: r["length"])
    if not rs:
      continue
    ax_t.plot([r["length"] for r in rs], [r["fwd_bwd_s"] for r in rs], label=name,
              **styles[name])
    mem = [(r["length"], r["fwd_bwd_mem_bytes"] / 2**20) for r in rs if r["fwd_bwd_mem_bytes"]]
    if mem:
      ax_m.plot(*zip(*mem), label=name, **styles[name])
  for ax, ylabel in ((ax_t, "forward+backward time per step (s)"),
                     (ax_m, "compiled memory, fwd+bwd (MiB)")):
    plot_lib.set_length_ticks(ax, [r["length"] for r in rows if "skipped" not in r])
    if plot_lib.spans_decades([y for line in ax.lines for y in line.get_ydata()]):
      ax.set_yscale("log")
    ax.set_xlabel("sequence length L (tokens)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
  ax_m.legend(fontsize=7, ncol=2)
  fig.suptitle(f"{meta.get('device', '?')}, {meta.get('dtype', '?')}, batch "
               f"{meta.get('batch', '?')}, d_model {meta.get('d_model', '?')}", fontsize=9)
  fileio.save_figure_atomic(fig, path, dpi=110)
  return fig


def main(argv=None) -> int:
  """Command line: see the module docstring."""
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--encoders", default="",
                 help="comma list (default: every registered encoder, and full BERT)")
  p.add_argument("--lengths", default="512,1024,2048,4096,8192")
  p.add_argument("--batch", type=int, default=1)
  p.add_argument("--d_model", type=int, default=128)
  p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--max_seconds", type=float, default=60.0,
                 help="skip longer lengths of an encoder once one fwd+bwd exceeds this")
  p.add_argument("--matmul_size", type=int, default=2048)
  p.add_argument("--attention_impl", default="",
                 help="attention implementation of encoders that have the field (the "
                      "Transformer): xla, cudnn, heads_major ('': the encoder's default)")
  p.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
  p.add_argument("--out", default=None,
                 help="output folder (default docs/benchmarks/harness; with --smoke "
                      "runs/benchmark_smoke: smoke sizes never land in the docs unless told "
                      "to)")
  p.add_argument("--replot", action="store_true",
                 help="only redraw OUT/scaling.png from OUT/results.json (no measuring)")
  args = p.parse_args(argv)
  args.out = args.out or (os.path.join(ROOT, "runs", "benchmark_smoke") if args.smoke else
                          "docs/benchmarks/harness")
  if args.replot:
    with open(os.path.join(args.out, "results.json")) as f:
      recorded = json.load(f)
    plot_scaling(recorded["rows"], recorded["meta"], os.path.join(args.out, "scaling.png"))
    print(f"wrote {args.out}/scaling.png")
    return 0
  if args.smoke:
    args.lengths, args.d_model, args.repeats, args.matmul_size = "64", 32, 1, 256
  known = [*encoders_lib.ENCODERS, *EXTRA]
  names = [n for n in args.encoders.split(",") if n] or known
  unknown = sorted(set(names) - set(known))
  if unknown:
    p.error(f"unknown encoders {unknown}; registered: {known}")
  dtype = jnp.dtype(args.dtype)
  lengths = [int(x) for x in args.lengths.split(",")]
  meta = {"device": f"{jax.devices()[0].device_kind} x{jax.device_count()} "
                    f"({jax.default_backend()})",
          "jax": jax.__version__, "host": harness.host(),
          "allocator": harness.allocator(), "dtype": args.dtype, "batch": args.batch,
          "d_model": args.d_model, "attention_impl": args.attention_impl or None,
          "command": " ".join(["python"] + sys.argv),
          "matmul_flops_per_s": matmul_rate(dtype, args.matmul_size, max(args.repeats, 2))}
  rows = []
  for name in names:
    too_slow = False
    for length in lengths:
      if too_slow:
        rows.append({"encoder": name, "length": length,
                     "skipped": f"a shorter length exceeded {args.max_seconds:.0f}s"})
        continue
      try:
        row = measure(name, length, args.batch, args.d_model, dtype, args.repeats,
                      args.attention_impl or None)
      except Exception as e:  # pylint: disable=broad-except  # e.g. out of memory
        rows.append({"encoder": name, "length": length,
                     "skipped": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"})
        too_slow = True
        continue
      rows.append(row)
      harness.emit(row)
      too_slow = row["fwd_bwd_s"] > args.max_seconds
  write_outputs(rows, meta, args.out)
  print(f"wrote {args.out}/results.json, table.md, scaling.png")
  return 0


if __name__ == "__main__":
  sys.exit(main())
