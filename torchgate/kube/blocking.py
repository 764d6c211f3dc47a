"""Synchronous calls to an apiserver for the dev tooling: ``asyncio.run`` around the one client.

Why not a second, blocking client: one HTTP stack means one place for TLS, auth, proxies and the
typed errors. The dev tooling makes a few dozen calls per command, each on a fresh connection (as
urllib did), so a private event loop per call costs nothing measurable.

Rules:
- Each call opens a :class:`~torchgate.kube.client.KubeClient`, makes one request and closes it.
- Called from a thread whose event loop is running, the call runs on a worker thread instead
  (``asyncio.run`` cannot nest).
- Failures are the typed errors of :mod:`torchgate.kube.errors`; a probe answers 0 instead.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
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


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion from synchronous code, even inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
