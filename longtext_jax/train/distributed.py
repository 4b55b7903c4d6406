"""Multi-host start-up on JAX's own runtime (``jax.distributed``).

Every process runs the same command; the trainer then shards data per process
(``jax.process_index()``) and builds global arrays with
``jax.make_array_from_process_local_data``. On TPU pod slices, SLURM and Open MPI, JAX
detects the cluster itself: set only ``--config.distributed.initialize=True``. Elsewhere
(e.g. several GPU hosts, or CPU processes on one machine) pass the coordinator, the number
of processes and each one's id, from the config or the environment
(``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``).
"""
from __future__ import annotations

import os
import threading

import jax


def initialize(dist_config) -> None:
  """Calls ``jax.distributed.initialize`` when ``dist_config.initialize`` is set."""
  if not dist_config.initialize:
    return
  address = dist_config.coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS")
  num = dist_config.num_processes or int(os.environ.get("JAX_NUM_PROCESSES", 0)) or None
  pid = dist_config.process_id
  if pid < 0:
    pid = int(os.environ["JAX_PROCESS_ID"]) if "JAX_PROCESS_ID" in os.environ else None
  if dist_config.cpu_collectives:
    # CPU collectives across processes need an implementation (gloo ships with jaxlib);
    # this only concerns the CPU client, so it is harmless on GPU/TPU hosts. (Asking for the
    # backend here would start JAX before jax.distributed, which must come first.)
    jax.config.update("jax_cpu_collectives_implementation", dist_config.cpu_collectives)
  jax.distributed.initialize(coordinator_address=address, num_processes=num, process_id=pid)


class StopAgreement:
  """Makes every process of a ``jax.distributed`` run stop after the same step when a
  SIGTERM reached only some of them (a scheduler signalling hosts one at a time, or one
  host a step ahead of another).

  Each process stopping on its own signal would deadlock: the one that stops enters the
  checkpoint's barriers while the others enter the next step's collectives. Instead, a
  signalled process posts a request in the coordination service's key-value store; a thread
  in every process watches for it and, once it appears, posts the last step its process
  reported (the main thread may be blocked on device work that needs the other processes,
  so the thread answers for it). The run stops after ``max(posted) + 1``: no process can
  have passed that step, since a process that sees the request pending waits for every
  post before its next step. Pure host work: no collective, no device sync per step.

    with StopAgreement(name, start_step) as agree:
      ...  # after each step:
      if signalled: agree.request()
      stop_at = agree.after_step(step)   # None, or the step to stop after
  """

  def __init__(self, name: str, start_step: int, client=None, num_processes: int | None = None,
               process_index: int | None = None, poll_ms: int = 500,
               timeout_ms: int = 600_000):
    if client is None:
      from jax._src import distributed as jax_distributed  # pylint: disable=g-import-not-at-top
      client = jax_distributed.global_state.client
    if client is None:
      raise ValueError("StopAgreement needs jax.distributed.initialize() first")
    self._client = client
    self._n = jax.process_count() if num_processes is None else num_processes
    self._index = jax.process_index() if process_index is None else process_index
    self._prefix = f"longtext_jax/stop/{name}"
    self._poll_ms, self._timeout_ms = poll_ms, timeout_ms
    self._lock = threading.Lock()
    self._step, self._pending, self._stop = start_step, False, None
    self._closed = threading.Event()
    self._thread = threading.Thread(target=self._watch, daemon=True,
                                    name="longtext_jax-stop-agreement")

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *exc):
    self._closed.set()
    self._thread.join(timeout=10 * self._poll_ms / 1000)

  def _announce(self) -> None:
    with self._lock:
      if self._pending:
        return
      self._pending, current = True, self._step
    self._client.key_value_set(f"{self._prefix}/step/{self._index}", str(current),
                               allow_overwrite=True)

  def _watch(self) -> None:
    while not self._closed.is_set():
      try:
        self._client.blocking_key_value_get(f"{self._prefix}/request", self._poll_ms)
      except Exception:  # pylint: disable=broad-except  (a timeout: not requested yet)
        continue
      self._announce()
      return

  def request(self) -> None:
    """This process was signalled: asks every process to stop (idempotent)."""
    with self._lock:
      if self._pending:
        return
    self._client.key_value_set(f"{self._prefix}/request", str(self._index),
                               allow_overwrite=True)
    self._announce()

  def after_step(self, step: int) -> int | None:
    """Reports ``step`` (just dispatched); returns the agreed step to stop after, or None
    while no process asked. Blocks, the first time a request is seen, until every process
    posted its step."""
    with self._lock:
      self._step, pending = step, self._pending
    if not pending:
      return None
    if self._stop is None:
      steps = []
      for i in range(self._n):
        try:
          steps.append(int(self._client.blocking_key_value_get(
              f"{self._prefix}/step/{i}", self._timeout_ms)))
        except Exception as e:  # pylint: disable=broad-except
          raise RuntimeError(f"stopping on SIGTERM: process {i} did not post its step "
                             f"within {self._timeout_ms / 1000:.0f} s ({e})") from e
      self._stop = max(steps) + 1
    return self._stop
