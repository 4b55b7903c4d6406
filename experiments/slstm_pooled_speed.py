"""The S-LSTM when only ``pooled`` is used (classification, regression): the current module,
whose last step runs outside the scan so that XLA drops its dead token update, against the
module of an earlier git revision (every step inside the scan), side by side.

For each (D, batch, L) and number of steps it compiles, for both modules on the same
parameters, the forward of ``mean(pooled^2)`` and its gradient with respect to every
parameter (what a classifier's training step and prediction run through the encoder), and
for reference the gradient of ``mean(sequence^2) + mean(pooled^2)`` of the current module
(the whole recurrence, nothing dead). The functions of a case are called round robin,
``--repeats`` rounds, best process CPU time and wall time of each; gradients of the two
modules are compared, and XLA's compiled temporary memory recorded. The run of
docs/benchmarks.md, "S-LSTM: only the pooled output":

  python experiments/slstm_pooled_speed.py --before=3b40057 --steps=2,4 \\
      --cases=128x1x2048,256x8x512,256x8x2048 --out=docs/benchmarks/slstm_pooled_cpu.json
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from longtext_jax import encoders  # pylint: disable=g-import-not-at-top,wrong-import-position
from longtext_jax.train import benchmark as harness  # pylint: disable=g-import-not-at-top,wrong-import-position

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recurrent_speed import cpu_and_wall  # pylint: disable=g-import-not-at-top,wrong-import-position

SLSTM_PATH = "longtext_jax/encoders/slstm.py"


def module_at(revision: str):
  """``longtext_jax/encoders/slstm.py`` as it was at git ``revision`` (or the file at the
  path ``revision``, for a checkout without git history), imported as a module (its
  relative imports resolved against the current package)."""
  if os.path.isfile(revision):
    with open(revision, encoding="utf-8") as f:
      source = f.read()
  else:
    try:
      source = subprocess.run(["git", "-C", ROOT, "show", f"{revision}:{SLSTM_PATH}"],
                              capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
      detail = getattr(e, "stderr", "") or str(e)
      raise SystemExit(f"--before={revision}: neither a file nor a revision whose "
                       f"{SLSTM_PATH} the git history of {ROOT} holds: {detail.strip()}"
                       ) from e
  module = types.ModuleType(f"slstm_at_{revision}")
  sys.modules[module.__name__] = module  # Flax and dataclasses look their module up here.
  exec(compile(source.replace("from .", "from longtext_jax.encoders."),  # pylint: disable=exec-used
               f"{revision}:{SLSTM_PATH}", "exec"), module.__dict__)
  return module


def run_case(before, d_model: int, batch: int, length: int, steps: int, repeats: int
             ) -> dict:
  """Compiles and times one case; returns its row."""
  kw = dict(num_steps=steps, position="sinusoidal", max_len=length)
  mods = {"now": encoders.SLSTM(**kw), "before": before.SLSTM(**kw)}
  x = jax.random.normal(jax.random.key(0), (batch, length, d_model), jnp.float32)
  mask = jnp.ones((batch, length), bool)
  params = jax.jit(mods["now"].init)(jax.random.key(1), x[:, :64], mask[:, :64])
  fns = {}
  for label, enc in mods.items():
    pooled = lambda p, enc=enc: jnp.mean(enc.apply(p, x, mask).pooled ** 2)
    fns[f"{label}_pooled_fwd"] = pooled
    fns[f"{label}_pooled_fwd_bwd"] = jax.grad(pooled)

  def both(p):
    out = mods["now"].apply(p, x, mask)
    return jnp.mean(out.sequence ** 2) + jnp.mean(out.pooled ** 2)

  fns["now_both_fwd_bwd"] = jax.grad(both)
  row = {"d_model": d_model, "batch": batch, "length": length, "num_steps": steps}
  compiled = {}
  for key, fn in fns.items():
    compiled[key], row[f"{key}_compile_s"] = harness.compile_fn(fn, (params,))
    row[f"{key}_mem_bytes"] = harness.memory(compiled[key])["mem_bytes"]
  grads = [compiled[f"{label}_pooled_fwd_bwd"](params) for label in mods]
  row["grad_max_abs_diff"] = max(
      float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
      for a, b in zip(jax.tree_util.tree_leaves(grads[0]), jax.tree_util.tree_leaves(grads[1])))
  for fn in compiled.values():  # Warm-up.
    jax.block_until_ready(fn(params))
  cpu = {k: float("inf") for k in compiled}
  wall = dict(cpu)
  for _ in range(repeats):  # Round robin: a shared machine's drift hits every function.
    for key, fn in compiled.items():
      c, w = cpu_and_wall(fn, (params,))
      cpu[key], wall[key] = min(cpu[key], c), min(wall[key], w)
  for key in compiled:
    row[f"{key}_cpu_s"], row[f"{key}_wall_s"] = cpu[key], wall[key]
  for mode in ("fwd", "fwd_bwd"):
    row[f"speedup_{mode}_cpu"] = (row[f"before_pooled_{mode}_cpu_s"]
                                  / row[f"now_pooled_{mode}_cpu_s"])
    row[f"speedup_{mode}_wall"] = (row[f"before_pooled_{mode}_wall_s"]
                                   / row[f"now_pooled_{mode}_wall_s"])
  return row


def main(argv=None) -> list[dict]:
  """Command line: see the module docstring."""
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--before", default="3b40057",
                 help="git revision whose slstm.py is the baseline (every step scanned), "
                      "or the path of such a file")
  p.add_argument("--cases", default="128x1x2048,256x8x512",
                 help="comma list of DxBxL (width x batch x length)")
  p.add_argument("--steps", default="2,4", help="comma list of num_steps")
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--out", default="")
  args = p.parse_args(argv)
  before = module_at(args.before)
  rows = []
  for case in args.cases.split(","):
    d_model, batch, length = (int(v) for v in case.split("x"))
    for steps in (int(s) for s in args.steps.split(",")):
      row = run_case(before, d_model, batch, length, steps, args.repeats)
      rows.append(row)
      print(f"D={d_model} B={batch} L={length} steps={steps}: pooled-only fwd "
            f"{row['before_pooled_fwd_cpu_s'] * 1e3:.1f} -> {row['now_pooled_fwd_cpu_s'] * 1e3:.1f}"
            f" ms ({row['speedup_fwd_cpu']:.2f}x), fwd+bwd "
            f"{row['before_pooled_fwd_bwd_cpu_s'] * 1e3:.1f} -> "
            f"{row['now_pooled_fwd_bwd_cpu_s'] * 1e3:.1f} ms ({row['speedup_fwd_bwd_cpu']:.2f}x);"
            f" both outputs fwd+bwd {row['now_both_fwd_bwd_cpu_s'] * 1e3:.1f} ms; grad diff "
            f"{row['grad_max_abs_diff']:.1e}", flush=True)
  if args.out:
    harness.write_results(args.out, harness.run_meta(
        "experiments/slstm_pooled_speed.py", argv, before=args.before), rows)
  return rows


if __name__ == "__main__":
  main()
