"""Edge cases of using a run: leftovers of killed exports, stdin's byte-order mark, a step
asked of an export, the input format's flag, TFDS runs' field names, exports from threads.

Every model here is a tiny byte-level Transformer built with ``Predictor.from_config``
(nothing is trained), so each test takes a second or two.
"""
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import learned_positions_config
from longtext_jax import export
from longtext_jax import inference
from longtext_jax import predict as predict_cli


def _config(**data):
  """A tiny byte-level classifier's config with ``config.data`` fields changed."""
  c = learned_positions_config(256)
  c.data.update(data)
  return c


@pytest.fixture(scope="module")
def predictor():
  return inference.Predictor.from_config(_config(), label_names=["a", "b"])


def _dead_pid() -> int:
  """The pid of a process that has exited and been reaped (not running now)."""
  child = subprocess.Popen([sys.executable, "-c", "pass"])
  child.wait()
  return child.pid


def test_an_export_removes_the_staging_folders_of_killed_exports_only(predictor, tmp_path):
  """SIGKILL (or a default SIGTERM) skips the export's cleanup and leaves its staging folder;
  the next export of the same folder removes those whose process is gone, and keeps the one
  of an export still running and those of other folders."""
  out = tmp_path / "exported"
  host = socket.gethostname()
  dead = _dead_pid()
  running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  try:
    killed = [tmp_path / f"exported.partial-{host}-{dead}",  # This version's name,
              tmp_path / f"exported.partial-{dead}"]  # and the one before the host was in it.
    live = tmp_path / f"exported.partial-{host}-{running.pid}"  # A concurrent export.
    kept = [live,
            tmp_path / f"exported.partial-elsewhere.example-{dead}",  # Another host's pid.
            tmp_path / f"other.partial-{host}-{dead}",  # Another export folder's.
            tmp_path / f"exported.partial-{host}-notapid"]
    for folder in killed + kept:
      folder.mkdir()
      (folder / "params.safetensors").write_bytes(b"half written")
    export.export(predictor, str(out))
    assert inference.load(str(out)).step == predictor.step
    for folder in killed:
      assert not folder.exists(), folder
    for folder in kept:
      assert (folder / "params.safetensors").exists(), folder
  finally:
    running.kill()
    running.wait()
  export.export(predictor, str(out))  # That export is gone now: so is its folder.
  assert not live.exists()


def test_the_staging_lock_decides_whatever_the_pid_in_the_name_says(predictor, tmp_path):
  """A staging folder with a lock file is judged by its flock, which the kernel releases
  when the holder ends however it ends (SIGKILL; a zombie not yet reaped; another PID
  namespace): held -> kept, even under a dead pid's name; free -> removed with its lock."""
  out = tmp_path / "exported"
  dead = _dead_pid()
  stage = tmp_path / f"exported.partial-{socket.gethostname()}-{dead}"
  stage.mkdir()
  (stage / "params.safetensors").write_bytes(b"half written")
  lock = str(stage) + ".lock"
  holder = subprocess.Popen(
      [sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'w'); "
       "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)", lock],
      stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == "held"
    export.export(predictor, str(out))
    assert stage.exists() and os.path.exists(lock)  # Its export runs: kept.
    holder.kill()  # SIGKILL, not reaped yet: a zombie, its lock released by the kernel.
    for _ in range(100):
      if open(f"/proc/{holder.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
        break
      time.sleep(0.05)
    orphan = tmp_path / "exported.partial-h-1.lock"  # A lock whose folder never came.
    orphan.write_text("")
    assert export.remove_killed_stages(str(out)) == [str(stage)]
    assert not stage.exists() and not os.path.exists(lock) and not orphan.exists()
  finally:
    holder.kill()
    holder.wait()
  export.export(predictor, str(out))  # Leaves neither folder nor lock of its own.
  assert sorted(os.listdir(tmp_path)) == ["exported"]


def test_stdin_drops_a_leading_byte_order_mark(predictor):
  """A UTF-8 BOM (Windows tools write one) is not part of the first document (as the file
  readers drop it): with the byte tokenizer it would be three more tokens."""
  records = inference.read_stdin_lines(io.BytesIO(b"\xef\xbb\xbfab cd\r\n\xef\xbb\xbfx\n"))
  assert [r["text"] for r in records] == ["ab cd", "\ufeffx"]  # Only the stream's start.
  assert predictor.predict([records[0]["text"]])[0]["num_tokens"] == 2 + 5
  assert inference.read_stdin_lines(io.BytesIO(b"\xef\xbb\xbf\nab\n")) == [
      {"text": "ab", "where": "<stdin>:2"}]  # A BOM alone is a blank line.


def test_a_step_other_than_the_exports_is_an_error(predictor, tmp_path):
  """An export holds one step: asking for another names the export and both steps
  instead of silently returning the export's step."""
  out = export.export(predictor, str(tmp_path / "exported"))  # Step -1 (not trained).
  assert inference.load(out).step == -1
  assert inference.load(out, step=-1).step == -1
  with pytest.raises(ValueError, match=rf"{out} is an export of step -1; step=2000 "
                     r"\(--step\) was asked"):
    inference.load(out, step=2000)
  with pytest.raises(ValueError, match=r"is an export of step -1; step=2000"):
    predict_cli.main(["predict", f"--workdir={out}", "--input=-", "--step=2000"])


def _message(fn, *args) -> str:
  with pytest.raises(ValueError) as e:
    fn(*args)
  return str(e.value)


def test_an_unknown_extension_names_the_format_flag(predictor, tmp_path):
  """The format of an input whose extension says nothing is set with --format (format= in
  Python), which the message names; a bad --format is named as such too. For a plain .txt
  file it also says that stdin reads one document a line (new-user review)."""
  docs = tmp_path / "docs.dat"
  docs.write_text('{"text": "ab"}\n', encoding="utf-8")
  with pytest.raises(ValueError, match=r"docs.dat.* from its extension .*--format "
                     r"\(Python: format=\)"):
    predictor.read(str(docs))
  with pytest.raises(ValueError, match=r"--format=yaml \(Python: format=\) is not a format"):
    predictor.read(str(docs), format="yaml")
  assert predictor.read(str(docs), format="jsonl")[0][0]["text"] == "ab"
  # A plain .txt file: no format reads it whole; the message says how to read its lines.
  notes = tmp_path / "notes.txt"
  notes.write_text("first document\nsecond document\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"notes.txt.*--format .*one document a line reads "
                     r"from stdin: --input=- < .*notes.txt"):
    predictor.read(str(notes))
  assert "stdin" not in _message(predictor.read, str(docs))  # Only for .txt files.


def test_tfds_runs_read_files_with_the_datasets_field_names(tmp_path):
  """A run trained on a TFDS preset (glue/mnli: premise, hypothesis, label) reads an input
  file with those fields by default; explicit field flags still win."""
  c = _config(name="tfds", tfds_name="glue/mnli")
  c.task.num_classes = 3
  p = inference.Predictor.from_config(c, label_names=["entailment", "neutral",
                                                      "contradiction"])
  rows = tmp_path / "mnli.jsonl"
  rows.write_text(json.dumps({"premise": "ab", "hypothesis": "cde", "label": "neutral"})
                  + "\n", encoding="utf-8")
  records, where = p.read(str(rows))
  assert (records[0]["text"], records[0]["text_pair"], where) == ("ab", "cde",
                                                                  [f"{rows}:1"])
  assert p.read(str(rows), labelled=True)[0][0]["label"] == "neutral"
  renamed = tmp_path / "renamed.jsonl"
  renamed.write_text(json.dumps({"p": "ab", "h": "cde", "premise": "x"}) + "\n",
                     encoding="utf-8")
  records, _ = p.read(str(renamed), text_field="p", text_pair_field="h")
  assert (records[0]["text"], records[0]["text_pair"]) == ("ab", "cde")
  records, _ = p.read(str(renamed), text_pair_field="h")  # Per field: premise, then h.
  assert (records[0]["text"], records[0]["text_pair"]) == ("x", "cde")
  out = tmp_path / "preds.jsonl"
  assert predict_cli.main(["predict", f"--workdir={export.export(p, str(tmp_path / 'e'))}",
                           f"--input={rows}", f"--output={out}"]) == 0
  assert json.loads(out.read_text())["where"] == f"{rows}:1"
  # A preset joining several text fields (ag_news_subset: title + description) cannot be
  # read from one file field: the file's 'text' as before.
  c = _config(name="tfds", tfds_name="ag_news_subset")
  assert inference.training_options(c).text_field == "text"
  c = _config(name="tfds", tfds_name="glue/sst2")
  assert inference.training_options(c).text_field == "sentence"


def test_exports_of_one_folder_from_threads_stage_apart(
    predictor, tmp_path, monkeypatch):
  """Two exports of one ``out`` from threads of one process, both in flight at once, write
  to staging folders of their own (with the pid alone they shared one: the second waited on
  the first's lock, and a third could take the lock file the first unlinked and write into
  the second's folder); both publish, ``out`` loads, nothing is left beside it."""
  out = tmp_path / "exported"
  both_staged = threading.Barrier(2, timeout=60)
  stages, errors = [], []
  publish = export._publish  # pylint: disable=protected-access

  def publish_when_both_staged(stage, dest):
    stages.append(stage)
    both_staged.wait()  # Deadlocks (and times out) if one export waits on the other's lock.
    publish(stage, dest)

  monkeypatch.setattr(export, "_publish", publish_when_both_staged)

  def run():
    try:
      export.export(predictor, str(out))
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)

  threads = [threading.Thread(target=run) for _ in range(2)]
  for t in threads:
    t.start()
  for t in threads:
    t.join(120)
  assert not errors, errors
  assert len(set(stages)) == 2, stages
  assert inference.load(str(out)).step == predictor.step
  assert sorted(os.listdir(tmp_path)) == ["exported"]


def test_simultaneous_exports_into_one_existing_folder_leave_one_of_them_whole(
    predictor, tmp_path, monkeypatch):
  """Two exports of different parameters into an existing ``out`` at once, each replacing
  its files one by one: ``out`` ends as one of them, whole, and loads. Export B starts
  first and is slow to move its export_info.json in, A starts 0.1 s later and is fast:
  taking turns, A waits for B; interleaved, ``out`` held A's parameters under B's
  export_info.json, which loading refused."""
  out = tmp_path / "exported"
  export.export(predictor, str(out))  # ``out`` exists: each file is replaced by a rename.
  other = inference.Predictor.from_config(_config(), label_names=["a", "b"], seed=1)
  flat = {name: inference.flatten_params(p.params) for name, p in (("A", predictor),
                                                                   ("B", other))}
  assert any(not np.array_equal(flat["A"][k], flat["B"][k]) for k in flat["A"])
  both_staged = threading.Barrier(2, timeout=60)
  publish, replace = export._publish, os.replace  # pylint: disable=protected-access

  def publish_when_both_staged(stage, dest):
    both_staged.wait()
    if threading.current_thread().name == "A":
      time.sleep(0.1)
    publish(stage, dest)

  def replace_at_own_pace(src, dst):
    if threading.current_thread().name == "B" and dst.endswith(export.INFO_FILE):
      time.sleep(0.3)  # B's parameters are in; its export_info.json comes last, late.
    replace(src, dst)

  monkeypatch.setattr(export, "_publish", publish_when_both_staged)
  monkeypatch.setattr(os, "replace", replace_at_own_pace)
  errors = []

  def run(p):
    try:
      export.export(p, str(out))
    except Exception as e:  # pylint: disable=broad-except
      errors.append(e)

  threads = [threading.Thread(target=run, args=(p,), name=name)
             for name, p in (("A", predictor), ("B", other))]
  for t in threads:
    t.start()
  for t in threads:
    t.join(120)
  assert not errors, errors
  loaded = inference.flatten_params(inference.load(str(out)).params)
  same = [name for name in flat
          if all(np.array_equal(loaded[k], flat[name][k]) for k in loaded)]
  assert len(same) == 1, same
  assert sorted(os.listdir(tmp_path)) == ["exported"]
