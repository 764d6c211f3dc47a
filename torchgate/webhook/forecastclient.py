"""Asking the controller what it would do with a job being created: the admission forecast.

Why the webhook asks rather than computes: the answer must be the controller's own decision on
its live snapshot (its waiting queue, what holds which nodes), which only the leading controller
has. The webhook sends the job as the apiserver passed it to the validating route (defaults
applied) to the controller's pool service (``controller.poolservice``) and turns the answer into
one warning (``outlook.forecast_warning``).

Rules:

1. A forecast never blocks or fails admission: no answer within ``timeout`` seconds (default
   0.25), an error status, a connection refused, a certificate that does not verify or an answer
   of another shape all mean no forecast (counted by outcome in the webhook's metrics); the
   review is answered as without it.
2. The channel is TLS, verified against ``ca_file`` (the controller's CA from ``torchgate
   certs``; re-read when the file changes, so a rotated CA is trusted without a restart), and
   authenticated with the webhook's own credentials (its ServiceAccount token in a pod), which
   the controller checks with TokenReview and SubjectAccessReview.
3. Connections are kept alive between reviews, so a forecast costs one request, not a handshake.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

import aiohttp
import orjson

from torchgate.pytorchjob.outlook import (
    FORECAST_PATH,
    Forecast,
    MalformedAnswer,
    forecast_from_json,
)

log = logging.getLogger("torchgate.webhook.forecast")

DEFAULT_TIMEOUT_SECONDS: Final = 0.25
CA_CHECK_SECONDS: Final = 60.0
Authorize = Callable[[dict[str, str]], Awaitable[None]]
Outcome = str  # "answered", "timeout", "refused", "error"


class ForecastClient:
    """The webhook's client of the controller's ``POST /v1/forecast``."""

    def __init__(
        self,
        url: str,
        *,
        authorize: Authorize,
        ca_file: Path | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        observe: Callable[[Outcome, float], None] = lambda outcome, seconds: None,
    ) -> None:
        self.url = url.rstrip("/") + FORECAST_PATH
        self.authorize = authorize
        self.ca_file = ca_file
        self.timeout = timeout
        self.observe = observe
        self.context, trusted = _client_context(ca_file)
        self._ca_digest = _digest(ca_file) if trusted else ""
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.context, limit=32),
                trust_env=False,
            )
        return self._session

    async def forecast(self, job: Mapping[str, Any]) -> Forecast | None:
        """The controller's forecast for ``job``, or ``None`` (rule 1)."""
        started = time.perf_counter()
        outcome: Outcome = "error"
        try:
            async with asyncio.timeout(self.timeout):
                answer = await self._ask(job)
            outcome = "answered" if answer is not None else "refused"
            return answer
        except TimeoutError:
            outcome = "timeout"
            return None
        except (aiohttp.ClientError, OSError, MalformedAnswer, ValueError) as exc:
            log.debug("no forecast: %s", exc)
            return None
        finally:
            self.observe(outcome, time.perf_counter() - started)

    async def _ask(self, job: Mapping[str, Any]) -> Forecast | None:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        await self.authorize(headers)
        async with self._client().post(
            self.url, data=orjson.dumps({"job": job}), headers=headers
        ) as response:
            body = await response.read()
            if response.status != 200:
                log.debug("no forecast: the controller answered %d", response.status)
                return None
        return forecast_from_json(orjson.loads(body))

    def reload_ca(self) -> bool:
        """Trust the CA file again if it changed (rule 2); whether it did."""
        digest = _digest(self.ca_file)
        if self.ca_file is None or digest == self._ca_digest:
            return False
        try:
            self.context.load_verify_locations(cafile=str(self.ca_file))
        except (OSError, ssl.SSLError) as exc:
            log.warning("keeping the controller's CA; could not load %s: %s", self.ca_file, exc)
            return False
        self._ca_digest = digest
        log.info("trusting the controller's CA from %s again", self.ca_file)
        return True

    async def watch_ca(self, interval: float = CA_CHECK_SECONDS) -> None:
        """Re-read the CA file whenever it changes (until cancelled)."""
        while True:
            await asyncio.sleep(interval)
            self.reload_ca()

    async def close(self) -> None:
        """Close the kept-alive connections."""
        if self._session is not None:
            await self._session.close()


def _client_context(ca_file: Path | None) -> tuple[ssl.SSLContext, bool]:
    """Verify the controller against ``ca_file`` only (the system's CAs without one).

    A CA file not there yet (its Secret is mounted once the controller made it) trusts nothing
    until ``reload_ca`` finds it: forecasts fail closed, admission goes on without them.
    """
    if ca_file is None:
        return ssl.create_default_context(), True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # hostname checks and verification on
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_verify_locations(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        log.warning("not trusting the controller yet: cannot load %s: %s", ca_file, exc)
        return context, False
    return context, True


def _digest(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""
