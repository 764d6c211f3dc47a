"""An installable cluster and what the install tests read from it.

``installable_cluster`` is a local control plane with the real node, the CRDs, and torchgate's
image built from the repository's Dockerfile (cached on its inputs) in the node's registry, tagged
as README's ``registry.example.com/torchgate:0.1.0`` and ``:0.1.1`` (containerd mirrors
``registry.example.com`` to that registry). The node's containerd store outlives runs and the
manifests pull ``IfNotPresent``, so containerd's records of those two tags (another checkout's
build, pulled by an earlier run) are removed once the image is built: the pods run this build.
The helpers read the installed objects, and run the chart against such a cluster: the Helm tests'
rig (a cluster without torchgate, ``helm install``/``upgrade`` with the admin's values file, the
wait for both Deployments, the gangs they run), kept here so that no Helm test module carries its
own copy or imports another's.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import manifestset as ms
from tests.builders.job import job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import live_pods
from tests.helmtool import CHART, run_helm
from torchgate_dev.controlplane.binaries import Binaries
from torchgate_dev.controlplane.cluster import ATTACH_ENV, ControlPlane
from torchgate_dev.controlplane.layout import Layout
from torchgate_dev.controlplane.realnode import RealNode
from torchgate_dev.node.config import NodePaths
from torchgate_dev.node.images import node_cache
from torchgate_dev.node.productimage import build_product_image

NAMESPACE = ms.NAMESPACE
IMAGE = "registry.example.com/torchgate"
README_TAGS = ("0.1.0", "0.1.1")
PYTORCHJOB_CRD = ms.MANIFESTS / "crds" / "kubeflow.org_pytorchjobs.yaml"


@contextlib.contextmanager
def installable_cluster(
    binaries: Binaries, workdir: Path, *, torchgate_crds: bool = True
) -> Iterator[Cluster]:
    """A control plane with the real node, the CRDs and torchgate's image in its registry.

    ``torchgate_crds=False``: only the PyTorchJob CRD (a cluster that has the training-operator's
    CRD and has never had torchgate), so the install itself brings torchgate's CRDs.
    """
    plane = ControlPlane(binaries=binaries, workdir=workdir, real_node=True)
    with plane:
        assert plane.registry is not None
        build_product_image(
            registry=plane.registry,
            cache=node_cache(),
            report=lambda line: print(f"image: {line}"),
            tags=("dev", *README_TAGS),
        )
        forget_pulled_readme_tags(binaries, workdir)
        helper = Cluster(plane)
        if torchgate_crds:
            helper.install_crds()
        else:
            helper.kubectl("apply", "-f", str(PYTORCHJOB_CRD))
            helper.kubectl(
                "wait", "--for=condition=Established", "--timeout=60s",
                "crd/pytorchjobs.kubeflow.org",
            )  # fmt: skip
        yield helper


def local_real_node_binaries(request: pytest.FixtureRequest) -> Binaries:
    """The binaries for :func:`installable_cluster`; skips on an attached cluster (no real node)."""
    if os.environ.get(ATTACH_ENV):
        pytest.skip("installs onto the local control plane's real node only")
    binaries: Binaries = request.getfixturevalue("control_plane_binaries")
    return binaries


@contextlib.contextmanager
def cluster_without_torchgate(
    request: pytest.FixtureRequest, workdir: Path, *, leftovers: Sequence[tuple[str, str]]
) -> Iterator[Cluster]:
    """A cluster with the real node, the PyTorchJob CRD and no trace of torchgate.

    After: the pool objects ``leftovers`` (kind, name) are deleted (a release's hooks' objects
    outlive ``helm uninstall``), then torchgate is uninstalled whatever state the test left.
    """
    binaries = local_real_node_binaries(request)
    with installable_cluster(binaries, workdir, torchgate_crds=False) as cluster:
        try:
            yield cluster
        finally:
            for kind, name in leftovers:
                # A TeamQuota whose gangs a failed test left running keeps its finalizer.
                cluster.kubectl(
                    "delete", kind, name, "--ignore-not-found", "--wait=false", check=False
                )
                cluster.kubectl(
                    "patch", kind, name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                    check=False,
                )  # fmt: skip
            force_uninstall(cluster)


def run_chart(
    cluster: Cluster, verb: str, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``helm <verb> torchgate <the repository's chart> --namespace default <args>`` (5 min)."""
    return run_helm(
        verb, "torchgate", str(CHART), "--namespace", "default", *args,
        env={"KUBECONFIG": str(cluster.kubeconfig)}, timeout=300, check=check,
    )  # fmt: skip


def run_chart_with_values(
    cluster: Cluster, verb: str, values: dict[str, Any], values_file: Path, *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """:func:`run_chart` with ``values`` written to ``values_file``, as an admin keeps them."""
    values_file.write_text(yaml.safe_dump(values), encoding="utf-8")
    return run_chart(cluster, verb, f"--values={values_file}", check=check)


def four_pod_gang(name: str, namespace: str, pool: str) -> dict[str, Any]:
    """A Master and 3 Workers of 2 GPUs each (8 GPUs: one kwok node) held to ``pool``."""
    raw = job(name, namespace).master(gpus=2).workers(3, gpus=2).build()
    for replica in raw["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["nodeSelector"] = {"pool": pool}
    return raw


def running_pods(cluster: Cluster, namespace: str, name: str) -> dict[str, str] | None:
    """The pods (name -> uid) of the :func:`four_pod_gang` ``name`` once all four run."""
    pods = live_pods(cluster, namespace, name)
    if len(pods) == 4 and all(p["status"].get("phase") == "Running" for p in pods):
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    return None


def forget_pulled_readme_tags(binaries: Binaries, workdir: Path) -> None:
    """Remove containerd's records of README's tags: the kubelet pulls them from the registry."""
    ctr = RealNode.find_binaries(binaries).ctr
    socket = NodePaths(work=Layout(workdir).node, cache=node_cache()).containerd_socket
    tags = [f"{IMAGE}:{tag}" for tag in README_TAGS]
    subprocess.run(
        [str(ctr), "--address", str(socket), "-n", "k8s.io", "images", "rm", *tags],
        capture_output=True,
        check=False,
        timeout=60,
    )


def deployment(cluster: Cluster, name: str) -> dict[str, Any]:
    found = cluster.get("deployment", name, NAMESPACE)
    assert found is not None, f"deployment {name}"
    return found


def available(cluster: Cluster, name: str) -> bool:
    found = cluster.get("deployment", name, NAMESPACE)
    if found is None:
        return False
    status, wanted = found.get("status", {}), found["spec"]["replicas"]
    conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
    return conditions.get("Available") == "True" and status.get("updatedReplicas") == wanted


def images(cluster: Cluster) -> set[str]:
    found = set()
    for name in ("torchgate-webhook", "torchgate-controller"):
        pod = deployment(cluster, name)["spec"]["template"]["spec"]
        found |= {c["image"] for c in [*pod.get("initContainers", []), *pod["containers"]]}
    return found


def ca_bundles(cluster: Cluster) -> list[str]:
    bundles = []
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        config = cluster.get(kind, "torchgate")
        assert config is not None, kind
        bundles += [w["clientConfig"].get("caBundle", "") for w in config["webhooks"]]
    return bundles


def nothing_installed(cluster: Cluster) -> bool:
    return (
        cluster.get("namespace", NAMESPACE) is None
        and cluster.get("validatingwebhookconfiguration", "torchgate") is None
        and cluster.get("mutatingwebhookconfiguration", "torchgate") is None
    )


def force_uninstall(cluster: Cluster) -> None:
    """Whatever a failed test left behind; above all the webhook configurations (fail closed)."""
    cluster.kubectl(
        "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "torchgate",
        "--ignore-not-found", check=False,
    )  # fmt: skip
    with contextlib.suppress(Exception):
        run_helm(
            "uninstall", "torchgate", "--namespace", "default",
            env={"KUBECONFIG": str(cluster.kubeconfig)}, check=False,
        )  # fmt: skip
    selector = "--selector=app.kubernetes.io/part-of=torchgate"
    cluster.kubectl("delete", "clusterrolebinding,clusterrole", selector, check=False)
    cluster.kubectl("delete", "rolebinding,role", "-n", "default", selector, check=False)
    cluster.kubectl("delete", "placementpolicy", "research-h100", "--ignore-not-found", check=False)
    cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", check=False)
    cluster.wait_for(lambda: nothing_installed(cluster), timeout=120, what="torchgate gone")


def component_pods(cluster: Cluster, component: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/component={component}"
    return [
        p
        for p in cluster.list_objects("pods", NAMESPACE, selector)
        if not p["metadata"].get("deletionTimestamp")
    ]


def wait_rolled_out(cluster: Cluster) -> None:
    """Wait until both Deployments rolled out (``kubectl rollout status``, 3 min each)."""
    for name in ("torchgate-webhook", "torchgate-controller"):
        cluster.kubectl(
            "-n", NAMESPACE, "rollout", "status", f"deployment/{name}", "--timeout=180s",
            timeout=200,
        )  # fmt: skip
        assert rolled_out(cluster, name)


def rolled_out(cluster: Cluster, name: str) -> bool:
    found = cluster.get("deployment", name, NAMESPACE) or {}
    status, wanted = found.get("status", {}), found.get("spec", {}).get("replicas")
    return (
        available(cluster, name)
        and status.get("readyReplicas") == wanted
        and status.get("replicas") == wanted
    )
