"""Metric sinks: metrics.jsonl, TensorBoard event files (tensorboardX) and the log.

TensorBoard gets, besides the scalars (``train/<metric>``, ``eval/<metric>``), the run's
config at step 0: as hyperparameters (the HParams dashboard, one flattened field a column,
e.g. ``optim/learning_rate``) and as text (the Text dashboard, the whole config as JSON).
"""
from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any, Mapping

import tqdm

from longtext_jax import fileio

# The metric tags the HParams dashboard lists next to the hyperparameters.
_HPARAM_METRICS = ("train/loss", "eval/loss")


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  """A nested config as ``{"a/b/c": value}`` with values TensorBoard's HParams can show.

  Args:
    config: a nested mapping (``config.json``, ``ConfigDict.to_dict()``).
    prefix: prepended to every key (used by the recursion).

  Returns:
    Flat ``{path: bool | int | float | str}``; lists and other values become JSON/str
    text, ``None`` becomes ``"None"``.
  """
  out: dict[str, Any] = {}
  for key, value in config.items():
    path = f"{prefix}{key}"
    if isinstance(value, Mapping):
      out.update(flatten_config(value, path + "/"))
    elif isinstance(value, (bool, int, float, str)):
      out[path] = value
    elif value is None:
      out[path] = "None"
    else:
      try:
        out[path] = json.dumps(value)
      except TypeError:
        out[path] = str(value)
  return out


def _config_dict(config: Any) -> dict[str, Any]:
  """A ConfigDict or mapping as a plain JSON-able dict."""
  if hasattr(config, "to_json_best_effort"):
    return json.loads(config.to_json_best_effort())
  return json.loads(json.dumps(dict(config), default=str))


def import_tensorboardx():
  """``tensorboardX`` imported without PyTorch.

  tensorboardX imports ``torch`` when it is installed (only to accept torch tensors, which
  this project never passes): 1.7 s and ~180 MB of resident memory in every training run of
  an environment that has torch (the test oracles install it). While tensorboardX is first
  imported, ``import torch`` fails as if torch were absent (tensorboardX treats that as
  optional); afterwards torch imports normally. Nothing changes when torch is already loaded.
  """
  if "tensorboardX" in sys.modules or "torch" in sys.modules:
    import tensorboardX  # pylint: disable=g-import-not-at-top
    import tensorboardX.summary  # pylint: disable=g-import-not-at-top,unused-import
    return tensorboardX
  sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` -> ImportError.
  try:
    import tensorboardX  # pylint: disable=g-import-not-at-top
    import tensorboardX.summary  # pylint: disable=g-import-not-at-top,unused-import
  finally:
    del sys.modules["torch"]
  return tensorboardX


# A bar that is not on a terminal or in a notebook (a log file, a batch job's output) is
# redrawn at most this often: tqdm's default 0.1 s writes a copy of the bar per step there.
LOG_FILE_INTERVAL_S = 60.0


def _is_live(stream: Any) -> bool:
  """Whether ``stream`` shows a redrawn bar in place: a terminal, or a Jupyter/Colab kernel
  (whose stderr is not a TTY but renders carriage returns)."""
  isatty = getattr(stream, "isatty", None)
  try:
    if isatty is not None and isatty():
      return True
  except ValueError:  # A closed stream.
    return False
  return _in_a_kernel() and stream in (sys.stdout, sys.stderr)


def _in_a_kernel() -> bool:
  """Whether this process is a running Jupyter/Colab kernel (an IPython shell with a kernel),
  not merely one that imported ipykernel: jupyter_client imports it to find kernel specs,
  and a process that started a kernel got a live bar in its log files."""
  ipython = sys.modules.get("IPython")
  get_ipython = getattr(ipython, "get_ipython", None)
  shell = get_ipython() if callable(get_ipython) else None
  return shell is not None and getattr(shell, "kernel", None) is not None


def progress_bar(total: int, desc: str, *, initial: int = 0, enabled: bool = True,
                 file: Any = None) -> tqdm.tqdm:
  """The tqdm bar of training, prediction and embedding.

  Live (redrawn up to 10 times a second) on a terminal and in a notebook; written at most
  every :data:`LOG_FILE_INTERVAL_S` seconds when ``file`` is a log file or a pipe, so a
  batch job's log gets a line a minute instead of a copy of the bar per step.

  Args:
    total: number of units (steps, documents).
    desc: the bar's label.
    initial: units already done (a resumed run).
    enabled: False: a disabled bar (every call a no-op).
    file: the stream (default ``sys.stderr``).
  """
  file = sys.stderr if file is None else file
  live = _is_live(file)
  return tqdm.tqdm(total=total, initial=initial, desc=desc, disable=not enabled, file=file,
                   dynamic_ncols=live, mininterval=0.1 if live else LOG_FILE_INTERVAL_S)


class MetricWriter:
  """Writes scalars to ``workdir/metrics.jsonl`` and TensorBoard ``workdir/tensorboard``.

  Only process 0 writes (``enabled``). ``metrics.jsonl`` gets every record at once;
  TensorBoard events are buffered and flushed every ``flush_secs`` (tensorboardX's
  background thread), after each eval record and on :meth:`close`, not after every write.
  """

  def __init__(self, workdir: str, enabled: bool = True, echo: bool = True,
               config: Any = None, flush_secs: int = 30):
    """Opens the sinks and writes the config to TensorBoard at step 0.

    Args:
      workdir: the run directory.
      enabled: False on processes other than 0 (every call is then a no-op).
      echo: also print each record (through tqdm, so a progress bar stays intact).
      config: the run's config (ConfigDict or mapping); default: ``workdir/config.json``
        when the trainer has written it, else no config is logged.
      flush_secs: the longest time a TensorBoard event waits in memory.
    """
    self.enabled = enabled
    self.echo = echo
    self.jsonl_path = os.path.join(workdir, "metrics.jsonl")
    self.tb_dir = os.path.join(workdir, "tensorboard")
    self._tb = None
    if not enabled:
      return
    self._flush_secs = flush_secs
    self._tb = import_tensorboardx().SummaryWriter(self.tb_dir, flush_secs=flush_secs, max_queue=1000)
    if config is None and os.path.exists(os.path.join(workdir, "config.json")):
      with open(os.path.join(workdir, "config.json")) as f:
        config = json.load(f)
    if config is not None:
      self.write_config(config)

  def write_config(self, config: Any) -> None:
    """Logs ``config`` at step 0: hyperparameters (HParams) and JSON text (``config``).

    Args:
      config: a ConfigDict or nested mapping.
    """
    if not self.enabled:
      return
    hparams = import_tensorboardx().summary.hparams
    cfg = _config_dict(config)
    flat = flatten_config(cfg)
    metrics = list(_HPARAM_METRICS)
    try:
      best = cfg["train"]["best_metric"]
    except (KeyError, TypeError):  # A mapping that is not a whole run config.
      best = ""
    if best and f"eval/{best}" not in metrics:
      metrics.append(f"eval/{best}")
    experiment, session_start, self._session_end = hparams(flat, {m: None for m in metrics})
    file_writer = self._tb._get_file_writer()  # pylint: disable=protected-access
    file_writer.add_summary(experiment, 0)
    file_writer.add_summary(session_start, 0)
    # Four-space indentation: the Text dashboard renders markdown, this keeps it verbatim.
    text = "\n".join("    " + line for line in json.dumps(cfg, indent=2).splitlines())
    self._tb.add_text("config", text, 0)

  def write(self, step: int, split: str, scalars: Mapping[str, float]) -> None:
    """Appends one record ``{"step", "split", **scalars}``.

    Args:
      step: the training step.
      split: ``train`` or ``eval`` (the TensorBoard tag prefix).
      scalars: metric name -> value.
    """
    if not self.enabled:
      return
    record = {"step": int(step), "split": split, **{k: float(v) for k, v in scalars.items()}}
    with open(self.jsonl_path, "a") as f:
      f.write(json.dumps(record) + "\n")
    for key, value in scalars.items():
      self._tb.add_scalar(f"{split}/{key}", float(value), int(step))
    if split != "train":  # Evaluations are rare and awaited: show them at once.
      self._tb.flush()
    if self.echo:
      tqdm.tqdm.write(f"step {step} {split}: " + ", ".join(
          f"{k}={float(v):.5g}" for k, v in scalars.items()))

  def truncate_after(self, step: int) -> int:
    """Drops the metrics.jsonl records of steps after ``step`` (and unreadable lines, e.g.
    one cut by a kill), so a run resumed from checkpoint ``step`` does not log those steps
    twice. The file is rewritten atomically (temporary file, then rename). TensorBoard's
    event files are append-only: the writer is reopened with ``purge_step=step + 1``, which
    makes TensorBoard discard the earlier files' events of those steps.

    Args:
      step: the step training resumes from.

    Returns:
      The number of lines dropped.
    """
    if not self.enabled:
      return 0
    if step > 0 and os.path.isdir(self.tb_dir):
      self._tb.close()
      self._tb = import_tensorboardx().SummaryWriter(
          self.tb_dir, purge_step=int(step) + 1, flush_secs=self._flush_secs, max_queue=1000)
    if not os.path.exists(self.jsonl_path):
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
      fileio.write_text_atomic(self.jsonl_path, "".join(line + "\n" for line in kept))
      logging.warning("Resuming at step %d: dropped %d record(s) of later steps (or "
                      "unreadable) from %s", step, dropped, self.jsonl_path)
    return dropped

  def flush(self) -> None:
    """Writes the buffered TensorBoard events to disk now."""
    if self._tb is not None:
      self._tb.flush()

  def close(self) -> None:
    """Marks the HParams session ended, flushes and closes the event file."""
    if self._tb is not None:
      session_end = getattr(self, "_session_end", None)
      if session_end is not None:
        self._tb._get_file_writer().add_summary(session_end)  # pylint: disable=protected-access
      self._tb.close()
      self._tb = None


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
