"""The controller's port to the apiserver: raw JSON over ``kubernetes_asyncio``'s transport.

Why raw JSON instead of the generated models: the controller keeps thousands of pods in its caches
and the models' deserialisation costs far more than the API call itself. ``kubernetes_asyncio``
still does what it is good at (kubeconfig and in-cluster loading, bearer tokens and their refresh);
the requests go through one aiohttp session of our own, built from its configuration, and are
decoded with orjson.

Why our own session: ``kubernetes_asyncio``'s has ``trust_env=True``, and aiohttp then reads
``~/.netrc`` and the proxy variables in a worker thread on *every* request (two thread hops per
call; a fifth of the controller's CPU while it creates a wave of pods). The proxy (kubeconfig
``proxy-url``, else ``HTTPS_PROXY``/``NO_PROXY``) is resolved once, at connect time, instead.

HTTP failures become a small exception hierarchy (as kopf's ``clients/errors.py``) so callers can
say what they mean: ``AlreadyExists`` on a create of a deterministic name is success, ``NotFound``
on a delete is success, ``Gone`` on a watch means re-list, ``Conflict`` means re-read and retry.
"""

from __future__ import annotations

import logging
import ssl
import urllib.request
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

import aiohttp
import orjson

log = logging.getLogger("torchgate.controller.kube")

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class ApiError(Exception):
    """A failed API call: HTTP status, the Status reason and message."""

    def __init__(self, status: int, reason: str, message: str, method: str, path: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class NotFound(ApiError):
    """HTTP 404."""


class Conflict(ApiError):
    """HTTP 409 for an update with a stale resourceVersion."""


class AlreadyExists(Conflict):
    """HTTP 409 with reason AlreadyExists (a create of a name that exists)."""


class Gone(ApiError):
    """HTTP 410: the watch's resourceVersion is too old; re-list."""


class Forbidden(ApiError):
    """HTTP 403: RBAC denies the call."""


class Invalid(ApiError):
    """HTTP 422 (or 400): the object was refused, e.g. by an admission webhook."""


class ServerError(ApiError):
    """HTTP 5xx, 429 or a transport failure: retry with backoff."""


def _error_for(status: int, reason: str) -> type[ApiError]:
    if status == 404:
        return NotFound
    if status == 409:
        return AlreadyExists if reason == "AlreadyExists" else Conflict
    if status == 410:
        return Gone
    if status == 403:
        return Forbidden
    if status in (400, 422):
        return Invalid
    return ServerError


@dataclass(frozen=True, slots=True)
class Resource:
    """Where a kind lives in the REST API."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        """The URL path of a collection (``name`` None) or of one object."""
        base = "/api/v1" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
        if sub:
            base += f"/{sub}"
        return base


PODS = Resource("", "v1", "pods")
SERVICES = Resource("", "v1", "services")
EVENTS = Resource("", "v1", "events")
NODES = Resource("", "v1", "nodes", namespaced=False)
PYTORCHJOBS = Resource("kubeflow.org", "v1", "pytorchjobs")
PLACEMENT_POLICIES = Resource("torchgate.io", "v1alpha1", "placementpolicies", namespaced=False)
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases")


class KubeApi(Protocol):
    """What the controller needs from the apiserver."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> Any:
        """One call; returns the decoded JSON body; raises ``ApiError`` subclasses."""

    def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        """Watch events (``{"type", "object"}``) until the server ends the stream."""


class KubeClient:
    """``KubeApi`` over a ``kubernetes_asyncio`` configuration (auth) and an aiohttp session."""

    def __init__(
        self,
        api_client: Any,
        session: aiohttp.ClientSession,
        *,
        proxy: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.api_client = api_client
        self.session = session
        self.host = str(api_client.configuration.host).rstrip("/")
        self.server_hostname: str | None = api_client.configuration.tls_server_name or None
        self.proxy = proxy
        self.timeout = timeout

    @classmethod
    async def connect(cls, kubeconfig: str | None, *, pool_size: int = 64) -> KubeClient:
        """Load a kubeconfig (or the in-cluster service account) and open a client."""
        from kubernetes_asyncio import client, config

        configuration = client.Configuration()
        if kubeconfig:
            await config.load_kube_config(
                config_file=kubeconfig, client_configuration=configuration
            )
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=pool_size, ssl=tls_context(configuration)),
            trust_env=False,
            # Watch events of large objects exceed aiohttp's default read buffer (etcd allows
            # 1.5 MiB objects).
            read_bufsize=2**21,
        )
        return cls(
            client.ApiClient(configuration),
            session,
            proxy=configuration.proxy or proxy_from_environment(str(configuration.host)),
        )

    async def close(self) -> None:
        """Close the connection pools."""
        await self.session.close()
        await self.api_client.close()

    async def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: Any,
        content_type: str,
        deadline: aiohttp.ClientTimeout | float,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": JSON}
        payload: bytes | None = None
        if body is not None:
            headers["Content-Type"] = content_type
            payload = orjson.dumps(body)
        # kubernetes_asyncio fills in the bearer token (refreshing exec/OIDC tokens); a client
        # certificate of the kubeconfig is in the session's TLS context.
        await self.api_client.update_params_for_auth(headers, [], ["BearerToken"])
        try:
            response = await self.session.request(
                method,
                self.host + path,
                params=dict(query or {}),
                data=payload,
                headers=headers,
                proxy=self.proxy,
                timeout=deadline
                if isinstance(deadline, aiohttp.ClientTimeout)
                else aiohttp.ClientTimeout(total=deadline),
                server_hostname=self.server_hostname,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ServerError(
                0, "Unreachable", str(exc) or type(exc).__name__, method, path
            ) from exc
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> Any:
        """One call; returns the decoded JSON body; raises ``ApiError`` subclasses."""
        response = await self._send(method, path, query, body, content_type, self.timeout)
        try:
            data = await response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ServerError(0, "Unreachable", str(exc), method, path) from exc
        finally:
            response.release()
        if 200 <= response.status < 300:
            return orjson.loads(data) if data else None
        raise _decode_error(response.status, data, method, path)

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        """Watch events until the server ends the stream; ``Gone`` when the version expired."""
        server_timeout = float(query.get("timeoutSeconds", "300"))
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=server_timeout + 30)
        response = await self._send("GET", path, {**query, "watch": "true"}, None, JSON, timeout)
        try:
            if response.status != 200:
                raise _decode_error(response.status, await response.read(), "WATCH", path)
            async for line in response.content:
                if not line.strip():
                    continue
                event = orjson.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    code = int(status.get("code") or 500)
                    raise _error_for(code, str(status.get("reason", "")))(
                        code,
                        str(status.get("reason", "")),
                        str(status.get("message", "")),
                        "WATCH",
                        path,
                    )
                yield event
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ServerError(
                0, "Unreachable", str(exc) or "watch stream broke", "WATCH", path
            ) from exc
        finally:
            response.release()


def tls_context(configuration: Any) -> ssl.SSLContext:
    """The TLS settings of a ``kubernetes_asyncio`` configuration (CA, client cert, verify)."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def proxy_from_environment(server: str) -> str | None:
    """The proxy for ``server`` from ``HTTPS_PROXY`` (or ``HTTP_PROXY``) unless ``NO_PROXY``."""
    parts = urlsplit(server)
    if not parts.hostname or urllib.request.proxy_bypass(parts.netloc):
        return None
    return urllib.request.getproxies().get(parts.scheme or "https")


def _decode_error(status: int, data: bytes, method: str, path: str) -> ApiError:
    reason, message = "", data.decode("utf-8", "replace")[:500]
    try:
        body = orjson.loads(data)
        if isinstance(body, dict):
            reason = str(body.get("reason", ""))
            message = str(body.get("message", message))
    except orjson.JSONDecodeError:
        pass
    return _error_for(status, reason)(status, reason, message, method, path)
