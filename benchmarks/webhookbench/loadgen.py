"""The load generator: open- and closed-loop HTTP/1.1-over-TLS load from one thread.

It is not aiohttp (one core of an aiohttp client cannot keep up with one core of the bare
server): it drives non-blocking ``ssl`` sockets from an ``epoll`` loop over keep-alive
connections with pre-serialised requests, which costs about as much CPU per request as ``wrk``
(the loopback TCP stack dominates both).

* Open loop: requests are due on a fixed schedule and never wait for answers; a request that
  finds every connection busy waits in the generator and its latency counts from when it was due.
* Closed loop: every connection sends its next request as soon as the answer arrives.
* An answer counts as ok when it is HTTP 200 with ``"allowed": true``; anything else, a timeout
  or a closed connection is an error (and the connection is replaced).
"""

from __future__ import annotations

import collections
import contextlib
import select
import socket
import ssl
import sys
import time
from collections.abc import Iterator, Sequence

from webhookbench import SERVER_TIME_HEADER
from webhookbench.stats import PhaseResult


class Connection:
    """A keep-alive HTTP/1.1 connection over TLS with at most one request in flight."""

    __slots__ = ("buffer", "fd", "pending_write", "sent_at", "sock")

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
        self.sock.setblocking(False)
        self.fd = self.sock.fileno()
        self.buffer = b""
        self.pending_write = b""
        self.sent_at = 0.0

    def close(self) -> None:
        """Close the socket, ignoring errors."""
        with contextlib.suppress(OSError):
            self.sock.close()


_HEAD_END = b"\r\n\r\n"
_CONTENT_LENGTH = b"\r\ncontent-length:"
_SERVER_TIME = b"\r\n" + SERVER_TIME_HEADER.lower().encode() + b":"
_EXPECTED = (b'"allowed":true', b'"allowed": true')  # orjson, json.dumps


class Generator:
    """Open- and closed-loop HTTP/1.1-over-TLS load from one thread (epoll, no asyncio)."""

    def __init__(
        self, port: int, path: str, bodies: Sequence[bytes], context: ssl.SSLContext, timeout: float
    ) -> None:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, */*\r\n"
            "User-Agent: kube-apiserver-admission\r\n"
        )
        self.requests = [
            (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body for body in bodies
        ]
        self.port = port
        self.context = context
        self.timeout = timeout
        self.epoll = select.epoll()
        self.connections: dict[int, Connection] = {}
        self._next = 0

    def open(self, count: int) -> None:
        """Open ``count`` connections (TLS handshakes happen here, outside any phase)."""
        for _ in range(count):
            self._add_connection()

    def _add_connection(self) -> Connection:
        connection = Connection(self.port, self.context)
        self.connections[connection.fd] = connection
        self.epoll.register(connection.fd, select.EPOLLIN)
        return connection

    def close(self) -> None:
        """Close every connection."""
        for connection in self.connections.values():
            connection.close()
        self.connections.clear()
        self.epoll.close()

    def _send(self, connection: Connection, started: float, result: PhaseResult) -> None:
        request = self.requests[self._next]
        self._next = (self._next + 1) % len(self.requests)
        connection.sent_at = started
        result.sent += 1
        self._write(connection, request)

    def _write(self, connection: Connection, data: bytes) -> None:
        try:
            written = connection.sock.send(data)
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
            written = 0
        connection.pending_write = data[written:]
        if connection.pending_write:
            self.epoll.modify(connection.fd, select.EPOLLIN | select.EPOLLOUT)

    def _fail(self, connection: Connection, kind: str, result: PhaseResult) -> Connection:
        """Count the in-flight request as an error and replace the connection."""
        result.errors += 1
        result.error_kinds[kind] += 1
        self.epoll.unregister(connection.fd)
        del self.connections[connection.fd]
        connection.close()
        return self._add_connection()

    def _read(
        self, connection: Connection, now: float, result: PhaseResult
    ) -> tuple[Connection, bool]:
        """Read what arrived; return the (possibly replaced) connection and if it is now free."""
        sock = connection.sock
        while True:
            try:
                data = sock.recv(262144)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            except OSError as exc:
                return self._fail(connection, type(exc).__name__, result), True
            if not data:
                return self._fail(connection, "connection closed", result), True
            connection.buffer += data
        buffer = connection.buffer
        end = buffer.find(_HEAD_END)
        if end < 0:
            return connection, False
        head = buffer[:end].lower()
        at = head.find(_CONTENT_LENGTH)
        if at < 0:
            return self._fail(connection, "no content-length", result), True
        length = int(head[at + len(_CONTENT_LENGTH) : head.find(b"\r\n", at + 2)])
        if len(buffer) < end + 4 + length:
            return connection, False
        body = buffer[end + 4 : end + 4 + length]
        connection.buffer = buffer[end + 4 + length :]
        status = head[9:12]
        if status != b"200" or (_EXPECTED[0] not in body and _EXPECTED[1] not in body):
            result.errors += 1
            result.error_kinds[f"HTTP {status.decode()}"] += 1
            if not result.first_bad:
                result.first_bad = (buffer[:end].decode() + "\n\n" + body.decode())[:1000]
            return connection, True
        result.ok += 1
        result.client.append(now - connection.sent_at)
        at = head.find(_SERVER_TIME)
        if at >= 0:
            wall, _, cpu = head[at + len(_SERVER_TIME) : head.find(b"\r\n", at + 2)].partition(
                b"cpu="
            )
            result.server.append(float(wall))
            if cpu:
                result.server_cpu.append(float(cpu))
        return connection, True

    def _events(self, timeout: float) -> Iterator[tuple[Connection, bool]]:
        """Wait up to ``timeout`` and yield (connection, readable) per event."""
        for fd, event in self.epoll.poll(max(timeout, 0.0)):
            connection = self.connections.get(fd)
            if connection is None:
                continue
            if event & select.EPOLLOUT and connection.pending_write:
                data = connection.pending_write
                self.epoll.modify(fd, select.EPOLLIN)
                self._write(connection, data)
            if event & (select.EPOLLIN | select.EPOLLERR | select.EPOLLHUP):
                yield connection, True

    def _expire(self, busy: set[int], now: float, result: PhaseResult) -> list[Connection]:
        replaced = []
        for fd in list(busy):
            connection = self.connections[fd]
            if now - connection.sent_at > self.timeout:
                busy.discard(fd)
                replaced.append(self._fail(connection, "timeout", result))
        return replaced

    def open_loop(self, rate: float, duration: float) -> PhaseResult:
        """Offer ``rate`` requests/s for ``duration`` s, whatever the answers take."""
        result = PhaseResult()
        total = max(1, round(rate * duration))
        idle = collections.deque(self.connections.values())
        busy: set[int] = set()
        waiting: collections.deque[float] = collections.deque()
        clock = time.perf_counter
        start = clock() + 0.005
        result.started = start
        issued = 0
        last_expiry = start
        while issued < total or busy:
            now = clock()
            while issued < total and start + issued / rate <= now:
                # The clock of a request starts when it is due (or when we notice it is due,
                # which is at most one poll late), not when a connection becomes free.
                issued += 1
                if idle:
                    connection = idle.popleft()
                    busy.add(connection.fd)
                    self._send(connection, now, result)
                else:
                    waiting.append(now)
            timeout = start + issued / rate - clock() if issued < total else 0.05
            for connection, _ in self._events(timeout):
                replaced, free = self._read(connection, clock(), result)
                if not free:
                    continue
                busy.discard(connection.fd)
                if waiting:
                    busy.add(replaced.fd)
                    self._send(replaced, waiting.popleft(), result)
                else:
                    idle.append(replaced)
            now = clock()
            if now - last_expiry > 0.1:
                last_expiry = now
                for replaced in self._expire(busy, now, result):
                    if waiting:
                        busy.add(replaced.fd)
                        self._send(replaced, waiting.popleft(), result)
                    else:
                        idle.append(replaced)
            if issued >= total and not busy and waiting:
                while waiting and idle:
                    connection = idle.popleft()
                    busy.add(connection.fd)
                    self._send(connection, waiting.popleft(), result)
        result.finished = clock()
        return result

    def closed_loop(self, duration: float, max_requests: int | None = None) -> PhaseResult:
        """Keep every connection busy for ``duration`` s (or ``max_requests`` requests)."""
        result = PhaseResult()
        clock = time.perf_counter
        result.started = clock()
        end = result.started + duration
        limit = max_requests if max_requests is not None else sys.maxsize
        busy: set[int] = set()
        for connection in list(self.connections.values()):
            if result.sent < limit:
                busy.add(connection.fd)
                self._send(connection, clock(), result)
        last_expiry = result.started
        while busy:
            for connection, _ in self._events(0.05):
                now = clock()
                replaced, free = self._read(connection, now, result)
                if not free:
                    continue
                busy.discard(connection.fd)
                if now < end and result.sent < limit:
                    busy.add(replaced.fd)
                    self._send(replaced, now, result)
            now = clock()
            if now - last_expiry > 0.1:
                last_expiry = now
                self._expire(busy, now, result)
        result.finished = clock()
        return result


def one_response(generator: Generator) -> bytes:
    """Send one request on the generator's only connection and return the raw body."""
    connection = next(iter(generator.connections.values()))
    connection.sock.setblocking(True)
    connection.sock.sendall(generator.requests[0])
    data = b""
    while _HEAD_END not in data:
        data += connection.sock.recv(65536)
    end = data.index(_HEAD_END)
    head = data[:end].lower()
    at = head.index(_CONTENT_LENGTH)
    length = int(head[at + len(_CONTENT_LENGTH) : head.find(b"\r\n", at + 2)])
    while len(data) < end + 4 + length:
        data += connection.sock.recv(65536)
    if not data.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"unexpected answer:\n{data[:2000].decode(errors='replace')}")
    return data[end + 4 : end + 4 + length]
