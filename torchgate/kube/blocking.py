"""Synchronous calls to an apiserver for the dev tooling: ``asyncio.run`` around the one client.

Why not a second, blocking client: one HTTP stack means one place for TLS, auth, proxies and the
typed errors. The dev tooling makes a few dozen calls per command, each on a fresh connection (as
urllib did).

Rules:
- Each call opens a :class:`~torchgate.kube.client.KubeClient`, makes one request and closes it.
- Every call runs on one event loop that lives on a daemon thread for the life of the process
  (started on first use, again after a fork), never on a loop of its own that is closed when the
  call returns: a TLS connection closed after a timeout waits for its peer's close_notify, and a
  loop closed under it leaks the socket (a ``ResourceWarning`` when the peer hangs, as an
  apiserver that is still starting does). It also works from code whose own loop is running.
- Failures are the typed errors of :mod:`torchgate.kube.errors`; a probe answers 0 instead.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

from torchgate.kube.client import JSON, KubeClient

T = TypeVar("T")


class BlockingClient:
    """Blocking ``request``/``probe`` on one server with a fixed token and TLS context."""

    def __init__(
        self,
        server: str,
        *,
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.server = server
        self.token = token
        self.tls = tls
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> Any:
        """One call; the decoded JSON body; raises ``ApiError`` subclasses."""
        return self._run(
            lambda client: client.request(
                method, path, query=query, body=body, content_type=content_type
            )
        )

    def probe(self, path: str, *, timeout: float = 2.0) -> int:
        """The HTTP status of a GET of ``path``; 0 when nothing answered."""
        return self._run(lambda client: client.probe(path, seconds=timeout))

    def _run(self, call: Callable[[KubeClient], Awaitable[T]]) -> T:
        async def once() -> T:
            client = KubeClient.for_server(
                self.server, token=self.token, tls=self.tls, timeout=self.timeout
            )
            async with client:
                return await call(client)

        return run_blocking(once())


def probe(
    url: str,
    *,
    tls: ssl.SSLContext | None = None,
    token: str | None = None,
    timeout: float = 2.0,
) -> int:
    """The HTTP status of a GET of ``url`` (0 when nothing answered)."""
    server, path = _split(url)
    return BlockingClient(server, token=token, tls=tls).probe(path, timeout=timeout)


def get(
    url: str,
    *,
    tls: ssl.SSLContext | None = None,
    token: str | None = None,
    timeout: float = 2.0,
) -> Any:
    """The decoded JSON of a GET of ``url``; raises ``ApiError`` subclasses."""
    server, path = _split(url)
    return BlockingClient(server, token=token, tls=tls, timeout=timeout).request("GET", path)


def _split(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    path = parts.path or "/"
    if parts.query:
        path += f"?{parts.query}"
    return f"{parts.scheme}://{parts.netloc}", path


_loop_guard = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_loop_pid = 0


def _shared_loop() -> asyncio.AbstractEventLoop:
    global _loop, _loop_pid
    with _loop_guard:
        if _loop is None or _loop_pid != os.getpid():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="kube-blocking", daemon=True)
            thread.start()
            _loop, _loop_pid = loop, os.getpid()
        return _loop


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion on the shared loop and wait for its result."""
    return asyncio.run_coroutine_threadsafe(coroutine, _shared_loop()).result()
