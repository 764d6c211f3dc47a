"""How commands reach the pool service: the apiserver's proxy with the user's token, or a URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from torchgate.ask.channel import PoolChannel, Target, Unanswered, target_from
from torchgate.kube.errors import Forbidden, ServerError


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
        (ServerError(0, "Unreachable", "refused", "GET", "/p"), "unreachable"),
    ],
    ids=["forbidden", "no-endpoints", "unreachable"],
)
async def test_failures_become_one_line_for_a_person(error: Exception, said: str) -> None:
    channel = PoolChannel(UserClient(error=error), Target())  # type: ignore[arg-type]

    with pytest.raises(Unanswered, match=said):
        await channel.get("/v1/pool")


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
