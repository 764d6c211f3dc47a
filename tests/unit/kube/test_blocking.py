"""The blocking wrapper the dev tooling uses, against a small stand-in apiserver on a thread.

The server runs on its own thread and event loop, as a real apiserver is another process: the
wrapper's calls block their caller, so they cannot share its loop.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import ssl
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from torchgate.certs import issuing
from torchgate.kube import blocking
from torchgate.kube.errors import Invalid, NotFound, ServerError
from torchgate_dev.apiserver import ApiClient
from torchgate_dev.ports import free_port

TOKEN = "dev-admin-token"


class StandIn:
    """Answers a few paths; records the Authorization header and body of each request."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None, Any]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/readyz", self.readyz)
        app.router.add_route("*", "/api/v1/namespaces/{ns}/configmaps", self.configmaps)
        app.router.add_get("/api/v1/nodes/{name}", self.node)
        return app

    async def readyz(self, request: web.Request) -> web.Response:
        self.seen.append(("GET", request.path, request.headers.get("Authorization"), None))
        return web.Response(text="ok")

    async def configmaps(self, request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        self.seen.append((request.method, request.path, request.headers.get("Authorization"), body))
        if body and body["metadata"]["name"] == "refused":
            return web.json_response(
                {
                    "kind": "Status",
                    "code": 422,
                    "reason": "Invalid",
                    "message": "refused by a webhook",
                    "details": {"causes": [{"field": "data"}]},
                },
                status=422,
            )
        return web.json_response(body, status=201)

    async def node(self, request: web.Request) -> web.Response:
        if request.match_info["name"] != "n1":
            return web.json_response({"kind": "Status", "reason": "NotFound"}, status=404)
        return web.json_response({"status": {"conditions": [{"type": "Ready"}]}})


@pytest.fixture
def server() -> Iterator[tuple[StandIn, str]]:
    stand_in = StandIn()
    loop = asyncio.new_event_loop()
    # No access log: the server's thread outlives the test's log capture, and wrote into it closed.
    runner = web.AppRunner(stand_in.app(), access_log=None)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield stand_in, f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def test_a_request_carries_the_token_and_round_trips_json(server: tuple[StandIn, str]) -> None:
    stand_in, url = server
    client = blocking.BlockingClient(url, token=TOKEN)
    body = {"metadata": {"name": "c"}, "data": {"k": "v"}}
    assert client.request("POST", "/api/v1/namespaces/ns/configmaps", body=body) == body
    assert stand_in.seen == [("POST", "/api/v1/namespaces/ns/configmaps", f"Bearer {TOKEN}", body)]


def test_a_refusal_is_the_typed_error_with_its_status_body(server: tuple[StandIn, str]) -> None:
    _, url = server
    client = blocking.BlockingClient(url, token=TOKEN)
    with pytest.raises(Invalid) as refused:
        client.request(
            "POST", "/api/v1/namespaces/ns/configmaps", body={"metadata": {"name": "refused"}}
        )
    assert refused.value.body["details"]["causes"] == [{"field": "data"}]


def test_get_decodes_an_object_and_raises_not_found(server: tuple[StandIn, str]) -> None:
    _, url = server
    assert blocking.get(f"{url}/api/v1/nodes/n1")["status"]["conditions"] == [{"type": "Ready"}]
    with pytest.raises(NotFound):
        blocking.get(f"{url}/api/v1/nodes/n2")


def test_a_probe_answers_the_status_or_zero(server: tuple[StandIn, str]) -> None:
    _, url = server
    assert blocking.probe(f"{url}/readyz", token=TOKEN) == 200
    assert blocking.probe(f"{url}/missing") == 404
    assert blocking.probe(f"http://127.0.0.1:{free_port()}/readyz", timeout=1) == 0


def test_an_unreachable_server_is_a_server_error_with_status_zero() -> None:
    client = blocking.BlockingClient(f"http://127.0.0.1:{free_port()}", timeout=1)
    with pytest.raises(ServerError) as failed:
        client.request("GET", "/api")
    assert failed.value.status == 0


async def test_calls_also_work_from_inside_a_running_event_loop(
    server: tuple[StandIn, str],
) -> None:
    _, url = server
    assert blocking.probe(f"{url}/readyz") == 200


def test_the_dev_client_keeps_its_status_and_body_contract(server: tuple[StandIn, str]) -> None:
    _, url = server
    plane = SimpleNamespace(server=url, token=TOKEN, ca_file=None)
    api = ApiClient(plane)  # type: ignore[arg-type]
    status, body = api("POST", "/api/v1/namespaces/ns/configmaps", {"metadata": {"name": "c"}})
    assert (status, body) == (200, {"metadata": {"name": "c"}})
    status, body = api(
        "POST", "/api/v1/namespaces/ns/configmaps", {"metadata": {"name": "refused"}}
    )
    assert (status, body["reason"]) == (422, "Invalid")
    assert api.ready()
    nowhere = SimpleNamespace(server=f"http://127.0.0.1:{free_port()}", token=None, ca_file=None)
    gone = ApiClient(nowhere)  # type: ignore[arg-type]
    with pytest.raises(OSError, match=r"(?i)connect"):
        gone("GET", "/api")
    assert not gone.ready()


@pytest.fixture
def hung_tls_server(tmp_path: Path) -> Iterator[tuple[str, ssl.SSLContext]]:
    """A TLS server that completes the handshake and then never answers (a starting apiserver)."""
    now = datetime.now(UTC)
    ca = issuing.make_ca("hung-ca", now=now, valid_for=timedelta(hours=1))
    leaf = issuing.issue_serving_cert(
        ca, dns_names=["localhost"], ips=["127.0.0.1"], now=now, valid_for=timedelta(hours=1)
    )
    (tmp_path / "tls.crt").write_bytes(leaf.cert_pem)
    (tmp_path / "tls.key").write_bytes(leaf.key_pem)
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
                held.append(serving.wrap_socket(connection, server_side=True))
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}", client
    finally:
        listener.close()
        for connection in held:
            connection.close()


def test_a_timed_out_tls_probe_leaks_no_socket(
    hung_tls_server: tuple[str, ssl.SSLContext],
) -> None:
    # A closed connection waits for the peer's close_notify; a loop closed under it leaked the
    # socket, which the test settings turn into an error once it is collected.
    url, context = hung_tls_server
    for _ in range(5):
        assert blocking.probe(f"{url}/readyz", tls=context, timeout=0.2) == 0
        gc.collect()
