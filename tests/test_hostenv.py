"""longtext_jax.hostenv: when the commands re-run themselves under glibc.malloc.hugetlb=1,
that the re-run is the same command in the same process, and that it never loops."""
import json
import os
import platform
import subprocess
import sys

import pytest

from longtext_jax import hostenv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLIBC = ("glibc", "2.36")
HOST_CAN = hostenv.hugepage_env({}, platform.libc_ver(), hostenv.thp_mode()) is not None


@pytest.mark.parametrize("libc,thp,want", [
    (("glibc", "2.36"), "madvise", True), (("glibc", "2.35"), "always", True),
    (("glibc", "2.40"), "madvise", True), (("glibc", "2.34"), "madvise", False),
    (("glibc", "2.17"), "always", False), (("", ""), "madvise", False),
    (("musl", "1.2"), "madvise", False), (("glibc", "2.36"), "never", False),
    (("glibc", "2.36"), None, False), (("glibc", "garbage"), "madvise", False)])
def test_applies_only_where_glibc_and_the_kernel_can(libc, thp, want):
  env = hostenv.hugepage_env({"PATH": "/bin"}, libc, thp)
  assert (env is not None) == want
  if want:
    assert env == {"PATH": "/bin", "GLIBC_TUNABLES": hostenv.TUNABLE}


@pytest.mark.parametrize("current", [
    "", "glibc.malloc.tcache_count=0", "glibc.malloc.tcache_count=0:glibc.pthread.rseq=0"])
def test_keeps_other_tunables_and_never_applies_twice(current):
  environ = {"GLIBC_TUNABLES": current} if current else {}
  env = hostenv.hugepage_env(environ, GLIBC, "madvise")
  tunables = env["GLIBC_TUNABLES"].split(":")
  assert tunables[-1] == hostenv.TUNABLE
  assert tunables[:-1] == (current.split(":") if current else [])
  assert hostenv.hugepage_env(env, GLIBC, "madvise") is None  # The re-run process stops.


@pytest.mark.parametrize("value", ["glibc.malloc.hugetlb=0", "glibc.malloc.hugetlb=2",
                                   "glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=0"])
def test_a_users_own_hugetlb_setting_is_kept(value):
  assert hostenv.hugepage_env({"GLIBC_TUNABLES": value}, GLIBC, "madvise") is None


@pytest.mark.parametrize("value,off", [("0", True), ("false", True), ("Off", True),
                                       ("no", True), ("1", False), ("", False)])
def test_opt_out(value, off):
  env = hostenv.hugepage_env({hostenv.OPT_OUT: value}, GLIBC, "madvise")
  assert (env is None) == off


@pytest.mark.parametrize("text,mode", [("always [madvise] never\n", "madvise"),
                                       ("[always] madvise never\n", "always"),
                                       ("always madvise [never]\n", "never"),
                                       ("", None), ("always madvise never", None)])
def test_thp_mode_reads_the_bracketed_word(tmp_path, text, mode):
  path = tmp_path / "enabled"
  path.write_text(text)
  assert hostenv.thp_mode(str(path)) == mode
  assert hostenv.thp_mode(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("environ,want", [
    ({}, "glibc malloc (4 KiB pages)"),
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, "glibc malloc (4 KiB pages)"),
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"},
     "glibc malloc, huge pages (glibc.malloc.hugetlb=1)"),
    # Other malloc tunables are named (records of different settings never read alike);
    # tunables of other glibc parts are not.
    ({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=1:"
                        "glibc.cpu.hwcaps=-AVX512F:glibc.malloc.arena_max=1"},
     "glibc malloc, huge pages (glibc.malloc.hugetlb=1; glibc.malloc.tcache_count=0; "
     "glibc.malloc.arena_max=1)"),
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0:glibc.malloc.top_pad=0"},
     "glibc malloc (4 KiB pages; glibc.malloc.top_pad=0)"),
    ({"LD_PRELOAD": "/usr/lib/libtcmalloc_minimal.so.4",
      "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, "tcmalloc (LD_PRELOAD)")])
def test_allocator_names_what_is_in_force(environ, want):
  assert hostenv.allocator(environ, GLIBC) == want
  assert hostenv.allocator({}, ("", "")) == "system malloc"


_PROGRAM = """
import json, os, sys
sys.path.insert(0, {root!r})
from longtext_jax import hostenv
def say(what):
  print(json.dumps([what, os.getpid(), os.environ.get("GLIBC_TUNABLES", "-"), sys.prefix,
                    sys.argv[1:]]), flush=True)
say("start")
hostenv.reexec_with_hugepages(__file__)
say("after")
"""


def _run(args, extra_env=None):
  env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", hostenv.OPT_OUT)}
  env.update(extra_env or {})
  return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120,
                        check=True)


def test_program_reruns_itself_once_in_the_same_process_with_its_arguments(tmp_path):
  program = tmp_path / "program.py"
  program.write_text(_PROGRAM.format(root=ROOT))
  r = _run([sys.executable, "-X", "utf8", str(program), "a", "b c"])
  lines = [json.loads(l) for l in r.stdout.splitlines()]
  if not HOST_CAN:  # This host's C library or kernel cannot: the program just runs.
    assert [l[0] for l in lines] == ["start", "after"] and r.stderr == ""
    return
  (s1, pid1, env1, prefix1, args1), (s2, pid2, env2, prefix2, args2), after = lines
  assert (s1, s2, after[0]) == ("start", "start", "after")
  assert pid1 == pid2 == after[1]  # Replaced, not a child: signals and waits see one process.
  assert env1 == "-" and env2 == after[2] == hostenv.TUNABLE
  assert prefix1 == prefix2 == sys.prefix  # The same interpreter and virtualenv.
  assert args1 == args2 == after[4] == ["a", "b c"]
  assert r.stderr.count("re-running with GLIBC_TUNABLES") == 1


def test_no_rerun_when_opted_out_or_not_started_on_the_program(tmp_path):
  program = tmp_path / "program.py"
  program.write_text(_PROGRAM.format(root=ROOT))
  r = _run([sys.executable, str(program)], {hostenv.OPT_OUT: "0"})
  assert [json.loads(l)[0] for l in r.stdout.splitlines()] == ["start", "after"]
  # The same code under `python -c` (as a test runner's runpy would be): sys.argv[0] is not
  # the program, so re-running the command line would start something else.
  r = _run([sys.executable, "-c", program.read_text().replace("__file__", repr(str(program)))])
  assert [json.loads(l)[0] for l in r.stdout.splitlines()] == ["start", "after"]
  assert "re-running" not in r.stderr


@pytest.mark.skipif(not HOST_CAN, reason="glibc < 2.35 or no transparent huge pages here")
def test_every_command_line_reruns_before_it_works():
  """main, predict, evaluate and export: `--help` from a shell without the tunable re-runs
  first and still prints its usage (each started concurrently: one JAX import each)."""
  env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", hostenv.OPT_OUT)}
  procs = {cmd: subprocess.Popen([sys.executable, "-m", f"longtext_jax.{cmd}", "--help"],
                                 cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
           for cmd in ("main", "predict", "evaluate", "export")}
  for cmd, proc in procs.items():
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, (cmd, err[-2000:])
    assert err.count("re-running with GLIBC_TUNABLES=glibc.malloc.hugetlb=1") == 1, cmd
    assert "--workdir" in out + err, cmd


def test_hugepages_benchmark_runs_each_setting_in_its_own_process(tmp_path):
  """experiments/hugepages.py at a tiny size: both settings, alternated, each worker under
  its own allocator (what the table's comparison rests on), and the table written."""
  from conftest import load_script  # pylint: disable=g-import-not-at-top
  script = load_script("experiments/hugepages.py")
  out = tmp_path / "hugepages.json"
  # One round here (each worker is a process importing JAX); the best-of-rounds is checked
  # on the table function below.
  result = script.main(["--encoders=slstm", "--cases=16x2x32", "--rounds=1", "--repeats=2",
                        "--settings=default,hugepages,hugepages_keep", f"--out={out}"])
  assert [r["setting"] for r in result["rows"]] == ["default", "hugepages", "hugepages_keep"]
  glibc = platform.libc_ver()[0] == "glibc"
  keep = "; ".join(script.SETTINGS["hugepages_keep"].split(":"))
  for r in result["rows"]:
    want = {"default": "glibc malloc (4 KiB pages)",
            "hugepages": "glibc malloc, huge pages (glibc.malloc.hugetlb=1)",
            "hugepages_keep": f"glibc malloc, huge pages ({keep})"}[r["setting"]]
    assert r["allocator"] == (want if glibc else "system malloc")
    assert r["fwd_bwd_cpu_s"] > 0 and r["fwd_bwd_faults"] >= 0
  (t,) = result["table"]
  assert t["speedup_hugepages_fwd_bwd_cpu"] == pytest.approx(
      min(r["fwd_bwd_cpu_s"] for r in result["rows"] if r["setting"] == "default")
      / min(r["fwd_bwd_cpu_s"] for r in result["rows"] if r["setting"] == "hugepages"))
  assert json.loads(out.read_text())["table"] == result["table"]
  # Two rounds of both settings: each keeps its best time, and the speed-up divides the
  # first setting's best by the other's.
  rows = [{"encoder": "e", "case": "c", "setting": s, "fwd_cpu_s": f, "fwd_wall_s": f,
           "fwd_bwd_cpu_s": 3 * f, "fwd_bwd_wall_s": 3 * f, "fwd_faults": 1, "fwd_bwd_faults": 2}
          for s, f in [("default", 4.0), ("hugepages", 3.0), ("default", 2.0),
                       ("hugepages", 5.0)]]
  (t,) = script.compare(rows, ["default", "hugepages"])
  assert t["default_fwd_cpu_s"] == 2.0 and t["hugepages_fwd_bwd_cpu_s"] == 9.0
  assert t["speedup_hugepages_fwd_cpu"] == pytest.approx(2 / 3)


_GRADIENT = """
import hashlib, sys
sys.path.insert(0, {root!r})
import jax, jax.numpy as jnp, numpy as np
from longtext_jax import encoders, hostenv
enc = encoders.SLSTM(num_steps=2, position="sinusoidal", max_len=512)
x = jax.random.normal(jax.random.key(0), (8, 512, 64))
lengths = jnp.array([[512], [400], [512], [31], [512], [7], [300], [512]])
mask = jnp.arange(512)[None] < lengths
params = jax.jit(enc.init)(jax.random.key(1), x, mask)
def loss(p):
  out = enc.apply(p, x, mask)
  return jnp.mean(out.sequence ** 2) + jnp.mean(out.pooled ** 2)
value, grads = jax.jit(jax.value_and_grad(loss))(params)
digest = hashlib.sha256()
for leaf in [value] + jax.tree.leaves(grads):
  digest.update(np.asarray(leaf).tobytes())
print(hostenv.allocator(), digest.hexdigest())
"""


@pytest.mark.skipif(not HOST_CAN, reason="glibc < 2.35 or no transparent huge pages here")
def test_huge_pages_change_no_value(tmp_path):
  """A gradient large enough to fault many pages (the S-LSTM at 8 x 512 x 64: 7 MiB gate
  buffers), computed under 4 KiB pages and under huge pages, in two processes: bitwise the
  same loss and gradients (alignment could in principle change a kernel's summation order)."""
  program = tmp_path / "gradient.py"
  program.write_text(_GRADIENT.format(root=ROOT))
  env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", hostenv.OPT_OUT)}
  procs = [subprocess.Popen([sys.executable, str(program)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(env, GLIBC_TUNABLES=f"glibc.malloc.hugetlb={v}"))
           for v in (0, 1)]
  outs = []
  for proc in procs:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-2000:]
    outs.append(out.strip().rsplit(" ", 1))
  (alloc0, digest0), (alloc1, digest1) = outs
  assert alloc0 == "glibc malloc (4 KiB pages)"
  assert alloc1 == "glibc malloc, huge pages (glibc.malloc.hugetlb=1)"
  assert digest0 == digest1


@pytest.mark.parametrize("environ,libc,thp,last", [
    ({}, GLIBC, "madvise", "  export GLIBC_TUNABLES=glibc.malloc.hugetlb=1"),
    ({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}, GLIBC, "always",
     "  export GLIBC_TUNABLES=glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=1"),
    ({"GLIBC_TUNABLES": hostenv.TUNABLE}, GLIBC, "madvise",
     "GLIBC_TUNABLES already sets glibc.malloc.hugetlb: nothing to do"),
    ({hostenv.OPT_OUT: "0"}, GLIBC, "madvise",
     "LONGTEXT_JAX_HUGEPAGES=0: the commands leave the environment as it is"),
    ({}, ("glibc", "2.31"), "madvise", None), ({}, GLIBC, "never", None)])
def test_report_says_what_to_export(environ, libc, thp, last):
  text = hostenv.report(environ, libc, thp)
  assert text.splitlines()[1] == f"this environment: {hostenv.allocator(environ, libc)}"
  if last is None:
    assert "not available here" in text.splitlines()[-1] and "export" not in text
  else:
    assert text.splitlines()[-1] == last
