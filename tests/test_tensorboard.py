"""TensorBoard logs read back: scalars, the config as hparams and as text, buffered flushing."""
import io
import json
import os
import sys
import time
import types

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from longtext_jax.config import base_config
from longtext_jax.train import logging as log_lib


def _read(tb_dir):
  acc = event_accumulator.EventAccumulator(
      tb_dir, size_guidance={event_accumulator.TENSORS: 0, event_accumulator.SCALARS: 0})
  acc.Reload()
  return acc


def _hparams(acc):
  content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
  data = plugin_data_pb2.HParamsPluginData.FromString(content)
  return data.session_start_info.hparams


def test_config_scalars_and_flushing(tmp_path, monkeypatch):
  config = base_config()
  config.optim.learning_rate = 0.0123
  config.model.encoder.name = "ran"
  writer = log_lib.MetricWriter(str(tmp_path), echo=False, config=config)
  flushes = []
  real_flush = writer._tb.flush
  monkeypatch.setattr(writer._tb, "flush", lambda: (flushes.append(1), real_flush()))
  for step in range(1, 11):
    writer.write(step, "train", {"loss": 1.0 / step, "grad_norm": 2.0})
  assert not flushes  # Train records are buffered, not flushed one by one.
  writer.write(10, "eval", {"loss": 0.5, "accuracy": 0.75})
  assert len(flushes) == 1
  writer.close()

  acc = _read(str(tmp_path / "tensorboard"))
  assert [e.step for e in acc.Scalars("train/loss")] == list(range(1, 11))
  assert acc.Scalars("train/loss")[3].value == 0.25
  assert [(e.step, e.value) for e in acc.Scalars("eval/accuracy")] == [(10, 0.75)]
  hp = _hparams(acc)
  assert abs(hp["optim/learning_rate"].number_value - 0.0123) < 1e-9
  assert hp["model/encoder/name"].string_value == "ran"
  assert hp["train/num_steps"].number_value == config.train.num_steps
  (text,) = acc.Tensors("config/text_summary")
  assert text.step == 0
  logged = json.loads(text.tensor_proto.string_val[0].decode())  # Indented JSON is JSON.
  assert logged == json.loads(config.to_json_best_effort())
  with open(tmp_path / "metrics.jsonl") as f:
    rows = [json.loads(line) for line in f]
  assert len(rows) == 11 and rows[-1] == {"step": 10, "split": "eval", "loss": 0.5,
                                          "accuracy": 0.75}


def test_config_json_of_the_workdir_is_logged_by_default(tmp_path):
  with open(tmp_path / "config.json", "w") as f:
    json.dump({"seed": 3, "train": {"best_metric": "accuracy"}, "mesh": {"shape": [1, -1]},
               "init_from": {"path": None}}, f)
  log_lib.MetricWriter(str(tmp_path), echo=False).close()
  hp = _hparams(_read(str(tmp_path / "tensorboard")))
  assert hp["seed"].number_value == 3
  assert hp["mesh/shape"].string_value == "[1, -1]"
  assert hp["init_from/path"].string_value == "None"
  # Disabled (processes other than 0): nothing is written.
  other = tmp_path / "other"
  os.makedirs(other)
  w = log_lib.MetricWriter(str(other), enabled=False)
  w.write(1, "train", {"loss": 1.0})
  w.close()
  assert os.listdir(other) == []


def test_metric_writer_does_not_import_torch(tmp_path):
  """tensorboardX would import torch when installed (1.7 s, ~180 MB per training run); the
  writer imports it without, and torch still imports afterwards. In a fresh interpreter,
  since this one may have imported either already."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  has_torch = importlib.util.find_spec("torch") is not None
  code = (
      "import sys\n"
      "from longtext_jax.train import logging as log_lib\n"
      f"w = log_lib.MetricWriter({str(tmp_path)!r}, echo=False, config={{'a': 1}})\n"
      "w.write(1, 'train', {'loss': 1.0}); w.close()\n"
      "assert 'torch' not in sys.modules, 'torch imported'\n"
      f"if {has_torch}:\n"
      "  import torch\n"
      "  assert torch.ones(2).sum().item() == 2.0\n"
      "print('ok')\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=False, timeout=120)
  assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
  assert os.listdir(tmp_path / "tensorboard")


class _Terminal(io.StringIO):
  def isatty(self):
    return True


def _drive(stream, steps=200, pause_s=0.002, initial=0, **kwargs):
  with log_lib.progress_bar(steps, "train", file=stream, initial=initial, **kwargs) as bar:
    for _ in range(steps - initial):
      bar.update(1)
      time.sleep(pause_s)
  return stream.getvalue()


def test_progress_bar_is_redrawn_on_a_terminal_and_sparse_in_a_log_file(monkeypatch):
  """On a terminal the bar is redrawn as steps go (tqdm's 0.1 s); written to a log file or a
  pipe it is drawn at the start and the end only within a minute (a batch job's log gets a
  line a minute, not a copy of the bar per step); a disabled bar writes nothing; in a
  Jupyter/Colab kernel the process's own stderr counts as live (it renders the redraws)."""
  terminal = _drive(_Terminal())
  log = _drive(io.StringIO())
  assert terminal.count("\r") >= 4 and "200/200" in terminal
  assert log.count("\r") <= 2 and "200/200" in log, log
  assert _drive(io.StringIO(), enabled=False, steps=5) == ""
  resumed = _drive(io.StringIO(), steps=10, initial=5, pause_s=0)
  assert resumed.startswith("\rtrain:  50%") and "10/10" in resumed
  assert not log_lib._is_live(sys.stderr) or sys.stderr.isatty()  # pylint: disable=protected-access
  # ipykernel imported (jupyter_client imports it to find kernel specs) is not a kernel: the
  # suite's notebook-interrupt test made every later test's bar live.
  monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
  assert not log_lib._is_live(sys.stderr) or sys.stderr.isatty()  # pylint: disable=protected-access
  ipython = types.ModuleType("IPython")  # A running kernel: an IPython shell with a kernel.
  ipython.get_ipython = lambda: types.SimpleNamespace(kernel=object())
  monkeypatch.setitem(sys.modules, "IPython", ipython)
  assert log_lib._is_live(sys.stderr)  # pylint: disable=protected-access
  assert not log_lib._is_live(io.StringIO())  # pylint: disable=protected-access
  ipython.get_ipython = lambda: types.SimpleNamespace(kernel=None)  # A terminal IPython.
  assert not log_lib._is_live(sys.stderr) or sys.stderr.isatty()  # pylint: disable=protected-access


def test_a_resumed_run_replaces_the_steps_it_trains_again(tmp_path):
  """Killed after logging step 4, resumed from checkpoint 2: steps 3 and 4 are logged again
  and TensorBoard holds each step once, with the resumed run's values (purge_step), as
  metrics.jsonl does (truncate_after)."""
  first = log_lib.MetricWriter(str(tmp_path), echo=False)
  for step in range(1, 5):
    first.write(step, "train", {"loss": float(step)})
  first.close()
  time.sleep(1.1)  # A later event file (TensorBoard orders them by their time-stamped names).
  second = log_lib.MetricWriter(str(tmp_path), echo=False)
  assert second.truncate_after(2) == 2
  for step in (3, 4, 5):
    second.write(step, "train", {"loss": 10.0 * step})
  second.close()
  got = [(e.step, e.value) for e in _read(str(tmp_path / "tensorboard")).Scalars("train/loss")]
  assert got == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0), (5, 50.0)]
  rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
  assert [(r["step"], r["loss"]) for r in rows] == got
