"""Local processes this tool starts and must be able to stop: the control plane and the products.

Every process runs in its own session (process group), so stopping it also stops whatever it
started. A process is recorded with its PID *and* its start time in clock ticks (from ``/proc``),
so a later ``stop`` — maybe from another Python process reading a state file — never signals a
recycled PID. The ``Popen`` handles of children started here are kept, so they can be reaped
(no zombies) and so Python never warns about a handle dropped while its child runs. Linux only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

_HANDLES: dict[int, subprocess.Popen[bytes]] = {}
_HANDLES_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class ManagedProcess:
    """A process started here; ``start_ticks`` tells it apart from a recycled PID."""

    name: str
    pid: int
    start_ticks: int
    log_path: Path

    def to_json(self) -> dict[str, Any]:
        """JSON form for a state file."""
        return {**asdict(self), "log_path": str(self.log_path)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Self:
        """Inverse of :meth:`to_json`; raises KeyError/TypeError/ValueError on bad input."""
        return cls(
            name=str(raw["name"]),
            pid=int(raw["pid"]),
            start_ticks=int(raw["start_ticks"]),
            log_path=Path(str(raw["log_path"])),
        )


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of ``pid`` from ``/proc``, or None if gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def is_alive(process: ManagedProcess) -> bool:
    """Whether the process still runs (the same one: its start time matches; not a zombie)."""
    stat = proc_stat(process.pid)
    return stat is not None and stat[1] == process.start_ticks and stat[0] != "Z"


def exit_status(process: ManagedProcess) -> int | None:
    """Its exit code once it has exited (-1 when it is not our child), else None."""
    with _HANDLES_LOCK:
        handle = _HANDLES.get(process.pid)
    if handle is not None:
        return handle.poll()
    return None if is_alive(process) else -1


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    cwd: Path,
    env: Mapping[str, str],
    banner: bool = False,
) -> ManagedProcess:
    """Start a process in its own session, stdout and stderr appended to ``log_path``."""
    with open(log_path, "ab") as log:
        if banner:
            log.write(f"---- {datetime.now(UTC).isoformat()} {' '.join(argv)}\n".encode())
            log.flush()
        handle = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
        )
    with _HANDLES_LOCK:
        _HANDLES[handle.pid] = handle
    stat = proc_stat(handle.pid)
    return ManagedProcess(name, handle.pid, stat[1] if stat else 0, log_path)


def signal_group(process: ManagedProcess, signum: int) -> None:
    """Signal the process's group, unless its PID now belongs to another process."""
    stat = proc_stat(process.pid)
    if stat is not None and stat[1] != process.start_ticks:
        return
    # With the leader gone its group may still hold children; a PID that still names a live
    # group cannot have been handed out again, so signalling the group stays safe.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def reap(process: ManagedProcess) -> None:
    """Collect the exit status of a child of ours (no zombie is left behind)."""
    with _HANDLES_LOCK:
        handle = _HANDLES.pop(process.pid, None)
    if handle is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            handle.wait(timeout=1)
        return
    with contextlib.suppress(ChildProcessError):
        os.waitpid(process.pid, os.WNOHANG)


def wait_gone(processes: Sequence[ManagedProcess], timeout: float, poll: float = 0.05) -> bool:
    """Wait until none of ``processes`` runs; return whether that happened in time."""
    deadline = time.monotonic() + timeout
    while any(exit_status(p) is None for p in processes):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


def stop(process: ManagedProcess, *, grace: float) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds, then reap it."""
    stat = proc_stat(process.pid)
    if stat is not None and stat[1] != process.start_ticks:
        return  # that PID belongs to another process now
    signal_group(process, signal.SIGTERM)
    if not wait_gone([process], grace):
        signal_group(process, signal.SIGKILL)
        wait_gone([process], grace)
    reap(process)


def terminate(process: subprocess.Popen[Any], *, grace: float) -> int:
    """Stop a ``Popen`` child: SIGTERM, SIGKILL after ``grace`` seconds; returns its exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return int(process.returncode)


def log_tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a log, indented, for an error message."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "    (no log)"
    tail = text.splitlines()[-lines:]
    return "\n".join(f"    {line}" for line in tail) or "    (empty log)"


def memory_kib(process: ManagedProcess) -> tuple[int, int]:
    """(current, peak) resident memory in KiB (``VmRSS``, ``VmHWM``); zeros when gone."""
    values = {"VmRSS:": 0, "VmHWM:": 0}
    if is_alive(process):
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
                key = line.split(maxsplit=1)[0] if line else ""
                if key in values:
                    values[key] = int(line.split()[1])
    return values["VmRSS:"], values["VmHWM:"]
