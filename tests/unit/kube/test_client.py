"""The controller's API client over real TLS, against a small stand-in apiserver.

It checks what the controller relies on: the kubeconfig's CA and bearer token are used, JSON
bodies round-trip, HTTP failures become the right ``ApiError`` subclass, a watch yields events and
turns an ``ERROR`` 410 into ``Gone``, and proxy variables are resolved once (``NO_PROXY`` honoured)
instead of being re-read for every request.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from multidict import CIMultiDict

from torchgate.certs.authority import issue_serving_cert, make_ca
from torchgate.kube.client import (
    ConfigError,
    KubeClient,
    current_namespace,
    proxy_from_environment,
    warning_text,
)
from torchgate.kube.errors import AlreadyExists, Gone, NotFound, ServerError
from torchgate.kube.resources import EVENTS, PODS

TOKEN = "s3cret-token"


class FakeApiserver:
    """Answers a few pod routes; records what it was sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None, Any]] = []
        self.extra: list[str | None] = []  # the X-Torchgate-Authorization header of each request

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/api/v1/namespaces/{ns}/pods", self.pods)
        app.router.add_route("*", "/api/v1/namespaces/{ns}/pods/{name}", self.pod)
        app.router.add_route("GET", "/api/v1/namespaces/{ns}/events", self.web_page)
        return app

    async def web_page(self, request: web.Request) -> web.StreamResponse:
        """What a web server, not an apiserver, answers: a page with status 200."""
        return web.Response(text="<html><body>Welcome to nginx!</body></html>\n",
                            content_type="text/html")  # fmt: skip

    async def _record(self, request: web.Request) -> Any:
        body = await request.json() if request.can_read_body else None
        self.seen.append((request.method, request.path, request.headers.get("Authorization"), body))
        self.extra.append(request.headers.get("X-Torchgate-Authorization"))
        return body

    async def pods(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        if request.method == "POST":
            if body["metadata"]["name"] == "taken":
                return status(409, "AlreadyExists", 'pods "taken" already exists')
            warnings = [("Warning", '299 - "torchgate: will start now on n1"'),
                        ("Warning", '299 - "a \\"quoted\\" word"')]  # fmt: skip
            return web.json_response({**body, "metadata": {**body["metadata"], "uid": "u1"}},
                                     status=201, headers=CIMultiDict(warnings))  # fmt: skip
        if request.query.get("watch") == "true":
            response = web.StreamResponse()
            await response.prepare(request)
            added = {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "7"}}}
            gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                                "message": "too old resource version"}}  # fmt: skip
            for event in (added, gone):
                await response.write(json.dumps(event).encode() + b"\n")
            await response.write_eof()
            return response
        return web.json_response({"items": [], "metadata": {"resourceVersion": "5"}})

    async def pod(self, request: web.Request) -> web.StreamResponse:
        await self._record(request)
        return status(404, "NotFound", f'pods "{request.match_info["name"]}" not found')


def status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(
        {"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message},
        status=code,
    )


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[tuple[FakeApiserver, Path]]:
    now = datetime.now(UTC)
    ca = make_ca("test-ca", now=now, valid_for=timedelta(days=1))
    serving = issue_serving_cert(
        ca, dns_names=["localhost"], ips=["127.0.0.1"], now=now, valid_for=timedelta(days=1)
    )
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(serving.key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    fake = FakeApiserver()
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": f"https://127.0.0.1:{port}",
                            "certificate-authority": str(tmp_path / "ca.pem"),
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": TOKEN}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    try:
        yield fake, kubeconfig
    finally:
        await runner.cleanup()


async def test_requests_carry_the_token_and_round_trip_json(
    apiserver: tuple[FakeApiserver, Path],
) -> None:
    fake, kubeconfig = apiserver
    client = await KubeClient.connect(str(kubeconfig))
    try:
        created = await client.request(
            "POST", PODS.path("ns"), body={"metadata": {"name": "p"}, "spec": {"x": [1, 2]}}
        )
    finally:
        await client.close()

    assert created == {"metadata": {"name": "p", "uid": "u1"}, "spec": {"x": [1, 2]}}
    assert fake.seen == [
        (
            "POST",
            "/api/v1/namespaces/ns/pods",
            f"Bearer {TOKEN}",
            created | {"metadata": {"name": "p"}},
        )
    ]


async def test_http_failures_become_typed_errors(apiserver: tuple[FakeApiserver, Path]) -> None:
    _, kubeconfig = apiserver
    client = await KubeClient.connect(str(kubeconfig))
    try:
        with pytest.raises(AlreadyExists) as exists:
            await client.request("POST", PODS.path("ns"), body={"metadata": {"name": "taken"}})
        with pytest.raises(NotFound) as missing:
            await client.request("DELETE", PODS.path("ns", "ghost"))
    finally:
        await client.close()

    assert (exists.value.status, exists.value.reason) == (409, "AlreadyExists")
    assert (missing.value.status, missing.value.reason) == (404, "NotFound")
    assert 'pods "ghost" not found' in str(missing.value)


async def test_an_answer_that_is_not_json_is_a_typed_error_naming_its_type_not_its_text(
    apiserver: tuple[FakeApiserver, Path],
) -> None:
    _, kubeconfig = apiserver
    client = await KubeClient.connect(str(kubeconfig))
    try:
        with pytest.raises(ServerError) as listed:
            await client.request("GET", EVENTS.path("ns"))
        with pytest.raises(ServerError) as watched:
            async for _ in client.watch(EVENTS.path("ns"), {}):
                pass
    finally:
        await client.close()

    for error in (listed.value, watched.value):
        assert (error.status, error.reason) == (200, "NotJSON")
        assert "text/html" in error.message
        assert "nginx" not in error.message


async def test_watch_yields_events_and_turns_an_expired_version_into_gone(
    apiserver: tuple[FakeApiserver, Path],
) -> None:
    _, kubeconfig = apiserver
    client = await KubeClient.connect(str(kubeconfig))
    received: list[dict[str, Any]] = []

    async def consume() -> None:
        async for event in client.watch(PODS.path("ns"), {"resourceVersion": "5"}):
            received.append(event)

    try:
        with pytest.raises(Gone):
            await consume()
    finally:
        await client.close()

    assert received == [
        {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "7"}}}
    ]


async def test_a_proxy_excluded_by_no_proxy_is_not_used(
    apiserver: tuple[FakeApiserver, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, kubeconfig = apiserver
    # Nothing listens on port 9: were the proxy used, the request would fail.
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    client = await KubeClient.connect(str(kubeconfig))
    try:
        listing = await client.request("GET", PODS.path("ns"))
    finally:
        await client.close()

    assert client.proxy is None
    assert listing["metadata"]["resourceVersion"] == "5"


def test_the_proxy_comes_from_the_environment_once(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert proxy_from_environment("https://10.0.0.1:6443") is None

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    assert proxy_from_environment("https://10.0.0.1:6443") == "http://proxy.corp:3128"

    monkeypatch.setenv("NO_PROXY", "10.0.0.1,.svc")
    assert proxy_from_environment("https://10.0.0.1:6443") is None
    assert proxy_from_environment("https://kubernetes.default.svc:443") is None
    assert proxy_from_environment("https://api.example.com:6443") == "http://proxy.corp:3128"


async def test_extra_headers_go_out_and_warning_headers_come_back(
    apiserver: tuple[FakeApiserver, Path],
) -> None:
    fake, kubeconfig = apiserver
    client = await KubeClient.connect(str(kubeconfig))
    warnings: list[str] = []
    try:
        await client.request(
            "POST",
            PODS.path("ns"),
            body={"metadata": {"name": "p"}},
            headers={"X-Torchgate-Authorization": "Bearer t"},
            warnings=warnings,
        )
    finally:
        await client.close()

    assert fake.extra == ["Bearer t"]
    assert fake.seen[0][2] == f"Bearer {TOKEN}", "the credentials still go as they always do"
    assert warnings == ["torchgate: will start now on n1", 'a "quoted" word']


def test_a_warning_that_is_not_rfc_7234_is_kept_as_it_came() -> None:
    assert warning_text("just text") == "just text"


def test_the_default_namespace_is_the_current_contexts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = {
        "current-context": "work",
        "contexts": [
            {"name": "home", "context": {"namespace": "mine"}},
            {"name": "work", "context": {"namespace": "team-vision"}},
        ],
    }
    (tmp_path / "a").write_text(json.dumps({"contexts": []}))
    (tmp_path / "b").write_text(json.dumps(config))
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'a'}:{tmp_path / 'b'}")

    assert current_namespace() == "team-vision"
    assert current_namespace(str(tmp_path / "a")) == "default"


@pytest.mark.parametrize(
    ("user", "cluster_fields", "said"),
    [
        (
            {"token": TOKEN},
            {"certificate-authority": "{garbage}"},
            "cannot use the kubeconfig's certificate authority {garbage}: no PEM certificate in it",
        ),
        (
            {"client-certificate": "{garbage}", "client-key": "{garbage}"},
            {"insecure-skip-tls-verify": True},
            "cannot use the kubeconfig's client certificate {garbage} (key {garbage}): not a PEM "
            "certificate and its key",
        ),
    ],
    ids=["certificate-authority", "client-certificate"],
)
async def test_a_kubeconfig_whose_tls_files_are_not_pem_is_a_config_error_naming_the_file(
    tmp_path: Path, user: dict[str, Any], cluster_fields: dict[str, Any], said: str
) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("token: s3cret\n")
    named = json.loads(json.dumps([user, cluster_fields]).replace("{garbage}", str(garbage)))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": "https://127.0.0.1:1", **named[1]}}
                ],
                "users": [{"name": "u", "user": named[0]}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )

    with pytest.raises(ConfigError) as refused:
        await KubeClient.connect(str(kubeconfig))

    assert str(refused.value) == said.replace("{garbage}", str(garbage))
    assert "s3cret" not in str(refused.value)
