"""experiments/own_corpus_table.py: the results table of docs/own_corpus.md, on a generated
corpus in the fetched corpora's layout (no downloads; scikit-learn is the baseline's oracle
extra, skipped without it)."""
import argparse
import importlib.util
import json
import os

import pytest

import own_corpus_data

_PATH = os.path.join(os.path.dirname(__file__), "..", "experiments", "own_corpus_table.py")


def _script():
  spec = importlib.util.spec_from_file_location("own_corpus_table", _PATH)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


table_lib = _script()


def test_rows_run_the_documented_command_and_the_table_reads_them(tmp_path):
  """The TF-IDF row and one encoder row (the tiny config, in a subprocess of its own) append
  a result with test metrics, a dev curve, time and memory; the table averages seeds,
  lists rows run with overrides apart, and names why a row has no result."""
  pytest.importorskip("sklearn")
  corpus_dir = tmp_path / "corpora"
  own_corpus_data.write_corpus(str(corpus_dir / "gen"), n_train=12, n_test=4)
  results = tmp_path / "results.jsonl"
  common = ["--corpus_dir", str(corpus_dir), "--corpora", "gen", "--results", str(results),
            "--workdir", str(tmp_path / "runs"), "--tiny"]
  assert table_lib.main(common + ["--encoders", "tfidf", "ran", "--seeds", "0"]) == 0
  rows = [json.loads(x) for x in results.read_text().splitlines()]
  assert [r["encoder"] for r in rows] == ["tfidf", "ran"], rows
  for r in rows:
    assert 0.0 <= r["test/accuracy"] <= 1.0 and 0.0 <= r["test/macro_f1"] <= 1.0
    assert r["cpu_s"] > 0 and r["peak_rss_mib"] > 0 and r["tiny"] and r["command"]
  ran = rows[1]
  assert ran["dev_curve"] and ran["steps"] > 0 and ",tiny" in ran["command"]
  # The workdir holds the run the row describes: its test metrics are the row's.
  with open(tmp_path / "runs" / "gen_ran_s0" / "test_metrics.json") as f:
    tested = json.load(f)
  assert tested["test"]["accuracy"] == pytest.approx(ran["test/accuracy"])
  # The row's dev numbers are those of the checkpoint that was tested, not the last eval.
  assert ran["dev/best_step"] == tested["step"], (ran["dev_curve"], tested["step"])
  (point,) = [p for p in ran["dev_curve"] if p["step"] == tested["step"]]
  assert (ran["dev/accuracy"], ran["dev/macro_f1"]) == (point["accuracy"], point["macro_f1"])

  # The table: tiny rows are not the default command's ...
  args = argparse.Namespace(corpora=["gen"], corpus_dir=str(corpus_dir), results=str(results))
  assert "| - | - | not run |" in next(
      x for x in table_lib.table(args).splitlines() if "`encoder=ran`" in x)
  # ... relabel them as default rows, add a second seed and an override row, read it back.
  extra = dict(ran, seed=1, **{"test/accuracy": 0.5})
  override = dict(ran, seed=2, tiny=False, overrides=["train.num_epochs=1"],
                  **{"test/accuracy": 0.0})
  # A row of an earlier default: the new default plus the old value, marked as such.
  superseded = dict(ran, seed=0, tiny=False, overrides=["train.num_epochs=9"],
                    superseded_default="the default was 9 epochs", **{"test/accuracy": 0.25})
  failed = {"corpus": "gen", "encoder": "slstm", "seed": 0,
            "status": "stopped at the 1-minute limit"}
  lines = [dict(r, tiny=False) for r in rows] + [dict(extra, tiny=False), superseded, override,
                                                  failed]
  results.write_text("".join(json.dumps(r) + "\n" for r in lines))
  text = table_lib.table(args)
  row = next(x for x in text.splitlines() if "`encoder=ran`" in x).split("|")
  mean = 100 * (ran["test/accuracy"] + 0.5) / 2
  assert row[3].strip() == "2" and row[5].strip().startswith(f"{mean:.1f} ± ")
  best = 100 * max(point["accuracy"] for point in ran["dev_curve"])  # The tested checkpoint's.
  assert row[4].strip() == f"{best:.1f} ± 0.0"
  assert "stopped at the 1-minute limit" in next(
      x for x in text.splitlines() if "`encoder=slstm`" in x)
  assert "| - |" in next(x for x in text.splitlines() if "TF-IDF" in x)  # No dev split.
  # The override row stands apart, on a line of its own that names its overrides.
  assert "| `train.num_epochs=1` | 2 |" in next(
      x for x in text.splitlines() if "num_epochs=1" in x)
  # Override rows in a fixed order (encoder, overrides, seed), an earlier default's marked;
  # neither is averaged into the default row (its mean is of seeds 0 and 1 above).
  listed = [x for x in text.splitlines() if "num_epochs=" in x]
  assert [x.split("|")[3].strip() for x in listed] == [
      "`train.num_epochs=1`", "`train.num_epochs=9` (the earlier default)"]


def test_override_rows_get_their_own_workdir_and_say_their_overrides():
  """A row run with overrides never resumes (or overwrites) the default row's workdir, and
  its recorded command reproduces it."""
  default = table_lib.row_workdir("runs", "c", "ran", 0)
  short = table_lib.row_workdir("runs", "c", "ran", 0, ["train.num_epochs=1"])
  assert default != short and short != table_lib.row_workdir("runs", "c", "ran", 0,
                                                             ["train.num_epochs=2"])
  command = table_lib.cli_command("d", "c", "ran", 0, short, overrides=["train.num_epochs=1"])
  assert command.endswith(" --config.train.num_epochs=1") and f"--workdir={short}" in command
  assert "--config.train" not in table_lib.cli_command("d", "c", "ran", 0, default)
