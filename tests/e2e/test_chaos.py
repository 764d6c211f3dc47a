"""Chaos at a real pool's size: 200 jobs while the controller, webhook and apiserver go down.

What it proves (issue 22, point 6): while 200 jobs are submitted to and run on a kwok pool, the
controller is killed with SIGKILL at least 10 times at random moments (and started again), the
webhook is restarted twice (it runs as a process here, as in the webhook e2e module: stopped and
started on the same port with the same certificates, which is what a rolling restart of its pods
does to the apiserver; ``failurePolicy: Fail`` refuses job writes while it is away), and the
kube-apiserver is stopped and started once (etcd keeps the state). A control-plane component that
exits meanwhile is started again, as a kubelet restarts a static pod (kube-scheduler exits on
purpose when an apiserver restart leaves its cache inconsistent); the report counts it. After:

- no lost job: every job submitted exists and ends in the state its fake exit code asks for:
  ``succeed`` jobs Succeed with no counted restart, ``fail`` jobs (Master exits 1, not retryable
  under ``restartPolicy: ExitCode``) Fail with no counted restart, ``retry`` jobs (their Master
  runs until the test ends it: exit 137, retryable, then exit 0 in a later attempt) Succeed with
  exactly one counted restart (``backoffLimit: 3``): restarts caused by the chaos never count;
- no duplicate pod: the lifetimes of pods of one name never overlap, and a gang attempt holds at
  most one pod per name;
- no orphan: every pod ever seen is controlled by one of the test's jobs, and none outlives its
  job's end;
- whole gangs: every gang attempt that had a pod Running had all its members created (admitted
  whole; kube-scheduler binds them one by one, so a Master may run before a Worker is bound),
  and pods of two attempts of one job never ran at the same time.

Determinism: the kill moments, job mix and run times come from one seeded generator; the bounds
are generous (the test waits for outcomes, never for a moment). Pod states come from a watch
(``tests.e2e.pod_history``), so the assertions see every state the apiserver stored, in order.
"""

from __future__ import annotations

import json
import random
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import ControllerProcess, is_true, job_path
from tests.e2e.pod_history import NEVER, PodHistory, PodRecord
from tests.e2e.webhook_process import LocalWebhook, registered_webhook
from torchgate.pytorchjob import names
from torchgate_dev.controlplane import kwok

pytestmark = pytest.mark.e2e

SEED = 22
JOBS = 200
NODES = 40  # 320 GPUs: about half the jobs fit at once, so gangs also queue through the chaos
SUBMIT_SECONDS = 60.0
CHAOS_SECONDS = 150.0
CONTROLLER_KILLS = 12
WEBHOOK_RESTARTS = 2
APISERVER_DOWN_SECONDS = 5.0
RETRYABLE_EXIT = 137
PERMANENT_EXIT = 1
SETTLE_TIMEOUT = 900.0

Outcome = Literal["succeed", "fail", "retry"]


@dataclass(frozen=True, slots=True)
class Planned:
    """One job of the workload and what its fake exit codes ask for."""

    name: str
    outcome: Outcome
    workers: int
    gpus: int
    run_seconds: int

    def pod_names(self) -> set[str]:
        return {f"{self.name}-master-0"} | {f"{self.name}-worker-{i}" for i in range(self.workers)}


def workload(rng: random.Random) -> list[Planned]:
    """60 % succeed, 20 % fail for good, 20 % fail once and then succeed; gangs of 1-4 pods."""
    outcomes: list[Outcome] = ["succeed"] * 3 + ["fail", "retry"]
    return [
        Planned(
            name=f"j{index:03d}",
            outcome=rng.choice(outcomes),
            workers=rng.choice([0, 1, 1, 3]),
            gpus=rng.choice([1, 2, 4]),
            run_seconds=rng.randint(10, 40),
        )
        for index in range(JOBS)
    ]


def manifest(planned: Planned, namespace: str, pool: str) -> dict[str, Any]:
    """The PyTorchJob; the Master's template carries the fake exit code or run time."""
    master_annotations = {
        "succeed": kwok.run_seconds_annotation(planned.run_seconds),
        "fail": kwok.exit_code_annotation(PERMANENT_EXIT),
        "retry": {},  # runs until end_retry_masters ends it
    }[planned.outcome]

    def replica(replicas: int, annotations: dict[str, str]) -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
            "resources": {"limits": {names.DEFAULT_GPU_RESOURCE: planned.gpus}},
        }
        return {
            "replicas": replicas,
            "restartPolicy": "ExitCode",
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"nodeSelector": {"pool": pool}, "containers": [container]},
            },
        }

    replicas = {"Master": replica(1, master_annotations)}
    if planned.workers:
        replicas["Worker"] = replica(planned.workers, {})
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": planned.name, "namespace": namespace},
        "spec": {
            "runPolicy": {"backoffLimit": 3, "cleanPodPolicy": "Running"},
            "pytorchReplicaSpecs": replicas,
        },
    }


class Tally:
    """What the chaos did, for the report; thread-safe counters."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def add(self, key: str, value: int = 1) -> None:
        with self._lock:
            self.counts[key] += value


def request(cluster: Cluster, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """``cluster.api_request``, with "the apiserver is away" as status 0."""
    try:
        return cluster.api_request(method, path, body)
    except (OSError, ValueError):
        return 0, {}


def submit(cluster: Cluster, job: dict[str, Any], tally: Tally) -> None:
    """Create the job, retrying while the webhook or the apiserver is away (as a client would)."""
    namespace = job["metadata"]["namespace"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        status, body = request(cluster, "POST", job_path(namespace), job)
        if status in (201, 409):  # 409: an earlier try was stored, its answer lost
            return
        tally.add("refused submissions (webhook or apiserver away)")
        time.sleep(0.5)
    pytest.fail(f"{job['metadata']['name']} could not be submitted: {status} {body}")


def json_patch(cluster: Cluster, path: str, operations: list[dict[str, str]]) -> int:
    """A JSON patch (RFC 6902) through the API; its HTTP status (0: the apiserver is away)."""
    plane = cluster.plane
    request = urllib.request.Request(
        plane.server + path, data=json.dumps(operations).encode(), method="PATCH"
    )
    request.add_header("Authorization", f"Bearer {plane.token}")
    request.add_header("Content-Type", "application/json-patch+json")
    context = ssl.create_default_context(cafile=str(plane.ca_file) if plane.ca_file else None)
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


def end_retry_masters(
    cluster: Cluster, namespace: str, retry: set[str], done: threading.Event, tally: Tally
) -> None:
    """End each ``retry`` job's running Master: exit 137 until one failure is counted, then 0.

    Their Masters run until ended here, so no ``retry`` job can succeed without failing once.
    The patch tests the pod's gang attempt against the job's, read just before, so a Master of
    the attempt after the counted failure is never ended with 137. A Master torn down by the
    chaos before kwok ended it is simply ended again in its next attempt.
    """
    annotations = "/metadata/annotations/"
    exit_key = annotations + kwok.ANNOTATION_FAKE_EXIT_CODE.replace("/", "~1")
    attempt_key = annotations + names.ANNOTATION_GANG_ATTEMPT.replace("/", "~1")
    while not done.is_set():
        time.sleep(2)
        status, jobs = request(cluster, "GET", job_path(namespace))
        status_pods, pods = request(cluster, "GET", f"/api/v1/namespaces/{namespace}/pods")
        if status != 200 or status_pods != 200:
            continue
        pending: dict[str, tuple[str, str]] = {}
        for found in jobs["items"]:
            meta = found["metadata"]
            notes = meta.get("annotations", {})
            if meta["name"] in retry:
                exit_code = "0" if "torchgate.io/restarts" in notes else str(RETRYABLE_EXIT)
                pending[meta["name"]] = (notes.get(names.ANNOTATION_GANG_ATTEMPT, "1"), exit_code)
        for pod in pods["items"]:
            meta = pod["metadata"]
            job = meta.get("labels", {}).get("training.kubeflow.org/job-name", "")
            if (
                meta["name"] == f"{job}-master-0"
                and job in pending
                and pod["status"].get("phase") == "Running"
                and not meta.get("deletionTimestamp")
                and kwok.ANNOTATION_FAKE_EXIT_CODE not in meta.get("annotations", {})
            ):
                attempt, exit_code = pending[job]
                patched = json_patch(
                    cluster,
                    f"/api/v1/namespaces/{namespace}/pods/{meta['name']}",
                    [
                        {"op": "test", "path": attempt_key, "value": attempt},
                        {"op": "add", "path": exit_key, "value": exit_code},
                    ],
                )
                if patched == 200:
                    tally.add(f"retry Masters ended with exit {exit_code}")


class Chaos:
    """The seeded schedule of kills and restarts, played in one thread."""

    def __init__(
        self,
        cluster: Cluster,
        rng: random.Random,
        controller_dir: Path,
        webhook: LocalWebhook,
        tally: Tally,
    ) -> None:
        self.cluster = cluster
        self.webhook = webhook
        self.controller_dir = controller_dir
        self.tally = tally
        self.controller = ControllerProcess(cluster.kubeconfig, controller_dir).start()
        kills = [("controller", rng.uniform(3, CHAOS_SECONDS)) for _ in range(CONTROLLER_KILLS)]
        webhooks = [("webhook", rng.uniform(5, SUBMIT_SECONDS)) for _ in range(WEBHOOK_RESTARTS)]
        apiserver = [("apiserver", rng.uniform(0.3 * CHAOS_SECONDS, 0.6 * CHAOS_SECONDS))]
        self.schedule = sorted(kills + webhooks + apiserver, key=lambda event: event[1])
        self.pauses = [rng.uniform(0.2, 3.0) for _ in self.schedule]
        self.error: BaseException | None = None
        self.plane_lock = threading.Lock()  # the apiserver restart and the supervisor

    def run(self, began: float) -> None:
        try:
            for (what, at), pause in zip(self.schedule, self.pauses, strict=True):
                time.sleep(max(0.0, began + at - time.monotonic()))
                if what == "controller":
                    self.controller.kill()
                    time.sleep(pause)
                    self.controller = ControllerProcess(
                        self.cluster.kubeconfig, self.controller_dir
                    ).start()
                    self.tally.add("controller SIGKILLs")
                elif what == "webhook":
                    self.webhook.restart()
                    self.tally.add("webhook restarts")
                else:
                    with self.plane_lock:
                        exited = self.cluster.plane.restart_apiserver(
                            down_seconds=APISERVER_DOWN_SECONDS
                        )
                    self.tally.add("apiserver restarts")
                    self.restarted(exited)
        except BaseException as error:
            self.error = error

    def supervise(self, done: threading.Event) -> None:
        """Restart control-plane components that exit, as their supervisor (a kubelet) would."""
        try:
            while not done.wait(1.0):
                with self.plane_lock:
                    exited = self.cluster.plane.restart_exited()
                self.restarted(exited)
        except BaseException as error:
            self.error = error

    def restarted(self, names: list[str]) -> None:
        for name in names:  # not torchgate's: counted in the report
            log = (self.cluster.plane.workdir / "logs" / f"{name}.log").read_text()
            print(f"{name} exited and was started again; its last lines:\n{log[-600:]}")
            self.tally.add(f"{name} exited and was started again")


@pytest.fixture
def webhook(cluster: Cluster, tmp_path: Path) -> Iterator[LocalWebhook]:
    with registered_webhook(cluster, tmp_path / "webhook") as server:
        yield server


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def check_pods(records: list[PodRecord], jobs: dict[str, Planned], job_uids: set[str]) -> None:
    """No duplicate, no orphan, whole gangs, one attempt running at a time (module docstring)."""
    by_name: dict[str, list[PodRecord]] = defaultdict(list)
    by_attempt: dict[tuple[str, str], list[PodRecord]] = defaultdict(list)
    for record in records:
        by_name[record.name].append(record)
        by_attempt[(record.job, record.attempt)].append(record)
        assert record.job in jobs, f"pod {record.name} of no job of this test"
        assert len(record.owners) == 1, f"{record.name} has no controlling owner"
        assert record.owners <= job_uids, f"orphan {record.name}"
    for name, same in by_name.items():
        lives = [(r.first, r.gone) for r in same]
        assert not any(overlaps(a, b) for i, a in enumerate(lives) for b in lives[i + 1 :]), (
            f"two pods named {name} at once: {same}"
        )
    for (job, attempt), members in by_attempt.items():
        names_seen = Counter(r.name for r in members)
        assert max(names_seen.values()) == 1, f"{job} attempt {attempt}: duplicate {names_seen}"
        if any(r.running is not None for r in members):
            assert set(names_seen) == jobs[job].pod_names(), f"{job} attempt {attempt} ran partial"
    runs: dict[str, list[tuple[str, tuple[int, int]]]] = defaultdict(list)
    for record in records:
        if record.running is not None:
            runs[record.job].append((record.attempt, (record.running, record.ended)))
    for job, spans in runs.items():
        for i, (attempt, span) in enumerate(spans):
            for other, other_span in spans[i + 1 :]:
                assert attempt == other or not overlaps(span, other_span), (
                    f"{job}: attempts {attempt} and {other} ran at the same time"
                )


@pytest.mark.timeout(1800)
def test_200_jobs_ride_through_controller_kills_webhook_and_apiserver_restarts(
    cluster: Cluster, webhook: LocalWebhook, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    namespace = cluster.new_namespace("chaos")
    pool = f"chaos-{namespace[-6:]}"
    cluster.add_gpu_nodes(NODES, pool, gpus=8, labels={"pool": pool})
    planned = {p.name: p for p in workload(rng)}
    retry = {name for name, p in planned.items() if p.outcome == "retry"}
    tally = Tally()
    history = PodHistory(cluster, namespace).start()
    chaos = Chaos(cluster, rng, tmp_path, webhook, tally)
    done = threading.Event()
    ender = threading.Thread(
        target=end_retry_masters, args=(cluster, namespace, retry, done, tally), daemon=True
    )
    began = time.monotonic()
    player = threading.Thread(target=chaos.run, args=(began,), daemon=True)
    supervisor = threading.Thread(target=chaos.supervise, args=(done,), daemon=True)
    player.start()
    supervisor.start()
    ender.start()
    try:
        with ThreadPoolExecutor(max_workers=8) as submitters:
            submitted = []
            for index, p in enumerate(planned.values()):
                time.sleep(max(0.0, began + index * SUBMIT_SECONDS / JOBS - time.monotonic()))
                job = manifest(p, namespace, pool)
                submitted.append(submitters.submit(submit, cluster, job, tally))
        for future in submitted:
            future.result()
        player.join(timeout=CHAOS_SECONDS + 600)
        assert not player.is_alive(), "the chaos schedule did not finish"
        assert chaos.error is None, repr(chaos.error)

        def all_ended() -> dict[str, dict[str, Any]] | None:
            status, body = request(cluster, "GET", job_path(namespace))
            if status != 200:
                return None
            stored = {j["metadata"]["name"]: j for j in body["items"]}
            ended = all(is_true(j, "Succeeded") or is_true(j, "Failed") for j in stored.values())
            return stored if ended and len(stored) == JOBS else None

        stored = cluster.wait_for(all_ended, timeout=SETTLE_TIMEOUT, what="all 200 jobs ended")
        took = time.monotonic() - began

        def no_live_pods() -> bool:
            status, body = request(cluster, "GET", f"/api/v1/namespaces/{namespace}/pods")
            return status == 200 and not [
                p
                for p in body["items"]
                if p["status"].get("phase") not in ("Succeeded", "Failed")
                and not p["metadata"].get("deletionTimestamp")
            ]

        cluster.wait_for(no_live_pods, timeout=120, what="no pod left running")
    finally:
        done.set()
        records = list(history.stop().values())
        player.join(timeout=CHAOS_SECONDS)
        supervisor.join(timeout=30)
        controller = chaos.controller
        stopped = controller.stop()
    assert stopped == 0, controller.log()

    outcomes: Counter[str] = Counter()
    for name, p in planned.items():
        job = stored[name]
        restarts = int(job["metadata"].get("annotations", {}).get("torchgate.io/restarts", "0"))
        ended = "Succeeded" if is_true(job, "Succeeded") else "Failed"
        outcomes[f"{p.outcome} -> {ended}, {restarts} counted restart(s)"] += 1
        wanted = ("Failed", 0) if p.outcome == "fail" else ("Succeeded", int(p.outcome == "retry"))
        assert (ended, restarts) == wanted, f"{name} ({p.outcome}): {ended}, {restarts=}"
    job_uids = {j["metadata"]["uid"] for j in stored.values()}
    check_pods(records, planned, job_uids)

    attempts = Counter(len({r.attempt for r in records if r.job == name}) for name in planned)
    print(
        f"\nchaos: {JOBS} jobs ended {took:.0f}s after the first submission; "
        + "; ".join(f"{key}: {value}" for key, value in sorted(tally.counts.items()))
    )
    print("outcomes: " + "; ".join(f"{key}: {value}" for key, value in sorted(outcomes.items())))
    print(
        f"pods: {len(records)} created, {sum(r.running is not None for r in records)} ran; "
        f"jobs by gang attempts: {dict(sorted(attempts.items()))}; "
        f"duplicates 0, orphans 0, lost jobs 0; pod watch re-lists {history.relists}"
    )
    assert tally.counts["controller SIGKILLs"] >= 10
    assert tally.counts["webhook restarts"] == WEBHOOK_RESTARTS
    assert tally.counts["apiserver restarts"] == 1
    assert all(r.gone != NEVER or r.ended != NEVER for r in records)
