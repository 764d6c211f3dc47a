"""The goodput benchmark's run (I/O): a fresh plane, 64 kwok nodes, the gangs, the failures.

Order of a run: start a control plane in a temporary folder; create the pool (64 kwok nodes of 8
GPUs) and the real ``torchgate controller`` (``--node-lost-seconds``); submit the gangs one at a
time, each once the previous runs whole (each gang's time to run whole alone is its restart
floor, ``model`` rule 4); then the failure phase: every ``--interval`` seconds a node holding a
gang pod stops heartbeating (kwok's ``torchgate.io/fake-heartbeat=stopped`` label, as the
heal-core e2e test does it) and comes back ``--repair`` seconds later. A pod watch (``Informer``)
keeps the pods; a task per failure polls it until the gang runs whole in a later attempt.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from controller_bench import connect
from poolbench.harness import REPO, controller
from poolbench.manifests import JOBS_API, NO_STARVATION, pool_objects, pytorchjob
from poolbench.workload import pool_nodes

from torchgate.kube.client import MERGE_PATCH, KubeClient
from torchgate.kube.informer import Informer
from torchgate.kube.resources import NODES, PODS
from torchgate.pytorchjob import names
from torchgate_dev.controlplane import kwok
from torchgate_dev.controlplane.binaries import ensure_binaries
from torchgate_dev.controlplane.cluster import ControlPlane
from torchgate_dev.controlplane.components import KUBELET_LEASES

from .model import GPUS_PER_NODE, POOL_NODES, Failure, gang_names

NAMESPACE = "goodput"
NODE_MONITOR_GRACE_SECONDS = float(KUBELET_LEASES.grace_seconds)
"""kube-controller-manager's ``--node-monitor-grace-period`` on the plane this benchmark starts."""
RUN_FOREVER = 10**7
JOB_LABEL = "training.kubeflow.org/job-name"


def prepare(plane: ControlPlane) -> None:
    """CRDs, the 64 Ready kwok nodes of the pool and the namespace."""
    for path in sorted((REPO / "manifests" / "crds").glob("*.yaml")):
        plane.kubectl("apply", "-f", str(path))
    plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/pytorchjobs.kubeflow.org"
    )
    items = [o for o in pool_objects(pool_nodes(POOL_NODES)) if o["kind"] == "Node"]
    plane.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    plane.kubectl("wait", "--for=condition=Ready", "--timeout=120s", "nodes", "--all")
    plane.kubectl("create", "namespace", NAMESPACE)
    while plane.kubectl("get", "sa", "default", "-n", NAMESPACE, check=False).returncode != 0:
        time.sleep(0.2)


def gang_pods(pods: Informer, job: str) -> list[dict[str, Any]]:
    return [p for p in pods.values() if p["metadata"].get("labels", {}).get(JOB_LABEL) == job]


def attempt(pod: dict[str, Any]) -> int:
    return int(pod["metadata"].get("annotations", {}).get(names.ANNOTATION_GANG_ATTEMPT, "0"))


def whole(pods: Informer, job: str, size: int, after_attempt: int = 0) -> bool:
    """Every pod of the gang Running, not being deleted, in one attempt later than given."""
    members = gang_pods(pods, job)
    attempts = {attempt(p) for p in members}
    return (
        len(members) == size
        and len(attempts) == 1
        and min(attempts) > after_attempt
        and all(
            p.get("status", {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
            for p in members
        )
    )


async def until(condition: Any, within: float) -> float | None:
    """Poll every 0.2 s; the monotonic time ``condition()`` held, or None after ``within`` s."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return None
        await asyncio.sleep(0.2)
    return time.monotonic()


async def heartbeat(api: KubeClient, node: str, *, stopped: bool) -> None:
    value = kwok.HEARTBEAT_STOPPED if stopped else None
    await api.request(
        "PATCH",
        NODES.path(None) + f"/{node}",
        body={"metadata": {"labels": {kwok.LABEL_FAKE_HEARTBEAT: value}}},
        content_type=MERGE_PATCH,
    )


async def fill(api: KubeClient, pods: Informer) -> dict[str, float]:
    """Submit the gangs one by one; each gang's seconds from creation to running whole."""
    floors: dict[str, float] = {}
    for job, nodes in gang_names():
        began = time.monotonic()
        await api.request(
            "POST",
            JOBS_API.format(namespace=NAMESPACE),
            body=pytorchjob(job, NAMESPACE, nodes, RUN_FOREVER),
        )
        done = await until(lambda job=job, nodes=nodes: whole(pods, job, nodes), 300)
        if done is None:
            raise TimeoutError(f"{job} did not run whole within 300 s")
        floors[job] = done - began
        print(f"{job}: whole after {floors[job]:.1f}s", file=sys.stderr)
    return floors


async def failures_phase(
    api: KubeClient, pods: Informer, args: argparse.Namespace, floors: dict[str, float]
) -> tuple[list[Failure], float, float]:
    """The failures at a fixed rate; (failures, phase start, phase end), monotonic."""
    rng = random.Random(args.seed)
    sizes = dict(gang_names())
    detection = NODE_MONITOR_GRACE_SECONDS + args.node_lost_seconds
    recovering: set[str] = set()
    down: set[str] = set()
    failures: list[Failure] = []
    tasks: list[asyncio.Task[None]] = []
    count = max(1, int(args.minutes * 60 // args.interval))
    began = time.monotonic()

    async def follow(node: str, job: str, old: int, failed_at: float) -> None:
        recovered = await until(
            lambda: whole(pods, job, sizes[job], after_attempt=old), args.recovery_timeout
        )
        failures.append(
            Failure(
                node=node,
                job=job,
                gpus=sizes[job] * GPUS_PER_NODE,
                failed_at=failed_at - began,
                recovered_at=None if recovered is None else recovered - began,
                detection_bound=detection,
                restart_floor=floors[job],
            )
        )
        recovering.discard(job)
        print(
            f"{node} ({job}): "
            + ("not whole again" if recovered is None else f"whole {recovered - failed_at:.1f}s")
            + " after the failure",
            file=sys.stderr,
        )

    async def repair(node: str) -> None:
        await asyncio.sleep(args.repair)
        await heartbeat(api, node, stopped=False)
        down.discard(node)

    for index in range(count):
        await asyncio.sleep(max(0.0, began + index * args.interval - time.monotonic()))
        candidates = sorted(
            (p["spec"]["nodeName"], p["metadata"]["labels"][JOB_LABEL])
            for p in pods.values()
            if p.get("spec", {}).get("nodeName")
            and p.get("status", {}).get("phase") == "Running"
            and p["metadata"]["labels"].get(JOB_LABEL) not in recovering
            and p["spec"]["nodeName"] not in down
        )
        if not candidates:
            print("no node of a whole gang to fail; skipped", file=sys.stderr)
            continue
        node, job = rng.choice(candidates)
        old = max(attempt(p) for p in gang_pods(pods, job))
        recovering.add(job)
        down.add(node)
        await heartbeat(api, node, stopped=True)
        failed_at = time.monotonic()
        tasks.append(asyncio.create_task(follow(node, job, old, failed_at)))
        tasks.append(asyncio.create_task(repair(node)))
    end = began + count * args.interval
    await asyncio.sleep(max(0.0, end - time.monotonic()))
    await asyncio.gather(*tasks)
    return failures, began, max(end, time.monotonic())


async def main_async(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Start a plane, run the benchmark; its raw figures (the command summarises them)."""
    plane = ControlPlane(binaries=ensure_binaries(), workdir=workdir / "plane")
    with plane:
        print(f"control plane ready in {plane.startup_seconds:.1f}s", file=sys.stderr)
        prepare(plane)
        api = connect(plane)
        pods = Informer(api, PODS, namespace=NAMESPACE)
        watch = asyncio.create_task(pods.run())
        extra = ("--node-lost-seconds", str(args.node_lost_seconds))
        log = workdir / "controller.log"
        try:
            with controller(plane, log, starvation_seconds=NO_STARVATION, extra=extra):
                await pods.synced.wait()
                floors = await fill(api, pods)
                failures, began, end = await failures_phase(api, pods, args, floors)
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watch
            await api.close()
            text = log.read_text() if log.exists() else ""
            if "Traceback" in text:
                print(f"--- controller log (last lines)\n{text[-2000:]}", file=sys.stderr)
    return {
        "floors": floors,
        "failures": failures,
        "phase_seconds": end - began,
        "end": end - began,
        "load_average_at_end": os.getloadavg(),
        "kubernetes": plane.kubernetes_version,
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip(),
    }
