"""The one client of the apiserver: raw JSON over one aiohttp session, typed errors.

Why raw JSON instead of ``kubernetes_asyncio``'s generated models: the controller keeps thousands
of pods in its caches and the models' deserialisation costs far more than the API call itself.
``kubernetes_asyncio`` still does what it is good at and nothing else: loading a kubeconfig (exec
and OIDC plugins, client certificates, merged ``$KUBECONFIG`` files) or the in-cluster service
account, and refreshing bearer tokens. Requests go through one aiohttp session of our own, built
from that configuration, and are decoded with orjson.

Why our own session: ``kubernetes_asyncio``'s has ``trust_env=True``, and aiohttp then reads
``~/.netrc`` and the proxy variables in a worker thread on *every* request (two thread hops per
call; a fifth of the controller's CPU while it creates a wave of pods). The proxy (kubeconfig
``proxy-url``, else ``HTTPS_PROXY``/``NO_PROXY``) is resolved once, at connect time, instead.

Rules:
- Without a kubeconfig the in-cluster service account is used, else ``$KUBECONFIG`` (several
  files merged as kubectl does), else ``~/.kube/config``; a configuration that cannot be used is
  one :class:`ConfigError` line that never quotes the file (it may hold tokens or keys), its
  certificate authority, client certificate or key not PEM included (``tls_context``).
- Every HTTP failure is an :class:`~torchgate.kube.errors.ApiError` subclass; a call that gets no
  answer is ``ServerError`` with status 0, one whose answer is not JSON ``ServerError`` with
  reason ``NotJSON`` (a web page where the apiserver or the pool service was expected). Response
  bodies are never logged (a Secret's are keys).
- A watch yields ``{"type", "object"}`` events until the server ends the stream and turns an
  ``ERROR`` event into the typed error of its Status (410: ``Gone``).
"""

from __future__ import annotations

import os
import ssl
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self
from urllib.parse import urlsplit

import aiohttp
import orjson

from torchgate.kube.errors import decode_error, not_json, status_error, unreachable

JSON = "application/json"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

Authorize = Callable[[dict[str, str]], Awaitable[None]]


class ConfigError(Exception):
    """No usable client configuration; the message is one line fit for a user."""


class KubeApi(Protocol):
    """What callers need from the apiserver (the fakes in tests implement this too)."""

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
    """``KubeApi`` over one aiohttp session; authentication is a callback that fills headers."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        host: str,
        *,
        authorize: Authorize | None = None,
        server_hostname: str | None = None,
        proxy: str | None = None,
        timeout: float = 30.0,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.session = session
        self.host = host.rstrip("/")
        self.authorize = authorize
        self.server_hostname = server_hostname
        self.proxy = proxy
        self.timeout = timeout
        self._on_close = on_close

    @classmethod
    async def connect(
        cls, kubeconfig: str | None = None, *, pool_size: int = 64, request_timeout: float = 30.0
    ) -> KubeClient:
        """Open a client from a kubeconfig or the in-cluster service account (``ConfigError``)."""
        from kubernetes_asyncio import client

        configuration = await load_configuration(kubeconfig)
        tls = tls_context(configuration)  # first: its ConfigError says which file is unusable
        api_client = client.ApiClient(configuration)

        async def authorize(headers: dict[str, str]) -> None:
            # Fills in the bearer token, refreshing exec/OIDC tokens; a client certificate of the
            # kubeconfig is in the session's TLS context instead.
            await api_client.update_params_for_auth(headers, [], ["BearerToken"])

        host = str(configuration.host)
        return cls(
            _session(tls, pool_size),
            host,
            authorize=authorize,
            server_hostname=configuration.tls_server_name or None,
            proxy=configuration.proxy or proxy_from_environment(host),
            timeout=request_timeout,
            on_close=api_client.close,
        )

    @classmethod
    def for_server(
        cls,
        server: str,
        *,
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
        timeout: float = 30.0,
        pool_size: int = 8,
    ) -> KubeClient:
        """A client of ``server`` with a fixed bearer token (the dev tooling's admin token).

        Call inside a running event loop. A loopback server is never proxied.
        """
        headers = {"Authorization": f"Bearer {token}"} if token else {}

        async def authorize(outgoing: dict[str, str]) -> None:
            outgoing.update(headers)

        return cls(
            _session(tls, pool_size),
            server,
            authorize=authorize,
            proxy=None if _loopback(server) else proxy_from_environment(server),
            timeout=timeout,
        )

    async def close(self) -> None:
        """Close the connection pools."""
        await self.session.close()
        if self._on_close is not None:
            await self._on_close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: Any,
        content_type: str,
        deadline: aiohttp.ClientTimeout | float,
        extra_headers: Mapping[str, str] | None = None,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": JSON, **(extra_headers or {})}
        payload: bytes | None = None
        if body is not None:
            headers["Content-Type"] = content_type
            payload = orjson.dumps(body)
        if self.authorize is not None:
            await self.authorize(headers)
        try:
            return await self.session.request(
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
            raise unreachable(method, path, exc) from exc

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        headers: Mapping[str, str] | None = None,
        warnings: list[str] | None = None,
    ) -> Any:
        """One call; returns the decoded JSON body; raises ``ApiError`` subclasses.

        ``headers`` are sent besides the credentials; ``warnings`` collects the texts of the
        answer's ``Warning`` headers (admission warnings, deprecations).
        """
        response = await self._send(method, path, query, body, content_type, self.timeout, headers)
        try:
            data = await response.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise unreachable(method, path, exc) from exc
        finally:
            response.release()
        if warnings is not None:
            warnings.extend(warning_text(value) for value in response.headers.getall("Warning", ()))
        if not 200 <= response.status < 300:
            raise decode_error(response.status, data, method, path)
        try:
            return orjson.loads(data) if data else None
        except orjson.JSONDecodeError:
            content_type = response.headers.get("Content-Type", "")
            raise not_json(response.status, content_type, data, method, path) from None

    async def probe(self, path: str, *, seconds: float = 2.0) -> int:
        """The HTTP status of a GET of ``path`` (``/readyz``, ``/healthz``); 0 when unreachable."""
        try:
            response = await self._send("GET", path, None, None, JSON, seconds)
        except Exception:  # a probe answers "not ready", whatever went wrong
            return 0
        response.release()
        return response.status

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        """Watch events until the server ends the stream; ``Gone`` when the version expired."""
        server_timeout = float(query.get("timeoutSeconds", "300"))
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=server_timeout + 30)
        response = await self._send("GET", path, {**query, "watch": "true"}, None, JSON, timeout)
        try:
            if response.status != 200:
                raise decode_error(response.status, await response.read(), "WATCH", path)
            async for line in response.content:
                if not line.strip():
                    continue
                try:
                    event = orjson.loads(line)
                except orjson.JSONDecodeError:
                    content_type = response.headers.get("Content-Type", "")
                    raise not_json(response.status, content_type, line, "WATCH", path) from None
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise status_error(
                        int(status.get("code") or 500),
                        str(status.get("reason", "")),
                        str(status.get("message", "")),
                        "WATCH",
                        path,
                        body=status,
                    )
                yield event
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise unreachable("WATCH", path, str(exc) or "watch stream broke") from exc
        finally:
            response.release()


def warning_text(header: str) -> str:
    """The text of a ``Warning: 299 - "text"`` header value (RFC 7234), unquoted."""
    parts = header.split(" ", 2)
    if len(parts) == 3 and parts[2].startswith('"'):
        text = parts[2]
        closing = text.rfind('"')
        if closing > 0:
            return text[1:closing].replace('\\"', '"').replace("\\\\", "\\")
    return header


def current_namespace(kubeconfig: str | None = None) -> str:
    """The namespace of the kubeconfig's current context (kubectl's default ``-n``).

    In a pod without a kubeconfig, the pod's own namespace; ``default`` when nothing says.
    """
    import yaml

    if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ:
        try:
            return Path(SERVICE_ACCOUNT_NAMESPACE).read_text().strip() or "default"
        except OSError:
            pass
    files = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    documents = []
    for part in files.split(os.pathsep):
        try:
            loaded = yaml.safe_load(Path(part).read_text()) if part else None
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(loaded, Mapping):
            documents.append(loaded)
    current = next((d["current-context"] for d in documents if d.get("current-context")), None)
    for document in documents:
        for entry in document.get("contexts") or ():
            if isinstance(entry, Mapping) and entry.get("name") == current:
                context = entry.get("context")
                namespace = context.get("namespace") if isinstance(context, Mapping) else None
                return str(namespace) if namespace else "default"
    return "default"


def _session(tls: ssl.SSLContext | None, pool_size: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=pool_size, ssl=tls if tls is not None else True),
        trust_env=False,
        # Watch events of large objects exceed aiohttp's default read buffer (etcd allows
        # 1.5 MiB objects).
        read_bufsize=2**21,
    )


async def load_configuration(kubeconfig: str | None) -> Any:
    """A ``kubernetes_asyncio`` Configuration: in-cluster, else kubeconfig (``ConfigError``).

    ``kubeconfig`` None: the in-cluster service account, else ``$KUBECONFIG`` (may list several
    files, merged like kubectl does), else ``~/.kube/config``.
    """
    import yaml
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            pass
        else:
            return configuration
        from_environment = os.environ.get("KUBECONFIG")
        kubeconfig = from_environment or str(Path.home() / ".kube" / "config")
        origin = "$KUBECONFIG" if from_environment else "the default kubeconfig"
        missing = f"not running in a cluster, and {origin} {kubeconfig} is not a file"
    else:
        missing = f"{kubeconfig} is not a file"
    paths = [Path(part) for part in kubeconfig.split(os.pathsep) if part]
    if not any(path.is_file() for path in paths):
        raise ConfigError(f"no Kubernetes client configuration: {missing}")
    try:
        await config.load_kube_config(
            config_file=kubeconfig, client_configuration=configuration, persist_config=False
        )
    except config.ConfigException as error:
        raise ConfigError(f"cannot use kubeconfig {kubeconfig}: {_one_line(error)}") from None
    except yaml.YAMLError:
        # YAML errors quote the offending line, which may hold a token or a client key.
        raise ConfigError(f"cannot use kubeconfig {kubeconfig}: not valid YAML") from None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(f"cannot read kubeconfig {kubeconfig}: {reason}") from None
    except (ValueError, TypeError, KeyError, AttributeError):
        raise ConfigError(f"cannot use kubeconfig {kubeconfig}: malformed") from None
    return configuration


def tls_context(configuration: Any) -> ssl.SSLContext:
    """The TLS settings of a ``kubernetes_asyncio`` configuration (CA, client cert, verify).

    A certificate authority, client certificate or key that cannot be read or is not PEM is a
    ``ConfigError`` naming the file (never quoting it), not an ``ssl.SSLError`` traceback.
    """
    ca_file = configuration.ssl_ca_cert
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (ssl.SSLError, OSError) as error:
        problem = _tls_file_problem(error, "no PEM certificate in it")
        raise ConfigError(
            f"cannot use the kubeconfig's certificate authority {ca_file}: {problem}"
        ) from None
    if configuration.cert_file:
        try:
            context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
        except (ssl.SSLError, OSError) as error:
            problem = _tls_file_problem(error, "not a PEM certificate and its key")
            raise ConfigError(
                f"cannot use the kubeconfig's client certificate {configuration.cert_file} "
                f"(key {configuration.key_file}): {problem}"
            ) from None
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _tls_file_problem(error: ssl.SSLError | OSError, not_pem: str) -> str:
    if isinstance(error, ssl.SSLError):
        return not_pem
    return error.strerror or type(error).__name__


def proxy_from_environment(server: str) -> str | None:
    """The proxy for ``server`` from ``HTTPS_PROXY`` (or ``HTTP_PROXY``) unless ``NO_PROXY``."""
    parts = urlsplit(server)
    if not parts.hostname or urllib.request.proxy_bypass(parts.netloc):
        return None
    return urllib.request.getproxies().get(parts.scheme or "https")


def _loopback(server: str) -> bool:
    host = urlsplit(server).hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def _one_line(value: object) -> str:
    return " ".join(str(value).split())
