"""Forward vs forward+backward of the recurrent encoders, current code against the previous.

For S-LSTM and Star-Transformer (and RAN's layouts) at each (D, batch, L) it compiles the
forward pass of ``mean(sequence^2) + mean(pooled^2)`` and its gradient with
respect to all parameters, for the current module and for the copy of the module as it was
before issue 20 (``tests/oracles/*_v0.py``; same parameters). All functions of one case are
timed round-robin (``harness.time_interleaved``-style), so the ratios compare like with like
on a shared, noisy machine. Besides wall time it records the process CPU time of each call
(all threads), which a loaded machine distorts much less than wall time.

  # The runs of docs/benchmarks.md, "Recurrent backward passes" and "RAN layouts":
  nice -n 10 python experiments/recurrent_speed.py --encoders=slstm,star_transformer \
      --cases=128x1x512,128x1x2048,128x1x8192,256x8x512,256x8x2048 --repeats=3 \
      --out=docs/benchmarks/recurrent_cpu.json
  # RAN layouts (scan vs parallel one window per call vs parallel all windows), W=256:
  python experiments/recurrent_speed.py --encoders=ran \
      --cases=64x1x4096,64x1x8192,64x1x16384,128x16x1024,128x8x4096 --repeats=5 \
      --out=docs/benchmarks/ran_layouts_cpu.json
  # RAN in training mode (dropout 0.1): pooling the outputs before their dropout (the
  # default) against after (pool_dropped=True, the authors' order), docs/ran.md:
  python experiments/recurrent_speed.py --encoders=ran_pool --repeats=5 \
      --cases=64x1x4096,128x8x4096,256x8x2048 --out=docs/benchmarks/ran_pool_dropped_cpu.json
  # The Star-Transformer's default (its 2 cycles without a loop, scan_unroll=None) against
  # the rolled loop (scan_unroll=1), docs/benchmarks.md "Unrolling the Star-Transformer's
  # cycles":
  python experiments/recurrent_speed.py --encoders=star_unroll --repeats=3 \
      --cases=128x1x512,128x1x2048,128x1x8192,256x8x512,256x8x2048,256x8x8192 \
      --out=docs/benchmarks/star_unroll_cpu.json
  # The Star-Transformer's default, whose first cycle reuses the satellites' keys and
  # values for the embedding slot (h^0 = e), against the same 2 cycles run by nn.scan
  # without a loop (the default before 6 Dec), docs/benchmarks.md "The first cycle's
  # embedding slot":
  python experiments/recurrent_speed.py --encoders=star_first_cycle --repeats=5 \
      --cases=128x1x512,128x1x2048,128x1x8192,256x8x512,256x8x2048,256x8x8192 \
      --out=docs/benchmarks/star_first_cycle_cpu.json
  # ... and the same with share_cycle_params=True (every cycle's keys and values of the
  # embeddings are the first one's):
  python experiments/recurrent_speed.py --encoders=star_shared_kv --repeats=5 \
      --cases=128x1x2048,256x8x512,256x8x2048 --out=docs/benchmarks/star_shared_kv_cpu.json
  # The Transformer baseline without a loop over its layers (scan_unroll=layers) against
  # the loop (the default), at 2, 4, 6 and 12 layers, docs/benchmarks.md "Unrolling the
  # Transformer's layers":
  python experiments/recurrent_speed.py --encoders=transformer_unroll --layers=4 \
      --repeats=3 --cases=256x8x512,256x8x1024,256x2x4096 \
      --out=docs/benchmarks/transformer_unroll_cpu_4layers.json
  # ... and both under XLA:CPU's memory-optimized scheduler (--cpu_scheduler=memory):
  python experiments/recurrent_speed.py --encoders=transformer_unroll --layers=4 \
      --repeats=3 --cases=256x8x512,256x8x1024,256x2x4096 --cpu_scheduler=memory \
      --out=docs/benchmarks/transformer_unroll_cpu_4layers_memsched.json
  # The (Bi)LSTM's masked recurrence (any mask, since 2 Dec 2026) against flax's nn.RNN
  # with seq_lengths (tests/oracles/bilstm_v0.py), docs/benchmarks.md "BiLSTM: any mask":
  python experiments/recurrent_speed.py --encoders=bilstm --repeats=3 \
      --cases=128x1x2048,256x8x512,256x8x2048 --out=docs/benchmarks/bilstm_masked_cpu.json
  # Compiled memory and compile time only (--repeats=0: nothing is run, so a busy machine
  # does not matter; the numbers are XLA's accounting, not a measurement):
  python experiments/recurrent_speed.py --encoders=ran --repeats=0 \
      --cases=64x1x4096,64x1x8192,64x1x16384,128x16x1024,128x8x4096 \
      --out=docs/benchmarks/ran_layouts_memory_cpu.json
  # RAN's parallel form in blocks of 1 / 4 / all windows (a loop over blocks since 27 Nov:
  # each block projects, runs its GPC rows and attends at once), memory then time,
  # docs/benchmarks.md "RAN: the parallel form in blocks of windows":
  python experiments/recurrent_speed.py --encoders=ran_blocks --repeats=0 \
      --cases=64x1x4096,64x1x8192,64x1x16384,128x16x1024,128x8x4096 \
      --out=docs/benchmarks/ran_blocks_memory_cpu.json
  python experiments/recurrent_speed.py --encoders=ran_blocks --repeats=3 \
      --cases=64x1x4096,64x1x16384,128x8x4096 --out=docs/benchmarks/ran_blocks_cpu.json
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import jax
import jax.numpy as jnp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
if __name__ == "__main__":  # Before JAX allocates: huge pages for XLA's CPU buffers, what
  # `make` and the other benchmark scripts run with (docs/benchmarks.md, "Page faults").
  from longtext_jax import hostenv  # pylint: disable=g-import-not-at-top
  hostenv.reexec_with_hugepages(__file__)

from longtext_jax import encoders  # pylint: disable=g-import-not-at-top,wrong-import-position
from longtext_jax.layers import remat as remat_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from longtext_jax.train import benchmark as harness  # pylint: disable=g-import-not-at-top,wrong-import-position


def oracle(name: str):
  """The pre-issue-20 copy ``tests/oracles/<name>.py`` as a module."""
  spec = importlib.util.spec_from_file_location(f"oracle_{name}",
                                                os.path.join(ROOT, "tests", "oracles",
                                                             f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)
  return module


class StarScanOnly(encoders.StarTransformer):
  """The Star-Transformer with its cycles always run by ``nn.scan`` (unrolled when
  ``unroll`` covers them): the default before 6 Dec 2026, whose first cycle projects the
  embedding slot separately. Same parameters, same values to float rounding."""

  def _python_loop_over_cycles(self) -> bool:
    return False


def variants(name: str, length: int, layers: int = 2) -> dict[str, object]:
  """label -> module for one encoder: the current one and the previous implementation(s).

  The settings are those of experiments/benchmark.py (2 layers/steps, 4 heads, no dropout);
  learned position tables are sized to the length (a 2^17-row table would add the padding of
  its gradient to every backward pass). ``layers``: the Transformer's depth for
  transformer_unroll.
  """
  if name == "slstm":
    kw = dict(num_steps=2, position="sinusoidal", max_len=length)
    return {"new": encoders.SLSTM(**kw), "old": oracle("slstm_v0").SLSTM(**kw)}
  star_kw = dict(num_cycles=2, num_heads=4, dropout_rate=0.0, max_len=length)
  if name == "star_transformer":
    return {"new": encoders.StarTransformer(**star_kw),
            "old": oracle("star_transformer_v0").StarTransformer(**star_kw)}
  if name == "star_unroll":  # The default (2 cycles without a loop) against the rolled loop.
    return {"unrolled": encoders.StarTransformer(**star_kw),
            "rolled": encoders.StarTransformer(scan_unroll=1, **star_kw)}
  if name in ("star_first_cycle", "star_shared_kv"):  # The default, whose first cycle
    # reuses the satellites' keys and values for the embedding slot (and, with shared
    # parameters, every later cycle the first one's), against the scan without a loop.
    kw = dict(star_kw, share_cycle_params=name == "star_shared_kv")
    return {"reuse": encoders.StarTransformer(**kw), "scan": StarScanOnly(**kw)}
  if name == "transformer_unroll":  # No loop over the layers against the loop (default).
    kw = dict(num_layers=layers, num_heads=4, dropout_rate=0.0, pooling="max")
    return {"unrolled": encoders.Transformer(scan_unroll=layers, **kw),
            "rolled": encoders.Transformer(**kw)}
  if name in ("ran", "ran_blocks"):  # The scan, and impl='parallel' in blocks of k windows
    # (0 = all windows); ran_blocks adds blocks of 4.
    kw = dict(num_layers=2, num_heads=4, window_size=256)
    blocks = (1, 0) if name == "ran" else (1, 4, 0)
    return {"scan": encoders.RAN(impl="scan", **kw),
            **{f"parallel_block{k}": encoders.RAN(impl="parallel", attention_block=k, **kw)
               for k in blocks}}
  if name == "bilstm":  # The masked recurrence (any mask) against nn.RNN with seq_lengths.
    return {"new": encoders.BiLSTM(num_layers=2),
            "old": oracle("bilstm_v0").BiLSTM(num_layers=2)}
  if name == "ran_pool":  # Training mode (dropout 0.1): where the pooled path reads from.
    kw = dict(num_layers=2, num_heads=4, window_size=256, dropout_rate=0.1)
    return {"pool_clean": encoders.RAN(pool_dropped=False, **kw),
            "pool_dropped": encoders.RAN(pool_dropped=True, **kw)}
  raise ValueError(f"--encoders: unknown {name!r}; choose slstm, star_transformer, "
                   "star_unroll, star_first_cycle, star_shared_kv, transformer_unroll, ran, "
                   "ran_blocks, ran_pool, bilstm")


def loss_for(name: str, encoder):
  """The loss whose forward and gradient a row times: ``harness.speed_loss``, in training
  mode (dropout on, one fixed key) for ran_pool, whose variants differ only there."""
  key = jax.random.key(2) if name == "ran_pool" else None
  return harness.speed_loss(encoder, dropout_key=key)


def cpu_and_wall(fn, args) -> tuple[float, float]:
  """(process CPU seconds, wall seconds) of one blocking call."""
  c0, w0 = time.process_time(), time.perf_counter()
  jax.block_until_ready(fn(*args))
  return time.process_time() - c0, time.perf_counter() - w0


def run_case(name: str, d_model: int, batch: int, length: int, repeats: int,
             layers: int = 2, compiler_options: dict | None = None) -> dict:
  """Compiles and times every variant's forward and forward+backward, interleaved."""
  mods = variants(name, length, layers)
  x = jax.random.normal(jax.random.key(0), (batch, length, d_model), jnp.float32)
  mask = jnp.ones((batch, length), bool)
  first = next(iter(mods.values()))
  params = jax.jit(first.init)(jax.random.key(1), x[:, :min(length, 256)],
                               mask[:, :min(length, 256)])
  entries, row = {}, {"encoder": name, "d_model": d_model, "batch": batch, "length": length}
  if name == "transformer_unroll":
    row["layers"] = layers
  for label, enc in mods.items():
    loss = loss_for(name, enc)  # Its forward is timed as the forward.
    for mode, fn in (("fwd", loss), ("fwd_bwd", jax.grad(loss))):
      compiled, seconds = harness.compile_fn(fn, (params, x, mask), compiler_options)
      entries[(label, mode)] = compiled
      row[f"{label}_{mode}_compile_s"] = seconds
      row[f"{label}_{mode}_mem_bytes"] = harness.memory(compiled)["mem_bytes"]
  if repeats <= 0:  # Compile-only: memory and compile time.
    return row
  args = (params, x, mask)
  for fn in entries.values():  # Warm-up.
    jax.block_until_ready(fn(*args))
  cpu = {k: [] for k in entries}
  wall = {k: [] for k in entries}
  for _ in range(repeats):
    for key, fn in entries.items():
      c, w = cpu_and_wall(fn, args)
      cpu[key].append(c)
      wall[key].append(w)
  for (label, mode) in entries:
    row[f"{label}_{mode}_cpu_s"] = min(cpu[(label, mode)])
    row[f"{label}_{mode}_wall_s"] = min(wall[(label, mode)])
  for label in mods:
    for clock in ("cpu", "wall"):
      row[f"{label}_ratio_{clock}"] = (row[f"{label}_fwd_bwd_{clock}_s"]
                                       / row[f"{label}_fwd_{clock}_s"])
  return row


def main(argv=None) -> int:
  """Command line: see the module docstring."""
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--encoders", default="slstm,star_transformer")
  p.add_argument("--cases", default="128x1x512,128x1x2048",
                 help="comma list of DxBxL (width x batch x length)")
  p.add_argument("--repeats", type=int, default=5,
                 help="timed calls per function (0: compile only, memory and compile time)")
  p.add_argument("--layers", type=int, default=2,
                 help="the Transformer's depth for --encoders=transformer_unroll")
  p.add_argument("--cpu_scheduler", default="xla", choices=("xla", "memory"),
                 help="XLA:CPU's scheduler for every compiled function: XLA's default or "
                      "the memory-optimized one (layers.remat.CPU_MEMORY_SCHEDULER)")
  p.add_argument("--out", default="")
  args = p.parse_args(argv)
  options = (dict(remat_lib.CPU_MEMORY_SCHEDULER) if args.cpu_scheduler == "memory"
             else None)
  rows = []
  # ran_default_layout: what RAN's default impl='auto' / attention_block=None runs here.
  meta = harness.run_meta("experiments/recurrent_speed.py", argv,
                          ran_default_layout=list(encoders.RAN().layout))
  for name in args.encoders.split(","):
    for case in args.cases.split(","):
      d_model, batch, length = (int(v) for v in case.split("x"))
      row = run_case(name, d_model, batch, length, args.repeats, args.layers, options)
      row["cpu_scheduler"] = args.cpu_scheduler
      harness.emit(row)
      rows.append(row)
  meta["load_average_end"] = os.getloadavg()
  if args.out:
    harness.write_results(args.out, meta, rows)
  return 0


if __name__ == "__main__":
  sys.exit(main())
