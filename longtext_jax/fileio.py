"""Writing small files so that a reader, a killed run or a second process never sees half
of one: the run's config, data_info.json, a vocabulary, the rewritten metrics log, the
studies' clocks and results, the benchmarks' results files and figures, the fetched corpora,
the prediction and evaluation commands' outputs."""
from __future__ import annotations

import hashlib
import io
import json
import os
from typing import Any


def write_text_atomic(path: str, text: str) -> None:
  """Writes ``text`` (UTF-8) to ``path`` as :func:`write_bytes_atomic` does."""
  write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str, data: bytes) -> None:
  """Writes ``data`` to ``path`` (creating its folder) through a temporary file beside it
  (named with this process's id), flushed to disk and then renamed over ``path``: the file
  is the old one or the new one, whole. On an error the temporary file is removed and the
  old file stays."""
  path = os.path.abspath(path)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f"{path}.tmp{os.getpid()}"
  try:
    with open(tmp, "wb") as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def write_json_atomic(path: str, obj: Any, **dumps_kwargs: Any) -> None:
  """Writes ``obj`` as JSON (``indent=1`` unless given; other ``json.dumps`` options passed
  on) as :func:`write_bytes_atomic` does."""
  write_text_atomic(path, json.dumps(obj, **{"indent": 1, **dumps_kwargs}))


def save_figure_atomic(fig, path: str, **savefig_kwargs) -> None:
  """Saves a matplotlib figure to ``path`` as :func:`write_bytes_atomic` does (the format
  from the file name's extension; ``savefig_kwargs`` such as ``dpi`` passed on)."""
  buf = io.BytesIO()
  fmt = os.path.splitext(path)[1].lstrip(".").lower() or None
  fig.savefig(buf, format=fmt, **savefig_kwargs)
  write_bytes_atomic(path, buf.getvalue())


def file_sha256(path: str) -> str:
  """The hex SHA-256 of a file's bytes (read in 1 MiB blocks)."""
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def tree_sha256(path: str) -> str:
  """The hex SHA-256 of a file's bytes, or of a folder's files: their '/'-joined relative
  paths and contents, in sorted order (hidden files, a leading '.', left out)."""
  if not os.path.isdir(path):
    return file_sha256(path)
  digest = hashlib.sha256()
  for rel in relative_files(path):
    if any(part.startswith(".") for part in rel.split("/")):
      continue
    digest.update(rel.encode("utf-8") + b"\0" + file_sha256(os.path.join(path, rel)).encode()
                  + b"\0")
  return digest.hexdigest()


def relative_files(folder: str) -> list[str]:
  """Every file under ``folder``, as sorted '/'-joined paths relative to it."""
  found = []
  for root, _, names in os.walk(folder):
    for name in names:
      found.append(os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/"))
  return sorted(found)
