"""The three matmuls of a dense layer's training step, JAX (XLA:CPU) against PyTorch, one CPU.

Why the PyTorch comparisons of docs/benchmarks.md ("forward+backward >= 1.5x faster than a
PyTorch implementation", issue 20) move with the host: about half of the S-LSTM's and the
Star-Transformer's forward+backward is the projections' matmuls, and each projection
y = x W ([M, K] x [K, N], M = batch x length rows) costs three per training step:

* forward      y  = x W        ([M, K] x [K, N])
* input grad   dx = g W^T      ([M, N] x [N, K])
* weight grad  dW = x^T g      ([K, M] x [M, N], contracting over the M rows)

``--feature_major`` also times, in JAX only, the same three products with the activations kept
feature-major (x^T [K, M], g^T [N, M]: y^T = W^T x^T, dx^T = W g^T, dW = x^T (g^T)^T, where
the weight gradient contracts the minor dimension of both operands, so no operand needs a
transposed copy), the layout docs/benchmarks.md listed as left to try for the recurrent
encoders' weight gradients (rows ``jax_<form>_fm_s``, ``<form>_fm_over_row``). Its forward
reads W^T stored as an [N, K] array of its own: ``W.T @ x^T`` as XLA compiles it (the
transpose folded into the product) ran at half the rate on an AMD host, and a model in this
layout would keep (or copy once per step) the [K, N]-sized weight that way.

This times each, float32, wall time best of ``--repeats``, in JAX (``jax.jit``, XLA's CPU
matmul) and in PyTorch (``torch.mm``, its BLAS), each framework in a process of its own,
alternated ``--rounds`` times (``torch_slstm.time_in_separate_processes``). Default threads
of both (2 on this project's machine). Results: docs/benchmarks.md, "Matmuls: XLA:CPU
against PyTorch's BLAS".

  python experiments/matmul_cpu.py --rows=4096,8192 --k=256 --n=256 --repeats=30 \\
      --out=docs/benchmarks/matmul_cpu.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if __name__ == "__main__":  # Before JAX loads: huge pages for XLA's CPU buffers (both
  # workers inherit the environment, so PyTorch's buffers get them too).
  from longtext_jax import hostenv  # noqa: E402  pylint: disable=g-import-not-at-top
  hostenv.reexec_with_hugepages(__file__)

from longtext_jax import hostenv  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import benchmark as harness  # noqa: E402  pylint: disable=wrong-import-position
from torch_slstm import emit, time_in_separate_processes  # noqa: E402  pylint: disable=wrong-import-position

FORMS = ("fwd", "dgrad", "wgrad")


def operands(m: int, k: int, n: int, seed: int = 0) -> dict[str, np.ndarray]:
  """x [M, K], w [K, N], g [M, N], float32, uniform in [-1, 1)."""
  rng = np.random.default_rng(seed)
  u = lambda *shape: rng.uniform(-1, 1, shape).astype(np.float32)
  return {"x": u(m, k), "w": u(k, n), "g": u(m, n)}


def jax_forms(ops: dict[str, np.ndarray]) -> dict:
  """The three products as zero-argument callables returning a finished JAX array."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  x, w, g = (jnp.asarray(ops[name]) for name in "xwg")
  fns = {"fwd": (jax.jit(lambda x, w: x @ w), (x, w)),
         "dgrad": (jax.jit(lambda g, w: g @ w.T), (g, w)),
         "wgrad": (jax.jit(lambda x, g: x.T @ g), (x, g))}
  return {form: (lambda f=f, a=a: f(*a).block_until_ready()) for form, (f, a) in fns.items()}


def jax_feature_major_forms(ops: dict[str, np.ndarray]) -> dict:
  """The three products with x and g stored transposed (x^T [K, M], g^T [N, M]); each
  returns its result in the layout that form keeps (y^T, dx^T; dW as in ``jax_forms``)."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  xt, gt, wt = (jnp.asarray(np.ascontiguousarray(ops[name].T)) for name in "xgw")
  w = jnp.asarray(ops["w"])
  nt = (((1,), (1,)), ((), ()))  # Contract the minor dimension of both operands.
  fns = {"fwd_fm": (jax.jit(lambda wt, xt: wt @ xt), (wt, xt)),
         "dgrad_fm": (jax.jit(lambda w, gt: w @ gt), (w, gt)),
         "wgrad_fm": (jax.jit(lambda xt, gt: jax.lax.dot_general(xt, gt, nt)), (xt, gt))}
  return {form: (lambda f=f, a=a: f(*a).block_until_ready()) for form, (f, a) in fns.items()}


def torch_forms(ops: dict[str, np.ndarray]) -> dict:
  """The same products with ``torch.mm`` (transposes as strided views, no copies)."""
  import torch  # pylint: disable=import-outside-toplevel
  x, w, g = (torch.from_numpy(ops[name]) for name in "xwg")
  return {"fwd": lambda: torch.mm(x, w), "dgrad": lambda: torch.mm(g, w.T),
          "wgrad": lambda: torch.mm(x.T, g)}


def time_forms(forms: dict, repeats: int) -> dict[str, float]:
  """Best wall seconds of each callable over ``repeats`` calls (after one warm-up call)."""
  out = {}
  for form, call in forms.items():
    call()
    best = float("inf")
    for _ in range(repeats):
      t0 = time.perf_counter()
      call()
      best = min(best, time.perf_counter() - t0)
    out[form] = best
  return out


def results(framework: str, m: int, k: int, n: int, repeats: int,
            feature_major: bool = False) -> dict:
  """One worker row: ``<framework>_<form>_s`` seconds for each of the three products (and,
  with ``feature_major``, for JAX, the same three feature-major as ``<form>_fm``)."""
  ops = operands(m, k, n)
  forms = jax_forms(ops) if framework == "jax" else torch_forms(ops)
  if feature_major and framework == "jax":
    forms = {**forms, **jax_feature_major_forms(ops)}
  return {"length": m, **{f"{framework}_{form}_s": s
                          for form, s in time_forms(forms, repeats).items()}}


def check(m: int = 64, k: int = 32, n: int = 48) -> float:
  """Largest relative difference between the frameworks' products (the timed calls compute
  the same thing)."""
  ops = operands(m, k, n)
  worst = 0.0
  jf, tf, fm = jax_forms(ops), torch_forms(ops), jax_feature_major_forms(ops)
  for form in FORMS:
    a, b = np.asarray(jf[form]()), tf[form]().numpy()
    worst = max(worst, float(np.max(np.abs(a - b)) / np.max(np.abs(b))))
    c = np.asarray(fm[form + "_fm"]())
    c = c if form == "wgrad" else c.T  # y^T, dx^T back to y, dx.
    worst = max(worst, float(np.max(np.abs(c - b)) / np.max(np.abs(b))))
  return worst


def summarize(row: dict, k: int, n: int) -> dict:
  """GFLOP/s of each product and JAX's time over PyTorch's (> 1: PyTorch faster)."""
  flops = 2.0 * row["length"] * k * n
  out = {}
  for form in FORMS:
    jt, tt = row.get(f"jax_{form}_s"), row.get(f"torch_{form}_s")
    if jt and tt:
      out[f"{form}_jax_gflops"] = round(flops / jt / 1e9, 1)
      out[f"{form}_torch_gflops"] = round(flops / tt / 1e9, 1)
      out[f"{form}_jax_over_torch"] = round(jt / tt, 3)
    ft = row.get(f"jax_{form}_fm_s")
    if jt and ft:  # > 1: the feature-major form is slower than the row-major one.
      out[f"{form}_fm_jax_gflops"] = round(flops / ft / 1e9, 1)
      out[f"{form}_fm_over_row"] = round(ft / jt, 3)
  return out


def main(argv=None) -> int:
  """Command line: see the module docstring."""
  p = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
  p.add_argument("--rows", default="4096,8192", help="M values (batch x length), comma-separated")
  p.add_argument("--k", type=int, default=256, help="input width K")
  p.add_argument("--n", type=int, default=256, help="output width N")
  p.add_argument("--repeats", type=int, default=30)
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--framework", default="", choices=("", "jax", "torch"),
                 help="(internal) time only this framework and print its rows")
  p.add_argument("--check", action="store_true", help="only compare the products, then exit")
  p.add_argument("--feature_major", action="store_true",
                 help="also time JAX's products with feature-major activations")
  p.add_argument("--out", default="", help="append the rows as JSON lines here")
  args = p.parse_args(argv)
  if args.check:
    err = check()
    print(f"largest relative difference JAX vs PyTorch: {err:.2e}")
    return 0 if err < 1e-5 else 1
  rows = [int(v) for v in args.rows.split(",")]
  if args.framework:
    for m in rows:
      print(json.dumps(results(args.framework, m, args.k, args.n, args.repeats,
                               args.feature_major)), flush=True)
    return 0
  import jax  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  meta = {"script": "experiments/matmul_cpu.py", "k": args.k, "n": args.n,
          "repeats": args.repeats, "jax": jax.__version__, "torch": torch.__version__,
          "torch_threads": torch.get_num_threads(), "cpu": harness.host(), "allocator": hostenv.allocator(),
          "machine": platform.machine()}
  worker = [f"--rows={args.rows}", f"--k={args.k}", f"--n={args.n}",
            f"--repeats={args.repeats}"] + (["--feature_major"] if args.feature_major else [])
  for row in time_in_separate_processes(os.path.abspath(__file__), worker, args.rounds):
    emit({**meta, **row, "m": row["length"], **summarize(row, args.k, args.n)}, args.out)
  return 0


if __name__ == "__main__":
  sys.exit(main())
