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
from longtext_jax.train import checkpointing

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


def _run_two_processes(tmp_path, devices, *extra):
  """Runs ``longtext_jax.main`` with ARGS (and ``extra``) as 2 processes on 127.0.0.1, each
  with ``devices`` fake CPU devices, into ``tmp_path/multi``; returns (return codes, logs)."""
  env = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", "")
             + f" --xla_force_host_platform_device_count={devices}",
             JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
  port = _free_port()
  # Each process writes to a file: with pipes read one process after the other, the second
  # process blocks once it has written a pipe's worth (64 KiB) before the first exits, and
  # the first then waits for it at jax.distributed's shutdown barrier (a deadlock, seen as
  # "Shutdown barrier has failed" after 300 s).
  logs = [tmp_path / f"process_{i}.log" for i in range(2)]
  procs = []
  for i, log in enumerate(logs):
    with open(log, "w") as out:
      procs.append(subprocess.Popen(
          [sys.executable, "-m", "longtext_jax.main", *ARGS, f"--workdir={tmp_path / 'multi'}",
           *extra, "--config.distributed.initialize=True",
           f"--config.distributed.coordinator_address=127.0.0.1:{port}",
           "--config.distributed.num_processes=2", f"--config.distributed.process_id={i}"],
          cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
  for p in procs:
    p.wait(timeout=400)
  return [p.returncode for p in procs], [log.read_text() for log in logs]


def test_two_processes_match_one_process(tmp_path):
  codes, logs = _run_two_processes(tmp_path, 4)
  for i, (code, log) in enumerate(zip(codes, logs)):
    assert code == 0, f"process {i}:\n" + log[-3000:]
  config = load_config("masked_summation.py", "transformer,tiny")  # ARGS, in this process.
  config.train.num_steps, config.train.log_every, config.train.eval_every = 4, 1, 4
  config.train.progress_bar = False
  train.train_and_evaluate(config, str(tmp_path / "single"))
  multi, single = _losses(tmp_path / "multi"), _losses(tmp_path / "single")
  assert len(multi) == len(single) == 5
  np.testing.assert_allclose(multi, single, rtol=1e-5, atol=1e-5)


def test_latest_and_best_checkpoints_use_their_own_barrier_keys(tmp_path):
  """'checkpoints' and 'best' save the same step when an evaluation at a checkpoint step is
  the best so far; over several processes the two saves' Orbax barriers must not share a
  name (else "Barrier _async_write_complete.<step> is already ongoing": the save fails and
  the run hangs at jax.distributed's shutdown, as the test above did now and then)."""
  ckpt = checkpointing.Checkpointer(str(tmp_path), 2, True, "loss", "min")
  keys = [m._options.multiprocessing_options.barrier_sync_key_prefix  # pylint: disable=protected-access
          for m in (ckpt.latest, ckpt.best)]
  assert None not in keys and len(set(keys)) == 2


def test_a_mesh_with_fewer_batch_shards_than_processes_is_refused(tmp_path):
  """mesh data=1, tensor=-1 over 2 processes: both processes would hold the one batch shard
  and feed it different rows (each trains on its own half, silently, where the parameters
  should agree); refused at startup, naming the mesh and the process count."""
  codes, logs = _run_two_processes(tmp_path, 2, "--config.mesh.data=1", "--config.mesh.tensor=-1")
  for i, (code, log) in enumerate(zip(codes, logs)):
    assert code != 0, f"process {i} trained:\n" + log[-2000:]
    assert "data x fsdp = 1 shards, not a multiple of the 2 processes" in log, log[-3000:]


def test_sigterm_to_one_process_stops_every_process_after_the_same_step(tmp_path):
  """SIGTERM reaches process 0 only (a scheduler signalling hosts one at a time): every
  process saves the same agreed step and exits 0. Each process stopping on its own signal
  hung (process 0 in the checkpoint's barriers, process 1 in the next step's collectives)."""
  import signal  # pylint: disable=import-outside-toplevel
  import time  # pylint: disable=import-outside-toplevel
  env = dict(os.environ, XLA_FLAGS=os.environ.get("XLA_FLAGS", "")
             + " --xla_force_host_platform_device_count=1",
             JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
  port, workdir = _free_port(), tmp_path / "multi"
  logs = [tmp_path / f"process_{i}.log" for i in range(2)]
  procs = []
  for i, log in enumerate(logs):
    with open(log, "w") as out:
      procs.append(subprocess.Popen(
          [sys.executable, "-m", "longtext_jax.main",
           "--config=configs/masked_summation.py:transformer,tiny", f"--workdir={workdir}",
           "--config.train.num_steps=100000", "--config.train.log_every=1",
           "--config.train.eval_every=100000", "--config.train.checkpoint_every=100000",
           "--config.train.progress_bar=False", "--config.distributed.initialize=True",
           f"--config.distributed.coordinator_address=127.0.0.1:{port}",
           "--config.distributed.num_processes=2", f"--config.distributed.process_id={i}"],
          cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
  try:
    metrics, t0 = workdir / "metrics.jsonl", time.time()
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 10):
      assert time.time() - t0 < 300 and all(p.poll() is None for p in procs), (
          [p.poll() for p in procs], logs[0].read_text()[-3000:])
      time.sleep(0.05)
    procs[0].send_signal(signal.SIGTERM)
    codes = [p.wait(timeout=240) for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  texts = [log.read_text() for log in logs]
  for i, (code, text) in enumerate(zip(codes, texts)):
    assert code == 0, f"process {i}:\n" + text[-3000:]
  saved = sorted(int(s) for s in os.listdir(workdir / "checkpoints") if s.isdigit())
  assert len(saved) == 1, saved
  assert f"SIGTERM: saved step {saved[0]} to" in texts[0], texts[0][-2000:]
  assert f"SIGTERM or Ctrl-C (to another process): saved step {saved[0]} to" in texts[1], texts[1][-2000:]


class _FakeKeyValueStore:
  """jax.distributed's client, as StopAgreement uses it: set, and a blocking get that
  raises on its timeout."""

  def __init__(self):
    import threading  # pylint: disable=import-outside-toplevel
    self.values, self.changed = {}, threading.Condition()

  def key_value_set(self, key, value, allow_overwrite=False):
    with self.changed:
      assert allow_overwrite or key not in self.values
      self.values[key] = value
      self.changed.notify_all()

  def blocking_key_value_get(self, key, timeout_in_ms):
    with self.changed:
      if not self.changed.wait_for(lambda: key in self.values, timeout_in_ms / 1000):
        raise RuntimeError(f"DEADLINE_EXCEEDED: {key}")
      return self.values[key]


def test_stop_agreement_stops_every_process_after_one_step_none_has_passed():
  """The protocol alone (in-process, a fake store): process 1 is two steps ahead and its
  main thread is blocked (on device work that needs process 0) when process 0 is
  signalled; its watcher thread posts its last step for it. Both get the same stop step,
  past where either had been; no process that is not asked stops."""
  from longtext_jax.train import distributed  # pylint: disable=import-outside-toplevel
  store = _FakeKeyValueStore()
  agree = [distributed.StopAgreement("t", 0, client=store, num_processes=2,
                                     process_index=i, poll_ms=20) for i in range(2)]
  with agree[0], agree[1]:
    for step in range(1, 6):
      assert agree[0].after_step(step) is None
    for step in range(1, 8):
      assert agree[1].after_step(step) is None
    agree[0].request()  # Process 0 is signalled after its step 5; process 1 is at 7.
    stop = agree[0].after_step(5)
    assert stop == 8  # max(5 posted by the request, 7 posted by process 1's thread) + 1
    assert store.values["longtext_jax/stop/t/step/1"] == "7"
    assert agree[1].after_step(8) == 8  # Process 1 resumes, reaches 8, stops there.
  store2 = _FakeKeyValueStore()
  with distributed.StopAgreement("u", 3, client=store2, num_processes=2, process_index=0,
                                 poll_ms=20) as quiet:
    assert all(quiet.after_step(s) is None for s in range(4, 30))
