"""experiments/own_corpus_table.py: the results table of docs/own_corpus.md, on a generated
corpus in the fetched corpora's layout (no downloads; scikit-learn is the baseline's oracle
extra, skipped without it)."""
import argparse
import json
import os
import subprocess
import sys
import types

import pytest

import hf_folders
import own_corpus_data
from conftest import ROOT, load_script

table_lib = load_script("experiments/own_corpus_table.py")


def test_tiny_rows_stay_out_of_the_docs_by_default(tmp_path, monkeypatch):
  """--tiny without --results / --workdir appends to runs/own_corpus_tiny/, not to the docs'
  results file, and its rows train in folders of their own (a full row of the same corpus,
  encoder and seed must not find a tiny run's checkpoint)."""
  ran = []

  def fake_run(cmd, **kwargs):
    del kwargs
    ran.append(cmd[cmd.index("--workdir") + 1])
    return subprocess.CompletedProcess(cmd, 0, '{"corpus": "gen", "encoder": "ran", '
                                       '"seed": 0}\n', "")

  monkeypatch.setattr(table_lib, "ROOT", str(tmp_path))
  monkeypatch.setattr(table_lib.subprocess, "run", fake_run)
  monkeypatch.chdir(tmp_path)
  assert table_lib.main(["--corpora", "gen", "--encoders", "ran", "--tiny"]) == 0
  home = tmp_path / "runs" / "own_corpus_tiny"
  assert ran == [str(home / "gen_ran_s0")] and not (tmp_path / "docs").exists()
  (row,) = [json.loads(x) for x in (home / "results.jsonl").read_text().splitlines()]
  assert row["encoder"] == "ran" and row["tiny"]
  assert table_lib.main(["--corpora", "gen", "--encoders", "ran"]) == 0  # The full row.
  assert ran[1] == os.path.join("runs", "own_corpus", "gen_ran_s0")
  assert (tmp_path / "docs" / "own_corpus_results.jsonl").exists()


def test_step_overrides_are_refused_before_any_row_runs(tmp_path, monkeypatch):
  """train.num_steps and its kin are set from train.num_epochs by prepare.py: an --override of
  them was dropped without a word; it is refused before the first row (a row of the baselines
  listed first ran before), unless num_epochs is overridden to 0."""
  ran = []
  monkeypatch.setattr(table_lib.subprocess, "run", lambda cmd, **kw: ran.append(cmd))
  with pytest.raises(ValueError, match=r"train.num_steps=5.*not used while "
                     r"train.num_epochs \(the configs' default\)"):
    table_lib.main(["--encoders", "tfidf", "ran", "--override", "train.num_steps=5",
                    "--results", str(tmp_path / "r.jsonl")])
  assert not ran and not (tmp_path / "r.jsonl").exists()
  table_lib.check_step_overrides(["train.num_epochs=0", "train.num_steps=5"], 0.0)


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
  assert table_lib.main(common + ["--encoders", "tfidf", "ran", "tfidf_dev", "--seeds", "0"]) == 0
  rows = [json.loads(x) for x in results.read_text().splitlines()]
  assert [r["encoder"] for r in rows] == ["tfidf", "ran", "tfidf_dev"], rows
  tuned = rows.pop()
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
  # The tuned TF-IDF row fits on the encoder run's training part and is tuned on its dev
  # split (the same train.jsonl lines as the run's data_info.json), never on the test file;
  # its setting is the grid's best on dev, and its dev accuracy is shown in the table.
  with open(tmp_path / "runs" / "gen_ran_s0" / "data_info.json") as f:
    where = json.load(f)["splits"]["eval"]["origin"]["where"]
  assert tuned["dev_lines"] == [int(w.rsplit(":", 1)[1]) for w in where]
  with open(corpus_dir / "gen" / "train.jsonl") as f:
    lines = sum(1 for x in f if x.strip())
  assert tuned["examples"]["train"] + tuned["examples"]["eval"] == lines
  assert tuned["examples"]["eval"] == len(where) and len(tuned["grid"]) == len(table_lib.TFIDF_GRID)
  best = max(g["dev/accuracy"] for g in tuned["grid"])
  first = next(g for g in tuned["grid"] if g["dev/accuracy"] == best)
  assert tuned["dev/accuracy"] == best and tuned["chosen"] == {
      k: v for k, v in first.items() if k != "dev/accuracy"}

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


def test_override_values_take_the_fields_type_and_booleans_parse():
  """--override values are read as the field's type; 'False' turns a switch off (a plain
  bool('False') is True: the ablation row would have run the full model), and a value that
  is no boolean is refused with the override named."""
  parse = table_lib.parse_override
  assert parse("m.memory_review=False", True, "False") is False
  assert parse("m.use_rotary=false", True, "false") is False
  assert parse("m.x=1", False, "1") is True and parse("m.x=TRUE", False, "TRUE") is True
  assert parse("t.num_epochs=3", 2, "3") == 3 and parse("o.lr=1e-3", 0.1, "1e-3") == 1e-3
  assert parse("m.pooling=mean", "max", "mean") == "mean"
  with pytest.raises(ValueError, match="m.memory_review=off"):
    parse("m.memory_review=off", True, "off")


def _tiny_bert_folder(folder):
  """A tiny random BERT whose vocabulary word-pieces the generated corpus."""
  syllables = list(own_corpus_data._SYLLABLES)  # pylint: disable=protected-access
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + syllables + [
      "##" + s for s in syllables]
  hf_folders.write_folder(folder, dict(hf_folders.TINY, max_position_embeddings=128),
                          scale=0.02, vocab=vocab)
  return str(folder)


def test_gpu_suite_packs_and_runs_the_pretrained_rows(tmp_path):
  """experiments/gpu_suite.sh pack (a float16 copy of the BERT folder and the corpus: what a
  device call carries) and own_corpus (the rows, written under $OUT), end to end on the
  tiny configs: the script a GPU session runs is the one tested here. --pretrained reaches
  the pretrained encoders' config and their recorded command, and the rows say that their
  weights were rounded."""
  corpora = tmp_path / "corpora"
  own_corpus_data.write_corpus(str(corpora / "news_outlets"), n_train=8, n_test=2)
  carry, out, runs = tmp_path / "carry", tmp_path / "out", tmp_path / "runs"
  env = dict(os.environ, PYTHON=sys.executable, CARRY=str(carry), OUT=str(out),
             BERT=_tiny_bert_folder(tmp_path / "bert"), CORPUS_DIR=str(corpora), TINY="1",
             ENCODERS="bert_first", SEEDS="0", WORKDIR=str(runs), LIMIT="300")
  script = os.path.join(ROOT, "experiments", "gpu_suite.sh")
  for part in ("pack", "own_corpus"):
    proc = subprocess.run(["bash", script, part], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
  half = str(carry / "bert_fp16")
  assert os.path.exists(os.path.join(half, "HALF_PRECISION.json"))
  (row,) = [json.loads(x) for x in (out / "own_corpus_results.jsonl").read_text().splitlines()]
  assert "test/accuracy" in row and row["corpus"] == "news_outlets", row
  assert row["weights"] == "float16 copy" and f",pretrained={half} " in row["command"]
  assert row["device"].startswith("cpu") and "device_kind" not in row
  # The papers' reading (the config flag 'long'), in a workdir of its own.
  assert row["flags"] == ["long"] and ",long," in row["command"]
  with open(runs / "news_outlets_bert_first_long_s0" / "config.json") as f:
    config = json.load(f)
  assert config["model"]["encoder"]["pretrained_path"] == half
  assert config["optim"]["learning_rate"] == 5e-5
  # Not for the from-scratch encoders (their config refuses it); the same family as the
  # config's.
  assert "pretrained" not in table_lib.config_arg("ran", pretrained=half)
  assert table_lib.config_arg("ran", long=True) == "local,encoder=ran"
  from configs import text_classification  # pylint: disable=import-outside-toplevel
  assert table_lib.PRETRAINED == text_classification.BERT_FAMILY


def test_rows_of_another_machine_or_rounded_weights_get_their_own_line(tmp_path):
  """The table never averages CPU rows with GPU rows, or original weights with a copy."""
  base = {"corpus": "c", "encoder": "bert_first", "test/accuracy": 0.8, "test/macro_f1": 0.7,
          "dev_curve": [{"step": 5, "accuracy": 0.75}], "steps": 5, "cpu_s": 10.0,
          "wall_s": 10.0, "peak_rss_mib": 100.0, "overrides": [], "tiny": False}
  rows = [dict(base, seed=0), dict(base, seed=1, **{"test/accuracy": 0.9}),
          dict(base, seed=0, weights="float16 copy"),
          dict(base, seed=0, weights="float16 copy", device_kind="NVIDIA H100"),
          dict(base, seed=1, weights="float16 copy", device_kind="NVIDIA H100"),
          dict(base, seed=0, overrides=["train.num_epochs=1"], device_kind="NVIDIA H100"),
          dict(base, seed=0, flags=["long"])]
  results = tmp_path / "results.jsonl"
  results.write_text("".join(json.dumps(r) + "\n" for r in rows))
  args = argparse.Namespace(corpora=["c"], corpus_dir="d", results=str(results))
  lines = [x for x in table_lib.table(args).splitlines() if "encoder=bert_first" in x]
  assert lines[0].startswith("| c | `encoder=bert_first` | 2 | 75.0 ± 0.0 | 85.0 ± 7.1 |")
  assert lines[1].startswith("| c | `encoder=bert_first,long` | 1 |")
  assert lines[2].startswith("| c | `encoder=bert_first` (float16 copy of the weights) | 1 |")
  assert lines[3].startswith(
      "| c | `encoder=bert_first` (NVIDIA H100, float16 copy of the weights) | 2 |")
  assert lines[4].startswith(
      "| c | `encoder=bert_first` (NVIDIA H100) | `train.num_epochs=1` | 0 |")
  assert len(lines) == 5
  # Without a row of the default command (CPU, no flag) its line says so.
  results.write_text(json.dumps(rows[-1]) + "\n")
  lines = [x for x in table_lib.table(args).splitlines() if "encoder=bert_first" in x]
  assert lines[0] == "| c | `encoder=bert_first` | - | - | not run | - | - | - | - | - |"
  assert lines[1].startswith("| c | `encoder=bert_first,long` | 1 |") and len(lines) == 2
  # What a row records of its machine: the GPU's kind only off the CPU.
  gpu = types.SimpleNamespace(platform="gpu", device_kind="NVIDIA H100 80GB HBM3")
  assert table_lib.device_fields(gpu)["device_kind"] == "NVIDIA H100 80GB HBM3"
  assert "device_kind" not in table_lib.device_fields(
      types.SimpleNamespace(platform="cpu", device_kind="cpu"))


def test_a_row_appended_twice_counts_once_and_finished_rows_are_not_rerun(tmp_path,
                                                                         monkeypatch):
  """Re-issuing the sweep (to add a seed, to finish after a timeout) appended finished rows
  again and the table counted each copy as a seed (seeds 0, 1, 0: '3 seeds, 86.7 ± 5.8').
  The table keeps one row per run (the later), and run_all skips rows it has, unless
  --rerun."""
  base = {"corpus": "c", "encoder": "ran", "test/macro_f1": 0.7, "steps": 5, "cpu_s": 1.0,
          "wall_s": 1.0, "peak_rss_mib": 1.0, "overrides": [], "tiny": False,
          "dev_curve": [{"step": 5, "accuracy": 0.75}]}
  rows = [dict(base, seed=0, **{"test/accuracy": 0.9}),
          dict(base, seed=1, **{"test/accuracy": 0.8}),
          dict(base, seed=0, **{"test/accuracy": 0.9})]
  results = tmp_path / "results.jsonl"
  results.write_text("".join(json.dumps(r) + "\n" for r in rows))
  args = argparse.Namespace(corpora=["c"], corpus_dir="d", results=str(results))
  line = next(x for x in table_lib.table(args).splitlines() if "encoder=ran" in x)
  assert line.startswith("| c | `encoder=ran` | 2 | 75.0 ± 0.0 | 85.0 ± 7.1 |"), line
  ran = []
  monkeypatch.setattr(table_lib.subprocess, "run",
                      lambda cmd, **kw: ran.append(cmd) or types.SimpleNamespace(
                          returncode=1, stdout="", stderr="x"))
  run_args = argparse.Namespace(
      corpora=["c"], encoders=["ran"], seeds=[0, 1, 2], workdir=str(tmp_path / "w"),
      corpus_dir="d", override=[], tiny=False, pretrained="", long=False,
      results=str(results), timeout_min=1.0, rerun=False)
  table_lib.run_all(run_args)
  assert [c[c.index("--seed") + 1] for c in ran] == ["2"]  # Seeds 0 and 1 are there.
  ran.clear()
  table_lib.run_all(argparse.Namespace(**{**vars(run_args), "rerun": True, "seeds": [0]}))
  assert [c[c.index("--seed") + 1] for c in ran] == ["0"]
