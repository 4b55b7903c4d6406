"""Metric sinks: metrics.jsonl, TensorBoard event files (tensorboardX) and the log."""
from __future__ import annotations

import json
import os
from typing import Mapping

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

  def close(self) -> None:
    """Closes the TensorBoard writer."""
    if self._tb is not None:
      self._tb.close()
