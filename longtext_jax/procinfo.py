"""Whether a process of this host is alive (standard library only; Linux ``/proc`` where
there is one). Shared by the workdir lock (``train/workdir_lock.py``) and the export's
staging folders (``export.py``), which both judge a pid left in a file by a process that
may have been killed.
"""
from __future__ import annotations

import os


def stat_fields(pid: int) -> list[str]:
  """Fields 3 onwards (state, ppid, ...) of ``/proc/<pid>/stat``; [] if unreadable."""
  try:
    with open(f"/proc/{pid}/stat", "rb") as f:
      stat = f.read().decode("utf-8", "replace")
  except OSError:
    return []
  # Field 2 (comm) is in parentheses and may hold spaces; fields after it split cleanly.
  return stat[stat.rfind(")") + 2:].split()


def pid_state(pid: int) -> str:
  """'running', 'gone', or 'exited' (a zombie: dead, not yet reaped by its parent)."""
  if pid <= 0:
    return "gone"
  try:
    os.kill(pid, 0)  # Succeeds on a zombie too, hence the look at its state below.
  except ProcessLookupError:
    return "gone"
  except PermissionError:  # Exists, owned by another user.
    pass
  fields = stat_fields(pid)  # Where /proc is missing: trust kill(2).
  if fields and fields[0] in ("Z", "X"):  # Zombie, or dead and being reaped.
    return "exited"
  return "running"
