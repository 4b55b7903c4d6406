"""RAN's loop over windows unrolled, against the scan layout and the cuDNN Transformer.

Issue 20's GPU targets for RAN: its GPU layout (the parallel form) >= 2x faster than
``impl='scan'`` at L=16k, and faster than a Transformer of the same width and depth on
cuDNN's fused attention at L=16k. On the H100 of 24 Nov (docs/benchmarks.md, "GPU: NVIDIA
H100") RAN took 8x its windowed floor: the GPC recurrence is 64 small sequential steps per
layer at 16k tokens, each a few kernel launches, and the compiled loop pays each iteration
again. ``RAN.scan_unroll`` puts several windows into one loop iteration (same values and
gradients: tests/test_ran.py). This script times, per case (width x batch x length):

  scan_u1, scan_u<max>        impl='scan' with unroll 1 and the largest --unrolls
  parallel_u<k>               impl='parallel', all windows in one token-attention call,
                              for every k of --unrolls
  transformer_cudnn           (bfloat16 on a GPU) the harness's Transformer, cuDNN attention

each as the forward of ``mean(sequence^2) + mean(pooled^2)`` and its gradient
(``longtext_jax.train.benchmark.speed_loss``), at the harness's settings (2 layers, 4
heads, W=256, no dropout).
Everything is compiled first; ``--wait FILE`` then waits until FILE exists before timing
(so the compiles can overlap other work on the device and the timing runs alone), and
``--done FILE`` is created after the timing (the next script waiting on it may start).
Functions of one case are timed round robin, best of ``--repeats`` wall times.

  python experiments/ran_gpu_speed.py --cases=64x1x16384,128x8x16384 --unrolls=1,8,16 \\
      --out=/tmp/ran_gpu_fp32.json
  python experiments/ran_gpu_speed.py --dtype=bfloat16 --cases=128x1x16384 --out=...
  python experiments/ran_gpu_speed.py --tiny --out=/tmp/t.json   # seconds, CPU (the test)
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":  # Before JAX allocates: huge pages for XLA's CPU buffers, as the
  # other benchmark scripts (docs/benchmarks.md, "Page faults"; host memory only on a GPU).
  from longtext_jax import hostenv  # pylint: disable=g-import-not-at-top
  hostenv.reexec_with_hugepages(__file__)

import benchmark as bench  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import benchmark as harness  # noqa: E402  pylint: disable=wrong-import-position


def variants(dtype, d_model: int, length: int, unrolls: list[int], window: int
             ) -> dict[str, object]:
  """label -> encoder module for one case (see the module docstring)."""
  ran = bench.build("ran", dtype, d_model, max_len=length).clone(window_size=window)
  out = {"scan_u1": ran.clone(impl="scan", scan_unroll=1)}
  if max(unrolls) > 1:
    out[f"scan_u{max(unrolls)}"] = ran.clone(impl="scan", scan_unroll=max(unrolls))
  for k in unrolls:
    out[f"parallel_u{k}"] = ran.clone(impl="parallel", attention_block=0, scan_unroll=k)
  if jnp.dtype(dtype) != jnp.float32 and jax.default_backend() == "gpu":
    out["transformer_cudnn"] = bench.build("transformer", dtype, d_model, max_len=length,
                                           attention_impl="cudnn")
  return out


def compile_case(dtype, d_model: int, batch: int, length: int, unrolls: list[int],
                 window: int) -> dict:
  """Compiles every variant's forward and gradient; returns the case's row and callables."""
  mods = variants(dtype, d_model, length, unrolls, window)
  x = jax.random.normal(jax.random.key(0), (batch, length, d_model), jnp.float32)
  mask = jnp.ones((batch, length), bool)
  row = {"d_model": d_model, "batch": batch, "length": length, "window": window,
         "dtype": jnp.dtype(dtype).name}
  entries = {}
  for label, enc in mods.items():
    params = jax.jit(enc.init)(jax.random.key(1), x[:, :min(length, 2 * window)],
                               mask[:, :min(length, 2 * window)])
    loss = harness.speed_loss(enc)
    for mode, fn in (("fwd", loss), ("fwd_bwd", jax.grad(loss))):
      compiled, seconds = harness.compile_fn(fn, (params, x, mask))
      entries[(label, mode)] = (compiled, (params, x, mask))
      row[f"{label}_{mode}_compile_s"] = seconds
      row[f"{label}_{mode}_mem_bytes"] = harness.memory(compiled)["mem_bytes"]
  return {"row": row, "entries": entries}


def time_case(case: dict, repeats: int) -> dict:
  """Best-of-``repeats`` wall seconds of every entry, round robin after a warm-up."""
  row, entries = case["row"], case["entries"]
  for fn, args in entries.values():
    jax.block_until_ready(fn(*args))
  wall = {k: [] for k in entries}
  for _ in range(repeats):
    for key, (fn, args) in entries.items():
      t0 = time.perf_counter()
      jax.block_until_ready(fn(*args))
      wall[key].append(time.perf_counter() - t0)
  for (label, mode), times in wall.items():
    row[f"{label}_{mode}_s"] = min(times)
  labels = sorted({label for label, _ in entries})
  for label in labels:
    row[f"{label}_vs_scan_fwd_bwd"] = row["scan_u1_fwd_bwd_s"] / row[f"{label}_fwd_bwd_s"]
  return row


def wait_for(path: str, timeout_s: float) -> bool:
  """Polls until ``path`` exists (True) or ``timeout_s`` passes (False)."""
  t0 = time.monotonic()
  while not os.path.exists(path):
    if time.monotonic() - t0 > timeout_s:
      return False
    time.sleep(0.5)
  return True


def main(argv=None) -> int:
  """Command line: see the module docstring."""
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--cases", default="64x1x16384,128x8x16384",
                 help="comma list of DxBxL (width x batch x length)")
  p.add_argument("--unrolls", default="1,8,16",
                 help="scan_unroll values of the parallel form (windows per loop iteration)")
  p.add_argument("--window", type=int, default=256)
  p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--wait", default="", help="time only once this file exists")
  p.add_argument("--wait_timeout_s", type=float, default=900.0)
  p.add_argument("--done", default="", help="create this file after timing")
  p.add_argument("--label", default="", help="recorded in the output (e.g. the XLA flags)")
  p.add_argument("--tiny", action="store_true", help="CPU-sized cases (the test)")
  p.add_argument("--out", default="")
  args = p.parse_args(argv)
  if args.tiny:
    args.cases, args.unrolls, args.window, args.repeats = "16x1x64,16x2x48", "1,3", 16, 2
  unrolls = [int(k) for k in args.unrolls.split(",")]
  dtype = jnp.dtype(args.dtype)
  meta = harness.run_meta("experiments/ran_gpu_speed.py", argv, label=args.label,
                          xla_flags=os.environ.get("XLA_FLAGS", ""))
  t0 = time.perf_counter()
  cases = []
  for spec in args.cases.split(","):
    d_model, batch, length = (int(v) for v in spec.split("x"))
    cases.append(compile_case(dtype, d_model, batch, length, unrolls, args.window))
  meta["compile_all_s"] = time.perf_counter() - t0
  if args.wait:
    meta["waited"] = wait_for(args.wait, args.wait_timeout_s)
  rows = []
  try:
    for case in cases:
      row = time_case(case, args.repeats)
      harness.emit(row)
      rows.append(row)
  finally:
    if args.done:
      open(args.done, "w").close()
  if args.out:
    harness.write_results(args.out, meta, rows)
  return 0


if __name__ == "__main__":
  sys.exit(main())
