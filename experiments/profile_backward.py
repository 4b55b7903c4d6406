"""Where an encoder's forward+backward spends its time: the top compiled ops of a profile.

Compiles ``jax.grad`` of ``mean(sequence^2) + mean(pooled^2)`` (every parameter) for one
encoder at one size, times forward and forward+backward (process CPU time, best of
``--repeats``), records a ``jax.profiler`` trace of ``--repeats`` gradient calls, sums the
trace's per-op events and maps each op back to the JAX operation it came from (the
``op_name`` metadata of the optimized HLO) and to its output shape and layout. This is the
tool behind docs/benchmarks.md, "What the profile showed".

  python experiments/profile_backward.py --encoder=star_transformer --d_model=128 \\
      --batch=1 --length=8192 --top=15
  python experiments/profile_backward.py --encoder=slstm --d_model=256 --batch=8 --length=512
"""
from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile
import time

import flax
import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from longtext_jax import encoders  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax import fileio  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import benchmark as harness  # noqa: E402  pylint: disable=wrong-import-position

# The settings of docs/benchmarks.md's recurrent-backward runs (experiments/recurrent_speed.py).
SETTINGS = {
    "star_transformer": lambda n: encoders.StarTransformer(num_cycles=2, num_heads=4,
                                                           dropout_rate=0.0, max_len=n),
    "slstm": lambda n: encoders.SLSTM(num_steps=2, position="sinusoidal", max_len=n),
    "ran": lambda n: encoders.RAN(num_layers=2, num_heads=4, window_size=256),
}
_HLO_OP = re.compile(r"^\s*(?:ROOT )?%(\S+) = (\S+) .*?op_name=\"([^\"]+)\"", re.M)


def hlo_ops(compiled_text: str) -> dict[str, tuple[str, str]]:
  """op name -> (output shape with layout, the JAX op_name it came from)."""
  return {m.group(1): (m.group(2), m.group(3)) for m in _HLO_OP.finditer(compiled_text)}


def trace_totals(trace_dir: str) -> collections.Counter:
  """Total microseconds per event name in the (single) trace under ``trace_dir``."""
  (path,) = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)
  with gzip.open(path) as f:
    events = json.load(f)["traceEvents"]
  totals = collections.Counter()
  for e in events:
    if e.get("ph") == "X" and "dur" in e:
      totals[e["name"]] += e["dur"]
  return totals


def profile(encoder: str, d_model: int, batch: int, length: int, repeats: int, top: int
            ) -> dict:
  """Times and the top ops (ms per gradient call) of one encoder at one size."""
  enc = SETTINGS[encoder](length)
  x = jax.random.normal(jax.random.key(0), (batch, length, d_model), jnp.float32)
  mask = jnp.ones((batch, length), bool)
  params = flax.core.meta.unbox(jax.jit(enc.init)(jax.random.key(1), x, mask))

  def loss(p):
    out = enc.apply(p, x, mask)
    return jnp.mean(out.sequence ** 2) + jnp.mean(out.pooled ** 2)

  fwd = jax.jit(loss)  # The same function as the gradient's (both outputs).
  grad = jax.jit(jax.grad(loss))
  ops = hlo_ops(grad.lower(params).compile().as_text())
  times = {}
  for name, fn in (("fwd", fwd), ("fwd_bwd", grad)):
    jax.block_until_ready(fn(params))
    best = float("inf")
    for _ in range(repeats):
      c0 = time.process_time()
      jax.block_until_ready(fn(params))
      best = min(best, time.process_time() - c0)
    times[f"{name}_cpu_s"] = best
  with tempfile.TemporaryDirectory() as trace_dir:
    jax.profiler.start_trace(trace_dir)
    for _ in range(repeats):
      jax.block_until_ready(grad(params))
    jax.profiler.stop_trace()
    totals = trace_totals(trace_dir)
  op_totals = {k: v for k, v in totals.items() if k in ops}
  all_ops_ms = sum(op_totals.values()) / repeats / 1e3
  rows = []
  for name, us in sorted(op_totals.items(), key=lambda kv: -kv[1])[:top]:
    shape, op_name = ops[name]
    rows.append({"op": name, "ms": us / repeats / 1e3, "share": us / repeats / 1e3
                 / max(all_ops_ms, 1e-9), "shape": shape, "from": op_name})
  kinds = collections.Counter()
  for name, us in op_totals.items():  # Time by kind of fused op (copy, ynn, loop, ...).
    kinds[name.split(".")[0]] += us / repeats / 1e3
  return {"encoder": encoder, "d_model": d_model, "batch": batch, "length": length,
          **times, "ops_ms": all_ops_ms, "top": rows,
          "by_kind_ms": dict(kinds.most_common()), "jax": jax.__version__,
          "device": jax.devices()[0].device_kind, "host": harness.host(),
          "allocator": harness.allocator()}


def main(argv=None) -> dict:
  """Command line: see the module docstring."""
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--encoder", default="star_transformer", choices=sorted(SETTINGS))
  p.add_argument("--d_model", type=int, default=128)
  p.add_argument("--batch", type=int, default=1)
  p.add_argument("--length", type=int, default=2048)
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--top", type=int, default=15)
  p.add_argument("--out", default="", help="write the result as JSON here")
  args = p.parse_args(argv)
  res = profile(args.encoder, args.d_model, args.batch, args.length, args.repeats, args.top)
  print(f"{res['encoder']} D={res['d_model']} B={res['batch']} L={res['length']}: forward "
        f"{res['fwd_cpu_s'] * 1e3:.1f} ms, forward+backward {res['fwd_bwd_cpu_s'] * 1e3:.1f} ms "
        f"CPU ({res['fwd_bwd_cpu_s'] / res['fwd_cpu_s']:.2f}x); compiled ops in the trace: "
        f"{res['ops_ms']:.1f} ms per gradient call")
  for r in res["top"]:
    print(f"{r['ms']:8.2f} ms {100 * r['share']:5.1f}%  {r['op']:<34} {r['shape']:<28} "
          f"{r['from'][-90:]}")
  print("by kind:", ", ".join(f"{k} {v:.1f} ms" for k, v in res["by_kind_ms"].items()))
  if args.out:
    fileio.write_json_atomic(args.out, res)
  return res


if __name__ == "__main__":
  main()
