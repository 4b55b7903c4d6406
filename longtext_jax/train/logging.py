"""Metric sinks: metrics.jsonl, TensorBoard event files (tensorboardX) and the log."""
from __future__ import annotations

import json
import logging
import os
from typing import Any, Mapping

import tqdm


class MetricWriter:
  """Writes scalars to ``workdir/metrics.jsonl`` and TensorBoard ``workdir/tensorboard``.

  Only process 0 writes.
  """

  def __init__(self, workdir: str, enabled: bool = True, echo: bool = True):
    self.enabled = enabled
    self.echo = echo
    self.jsonl_path = os.path.join(workdir, "metrics.jsonl")
    self.tb_dir = os.path.join(workdir, "tensorboard")
    self._tb = None
    if enabled:
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
      self._tb = SummaryWriter(self.tb_dir)

  def write(self, step: int, split: str, scalars: Mapping[str, float]) -> None:
    """Appends one ``{"step", "split", **scalars}`` line to metrics.jsonl and writes the
    scalars to TensorBoard as ``<split>/<name>`` (and echoes them when ``echo``)."""
    if not self.enabled:
      return
    record = {"step": int(step), "split": split, **{k: float(v) for k, v in scalars.items()}}
    with open(self.jsonl_path, "a") as f:
      f.write(json.dumps(record) + "\n")
    for key, value in scalars.items():
      self._tb.add_scalar(f"{split}/{key}", float(value), int(step))
    self._tb.flush()
    if self.echo:
      tqdm.tqdm.write(f"step {step} {split}: " + ", ".join(
          f"{k}={float(v):.5g}" for k, v in scalars.items()))

  def truncate_after(self, step: int) -> int:
    """Drops the metrics.jsonl records of steps after ``step`` (and unreadable lines, e.g.
    one cut by a kill), so a run resumed from checkpoint ``step`` does not log those steps
    twice. The file is rewritten atomically (temporary file, then rename); TensorBoard
    event files are left as they are (TensorBoard shows the newest value of a step).

    Args:
      step: the step training resumes from.

    Returns:
      The number of lines dropped.
    """
    if not self.enabled or not os.path.exists(self.jsonl_path):
      return 0
    with open(self.jsonl_path, encoding="utf-8") as f:
      lines = f.read().split("\n")
    kept = []
    for line in lines:
      if not line:
        continue
      try:
        if int(json.loads(line)["step"]) <= step:
          kept.append(line)
      except (ValueError, KeyError, TypeError):
        pass
    dropped = sum(1 for line in lines if line) - len(kept)
    if dropped:
      tmp = self.jsonl_path + ".tmp"
      with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in kept))
      os.replace(tmp, self.jsonl_path)
      logging.warning("Resuming at step %d: dropped %d record(s) of later steps (or "
                      "unreadable) from %s", step, dropped, self.jsonl_path)
    return dropped

  def close(self) -> None:
    """Closes the TensorBoard writer."""
    if self._tb is not None:
      self._tb.close()


def last_record(workdir: str, split: str, max_step: int | None = None
                ) -> tuple[int, dict[str, float]] | None:
  """The last record of ``split`` in ``workdir/metrics.jsonl`` at or before ``max_step``.

  Args:
    workdir: the run directory.
    split: e.g. 'eval'.
    max_step: ignore records of later steps (None: any step).

  Returns:
    ``(step, metrics)``, or None when there is no such record (or no file).
  """
  path = os.path.join(workdir, "metrics.jsonl")
  found: tuple[int, dict[str, Any]] | None = None
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    for line in f:
      try:
        record = json.loads(line)
        step = int(record["step"])
      except (ValueError, KeyError, TypeError):
        continue
      if record.get("split") == split and (max_step is None or step <= max_step):
        found = (step, {k: v for k, v in record.items() if k not in ("step", "split")})
  return found
