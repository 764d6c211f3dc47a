"""Installing torchgate: README.md works as written.

- The install section is followed step by step, for real: the ``# step:`` blocks of README.md
  and docs/operations.md (troubleshooting, policies, adopting CRDs into Helm) are run with bash
  (``KUBECONFIG`` of the cluster, cwd a scratch folder that sees the repository's ``manifests/``,
  the built helm on ``PATH``) against a control plane with the real node, and the cluster is
  checked after each one. torchgate's image is built from the
  Dockerfile (buildah) and served as ``registry.example.com/torchgate:0.1.0`` and ``:0.1.1`` by the
  node's loopback registry, so the README's image names work as written; the webhook and
  controller pods really run, make their certificate, take their Lease, and seed 003 runs to
  ``Succeeded`` through them. README's Helm upgrade also works from a release of an older
  chart, one without a value the new chart added, and keeps the values the admin set.
- Uninstalling leaves running jobs alone, deleting a job still deletes its pods, and a restarted
  controller adopts the pods it finds. It leaves the quarantines of nodes too (nobody lifts them
  any more), and README's step after it lifts them, and only them.

``helm lint`` and the server-side dry runs of every rendering are in test_helm_and_dry_runs.py.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from tests import manifestset as ms
from tests.builders.job import job
from tests.builders.policy import policy
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    create_job,
    get_job,
    is_true,
    job_pods,
    live_pods,
)
from tests.e2e.installation import (
    IMAGE,
    NAMESPACE,
    ca_bundles,
    component_pods,
    force_uninstall,
    images,
    installable_cluster,
    local_real_node_binaries,
    nothing_installed,
    rolled_out,
)
from tests.helmtool import CHART, helm_binary, run_helm
from torchgate.controller.quarantine import rules as quarantine_rules
from torchgate.controller.quarantine.rules import Quarantine
from torchgate.pytorchjob import names

README = ms.REPO_ROOT / "README.md"
INSTALL_DOCS = (README, ms.REPO_ROOT / "docs" / "operations.md")
SEEDS = ms.REPO_ROOT.parent / "shared" / "seeds" / "manifests"
STEP_MARKER = re.compile(r"^# step: (?P<id>[a-z0-9-]+)(?: \((?P<note>[^)]*)\))?$")


# ------------------------------------------------------------------------------- the doc's steps


@dataclass(frozen=True)
class Step:
    """One ``# step:`` block of the install doc."""

    id: str
    note: str | None
    script: str
    doc: Path

    @property
    def not_run(self) -> bool:
        return self.note is not None and self.note.startswith("not run")


def doc_steps() -> dict[str, Step]:
    """The marked shell blocks of the install documents, by step id, in document order."""
    steps: dict[str, Step] = {}
    for doc in INSTALL_DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in re.findall(r"^```sh\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL):
            first, _, rest = block.partition("\n")
            marker = STEP_MARKER.match(first)
            if marker is None:
                continue
            assert marker["id"] not in steps, f"step {marker['id']} twice in {INSTALL_DOCS}"
            steps[marker["id"]] = Step(marker["id"], marker["note"], rest, doc)
    return steps


# Which test follows which step, so doc and test cannot drift apart. The first steps and the
# last ones are shared: checking the CRD, waiting for the rollout and checking admission.
KUSTOMIZE_FLOW = (
    "check-crd",
    "kustomize-2-apply",
    "wait-rollout",
    "check-admission",
    "troubleshoot-webhook",
    "troubleshoot-webhook-readyz",
    "troubleshoot-cabundle",
    "troubleshoot-queued",
    "policy-apply",
    "policy-status",
    "kustomize-upgrade",
    "kustomize-uninstall",
    "delete-crds",
)
HELM_FLOW = (
    "check-crd",
    "helm-1-adopt-crds",
    "helm-2-install",
    "wait-rollout",
    "check-admission",
    "helm-upgrade",
    "helm-uninstall",
    "lift-quarantines",
)
# README's install, upgrade and uninstall sections read in this order.
README_ORDER = (
    "check-crd",
    "kustomize-2-apply",
    "wait-rollout",
    "check-admission",
    "helm-2-install",
    "kustomize-upgrade",
    "helm-upgrade",
    "kustomize-uninstall",
    "helm-uninstall",
)


def test_every_doc_step_is_followed_by_a_test() -> None:
    steps = doc_steps()
    assert sorted(steps) == sorted(set(KUSTOMIZE_FLOW + HELM_FLOW))
    for step in steps.values():
        assert step.script.strip(), step.id
        if step.not_run:
            assert re.match(r"not run( on kwok)?: \S", step.note or ""), step.id
    # README's install sections read in the order the flows run them.
    assert all(steps[step].doc == README for step in README_ORDER)
    order = list(steps)
    positions = [order.index(step) for step in README_ORDER]
    assert positions == sorted(positions), README_ORDER


TORCHGATE_CRDS = ("placementpolicies.torchgate.io", "teamquotas.torchgate.io")
"""The CRDs torchgate itself owns (the PyTorchJob CRD is optional)."""


class DocRunner:
    """Runs doc steps in a scratch folder and remembers what it skipped."""

    def __init__(self, cluster: Cluster, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.steps = doc_steps()
        (workdir / "manifests").symlink_to(ms.MANIFESTS)
        helm_dir = str(helm_binary().parent)
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("KUBE")},
            "KUBECONFIG": str(cluster.kubeconfig),
            "KUBECACHEDIR": str(workdir / ".kube-cache"),
            "PATH": helm_dir + os.pathsep + os.environ.get("PATH", ""),
            "HELM_CONFIG_HOME": str(workdir / ".helm" / "config"),
            "HELM_CACHE_HOME": str(workdir / ".helm" / "cache"),
            "HELM_DATA_HOME": str(workdir / ".helm" / "data"),
        }

    def run(
        self, step_id: str, *, expect_failure: bool = False
    ) -> subprocess.CompletedProcess[str]:
        step = self.steps[step_id]
        assert not step.not_run, f"{step_id} is marked not run"
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", step.script],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        failed = result.returncode != 0
        assert failed == expect_failure, (
            f"step {step_id} exited with {result.returncode}\n--- script\n{step.script}"
            f"--- stdout\n{result.stdout}--- stderr\n{result.stderr}"
        )
        return result

    def skip(self, step_id: str) -> None:
        step = self.steps[step_id]
        assert step.not_run, f"{step_id} is not marked as not run; run it"
        print(f"doc step {step_id}: {step.note}")


# ------------------------------------------------------------------------------ cluster helpers


@pytest.fixture(scope="module")
def installable(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A control plane with the real node, the CRDs and torchgate's image (see installation)."""
    binaries = local_real_node_binaries(request)
    with installable_cluster(binaries, tmp_path_factory.mktemp("install-cluster")) as cluster:
        yield cluster


@pytest.fixture
def sandbox(installable: Cluster, tmp_path: Path) -> Iterator[DocRunner]:
    """A clean cluster (no torchgate), and cleanup whatever happens."""
    force_uninstall(installable)
    try:
        yield DocRunner(installable, tmp_path)
    finally:
        force_uninstall(installable)
        installable.clean_up_test()


# ------------------------------------------------------------------------- the doc, followed


def check_installed(cluster: Cluster, *, image: str, policies: bool) -> None:
    namespace = cluster.get("namespace", NAMESPACE)
    assert namespace is not None
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    crd = cluster.get("crd", "placementpolicies.torchgate.io")
    assert crd is not None
    assert any(
        c["type"] == "Established" and c["status"] == "True" for c in crd["status"]["conditions"]
    )
    for account in ("torchgate-webhook", "torchgate-controller"):
        assert cluster.get("serviceaccount", account, NAMESPACE) is not None
    for kind in ("clusterrole", "clusterrolebinding"):
        for name in ("torchgate-webhook", "torchgate-webhook-certs", "torchgate-controller"):
            assert cluster.get(kind, name) is not None, (kind, name)
    assert cluster.get("role", "torchgate-webhook-events", "default") is not None
    assert images(cluster) == {image}
    assert (cluster.get("placementpolicy", "research-h100") is not None) is policies


def check_pods_run_unprivileged(cluster: Cluster) -> None:
    """From inside each running container: a non-root user and a read-only root filesystem."""
    probe = (
        "import os\n"
        "try:\n"
        "    open('/written-by-torchgate', 'w')\n"
        "    print('root filesystem writable')\n"
        "except OSError as error:\n"
        "    print('root filesystem', error.strerror)\n"
        "print('uid', os.getuid(), 'gid', os.getgid())\n"
    )
    for component, container in (("webhook", "webhook"), ("controller", "controller")):
        pod = component_pods(cluster, component)[0]["metadata"]["name"]
        seen = cluster.kubectl(
            "exec", "-n", NAMESPACE, pod, "-c", container, "--", "python", "-c", probe
        ).stdout
        assert "uid 65532 gid 65532" in seen, seen
        assert "root filesystem Read-only file system" in seen, seen


def run_seed_003_through_the_installed_torchgate(cluster: Cluster) -> None:
    """Seed 003, verbatim, admitted by the installed webhook and run by the installed controller.

    The controller of overlay ``default`` runs the jobs that name it as their manager; a policy
    for the namespace says so (``jobDefaults.managedBy``), as an admin would.
    """
    namespace = cluster.new_namespace("seed003")
    cluster.apply(
        policy(
            f"run-{namespace}",
            namespaces=[namespace],
            jobDefaults={"managedBy": "torchgate.io/controller"},
        )
    )
    try:

        def admitted_by_the_policy() -> bool:
            applied = cluster.kubectl(
                "apply", "-n", namespace, "-f", str(SEEDS / "003-torchrun-cpu.yaml")
            )
            stored = get_job(cluster, namespace, "torchrun-cpu") or {}
            if stored.get("spec", {}).get("runPolicy", {}).get("managedBy") is None:
                cluster.kubectl("delete", "pytorchjob", "torchrun-cpu", "-n", namespace)
                return False
            return "torchgate:" in applied.stderr

        cluster.wait_for(admitted_by_the_policy, timeout=60, what="the policy in the webhook")
        cluster.wait_for(
            lambda: is_true(get_job(cluster, namespace, "torchrun-cpu"), "Succeeded"),
            timeout=240,
            what="seed 003 Succeeded",
        )
        pods = job_pods(cluster, namespace, "torchrun-cpu")
        assert sorted(p["metadata"]["name"] for p in pods) == [
            "torchrun-cpu-master-0",
            "torchrun-cpu-worker-0",
        ]
        for pod in pods:
            name = pod["metadata"]["name"]
            log = cluster.kubectl("logs", "-n", namespace, name).stdout
            assert "result tensor([2])" in log, (name, log)
    finally:
        cluster.kubectl("delete", "placementpolicy", f"run-{namespace}", check=False)


def make_a_waiting_job(cluster: Cluster) -> None:
    """``my-job`` in ``my-namespace``, the names the troubleshooting step uses, waiting for GPUs."""
    cluster.kubectl("create", "namespace", "my-namespace", check=False)
    cluster.wait_for(
        lambda: cluster.get("serviceaccount", "default", "my-namespace"), what="SA my-namespace"
    )
    cluster.apply(
        policy(
            "run-my-namespace",
            namespaces=["my-namespace"],
            jobDefaults={"managedBy": "torchgate.io/controller"},
        )
    )
    raw = job("my-job", "my-namespace").master(gpus=8).workers(1, gpus=8).build()

    def queued() -> bool:
        if get_job(cluster, "my-namespace", "my-job") is None:
            cluster.apply(raw)
        stored = get_job(cluster, "my-namespace", "my-job") or {}
        if stored.get("spec", {}).get("runPolicy", {}).get("managedBy") is None:
            cluster.kubectl("delete", "pytorchjob", "my-job", "-n", "my-namespace")
            return False
        return is_true(stored, "Queued")

    cluster.wait_for(queued, timeout=60, what="my-job Queued")


def forget_the_waiting_job(cluster: Cluster) -> None:
    cluster.kubectl("delete", "placementpolicy", "run-my-namespace", "--ignore-not-found")
    cluster.kubectl("delete", "namespace", "my-namespace", "--wait=false", "--ignore-not-found")


@pytest.mark.e2e
@pytest.mark.real_node
@pytest.mark.timeout(1200)
def test_install_with_kustomize_as_the_doc_says(installable: Cluster, sandbox: DocRunner) -> None:
    cluster, doc = installable, sandbox
    doc.run("check-crd")  # the cluster has the PyTorchJob CRD: overlay default

    doc.run("kustomize-2-apply")
    check_installed(cluster, image=f"{IMAGE}:0.1.0", policies=True)

    doc.run("wait-rollout")
    assert rolled_out(cluster, "torchgate-webhook")
    assert rolled_out(cluster, "torchgate-controller")
    # The init container made the certificate and wrote its CA into both configurations.
    bundle = ca_bundles(cluster)[0]
    assert bundle
    assert set(ca_bundles(cluster)) == {bundle}  # every webhook of both configurations
    secret = cluster.get("secret", "torchgate-webhook-tls", NAMESPACE)
    assert secret is not None
    assert secret["data"]["ca.crt"] == bundle
    # One controller replica holds the Lease.
    lease = cluster.get("lease", "torchgate-controller", NAMESPACE)
    assert lease is not None
    holder = lease["spec"]["holderIdentity"]
    assert holder.split("_")[0] in {
        p["metadata"]["name"] for p in component_pods(cluster, "controller")
    }
    check_pods_run_unprivileged(cluster)

    # The apiserver calls the webhook pods through their Service.
    admitted = doc.run("check-admission")
    assert "pytorchjob.kubeflow.org/torchgate-probe created (server dry run)" in admitted.stdout
    assert "Warning: torchgate:" in admitted.stderr
    # And the webhook asks the leading controller for a forecast through the Service
    # torchgate-controller (TLS with the webhook's CA, its token reviewed by the controller),
    # once the controller leads and has read its certificate from the (optional) Secret.
    leader = cluster.wait_for(
        lambda: [
            p["metadata"]["name"]
            for p in component_pods(cluster, "controller")
            if p["metadata"].get("labels", {}).get("torchgate.io/leader") == "true"
        ],
        timeout=120,
        what="the leading controller's pod labelled for its Service",
    )
    assert leader == [holder.split("_")[0]]
    # The probe names no manager and this install runs no --manage-unowned (the training-operator
    # may run such jobs), so the leader's true forecast is that torchgate will not run it.
    cluster.wait_for(
        lambda: (
            "Warning: torchgate: torchgate does not run it: spec.runPolicy.managedBy is unset"
            in doc.run("check-admission").stderr
        ),
        timeout=180,
        what="a forecast in the admission warnings",
    )

    listed = doc.run("troubleshoot-webhook")
    assert re.search(r"^torchgate-webhook\s+2/2\s", listed.stdout, re.MULTILINE), listed.stdout
    assert "validate.pytorchjobs.torchgate.io" in listed.stdout  # from the describe
    readyz = doc.run("troubleshoot-webhook-readyz")
    assert readyz.stdout.startswith("ok"), readyz.stdout
    assert "caBundle matches the Secret" in doc.run("troubleshoot-cabundle").stdout
    cluster.kubectl(
        "patch", "validatingwebhookconfiguration", "torchgate", "--type=json",
        "-p", json.dumps([{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle",
                           "value": base64.b64encode(b"someone else's CA").decode()}]),
    )  # fmt: skip
    assert "does not match" in doc.run("troubleshoot-cabundle").stdout
    # The documented repair: restart the webhook pods (their init container re-syncs caBundle).
    cluster.kubectl("-n", NAMESPACE, "rollout", "restart", "deployment/torchgate-webhook")
    cluster.kubectl(
        "-n", NAMESPACE, "rollout", "status", "deployment/torchgate-webhook", "--timeout=180s",
        timeout=200,
    )  # fmt: skip
    assert "caBundle matches the Secret" in doc.run("troubleshoot-cabundle").stdout
    assert ca_bundles(cluster)[0] == bundle, "the repair restores the same CA"

    run_seed_003_through_the_installed_torchgate(cluster)

    make_a_waiting_job(cluster)
    try:
        waiting = doc.run("troubleshoot-queued")
        # This cluster's nodes have no GPUs: the job can never be placed, and says so (a pool
        # whose nodes are only busy would say "waiting for 16 nvidia.com/gpu ...").
        assert "can ever hold my-job-master-0" in waiting.stdout, waiting.stdout
    finally:
        forget_the_waiting_job(cluster)

    doc.run("policy-apply")
    assert cluster.get("placementpolicy", "research-h100") is not None
    status = doc.run("policy-status")
    assert '"type":"Valid"' in status.stdout
    assert '"status":"True"' in status.stdout

    doc.run("kustomize-upgrade")
    assert images(cluster) == {f"{IMAGE}:0.1.1"}
    assert rolled_out(cluster, "torchgate-webhook")
    assert rolled_out(cluster, "torchgate-controller")
    assert set(ca_bundles(cluster)) == {bundle}, "re-applying keeps caBundle"

    doc.run("kustomize-uninstall")
    assert nothing_installed(cluster)
    for kind, name in (
        ("clusterrole", "torchgate-controller"),
        ("clusterrolebinding", "torchgate-webhook"),
    ):
        assert cluster.get(kind, name) is None
    assert cluster.get("role", "torchgate-webhook-events", "default") is None
    # CRDs and with them the policies stay, until the admin deletes the CRD.
    assert cluster.get("crd", "placementpolicies.torchgate.io") is not None
    assert cluster.get("placementpolicy", "research-h100") is not None
    doc.run("delete-crds")
    cluster.wait_for(
        lambda: all(cluster.get("crd", name) is None for name in TORCHGATE_CRDS),
        timeout=60,
        what="torchgate's CRDs deleted",
    )


@pytest.mark.e2e
@pytest.mark.real_node
@pytest.mark.timeout(900)
def test_install_with_helm_as_the_doc_says(installable: Cluster, sandbox: DocRunner) -> None:
    cluster, doc = installable, sandbox
    cluster.install_crds()  # the kustomize test may have deleted the PlacementPolicy CRD
    doc.run("check-crd")
    doc.run("helm-1-adopt-crds")  # this cluster's CRDs were applied with kubectl
    for name in TORCHGATE_CRDS:
        crd = cluster.get("crd", name)
        assert crd is not None
        assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == "torchgate"

    installed = doc.run("helm-2-install")
    assert "STATUS: deployed" in installed.stdout
    check_installed(cluster, image=f"{IMAGE}:0.1.0", policies=False)

    doc.run("wait-rollout")
    assert rolled_out(cluster, "torchgate-webhook")
    assert rolled_out(cluster, "torchgate-controller")
    bundle = ca_bundles(cluster)[0]
    assert bundle
    admitted = doc.run("check-admission")  # README: "check admission as in steps 3 and 4"
    assert "created (server dry run)" in admitted.stdout

    doc.run("helm-upgrade")
    assert images(cluster) == {f"{IMAGE}:0.1.1"}
    assert rolled_out(cluster, "torchgate-webhook")
    assert rolled_out(cluster, "torchgate-controller")
    assert set(ca_bundles(cluster)) == {bundle}, "helm upgrade keeps caBundle"
    history = run_helm(
        "history", "torchgate", "--namespace", "default", "-o", "json",
        env={"KUBECONFIG": str(cluster.kubeconfig)},
    )  # fmt: skip
    assert [entry["revision"] for entry in json.loads(history.stdout)] == [1, 2]

    # Two nodes the controller quarantined (the patch it writes), one an admin cleared by hand
    # (the labels stay until the controller tidies them), one tainted by someone else. GPU nodes
    # tainted as GPU pools are: the uninstall's hook pod (a Job) must not land on a kwok node,
    # where it would never end.
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    quarantined, cleared, foreign = cluster.add_gpu_nodes(3, "quarantine", taints=[gpu_taint])
    until = datetime.now(UTC) + timedelta(hours=1)
    for name in (quarantined, cleared):
        cluster.wait_for(
            lambda name=name: quarantine_as_the_controller_does(cluster, name, until),
            what=f"node {name} quarantined",
        )
    cluster.kubectl("taint", "nodes", cleared, f"{names.TAINT_QUARANTINE}-")
    cluster.kubectl("taint", "nodes", foreign, "example.com/maintenance=true:NoSchedule")

    doc.run("helm-uninstall")
    assert nothing_installed(cluster)
    assert cluster.get("clusterrole", "torchgate-controller") is None
    crd = cluster.get("crd", "placementpolicies.torchgate.io")
    assert crd is not None, "helm.sh/resource-policy: keep"
    assert quarantine_taints(cluster, quarantined) == ["NodeLost"], "nobody lifts it any more"

    doc.run("lift-quarantines")
    for name in (quarantined, cleared, foreign):
        node = cluster.get("node", name) or {}
        assert quarantine_taints(cluster, name) == [], name
        labels = node["metadata"].get("labels", {})
        assert not {names.LABEL_QUARANTINE, names.LABEL_QUARANTINE_UNTIL} & set(labels), name
    foreign_taints = (cluster.get("node", foreign) or {})["spec"]["taints"]
    assert sorted(t["key"] for t in foreign_taints) == ["example.com/maintenance", "nvidia.com/gpu"]
    doc.run("lift-quarantines")  # nothing left to lift: still succeeds


def quarantine_as_the_controller_does(cluster: Cluster, name: str, until: datetime) -> bool:
    """Write the controller's quarantine patch on node ``name``; False if it must be tried again.

    The patch carries the node's ``resourceVersion`` (``quarantine_patch``, rule 5), so a node
    kwok updated since it was read (its first heartbeat, on a loaded machine) answers 409.
    """
    node = cluster.get("node", name)
    if node is None:
        return False
    patch = quarantine_rules.quarantine_patch(
        node, Quarantine("NodeLost", until), now=datetime.now(UTC)
    )
    written = cluster.kubectl(
        "patch", "node", name, "--type=merge", "-p", json.dumps(patch), check=False
    )
    return bool(written.returncode == 0)


def quarantine_taints(cluster: Cluster, node_name: str) -> list[str]:
    """The causes of the node's ``torchgate.io/quarantine`` taints."""
    node = cluster.get("node", node_name) or {}
    return [
        str(taint.get("value"))
        for taint in node.get("spec", {}).get("taints", [])
        if taint.get("key") == names.TAINT_QUARANTINE
    ]


def chart_before(value: str, folder: Path) -> Path:
    """The chart as it was before the top-level ``value`` was added (how releases grow).

    ``monitoring`` came after the first release of the chart (f7c0a3f): a copy without it in
    values.yaml, the schema and the templates that read it is what an older release installed.
    """
    older = folder / "torchgate"
    shutil.copytree(CHART, older)
    values_file = older / "values.yaml"
    values = yaml.safe_load(values_file.read_text(encoding="utf-8"))
    del values[value]
    values_file.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
    schema_file = older / "values.schema.json"
    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    del schema["properties"][value]
    schema["required"].remove(value)
    schema_file.write_text(json.dumps(schema, indent=2), encoding="utf-8")
    for template in (older / "templates").glob("*.yaml"):
        if f".Values.{value}." in template.read_text(encoding="utf-8"):
            template.unlink()
    return older


@pytest.mark.e2e
@pytest.mark.real_node
@pytest.mark.timeout(900)
def test_helm_upgrade_as_the_doc_says_to_a_chart_with_a_new_value(
    installable: Cluster, sandbox: DocRunner, tmp_path: Path
) -> None:
    # An admin installed a release of the chart that had no `monitoring` yet, with a value of
    # their own; README's upgrade takes the new chart's defaults for what is new and keeps theirs.
    cluster, doc = installable, sandbox
    cluster.install_crds()
    doc.run("helm-1-adopt-crds")
    older = chart_before("monitoring", tmp_path)
    run_helm(
        "install", "torchgate", str(older), "--namespace", "default",
        f"--set=image.repository={IMAGE}", "--set=image.tag=0.1.0",
        "--set=webhook.timeoutSeconds=7",
        env={"KUBECONFIG": str(cluster.kubeconfig)},
    )  # fmt: skip

    doc.run("helm-upgrade")
    assert images(cluster) == {f"{IMAGE}:0.1.1"}
    assert rolled_out(cluster, "torchgate-webhook")
    assert rolled_out(cluster, "torchgate-controller")
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        config = cluster.get(kind, "torchgate")
        assert config is not None, kind
        assert {w["timeoutSeconds"] for w in config["webhooks"]} == {7}, "the admin's value"
    assert cluster.get("configmap", "torchgate-grafana-dashboard", NAMESPACE) is None

    doc.run("helm-uninstall")
    assert nothing_installed(cluster)


# ----------------------------------------------------------------- what uninstalling leaves


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_jobs_outlive_the_controller_and_are_adopted_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    namespace = cluster.new_namespace("uninstall")
    pool = f"un-{namespace[-6:]}"
    cluster.add_gpu_nodes(1, pool, gpus=8, labels={"pool": pool})
    raw = job("kept", namespace).master(gpus=1).workers(1, gpus=1).build()
    for replica in raw["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["nodeSelector"] = {"pool": pool}

    def running() -> dict[str, str] | None:
        pods = live_pods(cluster, namespace, "kept")
        if len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods):
            return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
        return None

    controller = ControllerProcess(cluster.kubeconfig, tmp_path).start()
    try:
        create_job(cluster, raw)
        before = cluster.wait_for(running, timeout=60, what="the gang Running")
    finally:
        assert controller.stop() == 0, controller.log()

    # Controller gone (as after an uninstall): the pods keep running, untouched.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert running() == before
        time.sleep(0.5)

    # Back again: it adopts the same pods and goes on managing the job.
    controller = ControllerProcess(cluster.kubeconfig, tmp_path).start()
    try:
        cluster.wait_for(
            lambda: is_true(get_job(cluster, namespace, "kept"), "Running"), what="kept Running"
        )
        assert running() == before
        cluster.finish_pod(namespace, "kept-master-0", 0)
        cluster.wait_for(
            lambda: is_true(get_job(cluster, namespace, "kept"), "Succeeded"),
            what="kept Succeeded, by the restarted controller",
        )
    finally:
        assert controller.stop() == 0, controller.log()

    # Without any controller, deleting the job deletes its pods (ownerReferences, GC).
    cluster.kubectl("delete", "pytorchjob", "kept", "-n", namespace, "--wait=false")
    cluster.wait_for(
        lambda: not job_pods(cluster, namespace, "kept"), timeout=60, what="pods collected"
    )
