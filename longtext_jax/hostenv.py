"""Transparent huge pages for XLA:CPU's buffers: the command lines re-run themselves with
glibc's ``glibc.malloc.hugetlb=1`` tunable (docs/benchmarks.md, "Page faults").

XLA:CPU allocates every call's temporary and output buffers with ``malloc``; glibc serves the
large ones from fresh ``mmap`` regions and unmaps them on ``free``, so each training step
faults its whole working set in again, 4 KiB at a time (an S-LSTM gradient at D=256, batch 8,
L=512: 100,000 page faults, 392 MiB, every call). With ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``
(glibc >= 2.35) malloc asks the kernel for transparent huge pages on those regions: about 500
faults per call; forward+backward 1.2-1.9x faster wherever a call faulted much, whole
training steps 1.18-1.37x (the demo config, RAN on 4k tokens), on the CPU measured. Values are
unchanged: only where memory comes from changes.

glibc reads its tunables when a process starts, so a running interpreter cannot turn this on
for itself: :func:`reexec_with_hugepages` replaces the process (same pid, same arguments) with
one that has the tunable, before JAX is imported. The commands call it only when run as
programs (``python -m longtext_jax.main`` etc.); importing the library never does.
``LONGTEXT_JAX_HUGEPAGES=0`` turns it off. ``make`` targets export the tunable themselves.

Standard library only: this module runs before anything heavy is imported.
"""
from __future__ import annotations

import os
import platform
import sys
from typing import Mapping

TUNABLE = "glibc.malloc.hugetlb=1"
OPT_OUT = "LONGTEXT_JAX_HUGEPAGES"
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
MIN_GLIBC = (2, 35)  # The first glibc with the glibc.malloc.hugetlb tunable.


def thp_mode(path: str = THP_ENABLED) -> str | None:
  """The kernel's transparent-huge-page mode ('always', 'madvise', 'never'), or None when
  the kernel does not say (not Linux, no THP support)."""
  try:
    with open(path, encoding="ascii") as f:
      text = f.read()
  except OSError:
    return None
  for word in text.split():  # "always [madvise] never": the bracketed one is in force.
    if word.startswith("[") and word.endswith("]"):
      return word[1:-1]
  return None


def _glibc_version(libc: tuple[str, str]) -> tuple[int, ...] | None:
  name, version = libc
  if name != "glibc":
    return None
  try:
    return tuple(int(p) for p in version.split(".")[:2])
  except ValueError:
    return None


def _tunables(environ: Mapping[str, str]) -> dict[str, str]:
  """``GLIBC_TUNABLES`` ('name=value:name=value') as a dict."""
  return dict(t.split("=", 1) for t in environ.get("GLIBC_TUNABLES", "").split(":")
              if "=" in t)


def _opted_out(environ: Mapping[str, str]) -> bool:
  return environ.get(OPT_OUT, "").strip().lower() in ("0", "false", "no", "off")


def hugepage_env(environ: Mapping[str, str], libc: tuple[str, str], thp: str | None
                 ) -> dict[str, str] | None:
  """The environment to re-run with, or None when there is nothing to do.

  Nothing to do when: ``LONGTEXT_JAX_HUGEPAGES`` is '0'/'false'/'no'/'off'; the C library is
  not glibc >= 2.35 (``platform.libc_ver()``); the kernel has no transparent huge pages or
  has them off (``thp`` None or 'never'); or ``GLIBC_TUNABLES`` already sets
  ``glibc.malloc.hugetlb`` (to any value: the user's choice is kept, and the re-run process
  sees it set, so it never re-runs twice). Other tunables already set are kept.

  Args:
    environ: the current environment.
    libc: ``platform.libc_ver()``.
    thp: :func:`thp_mode`.
  """
  if _opted_out(environ):
    return None
  version = _glibc_version(libc)
  if version is None or version < MIN_GLIBC or thp in (None, "never"):
    return None
  if "glibc.malloc.hugetlb" in _tunables(environ):
    return None
  current = environ.get("GLIBC_TUNABLES", "")
  env = dict(environ)
  env["GLIBC_TUNABLES"] = f"{current}:{TUNABLE}" if current else TUNABLE
  return env


def reexec_with_hugepages(program: str, argv: list[str] | None = None) -> None:
  """Replaces this process with the same command under ``glibc.malloc.hugetlb=1`` when
  :func:`hugepage_env` says so; returns (doing nothing) otherwise, or when the process
  cannot be replaced.

  Call it first thing in a program's ``__main__`` block, before JAX is imported (the
  imports done before it are simply repeated).

  Args:
    program: the calling program's ``__file__``. Nothing happens unless the interpreter
      was started on that file (``python -m module`` or ``python path.py``): run any other
      way (``runpy`` inside a test runner, ``python -c``), re-running the command line
      would start something else.
    argv: the command line to run again (default ``sys.orig_argv``: the interpreter's
      own options, ``-m module`` and the arguments, exactly as started).
  """
  if sys.platform != "linux" or not sys.argv:
    return
  started_on = os.path.realpath(sys.argv[0]) if sys.argv[0] not in ("-c", "") else None
  if started_on != os.path.realpath(program):
    return
  env = hugepage_env(os.environ, platform.libc_ver(), thp_mode())
  if env is None:
    return
  argv = list(sys.orig_argv if argv is None else argv)
  if not argv:
    return
  # argv[0] as typed may be a bare 'python' that a PATH search would resolve to another
  # interpreter (and so another sys.prefix / virtualenv): name this one's executable.
  argv[0] = sys.executable
  print(f"longtext_jax: re-running with GLIBC_TUNABLES={env['GLIBC_TUNABLES']} (huge pages "
        f"for XLA's CPU buffers, docs/benchmarks.md; {OPT_OUT}=0 skips this)",
        file=sys.stderr)
  sys.stdout.flush()
  sys.stderr.flush()
  try:
    os.execve(sys.executable, argv, env)
  except OSError as e:  # Carry on unchanged: slower, not wrong.
    print(f"longtext_jax: could not re-run ({e}); carrying on without huge pages",
          file=sys.stderr)


def allocator(environ: Mapping[str, str] | None = None,
              libc: tuple[str, str] | None = None) -> str:
  """How this process's memory is allocated, in words, for benchmark records: 'glibc
  malloc, huge pages (glibc.malloc.hugetlb=1)', 'glibc malloc (4 KiB pages)', the
  preloaded allocator (``LD_PRELOAD``), or 'system malloc' off glibc. Other
  ``glibc.malloc.*`` tunables in force follow, in their order (e.g. '..., huge pages
  (glibc.malloc.hugetlb=1; glibc.malloc.arena_max=1)'), so that rows measured under
  different malloc settings never read alike.

  Args:
    environ: the environment (default ``os.environ``).
    libc: ``platform.libc_ver()`` (read when None).
  """
  environ = os.environ if environ is None else environ
  preload = environ.get("LD_PRELOAD", "")
  for name in ("tcmalloc", "jemalloc", "mimalloc"):
    if name in preload:
      return f"{name} (LD_PRELOAD)"
  if (libc or platform.libc_ver())[0] != "glibc":
    return "system malloc"
  tunables = _tunables(environ)
  hugetlb = tunables.pop("glibc.malloc.hugetlb", "0")
  others = [f"{k}={v}" for k, v in tunables.items() if k.startswith("glibc.malloc.")]
  if hugetlb != "0":
    return "glibc malloc, huge pages (" + "; ".join([f"glibc.malloc.hugetlb={hugetlb}"]
                                                   + others) + ")"
  return "glibc malloc (" + "; ".join(["4 KiB pages"] + others) + ")"


def report(environ: Mapping[str, str] | None = None, libc: tuple[str, str] | None = None,
           thp: str | None = "read") -> str:
  """What this host supports and what a process started from ``environ`` would get, with
  the line that turns huge pages on for any program (``python -m longtext_jax.hostenv``).

  Args:
    environ: the environment (default ``os.environ``).
    libc: ``platform.libc_ver()`` (read when None).
    thp: the kernel's THP mode (default: read with :func:`thp_mode`).
  """
  environ = os.environ if environ is None else environ
  libc = libc or platform.libc_ver()
  thp = thp_mode() if thp == "read" else thp
  lines = [f"C library: {' '.join(p for p in libc if p) or 'unknown'}; transparent huge "
           f"pages: {thp or 'not available'}",
           f"this environment: {allocator(environ, libc)}"]
  env = hugepage_env(environ, libc, thp)
  if env is not None:
    lines.append("the commands re-run themselves with huge pages; for any other program "
                 "(your script, a Jupyter kernel) start it with:")
    lines.append(f"  export GLIBC_TUNABLES={env['GLIBC_TUNABLES']}")
  elif _opted_out(environ):
    lines.append(f"{OPT_OUT}={environ[OPT_OUT]}: the commands leave the environment as it is")
  elif "glibc.malloc.hugetlb" in _tunables(environ):
    lines.append("GLIBC_TUNABLES already sets glibc.malloc.hugetlb: nothing to do")
  else:
    lines.append("huge pages for malloc need glibc >= 2.35 and transparent huge pages "
                 "('always' or 'madvise'): not available here")
  return "\n".join(lines)


if __name__ == "__main__":
  print(report())
