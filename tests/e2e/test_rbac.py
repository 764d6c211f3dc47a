"""The install's RBAC, held against what the components really do (apiserver audit log).

A control plane of its own, with an audit log, runs ``torchgate certs``, ``torchgate webhook``
and ``torchgate controller`` under their ServiceAccounts (tokens from the TokenRequest API, RBAC
from manifests/base) through a job's whole life: certificates made and renewed, caBundle patched,
policies watched and reported on (one invalid, which makes an Event), a TeamQuota watched by both
and its status written by the controller, a PyTorchJob admitted by the webhook (which asks the
controller's pool service for a forecast: the controller reviews the webhook's token and access),
its gang created, restarted after a failure, finished, cleaned up and deleted by its TTL, a job
waiting while a user's Service holds its Master's Service name (the controller reads it), a job
whose image never pulls quarantining its first node (the controller patches the Node), and
leadership taken (the leader labels its pod) and handed back (the stopping leader reads its
Deployment). On Kubernetes 1.37 the control plane
runs with ``GenericWorkload`` on, so the gang gets its Workload and PodGroups (and the restart
deletes the first attempt's). Then the audit log must show no 403 for those accounts, and every
granted (resource, verb) used at least once: a rule nobody exercised is excess. A request the
controller is not granted is made on purpose first, to prove a 403 would be seen.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import rbacmodel as rm
from tests.builders.claims import claiming_pod
from tests.builders.job import job
from tests.builders.policy import policy
from tests.builders.team import team_quota
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import (
    ControllerProcess,
    create_job,
    events_of,
    get_job,
    live_pods,
)
from tests.e2e.rbac import BASE_NAMESPACE, base_rbac_objects, service_account_kubeconfig
from torchgate.pytorchjob.devices import RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE
from torchgate_dev.controlplane import kwok, versions
from torchgate_dev.controlplane.binaries import Binaries
from torchgate_dev.controlplane.cluster import ClusterFeatures, ControlPlane
from torchgate_dev.controlplane.processes import terminate
from torchgate_dev.ports import free_port

# The first test also starts a control plane and runs the whole scenario.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

WEBHOOK_ACCOUNT = "torchgate-webhook"
CONTROLLER_ACCOUNT = "torchgate-controller"
CONTROLLER_POD = "torchgate-controller-0"
SECRET = f"{BASE_NAMESPACE}/torchgate-webhook-tls"


def username(account: str) -> str:
    return f"system:serviceaccount:{BASE_NAMESPACE}:{account}"


@dataclass(frozen=True)
class Call:
    """One request of the audit log."""

    account: str
    group: str
    resource: str
    verb: str
    namespace: str | None
    name: str | None
    code: int
    uri: str


def read_audit(path: Path) -> list[Call]:
    """The requests made by torchgate's ServiceAccounts (not by impersonation)."""
    accounts = {username(a): a for a in (WEBHOOK_ACCOUNT, CONTROLLER_ACCOUNT)}
    calls: list[Call] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        account = accounts.get(event.get("user", {}).get("username", ""))
        reference = event.get("objectRef")
        if account is None or reference is None:
            continue
        resource = reference.get("resource", "")
        if reference.get("subresource"):
            resource += "/" + reference["subresource"]
        calls.append(
            Call(
                account=account,
                group=reference.get("apiGroup", ""),
                resource=resource,
                verb=event["verb"],
                namespace=reference.get("namespace"),
                name=reference.get("name"),
                code=int(event.get("responseStatus", {}).get("code", 0)),
                uri=event.get("requestURI", ""),
            )
        )
    return calls


def authorized(call: Call) -> bool:
    """Whether the apiserver let the call through authorization.

    A success, or a get of an object that does not exist: 404 is answered only after
    authorization (the webhook reads a claim or template its caches miss before refusing it, and
    in the scenario it truly is missing).
    """
    return call.code < 400 or (call.verb == "get" and call.code == 404)


def refused_fields(cluster: Cluster, namespace: str, raw: dict[str, Any]) -> set[str]:
    """The fields a server dry run of creating ``raw`` is refused on (none when allowed)."""
    path = f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs?dryRun=All"
    status, body = cluster.api_request("POST", path, raw)
    if status != 422:
        return set()
    return {cause.get("field", "") for cause in body.get("details", {}).get("causes", [])}


def exercises(call: Call, grant: rm.Grant) -> bool:
    """Whether ``call`` was authorized by (and only needed) ``grant``."""
    return (
        authorized(call)
        and (call.account, call.group, call.resource, call.verb)
        == (grant.account, grant.group, grant.resource, grant.verb)
        and (grant.namespace is None or call.namespace == grant.namespace)
        and (not grant.names or call.name in grant.names)
    )


class Process:
    """A torchgate command as a subprocess, with its log."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = log_path.open("ab")
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "torchgate", *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        code = terminate(self.process, grace=15)
        self._log.close()
        return code


def run_torchgate(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    return subprocess.run(
        [sys.executable, "-m", "torchgate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def https_ok(url: str, ca_file: Path) -> bool:
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return int(response.status) == 200
    except OSError:
        return False


def stand_in_pod(name: str) -> dict[str, Any]:
    """A pod in torchgate's namespace (restricted Pod Security) that never gets a node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": BASE_NAMESPACE},
        "spec": {
            "nodeSelector": {"torchgate.io/nowhere": "true"},
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "controller",
                    "image": "registry.invalid/torchgate:0",
                    "securityContext": {
                        "runAsUser": 65532,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def condition_of(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for item in (obj or {}).get("status", {}).get("conditions", []):
        if item.get("type") == kind:
            return dict(item)
    return {}


# The controller's calls for Kubernetes' gang objects, made only where the API is served.
GANG_OBJECT_CALLS = frozenset(
    {
        ("scheduling.k8s.io", "workloads", "create"),
        ("scheduling.k8s.io", "podgroups", "create"),
        ("scheduling.k8s.io", "podgroups", "deletecollection"),
    }
)


def gang_features(version: object) -> ClusterFeatures | None:
    """``GenericWorkload`` and ``scheduling.k8s.io/v1beta1`` on 1.37; other versions: defaults."""
    if not str(version).startswith("1.37."):
        return None
    return ClusterFeatures(
        feature_gates={"GenericWorkload": True},
        runtime_config={"scheduling.k8s.io/v1beta1": "true"},
        controllers=("podgroup-protection-controller",),
    )


def unserved_gang_object_calls(cluster: Cluster) -> frozenset[tuple[str, str, str]]:
    """``GANG_OBJECT_CALLS`` where the cluster does not serve the API, else nothing."""
    served = "scheduling.k8s.io/v1beta1" in cluster.kubectl("api-versions").stdout.split()
    return frozenset() if served else GANG_OBJECT_CALLS


@pytest.fixture(scope="module")
def audited(
    control_plane_binaries: Binaries, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A control plane of this module's own, with the apiserver's audit log on."""
    if os.environ.get("TORCHGATE_E2E_KUBECONFIG"):
        pytest.skip("needs a local control plane (an audit log of the apiserver)")
    workdir = tmp_path_factory.mktemp("audited-cp")
    with ControlPlane(
        binaries=control_plane_binaries,
        workdir=workdir,
        audit_log=True,
        features=gang_features(versions.supported().select(environ=os.environ)),
    ) as plane:
        helper = Cluster(plane)
        helper.install_crds()
        yield helper


@pytest.fixture(scope="module")
def audit_log(audited: Cluster, tmp_path_factory: pytest.TempPathFactory) -> list[Call]:
    """Run every component through a job's life as its ServiceAccount; return their requests."""
    cluster = audited
    logs = tmp_path_factory.mktemp("rbac-logs")
    webhook_kubeconfig = service_account_kubeconfig(cluster, BASE_NAMESPACE, WEBHOOK_ACCOUNT)
    controller_kubeconfig = service_account_kubeconfig(cluster, BASE_NAMESPACE, CONTROLLER_ACCOUNT)

    # The deliberate 403 (see the module docstring).
    denied = subprocess.run(
        [
            "kubectl",
            f"--kubeconfig={controller_kubeconfig}",
            "get",
            "secrets",
            "-n",
            BASE_NAMESPACE,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower(), denied.stderr

    # Webhook configurations as installed, but calling a local webhook; caBundle left to certs.
    port = free_port()
    rendered = cluster.kubectl("kustomize", str(rm.REPO_ROOT / "manifests" / "base")).stdout
    configurations = [
        doc
        for doc in yaml.safe_load_all(rendered)
        if doc and doc["kind"].endswith("WebhookConfiguration")
    ]
    for configuration in configurations:
        for webhook in configuration["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}"}
    cluster.apply(configurations)

    # torchgate certs: creates the Secret and patches caBundle, then renews (patches the Secret).
    certs = logs / "certs"
    certs_args = [
        "certs", "--service", "torchgate-webhook", "--namespace", BASE_NAMESPACE,
        "--ip", "127.0.0.1", "--secret", SECRET, "--webhook-config", "torchgate",
        "--out-dir", str(certs), "--kubeconfig", str(webhook_kubeconfig),
    ]  # fmt: skip
    for extra in ([], ["--force"]):
        result = run_torchgate(*certs_args, *extra)
        assert result.returncode == 0, result.stderr
    for configuration in configurations:
        stored = cluster.get(configuration["kind"], "torchgate")
        assert stored is not None
        assert all(w["clientConfig"].get("caBundle") for w in stored["webhooks"])

    # A policy that does not parse, written before the webhook listens: its webhook's
    # failurePolicy Ignore lets it through (a running webhook refuses it), and the webhook
    # reports on it once it has listed the policies.
    cluster.apply(
        policy(
            "rbac-invalid",
            namespaces=["nowhere"],
            # Exists with a value: the parser's rule, which the CRD schema does not state.
            tolerations=[{"key": "a", "operator": "Exists", "value": "sometimes"}],
        )
    )
    pool_port = free_port()  # the controller's pool service, which the webhook asks
    webhook = Process(
        [
            "webhook", "--bind", "127.0.0.1", "--port", str(port),
            "--tls-cert-file", str(certs / "tls.crt"),
            "--tls-private-key-file", str(certs / "tls.key"),
            "--kubeconfig", str(webhook_kubeconfig), "--reload-interval", "1",
            "--controller-url", f"https://127.0.0.1:{pool_port}",
            "--controller-ca-file", str(certs / "ca.crt"),
        ],
        logs / "webhook.log",
    )  # fmt: skip
    controller: ControllerProcess | None = None
    try:
        cluster.wait_for(
            lambda: https_ok(f"https://127.0.0.1:{port}/readyz", certs / "ca.crt"),
            what="the webhook ready (policies listed)",
        )
        namespace = cluster.new_namespace("rbac")
        pool = f"rbac-{namespace[-6:]}"
        cluster.add_gpu_nodes(2, pool, gpus=8, labels={"pool": pool})
        cluster.apply(
            [
                policy(
                    "rbac-valid",
                    namespaces=[namespace],
                    nodeSelector={"pool": pool},
                    jobDefaults={
                        "managedBy": "torchgate.io/controller",
                        "cleanPodPolicy": "All",
                        "ttlSecondsAfterFinished": 0,
                    },
                    quarantine={"faults": 1, "stuckPodSeconds": 5},
                ),
            ]
        )
        # The webhook patched both policies' status and made an Event for the invalid one.
        cluster.wait_for(
            lambda: (
                condition_of(cluster.get("placementpolicy", "rbac-valid"), "Valid").get("status")
                == "True"
            ),
            what="rbac-valid Valid=True",
        )
        cluster.wait_for(
            lambda: (
                condition_of(cluster.get("placementpolicy", "rbac-invalid"), "Valid").get("status")
                == "False"
            ),
            what="rbac-invalid Valid=False",
        )
        cluster.wait_for(
            lambda: events_of(cluster, "default", "rbac-invalid"),
            what="an Event about rbac-invalid in default",
        )

        # The pod the controller runs in (it labels it while leading): a stand-in, never run.
        cluster.apply(stand_in_pod(CONTROLLER_POD))
        controller = ControllerProcess(
            controller_kubeconfig,
            logs,
            "--leader-election-namespace", BASE_NAMESPACE,
            "--leader-election-id", "torchgate-controller",
            "--deployment", "torchgate-controller",  # read as it stops (none here: it releases)
            "--pool-service-port", str(pool_port),
            "--pool-service-bind-address", "127.0.0.1",
            "--tls-cert-file", str(certs / "tls.crt"),
            "--tls-private-key-file", str(certs / "tls.key"),
            "--pod-name", CONTROLLER_POD,
            leader_elect=True,
        ).start()  # fmt: skip
        cluster.wait_for(
            lambda: (
                (cluster.get("lease", "torchgate-controller", BASE_NAMESPACE) or {})
                .get("spec", {})
                .get("holderIdentity")
            ),
            what="the controller holding its Lease",
        )

        # A TeamQuota owning the job's namespace: the webhook reads it (quota ceiling), the
        # controller reports the team's usage and validity in its status.
        cluster.apply(team_quota("rbac-team", [namespace], nominalGPUs=8))
        cluster.wait_for(
            lambda: (
                condition_of(cluster.get("teamquota", "rbac-team"), "Valid").get("status") == "True"
            ),
            what="rbac-team Valid=True (status written by the controller)",
        )

        cluster.wait_for(
            lambda: (
                (cluster.get("pod", CONTROLLER_POD, BASE_NAMESPACE) or {})
                .get("metadata", {})
                .get("labels", {})
                .get("torchgate.io/leader")
                == "true"
            ),
            what="the leader's pod labelled for the Service torchgate-controller",
        )

        # A job naming a ResourceClaim and a ResourceClaimTemplate that do not exist: once its
        # claim caches have listed, the webhook reads each live (get, answered 404) before it
        # refuses them. A server dry run: nothing is created.
        missing = (
            job("rbac-claims", namespace)
            .master(pod_spec=claiming_pod(("c", RESOURCE_CLAIM, "rbac-no-claim")))
            .workers(1, pod_spec=claiming_pod(("t", RESOURCE_CLAIM_TEMPLATE, "rbac-no-template")))
            .build()
        )
        cluster.wait_for(
            lambda: (
                {
                    "spec.pytorchReplicaSpecs[Master].template.spec.resourceClaims[0]"
                    ".resourceClaimName",
                    "spec.pytorchReplicaSpecs[Worker].template.spec.resourceClaims[0]"
                    ".resourceClaimTemplateName",
                }
                <= refused_fields(cluster, namespace, missing)
            ),
            what="the missing claim and template refused (the webhook's claim caches listed)",
        )

        # A job through the webhook (defaults from rbac-valid, a forecast from the controller)
        # and the controller, to its end.
        name = "audited"
        create_job(cluster, job(name, namespace).master(gpus=1).workers(1, gpus=1).build())
        admitted = get_job(cluster, namespace, name)
        assert admitted is not None
        assert admitted["spec"]["runPolicy"]["managedBy"] == "torchgate.io/controller"
        # A scale of it: the webhook reads the job (get) and refuses it (not elastic).
        scaled = cluster.kubectl(
            "scale", "-n", namespace, f"pytorchjob/{name}", "--replicas=2", check=False
        )
        assert scaled.returncode != 0, scaled.stdout

        def running(count: int) -> list[dict[str, Any]] | None:
            pods = live_pods(cluster, namespace, name)
            ok = len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)
            return pods if ok else None

        first = cluster.wait_for(lambda: running(2), timeout=60, what="the gang Running")
        assert cluster.list_objects("service", namespace), "the controller made Services"
        cluster.finish_pod(namespace, f"{name}-worker-0", 1)  # OnFailure: restart the gang
        cluster.wait_for(
            lambda: (
                (get_job(cluster, namespace, name) or {})
                .get("metadata", {})
                .get("annotations", {})
                .get("torchgate.io/restarts")
                == "1"
                and (pods := running(2))
                and {p["metadata"]["uid"] for p in pods}.isdisjoint(
                    p["metadata"]["uid"] for p in first
                )
            ),
            timeout=60,
            what="the gang restarted (old pods deleted, new ones Running)",
        )
        cluster.finish_pod(namespace, f"{name}-master-0", 0)
        cluster.wait_for(
            lambda: get_job(cluster, namespace, name) is None,
            timeout=60,
            what="the finished job cleaned up and deleted (ttlSecondsAfterFinished 0)",
        )
        assert not live_pods(cluster, namespace, name)

        # A Service of a user's own holding a job's Master Service name: the controller reads
        # it (get) after its create's AlreadyExists, and again until it is gone.
        held = "held"
        users_service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": f"{held}-master-0", "namespace": namespace},
            "spec": {"clusterIP": "None", "selector": {"app": "mine"}},
        }
        cluster.apply(users_service)
        create_job(cluster, job(held, namespace).master(gpus=1).build())
        cluster.wait_for(
            lambda: (
                condition_of(get_job(cluster, namespace, held), "Queued").get("reason")
                == "PodNameConflict"
            ),
            timeout=60,
            what="the job waiting for its Service's name",
        )
        cluster.kubectl("delete", "service", f"{held}-master-0", "-n", namespace)
        cluster.wait_for(
            lambda: len(live_pods(cluster, namespace, held)) == 1,
            timeout=60,
            what="its gang created once the name is free",
        )
        cluster.finish_pod(namespace, f"{held}-master-0", 0)
        cluster.wait_for(
            lambda: get_job(cluster, namespace, held) is None,
            timeout=60,
            what="the job finished and deleted",
        )

        # Orphans with a job's labels (what kubectl delete --cascade=orphan of its earlier self
        # leaves): the controller reads the job past its cache (get), then adopts its Service
        # and its pod (patch), the pod a straggler of no attempt, deleted.
        orphaned = "adopted"
        labels = {
            "training.kubeflow.org/operator-name": "torchgate",
            "training.kubeflow.org/job-name": orphaned,
        }
        orphan_metadata = {"name": f"{orphaned}-master-0", "namespace": namespace, "labels": labels}
        orphan_pod = {**stand_in_pod(f"{orphaned}-master-0"), "metadata": orphan_metadata}
        cluster.apply({**users_service, "metadata": orphan_metadata})
        cluster.apply(orphan_pod)
        create_job(cluster, job(orphaned, namespace).master(gpus=1).build())
        adopter = get_job(cluster, namespace, orphaned)
        assert adopter is not None

        def controller_uid(kind: str) -> str | None:
            found = cluster.get(kind, f"{orphaned}-master-0", namespace) or {}
            references = found.get("metadata", {}).get("ownerReferences") or []
            return next((r["uid"] for r in references if r.get("controller")), None)

        cluster.wait_for(
            lambda: controller_uid("service") == adopter["metadata"]["uid"],
            timeout=60,
            what="the orphaned Service adopted",
        )
        cluster.wait_for(
            lambda: (
                len(live_pods(cluster, namespace, orphaned)) == 1
                and controller_uid("pod") == adopter["metadata"]["uid"]
            ),
            timeout=60,
            what="the orphaned pod adopted (then replaced by the gang's)",
        )
        cluster.finish_pod(namespace, f"{orphaned}-master-0", 0)
        cluster.wait_for(
            lambda: get_job(cluster, namespace, orphaned) is None,
            timeout=60,
            what="the job that adopted its orphans finished and deleted",
        )

        # A job whose image never pulls: its first stuck pod quarantines its node (faults: 1,
        # the controller patches the Node), its second ends it (backoffLimit 0), then TTL.
        def image_never_pulls(raw: dict[str, Any]) -> None:
            template = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
            template["metadata"] = {"annotations": kwok.image_pull_failure_annotation()}

        typo = job("typo", namespace).master(gpus=1).run_policy(backoffLimit=0)
        create_job(cluster, typo.edit(image_never_pulls).build())
        cluster.wait_for(
            lambda: any(
                t.get("key") == "torchgate.io/quarantine"
                for n in cluster.list_objects("node")
                for t in n["spec"].get("taints") or []
            ),
            timeout=60,
            what="a node quarantined (patched by the controller)",
        )
        cluster.wait_for(
            lambda: get_job(cluster, namespace, "typo") is None,
            timeout=60,
            what="the job with a missing image failed and deleted",
        )
    except BaseException:
        print(webhook.log()[-4000:], controller.log()[-4000:] if controller else "")
        raise
    finally:
        # SIGTERM: the controller hands its Lease back (get + update) on the way out.
        if controller is not None:
            assert controller.stop() == 0, controller.log()
        assert webhook.stop() == 0, webhook.log()
        cluster.clean_up_test()

    path = cluster.plane.audit_log_path
    assert path is not None
    assert path.is_file()
    time.sleep(1)  # watches closed by the stops are logged at ResponseComplete
    return read_audit(path)


def test_forbidden_requests_show_up_in_the_audit_log(audit_log: list[Call]) -> None:
    # The deliberate one: proves a 403 would be noticed by the next test.
    assert any(
        c.account == CONTROLLER_ACCOUNT and c.resource == "secrets" and c.code == 403
        for c in audit_log
    )


def test_no_component_was_refused_anything(audit_log: list[Call]) -> None:
    refused = [
        c
        for c in audit_log
        if c.code == 403 and not (c.account == CONTROLLER_ACCOUNT and c.resource == "secrets")
    ]
    assert refused == []


def test_every_granted_permission_was_used(audited: Cluster, audit_log: list[Call]) -> None:
    grants = rm.grants(base_rbac_objects(audited))
    assert grants
    unserved = unserved_gang_object_calls(audited)
    unused = [
        str(grant)
        for grant in grants
        if not any(exercises(call, grant) for call in audit_log)
        and (grant.group, grant.resource, grant.verb) not in unserved
        and not any(
            (component, grant.group, grant.resource, grant.verb) in rm.ADMISSION_ONLY
            for component in ("controller", "webhook", "certs")
        )
    ]
    assert unused == [], "granted but never used (excess RBAC)"


def test_every_call_the_code_can_make_was_made(audited: Cluster, audit_log: list[Call]) -> None:
    # The scenario covers the static table, so the static and dynamic checks see the same calls.
    made = {(c.group, c.resource, c.verb) for c in audit_log if authorized(c)}
    scanned = {
        (group, resource, verb)
        for component, group, resource, verb, _, _ in rm.scan_code().calls
        if component not in rm.CHART_ONLY_COMPONENTS  # manifests/base does not run them
    }
    assert scanned - made - unserved_gang_object_calls(audited) == set()


def test_service_account_kubeconfig_works_in_another_namespace(audited: Cluster) -> None:
    # What tests/e2e/rbac.py offers other modules: the same RBAC, moved to their namespace.
    kubeconfig = service_account_kubeconfig(audited, "tg-elsewhere", CONTROLLER_ACCOUNT)

    def can(*args: str) -> bool:
        result = subprocess.run(
            ["kubectl", f"--kubeconfig={kubeconfig}", "auth", "can-i", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return result.stdout.strip() == "yes"

    assert can("create", "leases.coordination.k8s.io", "-n", "tg-elsewhere")
    assert can("update", "leases.coordination.k8s.io/torchgate-controller", "-n", "tg-elsewhere")
    assert not can("update", "leases.coordination.k8s.io/someone-else", "-n", "tg-elsewhere")
    assert not can("create", "leases.coordination.k8s.io", "-n", BASE_NAMESPACE)
    assert can("list", "pods", "--all-namespaces")
    assert not can("get", "secrets", "-n", "tg-elsewhere")
    # The original bindings still name the torchgate-system accounts.
    binding = audited.get("clusterrolebinding", "torchgate-controller")
    assert binding is not None
    assert binding["subjects"][0]["namespace"] == BASE_NAMESPACE
    assert audited.get("clusterrolebinding", "torchgate-controller--tg-elsewhere") is not None
