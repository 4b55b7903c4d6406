"""The one benchmark harness: compile time, steady-state time, compiled memory, JSON rows.

Every script in ``experiments/`` that times or sizes a jitted function goes through here, so
the numbers of docs/benchmarks.md are all measured the same way:

* compile time: ``jax.jit(fn).lower(*args).compile()``, wall seconds;
* compiled memory: ``compiled.memory_analysis()`` (arguments + outputs + temporaries, minus
  aliased buffers), known without running the program;
* steady-state time: ``warmup`` blocking calls, then the median (or best) of ``repeats``
  blocking calls (``jax.block_until_ready``);
* rows: one flat dict per case, printed as one JSON line by :func:`emit`;
* the machine: :func:`host` names the CPU model (a cloud machine's host can change between
  sessions, and timings of two CPU models do not compare).

  from longtext_jax.train import benchmark
  row = benchmark.measure(jax.grad(loss), (params, x), repeats=5)
  benchmark.emit({"model": "ran", "length": 4096, **row})
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable, Hashable, Mapping, Sequence

import jax
import jax.numpy as jnp

from longtext_jax import fileio
from longtext_jax.hostenv import allocator  # Recorded beside host() by the benchmarks.

_REDUCE = {"median": statistics.median, "min": min}


def compile_fn(fn: Callable, args: Sequence[Any],
               compiler_options: dict[str, Any] | None = None) -> tuple[Any, float]:
  """Jits, lowers and compiles ``fn`` for ``args`` (arrays or ``jax.ShapeDtypeStruct``).

  Args:
    fn: a function of arrays (jitted or not).
    args: its positional arguments; abstract ones suffice (nothing runs).
    compiler_options: XLA options for this compilation (e.g.
      ``layers.remat.CPU_MEMORY_SCHEDULER``); None: XLA's defaults.

  Returns:
    ``(compiled, seconds)``: the compiled executable and the wall time of lower + compile.
  """
  t0 = time.perf_counter()
  compiled = jax.jit(fn).lower(*args).compile(compiler_options)
  return compiled, time.perf_counter() - t0


def memory(compiled: Any) -> dict[str, int | None]:
  """XLA's memory accounting of a compiled program, in bytes.

  Args:
    compiled: the result of :func:`compile_fn` (or of ``.lower(...).compile()``).

  Returns:
    ``{'mem_bytes', 'temp_bytes', 'argument_bytes', 'output_bytes'}``; ``mem_bytes`` =
    arguments + outputs + temporaries - aliased. All None when the backend does not tell.
  """
  try:
    m = compiled.memory_analysis()
  except Exception:  # pylint: disable=broad-except  # Not implemented on some backends.
    m = None
  if m is None:
    return {"mem_bytes": None, "temp_bytes": None, "argument_bytes": None,
            "output_bytes": None}
  total = (m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
           - getattr(m, "alias_size_in_bytes", 0))
  return {"mem_bytes": int(total), "temp_bytes": int(m.temp_size_in_bytes),
          "argument_bytes": int(m.argument_size_in_bytes),
          "output_bytes": int(m.output_size_in_bytes)}


def flops(compiled: Any) -> float | None:
  """FLOPs of one call by XLA's cost analysis (None when the backend does not tell)."""
  try:
    cost = compiled.cost_analysis()
  except Exception:  # pylint: disable=broad-except
    return None
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else None
  return float(cost["flops"]) if cost and "flops" in cost else None


def speed_loss(encoder, dropout_key: jax.Array | None = None) -> Callable:
  """``(params, x, mask) -> mean(sequence^2) + mean(pooled^2)`` of an encoder module: the
  function whose forward and gradient the speed scripts time (both outputs, in float32, so
  that every parameter gets a gradient). No dropout, or, given ``dropout_key``, training
  mode with that fixed dropout key.

  A forward of ``pooled`` alone may skip work (the S-LSTM drops its last token update when
  only ``pooled`` is used), so scripts that compare a forward with its gradient
  (experiments/recurrent_speed.py, ran_gpu_speed.py) time this loss itself as the forward.
  """
  def loss(params, x, mask):
    if dropout_key is None:
      out = encoder.apply(params, x, mask, deterministic=True)
    else:
      out = encoder.apply(params, x, mask, deterministic=False, rngs={"dropout": dropout_key})
    return (jnp.mean(out.sequence.astype(jnp.float32) ** 2)
            + jnp.mean(out.pooled.astype(jnp.float32) ** 2))
  return loss


def call_seconds(fn: Callable, args: Sequence[Any]) -> float:
  """Wall seconds of one call of ``fn(*args)``, waiting for every output."""
  t0 = time.perf_counter()
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - t0


def time_fn(fn: Callable, args: Sequence[Any], repeats: int = 3, warmup: int = 1,
            max_first_s: float = float("inf"), reduce: str = "median"
            ) -> tuple[float | None, list[float]]:
  """Steady-state seconds of ``fn(*args)``.

  Args:
    fn: a (compiled or jitted) function.
    args: its arguments.
    repeats: timed calls after the warm-up.
    warmup: untimed calls first (the first one compiles a merely jitted ``fn``).
    max_first_s: if the first warm-up call takes longer, stop there and return None.
    reduce: 'median' or 'min' of the timed calls.

  Returns:
    ``(seconds, times)``: the reduced time (None if stopped by ``max_first_s``) and every
    timed call's seconds.
  """
  for i in range(warmup):
    first = call_seconds(fn, args)
    if i == 0 and first > max_first_s:
      return None, []
  times = [call_seconds(fn, args) for _ in range(repeats)]
  return _REDUCE[reduce](times), times


def time_interleaved(entries: Mapping[Hashable, tuple[Callable, Sequence[Any]]],
                     repeats: int = 3, warmup: int = 1, reduce: str = "median"
                     ) -> tuple[dict[Hashable, float], dict[Hashable, list[float]]]:
  """Like :func:`time_fn` for several functions timed in round-robin order, so that a
  change of machine load hits all of them alike (ratios from one run are fair).

  Args:
    entries: key -> (fn, args).
    repeats: timing rounds after the warm-up.
    warmup: untimed rounds first.
    reduce: 'median' or 'min' of each entry's timed calls.

  Returns:
    ``(seconds, times)``: key -> reduced seconds, and key -> every timed call's seconds.
  """
  for _ in range(warmup):
    for fn, args in entries.values():
      call_seconds(fn, args)
  times: dict[Hashable, list[float]] = {k: [] for k in entries}
  for _ in range(repeats):
    for key, (fn, args) in entries.items():
      times[key].append(call_seconds(fn, args))
  return {k: _REDUCE[reduce](t) for k, t in times.items()}, times


def measure(fn: Callable, args: Sequence[Any], repeats: int = 3, warmup: int = 1,
            run: bool = True, max_first_s: float = float("inf"),
            reduce: str = "median") -> dict[str, Any]:
  """Compiles, sizes and (if ``run``) times one function: one benchmark case.

  Args:
    fn: the function (e.g. a forward pass or ``jax.grad`` of a loss).
    args: its arguments (concrete arrays when ``run``).
    repeats, warmup, max_first_s, reduce: see :func:`time_fn`.
    run: False: compile and size only (e.g. a length too slow to run).

  Returns:
    A flat row: ``compile_s``, the :func:`memory` fields, ``flops``, ``time_s`` (None if
    not run) and ``times_s``.
  """
  compiled, compile_s = compile_fn(fn, args)
  row = {"compile_s": compile_s, **memory(compiled), "flops": flops(compiled),
         "time_s": None, "times_s": []}
  if run:
    row["time_s"], row["times_s"] = time_fn(compiled, args, repeats, warmup, max_first_s,
                                            reduce)
  return row


def emit(row: Mapping[str, Any], stream=None) -> None:
  """Prints ``row`` as one JSON line (and flushes): one line per benchmark case."""
  stream = sys.stdout if stream is None else stream
  print(json.dumps(dict(row), default=str), file=stream, flush=True)


def run_meta(script: str, argv: Sequence[str] | None = None, **extra: Any) -> dict:
  """What every results file of experiments/ records about its run: the command that made
  it (``python <script> <args>``; ``argv`` None = this process's arguments), the device,
  jax's version, the host CPU, the allocator and the load average, then ``extra``."""
  args = sys.argv[1:] if argv is None else list(argv)
  device = jax.devices()[0]
  return {"command": " ".join(["python", script] + args),
          "device": f"{device.device_kind} ({jax.default_backend()})",
          "jax": jax.__version__, "host": host(), "allocator": allocator(),
          "load_average": os.getloadavg(), **extra}


def write_results(path: str, meta: Mapping[str, Any], rows: Sequence[Any],
                  **extra: Any) -> None:
  """Writes ``{"meta": meta, "rows": rows, **extra}`` as indented JSON to ``path``,
  creating its folder. Atomic: written to a temporary file beside it, then renamed over
  ``path``, so a run killed while writing leaves the previous file whole, never half of a
  new one (:func:`fileio.write_text_atomic`). Values JSON cannot encode are written as
  their ``str``."""
  fileio.write_json_atomic(path, {"meta": dict(meta), "rows": list(rows), **extra},
                           default=str)


# The x86 vector extensions that change XLA:CPU's and BLAS's code paths, widest first.
_VECTOR_FLAGS = ("amx_tile", "avx512_bf16", "avx512f", "avx2", "avx")


def host(cpuinfo: str | None = None) -> str:
  """The host CPU in words: model name, family/model and widest vector extension, cores.

  E.g. ``'AMD EPYC (family 26 model 2, avx512_bf16), 2 cores'``. Recorded in every
  benchmark's metadata: a cloud machine's CPU model can change between sessions, and
  timings (and ratios against other libraries) taken on two models do not compare.

  Args:
    cpuinfo: the text of ``/proc/cpuinfo`` (read when None); off Linux,
      ``platform.processor()`` is used.
  """
  if cpuinfo is None:
    try:
      with open("/proc/cpuinfo", encoding="utf-8") as f:
        cpuinfo = f.read()
    except OSError:
      cpuinfo = ""
  first = {}
  for line in cpuinfo.split("\n\n", 1)[0].splitlines():  # The first processor's block.
    key, sep, value = line.partition(":")
    if sep:
      first[key.strip()] = value.strip()
  name = first.get("model name") or platform.processor() or platform.machine() or "unknown"
  details = []
  if "cpu family" in first:
    details.append(f"family {first['cpu family']} model {first.get('model', '?')}")
  flags = set(first.get("flags", "").split())
  details += [f for f in _VECTOR_FLAGS if f in flags][:1]
  detail = f" ({', '.join(details)})" if details else ""
  return f"{name}{detail}, {os.cpu_count()} cores"
