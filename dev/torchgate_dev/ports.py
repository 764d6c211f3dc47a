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
   listener anywhere, a dual-stack one included, a port another picker holds, or a connection
   still in TIME_WAIT).
5. ``PortPicker.pick`` holds the port it hands out, so no other picker (another process of ours)
   hands it out too before its server binds it: two pickers walking from the same place in the
   same instant would otherwise both get it (about one in ten thousand per port), and one
   server would die with "address already in use". The check of rule 4 is that hold: a bind on
   ``0.0.0.0`` without ``SO_REUSEADDR``, so any other socket on the port fails it and it fails
   any other picker's. The socket is kept, never listening, and ``SO_REUSEADDR`` set on it once
   bound: Linux lets a socket bind beside others when all of them set ``SO_REUSEADDR`` and none
   listens, and lets it listen then, so the server binds the port while it is held, on any
   address, as long as it sets ``SO_REUSEADDR`` (Go's listeners, asyncio's ``create_server``,
   ``socket.create_server`` and ``http.server`` all do). A picker holds its latest
   ``HELD_PICKS`` ports (older ones are released first: their servers are long up, and their
   listeners fail any check) and releases them all at exit.

Why a hold and not a retry on "address already in use": a picked port is written into other
components' configuration (etcd's into the apiserver's flags, the apiserver's into every
kubeconfig), so restarting one component on a new port means redoing what depends on it, per
component; a held port needs nothing of the code that starts servers.

``free_port`` is the one picker of the process, built on first use from the kernel's range and
reserved ports: the harness, the tests and the benchmarks all take their ports from it.
"""

from __future__ import annotations

import atexit
import errno
import random
import socket
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

EPHEMERAL_RANGE_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
RESERVED_PORTS_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")
PREFERRED_POOL: Final = range(20000, 30000)
UNPRIVILEGED: Final = range(1024, 65536)
HELD_PICKS: Final = 256
"""How many of its latest ports a picker holds (rule 5): far more than a harness has starting."""
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


def hold(port: int) -> socket.socket | None:
    """Rules 4 and 5: a socket holding ``port``, or None when the port is taken.

    Bound on every IPv4 address without ``SO_REUSEADDR``, so a port in TIME_WAIT, or held by
    another picker, counts as taken too; ``SO_REUSEADDR`` set afterwards lets a server that sets
    it bind and listen beside the hold. The hold never listens: nothing can connect to it.
    """
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        holder.bind(("0.0.0.0", port))
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    except OSError as error:
        holder.close()
        if error.errno in (errno.EADDRINUSE, errno.EACCES):
            return None
        raise
    return holder


class PortPicker:
    """Hands out ports of one pool, each at most once, and holds them (rules 4 and 5).

    Thread-safe. :meth:`close` releases the ports it holds.
    """

    def __init__(
        self,
        pool: Sequence[range],
        *,
        rng: random.Random | None = None,
        held_picks: int = HELD_PICKS,
    ) -> None:
        self._pool = tuple(pool)
        self._size = sum(map(len, self._pool))
        # SystemRandom: a forked child must not draw the same sequence as its parent.
        self._rng = rng or random.SystemRandom()
        self._handed_out: set[int] = set()
        self._holds: deque[socket.socket] = deque()
        self._held_picks = held_picks
        self._lock = threading.Lock()

    def _port_at(self, index: int) -> int:
        for part in self._pool:
            if index < len(part):
                return part[index]
            index -= len(part)
        raise IndexError(index)

    def pick(self) -> int:
        """A port of the pool not handed out before and free right now, held from now on.

        Raises:
            NoFreePort: The whole pool is handed out or taken.
        """
        with self._lock:
            start = self._rng.randrange(self._size) if self._size else 0
            for step in range(self._size):
                port = self._port_at((start + step) % self._size)
                holder = None if port in self._handed_out else hold(port)
                if holder is not None:
                    self._handed_out.add(port)
                    self._holds.append(holder)
                    while len(self._holds) > self._held_picks:
                        self._holds.popleft().close()
                    return port
        raise NoFreePort(
            f"no free port left in {', '.join(f'{r.start}-{r.stop - 1}' for r in self._pool)}"
        )

    def close(self) -> None:
        """Release every port this picker holds (still never handed out again by it)."""
        with self._lock:
            while self._holds:
                self._holds.popleft().close()


_picker: PortPicker | None = None
_picker_lock = threading.Lock()


def free_port() -> int:
    """A loopback TCP port outside the kernel's ephemeral range, free now, never handed out before.

    Held (rule 5) until ``HELD_PICKS`` later picks or the process's exit, so no other process of
    ours takes it meanwhile; the server that binds it must set ``SO_REUSEADDR`` (Go's and
    Python's servers do).

    Raises:
        NoFreePort: The pool is exhausted (thousands of ports taken).
    """
    global _picker
    with _picker_lock:
        if _picker is None:
            _picker = PortPicker(harness_pool(ephemeral_range(), reserved=reserved_ports()))
            atexit.register(_picker.close)
        picker = _picker
    return picker.pick()
