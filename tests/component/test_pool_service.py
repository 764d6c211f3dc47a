"""The controller's pool service: who may ask what, and the answers, over the real aiohttp app.

The apiserver is a fake that answers TokenReviews and SubjectAccessReviews from tables and
records what it was asked; the facts come from a real admitter. One test serves the app over
TLS with a certificate made by ``torchgate certs``, as the controller does.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from tests.builders.job import gpu_job, job
from tests.builders.node import node
from tests.unit.controller.helpers import ask, candidate
from torchgate.cli import main as torchgate
from torchgate.controller.admission.admitter import Admitter
from torchgate.controller.admission.waiting import Waiting
from torchgate.controller.job.reconciler import Options, is_ours
from torchgate.controller.poolservice import (
    DRAIN_SECONDS,
    AnswerBudget,
    PoolFacts,
    create_pool_app,
    serve_pool,
)
from torchgate.kube.access import AccessReviews
from torchgate.kube.errors import ServerError
from torchgate.pytorchjob.fieldpath import FieldError, FieldPath, invalid
from torchgate.pytorchjob.outlook import (
    FORECAST_PATH,
    JOBS_PATH,
    POOL_PATH,
    TOKEN_HEADER,
    forecast_from_json,
    forecast_warning,
    outlook_from_json,
    pool_from_json,
)

WEBHOOK = "system:serviceaccount:torchgate-system:torchgate-webhook"
ALICE = "alice"


class Apiserver:
    """TokenReview and SubjectAccessReview from tables; every review kept."""

    def __init__(self, allowed: Iterable[tuple[str, str, str, str]]) -> None:
        self.tokens = {"webhook-token": WEBHOOK, "alice-token": ALICE}
        self.allowed = set(allowed)  # (user, verb, resource, namespace)
        self.reviews: list[dict[str, Any]] = []
        self.down = False

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        if self.down:
            raise ServerError(0, "Unreachable", "refused", method, path)
        body = kw["body"]
        self.reviews.append(body)
        if body["kind"] == "TokenReview":
            user = self.tokens.get(body["spec"]["token"])
            if user is None:
                return {"status": {"authenticated": False}}
            return {"status": {"authenticated": True, "user": {"username": user, "groups": []}}}
        spec, attributes = body["spec"], body["spec"]["resourceAttributes"]
        asked = (
            spec["user"],
            attributes["verb"],
            attributes["resource"],
            attributes.get("namespace", ""),
        )
        return {"status": {"allowed": asked in self.allowed}}

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}

    def kinds(self) -> list[str]:
        return [review["kind"] for review in self.reviews]


class HungApiserver(Apiserver):
    """An apiserver that takes every review and never answers (stopped, or its etcd is)."""

    def __init__(self) -> None:
        super().__init__(())
        self.asked = asyncio.Event()

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        self.asked.set()
        await asyncio.Event().wait()


def cluster() -> Admitter:
    admitter = Admitter(on_admit_job=lambda key: None, on_reason=lambda key: None)
    for index in range(2):
        admitter.on_node("ADDED", node(f"n{index}"), None)
    return admitter


def facts_of(
    admitter: Admitter,
    *,
    synced: bool = True,
    jobs: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
    manage_unowned: bool = True,
) -> PoolFacts:
    def make_candidate(raw: Mapping[str, Any], since: float) -> Waiting | list[FieldError]:
        replicas = raw["spec"]["pytorchReplicaSpecs"]["Master"].get("replicas", 1)
        if not isinstance(replicas, int):
            path = FieldPath.root("spec", "pytorchReplicaSpecs").key("Master").child("replicas")
            return [invalid(path, replicas, "must be an integer")]
        return candidate(dict(raw), since=since)

    return PoolFacts(
        snapshot=lambda extra, gpu: admitter.snapshot(extra, gpu_resource=gpu),
        candidate=make_candidate,
        policies=lambda: (),
        synced=lambda: synced,
        clock=admitter.clock,
        ours=lambda raw: is_ours(raw, Options(manage_unowned=manage_unowned)),
        cached=lambda namespace, name: (jobs or {}).get((namespace, name)),
    )


@pytest.fixture
def apiserver() -> Apiserver:
    return Apiserver(
        {
            (WEBHOOK, "create", "forecasts", "team-a"),
            (ALICE, "get", "pytorchjobs", "team-a"),
            (ALICE, "get", "pools", ""),
        }
    )


@pytest.fixture
async def client(apiserver: Apiserver, aiohttp_client: Any) -> TestClient[Any, Any]:
    admitter = cluster()
    key = ask(admitter, gpu_job("running", namespace="team-a", workers=1, gpus=8).build())
    admitter.cycle()
    assert admitter.ledger.reservations[key]
    app = create_pool_app(facts_of(admitter), AccessReviews(apiserver))  # type: ignore[arg-type]
    return await aiohttp_client(app)  # type: ignore[no-any-return]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_the_webhook_gets_a_forecast_for_a_job_in_a_namespace_it_may_ask_about(
    client: TestClient[Any, Any], apiserver: Apiserver
) -> None:
    body = {"job": job("next", "team-a").master(gpus=8).build()}

    response = await client.post(FORECAST_PATH, json=body, headers=bearer("webhook-token"))

    assert response.status == 200
    told = forecast_from_json(await response.json())
    assert told.verdict == "Wait"
    assert told.message == "waiting for 8 nvidia.com/gpu in the cluster: 0 free"
    sar = apiserver.reviews[-1]["spec"]
    assert sar["user"] == WEBHOOK
    assert sar["resourceAttributes"] == {
        "verb": "create",
        "group": "torchgate.io",
        "resource": "forecasts",
        "namespace": "team-a",
    }


@pytest.mark.parametrize(
    ("suspend", "verdict", "reason"),
    [(False, "Start", ""), (True, "Wait", "PyTorchJobSuspended")],
    ids=["resumed", "suspended"],
)
async def test_a_suspended_job_is_forecast_to_wait_for_its_resumption_not_to_start(
    apiserver: Apiserver, aiohttp_client: Any, suspend: bool, verdict: str, reason: str
) -> None:
    # Free GPUs: only its suspension keeps it from starting (the controller creates no pod of
    # a suspended job and does not queue it), so no node is named for it.
    app = create_pool_app(facts_of(cluster()), AccessReviews(apiserver))  # type: ignore[arg-type]
    client = await aiohttp_client(app)
    held = job("held", "team-a").master(gpus=8).run_policy(suspend=suspend).build()

    response = await client.post(FORECAST_PATH, json={"job": held}, headers=bearer("webhook-token"))

    assert response.status == 200
    told = forecast_from_json(await response.json())
    assert (told.verdict, told.starts_now, told.reason) == (verdict, not suspend, reason)
    assert bool(told.nodes) is not suspend
    assert told.place is None


@pytest.mark.parametrize(
    ("manager", "verdict", "reason"),
    [
        ("torchgate.io/controller", "Start", ""),
        ("kubeflow.org/training-operator", "Wait", "ManagedElsewhere"),
    ],
    ids=["torchgate", "training-operator"],
)
async def test_a_job_another_controller_runs_is_forecast_to_be_run_by_it_not_to_start(
    apiserver: Apiserver, aiohttp_client: Any, manager: str, verdict: str, reason: str
) -> None:
    # Free GPUs: only its manager keeps torchgate from starting it (the controller leaves a job
    # another controller manages alone: no pod, no place in the queue).
    app = create_pool_app(facts_of(cluster()), AccessReviews(apiserver))  # type: ignore[arg-type]
    client = await aiohttp_client(app)
    theirs = job("theirs", "team-a").master(gpus=8).run_policy(managedBy=manager).build()

    response = await client.post(
        FORECAST_PATH, json={"job": theirs}, headers=bearer("webhook-token")
    )

    assert response.status == 200
    told = forecast_from_json(await response.json())
    assert (told.verdict, told.reason, bool(told.nodes), told.place) == (
        verdict,
        reason,
        verdict == "Start",
        None,
    )
    warning = forecast_warning(told)
    assert ("will start now" in warning) is (verdict == "Start")
    assert (manager in warning) is (verdict == "Wait")


@pytest.mark.parametrize(
    ("manager", "manage_unowned", "runs"),
    [
        (None, False, False),  # names no manager, no --manage-unowned: not run
        (None, True, True),
        ("torchgate.io/controller", False, True),
        ("kubeflow.org/training-operator", True, False),
    ],
    ids=["unowned", "unowned-managed", "torchgate", "training-operator"],
)
async def test_a_jobs_outlook_says_whether_this_controller_runs_it(
    apiserver: Apiserver,
    aiohttp_client: Any,
    manager: str | None,
    manage_unowned: bool,
    runs: bool,
) -> None:
    built = job("mine", "team-a").master(gpus=8)
    raw = (built if manager is None else built.run_policy(managedBy=manager)).build()
    facts = facts_of(cluster(), jobs={("team-a", "mine"): raw}, manage_unowned=manage_unowned)
    client = await aiohttp_client(create_pool_app(facts, AccessReviews(apiserver)))  # type: ignore[arg-type]

    mine = await client.get(f"{JOBS_PATH}/team-a/mine", headers=bearer("alice-token"))
    unseen = await client.get(f"{JOBS_PATH}/team-a/unseen", headers=bearer("alice-token"))

    assert (mine.status, unseen.status) == (200, 200)
    assert outlook_from_json(await mine.json()).runs is runs
    assert outlook_from_json(await unseen.json()).runs is None  # not cached: not known


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, 401), (bearer("forged"), 401), (bearer("alice-token"), 403)],
    ids=["no-token", "unknown-token", "not-allowed"],
)
async def test_callers_without_a_token_rbac_accepts_get_nothing(
    client: TestClient[Any, Any], headers: dict[str, str], status: int
) -> None:
    body = {"job": job("next", "team-a").master(gpus=8).build()}

    response = await client.post(FORECAST_PATH, json=body, headers=headers)

    assert response.status == status
    answer = await response.json()
    assert answer["code"] == status
    assert "verdict" not in answer


async def test_a_token_through_the_apiservers_proxy_header_counts_as_the_callers(
    client: TestClient[Any, Any],
) -> None:
    response = await client.get(
        f"{JOBS_PATH}/team-a/running", headers={TOKEN_HEADER: "Bearer alice-token"}
    )

    assert response.status == 200
    outlook = outlook_from_json(await response.json())
    assert outlook.known
    assert set(outlook.nodes.values()) == {"n0", "n1"}


async def test_a_job_in_a_namespace_one_may_not_read_is_not_explained(
    client: TestClient[Any, Any],
) -> None:
    response = await client.get(f"{JOBS_PATH}/team-b/running", headers=bearer("alice-token"))

    assert response.status == 403


async def test_the_pool_view_needs_get_on_pools(client: TestClient[Any, Any]) -> None:
    allowed = await client.get(POOL_PATH, headers=bearer("alice-token"))
    refused = await client.get(POOL_PATH, headers=bearer("webhook-token"))

    assert allowed.status == 200
    assert pool_from_json(await allowed.json()).total_gpus == 16_000
    assert refused.status == 403


async def test_reviews_are_cached_so_each_admission_costs_the_apiserver_nothing(
    client: TestClient[Any, Any], apiserver: Apiserver
) -> None:
    body = {"job": job("next", "team-a").master(gpus=1).build()}
    for _ in range(5):
        response = await client.post(FORECAST_PATH, json=body, headers=bearer("webhook-token"))
        assert response.status == 200

    assert apiserver.kinds() == ["TokenReview", "SubjectAccessReview"]


async def test_an_apiserver_that_does_not_answer_the_review_gives_503(
    client: TestClient[Any, Any], apiserver: Apiserver
) -> None:
    apiserver.down = True

    response = await client.get(POOL_PATH, headers=bearer("alice-token"))

    assert response.status == 503


@pytest.mark.parametrize(
    ("body", "status"),
    [(b"not json", 400), (b'{"job": 3}', 400), (b'{"nojob": {}}', 400)],
    ids=["not-json", "job-not-an-object", "no-job"],
)
async def test_a_body_that_is_not_a_job_is_a_bad_request(
    client: TestClient[Any, Any], body: bytes, status: int
) -> None:
    response = await client.post(FORECAST_PATH, data=body, headers=bearer("webhook-token"))

    assert response.status == status


async def test_a_job_the_controller_could_not_run_gets_its_field_errors(
    client: TestClient[Any, Any],
) -> None:
    broken = job("broken", "team-a").master(gpus=1).build()
    broken["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "two"

    response = await client.post(
        FORECAST_PATH, json={"job": broken}, headers=bearer("webhook-token")
    )

    assert response.status == 422
    causes = (await response.json())["details"]["causes"]
    assert [cause["field"] for cause in causes] == ["spec.pytorchReplicaSpecs[Master].replicas"]


async def test_before_the_caches_are_synced_it_answers_503(
    apiserver: Apiserver, aiohttp_client: Any
) -> None:
    app = create_pool_app(facts_of(cluster(), synced=False), AccessReviews(apiserver))  # type: ignore[arg-type]
    client = await aiohttp_client(app)

    response = await client.get(POOL_PATH, headers=bearer("alice-token"))

    assert response.status == 503


def tls_contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A serving TLS context and a client one trusting it (``torchgate certs`` in ``tmp_path``)."""
    assert torchgate(["certs", "--out-dir", str(tmp_path), "--ip", "127.0.0.1"]) == 0
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    return serving, ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))


async def test_it_serves_tls_only_with_the_certificate_torchgate_certs_made(
    apiserver: Apiserver, tmp_path: Path, unused_tcp_port: int
) -> None:
    context, trusting = tls_contexts(tmp_path)
    runner = await serve_pool(
        facts_of(cluster()),
        AccessReviews(apiserver),  # type: ignore[arg-type]
        bind="127.0.0.1",
        port=unused_tcp_port,
        tls=context,
    )
    try:
        async with aiohttp.ClientSession() as session:
            url = f"127.0.0.1:{unused_tcp_port}{POOL_PATH}"
            async with session.get(
                f"https://{url}", ssl=trusting, headers=bearer("alice-token")
            ) as ok:
                assert ok.status == 200
            with pytest.raises(aiohttp.ClientError):
                async with session.get(f"http://{url}") as plain:
                    await plain.read()
    finally:
        await runner.cleanup()


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    """Whether the server closes the connection (EOF or reset) within ``within`` seconds."""
    try:
        return await asyncio.wait_for(reader.read(), timeout=within) == b""
    except TimeoutError:
        return False
    except (ConnectionError, ssl.SSLError):
        return True


async def test_connections_that_ask_nothing_are_closed_and_at_the_cap_make_room(
    apiserver: Apiserver, tmp_path: Path, unused_tcp_port: int
) -> None:
    """Rule 8: connections that never ask cannot pile up in the controller's memory."""
    context, trusting = tls_contexts(tmp_path)
    runner = await serve_pool(
        facts_of(cluster()),
        AccessReviews(apiserver),  # type: ignore[arg-type]
        bind="127.0.0.1",
        port=unused_tcp_port,
        tls=context,
        max_connections=4,
        read_timeout=1.0,
    )
    idle = [
        await asyncio.open_connection(
            "127.0.0.1", unused_tcp_port, ssl=trusting, server_hostname="127.0.0.1"
        )
        for _ in range(4)
    ]
    try:
        async with aiohttp.ClientSession() as session:  # a fifth connection, at the cap
            url = f"https://127.0.0.1:{unused_tcp_port}{POOL_PATH}"
            async with session.get(url, ssl=trusting, headers=bearer("alice-token")) as ok:
                assert ok.status == 200
        for reader, _ in idle:
            assert await closed_by_server(reader, within=15)
    finally:
        for _, writer in idle:
            writer.close()
        await runner.cleanup()


async def test_stopping_waits_for_answers_in_flight_only_briefly(
    tmp_path: Path, unused_tcp_port: int
) -> None:
    """An answer waiting on a hung apiserver must not keep a stopping leader from its Lease."""
    context, trusting = tls_contexts(tmp_path)
    apiserver = HungApiserver()
    runner = await serve_pool(
        facts_of(cluster()),
        AccessReviews(apiserver),  # type: ignore[arg-type]
        bind="127.0.0.1",
        port=unused_tcp_port,
        tls=context,
    )
    async with aiohttp.ClientSession() as session:
        url = f"https://127.0.0.1:{unused_tcp_port}{POOL_PATH}"
        asking = asyncio.create_task(session.get(url, ssl=trusting, headers=bearer("alice-token")))
        await asyncio.wait_for(apiserver.asked.wait(), timeout=10)

        # aiohttp gives a handler DRAIN_SECONDS to finish, then as long again once cancelled.
        await asyncio.wait_for(runner.cleanup(), timeout=2 * DRAIN_SECONDS + 1)

        with pytest.raises(aiohttp.ClientError):
            await asking


async def test_answers_past_their_share_of_the_controllers_time_are_refused_at_once(
    apiserver: Apiserver, aiohttp_client: Any
) -> None:
    admitter = cluster()
    budget = AnswerBudget(share=0.0, burst=1e-9)  # one answer, then nothing
    app = create_pool_app(facts_of(admitter), AccessReviews(apiserver), budget)  # type: ignore[arg-type]
    client = await aiohttp_client(app)

    first = await client.get(POOL_PATH, headers=bearer("alice-token"))
    second = await client.get(POOL_PATH, headers=bearer("alice-token"))

    assert (first.status, second.status) == (200, 503)
    assert "busy" in (await second.json())["message"]


def test_the_budget_refills_at_its_share_up_to_its_burst() -> None:
    now = [0.0]
    budget = AnswerBudget(share=0.25, burst=1.0, clock=lambda: now[0])

    budget.spend(1.5)
    assert not budget.allows()
    now[0] = 1.0  # refilled by 0.25 s
    assert not budget.allows()
    now[0] = 3.0  # by 0.75 s in all: 0.25 left
    assert budget.allows()
    now[0] = 100.0
    budget.allows()
    assert budget.level == 1.0
