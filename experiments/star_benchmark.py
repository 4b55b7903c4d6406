"""Star-Transformer vs full-attention Transformer: time and compiled memory against length.

For each length L and each model, two functions are jit-compiled on one batch of random
embeddings: ``infer`` (encoder forward, pooled + sequence) and ``train`` (forward and
backward of a scalar loss w.r.t. parameters). Reported:

* compiled memory: ``jax.jit(f).lower(...).compile().memory_analysis()`` (temp + arguments
  + outputs), available even where running would take too long;
* time: median of ``--repeats`` calls after a warm-up call, only where one call takes less
  than ``--max_call_s`` (otherwise '-'); ratios Transformer / Star come from this one run.

The results replace the ``## Star-Transformer`` section of ``docs/benchmarks.md`` (other
sections are kept).

  python experiments/star_benchmark.py                       # CPU defaults
  python experiments/star_benchmark.py --lengths 256,1024,4096,16384 --d_model 300
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import sys

if __name__ == "__main__":  # Before JAX loads: huge pages for XLA's CPU buffers, what `make`
  # and the other benchmark scripts run with (docs/benchmarks.md, "Page faults").
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
  from longtext_jax import hostenv  # pylint: disable=g-import-not-at-top
  hostenv.reexec_with_hugepages(__file__)

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from longtext_jax import fileio  # noqa: E402
from longtext_jax.encoders import StarTransformer, Transformer  # noqa: E402
from longtext_jax.train import benchmark as harness  # noqa: E402

SECTION = "## Star-Transformer"


def make_models(d_model: int, num_heads: int, layers: int, max_len: int):
  """The Star-Transformer and the Transformer compared, by name."""
  return {
      "star": StarTransformer(num_cycles=layers, num_heads=num_heads, dropout_rate=0.0,
                              max_len=max_len, pooling="relay_plus_max"),
      "transformer": Transformer(num_layers=layers, num_heads=num_heads, dropout_rate=0.0,
                                 position="learned", max_len=max_len, pooling="mean"),
  }


def _functions(model, x, mask):
  params = jax.jit(model.init)(jax.random.key(0), x[:, :8], mask[:, :8])["params"]

  def infer(params, x, mask):
    out = model.apply({"params": params}, x, mask)
    return out.pooled, out.sequence

  def train(params, x, mask):
    def loss(p):
      out = model.apply({"params": p}, x, mask)
      return jnp.mean(out.pooled ** 2) + jnp.mean(out.sequence ** 2)
    return jax.grad(loss)(params)

  return params, {"infer": infer, "train": train}


def measure(fn, args, repeats: int, max_call_s: float):
  """(compiled memory bytes, median seconds or None) of ``fn(*args)``; not run when
  ``max_call_s`` <= 0, not timed when the warm-up call exceeds it."""
  case = harness.measure(fn, args, repeats, run=max_call_s > 0, max_first_s=max_call_s)
  return case["mem_bytes"], case["time_s"]


def _fmt_ms(t):
  return "-" if t is None else (f"{1000 * t:.1f}" if t < 10 else f"{1000 * t:.0f}")


def _fmt_mb(b):
  return "-" if b is None else f"{b / 2**20:.1f}"


def _ratio(a, b):
  return "-" if a is None or b is None else f"{a / b:.1f}x"


def write_section(rows, args, path):
  """Replaces (or appends) the ``## Star-Transformer`` section of ``path``."""
  cmd = "python experiments/star_benchmark.py " + " ".join(args.argv)
  lines = [
      SECTION, "",
      f"Command: `{cmd.strip()}`  ",
      f"Device: {jax.devices()[0].platform.upper()} ({harness.host()}; "
      f"{platform.machine()}), no GPU; jax {jax.__version__}; {harness.allocator()}.  ",
      f"Models: d_model={args.d_model}, {args.num_heads} heads, {args.layers} layers/cycles, "
      f"batch {args.batch}, float32. Star: ring ends, paper ordering (the module's defaults "
      "otherwise). Transformer: pre-LN, learned positions, its default attention "
      "(`attention_impl=None`: on a CPU heads-major, computed in blocks where the logits "
      "would pass 32 MiB; all L x L scores either way).  ",
      f"Time: median of {args.repeats} calls after a warm-up; '-' where one call exceeded "
      f"{args.max_call_s:.0f} s or, for the Transformer, L > {args.transformer_time_max_len} "
      "(compiled and measured for memory, not run).  ",
      "Memory: `jax.jit(f).lower(...).compile().memory_analysis()`, temp + arguments + "
      "outputs, MiB.", "",
      "| L | mode | Star ms | Transformer ms | T/Star time | Star MiB | Transformer MiB "
      "| T/Star memory |",
      "|---|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(
        f"| {r['L']} | {r['mode']} | {_fmt_ms(r['star_t'])} | {_fmt_ms(r['transformer_t'])} "
        f"| {_ratio(r['transformer_t'], r['star_t'])} | {_fmt_mb(r['star_m'])} "
        f"| {_fmt_mb(r['transformer_m'])} | {_ratio(r['transformer_m'], r['star_m'])} |")
  star_m = {r["L"]: r["star_m"] for r in rows if r["mode"] == "train" and r["star_m"]}
  if len(star_m) >= 2:
    ls = sorted(star_m)
    growth = (star_m[ls[-1]] / star_m[ls[0]]) / (ls[-1] / ls[0])
    lines += ["", f"Star fwd+bwd memory grows {star_m[ls[-1]] / star_m[ls[0]]:.1f}x from "
              f"L={ls[0]} to L={ls[-1]} ({ls[-1] // ls[0]}x longer): {growth:.2f} of linear."]
  lines.append("")
  section = "\n".join(lines)
  text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
  pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
  if pattern.search(text):
    text = pattern.sub(section + "\n", text)
  else:
    text = text.rstrip("\n") + "\n\n" + section
  fileio.write_text_atomic(path, text)


def main(argv=None):
  """Command line: see the module docstring. Returns the table's rows."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--lengths", default="256,1024,4096,8192,16384")
  parser.add_argument("--d_model", type=int, default=128)
  parser.add_argument("--num_heads", type=int, default=4)
  parser.add_argument("--layers", type=int, default=2)
  parser.add_argument("--batch", type=int, default=1)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--max_call_s", type=float, default=20.0)
  parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "docs",
                                                    "benchmarks.md"))
  parser.add_argument("--transformer_time_max_len", type=int, default=4096,
                      help="longer Transformer runs report compiled memory only (a CPU "
                           "call at 16k needs minutes and ~10+ GB)")
  args = parser.parse_args(argv)
  args.time_max_len = {"transformer": args.transformer_time_max_len}
  args.argv = sys.argv[1:] if argv is None else argv
  lengths = [int(x) for x in args.lengths.split(",")]
  models = make_models(args.d_model, args.num_heads, args.layers, max(lengths))
  rng = np.random.default_rng(0)
  rows = []
  for length in lengths:
    x = jnp.asarray(rng.standard_normal((args.batch, length, args.d_model)), jnp.float32)
    mask = jnp.ones((args.batch, length), bool)
    res = {}
    for name, model in models.items():
      params, fns = _functions(model, x, mask)
      for mode, fn in fns.items():
        limit = args.time_max_len.get(name, max(lengths))
        res[name, mode] = measure(fn, (params, x, mask), args.repeats,
                                  args.max_call_s if length <= limit else 0.0)
        harness.emit({"L": length, "model": name, "mode": mode,
                      "mem_bytes": res[name, mode][0], "time_s": res[name, mode][1]})
    for mode in ("infer", "train"):
      rows.append({"L": length, "mode": mode,
                   "star_t": res["star", mode][1], "transformer_t": res["transformer", mode][1],
                   "star_m": res["star", mode][0], "transformer_m": res["transformer", mode][0]})
    write_section(rows, args, args.out)
  return rows


if __name__ == "__main__":
  main()
