"""Which process holds an `Idempotency-Key` claim, and whether that process is gone.

A claim records its owner: the host (its name, boot id and pid namespace, so two containers that share
a name or a kernel are still two hosts), the pid, and the process's start time (clock ticks since boot,
from /proc), which tells a pid the kernel gave to a new process from the one that claimed. A repeat on
the same host takes over at once from an owner that is gone; an owner on another host cannot be asked,
so there the claim's lease (the setting IDEMPOTENCY_LEASE) decides. Where the start time cannot be
read (no /proc) a pid that exists counts as alive: a reused pid then waits for the lease, never the
other way round. On other platforms than POSIX nothing is ever found gone.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ClaimOwner", "owner_is_gone", "this_process"]

PROC = Path("/proc")
MAX_HOST_LENGTH = 255


@dataclass(frozen=True, slots=True)
class ClaimOwner:
    host: str
    pid: int | None
    started: int | None  # clock ticks since boot; None where it cannot be read


def this_process() -> ClaimOwner:
    """The process that runs this code (read at each call: a forked worker is another process)."""
    pid = os.getpid()
    return ClaimOwner(host=this_host(), pid=pid, started=start_time(pid))


def owner_is_gone(owner: ClaimOwner) -> bool:
    """Whether `owner` is certainly no longer running: a process of this host whose pid no longer
    exists, is a zombie, or belongs to a process started at another time. False when unsure."""
    if os.name != "posix" or not owner.host or owner.host != this_host():
        return False
    if owner.pid is None or owner.pid <= 0:  # 0 and negative pids name process groups
        return False
    try:
        os.kill(owner.pid, 0)  # signal 0: only asks whether the pid exists
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, as another user's process
    except OSError:
        return False
    stat = _stat(owner.pid)
    if stat is None:
        return False
    state, started = stat
    return state == "Z" or (owner.started is not None and started != owner.started)


def this_host() -> str:
    parts = [socket.gethostname()]
    boot_id = _read(PROC / "sys" / "kernel" / "random" / "boot_id")
    if boot_id:
        parts.append(boot_id)
    try:
        parts.append(f"pidns:{os.stat(PROC / 'self' / 'ns' / 'pid').st_ino}")
    except OSError:
        pass
    return " ".join(parts)[-MAX_HOST_LENGTH:]


def start_time(pid: int) -> int | None:
    stat = _stat(pid)
    return None if stat is None else stat[1]


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) from /proc/<pid>/stat; the command name may hold spaces and parentheses,
    so fields are counted after its last ")"."""
    text = _read(PROC / str(pid) / "stat")
    if text is None:
        return None
    fields = text.rpartition(")")[2].split()
    try:
        return fields[0], int(fields[19])  # fields 3 (state) and 22 (starttime) of proc(5)
    except (IndexError, ValueError):
        return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
