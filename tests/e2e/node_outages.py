"""Fake GPU nodes that fail on kwok, and what the controller writes on them: the outage tests' kit.

Why one module: the node-loss, outage, rack-loss and quarantine-failover tests take kwok nodes
down the same way, charge them under the same kind of PlacementPolicy and read the same Node
fields; each used to carry (or borrow from another test module) its own copy of these steps.

How a node fails here: the label ``torchgate.io/fake-heartbeat=stopped`` (``STOPPED``) makes
kwok forget the node, so its Lease and Ready condition go stale and nothing confirms the deletion
of its pods, as with a node cut off from the control plane; removing the label
(:func:`resume_heartbeats`) brings it back. :func:`post_ready_false` writes the kubelet's own
``Ready=False`` so that the transition time is the test's, to the second (the controller manager
leaves a node's own ``False`` alone until its grace period without a heartbeat, 50 s, runs out).

The module-scoped fixture :func:`controller` is the controller of such a test module, with
``--node-lost-seconds`` ``NODE_LOST_SECONDS``: a module that imports it has one of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.builders.policy import policy
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import ControllerProcess, live_pods, running_controller
from torchgate_dev.controlplane import kwok

NODE_LOST_SECONDS = 5
STOPPED = f"{kwok.LABEL_FAKE_HEARTBEAT}={kwok.HEARTBEAT_STOPPED}"
QUARANTINE = "torchgate.io/quarantine"
QUARANTINE_UNTIL = "torchgate.io/quarantine-until"
FAULTS = "torchgate.io/quarantine-faults"
GANG_ATTEMPT = "torchgate.io/gang-attempt"


@pytest.fixture(scope="module")
def controller(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControllerProcess]:
    """The module's controller; it calls a node lost after ``NODE_LOST_SECONDS`` not Ready."""
    logs = tmp_path_factory.mktemp("controller")
    lost = ("--node-lost-seconds", str(NODE_LOST_SECONDS))
    with running_controller(cluster.kubeconfig, logs, *lost) as process:
        yield process


def new_pool_namespace(cluster: Cluster, prefix: str) -> tuple[str, str]:
    """A fresh namespace ``<prefix>-<hex>`` and a pool label of its own, ``<prefix>-<hex>``."""
    namespace = cluster.new_namespace(prefix)
    return namespace, f"{prefix}-{namespace[-6:]}"


def add_spare(cluster: Cluster, pool: str) -> str:
    """One more fake GPU node in ``pool``, named ``<pool>-spare-0``."""
    (spare,) = cluster.add_gpu_nodes(1, f"{pool}-spare", labels={"pool": pool})
    return spare


def apply_quarantine_policy(
    cluster: Cluster, pool: str, namespaces: Sequence[str], settings: Mapping[str, int]
) -> str:
    """A PlacementPolicy ``<pool>-quarantine`` with ``quarantine: settings``; returns its name.

    Delete it with :func:`delete_policy` (it is cluster-scoped: the test's namespace cleanup
    leaves it).
    """
    name = f"{pool}-quarantine"
    cluster.apply(policy(name, namespaces=list(namespaces), quarantine=dict(settings)))
    return name


def delete_policy(cluster: Cluster, name: str) -> None:
    cluster.kubectl("delete", "placementpolicy", name, "--ignore-not-found")


def post_ready_false(cluster: Cluster, node: str, *, reason: str, message: str) -> None:
    """Write ``Ready=False`` on ``node`` now, as its kubelet posts it."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = {
        "type": "Ready",
        "status": "False",
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    cluster.kubectl(
        "patch", "node", node, "--subresource=status", "--type=strategic",
        "-p", json.dumps({"status": {"conditions": [ready]}}),
    )  # fmt: skip


def set_not_ready(cluster: Cluster, node: str) -> None:
    """Stop ``node``'s heartbeats and post ``Ready=False`` now, as a kubelet losing its GPUs would.

    The controller manager leaves a node's own ``False`` alone until its grace period without a
    heartbeat runs out (50 s), so the transition time is the one written here, to the second.
    """
    cluster.kubectl("label", "node", node, STOPPED)
    post_ready_false(cluster, node, reason="RackPowerLost", message="e2e: the rack lost power")


def resume_heartbeats(cluster: Cluster, node: str) -> None:
    """Let kwok heartbeat for ``node`` again (it turns Ready within seconds)."""
    cluster.kubectl("label", "node", node, f"{kwok.LABEL_FAKE_HEARTBEAT}-")


def bring_back(cluster: Cluster, node: str) -> None:
    """``node`` heartbeats again; wait until it is Ready."""
    resume_heartbeats(cluster, node)
    cluster.wait_for(
        lambda: ready_condition(cluster, node)["status"] == "True",
        timeout=60,
        what=f"{node} Ready again",
    )


def ready_condition(cluster: Cluster, node: str) -> dict[str, Any]:
    found = cluster.get("node", node)
    assert found is not None
    (ready,) = [c for c in found["status"]["conditions"] if c["type"] == "Ready"]
    return dict(ready)


def quarantine_taint(cluster: Cluster, name: str) -> dict[str, Any] | None:
    found = cluster.get("node", name)
    assert found is not None
    taints = found["spec"].get("taints") or []
    return next((t for t in taints if t["key"] == QUARANTINE), None)


def node_labels(cluster: Cluster, node: str) -> dict[str, Any]:
    found = cluster.get("node", node)
    assert found is not None
    return dict(found["metadata"].get("labels") or {})


def recorded_faults(cluster: Cluster, node: str) -> list[dict[str, Any]]:
    """The faults the Node records, as ``kubectl get node -o json`` shows them."""
    found = cluster.get("node", node)
    assert found is not None
    value = (found["metadata"].get("annotations") or {}).get(FAULTS)
    return list(json.loads(value)) if value is not None else []


def node_events(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.list_objects("events", "default")
        if e["involvedObject"].get("kind") == "Node" and e["involvedObject"].get("name") == name
    ]


def metric(controller: ControllerProcess, sample: str) -> float:
    """The value of one sample (``name{labels}``) of the controller's metrics, 0 when absent."""
    lines = [line for line in controller.metrics().splitlines() if line.startswith(sample + " ")]
    return float(lines[0].rsplit(" ", 1)[1]) if lines else 0.0


def running_on(cluster: Cluster, namespace: str, name: str) -> str | None:
    """The node of the job's only pod once it is Running, else None."""
    pods = live_pods(cluster, namespace, name)
    if len(pods) == 1 and pods[0]["status"].get("phase") == "Running":
        return str(pods[0]["spec"]["nodeName"])
    return None


def all_running_in_attempt(pods: Sequence[Mapping[str, Any]], count: int, attempt: int) -> bool:
    """``count`` pods, every one Running in gang attempt ``attempt``."""
    return len(pods) == count and all(
        p["status"].get("phase") == "Running"
        and p["metadata"]["annotations"][GANG_ATTEMPT] == str(attempt)
        for p in pods
    )
