"""A TLS listener for an aiohttp app that bounds what connections cost: the webhook's.

Why not ``web.TCPSite(ssl_context=...)``: asyncio's TLS server gives every accepted connection a
256 KiB read buffer at once (``sslproto.SSLProtocol.max_size``: about 270 kB resident per idle
connection with aiohttp's handler), allows 60 s for the handshake, and aiohttp keeps a connection
that never sends a request for its keep-alive timeout (3630 s by default). Anyone who can reach the
port could hold enough idle connections (about 700) to push the webhook past its 256 MiB memory
limit, and with ``failurePolicy: Fail`` no PyTorchJob could then be created.

Here connections are accepted as plain TCP and each is judged before any TLS state exists:

- **the cap**: at most ``max_connections`` connections are open, handshakes included;
- **room for a new one**: at the cap, the oldest connection that has not yet sent a complete
  request head is closed to make room (``_evictable``): the apiserver sends its request as soon
  as its handshake is done, so such a connection is most likely one left idle on purpose, and an
  idle flood can then never lock the apiserver out. When every open connection has sent a
  request, the new one is closed at once (a TCP reset, before any TLS: it costs nothing);
- **the read deadline**: a connection must complete its TLS handshake and its first request's
  head within ``read_timeout`` seconds of being accepted, or it is closed;
- **idle connections**: between requests a connection is closed after the runner's
  ``keepalive_timeout`` (aiohttp's own rule, which this listener leaves to it).

Only public asyncio calls are used: ``create_server`` without TLS, then ``loop.start_tls`` on
each admitted connection, whose transport is handed to aiohttp's request handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import web
from yarl import URL

Observe = Callable[[str], None]
"""Told why a connection was closed by this listener: ``refused``, ``evicted`` or ``timeout``."""


class _Connection:
    """One accepted connection, from its TCP accept to its close."""

    __slots__ = ("handler", "proven", "raw", "task", "timer", "tunnel")

    def __init__(self, raw: asyncio.Transport) -> None:
        self.raw = raw
        self.proven = False  # a complete request head was received
        self.handler: asyncio.Protocol | None = None
        self.tunnel: _Tunnel | None = None
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None


def _evictable(connections: dict[asyncio.Transport, _Connection]) -> _Connection | None:
    """At the cap: the oldest connection that has sent no complete request head yet, if any."""
    return next((c for c in connections.values() if not c.proven), None)


class _Accepting(asyncio.Protocol):
    """The plain TCP side of a connection, until the listener admits or refuses it."""

    def __init__(self, listener: TLSListener) -> None:
        self._listener = listener

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._listener._accepted(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        # Only before start_tls took the transport over (a refused or aborted connection).
        pass


class _Tunnel(asyncio.Protocol):
    """Between the TLS layer and aiohttp's handler: hands over data, notices the close.

    ``start_tls`` may deliver the first decrypted bytes (the apiserver's request, sent with its
    last handshake message) before it returns the transport the handler must be given first;
    those bytes wait here until then.
    """

    def __init__(self, listener: TLSListener, connection: _Connection) -> None:
        self._listener = listener
        self._connection = connection
        self._early: list[bytes] | None = []
        self._handler: asyncio.Protocol | None = None

    def hand_over(self, handler: asyncio.Protocol, transport: asyncio.Transport) -> None:
        self._handler = handler
        handler.connection_made(transport)
        early, self._early = self._early or [], None
        for data in early:
            handler.data_received(data)

    def data_received(self, data: bytes) -> None:
        if self._early is not None:
            self._early.append(data)
        elif self._handler is not None:
            self._handler.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self._handler is None else self._handler.eof_received()

    def pause_writing(self) -> None:
        if self._handler is not None:
            self._handler.pause_writing()

    def resume_writing(self) -> None:
        if self._handler is not None:
            self._handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._listener._forget(self._connection)
        if self._handler is not None:
            self._handler.connection_lost(exc)


class TLSListener(web.BaseSite):
    """An aiohttp site serving HTTPS on ``host:port`` within the rules of the module docstring."""

    __slots__ = (
        "_bound_port",
        "_connections",
        "_handlers",
        "_host",
        "_max_connections",
        "_observe",
        "_port",
        "_read_timeout",
        "_tls",
    )

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext,
        max_connections: int,
        read_timeout: float,
        observe: Observe | None = None,
    ) -> None:
        super().__init__(runner)
        self._host = host
        self._port = port
        self._bound_port: int | None = None
        self._tls = ssl_context
        self._max_connections = max_connections
        self._read_timeout = read_timeout
        self._observe = observe
        # Oldest first (dicts keep insertion order): the order ``_evictable`` looks in.
        self._connections: dict[asyncio.Transport, _Connection] = {}
        self._handlers: dict[object, _Connection] = {}

    @property
    def name(self) -> str:
        """``https://host:port``, the port bound once started."""
        port = self._bound_port if self._bound_port is not None else self._port
        return str(URL.build(scheme="https", host=self._host or "0.0.0.0", port=port))

    async def start(self) -> None:
        """Listen; note each connection's first complete request head (it is then no idler)."""
        await super().start()
        server = self._runner.server
        assert server is not None
        make_request = server.request_factory

        def request_factory(*args: Any) -> web.BaseRequest:
            # (message, payload, protocol, writer, task): a complete request head arrived.
            self._proven(args[2])
            return make_request(*args)

        server.request_factory = request_factory
        loop = asyncio.get_running_loop()
        listening = await loop.create_server(
            lambda: _Accepting(self), self._host, self._port, backlog=self._backlog
        )
        self._server = listening
        sockets = listening.sockets
        self._bound_port = int(sockets[0].getsockname()[1]) if sockets else self._port

    async def stop(self) -> None:
        """Stop listening and close the connections not yet handed to aiohttp."""
        await super().stop()
        # Connections aiohttp's handler has not got yet are not aiohttp's to close.
        for connection in list(self._connections.values()):
            if connection.handler is None:
                self._close(connection)

    # ------------------------------------------------------------------ internals

    def _accepted(self, raw: asyncio.Transport) -> None:
        raw.pause_reading()  # nothing is read before the connection is admitted
        if len(self._connections) >= self._max_connections:
            oldest = _evictable(self._connections)
            if oldest is None:
                self._told("refused")
                raw.abort()
                return
            self._told("evicted")
            self._close(oldest)
        connection = _Connection(raw)
        self._connections[raw] = connection
        loop = asyncio.get_running_loop()
        connection.timer = loop.call_later(self._read_timeout, self._expire, connection)
        connection.task = loop.create_task(self._handshake(connection))

    async def _handshake(self, connection: _Connection) -> None:
        tunnel = _Tunnel(self, connection)
        connection.tunnel = tunnel
        loop = asyncio.get_running_loop()
        try:
            transport = await loop.start_tls(
                connection.raw,
                tunnel,
                self._tls,
                server_side=True,
                ssl_handshake_timeout=self._read_timeout,
            )
        except Exception:  # a failed or timed-out handshake: start_tls closed the transport
            self._forget(connection)
            return
        finally:
            connection.task = None
        if transport is None or transport.is_closing():
            self._forget(connection)
            return
        server = self._runner.server
        assert server is not None
        handler = server()
        connection.handler = handler
        self._handlers[handler] = connection
        tunnel.hand_over(handler, transport)

    def _proven(self, handler: object) -> None:
        connection = self._handlers.get(handler)
        if connection is not None and not connection.proven:
            connection.proven = True
            if connection.timer is not None:
                connection.timer.cancel()
                connection.timer = None

    def _expire(self, connection: _Connection) -> None:
        connection.timer = None
        if not connection.proven and connection.raw in self._connections:
            self._told("timeout")
            self._close(connection)

    def _close(self, connection: _Connection) -> None:
        """Close a connection at once (a reset: whoever holds it idle gets nothing more)."""
        self._forget(connection)
        if connection.task is not None:
            connection.task.cancel()
        with contextlib.suppress(Exception):
            connection.raw.abort()

    def _forget(self, connection: _Connection) -> None:
        self._connections.pop(connection.raw, None)
        if connection.handler is not None:
            self._handlers.pop(connection.handler, None)
        if connection.timer is not None:
            connection.timer.cancel()
            connection.timer = None

    def _told(self, reason: str) -> None:
        if self._observe is not None:
            self._observe(reason)
