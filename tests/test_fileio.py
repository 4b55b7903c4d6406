"""longtext_jax.fileio: the one writer of the small files and figures that a reader, a
killed run or a second process must never see half of (docs/reliability.md)."""
import os

import pytest

from longtext_jax import fileio


def test_writes_whole_files_and_creates_the_folder(tmp_path):
  path = tmp_path / "a" / "b" / "results.json"
  fileio.write_text_atomic(str(path), "first\n")
  assert path.read_text(encoding="utf-8") == "first\n"
  fileio.write_text_atomic(str(path), "é" * 3)  # Shorter than before, not UTF-8 in ASCII.
  assert path.read_text(encoding="utf-8") == "ééé"
  assert os.listdir(path.parent) == ["results.json"]


def test_a_write_that_fails_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
  path = tmp_path / "results.json"
  path.write_text("old", encoding="utf-8")

  def killed(src, dst):
    raise OSError("killed before the rename")

  monkeypatch.setattr(fileio.os, "replace", killed)
  with pytest.raises(OSError, match="killed"):
    fileio.write_text_atomic(str(path), "new")
  assert path.read_text(encoding="utf-8") == "old"
  assert os.listdir(tmp_path) == ["results.json"]


def test_two_processes_writing_one_file_at_once_both_finish_whole(tmp_path, monkeypatch):
  """Two study processes rewrite one results file: while this process's write is on its way
  to disk, another (another process id) writes the same file from start to end. Each has
  its own temporary file, so both renames succeed and the file is one of the two, whole;
  with one shared temporary name the other's rename would take this one's file away."""
  path = tmp_path / "results.json"
  real_fsync, real_getpid = os.fsync, os.getpid
  state = {"inner": False}

  def fsync_with_a_concurrent_writer(fd):
    real_fsync(fd)
    if not state["inner"]:
      state["inner"] = True
      monkeypatch.setattr(fileio.os, "getpid", lambda: real_getpid() + 1)
      fileio.write_text_atomic(str(path), "theirs")
      monkeypatch.setattr(fileio.os, "getpid", real_getpid)

  monkeypatch.setattr(fileio.os, "fsync", fsync_with_a_concurrent_writer)
  fileio.write_text_atomic(str(path), "ours")
  assert state["inner"] and path.read_text(encoding="utf-8") == "ours"
  assert os.listdir(tmp_path) == ["results.json"]


def test_bytes_are_written_as_given(tmp_path):
  path = tmp_path / "v.npy"
  data = bytes(range(256)) * 3  # Not text: no newline translation, no encoding.
  fileio.write_bytes_atomic(str(path), data)
  assert path.read_bytes() == data and os.listdir(tmp_path) == ["v.npy"]


def test_a_figure_is_saved_whole_in_the_format_of_its_name_or_not_at_all(tmp_path):
  """The studies redraw their figures at every finished run; a run killed while
  matplotlib writes must not leave half a PNG in docs/ (the old figure stays)."""
  matplotlib = pytest.importorskip("matplotlib")
  matplotlib.use("Agg")
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=(2, 2))
  fig.add_subplot().plot([0, 1], [1, 0])
  png, svg = tmp_path / "f" / "curves.png", tmp_path / "f" / "curves.svg"
  fileio.save_figure_atomic(fig, str(png), dpi=50)
  fileio.save_figure_atomic(fig, str(svg))
  assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
  assert b"<svg" in svg.read_bytes()
  old = png.read_bytes()

  class Broken:
    def savefig(self, buf, **kwargs):
      buf.write(b"\x89PNG half")
      raise RuntimeError("killed while drawing")

  with pytest.raises(RuntimeError, match="killed while drawing"):
    fileio.save_figure_atomic(Broken(), str(png), dpi=50)
  assert png.read_bytes() == old
  assert sorted(os.listdir(png.parent)) == ["curves.png", "curves.svg"]


def test_json_is_indented_unless_told_and_passes_dumps_options_on(tmp_path):
  path = tmp_path / "r.json"
  fileio.write_json_atomic(str(path), {"a": [1, 2], "é": 0.5})
  assert path.read_text(encoding="utf-8") == '{\n "a": [\n  1,\n  2\n ],\n "\\u00e9": 0.5\n}'
  fileio.write_json_atomic(str(path), {"p": tmp_path}, indent=None, default=str)
  assert path.read_text(encoding="utf-8") == '{"p": "%s"}' % tmp_path
  assert os.listdir(tmp_path) == ["r.json"]
