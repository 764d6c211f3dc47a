"""A pool that loses nodes under load, checked by its invariants.

The node-loss, outage and quarantine tests each take one node down beside one or two gangs. Users
run pools where nodes die every few hours while the pool is full and queued, so here the losses
overlap with load: 48 kwok nodes of 8 GPUs shared by three teams (TeamQuotas in one cohort, a
PlacementPolicy quarantining a node at its second fault), 45 PyTorchJobs of gangs of 1-4 pods of
2-8 GPUs with fake run times (25-90 s), and, while they are admitted and run, a seeded schedule
of churn, each taken back 8-70 s later (past 50 s a NotReady node turns ``Unknown``): a node
deleted (created again), made NotReady (heartbeats stopped, ``Ready=False`` posted), tainted
with the health taint ``nvidia.com/gpu-health=unhealthy:NoExecute``, NotReady then deleted by
an admin, tainted then NotReady, or three nodes NotReady at once (a rack, likely one gang's);
churn picks nodes that hold running pods. Six jobs are deleted within 2 s of their creation
(while the controller admits them), three of them created again at once under the same name.
After the churn settles:

- every job left Succeeds, with no counted restart (``torchgate.io/restarts``): every restart
  here is the pool's fault; the controller's ``gang_restarts_total`` equals the gang attempts
  beyond the first that the pods show, and each job's restart Events (``RESTART_EVENT_REASONS``)
  tell each of its restarts (no lost ``Restarting``);
- no two pods of one gang attempt, no gang attempt that ran part of its members;
- no pod of an ended or deleted job remains, and every TeamQuota's status ends at zero used,
  borrowed, admitted and waiting, without the finalizer that protects admitted gangs (no
  reservation or hold left for a deleted job);
- while the churn runs: no node holds bound live pods asking more GPUs than it has (sampled
  every 2 s from one list of every namespace: one moment of the pool), and at a quiet moment
  after it each team's ``usedGPUs`` equals the GPUs of its live bound pods;
- a node records no more outages as faults than it had, and one quarantined had two;
- the controller did not crash (it exits 0 when stopped), created exactly the pods the watches
  saw, and reconciled at a sane rate (under 50 a second: 6-13 were measured).

The controller runs with ``--node-lost-seconds 5`` as in the node-loss tests. Pod states come
from watches (``tests.e2e.pod_history``); bounds are generous, the test waits for outcomes.
``TORCHGATE_CHURN_SEED`` and ``TORCHGATE_CHURN_EVENTS`` (default 7 and 18) vary the schedule;
which nodes it hits depends on where the gangs run, so a seed is not an exact replay.
"""

from __future__ import annotations

import functools
import json
import os
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.builders.team import team_quota
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    events_of,
    is_true,
    job_path,
    running_controller,
)
from tests.e2e.node_outages import (
    apply_quarantine_policy,
    delete_policy,
    metric,
    quarantine_taint,
    recorded_faults,
    resume_heartbeats,
    set_not_ready,
)
from tests.e2e.pod_history import PodHistory, PodRecord
from torchgate.pytorchjob import names, reasons
from torchgate.pytorchjob.pool import QUOTA_FINALIZER
from torchgate_dev.controlplane import kwok

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("TORCHGATE_CHURN_SEED", "7"))
NODES = 48
TEAMS = ("vision", "speech", "ranking")
NOMINAL_GPUS = 128  # 3 x 128 = the pool's 384 GPUs; demand is about 1.5 times that
JOBS = 45
DELETED_JOBS = 6
SUBMIT_SECONDS = 30.0
CHURN_SECONDS = 70.0
CHURN_EVENTS = int(os.environ.get("TORCHGATE_CHURN_EVENTS", "18"))
DOWN_SECONDS = (8.0, 70.0)  # beyond 50 s, a NotReady node turns Unknown
HEALTH_TAINT = "nvidia.com/gpu-health"
QUARANTINE_FAULTS = 2
SETTLE_TIMEOUT = 420.0
GPU = names.DEFAULT_GPU_RESOURCE


@dataclass(frozen=True, slots=True)
class Planned:
    name: str
    team: str
    pods: int
    gpus: int
    run_seconds: int


def workload(rng: random.Random) -> list[Planned]:
    return [
        Planned(
            name=f"j{index:02d}",
            team=rng.choice(TEAMS),
            pods=rng.choice([1, 1, 2, 2, 3, 4]),
            gpus=rng.choice([2, 4, 8, 8]),
            run_seconds=rng.randint(25, 90),
        )
        for index in range(JOBS)
    ]


def manifest(planned: Planned, namespace: str, pool: str) -> dict[str, Any]:
    def replica(replicas: int) -> dict[str, Any]:
        return {
            "replicas": replicas,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"annotations": kwok.run_seconds_annotation(planned.run_seconds)},
                "spec": {
                    "nodeSelector": {"pool": pool},
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
                            "resources": {"limits": {GPU: planned.gpus}},
                        }
                    ],
                },
            },
        }

    replicas = {"Master": replica(1)}
    if planned.pods > 1:
        replicas["Worker"] = replica(planned.pods - 1)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": planned.name, "namespace": namespace},
        "spec": {
            "runPolicy": {"backoffLimit": 1, "cleanPodPolicy": "Running"},
            "pytorchReplicaSpecs": replicas,
        },
    }


def live(pod: dict[str, Any]) -> bool:
    return pod["status"].get("phase") not in ("Succeeded", "Failed") and not pod["metadata"].get(
        "deletionTimestamp"
    )


def pod_gpus(pod: dict[str, Any]) -> int:
    return sum(
        int(c.get("resources", {}).get("limits", {}).get(GPU, 0)) for c in pod["spec"]["containers"]
    )


class Churn:
    """The seeded schedule of node losses, health taints and returns, played in one thread."""

    def __init__(self, cluster: Cluster, rng: random.Random, nodes: list[str], pool: str) -> None:
        self.cluster = cluster
        self.pool = pool
        self.nodes = nodes
        kinds = ["delete", "not-ready", "taint", "rack", "not-ready+delete", "taint+not-ready"]
        self.schedule = sorted(
            (
                rng.uniform(5, CHURN_SECONDS),
                rng.choice(kinds),
                rng.random(),
                rng.uniform(*DOWN_SECONDS),
            )
            for _ in range(CHURN_EVENTS)
        )
        self.down: set[str] = set()
        self.outages: Counter[str] = Counter()
        self.returns: list[tuple[float, str, str]] = []
        self.tally: Counter[str] = Counter()
        self.error: BaseException | None = None

    def busy_nodes(self, namespaces: list[str]) -> list[str]:
        """Healthy nodes, those holding a running pod first (a loss under load)."""
        busy: set[str] = set()
        for namespace in namespaces:
            for pod in self.cluster.list_objects("pods", namespace):
                node = pod["spec"].get("nodeName")
                if node and live(pod) and pod["status"].get("phase") == "Running":
                    busy.add(node)
        return sorted(busy - self.down) or sorted(set(self.nodes) - self.down)

    def run(self, began: float, namespaces: list[str]) -> None:
        try:
            for at, kind, pick, down_for in self.schedule:
                self.bring_back_due(until=began + at)
                time.sleep(max(0.0, began + at - time.monotonic()))
                choices = self.busy_nodes(namespaces)
                if not choices:
                    continue
                first = int(pick * len(choices))
                # A rack: three nodes at once, likely members of one gang.
                hit = choices[first : first + 3] if kind == "rack" else [choices[first]]
                for node in hit:
                    self.take_down(kind, node)
                    self.returns.append((time.monotonic() + down_for, kind, node))
                self.tally[f"nodes {kind}"] += len(hit)
                print(f"{time.strftime('%H:%M:%S')} churn: {kind} {hit}")
            self.bring_back_due(until=float("inf"))
        except BaseException as error:
            self.error = error

    def take_down(self, kind: str, node: str) -> None:
        self.down.add(node)
        self.outages[node] += 2 if "+" in kind else 1
        if kind in ("not-ready", "rack", "not-ready+delete"):
            set_not_ready(self.cluster, node)
        if kind == "not-ready+delete":
            time.sleep(6)  # lost by the controller (5 s), then deleted by an admin
        if kind in ("delete", "not-ready+delete"):
            self.cluster.kubectl("delete", "node", node, "--wait=false")
        if kind in ("taint", "taint+not-ready"):
            self.cluster.kubectl(
                "taint", "node", node, f"{HEALTH_TAINT}=unhealthy:NoExecute", "--overwrite"
            )
        if kind == "taint+not-ready":
            time.sleep(2)
            set_not_ready(self.cluster, node)

    def bring_back_due(self, *, until: float) -> None:
        self.returns.sort()
        while self.returns and self.returns[0][0] <= until:
            at, kind, node = self.returns.pop(0)
            time.sleep(max(0.0, at - time.monotonic()))
            if kind in ("delete", "not-ready+delete"):
                self.cluster.apply(kwok.gpu_node(node, gpus=8, labels={"pool": self.pool}))
            if kind in ("not-ready", "rack", "taint+not-ready"):
                resume_heartbeats(self.cluster, node)
            if kind in ("taint", "taint+not-ready"):
                self.cluster.kubectl("taint", "node", node, f"{HEALTH_TAINT}-")
            self.down.discard(node)
            print(f"{time.strftime('%H:%M:%S')} churn: back {kind} {node}")
            self.tally["nodes back"] += 1


class Sampler:
    """Every two seconds: GPU over-commit per node, from the live bound pods of the test."""

    def __init__(self, cluster: Cluster, namespaces: list[str]) -> None:
        self.cluster = cluster
        self.namespaces = namespaces
        self.overcommits: list[str] = []
        self.samples = 0
        self.error: BaseException | None = None

    def run(self, done: threading.Event) -> None:
        try:
            while not done.wait(2.0):
                allocatable = {
                    n["metadata"]["name"]: int(n["status"].get("allocatable", {}).get(GPU, 0))
                    for n in self.cluster.list_objects("nodes")
                }
                held: Counter[str] = Counter()
                holders: dict[str, list[str]] = defaultdict(list)
                # One list of every namespace: one resourceVersion, so one moment of the pool.
                listed = self.cluster.kubectl("get", "pods", "--all-namespaces", "-o", "json")
                for pod in json.loads(listed.stdout)["items"]:
                    if pod["metadata"]["namespace"] in self.namespaces:
                        node = pod["spec"].get("nodeName")
                        if node and pod["status"].get("phase") not in ("Succeeded", "Failed"):
                            held[node] += pod_gpus(pod)
                            meta = pod["metadata"]
                            holders[node].append(
                                f"{meta['name']} uid {meta['uid'][:8]} created "
                                f"{meta['creationTimestamp']} {pod['status'].get('phase')} "
                                f"deleting {meta.get('deletionTimestamp')} "
                                f"by {pod['spec'].get('schedulerName')}"
                            )
                self.samples += 1
                for node, gpus in held.items():
                    if node in allocatable and gpus > allocatable[node]:
                        self.overcommits.append(
                            f"{time.strftime('%H:%M:%S')} {node}: {gpus} > {allocatable[node]}: "
                            + "; ".join(holders[node])
                        )
        except BaseException as error:
            self.error = error


@pytest.fixture
def controller(cluster: Cluster, tmp_path: Path) -> Iterator[ControllerProcess]:
    with running_controller(cluster.kubeconfig, tmp_path, "--node-lost-seconds", "5") as process:
        yield process


def submitted(cluster: Cluster, job: dict[str, Any]) -> bool:
    """Create the job; False while the one deleted under its name is still there (409)."""
    namespace = job["metadata"]["namespace"]
    status, body = cluster.api_request("POST", job_path(namespace), job)
    assert status in (201, 409), body
    return status == 201


def team_truth(cluster: Cluster, namespace: str) -> int:
    """GPUs the namespace's live bound pods hold."""
    return sum(
        pod_gpus(p)
        for p in cluster.list_objects("pods", namespace)
        if live(p) and p["spec"].get("nodeName")
    )


def check_gangs(records: list[PodRecord], planned: dict[str, Planned]) -> None:
    by_attempt: dict[tuple[str, frozenset[str], str], list[PodRecord]] = defaultdict(list)
    for record in records:  # a job created again under its name has pods of its own
        by_attempt[(record.job, record.owners, record.attempt)].append(record)
    for (job, _, attempt), members in by_attempt.items():
        seen = Counter(r.name for r in members)
        assert max(seen.values()) == 1, f"{job} attempt {attempt}: duplicate pods {seen}"
        if any(r.running is not None for r in members) and job in planned:
            assert len(seen) == planned[job].pods, f"{job} attempt {attempt} ran partial: {seen}"


@pytest.mark.timeout(900)
def test_nodes_lost_tainted_and_back_under_load_keep_the_pool_invariants(
    cluster: Cluster, controller: ControllerProcess
) -> None:
    rng = random.Random(SEED)
    namespaces = {team: cluster.new_namespace(team) for team in TEAMS}
    pool = f"churn-{namespaces[TEAMS[0]][-6:]}"
    quotas = [f"{pool}-{team}" for team in TEAMS]
    for team, quota in zip(TEAMS, quotas, strict=True):
        cluster.apply(team_quota(quota, [namespaces[team]], cohort=pool, nominalGPUs=NOMINAL_GPUS))
    quarantine = apply_quarantine_policy(
        cluster,
        pool,
        list(namespaces.values()),
        {"faults": QUARANTINE_FAULTS, "windowSeconds": 1800},
    )
    nodes = cluster.add_gpu_nodes(NODES, pool, gpus=8, labels={"pool": pool})
    planned = {p.name: p for p in workload(rng)}
    doomed = rng.sample(sorted(planned), DELETED_JOBS)
    resubmitted = set(doomed[::2])  # deleted, then created again at once under the same name
    histories = {team: PodHistory(cluster, ns).start() for team, ns in namespaces.items()}
    churn = Churn(cluster, rng, nodes, pool)
    sampler = Sampler(cluster, list(namespaces.values()))
    done = threading.Event()
    began = time.monotonic()
    player = threading.Thread(target=churn.run, args=(began, list(namespaces.values())))
    watcher = threading.Thread(target=sampler.run, args=(done,), daemon=True)
    player.start()
    watcher.start()
    deleted_while: dict[str, str] = {}
    try:
        for index, p in enumerate(planned.values()):
            time.sleep(max(0.0, began + index * SUBMIT_SECONDS / JOBS - time.monotonic()))
            namespace = namespaces[p.team]
            status, body = cluster.api_request(
                "POST", job_path(namespace), manifest(p, namespace, pool)
            )
            assert status == 201, body
            if p.name in doomed:
                time.sleep(rng.uniform(0.0, 2.0))
                found = cluster.get("pytorchjob", p.name, namespace) or {}
                deleted_while[p.name] = ",".join(
                    c["type"]
                    for c in found.get("status", {}).get("conditions", [])
                    if c["status"] == "True"
                )
                cluster.kubectl("delete", "pytorchjob", p.name, "-n", namespace, "--wait=false")
                if p.name in resubmitted:
                    again = manifest(p, namespace, pool)
                    cluster.wait_for(
                        functools.partial(submitted, cluster, again),
                        timeout=30,
                        what=f"{p.name} created again",
                    )
        player.join(timeout=CHURN_SECONDS + 120)
        assert not player.is_alive(), "the churn schedule did not finish"
        assert churn.error is None, repr(churn.error)

        # A quiet moment: every node back, jobs still running. Status follows within its period.
        def usage_matches() -> dict[str, tuple[int, int]] | None:
            seen = {}
            for team, quota in zip(TEAMS, quotas, strict=True):
                status = (cluster.get("teamquota", quota) or {}).get("status", {})
                seen[team] = (int(status.get("usedGPUs", 0)), team_truth(cluster, namespaces[team]))
            return seen if all(a == b for a, b in seen.values()) else None

        matched = cluster.wait_for(usage_matches, timeout=60, what="TeamQuota usage = pods' GPUs")
        print(f"\nusage at the quiet moment (status, pods): {matched}")

        def all_ended() -> dict[str, dict[str, Any]] | None:
            stored: dict[str, dict[str, Any]] = {}
            for namespace in namespaces.values():
                status, body = cluster.api_request("GET", job_path(namespace))
                if status != 200:
                    return None
                stored |= {j["metadata"]["name"]: j for j in body["items"]}
            ended = all(is_true(j, "Succeeded") or is_true(j, "Failed") for j in stored.values())
            wanted = set(planned) - set(doomed) | resubmitted
            return stored if ended and set(stored) == wanted else None

        stored = cluster.wait_for(all_ended, timeout=SETTLE_TIMEOUT, what="every job ended")
        took = time.monotonic() - began

        def pool_empty() -> bool:
            return not any(
                live(p) for ns in namespaces.values() for p in cluster.list_objects("pods", ns)
            )

        cluster.wait_for(pool_empty, timeout=120, what="no live pod left")

        def quotas_idle() -> list[dict[str, Any]] | None:
            found = [cluster.get("teamquota", q) or {} for q in quotas]
            idle = all(
                (q.get("status", {}).get(key, 0) == 0)
                for q in found
                for key in ("usedGPUs", "admittedJobs", "waitingJobs", "borrowedGPUs")
            ) and not any(QUOTA_FINALIZER in q["metadata"].get("finalizers", []) for q in found)
            return found if idle else None

        cluster.wait_for(quotas_idle, timeout=60, what="every TeamQuota idle and unprotected")
        metrics_text = controller.metrics()
        faults = {node: recorded_faults(cluster, node) for node in nodes}
        quarantined = {node for node in nodes if quarantine_taint(cluster, node) is not None}
    finally:
        done.set()
        records = [r for h in histories.values() for r in h.stop().values()]
        player.join(timeout=60)
        watcher.join(timeout=30)
        delete_policy(cluster, quarantine)
        for quota in quotas:
            cluster.kubectl("delete", "teamquota", quota, "--ignore-not-found", "--wait=false")
    assert sampler.error is None, repr(sampler.error)

    outcomes: Counter[str] = Counter()
    attempts_beyond_first = 0
    untold: dict[str, tuple[int, int]] = {}  # job: (restart Events, gang attempts)
    for name, job in stored.items():
        notes = job["metadata"].get("annotations", {})
        restarts = int(notes.get("torchgate.io/restarts", "0"))
        uid = job["metadata"]["uid"]
        attempts = {r.attempt for r in records if r.job == name and uid in r.owners}
        attempts_beyond_first += max(0, len(attempts) - 1)
        ended = "Succeeded" if is_true(job, "Succeeded") else "Failed"
        told = sum(
            int(event.get("count") or 1)
            for event in events_of(cluster, namespaces[planned[name].team], name)
            if event.get("reason") in reasons.RESTART_EVENT_REASONS
            and event["involvedObject"].get("uid") == uid
        )
        if told != max(0, len(attempts) - 1):
            untold[name] = (told, len(attempts))
        outcomes[f"{ended}, {restarts} counted, {len(attempts)} attempt(s)"] += 1
        assert (ended, restarts) == ("Succeeded", 0), (
            f"{name}: {ended}, {restarts=}\n{json.dumps(job.get('status'))}"
        )
    check_gangs(records, planned)
    assert untold == {}, f"restarts told by Events differ from gang attempts: {untold}"
    assert sampler.overcommits == [], sampler.overcommits
    # One outage is one fault, however many gangs it took down; a node quarantined had enough.
    print(f"outages {dict(churn.outages)}; quarantined {sorted(quarantined)}")
    for node, recorded in faults.items():
        # Every gang an outage took down is recorded; they count once (quarantine rule 6).
        counted = {
            (f["outage"], f["outageBegan"]) if "outage" in f else (f["job"], f["at"])
            for f in recorded
        }
        assert len(counted) <= churn.outages[node], f"{node}: {recorded}"
    for node in quarantined:
        assert churn.outages[node] >= QUARANTINE_FAULTS, f"{node} quarantined after one outage"

    restarts_metric = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics_text.splitlines()
        if line.startswith("torchgate_controller_gang_restarts_total{")
    )
    reconciles = metric(controller, "torchgate_controller_reconcile_seconds_count")
    created = metric(controller, "torchgate_controller_pods_created_total")
    print(
        f"churn: {dict(churn.tally)}; jobs ended {took:.0f}s after the first submission; "
        f"outcomes {dict(outcomes)}; deleted at {deleted_while}, created again "
        f"{sorted(resubmitted)}; pods {len(records)}, "
        f"created {created:.0f}; reconciles {reconciles:.0f} ({reconciles / took:.1f}/s); "
        f"gang restarts metric {restarts_metric:.0f}, "
        f"attempts beyond first {attempts_beyond_first}; "
        f"over-commit samples {sampler.samples}"
    )
    assert restarts_metric == attempts_beyond_first
    assert created == len(records)
    assert reconciles / took < 50
