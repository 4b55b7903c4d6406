"""One writer per workdir: an exclusive lock file taken at start and released on exit.

A second launch on a workdir that a live run holds fails at once with
:class:`WorkdirLockedError` naming the holder (host, pid, start time, command). A lock left
behind by a run that died without cleaning up (kill -9, OOM killer, power loss) is *stale*:
when its holder ran on this host and that process is gone (exited, including a zombie that
its parent has not reaped yet, or its pid now belongs to a process started later), or the
host has rebooted since, the next launch takes the lock over and logs a warning naming the
dead holder. A lock held from another host, or from another PID namespace on this host
(another container sharing the host's hostname), cannot be checked from here; it is refused
unless ``force=True`` (``config.train.force_lock``), which takes over any lock with a warning.

Which holders can be checked
----------------------------
A pid means something only in its own PID namespace and boot, so the record also holds the
kernel's boot id (``/proc/sys/kernel/random/boot_id``) and the holder's PID-namespace id (the
inode of ``/proc/self/ns/pid``). With the same hostname:

* another boot id, the lock taken before this boot began: the host rebooted, so the holder
  is gone (stale). Taken after this boot began, it came from another machine with the same
  hostname: refused, as for another host.
* the same boot, another PID namespace (containers sharing a workdir and the host's UTS
  namespace, e.g. ``docker --network=host``): its pid (often 1) cannot be looked up here;
  refused, as for another host.
* the same boot and namespace: the pid is checked (gone, zombie, or reused: stale).

A record without these fields (written before they existed, or where ``/proc`` is missing)
is judged by its pid alone, as before. A record that has them, checked where they cannot be
read, is refused.

How the lock is made, and why not ``fcntl.flock``
-----------------------------------------------
The lock is the file ``<workdir>/writer.lock`` holding one JSON object (host, pid, the pid's
start time, ISO start time, command line, a random token, boot id, PID-namespace id). It is
created complete and atomically: the record is written to a unique temporary file which is
then hard-linked to ``writer.lock``; ``link(2)`` fails with EEXIST when the lock exists, is
atomic on local filesystems and on NFS (the ``open(2)`` manual's recipe: on NFS a lost reply
is checked through the temporary file's link count), and readers never see a half-written
record.
Filesystems without hard links (some FUSE mounts) fall back to ``O_CREAT | O_EXCL``.

Taking over a stale lock
------------------------
Several launches may find the same stale lock at once. Checking that the file still holds
the stale record and replacing it are two steps, so they run under a *guard*:
``writer.lock.takeover-<digest of the record>``, created exclusively the same way. The
launch that creates the guard re-reads the lock, replaces it by its own record with one
``rename(2)`` if it is unchanged, and deletes the guard; the others wait a few milliseconds
and read the lock again, find the winner alive and are refused. The lock file always exists
during a takeover, so no launch can create a fresh lock in between (the earlier scheme moved
the file aside to check it and put it back, and a third launch's fresh lock could be lost
that way, leaving two runs holding one workdir). A release deletes the file under the guard
of its own record too, so it never deletes a lock that a forced takeover has just written.
A guard left by a launch killed mid-takeover is a stale lock of its own, taken over the same
way; a guard that cannot be read makes launches give up after ``_TAKEOVER_WAIT_SECONDS``
naming it.

``fcntl`` locks vanish with their process, which would make stale locks disappear by
themselves, but they are the weaker choice for training workdirs: on NFS ``flock`` is
emulated with byte-range locks that depend on the lock daemon and are lost or refused
(ENOLCK) on many mounts; on Lustre they need a mount option; on object-store FUSE mounts
(gcsfuse and similar) they are per client, so two hosts both "hold" the lock. A lock file
is visible to every host that sees the workdir, and says who holds it. Its cost, a stale
file after a crash, is handled by the liveness check above (same host) and ``force``.

Multi-process (``jax.distributed``) runs take the lock once: pass ``enabled=is_main``
(``jax.process_index() == 0``); the other processes get a no-op.

Usage::

  with workdir_lock.hold(workdir, force=config.train.force_lock,
                         enabled=jax.process_index() == 0):
    ...  # train; the lock is released when the block exits, normally or by an exception

This module uses only the standard library (no JAX), so it can be loaded on its own.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import hashlib
import json
import logging
import os
import random
import re
import secrets
import socket
import sys
import time
from typing import Iterator

from longtext_jax import procinfo

LOCK_NAME = "writer.lock"
GUARD_INFIX = ".takeover-"  # <lock>.takeover-<digest of the text being replaced>
_TAKEOVER_WAIT_SECONDS = 10.0  # How long a launch waits on another launch's takeover.
_MAX_GUARD_DEPTH = 4  # Guards of guards (launches killed mid-takeover) taken over at most.


class WorkdirLockedError(RuntimeError):
  """Another run holds the workdir (or its lock file cannot be read); nothing was started."""


@dataclasses.dataclass(frozen=True)
class LockInfo:
  """Who holds (or held) a workdir lock.

  Attributes:
    host: hostname of the holder.
    pid: its process id on that host.
    pid_start: the process's start time in clock ticks since boot (Linux
      ``/proc/<pid>/stat`` field 22; -1 where unknown), to tell a reused pid from the holder.
    started: ISO-8601 UTC time at which the lock was taken.
    command: the holder's command line.
    token: random id of this holding (release removes the file only if it still holds it).
    boot_id: the holder's kernel boot id ('' where unknown: not Linux, or a record written
      before this field existed).
    pidns: the inode of the holder's PID namespace (-1 where unknown), which tells whether
      its pid can be looked up from here.
  """
  host: str
  pid: int
  pid_start: int
  started: str
  command: str
  token: str
  boot_id: str = ""
  pidns: int = -1

  def describe(self) -> str:
    """'host h, pid 123, since 2026-...Z (command: ...)'."""
    return (f"host {self.host}, pid {self.pid}, since {self.started} "
            f"(command: {self.command})")


def _process_start_ticks(pid: int) -> int:
  """Start time of process ``pid`` in clock ticks since boot; -1 if unknown (not Linux)."""
  try:
    return int(procinfo.stat_fields(pid)[19])  # Field 22 overall.
  except (IndexError, ValueError):
    return -1


def _boot_id() -> str:
  """This kernel's boot id (changes at every boot); '' where unknown."""
  try:
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
      return f.read().strip()
  except (OSError, ValueError):
    return ""


def _pid_namespace() -> int:
  """The inode of this process's PID namespace; -1 where unknown."""
  try:
    return os.stat("/proc/self/ns/pid").st_ino
  except OSError:
    return -1


def _boot_time() -> float | None:
  """When this boot began (Unix time, ``btime`` of ``/proc/stat``); None where unknown."""
  try:
    with open("/proc/stat", encoding="ascii", errors="replace") as f:
      for line in f:
        if line.startswith("btime "):
          return float(line.split()[1])
  except (OSError, ValueError, IndexError):
    pass
  return None


def _started_seconds(started: str) -> float | None:
  """The record's ISO start time as Unix time; None if it cannot be parsed."""
  try:
    when = datetime.datetime.fromisoformat(started.replace("Z", "+00:00"))
  except ValueError:
    return None
  if when.tzinfo is None:
    return None
  return when.timestamp()


def _my_info() -> LockInfo:
  pid = os.getpid()
  now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  return LockInfo(host=socket.gethostname(), pid=pid, pid_start=_process_start_ticks(pid),
                  started=now.replace("+00:00", "Z"), command=" ".join(sys.argv) or "?",
                  token=secrets.token_hex(8), boot_id=_boot_id(), pidns=_pid_namespace())


def read_lock(path: str) -> LockInfo:
  """The LockInfo stored in the lock file ``path``.

  Raises:
    FileNotFoundError: no lock there.
    ValueError: the file is not a lock record (empty, garbled), naming the file.
  """
  return _parse(_read_text(path), path)


def _parse(text: str, path: str) -> LockInfo:
  try:
    raw = json.loads(text)
    return LockInfo(host=str(raw["host"]), pid=int(raw["pid"]),
                    pid_start=int(raw.get("pid_start", -1)), started=str(raw["started"]),
                    command=str(raw.get("command", "?")), token=str(raw["token"]),
                    boot_id=str(raw.get("boot_id") or ""), pidns=int(raw.get("pidns", -1)))
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f"lock file {path} is not a lock record ({e.__class__.__name__}: {e}); "
                     f"content starts {text[:80]!r}") from e


def stale_reason(info: LockInfo) -> str | None:
  """Why the holder ``info`` is certainly gone, or None when it may still be running.

  Only a holder on this host, in this boot and this PID namespace can be checked: its pid
  no longer runs (or is a zombie), or now belongs to a process started at another time (the
  pid was reused). A holder from an earlier boot of this host is gone too.
  """
  return _judge(info)[0]


def holder_state(info: LockInfo) -> tuple[str, str]:
  """('gone' | 'running' | 'unknown', why): whether the holder ``info`` is certainly gone,
  checked and running, or cannot be checked from here (another host, container or boot)."""
  gone, unknown = _judge(info)
  if gone:
    return "gone", gone
  return ("unknown", unknown) if unknown else ("running", "")


def _judge(info: LockInfo) -> tuple[str | None, str]:
  """(why the holder is certainly gone, or None; why it could not be checked, or '').

  The second item is '' when the holder was checked and is running, or is gone.
  """
  if info.host != socket.gethostname():
    return None, "it was taken on another host"
  if info.boot_id:  # Records without it (older ones, no /proc) are judged by pid alone.
    mine = _boot_id()
    if not mine:
      return None, "this process cannot read its boot id to compare with the holder's"
    if info.boot_id != mine:
      began, started = _boot_time(), _started_seconds(info.started)
      if began is not None and started is not None and started < began:
        return (f"{info.host} has rebooted since the lock was taken (boot id "
                f"{info.boot_id}, now {mine})"), ""
      return None, (f"it was taken on another machine with the same hostname (its boot id "
                    f"{info.boot_id} differs from this one's, {mine}, and it was taken after "
                    f"this machine booted)")
  if info.pidns >= 0:
    mine = _pid_namespace()
    if mine < 0:
      return None, "this process cannot read its PID namespace to compare with the holder's"
    if info.pidns != mine:
      return None, (f"it was taken in another PID namespace on this host (another container: "
                    f"namespace {info.pidns}, here {mine}), whose pids this process cannot "
                    f"see")
  state = procinfo.pid_state(info.pid)
  if state == "gone":
    return f"its process {info.pid} on {info.host} is no longer running", ""
  if state == "exited":
    return (f"its process {info.pid} on {info.host} has exited (a zombie that its parent "
            f"has not reaped yet)"), ""
  now_start = _process_start_ticks(info.pid)
  if info.pid_start >= 0 and now_start >= 0 and now_start != info.pid_start:
    return (f"pid {info.pid} on {info.host} now belongs to another process (started at tick "
            f"{now_start}, the holder at tick {info.pid_start})"), ""
  return None, ""


def _record(info: LockInfo) -> bytes:
  """The lock file's bytes for ``info``."""
  return json.dumps(dataclasses.asdict(info), indent=1).encode("utf-8") + b"\n"


def _create_exclusive(path: str, info: LockInfo) -> bool:
  """Atomically creates ``path`` holding ``info``; False when it already exists."""
  data = _record(info)
  tmp = f"{path}.{info.host}.{info.pid}.{info.token}.tmp"
  fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
  try:
    try:
      os.write(fd, data)
      os.fsync(fd)
    finally:
      os.close(fd)
  except BaseException:  # A full disk: no temporary file is left behind.
    os.unlink(tmp)
    raise
  try:
    try:
      os.link(tmp, path)
      return True
    except FileExistsError:
      return False
    except OSError as e:
      if e.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
        return _create_excl_no_links(path, data)
      # NFS: the link may have happened although the reply was lost.
      if os.stat(tmp).st_nlink == 2:
        return True
      raise
  finally:
    os.unlink(tmp)


def _create_excl_no_links(path: str, data: bytes) -> bool:
  try:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
  except FileExistsError:
    return False
  try:
    os.write(fd, data)
    os.fsync(fd)
  finally:
    os.close(fd)
  return True


class WorkdirLock:
  """A held workdir lock (from :func:`acquire`); :meth:`release` gives it back.

  Attributes:
    path: the lock file.
    info: this holder's record.
    replaced: the previous holder's record when a stale or forced lock was taken over
      (None for a garbled lock file or when there was none).
    replaced_reason: why it was taken over ('' when nothing was replaced).
  """

  def __init__(self, path: str, info: LockInfo, replaced: LockInfo | None,
               replaced_reason: str):
    self.path, self.info = path, info
    self.replaced, self.replaced_reason = replaced, replaced_reason
    self._held = True

  def release(self) -> None:
    """Removes the lock file if this holder still owns it (idempotent).

    The check and the removal run under the guard of this holder's record, the one a
    forced takeover of this lock would hold, so a release never removes a lock that such a
    takeover (or a launch after it) has just written.
    """
    if not self._held:
      return
    self._held = False
    ours = _record(self.info).decode("utf-8")
    guard = _guard_path(self.path, ours)
    if not _create_exclusive(guard, self.info):
      logging.warning("Workdir lock %s is being taken over by another run; leaving it",
                      self.path)
      return
    try:
      try:
        if _read_text(self.path) != ours:
          logging.warning("Workdir lock %s was taken over by another run; leaving it",
                          self.path)
          return
      except FileNotFoundError:
        return
      _delete(self.path)
    finally:
      _remove_if_holds(guard, self.info)

  def __enter__(self) -> "WorkdirLock":
    return self

  def __exit__(self, *exc) -> None:
    self.release()


def _guard_path(path: str, text: str) -> str:
  """The guard file that serialises every change of the lock file ``path`` from ``text``."""
  digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
  return f"{path}{GUARD_INFIX}{digest}"


def _read_text(path: str) -> str:
  """The file's text (raises FileNotFoundError when there is none)."""
  with open(path, encoding="utf-8", errors="replace") as f:
    return f.read()


def _write_replace(path: str, info: LockInfo) -> None:
  """Atomically replaces ``path`` by a complete file holding ``info`` (rename over it)."""
  tmp = f"{path}.{info.host}.{info.pid}.{info.token}.new"
  fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
  try:
    os.write(fd, _record(info))
    os.fsync(fd)
  finally:
    os.close(fd)
  try:
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(FileNotFoundError):
      os.unlink(tmp)
    raise


def _delete(path: str) -> None:
  with contextlib.suppress(FileNotFoundError):
    os.unlink(path)


def _remove_if_holds(path: str, info: LockInfo) -> None:
  """Deletes ``path`` if it still holds ``info``'s record (it is ours to delete)."""
  try:
    if _parse(_read_text(path), path).token != info.token:
      return
  except (FileNotFoundError, ValueError):
    return
  _delete(path)


def _replace_if_unchanged(path: str, seen: str, info: LockInfo, depth: int = 0) -> bool:
  """Puts ``info``'s record in the lock file ``path`` if it still holds the text ``seen``.

  Checking the text and then replacing the file are two steps, so they run under the guard
  file of ``seen`` (:func:`_guard_path`), created exclusively: of the launches that read the
  same stale lock, one holds its guard at a time, and every other change of a lock file from
  a text (a takeover, or its holder's release) also goes through that text's guard. A lock
  file that exists is never deleted or moved aside during a takeover, so no launch can create
  a fresh lock in between (the earlier rename-aside-and-put-back scheme could lose one).

  A guard left by a launch that died between creating and removing it (kill -9 inside this
  function) is itself a stale lock of that launch: it is taken over the same way (its own
  guard, one level deeper).

  Returns:
    True when ``path`` now holds ``info``'s record; False when it no longer held ``seen``
    or another live launch is changing it now (the caller reads the lock again).
  """
  guard = _guard_path(path, seen)
  if not _create_exclusive(guard, info):
    try:
      guard_text = _read_text(guard)
    except FileNotFoundError:
      return False  # That launch has just finished: the caller reads the lock again.
    try:
      guard_holder = _parse(guard_text, guard)
    except ValueError:
      return False  # Unreadable guard: left alone; the caller's deadline names it.
    if depth >= _MAX_GUARD_DEPTH or stale_reason(guard_holder) is None:
      return False  # Another live launch is changing this lock right now.
    if not _replace_if_unchanged(guard, guard_text, info, depth + 1):
      return False
  try:
    try:
      if _read_text(path) != seen:
        return False
    except FileNotFoundError:
      return False
    _write_replace(path, info)
    return True
  finally:
    _remove_if_holds(guard, info)


def _remove_orphan_guards(path: str, keep: str) -> None:
  """Deletes guard files of ``path`` left by launches killed mid-takeover, except ``keep``.

  Called by the new holder of ``path`` (after a takeover, or a fresh lock: a release killed
  after deleting its lock leaves its guard): a guard of any other text is stale by then (a
  launch holding one finds that the lock no longer holds its text and gives up). Only guard
  files themselves are matched, never another launch's temporary file for creating one.
  """
  folder, name = os.path.split(path)
  pattern = re.compile(re.escape(name) + r"(" + re.escape(GUARD_INFIX) + r"[0-9a-f]{16})+")
  for entry in os.listdir(folder):
    if pattern.fullmatch(entry) and not entry.startswith(os.path.basename(keep)):
      _delete(os.path.join(folder, entry))


def acquire(workdir: str, *, force: bool = False, enabled: bool = True
            ) -> WorkdirLock | None:
  """Takes the workdir's writer lock, or fails at once naming its holder.

  Args:
    workdir: the run directory (created if missing).
    force: take the lock over even when its holder may be alive (another host, a garbled
      lock file, or a live process: the caller asserts that it is not writing).
    enabled: False (processes other than 0 of a multi-process run) does nothing.

  Returns:
    The held lock (release it, or use it as a context manager), None when not enabled.

  Raises:
    WorkdirLockedError: a live or unverifiable holder has the lock, naming it and how to
      force the takeover.
  """
  if not enabled:
    return None
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(os.path.abspath(workdir), LOCK_NAME)
  info = _my_info()
  deadline = time.monotonic() + _TAKEOVER_WAIT_SECONDS
  while True:
    if _create_exclusive(path, info):
      _remove_orphan_guards(path, keep=_guard_path(path, _record(info).decode("utf-8")))
      return WorkdirLock(path, info, None, "")
    try:
      seen = _read_text(path)
    except FileNotFoundError:
      continue  # Released in between.
    try:
      holder, holder_err = _parse(seen, path), ""
    except ValueError as e:
      holder, holder_err = None, str(e)
    reason, unchecked = _judge(holder) if holder is not None else (None, "")
    if reason is None and not force:
      who = holder.describe() if holder is not None else holder_err
      if unchecked:
        who += f"; whether it still runs cannot be checked from here: {unchecked}"
      raise WorkdirLockedError(
          f"workdir {workdir} is in use by another run: {who}. One run writes a workdir at a "
          f"time. If that run is gone (e.g. its host crashed), take the lock over with "
          f"--config.train.force_lock=True (or delete {path}).")
    why = (f"stale lock: {reason}" if reason is not None else
           "forced takeover (force=True) of a lock held by "
           + (holder.describe() if holder is not None else f"an unreadable file: {holder_err}"))
    if _replace_if_unchanged(path, seen, info):
      logging.warning("Took over the workdir lock %s: %s", path, why)
      _remove_orphan_guards(path, keep=_guard_path(path, _record(info).decode("utf-8")))
      return WorkdirLock(path, info, holder, why)
    # Another launch changed the lock, or is taking it over now: read it again shortly
    # (its new holder is then live, and this launch is refused naming it).
    if time.monotonic() > deadline:
      raise WorkdirLockedError(
          f"workdir {workdir}: could not take the lock {path} within "
          f"{_TAKEOVER_WAIT_SECONDS:g} s; another launch holds its takeover guard "
          f"{_guard_path(path, seen)}. If no other launch is running, delete that file.")
    time.sleep(random.uniform(0.005, 0.05))


@contextlib.contextmanager
def hold(workdir: str, *, force: bool = False, enabled: bool = True
         ) -> Iterator[WorkdirLock | None]:
  """Context manager around :func:`acquire`: holds the lock for the block, then releases.

  Args:
    workdir: the run directory.
    force: see :func:`acquire`.
    enabled: only process 0 of a multi-process run should pass True.

  Yields:
    The held lock, or None when not enabled.
  """
  lock = acquire(workdir, force=force, enabled=enabled)
  try:
    yield lock
  finally:
    if lock is not None:
      try:
        lock.release()
      except OSError as e:  # A full or read-only disk: the run's own error (if any) is
        # what the caller must see; the lock left is stale and the next launch here takes
        # it over (logged).
        logging.warning("Could not release the workdir lock %s (%s); the next launch in "
                        "%s takes it over", lock.path, e, workdir)
