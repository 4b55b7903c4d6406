"""TensorBoard logs read back: scalars, the config as hparams and as text, buffered flushing."""
import json
import os

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
