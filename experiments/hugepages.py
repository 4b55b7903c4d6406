"""Page faults and huge pages: each encoder's forward and forward+backward under glibc's
default malloc and under ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (longtext_jax/hostenv.py).

glibc reads its tunables at process start, so every (encoder, case, setting) runs in a
worker process of its own; the settings alternate, ``--rounds`` times, and each keeps its
best call. Per call it records process CPU time, wall time and minor page faults
(``getrusage``). The run of docs/benchmarks.md, "Page faults":

  python experiments/hugepages.py --out=docs/benchmarks/hugepages_cpu.json

  # one case, quickly, and the setting that also keeps freed memory in malloc's heaps:
  python experiments/hugepages.py --encoders=slstm --cases=256x8x512 --rounds=1 \
      --settings=default,hugepages,hugepages_heap

  # settings that never return memory (no faults at all; not faster: docs/benchmarks.md,
  # "Keeping freed memory"):
  python experiments/hugepages.py --encoders=star_transformer,slstm \
      --settings=hugepages,hugepages_keep,hugepages_pad --out=/tmp/keep.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from longtext_jax import hostenv  # pylint: disable=g-import-not-at-top,wrong-import-position

# Freed memory stays in malloc's heap: no mmap, no trimming, the heap grown 256 MiB ahead.
_NEVER_RETURN = ("glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736:"
                 "glibc.malloc.top_pad=268435456")
SETTINGS = {
    "default": None,
    "hugepages": "glibc.malloc.hugetlb=1",
    # Also keeps freed memory in malloc's heaps: a fixed mmap threshold (32 MiB, glibc's
    # largest; a fixed value turns off its dynamic adjustment) and a 1 GiB trim threshold.
    "hugepages_heap": ("glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=33554432:"
                       "glibc.malloc.trim_threshold=1073741824"),
    # Never gives freed memory back: one arena (every thread allocates from the main heap,
    # grown with brk; a non-main arena maps a request that outgrows its 64 MiB heap
    # whatever mmap_max says), no mmap (glibc maps requests above its largest threshold,
    # 32 MiB, otherwise), no trimming, and the heap grown 256 MiB beyond each request.
    "hugepages_keep": "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1:" + _NEVER_RETURN,
    # The same with glibc's per-thread arenas.
    "hugepages_pad": "glibc.malloc.hugetlb=1:" + _NEVER_RETURN,
}
ENCODERS = ("slstm", "star_transformer", "ran", "transformer")
CASES = "128x1x512,128x1x2048,128x1x8192,256x8x512,256x8x2048"


def build(name: str, length: int):
  """The encoder settings of experiments/profile_backward.py (those of recurrent_speed.py:
  2 layers/steps/cycles, 4 heads, no dropout; RAN windows of 256), plus a 2-layer
  full-attention Transformer."""
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  import profile_backward  # pylint: disable=g-import-not-at-top
  from longtext_jax import encoders  # pylint: disable=g-import-not-at-top
  settings = {**profile_backward.SETTINGS,
              "transformer": lambda n: encoders.Transformer(num_layers=2, num_heads=4)}
  return settings[name](length)


def worker(name: str, case: str, repeats: int) -> dict:
  """Times one encoder at one case in this process: best of ``repeats`` calls after a
  warm-up, for the forward loss and its gradient with respect to every parameter."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  d_model, batch, length = (int(v) for v in case.split("x"))
  enc = build(name, length)
  x = jax.random.normal(jax.random.key(0), (batch, length, d_model))
  mask = jnp.ones((batch, length), bool)
  params = jax.jit(enc.init)(jax.random.key(1), x, mask)

  def loss(p, x):
    out = enc.apply(p, x, mask)
    return jnp.mean(out.sequence ** 2) + jnp.mean(out.pooled ** 2)

  row = {"encoder": name, "case": case, "allocator": hostenv.allocator()}
  for label, fn in (("fwd", jax.jit(loss)), ("fwd_bwd", jax.jit(jax.grad(loss)))):
    jax.block_until_ready(fn(params, x))
    cpu, wall, faults = [], [], []
    for _ in range(repeats):
      r0, c0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), \
          time.perf_counter()
      jax.block_until_ready(fn(params, x))
      w1, c1, r1 = time.perf_counter(), time.process_time(), \
          resource.getrusage(resource.RUSAGE_SELF)
      cpu.append(c1 - c0)
      wall.append(w1 - w0)
      faults.append(r1.ru_minflt - r0.ru_minflt)
    row[f"{label}_cpu_s"], row[f"{label}_wall_s"] = min(cpu), min(wall)
    row[f"{label}_faults"] = sorted(faults)[len(faults) // 2]
  return row


def run_worker(name: str, case: str, setting: str, repeats: int) -> dict:
  """One worker process under ``setting`` ('default': no tunable at all)."""
  env = {k: v for k, v in os.environ.items()
         if k not in ("GLIBC_TUNABLES", hostenv.OPT_OUT, "LD_PRELOAD")}
  if SETTINGS[setting]:
    env["GLIBC_TUNABLES"] = SETTINGS[setting]
  out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker",
                        f"--encoders={name}", f"--cases={case}", f"--repeats={repeats}"],
                       env=env, capture_output=True, text=True, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def compare(rows: list[dict], settings: list[str]) -> list[dict]:
  """Per (encoder, case): the best of each setting over the rounds, and each setting's
  speed-ups over the first one (``speedup_<setting>_{fwd_cpu,fwd_bwd_cpu,fwd_bwd_wall}``)."""
  table = []
  for key in dict.fromkeys((r["encoder"], r["case"]) for r in rows):
    best = {}
    for setting in settings:
      mine = [r for r in rows if (r["encoder"], r["case"]) == key and r["setting"] == setting]
      best[setting] = {f: min(r[f] for r in mine) for f in
                       ("fwd_cpu_s", "fwd_wall_s", "fwd_bwd_cpu_s", "fwd_bwd_wall_s")}
      best[setting].update({f: mine[0][f] for f in ("fwd_faults", "fwd_bwd_faults")})
    row = {"encoder": key[0], "case": key[1]}
    for setting in settings:
      row.update({f"{setting}_{k}": v for k, v in best[setting].items()})
    base = best[settings[0]]
    for setting in settings[1:]:
      b = best[setting]
      row.update({f"speedup_{setting}_fwd_cpu": base["fwd_cpu_s"] / b["fwd_cpu_s"],
                  f"speedup_{setting}_fwd_bwd_cpu": base["fwd_bwd_cpu_s"] / b["fwd_bwd_cpu_s"],
                  f"speedup_{setting}_fwd_bwd_wall":
                      base["fwd_bwd_wall_s"] / b["fwd_bwd_wall_s"]})
    table.append(row)
  return table


def main(argv=None) -> dict | None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--encoders", default=",".join(ENCODERS))
  p.add_argument("--cases", default=CASES, help="D x batch x L, comma-separated")
  p.add_argument("--settings", default="default,hugepages",
                 help=f"allocator settings to compare, the first the baseline: {list(SETTINGS)}")
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--out", default="")
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.worker:
    print(json.dumps(worker(args.encoders, args.cases, args.repeats)))
    return None
  import jax  # pylint: disable=g-import-not-at-top
  from longtext_jax.train import benchmark as harness  # pylint: disable=g-import-not-at-top
  settings = args.settings.split(",")
  unknown = [s for s in settings if s not in SETTINGS]
  if unknown or len(settings) < 2:
    p.error(f"--settings: two or more of {list(SETTINGS)}, got {args.settings!r}")
  rows = []
  for name in args.encoders.split(","):
    for case in args.cases.split(","):
      for _ in range(args.rounds):
        for setting in settings:  # Alternated: drift of a shared machine hits them all.
          rows.append({"setting": setting, **run_worker(name, case, setting, args.repeats)})
  table = compare(rows, settings)
  for t in table:
    print(f"{t['encoder']:>16} {t['case']:>10}: fwd+bwd ms CPU (faults) " + ", ".join(
        f"{s} {t[f'{s}_fwd_bwd_cpu_s'] * 1e3:.1f} ({t[f'{s}_fwd_bwd_faults']})"
        + (f" {t[f'speedup_{s}_fwd_bwd_cpu']:.2f}x" if s != settings[0] else "")
        for s in settings))
  meta = harness.run_meta("experiments/hugepages.py", argv,
                          glibc="-".join(platform.libc_ver()), thp_mode=hostenv.thp_mode(),
                          settings={k: SETTINGS[k] for k in settings})
  del meta["allocator"]  # This process's; each row has its worker's.
  result = {"meta": meta, "rows": rows, "table": table}
  if args.out:
    harness.write_results(args.out, meta, rows, table=table)
  return result


if __name__ == "__main__":
  main()
