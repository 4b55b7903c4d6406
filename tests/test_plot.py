"""Training-curve figures (longtext_jax.plot): what is drawn, how it is styled, bad input."""
import json
import os

import pytest

from longtext_jax import plot


def _write_run(workdir, loss0, steps=(10, 20, 30, 40), eval_every=20, resumed=False):
  """metrics.jsonl as the trainer writes it: train records every 10 steps, eval every 20."""
  os.makedirs(workdir, exist_ok=True)
  lines = []
  for s in steps:
    lines.append({"step": s, "split": "train", "grad_norm": 1.0, "learning_rate": 1e-3,
                  "loss": loss0 * 10.0 ** (-s / 10), "steps_per_sec": 50.0})
    if s % eval_every == 0:
      lines.append({"step": s, "split": "eval", "loss": loss0 * 10.0 ** (-s / 10),
                    "accuracy": 0.5 + s / 100})
  if resumed:  # A resume from step 20 logs steps 30 and 40 again: the later record wins.
    lines.append({"step": 40, "split": "eval", "loss": 1e-9, "accuracy": 0.99})
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    f.write("\n".join(json.dumps(r) for r in lines) + "\n")
  return str(workdir)


def test_two_runs_share_one_figure(tmp_path):
  a = _write_run(tmp_path / "a", 2.0)
  b = _write_run(tmp_path / "b", 3.0, resumed=True)
  fig = plot.plot_runs([a, b])
  loss_ax, acc_ax = [ax for ax in fig.axes if ax.get_visible()]
  assert (loss_ax.get_title(), acc_ax.get_title()) == ("loss", "accuracy")
  # Loss: train + eval for each run; accuracy: eval only (train records have none).
  assert sorted(l.get_label() for l in loss_ax.lines) == [
      "a eval", "a train", "b eval", "b train"]
  assert sorted(l.get_label() for l in acc_ax.lines) == ["a eval", "b eval"]
  by_label = {l.get_label(): l for l in loss_ax.lines}
  assert list(by_label["a train"].get_xdata()) == [10, 20, 30, 40]
  assert list(by_label["b eval"].get_xdata()) == [20, 40]
  assert by_label["b eval"].get_ydata()[-1] == 1e-9  # The resumed run's last record.
  # One colour and marker per run; train solid, eval dashed.
  assert by_label["a train"].get_color() != by_label["b train"].get_color()
  assert by_label["a train"].get_marker() != by_label["b train"].get_marker()
  assert by_label["a train"].get_color() == by_label["a eval"].get_color()
  assert (by_label["a train"].get_linestyle(), by_label["a eval"].get_linestyle()) == ("-", "--")
  # Loss spans 4+ decades: log; accuracy in [0.5, 1]: linear. Axes are labelled.
  assert (loss_ax.get_yscale(), acc_ax.get_yscale()) == ("log", "linear")
  assert loss_ax.get_xlabel() == "training step" and acc_ax.get_ylabel() == "accuracy"


def test_the_test_split_is_drawn_unlike_eval(tmp_path):
  """A run with data.test_path logs 'test' records: dotted, where eval is dashed (both were
  dashed with the same hollow marker)."""
  a = _write_run(tmp_path / "a", 2.0)
  with open(os.path.join(a, "metrics.jsonl"), "a") as f:
    f.write(json.dumps({"step": 40, "split": "test", "loss": 1e-3, "accuracy": 0.9}) + "\n")
  loss_ax = [ax for ax in plot.plot_runs([a]).axes if ax.get_visible()][0]
  style = {l.get_label(): l.get_linestyle() for l in loss_ax.lines}
  assert style == {"a train": "-", "a eval": "--", "a test": ":"}


def test_cli_writes_png_and_names_bad_input(tmp_path, capsys):
  a = _write_run(tmp_path / "a", 2.0)
  out = tmp_path / "figs" / "curves.png"
  assert plot.main([f"--workdir={a}", f"--out={out}", "--metrics=loss"]) == 0
  with open(out, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  assert str(out) in capsys.readouterr().out
  assert plot.main([f"--workdir={a}", "--metrics=bleu"]) == 2
  err = capsys.readouterr().err
  assert "bleu" in err and "accuracy" in err  # The logged names are listed.
  assert plot.main([f"--workdir={tmp_path / 'nope'}"]) == 2
  assert "metrics.jsonl not found" in capsys.readouterr().err
  with open(os.path.join(a, "metrics.jsonl"), "a") as f:
    f.write('{"split": "train", "loss": 1.0}\n')
  with pytest.raises(ValueError, match=r"metrics.jsonl:7: .*'step'"):
    plot.read_metrics(a)


def test_model_styles_are_distinct():
  names = ["transformer", "windowed", "ran_parallel", "ran_scan", "star_transformer",
           "star_ffn", "slstm", "bilstm", "lstm", "bert", "bert_first", "bert_random",
           "to_bert", "chunk_bert", "new_model_a", "new_model_b"]
  styles = plot.styles_for(names)
  assert len({s["color"] for s in styles.values()}) == len(names)
  assert styles["bert"] == {"color": plot.MODEL_STYLES["bert"][0],
                            "marker": plot.MODEL_STYLES["bert"][1]}
  # The same model looks the same whatever else is in the figure.
  assert plot.styles_for(["bert_first", "bert"])["bert"] == styles["bert"]
  pairs = [(s["color"], s["marker"]) for s in plot.styles_for([f"m{i}" for i in range(40)],
                                                               fixed=False).values()]
  assert len(set(pairs)) == 40
  assert plot.spans_decades([2.0, 0.01]) and not plot.spans_decades([0.5, 1.0])
  assert not plot.spans_decades([0.0, 10.0, 1000.0])  # Not all positive: no log scale.


def _experiment(name):
  """Imports experiments/<name>.py as a module."""
  from conftest import load_script  # pylint: disable=g-import-not-at-top
  return load_script(f"experiments/{name}.py")


def _assert_one_style_per_model(ax, models):
  lines = [l for l in ax.lines if not l.get_label().startswith("_")
           and l.get_label() != "k/2 guess"]
  assert sorted(l.get_label() for l in lines) == sorted(models)
  assert len({l.get_color() for l in lines}) == len(lines)
  assert len({l.get_marker() for l in lines}) == len(lines)
  assert ax.get_xlabel() and ax.get_ylabel() and "(" in ax.get_ylabel()  # Units.


def test_benchmark_figures_from_recorded_data(tmp_path):
  """The docs' benchmark figures, redrawn from their recorded JSON: every model its own
  colour and marker, labelled axes with units, log axes where the data spans decades."""
  from conftest import ROOT  # pylint: disable=g-import-not-at-top
  docs = os.path.join(ROOT, "docs")
  with open(os.path.join(docs, "benchmarks", "harness_cpu", "results.json")) as f:
    rec = json.load(f)
  fig = _experiment("benchmark").plot_scaling(rec["rows"], rec["meta"], str(tmp_path / "a.png"))
  models = sorted({r["encoder"] for r in rec["rows"]})
  assert len(models) >= 10
  for ax in fig.axes:
    _assert_one_style_per_model(ax, models)
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
  fig = _experiment("ran_benchmark").plot(
      json.load(open(os.path.join(docs, "ran_benchmark_cpu_run2.json")))["rows"],
      str(tmp_path / "b.png"))
  for ax in fig.axes:
    _assert_one_style_per_model(ax, ["ran_parallel", "ran_scan", "windowed", "transformer"])


def test_a_last_line_cut_by_a_kill_is_skipped_a_bad_line_before_it_is_an_error(tmp_path):
  a = _write_run(tmp_path / "a", 2.0)
  path = os.path.join(a, "metrics.jsonl")
  whole = plot.read_metrics(a)
  with open(path, "a") as f:
    f.write('{"step": 9, "split": "tra')  # A kill while the trainer wrote this record.
  assert plot.read_metrics(a) == whole
  with open(path, "a") as f:
    f.write('\n{"step": 10, "split": "train", "loss": 1.0}\n')  # Not the last line now.
  with pytest.raises(ValueError, match=r"metrics.jsonl:7: not a metrics record"):
    plot.read_metrics(a)
