# Install longtext_jax from SOURCE: a git URL ("git+https://github.com/OWNER/longtext_jax.git"),
# or the repository folder uploaded to this runtime (e.g. "/content/longtext_jax").
# "" = use the longtext_jax already installed. On a GPU or TPU runtime the runtime's jax is kept.
SOURCE = "git+https://github.com/longtext-jax/longtext_jax.git"

import importlib, importlib.metadata, importlib.util, os, shutil, subprocess, sys, tempfile
SOURCE = os.environ.get("LONGTEXT_JAX_SOURCE", SOURCE)  # Set by notebooks/execute.py and tests.


def pip_install(*args):
  """pip install in this kernel's Python: prints its summary, raises with its log on failure."""
  r = subprocess.run([sys.executable, "-m", "pip", "install", *args], capture_output=True,
                     text=True)
  if r.returncode:
    raise RuntimeError(f"pip install {' '.join(args)} failed:\n{r.stdout[-2000:]}{r.stderr[-3000:]}")
  print("\n".join(l for l in r.stdout.splitlines()
                  if l.startswith(("Successfully installed", "Would install"))))


def accelerator():
  """'cuda12' on a GPU runtime, 'tpu' on a TPU runtime, '' otherwise (without importing jax)."""
  if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "-L"],
                                                   capture_output=True).returncode == 0:
    return "cuda12"
  if os.environ.get("COLAB_TPU_ADDR") or os.path.exists("/dev/accel0"):
    return "tpu"
  return ""


if SOURCE:
  from packaging.requirements import Requirement
  pip_install("--no-deps", SOURCE)  # The package alone; its dependencies next, jax apart.
  importlib.invalidate_caches()
  reqs = [Requirement(r) for r in importlib.metadata.requires("longtext_jax")]
  reqs = [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": "notebook"})]
  jax_req = next(r for r in reqs if r.name == "jax")
  others = [f"{r.name}{r.specifier}" for r in reqs if r.name not in ("jax", "jaxlib")]
  try:
    runtime_jax = importlib.metadata.version("jax")
  except importlib.metadata.PackageNotFoundError:
    runtime_jax = None
  kind = accelerator()
  if kind and runtime_jax and jax_req.specifier.contains(runtime_jax, prereleases=True):
    # Keep the runtime's accelerator build: pin its jax and jaxlib while the rest installs.
    pins = os.path.join(tempfile.mkdtemp(), "keep_jax.txt")
    with open(pins, "w") as f:
      f.write(f"jax=={runtime_jax}\njaxlib=={importlib.metadata.version('jaxlib')}\n")
    pip_install("-c", pins, *others)
    print(f"kept the runtime's jax {runtime_jax} ({kind})")
  elif kind:  # No jax, or one too old for longtext_jax: the matching accelerator build.
    pip_install(f"jax[{kind}]{jax_req.specifier}", *others)
  else:
    pip_install(str(jax_req), *others)
elif importlib.util.find_spec("longtext_jax") is None:
  raise ImportError("longtext_jax is not installed: set SOURCE at the top of this cell")

import jax, longtext_jax
print("longtext_jax from", os.path.dirname(longtext_jax.__file__))
print("jax", jax.__version__, "devices:", jax.devices())
