"""The cluster harness of ``benchmarks/pool_bench.py`` (I/O): the plane, the controller, the pods.

* ``prepare``: CRDs, the kwok GPU nodes and PriorityClasses, the namespaces, on a running plane.
* ``controller``: the real ``torchgate controller`` process (as ``controller_bench.py`` starts
  it) for the duration of a block, with the scenario's ``--starvation-seconds``.
* ``Pods`` / ``watching``: one cluster-wide pod ``Informer`` (list, then watch; re-list on 410)
  whose handler stamps every pod's events with the monotonic clock; the figures are computed
  from those stamps, not from polling.
* ``admitted_times``: when the controller admitted each job, from its JSON log (``latency``).
* ``submit`` / ``delete_job``: creating and deleting jobs through the apiserver (``KubeClient``).
* ``until``: polling a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from controller_bench import bounded

from torchgate.kube.client import KubeClient
from torchgate.kube.errors import ApiError, NotFound
from torchgate.kube.informer import Informer
from torchgate.kube.resources import PODS
from torchgate_dev.controlplane.cluster import ControlPlane
from torchgate_dev.controlplane.processes import terminate
from torchgate_dev.ports import free_port

from .latency import PodTimes
from .manifests import JOBS_API, pool_objects
from .workload import pool_nodes

REPO = Path(__file__).resolve().parents[2]
SUBMIT_CONCURRENCY = 32


class Pods:
    """Every pod's event times (monotonic), from one cluster-wide watch.

    ``running[ns]`` is the step series (time, pods Running and not being deleted) of a namespace,
    ``allocated[ns]`` the same for pods that hold their GPUs (created, not ended, not gone).
    """

    def __init__(self, api: KubeClient) -> None:
        self.informer = Informer(api, PODS)
        self.informer.add_handler(self._seen)
        self.added: dict[tuple[str, str], float] = {}
        self.node: dict[tuple[str, str], str] = {}
        self.bound: dict[tuple[str, str], float] = {}  # first seen with a node
        self.ended: dict[tuple[str, str], float] = {}  # first seen Succeeded or Failed
        self.started: dict[tuple[str, str], float] = {}  # first seen Running
        self.succeeded: dict[tuple[str, str], float] = {}
        self.deleting: dict[tuple[str, str], float] = {}
        self.gone: dict[tuple[str, str], float] = {}
        self.live: dict[str, set[str]] = {}
        self.running: dict[str, list[tuple[float, int]]] = {}
        self.present: dict[str, set[str]] = {}  # pods that hold GPUs: not ended, not gone
        self.allocated: dict[str, list[tuple[float, int]]] = {}
        self.ready = self.informer.synced

    def _seen(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        self._update(kind, obj, time.monotonic())

    def _update(self, kind: str, obj: dict[str, Any], now: float) -> None:
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        self.added.setdefault(key, now)
        phase = obj.get("status", {}).get("phase")
        node = obj.get("spec", {}).get("nodeName")
        if node:
            self.node.setdefault(key, node)
            self.bound.setdefault(key, now)
        if phase in ("Succeeded", "Failed"):
            self.ended.setdefault(key, now)
        if phase == "Running":
            self.started.setdefault(key, now)
        if phase == "Succeeded":
            self.succeeded.setdefault(key, now)
        if meta.get("deletionTimestamp"):
            self.deleting.setdefault(key, now)
        gone = kind == "DELETED"
        if gone:
            self.gone.setdefault(key, now)
        alive = phase == "Running" and not meta.get("deletionTimestamp") and not gone
        self._step(self.live, self.running, key, alive, now)
        holds = not gone and phase not in ("Succeeded", "Failed")
        self._step(self.present, self.allocated, key, holds, now)

    @staticmethod
    def _step(
        sets: dict[str, set[str]],
        series: dict[str, list[tuple[float, int]]],
        key: tuple[str, str],
        member: bool,
        now: float,
    ) -> None:
        members = sets.setdefault(key[0], set())
        before = len(members)
        (members.add if member else members.discard)(key[1])
        if len(members) != before:
            series.setdefault(key[0], [(0.0, 0)]).append((now, len(members)))

    def times(self, namespace: str) -> list[PodTimes]:
        """Every pod of ``namespace`` the watch saw, with its event times (``latency``)."""
        return [
            PodTimes(
                job=key[1].rsplit("-", 2)[0],
                name=key[1],
                node=self.node.get(key),
                added=added,
                bound=self.bound.get(key),
                started=self.started.get(key),
                ended=self.ended.get(key),
                deleting=self.deleting.get(key),
                gone=self.gone.get(key),
            )
            for key, added in self.added.items()
            if key[0] == namespace
        ]

    async def run(self) -> None:
        """List and watch until cancelled."""
        await self.informer.run()

    def count(self, namespace: str, prefix: str = "") -> int:
        """Pods Running (not being deleted) in ``namespace`` now, named ``prefix...``."""
        return sum(name.startswith(prefix) for name in self.live.get(namespace, ()))

    def all_running(self, namespace: str, names: Sequence[str]) -> bool:
        """Whether every pod named is Running now."""
        live = self.live.get(namespace, set())
        return all(name in live for name in names)


@contextlib.asynccontextmanager
async def watching(api: KubeClient) -> AsyncIterator[Pods]:
    """A running ``Pods`` watch for the duration of the block."""
    pods = Pods(api)
    task = asyncio.create_task(pods.run())
    await pods.ready.wait()
    try:
        yield pods
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def until(condition: Any, within: float, what: str) -> float:
    """Poll ``condition()`` every 50 ms; the monotonic time it held, or raise after ``within`` s."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {within:.0f} s")
        await asyncio.sleep(0.05)
    return time.monotonic()


@contextlib.contextmanager
def controller(
    plane: ControlPlane, log: Path, *, starvation_seconds: float, extra: Sequence[str] = ()
) -> Any:
    """The real controller process (as ``controller_bench.py`` starts it) for the block.

    ``extra``: more flags, after the benchmark's own.
    """
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torchgate",
            "controller",
            "--kubeconfig",
            str(plane.kubeconfig),
            "--manage-unowned",
            "--no-leader-elect",
            "--metrics-bind-address",
            "127.0.0.1",
            "--metrics-port",
            str(free_port()),
            "--log-level",
            "WARNING",
            "--finish-grace-seconds",
            "0",
            "--starvation-seconds",
            str(starvation_seconds),
            *extra,
        ],
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
        env=env,
        cwd=REPO,
    )
    try:
        yield process
    finally:
        terminate(process, grace=30)


async def submit(api: KubeClient, manifests: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Create the jobs (``SUBMIT_CONCURRENCY`` at once); job name -> when its create returned."""
    done: dict[str, float] = {}

    async def one(manifest: dict[str, Any]) -> None:
        path = JOBS_API.format(namespace=manifest["metadata"]["namespace"])
        try:
            await api.request("POST", path, body=manifest)
        except ApiError as exc:
            name = manifest["metadata"]["name"]
            raise RuntimeError(f"creating {name}: {exc.status} {exc.body}") from exc
        done[manifest["metadata"]["name"]] = time.monotonic()

    await bounded([one(m) for m in manifests], SUBMIT_CONCURRENCY)
    return done


async def delete_job(api: KubeClient, namespace: str, name: str) -> None:
    """Delete a job and its pods at once (foreground deletion is not needed: pods by name)."""
    with contextlib.suppress(NotFound):
        await api.request("DELETE", JOBS_API.format(namespace=namespace) + f"/{name}")
    await api.request(
        "DELETE",
        PODS.path(namespace),
        query={
            "gracePeriodSeconds": "0",
            "labelSelector": f"training.kubeflow.org/job-name={name}",
        },
    )


def admitted_times(log: Path) -> dict[str, float]:
    """Job name -> when the controller admitted it, on the monotonic clock, from its JSON log.

    The log must come from ``--log-level INFO --log-format json``; wall-clock times are moved
    onto the monotonic clock by the offset between the two clocks now.
    """
    offset = time.time() - time.monotonic()
    admitted: dict[str, float] = {}
    for line in log.read_text().splitlines():
        if not line.startswith("{"):
            continue
        entry = json.loads(line)
        if str(entry.get("msg", "")).startswith("admitted ") and "job" in entry:
            when = datetime.fromisoformat(entry["time"]).timestamp() - offset
            admitted.setdefault(str(entry["job"]).split("/", 1)[1], when)
    return admitted


def plane_nodes(plane: ControlPlane) -> list[str]:
    """The benchmark's node names (kept on the plane object by ``prepare``)."""
    return list(getattr(plane, "bench_nodes", []))


def prepare(plane: ControlPlane, *, nodes: int) -> None:
    """CRDs, ``nodes`` Ready kwok GPU nodes, the PriorityClasses and the scenarios' namespaces."""
    for path in sorted((REPO / "manifests" / "crds").glob("*.yaml")):
        plane.kubectl("apply", "-f", str(path))
    plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/pytorchjobs.kubeflow.org"
    )
    labelled = pool_nodes(nodes)
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": pool_objects(labelled)}),
    )
    plane.kubectl("wait", "--for=condition=Ready", "--timeout=120s", "nodes", "--all")
    plane.bench_nodes = [name for name, _ in labelled]  # type: ignore[attr-defined]
    for namespace in ("burst", "preempt", "team-a", "team-b"):
        plane.kubectl("create", "namespace", namespace)
    while plane.kubectl("get", "sa", "default", "-n", "burst", check=False).returncode != 0:
        time.sleep(0.2)
