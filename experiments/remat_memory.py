"""What a remat policy saves, per encoder and XLA:CPU scheduler (compiled memory only).

For each encoder that takes ``remat``, compiles the gradient of ``sum(pooled) +
mean(sequence^2)`` with remat 'none', 'full' and 'dots', under XLA:CPU's default scheduler
and under the memory-optimized one (``layers.remat.CPU_MEMORY_SCHEDULER``, what the trainer
uses when a remat policy is set, ``train.cpu_scheduler='auto'``), and records XLA's
temporary-buffer accounting (``memory_analysis()``; nothing runs, so a busy machine does not
matter). With ``--repeats`` > 0 it also runs each compiled gradient (the programs of one
encoder alternated, best process CPU time of the repeats after a warm-up). Results:
docs/benchmarks.md, "Remat on XLA:CPU".

  python experiments/remat_memory.py --out=docs/benchmarks/remat_memory_cpu.json
  python experiments/remat_memory.py --repeats=4 --out=docs/benchmarks/remat_time_cpu.json
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from longtext_jax import encoders  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.encoders import bert as bert_lib  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.layers import remat as remat_lib  # noqa: E402  pylint: disable=wrong-import-position
from longtext_jax.train import benchmark as harness  # noqa: E402  pylint: disable=wrong-import-position

POLICIES = ("none", "full", "dots")


def cases(length: int, width: int) -> dict:
  """name -> (remat -> encoder, takes token ids)."""
  no_drop = dict(dropout_rate=0.0)
  return {
      "transformer (nn.scan over 4 layers)": (lambda r: encoders.Transformer(
          num_layers=4, num_heads=4, remat=r, **no_drop), False),
      "transformer, scan_layers=False (Python loop)": (lambda r: encoders.Transformer(
          num_layers=4, num_heads=4, remat=r, scan_layers=False, **no_drop), False),
      "star_transformer (2 cycles)": (lambda r: encoders.StarTransformer(
          num_cycles=2, num_heads=4, remat=r, max_len=length, **no_drop), False),
      "star_transformer, scan_unroll=2 (no loop)": (lambda r: encoders.StarTransformer(
          num_cycles=2, num_heads=4, remat=r, max_len=length, scan_unroll=2, **no_drop),
                                                     False),
      "slstm (nn.scan over 4 steps)": (lambda r: encoders.SLSTM(
          num_steps=4, remat=r, max_len=length), False),
      "slstm, scan_steps=False (Python loop)": (lambda r: encoders.SLSTM(
          num_steps=4, remat=r, max_len=length, scan_steps=False), False),
      "bert (Python loop over 4 layers)": (lambda r: bert_lib.Bert(
          num_layers=4, hidden_size=width, intermediate_size=4 * width,
          max_position_embeddings=length, hidden_dropout_rate=0.0,
          attention_dropout_rate=0.0, remat=r), True),
  }


def compiled_grad(encoder, ids: bool, batch: int, length: int, width: int, options):
  """(the compiled gradient, its arguments)."""
  mask = jnp.ones((batch, length), bool)
  x = (jnp.ones((batch, length), jnp.int32) if ids
       else jax.random.normal(jax.random.key(0), (batch, length, width), jnp.float32))
  params = jax.eval_shape(encoder.init, jax.random.key(1), x, mask)

  def loss(p, x):
    out = encoder.apply(p, x, mask)
    return jnp.sum(out.pooled) + jnp.mean(out.sequence ** 2)

  compiled, _ = harness.compile_fn(jax.grad(loss), (params, x), options)
  return compiled, (params, x)


def best_cpu_seconds(programs: dict, repeats: int) -> dict:
  """label -> best process CPU time of ``repeats`` calls, the programs alternated."""
  args = {}
  for label, (compiled, (params, x)) in programs.items():
    encoder_params = jax.tree.map(lambda s: jnp.full(s.shape, 0.01, s.dtype), params)
    args[label] = (encoder_params, x)
    jax.block_until_ready(compiled(*args[label]))  # Warm-up.
  best = {label: float("inf") for label in programs}
  for _ in range(repeats):
    for label, (compiled, _) in programs.items():
      t0 = time.process_time()
      jax.block_until_ready(compiled(*args[label]))
      best[label] = min(best[label], time.process_time() - t0)
  return best


def main(argv=None) -> int:
  """Command line: see the module docstring."""
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--batch", type=int, default=4)
  p.add_argument("--length", type=int, default=1024)
  p.add_argument("--width", type=int, default=128)
  p.add_argument("--encoders", default="",
                 help="comma list of name prefixes (e.g. 'bert,transformer'); '': all")
  p.add_argument("--policies", default=",".join(POLICIES),
                 help="comma list of remat policies ('none' included for the baseline)")
  p.add_argument("--repeats", type=int, default=0,
                 help="> 0: also time each gradient (best CPU time of this many calls)")
  p.add_argument("--out", default="")
  args = p.parse_args(argv)
  rows = []
  prefixes = tuple(v for v in args.encoders.split(",") if v)
  for name, (make, ids) in cases(args.length, args.width).items():
    if prefixes and not name.startswith(prefixes):
      continue
    row = {"encoder": name, "batch": args.batch, "length": args.length, "width": args.width}
    programs = {}
    for sched, options in (("xla", None), ("memory", remat_lib.CPU_MEMORY_SCHEDULER)):
      for policy in args.policies.split(","):
        label = f"{sched}_{policy}"
        programs[label] = compiled_grad(make(policy), ids, args.batch, args.length,
                                        args.width, options)
        row[f"{label}_temp_mib"] = harness.memory(programs[label][0])["temp_bytes"] / 2 ** 20
    if args.repeats > 0:
      for label, seconds in best_cpu_seconds(programs, args.repeats).items():
        row[f"{label}_cpu_s"] = seconds
    harness.emit(row)
    rows.append(row)
  if args.out:
    harness.write_results(args.out, harness.run_meta("experiments/remat_memory.py", argv),
                          rows)
  return 0


if __name__ == "__main__":
  sys.exit(main())
