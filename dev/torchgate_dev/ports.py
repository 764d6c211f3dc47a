"""Loopback ports for the servers the dev harness starts, chosen where nothing else draws from.

Why not ``bind(("127.0.0.1", 0))``: port 0 hands out a port of the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default), the very range every
outgoing connection on the machine draws its source port from. Between closing the probe and the
server binding the port (a Go binary may take seconds to get there), any connection can take it,
and the server dies with "bind: address already in use" (seen once in CI, on kube-proxy's
``/healthz``). A port outside that range is never given to a connection, so only a listener can
take it, and listeners pick their ports on purpose.

The rules, one function each:

1. ``parse_port_range``: the kernel's range is two integers, ``first <= last``, both ports
   (1-65535); anything else is no range at all, and the Linux default stands in for it.
2. ``parse_reserved_ports``: ``ip_local_reserved_ports`` is a comma-separated list of ports and
   inclusive ranges (``8080,20000-20010``), each 0-65535, as the kernel writes it; empty is
   none, and so is anything malformed (an admin's reservation we cannot read is not ours to
   guess at). An admin reserves ports there for services that bind them later (the kernel then
   never gives them to a connection either), so a harness server must not take one.
3. ``harness_pool``: the pool is 20000-29999 minus the ephemeral range and the reserved ports:
   above the defaults of the common services (below 10000) and Kubernetes' own (10248-10259),
   below Kubernetes' NodePort range (30000-32767, which kube-proxy may route on the node
   address) and Linux's default ephemeral range. If fewer than ``MINIMUM_POOL`` of those remain
   (the range was moved down over them, or the admin reserved them), every unprivileged port
   outside both; if none remain (the range covers them all), every unprivileged port that is not
   reserved; if every one is reserved, every unprivileged port, with the bind check alone to
   guard them.
4. ``PortPicker.pick``: start at a random place in the pool (so parallel processes, each with
   its own picker, rarely try the same port) and walk it, skipping the ports this picker handed
   out already (each once per process) and those a bind on every IPv4 address fails on (a
   listener anywhere, a dual-stack one included, or a connection still in TIME_WAIT).

``free_port`` is the one picker of the process, built on first use from the kernel's range and
reserved ports: the harness, the tests and the benchmarks all take their ports from it.
"""

from __future__ import annotations

import errno
import random
import socket
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

EPHEMERAL_RANGE_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
RESERVED_PORTS_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")
PREFERRED_POOL: Final = range(20000, 30000)
UNPRIVILEGED: Final = range(1024, 65536)
MINIMUM_POOL: Final = 1000
"""Fewer preferred ports than this outside the ephemeral and reserved ports: widen (rule 3)."""


@dataclass(frozen=True, slots=True)
class PortRange:
    """An inclusive range of ports, as the kernel writes it (``first last``, ``first-last``)."""

    first: int
    last: int

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.first <= port <= self.last


DEFAULT_EPHEMERAL: Final = PortRange(32768, 60999)
"""Linux's default ``ip_local_port_range``: stands in when the file is missing or unreadable."""


class NoFreePort(RuntimeError):
    """Every port of the pool is handed out already or taken."""


def parse_port_range(text: str) -> PortRange | None:
    """Rule 1: ``ip_local_port_range``'s text as a range; None for anything else."""
    fields = text.split()
    if len(fields) != 2 or not all(field.isascii() and field.isdigit() for field in fields):
        return None
    first, last = int(fields[0]), int(fields[1])
    if not 1 <= first <= last <= 65535:
        return None
    return PortRange(first, last)


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> PortRange:
    """The kernel's ephemeral range, or Linux's default when ``path`` does not give one."""
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return DEFAULT_EPHEMERAL
    return parse_port_range(text) or DEFAULT_EPHEMERAL


def _port_number(text: str) -> int | None:
    if not (text.isascii() and text.isdigit()) or int(text) > 65535:
        return None
    return int(text)


def parse_reserved_ports(text: str) -> tuple[PortRange, ...]:
    """Rule 2: ``ip_local_reserved_ports``' text as ranges; none when empty or malformed."""
    listed = text.strip(" \t\n")
    if not listed:
        return ()
    reserved: list[PortRange] = []
    for item in listed.split(","):
        first_text, dash, last_text = item.partition("-")
        first = _port_number(first_text)
        last = _port_number(last_text) if dash else first
        if first is None or last is None or first > last:
            return ()
        reserved.append(PortRange(first, last))
    return tuple(reserved)


def reserved_ports(path: Path = RESERVED_PORTS_FILE) -> tuple[PortRange, ...]:
    """The ports the admin reserved, or none when ``path`` does not list them."""
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return ()
    return parse_reserved_ports(text)


def _without(ports: range, excluded: Iterable[PortRange]) -> tuple[range, ...]:
    """``ports`` minus every range of ``excluded``, as ascending disjoint non-empty ranges."""
    parts: list[range] = []
    start = ports.start
    for gap in sorted(excluded, key=lambda excluded_range: excluded_range.first):
        if gap.first >= ports.stop:
            break
        if gap.first > start:
            parts.append(range(start, gap.first))
        start = max(start, gap.last + 1)
    if start < ports.stop:
        parts.append(range(start, ports.stop))
    return tuple(parts)


def harness_pool(ephemeral: PortRange, *, reserved: Sequence[PortRange] = ()) -> tuple[range, ...]:
    """Rule 3: the ports to hand out (disjoint ranges), outside the avoided ones where possible."""
    avoided = (ephemeral, *reserved)
    preferred = _without(PREFERRED_POOL, avoided)
    if sum(map(len, preferred)) >= MINIMUM_POOL:
        return preferred
    return _without(UNPRIVILEGED, avoided) or _without(UNPRIVILEGED, reserved) or (UNPRIVILEGED,)


def is_bindable(port: int) -> bool:
    """Whether a socket could bind ``port`` on every IPv4 address right now.

    No ``SO_REUSEADDR``, so a port in TIME_WAIT counts as taken too. The probe never listens:
    nothing can connect to it.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


class PortPicker:
    """Hands out ports of one pool, each at most once (rule 4). Thread-safe."""

    def __init__(self, pool: Sequence[range], *, rng: random.Random | None = None) -> None:
        self._pool = tuple(pool)
        self._size = sum(map(len, self._pool))
        # SystemRandom: a forked child must not draw the same sequence as its parent.
        self._rng = rng or random.SystemRandom()
        self._handed_out: set[int] = set()
        self._lock = threading.Lock()

    def _port_at(self, index: int) -> int:
        for part in self._pool:
            if index < len(part):
                return part[index]
            index -= len(part)
        raise IndexError(index)

    def pick(self) -> int:
        """A port of the pool not handed out before and bindable right now.

        Raises:
            NoFreePort: The whole pool is handed out or taken.
        """
        with self._lock:
            start = self._rng.randrange(self._size) if self._size else 0
            for step in range(self._size):
                port = self._port_at((start + step) % self._size)
                if port not in self._handed_out and is_bindable(port):
                    self._handed_out.add(port)
                    return port
        raise NoFreePort(
            f"no free port left in {', '.join(f'{r.start}-{r.stop - 1}' for r in self._pool)}"
        )


_picker: PortPicker | None = None
_picker_lock = threading.Lock()


def free_port() -> int:
    """A loopback TCP port outside the kernel's ephemeral range, free now, never handed out before.

    Raises:
        NoFreePort: The pool is exhausted (thousands of ports taken).
    """
    global _picker
    with _picker_lock:
        if _picker is None:
            _picker = PortPicker(harness_pool(ephemeral_range(), reserved=reserved_ports()))
        picker = _picker
    return picker.pick()
