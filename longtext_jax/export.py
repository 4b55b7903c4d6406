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

The export is written to ``<out>.partial-<pid>`` and moved in when complete: a new (or empty)
folder in one rename, an existing one file by file with ``export_info.json`` last. A killed export
therefore leaves either no folder or files that do not match ``export_info.json``, which
loading reports (naming the file) instead of mixing two exports' parameters and config.

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

import json
import os
import shutil
from typing import Any

from absl import flags
import jax
import ml_collections
import numpy as np

from longtext_jax import fileio
from longtext_jax import inference
from longtext_jax import predict as predict_cli

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
  stage = f"{out}.partial-{os.getpid()}"
  shutil.rmtree(stage, ignore_errors=True)
  os.makedirs(stage)
  try:
    flat = {k: jax.numpy.asarray(v) for k, v in inference.flatten_params(p.params).items()}
    st_flax.save_file(flat, os.path.join(stage, inference.EXPORT_PARAMS),
                      metadata={"format": "longtext_jax", "step": str(p.step)})
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
  return out


def _publish(stage: str, out: str) -> None:
  """Moves the finished export ``stage`` to ``out``.

  A new ``out``, or an empty folder (``mkdir -p out`` first), is one rename of the whole
  folder: a kill leaves no half-written folder that looks like a run. An existing one
  (exported before, or a folder holding other files) gets each file replaced by a rename,
  ``export_info.json`` last: a kill in between leaves files that do not match the
  ``export_info.json`` there, which :func:`longtext_jax.inference.check_export` reports on
  load.
  """
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
  inference.check_export(folder)
  return inference.read_export_params(folder)


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
  out = export(FLAGS.workdir, FLAGS.out, FLAGS.step, FLAGS.tokenizer_path)
  with open(os.path.join(out, INFO_FILE), encoding="utf-8") as f:
    info = json.load(f)
  print(f"Exported step {info['step']} ({info['num_parameters']} parameters) to {out}")
  return 0


if __name__ == "__main__":
  predict_cli.run_cli(main, FLAGS)
