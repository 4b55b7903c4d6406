"""Export a trained run's parameters alone (safetensors, no pickle) for use anywhere.

  python -m longtext_jax.export --workdir=runs/x --out=exported/          # best, else latest
  python -m longtext_jax.export --workdir=runs/x --out=exported/ --step=2000

An export folder holds:

=====================  ==========================================================================
params.safetensors     every parameter of the model (inputs, encoder, head), keys
                       ``'encoder/layers_0/query/dense/kernel'`` ('/'-joined flax paths); no
                       optimizer state
config.json            the run's config (the tokenizer path rewritten to the copy below)
data_info.json         label names and tokenizer description (as in the workdir)
tokenizer/             a copy of the tokenizer files (SentencePiece ``.model``, WordPiece
                       ``tokenizer.json`` / ``vocab.txt``); none for the byte tokenizer
export_info.json       the step, the checkpoint it came from, the longtext_jax version and
                       the SHA-256 of every other file (written last)
=====================  ==========================================================================

The export is written to ``<out>.partial-<host>-<pid>-<n>`` (one folder per export call, so
threads of one process never share one) and moved in when complete: a new (or empty)
folder in one rename, an existing one file by file with ``export_info.json`` last; exports
moving files into one folder take turns (an ``flock`` on its parent folder). A killed
export therefore leaves either no folder or files that do not match
``export_info.json``, which loading reports (naming the file) instead of mixing two exports'
parameters and config. An export stopped by an exception or Ctrl-C removes its staging
folder; one killed outright (SIGKILL, SIGTERM with no handler, the OOM killer) cannot, and
leaves it beside ``out``. Each export holds an ``flock`` on ``<stage>.lock`` while it runs,
which the kernel releases when the process ends however it ends: the next export of ``out``
removes the staging folders whose lock it can take (their export is gone) and leaves those
whose lock is held (an export running now, also one in another container on the host).

``longtext_jax.inference.load("exported/")`` works on it as on the workdir. In another Flax
project, the bare encoder is three lines (docs/inference.md)::

  from longtext_jax import export
  encoder, params = export.load_encoder("exported/")
  out = encoder.apply({"params": params}, x_BLD, mask_BL)   # EncoderOutput(sequence, pooled)
"""
from __future__ import annotations

if __name__ == "__main__":  # First, before JAX loads (glibc reads it at process start).
  from longtext_jax import hostenv  # pylint: disable=g-import-not-at-top
  hostenv.reexec_with_hugepages(__file__)

import fcntl
import itertools
import json
import os
import shutil
import socket
from typing import Any

from absl import flags
from absl import logging
import jax
import ml_collections
import numpy as np

from longtext_jax import fileio
from longtext_jax import inference
from longtext_jax import predict as predict_cli
from longtext_jax import procinfo

INFO_FILE = inference.EXPORT_INFO


def _copy_tokenizer(spec: dict[str, Any] | None, out: str) -> str | None:
  """Copies the tokenizer files described by ``spec`` (``{'kind', 'path'}``, the path
  already resolved) into ``out/tokenizer``; returns their path relative to ``out`` (None:
  nothing to copy, e.g. the byte tokenizer)."""
  if not spec or spec["kind"] == "byte" or not spec["path"]:
    return None
  path = spec["path"]
  dest = os.path.join(out, "tokenizer")
  os.makedirs(dest, exist_ok=True)
  if os.path.isdir(path):
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json",
                 "special_tokens_map.json"):
      if os.path.isfile(os.path.join(path, name)):
        shutil.copy2(os.path.join(path, name), dest)
    return "tokenizer"
  shutil.copy2(path, dest)
  return os.path.join("tokenizer", os.path.basename(path))


def export(run: str | inference.Predictor, out: str, step: int | None = None,
           tokenizer_path: str | None = None) -> str:
  """Writes the export folder of a run (see the module docstring).

  Args:
    run: the run directory (or an export, which is re-exported), or a loaded
      :class:`~longtext_jax.inference.Predictor` (e.g. ``Predictor.from_config``).
    out: the folder to write (created; existing files of the same names are replaced).
    step: the checkpoint of a run directory (default: best, else latest).
    tokenizer_path: the tokenizer, if it is not where the run saw it.

  Returns:
    The absolute path of ``out``.

  Raises:
    FileNotFoundError: no checkpoint, or the tokenizer is missing.
    ValueError: the checkpoint does not match the config.
  """
  from safetensors import flax as st_flax  # pylint: disable=import-outside-toplevel
  from longtext_jax import __version__  # pylint: disable=import-outside-toplevel
  from longtext_jax import data as data_lib  # pylint: disable=import-outside-toplevel
  if isinstance(run, inference.Predictor):
    p, info = run, None
  else:
    p = inference.load(run, step, tokenizer_path=tokenizer_path)
    info = inference._data_info(os.path.abspath(run))  # pylint: disable=protected-access
  if info is None:  # What the run directory would hold: label names and tokenizer.
    info = data_lib.data_info(p.label_names, None)
    if p.tokenizer_spec is not None:
      info["tokenizer"] = {**p.tokenizer_spec, "vocab_size": int(p.tokenizer.vocab_size)}
  out = os.path.abspath(out)
  # Everything is written to a staging folder beside ``out`` and then moved in (see
  # _publish): a killed export leaves no half-written file in ``out``.
  remove_killed_stages(out)
  # One staging folder per export call, so that exports of one ``out`` from threads of one
  # process never share one (with the pid alone a third export could take the lock file
  # that the first unlinked while the second still wrote to the same folder).
  stage = f"{out}{_STAGE}{_host()}-{os.getpid()}-{next(_EXPORT_IDS)}"
  os.makedirs(os.path.dirname(out), exist_ok=True)
  held = _hold(stage + _LOCK)  # Held until this export ends (see remove_killed_stages).
  shutil.rmtree(stage, ignore_errors=True)
  os.makedirs(stage)
  try:
    flat = {k: jax.numpy.asarray(v) for k, v in inference.flatten_params(p.params).items()}
    params_file = os.path.join(stage, inference.EXPORT_PARAMS)
    st_flax.save_file(flat, params_file,
                      metadata={"format": "longtext_jax", "step": str(p.step)})
    # safetensors writes 0600; the export's other files get the umask's mode (0644): so
    # does this one, so another user or a service can load a shared export.
    os.chmod(params_file, 0o666 & ~_umask())
    config = ml_collections.ConfigDict(p.config.to_dict())
    copied = _copy_tokenizer(p.tokenizer_spec, stage)
    if copied is not None:
      config.data.tokenizer.path = copied
      if info.get("tokenizer"):
        info["tokenizer"]["path"] = copied
    with open(os.path.join(stage, inference.CONFIG_FILE), "w", encoding="utf-8") as f:
      f.write(config.to_json_best_effort(indent=2))
    with open(os.path.join(stage, "data_info.json"), "w", encoding="utf-8") as f:
      json.dump(info, f, indent=1, ensure_ascii=False)
    files = {rel: fileio.file_sha256(os.path.join(stage, rel)) for rel in fileio.relative_files(stage)}
    with open(os.path.join(stage, INFO_FILE), "w", encoding="utf-8") as f:
      json.dump({"step": p.step, "checkpoint": p.source, "longtext_jax": __version__,
                 "num_parameters": int(sum(np.size(v) for v in flat.values())),
                 "files": files}, f, indent=1)
    _publish(stage, out)
  finally:
    shutil.rmtree(stage, ignore_errors=True)
    _release(held, stage + _LOCK)
  return out


_STAGE = ".partial-"  # <out>.partial-<host>-<pid>-<n>: an export's staging folder,
_LOCK = ".lock"  # and <out>.partial-<host>-<pid>-<n>.lock, flock-ed while the export runs.
_EXPORT_IDS = itertools.count()  # <n>: this process's export calls (thread-safe in CPython).


def _umask() -> int:
  """This process's umask: read from /proc (setting it and putting it back, the fallback
  elsewhere, changes it for every thread in between)."""
  try:
    with open("/proc/self/status", encoding="ascii") as f:
      for line in f:
        if line.startswith("Umask:"):
          return int(line.split()[1], 8)
  except OSError:
    pass
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


def _host() -> str:
  """This host's name as it appears in staging folder names."""
  return socket.gethostname().replace(os.sep, "_")


def _hold(path: str) -> int:
  """Opens ``path`` and takes an exclusive ``flock`` on it; returns the descriptor."""
  fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
  fcntl.flock(fd, fcntl.LOCK_EX)
  return fd


def _release(fd: int, path: str) -> None:
  """Removes the lock file ``path`` and closes ``fd`` (which releases the lock)."""
  try:
    os.unlink(path)
  except OSError:
    pass
  os.close(fd)


def _held_elsewhere(path: str) -> bool:
  """Whether another process holds the ``flock`` on ``path`` (an export running now)."""
  try:
    fd = os.open(path, os.O_RDWR)
  except OSError:  # Gone: its export has just finished.
    return False
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    return True
  finally:
    os.close(fd)
  return False


def remove_killed_stages(out: str) -> list[str]:
  """Removes the staging folders that killed exports of ``out`` left.

  An export stopped by SIGKILL (or a SIGTERM without handler) runs no cleanup and leaves
  ``<out>.partial-<host>-<pid>`` and its ``.lock``. The lock decides: a folder whose lock
  this process can take belongs to an export that has ended, and is removed with its lock
  file; one whose lock is held belongs to an export running now, and is kept. Folders of
  exports from before the lock (no lock file: ``<out>.partial-<pid>`` or
  ``<out>.partial-<host>-<pid>``) are judged by their pid, on this host only: removed when
  that process has ended.

  Args:
    out: the export folder (absolute path).

  Returns:
    The folders removed.
  """
  parent, base = os.path.split(out)
  try:
    names = set(os.listdir(parent))
  except OSError:  # No parent folder yet: nothing was staged there.
    return []
  removed = []
  for name in sorted(names):
    if not name.startswith(base + _STAGE):
      continue
    if name.endswith(_LOCK):  # A lock without its folder: killed before it made one.
      if name[:-len(_LOCK)] not in names and not _held_elsewhere(os.path.join(parent, name)):
        try:
          os.unlink(os.path.join(parent, name))
        except OSError:
          pass
      continue
    folder, lock = os.path.join(parent, name), os.path.join(parent, name + _LOCK)
    if name + _LOCK in names:
      if _held_elsewhere(lock):
        logging.warning("%s: another export of %s is running; the one that finishes last "
                        "is what %s holds", folder, out, out)
        continue
    else:  # Before the lock: the pid in the name, this host's (or no host: older still).
      rest = name[len(base + _STAGE):]
      rest = rest[len(_host()) + 1:] if rest.startswith(_host() + "-") else rest
      if not (rest.isdigit() and int(rest) > 0 and int(rest) != os.getpid()
              and procinfo.pid_state(int(rest)) != "running"):
        continue
    shutil.rmtree(folder, ignore_errors=True)
    if not os.path.exists(folder):
      if name + _LOCK in names:
        try:
          os.unlink(lock)
        except OSError:
          pass
      logging.warning("removed %s, left by an export of %s that was killed", folder, out)
      removed.append(folder)
  return removed


def _publish(stage: str, out: str) -> None:
  """Moves the finished export ``stage`` to ``out``.

  A new ``out``, or an empty folder (``mkdir -p out`` first), is one rename of the whole
  folder: a kill leaves no half-written folder that looks like a run. An existing one
  (exported before, or a folder holding other files) gets each file replaced by a rename,
  ``export_info.json`` last: a kill in between leaves files that do not match the
  ``export_info.json`` there, which :func:`longtext_jax.inference.check_export` reports on
  load. Exports publishing into one parent folder take turns (an ``flock`` on that folder,
  released when the process ends however it ends): two exports of ``out`` at once leave
  the one that publishes last, whole, not its files mixed with the other's.
  """
  parent = os.open(os.path.dirname(out), os.O_RDONLY)
  try:
    fcntl.flock(parent, fcntl.LOCK_EX)
    _move_in(stage, out)
  finally:
    os.close(parent)  # Releases the lock.


def _move_in(stage: str, out: str) -> None:
  if os.path.isdir(out) and not os.listdir(out):
    try:
      os.rmdir(out)  # Then the one rename below (or file by file if it came back).
    except OSError:
      pass
  if not os.path.exists(out):
    os.makedirs(os.path.dirname(out), exist_ok=True)
    try:
      os.rename(stage, out)
      return
    except OSError:  # Created in between (another export): replace file by file.
      pass
  for rel in sorted(fileio.relative_files(stage), key=lambda r: r == INFO_FILE):
    dest = os.path.join(out, rel)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    os.replace(os.path.join(stage, rel), dest)


def load_params(folder: str) -> dict[str, Any]:
  """The nested parameter dict of an export (``{'inputs', 'encoder', 'head'}``), read from
  ``params.safetensors`` (no pickle, no config needed), after checking that the folder's
  files are those its export wrote (:func:`longtext_jax.inference.check_export`)."""
  _check_is_export(folder)
  inference.check_export(folder)
  return inference.read_export_params(folder)


def _check_is_export(folder: str) -> None:
  """A run directory given where an export is meant: say so, and how to export it."""
  if (not os.path.exists(os.path.join(folder, INFO_FILE))
      and os.path.isdir(os.path.join(folder, "checkpoints"))):
    raise ValueError(f"{folder} is a run directory, not an export: export it first "
                     f"(python -m longtext_jax.export --workdir={folder} --out=<folder>), or "
                     "use inference.load, which reads run directories too")


def load_encoder(folder: str) -> tuple[Any, dict[str, Any]]:
  """The bare encoder of an export: a flax Module and its parameters.

  Call ``encoder.apply({'params': params}, x_BLD, mask_BL)`` (``input_kind='embeddings'``:
  ``x_BLD`` already embedded, e.g. with ``load_params(folder)['inputs']['embed']
  ['embedding']``) or ``encoder.apply({'params': params}, input_ids_BL, mask_BL)`` (the BERT
  family, ``input_kind='ids'``); it returns ``EncoderOutput(sequence, pooled)``. To use it
  as a submodule of your own Flax module, assign ``encoder.clone()`` to an attribute and put
  ``params`` under that attribute's name.

  Args:
    folder: an export folder.

  Returns:
    (encoder module, its parameter dict).
  """
  from longtext_jax import model as model_lib  # pylint: disable=import-outside-toplevel
  _check_is_export(folder)
  inference.check_export(folder)
  config = inference.read_config(folder)
  params = inference.read_export_params(folder)
  return model_lib.build_encoder(config.model.encoder), params["encoder"]


FLAGS = flags.FlagValues()
flags.DEFINE_string("workdir", None, "The run directory.", flag_values=FLAGS)
flags.DEFINE_string("out", None, "The export folder to write.", flag_values=FLAGS)
flags.DEFINE_integer("step", None, "Checkpoint step (default: best, else latest).",
                     flag_values=FLAGS)
flags.DEFINE_string("tokenizer_path", None, "The tokenizer, if it moved.", flag_values=FLAGS)
flags.mark_flags_as_required(["workdir", "out"], flag_values=FLAGS)


def main(argv) -> int:
  """Runs the command line ``argv`` (argv[0] is the program name); returns the exit code."""
  predict_cli.parse_flags(FLAGS, argv)
  # export() removes killed exports' staging folders, saying so (the commands show this
  # package's warnings: predict.quiet_other_libraries).
  out = export(FLAGS.workdir, FLAGS.out, FLAGS.step, FLAGS.tokenizer_path)
  with open(os.path.join(out, INFO_FILE), encoding="utf-8") as f:
    info = json.load(f)
  print(f"Exported step {info['step']} ({info['num_parameters']} parameters) to {out}")
  return 0


if __name__ == "__main__":
  predict_cli.run_cli(main, FLAGS)
