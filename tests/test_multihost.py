"""Two processes on 127.0.0.1 (CPU, gloo), 4 fake devices each == one device (in this
process; tests/test_train.py checks that 8 devices in one process give the 1-device losses)."""
import json
import os
import socket
import subprocess
import sys

import numpy as np

from conftest import ROOT, load_config
from longtext_jax import train

ARGS = ["--config=configs/masked_summation.py:transformer,tiny",
        "--config.train.num_steps=4", "--config.train.log_every=1",
        "--config.train.eval_every=4", "--config.train.progress_bar=False"]


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _losses(workdir):
  rows = [json.loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
  return ([r["loss"] for r in rows if r["split"] == "train"]
          + [r["loss"] for r in rows if r["split"] == "eval"])


def test_two_processes_match_one_process(tmp_path):
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
             JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
  port = _free_port()
  procs = [subprocess.Popen(
      [sys.executable, "-m", "longtext_jax.main", *ARGS, f"--workdir={tmp_path / 'multi'}",
       "--config.distributed.initialize=True",
       f"--config.distributed.coordinator_address=127.0.0.1:{port}",
       "--config.distributed.num_processes=2", f"--config.distributed.process_id={i}"],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
      for i in range(2)]
  outs = [p.communicate(timeout=400) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  config = load_config("masked_summation.py", "transformer,tiny")  # ARGS, in this process.
  config.train.num_steps, config.train.log_every, config.train.eval_every = 4, 1, 4
  config.train.progress_bar = False
  train.train_and_evaluate(config, str(tmp_path / "single"))
  multi, single = _losses(tmp_path / "multi"), _losses(tmp_path / "single")
  assert len(multi) == len(single) == 5
  np.testing.assert_allclose(multi, single, rtol=1e-5, atol=1e-5)
