"""Leader election: two candidates on one in-memory Lease, with renewals that hang or fail.

The Lease store below keeps a resourceVersion and answers 409 to a stale write, as the apiserver
does; a candidate's requests can be made to hang (a partitioned apiserver connection) or to fail.
The timings are scaled down (lease 1 s, renew deadline 0.6 s, retry 0.05 s).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from torchgate.controller.leader import LeaderElector, released_spec
from torchgate.kube.errors import AlreadyExists, Conflict, NotFound, ServerError

LEASE = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/ctl"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
TIMINGS = {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.05}


class LeaseStore:
    """One Lease object with optimistic concurrency."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.writes: list[str] = []

    def handle(self, method: str, path: str, body: Any) -> Any:
        if method == "GET":
            if self.lease is None:
                raise NotFound(404, "NotFound", "no lease", method, path)
            return copy.deepcopy(self.lease)
        if method == "POST":
            if self.lease is not None:
                raise AlreadyExists(409, "AlreadyExists", "exists", method, path)
            return self._store(body)
        if method == "PUT":
            assert self.lease is not None
            if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
                raise Conflict(409, "Conflict", "stale", method, path)
            return self._store(body)
        raise AssertionError(method)

    def _store(self, body: Any) -> Any:
        self.version += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        self.writes.append(str(self.lease["spec"]["holderIdentity"]))
        return copy.deepcopy(self.lease)


class Api:
    """One candidate's connection to the store; it can hang or fail on demand."""

    def __init__(self, store: LeaseStore) -> None:
        self.store = store
        self.hang = asyncio.Event()
        self.fail = False
        # Writes reach the store, their answers never come back (a take in flight when stopped).
        self.lose_write_answers = False
        self.write_lost = asyncio.Event()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "",
    ) -> Any:
        del query, content_type
        if self.hang.is_set():
            await asyncio.Event().wait()  # never answers (the client timeout is 30 s)
        if self.fail:
            raise ServerError(503, "ServiceUnavailable", "down", method, path)
        await asyncio.sleep(0)
        answer = self.store.handle(method, path, body)
        if self.lose_write_answers and method != "GET":
            self.write_lost.set()
            await asyncio.Event().wait()
        return answer

    def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        raise NotImplementedError


def candidate(store: LeaseStore, identity: str) -> tuple[LeaderElector, Api]:
    api = Api(store)
    elector = LeaderElector(api, namespace="ns", name="ctl", identity=identity, **TIMINGS)
    return elector, api


async def test_one_candidate_leads_and_the_other_waits_while_it_renews() -> None:
    store = LeaseStore()
    first, _ = candidate(store, "a")
    second, _ = candidate(store, "b")
    await first.acquire()
    holding = asyncio.create_task(first.hold())
    waiting = asyncio.create_task(second.acquire())

    await asyncio.sleep(2.5)  # longer than the lease: renewals keep it

    assert not waiting.done()
    assert store.lease is not None
    assert store.lease["spec"]["holderIdentity"] == "a"
    assert set(store.writes) == {"a"}
    holding.cancel()
    waiting.cancel()


async def test_a_leader_whose_renewal_hangs_stops_before_the_other_can_take_over() -> None:
    store = LeaseStore()
    leader, leader_api = candidate(store, "a")
    successor, _ = candidate(store, "b")
    await leader.acquire()
    loop = asyncio.get_running_loop()
    holding = asyncio.create_task(leader.hold())
    await asyncio.sleep(0.2)
    leader_api.hang.set()
    taking_over = asyncio.create_task(successor.acquire())

    await asyncio.wait_for(holding, timeout=5)
    stopped = loop.time()
    assert not leader.is_leader
    await asyncio.wait_for(taking_over, timeout=5)
    took_over = loop.time()

    assert stopped < took_over, "the old leader stops acting before the new one leads"
    assert store.lease is not None
    assert store.lease["spec"]["holderIdentity"] == "b"
    assert store.lease["spec"]["leaseTransitions"] == 1


async def test_a_leader_whose_renewals_fail_stops_after_the_renew_deadline() -> None:
    store = LeaseStore()
    leader, leader_api = candidate(store, "a")
    await leader.acquire()
    loop = asyncio.get_running_loop()
    holding = asyncio.create_task(leader.hold())
    await asyncio.sleep(0.2)
    leader_api.fail = True
    failing_since = loop.time()

    await asyncio.wait_for(holding, timeout=5)

    assert loop.time() - failing_since == pytest.approx(0.6, abs=0.25)
    assert not leader.is_leader


async def test_a_released_lease_is_taken_at_once() -> None:
    store = LeaseStore()
    leader, _ = candidate(store, "a")
    successor, _ = candidate(store, "b")
    await leader.acquire()
    await leader.release()
    loop = asyncio.get_running_loop()
    began = loop.time()

    await asyncio.wait_for(successor.acquire(), timeout=5)

    assert loop.time() - began < 0.5, "no need to wait for the lease to expire"
    assert store.lease is not None
    assert store.lease["spec"]["holderIdentity"] == "b"


async def test_a_release_the_apiserver_never_answers_ends_within_the_renew_deadline() -> None:
    store = LeaseStore()
    leader, leader_api = candidate(store, "a")
    await leader.acquire()
    leader_api.hang.set()
    loop = asyncio.get_running_loop()
    began = loop.time()

    await asyncio.wait_for(leader.release(), timeout=5)

    assert loop.time() - began <= TIMINGS["renew_deadline"] + 0.25
    assert not leader.is_leader
    assert store.lease is not None
    assert store.lease["spec"]["holderIdentity"] == "a", "the Lease simply expires"


@pytest.mark.parametrize("lease_on_the_server", ["free", "absent"])
async def test_a_candidate_stopped_while_its_take_is_in_flight_gives_the_lease_up(
    lease_on_the_server: str,
) -> None:
    """Its write was applied, its answer never read: the Lease is its own all the same."""
    store = LeaseStore()
    if lease_on_the_server == "free":
        store.lease = {"metadata": {"resourceVersion": "0"}, "spec": {"leaseTransitions": 4}}
    stopped, stopped_api = candidate(store, "a")
    successor, _ = candidate(store, "b")
    stopped_api.lose_write_answers = True
    acquiring = asyncio.create_task(stopped.acquire())
    await stopped_api.write_lost.wait()  # the take reached the apiserver, its answer is lost
    assert store.lease is not None
    assert store.lease["spec"]["holderIdentity"] == "a"
    acquiring.cancel()
    await asyncio.gather(acquiring, return_exceptions=True)
    assert not stopped.is_leader
    stopped_api.lose_write_answers = False

    await asyncio.wait_for(stopped.release(), timeout=5)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.wait_for(successor.acquire(), timeout=5)

    assert loop.time() - began < 0.5, "the successor need not wait for the lease to expire"
    assert store.writes[-2:] == ["", "b"]


async def test_a_release_after_the_lease_changed_hands_leaves_it_alone() -> None:
    store = LeaseStore()
    first, _ = candidate(store, "a")
    await first.acquire()
    assert store.lease is not None
    store.lease["spec"]["holderIdentity"] = "b"  # it lost the Lease meanwhile

    await first.release()

    assert store.writes == ["a"]
    assert store.lease["spec"]["holderIdentity"] == "b"


def test_a_released_lease_names_no_holder_lasts_a_second_and_keeps_its_transitions() -> None:
    now = datetime(2026, 11, 29, 7, 0, 0, 123456, tzinfo=UTC)
    held = {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": "2026-11-29T06:00:00.000000Z",
        "renewTime": "2026-11-29T06:59:58.000000Z",
        "leaseTransitions": 3,
    }

    assert released_spec(held, now) == {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": "2026-11-29T07:00:00.123456Z",
        "renewTime": "2026-11-29T07:00:00.123456Z",
        "leaseTransitions": 3,
    }
    assert released_spec({}, now)["leaseTransitions"] == 0
