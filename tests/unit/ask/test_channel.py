"""How commands reach the pool service: the apiserver's proxy with the user's token, or a URL.

And what they say when a web page answers where the apiserver or the pool service was expected:
one line, the documented exit code, never a traceback (a real local HTTP server answers).
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from torchgate.ask.channel import PoolChannel, Target, Unanswered, target_from
from torchgate.cli import main
from torchgate.kube.errors import Forbidden, Invalid, ServerError


class UserClient:
    """The user's cluster client: credentials from the kubeconfig, requests recorded."""

    def __init__(self, token: str | None = "user-token", error: Exception | None = None) -> None:
        self.token = token
        self.error = error
        self.sent: list[tuple[str, str, Any, dict[str, str]]] = []

    async def authorize(self, headers: dict[str, str]) -> None:
        if self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"  # as kubernetes_asyncio spells it

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        self.sent.append((method, path, kw.get("body"), dict(kw.get("headers") or {})))
        if self.error is not None:
            raise self.error
        return {"ok": True}


def test_a_url_flag_wins_over_the_environment_and_the_service_is_the_default() -> None:
    environ = {"TORCHGATE_CONTROLLER": "https://env:1", "TORCHGATE_CONTROLLER_CA": "/env/ca"}

    assert target_from("https://flag:2", None, None, environ) == Target(
        "https://flag:2", Path("/env/ca"), "torchgate-system"
    )
    assert target_from(None, None, None, environ).url == "https://env:1"
    assert target_from(None, None, "ops", {}) == Target(None, None, "ops")


async def test_through_the_proxy_the_token_travels_in_torchgates_header() -> None:
    user = UserClient()
    channel = PoolChannel(user, Target())  # type: ignore[arg-type]

    assert await channel.post("/v1/forecast", {"job": {}}) == {"ok": True}

    ((method, path, body, headers),) = user.sent
    assert (method, body) == ("POST", {"job": {}})
    assert path == (
        "/api/v1/namespaces/torchgate-system/services/https:torchgate-controller:https/proxy"
        "/v1/forecast"
    )
    assert headers == {"X-Torchgate-Authorization": "Bearer user-token"}


async def test_a_kubeconfig_without_a_token_says_why_it_cannot_ask() -> None:
    channel = PoolChannel(UserClient(token=None), Target())  # type: ignore[arg-type]

    with pytest.raises(Unanswered, match="no bearer token"):
        await channel.get("/v1/pool")


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (Forbidden(403, "Forbidden", "alice may not get pools", "GET", "/p"), "refused"),
        (ServerError(503, "ServiceUnavailable", "no endpoints", "GET", "/p"), "did not answer"),
    ],
    ids=["forbidden", "no-endpoints"],
)
async def test_failures_become_one_line_for_a_person(error: Exception, said: str) -> None:
    channel = PoolChannel(UserClient(error=error), Target())  # type: ignore[arg-type]

    with pytest.raises(Unanswered, match=said):
        await channel.get("/v1/pool")


# The apiserver's 403 when RBAC denies ``services/proxy`` (its ``NewForbidden``: details name
# the Service it would not proxy to, kind the resource).
PROXY_DENIED: Final = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": 'services "https:torchgate-controller:https" is forbidden: User "alice" cannot '
    'get resource "services/proxy" in API group "" in the namespace "torchgate-system"',
    "reason": "Forbidden",
    "details": {"name": "https:torchgate-controller:https", "kind": "services"},
    "code": 403,
}
# The pool service's own 403 (its SubjectAccessReview said no): no details.
POOL_DENIED: Final = {"kind": "Status", "message": "alice may not get pools.torchgate.io"}


@pytest.mark.parametrize(
    ("target", "body", "refuser"),
    [
        (Target(), PROXY_DENIED, "the apiserver (its proxy to the controller)"),
        (Target(), POOL_DENIED, "the controller"),
        # A URL's server is the pool service, whatever its body says.
        (Target("https://127.0.0.1:1"), PROXY_DENIED, "the controller"),
    ],
    ids=["rbac-denies-the-proxy", "pool-service-denies", "direct"],
)
async def test_a_refusal_says_whether_the_apiserver_or_the_controller_refused(
    target: Target, body: dict[str, Any], refuser: str
) -> None:
    error = Forbidden(403, "Forbidden", str(body["message"]), "GET", "/p", body=body)
    channel = PoolChannel(UserClient(error=error), target)  # type: ignore[arg-type]
    channel._direct = UserClient(error=error)  # type: ignore[assignment]

    with pytest.raises(Unanswered) as unanswered:
        await channel.get("/v1/pool")

    assert str(unanswered.value) == f"{refuser} refused: {body['message']}"


async def test_a_job_the_pool_service_cannot_run_is_refused_with_the_fields_it_names() -> None:
    body = {
        "message": "the controller could not run this job",
        "details": {
            "causes": [
                {"field": "spec.pytorchReplicaSpecs.Worker.replicas", "message": "must be >= 0"},
                {"message": "no pytorch container"},
                "not a cause",
            ]
        },
    }
    error = Invalid(422, "Invalid", str(body["message"]), "POST", "/p", body=body)
    channel = PoolChannel(UserClient(error=error), Target())  # type: ignore[arg-type]

    with pytest.raises(Unanswered) as unanswered:
        await channel.post("/v1/forecast", {"job": {}})

    assert str(unanswered.value) == (
        "the controller refused the request: the controller could not run this job "
        "(spec.pytorchReplicaSpecs.Worker.replicas: must be >= 0; no pytorch container)"
    )


@pytest.mark.parametrize(
    ("ca_file", "said"),
    [
        ("missing.crt", "cannot read: No such file or directory"),
        (".", "cannot read: Is a directory"),
        ("not-a-certificate.crt", "no PEM certificate in it"),
    ],
    ids=["missing", "directory", "not-pem"],
)
async def test_a_controller_ca_that_cannot_be_used_is_one_line_naming_the_file(
    tmp_path: Path, ca_file: str, said: str
) -> None:
    (tmp_path / "not-a-certificate.crt").write_text("kind: PyTorchJob\n")
    path = tmp_path / ca_file
    channel = PoolChannel(UserClient(), Target("https://127.0.0.1:1", path))  # type: ignore[arg-type]

    with pytest.raises(Unanswered) as unanswered:
        await channel.get("/v1/pool")

    assert str(unanswered.value) == f"--controller-ca {path}: {said}"


class WebPages(http.server.BaseHTTPRequestHandler):
    """A web server where the apiserver or the pool service was expected: JSON for the job only.

    ``/apis/...`` answers a PyTorchJob (and empty lists for its pods and Events) when the class
    attribute ``apiserver_json`` is set; everything else is an HTML page with status 200.
    """

    apiserver_json = True
    PAGE = b"<html><body>Welcome to nginx!</body></html>"

    def do_GET(self) -> None:
        if self.apiserver_json and self.path.startswith(("/apis/", "/api/")):
            job = {"metadata": {"name": "more", "namespace": "team-vision"}, "status": {}}
            body = json.dumps(job if "/pytorchjobs/" in self.path else {"items": []}).encode()
            kind = "application/json"
        else:
            body, kind = self.PAGE, "text/html"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def web_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """A local web server answering pages, and a kubeconfig naming it as the apiserver."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), WebPages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    for variable in ("KUBERNETES_SERVICE_HOST", "TORCHGATE_CONTROLLER", "TORCHGATE_CONTROLLER_CA"):
        monkeypatch.delenv(variable, raising=False)
    try:
        yield url, kubeconfig
    finally:
        server.shutdown()
        server.server_close()
        WebPages.apiserver_json = True


def test_top_meeting_a_web_page_for_the_pool_service_says_so_in_one_line_and_exits_2(
    web_page: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, kubeconfig = web_page

    assert main(["top", "--kubeconfig", str(kubeconfig), "--controller", url]) == 2

    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"torchgate top: the pool service's URL ({url}) gave an answer")


def test_explain_meeting_a_web_page_for_the_pool_service_explains_from_the_jobs_status(
    web_page: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, kubeconfig = web_page
    arguments = ["explain", "team-vision/more", "--kubeconfig", str(kubeconfig)]

    assert main([*arguments, "--controller", url, "-o", "json"]) == 0

    captured = capsys.readouterr()
    explained = json.loads(captured.out)
    assert (explained["job"], explained["live"]) == ("team-vision/more", False)
    assert explained["controller"].startswith(f"the pool service's URL ({url}) gave an answer")
    assert captured.err == ""


def test_explain_meeting_a_web_page_for_the_apiserver_says_so_in_one_line_and_exits_2(
    web_page: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig = web_page
    WebPages.apiserver_json = False

    assert main(["explain", "team-vision/more", "--kubeconfig", str(kubeconfig)]) == 2

    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("torchgate explain: GET /apis/kubeflow.org/v1/namespaces/team-vision")
    assert "HTTP 200 NotJSON: an answer that is not JSON (text/html" in line


async def test_a_controller_not_listening_at_its_url_is_unreachable() -> None:
    channel = PoolChannel(UserClient(), Target("http://127.0.0.1:1"))  # type: ignore[arg-type]

    with pytest.raises(Unanswered, match=r"\(http://127.0.0.1:1\) did not answer: unreachable"):
        await channel.get("/v1/pool")
    await channel.close()


def test_top_through_the_proxy_of_an_apiserver_that_does_not_answer_says_the_cluster_did_not(
    web_page: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig = web_page
    kubeconfig.write_text(kubeconfig.read_text().replace(web_page[0], "http://127.0.0.1:1"))

    assert main(["top", "--kubeconfig", str(kubeconfig)]) == 2

    (line,) = capsys.readouterr().err.splitlines()
    proxied = "/api/v1/namespaces/torchgate-system/services/https:torchgate-controller:https/proxy"
    assert line.startswith(f"torchgate top: cannot reach the cluster (GET {proxied}/v1/pool): ")
