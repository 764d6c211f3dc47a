"""``torchgate webhook`` over real TLS, with a certificate made by ``torchgate certs``.

The server runs as its own process, exactly as a Deployment would run it; the tests speak
AdmissionReview v1 to it through an HTTPS client that trusts only the CA ``torchgate certs`` made.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import pytest
import yaml

from tests.builders.job import gpu_job
from tests.builders.policy import parsed_policy, policy
from tests.builders.team import team_quota
from torchgate.cli import main as torchgate
from torchgate.pytorchjob.policy import DEFAULT_POLICY
from torchgate.webhook.review import evaluate
from torchgate_dev.ports import free_port

SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / "seeds" / "manifests"
ADMIN_SPEC = {"nodeSelector": {"pool": "a100"}, "sharedMemory": {"sizeLimit": "8Gi"}}
POLICY = policy("gpu-pool", **ADMIN_SPEC)
ADMIN_POLICY = parsed_policy("gpu-pool", **ADMIN_SPEC)


def make_certs(directory: Path, *extra: str) -> None:
    code = torchgate(["certs", "--out-dir", str(directory), "--ip", "127.0.0.1", *extra])
    assert code == 0


class Server:
    def __init__(self, tls: Path, policy_file: Path, *extra: str) -> None:
        self.tls = tls
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.log = tls / "webhook.log"
        command = [
            sys.executable,
            "-m",
            "torchgate",
            "webhook",
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--tls-cert-file",
            str(tls / "tls.crt"),
            "--tls-private-key-file",
            str(tls / "tls.key"),
            "--policy",
            str(policy_file),
            "--reload-interval",
            "0.2",
            *extra,
        ]
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        self._log_file = self.log.open("w")
        self.process = subprocess.Popen(
            command, stdout=self._log_file, stderr=subprocess.STDOUT, env=env
        )
        self._wait_ready()

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.tls / "ca.crt"))

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"webhook exited: {self.log.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"webhook did not listen: {self.log.read_text()}")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=10)
        finally:
            self._log_file.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tls = tmp_path_factory.mktemp("tls")
    make_certs(tls)
    policy_file = tls / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    running = Server(tls, policy_file)
    yield running
    assert running.stop() == 0, "SIGTERM must shut the webhook down cleanly"


def review(
    obj: Any, *, operation: str = "CREATE", old: Any = None, uid: str | None = None
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
        "resource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"},
        "namespace": "default",
        "operation": operation,
        "object": obj,
        "userInfo": {"username": "alice"},
    }
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


async def post(server: Server, route: str, body: Any, **kw: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = kw.pop("headers", {"Content-Type": "application/json"})
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            server.url + route, data=data, headers=headers, ssl=server.ssl_context()
        ) as response,
    ):
        text = await response.text()
        try:
            return response.status, json.loads(text)
        except json.JSONDecodeError:
            return response.status, text


def load_seed(name: str) -> dict[str, Any]:
    return yaml.safe_load((SEEDS / name).read_text())


async def test_mutate_returns_a_patch_that_gives_the_defaulted_job(server: Server) -> None:
    job = load_seed("000-pytorch-dist-mnist-nccl.yaml")
    sent = review(job, uid="uid-000")
    status, answer = await post(server, "/mutate", sent)
    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == "uid-000"
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    patched = jsonpatch.apply_patch(copy.deepcopy(job), patch)
    assert patched == evaluate(job, ADMIN_POLICY).object
    worker = patched["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert {"mountPath": "/dev/shm", "name": "torchgate-dshm"} in worker["containers"][0][
        "volumeMounts"
    ]
    assert worker["nodeSelector"] == {"pool": "a100"}
    assert all(w.startswith("torchgate: ") for w in response["warnings"])


async def test_validate_denies_seed_002_with_one_cause_per_error(server: Server) -> None:
    job = load_seed("002-resnet50-nccl-rdma-16.yaml")
    status, answer = await post(server, "/validate", review(job))
    assert status == 200
    response = answer["response"]
    assert response["allowed"] is False
    result = response["status"]
    assert (result["code"], result["reason"]) == (422, "Invalid")
    causes = {(c["reason"], c["field"]) for c in result["details"]["causes"]}
    worker = "spec.pytorchReplicaSpecs[Worker].template.spec"
    assert ("FieldValueForbidden", f"{worker}.containers[0].args") in causes
    assert ("FieldValueRequired", f"{worker}.containers[0].volumeMounts[5].mountPath") in causes
    assert ("FieldValueForbidden", f"{worker}.containers[0].env[2]") in causes
    assert ("FieldValueForbidden", f"{worker}.volumes[0].hostPath") in causes
    assert len(result["details"]["causes"]) == len(evaluate(job, DEFAULT_POLICY).errors)


async def test_update_compares_with_the_real_old_object(server: Server) -> None:
    old = gpu_job().run_policy(managedBy="kubeflow.org/training-operator").build()
    new = copy.deepcopy(old)
    new["spec"]["runPolicy"]["managedBy"] = "torchgate.io/controller"
    status, answer = await post(server, "/validate", review(new, operation="UPDATE", old=old))
    assert status == 200
    causes = answer["response"]["status"]["details"]["causes"]
    assert [(c["reason"], c["field"]) for c in causes] == [
        ("FieldValueInvalid", "spec.runPolicy.managedBy")
    ]
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"team": "vision"}
    status, answer = await post(
        server, "/validate", review(relabelled, operation="UPDATE", old=old)
    )
    assert answer["response"]["allowed"] is True


async def test_update_mutation_restores_lost_run_policy_and_defaults_changed_templates(
    server: Server,
) -> None:
    old = evaluate(gpu_job().build(), ADMIN_POLICY).object
    new = gpu_job().build()
    _, answer = await post(server, "/mutate", review(new, operation="UPDATE", old=old))
    patch = json.loads(base64.b64decode(answer["response"]["patch"]))
    patched = jsonpatch.apply_patch(new, patch)
    assert patched["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    assert patched["spec"]["pytorchReplicaSpecs"] == old["spec"]["pytorchReplicaSpecs"]
    assert "nodeSelector" in patched["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]


async def test_delete_and_other_kinds_are_allowed_untouched(server: Server) -> None:
    sent = review(gpu_job().build(), operation="DELETE")
    status, answer = await post(server, "/validate", sent)
    assert status == 200
    assert answer["response"] == {"uid": sent["request"]["uid"], "allowed": True}
    pod = review({"kind": "Pod"})
    pod["request"]["kind"] = {"group": "", "version": "v1", "kind": "Pod"}
    _, answer = await post(server, "/mutate", pod)
    assert answer["response"]["allowed"] is True
    assert "patch" not in answer["response"]


def admin_review(obj: dict[str, Any], resource: str, *, operation: str = "CREATE") -> Any:
    sent = review(obj, operation=operation)
    request = sent["request"]
    request["kind"] = {"group": "torchgate.io", "version": "v1alpha1", "kind": obj["kind"]}
    request["resource"] = {"group": "torchgate.io", "version": "v1alpha1", "resource": resource}
    del request["namespace"]  # cluster-scoped
    return sent


async def test_a_policy_or_quota_that_would_not_load_is_refused_with_its_field_paths(
    server: Server,
) -> None:
    bad_policy = policy(
        "typo", tolerations=[{"key": "gpu", "operator": "Exist", "effect": "NoSchedule"}]
    )
    bad_quota = team_quota("vision", ["vision"], nominalGPUs="eight")

    _, refused_policy = await post(
        server, "/validate", admin_review(bad_policy, "placementpolicies")
    )
    _, refused_quota = await post(server, "/validate", admin_review(bad_quota, "teamquotas"))
    _, allowed = await post(server, "/validate", admin_review(POLICY, "placementpolicies"))
    _, deleted = await post(
        server, "/validate", admin_review(bad_policy, "placementpolicies", operation="DELETE")
    )

    for response, kind, field in (
        (refused_policy["response"], "PlacementPolicy", "spec.tolerations[0].operator"),
        (refused_quota["response"], "TeamQuota", "spec.nominalGPUs"),
    ):
        assert response["allowed"] is False
        status = response["status"]
        assert (status["code"], status["reason"]) == (422, "Invalid")
        assert (status["details"]["group"], status["details"]["kind"]) == ("torchgate.io", kind)
        assert [c["field"] for c in status["details"]["causes"]] == [field]
    assert allowed["response"]["allowed"] is True
    assert deleted["response"]["allowed"] is True


async def test_a_policy_tying_with_a_loaded_one_is_allowed_with_a_warning_naming_it(
    server: Server,
) -> None:
    # "gpu-pool" (the file's) selects every namespace at priority 0.
    tied = policy("ml-team", namespaces=["ml"], **ADMIN_SPEC)
    above = policy("ml-team", namespaces=["ml"], priority=1, **ADMIN_SPEC)

    status, warned = await post(server, "/validate", admin_review(tied, "placementpolicies"))
    _, quiet = await post(server, "/validate", admin_review(above, "placementpolicies"))

    assert status == 200
    assert warned["response"]["allowed"] is True
    assert warned["response"]["warnings"] == [
        'torchgate: spec.priority: ties with PlacementPolicy "gpu-pool" at priority 0 on '
        'namespace ml ("gpu-pool" selects every namespace): only the names decide which '
        "applies; set different priorities"
    ]
    assert quiet["response"] == {"uid": quiet["response"]["uid"], "allowed": True}


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b"{not json", {"Content-Type": "application/json"}),
        (json.dumps(review({})).encode(), {"Content-Type": "text/plain"}),
        (
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}
            ).encode(),
            None,
        ),
        (json.dumps({"apiVersion": "v1", "kind": "Pod"}).encode(), None),
        (b"[]", None),
    ],
    ids=["bad-json", "wrong-content-type", "no-uid", "not-a-review", "not-an-object"],
)
async def test_malformed_requests_get_400(server: Server, body: bytes, headers: Any) -> None:
    status, answer = await post(
        server, "/validate", body, headers=headers or {"Content-Type": "application/json"}
    )
    assert status == 400
    assert isinstance(answer, str)
    assert answer.startswith("bad AdmissionReview")


async def test_json_with_parameters_is_a_json_body(server: Server) -> None:
    sent = review(gpu_job().build(), operation="DELETE")
    body = json.dumps(sent).encode()
    headers = {"Content-Type": "Application/JSON; charset=utf-8"}
    status, answer = await post(server, "/validate", body, headers=headers)
    assert status == 200
    assert answer["response"] == {"uid": sent["request"]["uid"], "allowed": True}


def test_oversize_body_gets_400_before_it_is_read(server: Server) -> None:
    connection = http.client.HTTPSConnection(
        "127.0.0.1", server.port, context=server.ssl_context(), timeout=10
    )
    try:
        connection.putrequest("POST", "/validate")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(8 * 1024 * 1024))
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 400
        assert response.read().startswith(b"bad AdmissionReview: body larger than")
    finally:
        connection.close()


async def test_health_readiness_and_metrics(server: Server) -> None:
    async with aiohttp.ClientSession() as session:
        for route in ("/healthz", "/readyz"):
            async with session.get(server.url + route, ssl=server.ssl_context()) as response:
                assert response.status == 200
        async with session.get(server.url + "/metrics", ssl=server.ssl_context()) as response:
            text = await response.text()
    assert 'torchgate_webhook_reviews_total{outcome="denied",route="validate"}' in text
    assert 'torchgate_webhook_policies{valid="true"} 1.0' in text


async def test_plain_http_is_refused(server: Server) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.get(f"http://127.0.0.1:{server.port}/healthz"):
                pass


def serial_of_served_certificate(server: Server) -> int:
    pem = ssl.get_server_certificate(("127.0.0.1", server.port))
    from cryptography import x509

    return x509.load_pem_x509_certificate(pem.encode()).serial_number


def test_certificate_is_reloaded_without_restart(server: Server) -> None:
    before = serial_of_served_certificate(server)
    make_certs(server.tls, "--force")
    deadline = time.monotonic() + 10
    while serial_of_served_certificate(server) == before:
        assert time.monotonic() < deadline, "the renewed certificate was never served"
        time.sleep(0.1)
    assert server.process.poll() is None
    status, _ = asyncio.run(post(server, "/validate", review(gpu_job().build())))
    assert status == 200


async def test_after_sigterm_it_answers_reviews_for_the_shutdown_delay_then_exits(
    tmp_path: Path,
) -> None:
    make_certs(tmp_path)
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    draining = Server(tmp_path, policy_file, "--shutdown-delay-seconds", "3")
    try:
        assert (await get(draining, "/readyz"))[0] == 200
        began = time.monotonic()
        draining.process.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.5)

        assert (await get(draining, "/readyz"))[0] == 503
        status, body = await post(draining, "/validate", review(load_seed("003-torchrun-cpu.yaml")))
        assert status == 200
        assert body["response"]["allowed"] is True
        assert draining.process.wait(timeout=10) == 0
        assert time.monotonic() - began >= 3
    finally:
        draining.process.kill()
        draining.stop()


def test_while_draining_each_answer_closes_its_connection(tmp_path: Path) -> None:
    """The apiserver keeps connections to a leaving pod: each must end with an answer, not idle."""
    make_certs(tmp_path)
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    draining = Server(tmp_path, policy_file, "--shutdown-delay-seconds", "5")
    body = json.dumps(review(load_seed("003-torchrun-cpu.yaml"))).encode()
    try:
        for route in ("/validate", "/mutate"):
            head, closed = answer_on_a_kept_connection(draining, route, body)
            assert head.startswith(b"HTTP/1.1 200"), route
            assert not closed, f"{route}: the server closed a kept connection before draining"
        draining.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)

        for route in ("/validate", "/mutate"):
            head, closed = answer_on_a_kept_connection(draining, route, body)
            assert head.startswith(b"HTTP/1.1 200"), route
            assert b"connection: close" in head.lower().split(b"\r\n"), route
            assert closed, f"{route}: the server kept the connection after a draining answer"
        head, closed = answer_on_a_kept_connection(draining, "/validate", b"{")
        assert head.startswith(b"HTTP/1.1 400")
        assert closed
        assert draining.process.wait(timeout=15) == 0
    finally:
        draining.process.kill()
        draining.stop()


def answer_on_a_kept_connection(server: Server, route: str, body: bytes) -> tuple[bytes, bool]:
    """Whether the server closes a keep-alive TLS connection after answering ``body`` on it.

    Returns the answer's head and ``True`` when EOF followed within a second.
    """
    request = (
        f"POST {route} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as plain,
        server.ssl_context().wrap_socket(plain, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(request + body)
        received = b""
        while b"\r\n\r\n" not in received:
            received += tls.recv(65536)
        head, _, rest = received.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += tls.recv(65536)
        tls.settimeout(1.0)
        try:
            closed = tls.recv(1) == b""
        except TimeoutError:
            closed = False
        except (ssl.SSLError, ConnectionResetError):
            closed = True
        return head, closed


async def get(server: Server, route: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(server.url + route, ssl=server.ssl_context()) as response,
    ):
        return response.status, await response.text()


def connections_server(tmp_path: Path, *extra: str) -> Server:
    make_certs(tmp_path)
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(POLICY))
    return Server(tmp_path, policy_file, *extra)


def tls_connection(server: Server) -> ssl.SSLSocket:
    """A connection whose TLS handshake is done and that has sent nothing."""
    plain = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return server.ssl_context().wrap_socket(plain, server_hostname="127.0.0.1")


def is_closed(connection: socket.socket) -> bool:
    """Whether the server closed ``connection`` (EOF or reset), without waiting."""
    connection.setblocking(False)
    try:
        return connection.recv(1) == b""
    except (BlockingIOError, ssl.SSLWantReadError):
        return False
    except OSError:  # a reset, or a TLS record cut short
        return True
    finally:
        connection.setblocking(True)


def still_open(connections: list[socket.socket], within: float) -> list[socket.socket]:
    """The connections the server has not closed ``within`` seconds from now."""
    deadline = time.monotonic() + within
    waiting = list(connections)
    while waiting and time.monotonic() < deadline:
        time.sleep(0.1)
        waiting = [c for c in waiting if not is_closed(c)]
    return waiting


def is_refused(server: Server) -> bool:
    """Whether a new connection is closed before it can ask anything."""
    try:
        with tls_connection(server) as connection:
            connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            return connection.recv(65536) == b""
    except OSError:  # reset before or during the handshake
        return True


def review_on(connection: ssl.SSLSocket, body: bytes) -> dict[str, Any]:
    """Send one review on a kept-alive connection and read its answer."""
    connection.sendall(
        b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    received = b""
    while b"\r\n\r\n" not in received:
        received += connection.recv(65536)
    head, _, rest = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        rest += connection.recv(65536)
    answer: dict[str, Any] = json.loads(rest)
    return answer


def test_connections_that_send_no_request_are_closed_while_reviews_are_answered(
    tmp_path: Path,
) -> None:
    """Idle connections (no handshake, no request, half a request head) cannot pile up."""
    server = connections_server(tmp_path, "--read-timeout-seconds", "2")
    idle: list[socket.socket] = []
    try:
        for _ in range(40):  # TCP only: the TLS handshake never starts
            idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
        for _ in range(40):  # handshake done, no request
            idle.append(tls_connection(server))
        for _ in range(10):  # half a request head, never finished
            connection = tls_connection(server)
            connection.sendall(b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            idle.append(connection)

        sent = review(load_seed("003-torchrun-cpu.yaml"))
        with tls_connection(server) as working:
            answer = review_on(working, json.dumps(sent).encode())
        assert answer["response"]["uid"] == sent["request"]["uid"]
        assert answer["response"]["allowed"] is True

        assert still_open(idle, within=15) == []
        assert server.process.poll() is None
    finally:
        for connection in idle:
            connection.close()
        assert server.stop() == 0


def test_a_review_body_that_trickles_is_refused_and_its_connection_closed(
    tmp_path: Path,
) -> None:
    server = connections_server(tmp_path, "--read-timeout-seconds", "2")
    try:
        with tls_connection(server) as slow:
            slow.sendall(
                b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
            )
            slow.settimeout(15)
            received = b""
            while chunk := slow.recv(65536):
                received += chunk
        assert received.startswith(b"HTTP/1.1 400"), received
        assert b"bad AdmissionReview: body not received within" in received
    finally:
        assert server.stop() == 0


def test_at_the_connection_cap_the_oldest_connection_that_asked_nothing_makes_room(
    tmp_path: Path,
) -> None:
    server = connections_server(tmp_path, "--max-connections", "8")
    body = json.dumps(review(load_seed("003-torchrun-cpu.yaml"))).encode()
    held = [tls_connection(server) for _ in range(8)]
    try:
        with tls_connection(server) as ninth:
            assert review_on(ninth, body)["response"]["allowed"] is True
        assert still_open(held[:1], within=5) == []
        assert still_open(held[1:], within=0.5) == held[1:]
    finally:
        for connection in held:
            connection.close()
        assert server.stop() == 0


def test_at_the_connection_cap_with_every_connection_asking_a_new_one_is_refused(
    tmp_path: Path,
) -> None:
    server = connections_server(tmp_path, "--max-connections", "8")
    body = json.dumps(review(load_seed("003-torchrun-cpu.yaml"))).encode()
    held = [tls_connection(server) for _ in range(8)]
    try:
        for connection in held:
            review_on(connection, body)
        assert is_refused(server)
        assert review_on(held[0], body)["response"]["allowed"] is True
    finally:
        for connection in held:
            connection.close()
        assert server.stop() == 0
