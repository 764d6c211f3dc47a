"""The install manifests are safe and consistent, whichever way they are rendered.

Checked on every rendering (kustomize base and overlays, the Helm chart with the values that
mirror them): every YAML parses; the webhook configurations route to paths the server serves and
keep the admission contract; every container is locked down; the commands' flags parse with the
real CLI; certificates are wired from the certs containers to the webhook; the chart renders the
same objects as the kustomizations. RBAC has its own module (test_rbac.py), the image and the
wheel theirs (test_packaging.py), the pool-sharing CRDs and samples theirs (test_pool_crds.py).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import manifestset as ms
from tests.helmtool import CHART, helm_template
from torchgate.cli import build_parser
from torchgate.controller.poolservice import LEADER_LABEL
from torchgate.pytorchjob.outlook import SERVICE_PORT_NAME
from torchgate.webhook.policysource import PolicyCache
from torchgate.webhook.server import create_app
from torchgate_dev import devcluster

REPO_ROOT = ms.REPO_ROOT

# Copies that kustomize/helm need inside their own folders, and the CRDs torchgate-dev carries
# as package data -> the canonical file.
COPIES = {
    "manifests/base/crd-placementpolicies.yaml": (
        "manifests/crds/torchgate.io_placementpolicies.yaml"
    ),
    "manifests/overlays/with-pytorchjob-crd/crd-pytorchjobs.yaml": (
        "manifests/crds/kubeflow.org_pytorchjobs.yaml"
    ),
    "manifests/chart/torchgate/files/crds/torchgate.io_placementpolicies.yaml": (
        "manifests/crds/torchgate.io_placementpolicies.yaml"
    ),
    "manifests/base/crd-teamquotas.yaml": "manifests/crds/torchgate.io_teamquotas.yaml",
    "manifests/chart/torchgate/files/crds/torchgate.io_teamquotas.yaml": (
        "manifests/crds/torchgate.io_teamquotas.yaml"
    ),
    "manifests/chart/torchgate/files/crds/kubeflow.org_pytorchjobs.yaml": (
        "manifests/crds/kubeflow.org_pytorchjobs.yaml"
    ),
    "manifests/overlays/default/placementpolicy.yaml": "manifests/samples/placementpolicy.yaml",
    **{
        f"{folder}/{name}": f"manifests/monitoring/{name}"
        for folder in (
            "manifests/overlays/monitoring",
            "manifests/chart/torchgate/files/monitoring",
        )
        for name in ("torchgate-dashboard.json", "torchgate.rules.yaml")
    },
    # The product's package data: the CRD `torchgate check` validates against.
    "torchgate/pytorchjob/data/kubeflow.org_pytorchjobs.yaml": (
        "manifests/crds/kubeflow.org_pytorchjobs.yaml"
    ),
    # torchgate-dev's package data: torchgate's CRDs `torchgate dev up` applies (the PyTorchJob
    # CRD it takes from the product's package data above).
    **{
        f"dev/torchgate_dev/data/crds/{name}": f"manifests/crds/{name}"
        for name in ("torchgate.io_placementpolicies.yaml", "torchgate.io_teamquotas.yaml")
    },
}

rendering = pytest.mark.parametrize("rendering_id", ms.RENDERING_IDS)


def deployments(objects: list[ms.Obj]) -> list[ms.Obj]:
    return [o for o in objects if o["kind"] == "Deployment"]


def workloads(objects: list[ms.Obj]) -> list[ms.Obj]:
    """What runs torchgate's image: the Deployments and the chart's hook Job."""
    return [o for o in objects if o["kind"] in ("Deployment", "Job")]


def pod_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def webhook_configurations(objects: list[ms.Obj]) -> list[ms.Obj]:
    return [o for o in objects if o["kind"].endswith("WebhookConfiguration")]


# ------------------------------------------------------------------------------------- YAML


def test_every_yaml_file_parses() -> None:
    templates = CHART / "templates"
    files = [
        path for path in (REPO_ROOT / "manifests").rglob("*.yaml") if templates not in path.parents
    ]
    assert len(files) > 15
    for path in files:
        documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        assert any(documents), f"{path} is empty"


@pytest.mark.parametrize(("copy", "canonical"), sorted(COPIES.items()))
def test_copies_equal_their_canonical_file(copy: str, canonical: str) -> None:
    # kustomize, helm and a wheel take no files from outside their folders; copies must not drift.
    copied = (REPO_ROOT / copy).read_text(encoding="utf-8")
    original = (REPO_ROOT / canonical).read_text(encoding="utf-8")
    assert copied == original, f"out of date: cp {canonical} {copy}"


@rendering
def test_rendering_is_a_set_of_well_formed_objects(rendering_id: str) -> None:
    objects = ms.render(rendering_id)
    keyed = ms.by_identity(objects)  # no object twice
    assert len(keyed) == len(objects) > 15
    for obj in objects:
        if obj["kind"] != "PlacementPolicy":  # user content, labelled by its author
            labels = obj["metadata"]["labels"]
            assert labels["app.kubernetes.io/part-of"] == "torchgate", ms.identity(obj)


def test_chart_values_have_the_documented_keys() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    for dotted in (
        "image.repository",
        "image.tag",
        "image.pullPolicy",
        "namespace.create",
        "namespace.name",
        "webhook.replicas",
        "webhook.resources",
        "webhook.failurePolicy",
        "webhook.timeoutSeconds",
        "controller.replicas",
        "controller.resources",
        "controller.manageUnowned",
        "placementPolicies",
        "crds.pytorchJob",
        "certManager.enabled",
    ):
        node: Any = values
        for part in dotted.split("."):
            assert isinstance(node, dict), f"values.yaml: {dotted}"
            assert part in node, f"values.yaml lacks {dotted}"
            node = node[part]


# ------------------------------------------------------------------------------------ webhooks


def test_webhook_paths_are_routes_of_the_server() -> None:
    app = create_app(PolicyCache())
    routes = {
        (route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None
    }
    paths = {
        webhook["clientConfig"]["service"]["path"]
        for config in webhook_configurations(ms.kustomize("base"))
        for webhook in config["webhooks"]
    }
    assert paths == {"/mutate", "/validate"}
    assert {("POST", path) for path in paths} <= routes


@rendering
def test_webhook_configurations_keep_the_admission_contract(rendering_id: str) -> None:
    objects = ms.render(rendering_id)
    configs = webhook_configurations(objects)
    assert sorted(c["kind"] for c in configs) == [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]
    service = ms.find(objects, "Service", "torchgate-webhook")
    for config in configs:
        assert config["metadata"]["name"] == "torchgate"
        for webhook in job_webhooks(config):
            assert webhook["failurePolicy"] == "Fail"
            assert webhook["sideEffects"] == "None"
            assert webhook["admissionReviewVersions"] == ["v1"]
            assert 1 <= webhook["timeoutSeconds"] <= 10
            assert webhook["matchPolicy"] == "Equivalent"
            assert "caBundle" not in webhook["clientConfig"], "patched at run time, never shipped"
            target = webhook["clientConfig"]["service"]
            assert (target["namespace"], target["name"], target["port"]) == (
                service["metadata"]["namespace"],
                service["metadata"]["name"],
                service["spec"]["ports"][0]["port"],
            )
            (expression,) = webhook["namespaceSelector"]["matchExpressions"]
            assert expression["key"] == "kubernetes.io/metadata.name"
            assert expression["operator"] == "NotIn"
            assert {ms.NAMESPACE, "kube-system"} <= set(expression["values"])
            # A job being deleted is skipped: its finalizers come off while the webhook is down.
            assert webhook["matchConditions"] == [devcluster.NOT_BEING_DELETED]
            # Jobs on CREATE and UPDATE; the validating webhook also their scale subresource
            # (kubectl scale, an HPA), which the mutating one never sees.
            scale = [(["pytorchjobs/scale"], ["UPDATE"])]
            assert [
                (rule["apiGroups"], rule["apiVersions"], rule["resources"], rule["operations"])
                for rule in webhook["rules"]
            ] == [
                (["kubeflow.org"], ["v1"], resources, operations)
                for resources, operations in [
                    (["pytorchjobs"], ["CREATE", "UPDATE"]),
                    *(scale if config["kind"] == "ValidatingWebhookConfiguration" else []),
                ]
            ]


def job_webhooks(config: ms.Obj) -> list[ms.Obj]:
    """The webhooks of a configuration that judge PyTorchJobs (not the admin objects)."""
    return [w for w in config["webhooks"] if w["name"] != devcluster.POLICIES_WEBHOOK]


@rendering
def test_policies_and_quotas_are_validated_when_written_and_never_locked_out(
    rendering_id: str,
) -> None:
    objects = ms.render(rendering_id)
    service = ms.find(objects, "Service", "torchgate-webhook")
    (validating,) = [
        c for c in webhook_configurations(objects) if c["kind"] == "ValidatingWebhookConfiguration"
    ]
    (webhook,) = [w for w in validating["webhooks"] if w["name"] == devcluster.POLICIES_WEBHOOK]
    assert [
        (rule["apiGroups"], rule["apiVersions"], rule["resources"], rule["operations"])
        for rule in webhook["rules"]
    ] == [
        (["torchgate.io"], ["v1alpha1"], ["placementpolicies", "teamquotas"], ["CREATE", "UPDATE"])
    ]
    # Down, it lets writes through (left out and reported): admins can always fix a policy.
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["sideEffects"] == "None"
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["matchConditions"] == [devcluster.NOT_BEING_DELETED]
    assert "caBundle" not in webhook["clientConfig"]
    target = webhook["clientConfig"]["service"]
    assert (target["namespace"], target["name"], target["port"], target["path"]) == (
        service["metadata"]["namespace"],
        service["metadata"]["name"],
        service["spec"]["ports"][0]["port"],
        "/validate",
    )
    mutating = [c for c in webhook_configurations(objects) if c is not validating]
    assert all(w["name"] != devcluster.POLICIES_WEBHOOK for c in mutating for w in c["webhooks"])


def test_webhook_configurations_match_the_shared_registration_contract() -> None:
    # torchgate_dev.devcluster builds the registration `torchgate dev` and the e2e tests use; the
    # install must register the same webhooks (names, rules, policies), only behind a Service.
    endpoint = devcluster.ServiceEndpoint(ms.NAMESPACE, "torchgate-webhook", 443)
    expected = devcluster.webhook_configurations(
        endpoint, ca_bundle=b"ca", excluded_namespaces=(ms.NAMESPACE, "kube-system")
    )
    for want in expected:
        for webhook in want["webhooks"]:
            assert base64.b64decode(webhook["clientConfig"].pop("caBundle")) == b"ca"
    got = [
        {key: value for key, value in config.items() if key in ("apiVersion", "kind", "webhooks")}
        for config in webhook_configurations(ms.kustomize("base"))
    ]
    assert got == [
        {"apiVersion": w["apiVersion"], "kind": w["kind"], "webhooks": w["webhooks"]}
        for w in expected
    ]
    assert {w["metadata"]["name"] for w in expected} == {"torchgate"}


def test_timeout_and_failure_policy_are_chart_values() -> None:
    objects = ms.chart(["--set=webhook.timeoutSeconds=3", "--set=webhook.failurePolicy=Ignore"])
    for config in webhook_configurations(objects):
        for webhook in config["webhooks"]:
            assert (webhook["timeoutSeconds"], webhook["failurePolicy"]) == (3, "Ignore")


# ----------------------------------------------------------------------------------- pods


@rendering
def test_every_container_is_locked_down(rendering_id: str) -> None:
    objects = ms.render(rendering_id)
    names = {d["metadata"]["name"] for d in deployments(objects)}
    assert names == {"torchgate-webhook", "torchgate-controller"}
    for workload in workloads(objects):
        pod = workload["spec"]["template"]["spec"]
        where = workload["metadata"]["name"]
        for forbidden in ("hostNetwork", "hostPID", "hostIPC"):
            assert not pod.get(forbidden), f"{where}: {forbidden}"
        assert not any("hostPath" in volume for volume in pod.get("volumes", [])), where
        security = pod["securityContext"]
        assert security["runAsNonRoot"] is True
        assert security["runAsUser"] != 0
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod_containers(pod):
            context = container["securityContext"]
            name = f"{where}/{container['name']}"
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context.get("privileged", False) is False, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name
            assert "add" not in context["capabilities"], name
            assert context.get("runAsUser", security["runAsUser"]) != 0, name
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), name
            assert {"cpu", "memory"} <= set(resources["limits"]), name
            mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{name}: /tmp is the only writable place"


@rendering
def test_container_arguments_parse_with_the_real_command_line(rendering_id: str) -> None:
    for workload in workloads(ms.render(rendering_id)):
        for container in pod_containers(workload["spec"]["template"]["spec"]):
            args = container["args"]
            assert args[0] in ("webhook", "controller", "certs")
            build_parser(args[0]).parse_args(args)  # SystemExit(2) on an unknown flag


@rendering
def test_webhook_deployment_is_highly_available(rendering_id: str) -> None:
    objects = ms.render(rendering_id)
    deployment = ms.find(objects, "Deployment", "torchgate-webhook")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod_labels = spec["template"]["metadata"]["labels"]
    selector = spec["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    pdb = ms.find(objects, "PodDisruptionBudget", "torchgate-webhook")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    service = ms.find(objects, "Service", "torchgate-webhook")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    (webhook,) = [c for c in spec["template"]["spec"]["containers"] if c["name"] == "webhook"]
    (container_port,) = webhook["ports"]
    assert (port["port"], port["targetPort"]) == (443, container_port["name"])
    assert container_port["containerPort"] == 8443
    assert "--port=8443" in webhook["args"]
    readiness, liveness = webhook["readinessProbe"]["httpGet"], webhook["livenessProbe"]["httpGet"]
    assert (readiness["path"], readiness["scheme"]) == ("/readyz", "HTTPS")
    assert (liveness["path"], liveness["scheme"]) == ("/healthz", "HTTPS")
    keys = {c["topologyKey"] for c in spec["template"]["spec"]["topologySpreadConstraints"]}
    assert "kubernetes.io/hostname" in keys


@rendering
def test_controller_elects_a_leader_in_its_own_namespace(rendering_id: str) -> None:
    objects = ms.render(rendering_id)
    deployment = ms.find(objects, "Deployment", "torchgate-controller")
    assert 1 <= deployment["spec"]["replicas"] <= 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    args = build_parser("controller").parse_args(
        [a.replace("$(POD_NAMESPACE)", ms.NAMESPACE) for a in container["args"]]
    )
    assert args.leader_elect is True
    assert args.leader_election_namespace == deployment["metadata"]["namespace"] == ms.NAMESPACE
    assert args.metrics_port == 8080
    assert {p["containerPort"] for p in container["ports"]} == {8080, 8443}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    unowned = rendering_id.endswith("with-pytorchjob-crd")
    assert args.manage_unowned is unowned


@rendering
def test_controller_readiness_is_its_readyz_and_liveness_its_healthz(rendering_id: str) -> None:
    deployment = ms.find(ms.render(rendering_id), "Deployment", "torchgate-controller")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (metrics,) = [p for p in container["ports"] if p["containerPort"] == 8080]
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["port"], get.get("scheme", "HTTP")) == (
            path,
            metrics["name"],
            "HTTP",
        )


@rendering
def test_the_webhook_reaches_the_leaders_pool_service_over_tls_it_can_verify(
    rendering_id: str,
) -> None:
    objects = ms.render(rendering_id)
    service = ms.find(objects, "Service", "torchgate-controller")
    controller = ms.find(objects, "Deployment", "torchgate-controller")["spec"]["template"]
    webhook = ms.find(objects, "Deployment", "torchgate-webhook")["spec"]["template"]["spec"]
    (container,) = controller["spec"]["containers"]
    env = {item["name"]: item for item in container["env"]}
    args = build_parser("controller").parse_args(
        [
            a.replace("$(POD_NAMESPACE)", ms.NAMESPACE).replace("$(POD_NAME)", "pod-0")
            for a in container["args"]
        ]
    )
    # The Service selects the controller's pods that carry the leader label, on the pool port.
    selector = service["spec"]["selector"]
    assert selector.pop(LEADER_LABEL) == "true"
    assert selector.items() <= controller["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    assert (port["name"], port["port"], port["targetPort"]) == (SERVICE_PORT_NAME, 443, "https")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["https"] == args.pool_service_port == 8443
    assert args.pod_name == "pod-0"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # The controller serves the webhook's certificate: its key and certificate, not the CA's key.
    volumes = {v["name"]: v for v in controller["spec"]["volumes"]}
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/tls"]
    assert mount["readOnly"] is True
    secret = volumes[mount["name"]]["secret"]
    assert secret["optional"] is True
    assert [item["key"] for item in secret["items"]] == ["tls.crt", "tls.key"]
    webhook_volumes = {v["name"]: v for v in webhook["volumes"]}
    if rendering_id.endswith("cert-manager"):
        assert secret["secretName"] == webhook_volumes["tls"]["secret"]["secretName"]
        certificate = ms.find(objects, "Certificate", "torchgate-webhook")
        names = certificate["spec"]["dnsNames"]
    else:
        (init,) = webhook["initContainers"]
        certs = build_parser("certs").parse_args(init["args"])
        assert secret["secretName"] == certs.secret.name
        names = certs.dns
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert host in names
    (serving,) = [c for c in webhook["containers"] if c["name"] == "webhook"]
    webhook_args = build_parser("webhook").parse_args(serving["args"])
    assert webhook_args.controller_url == f"https://{host}"
    assert webhook_args.controller_ca_file == webhook_args.tls_cert_file.parent / "ca.crt"


@pytest.mark.parametrize(
    "rendering_id", [r for r in ms.RENDERING_IDS if r.endswith("network-policy")]
)
def test_the_network_policy_lets_only_the_webhook_reach_the_pool_service(
    rendering_id: str,
) -> None:
    objects = ms.render(rendering_id)
    policy = ms.find(objects, "NetworkPolicy", "torchgate-controller")
    controller = ms.find(objects, "Deployment", "torchgate-controller")["spec"]["template"]
    webhook = ms.find(objects, "Deployment", "torchgate-webhook")["spec"]["template"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= controller["metadata"]["labels"].items()
    pool, metrics = policy["spec"]["ingress"]
    (source,) = pool["from"]
    assert source["podSelector"]["matchLabels"].items() <= webhook["metadata"]["labels"].items()
    assert (
        not source["podSelector"]["matchLabels"].items() <= controller["metadata"]["labels"].items()
    )
    assert pool["ports"] == [{"port": "https", "protocol": "TCP"}]
    assert metrics == {"ports": [{"port": "metrics", "protocol": "TCP"}]}


def test_the_chart_lets_the_apiservers_addresses_through_when_told() -> None:
    objects = ms.parse_documents(
        helm_template(
            ["--set=networkPolicy.enabled=true", "--set=networkPolicy.apiserverCIDRs={10.0.0.0/28}"]
        )
    )
    policy = ms.find(objects, "NetworkPolicy", "torchgate-controller")
    apiserver = policy["spec"]["ingress"][1]
    assert apiserver == {
        "from": [{"ipBlock": {"cidr": "10.0.0.0/28"}}],
        "ports": [{"port": "https", "protocol": "TCP"}],
    }
    assert not any(o["kind"] == "NetworkPolicy" for o in ms.render("helm:base"))


# ------------------------------------------------------------------------------ certificates


@pytest.mark.parametrize(
    "rendering_id", [r for r in ms.RENDERING_IDS if not r.endswith("cert-manager")]
)
def test_certs_containers_feed_the_webhook(rendering_id: str) -> None:
    objects = ms.render(rendering_id)
    pod = ms.find(objects, "Deployment", "torchgate-webhook")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    containers = {c["name"]: c for c in pod["containers"]}
    sidecar, webhook = containers["certs-watch"], containers["webhook"]
    service = ms.find(objects, "Service", "torchgate-webhook")
    webhook_args = build_parser("webhook").parse_args(webhook["args"])
    cert_dir = webhook_args.tls_cert_file.parent
    assert webhook_args.tls_private_key_file.parent == cert_dir
    volumes = {v["name"]: v for v in pod["volumes"]}
    for container, watching in ((init, False), (sidecar, True)):
        args = build_parser("certs").parse_args(container["args"])
        assert args.watch is watching
        assert (args.service, args.namespace) == (
            service["metadata"]["name"],
            service["metadata"]["namespace"],
        )
        assert str(args.secret) == f"{ms.NAMESPACE}/torchgate-webhook-tls"
        assert args.webhook_config == ["torchgate"]
        assert args.out_dir == cert_dir
        (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == cert_dir]
        assert not mount.get("readOnly", False)
        assert "emptyDir" in volumes[mount["name"]]
        (shared,) = [m for m in webhook["volumeMounts"] if m["name"] == mount["name"]]
        assert Path(shared["mountPath"]) == cert_dir
        assert shared["readOnly"] is True
    assert volumes["tls"]["emptyDir"]["medium"] == "Memory"


@pytest.mark.parametrize(
    "rendering_id", [r for r in ms.RENDERING_IDS if r.endswith("cert-manager")]
)
def test_cert_manager_rendering_uses_its_certificate(rendering_id: str) -> None:
    objects = ms.render(rendering_id)
    pod = ms.find(objects, "Deployment", "torchgate-webhook")["spec"]["template"]["spec"]
    assert not pod.get("initContainers")
    assert [c["name"] for c in pod["containers"]] == ["webhook"]
    certificate = ms.find(objects, "Certificate", "torchgate-webhook")
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"] == {
        "name": "tls",
        "secret": {"secretName": certificate["spec"]["secretName"], "defaultMode": 0o440},
    }
    service = ms.find(objects, "Service", "torchgate-webhook")
    dns = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert dns in certificate["spec"]["dnsNames"]
    # Signed by a CA Issuer whose CA is itself a cert-manager Certificate (so renewing the
    # serving certificate never changes caBundle).
    issuer = ms.find(objects, "Issuer", certificate["spec"]["issuerRef"]["name"])
    (ca,) = [
        o
        for o in objects
        if o["kind"] == "Certificate"
        and o["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]
    ]
    assert ca["spec"]["isCA"] is True
    reference = f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    for config in webhook_configurations(objects):
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == reference
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert not any(name == "torchgate-webhook-certs" for _, name in names), "no certs RBAC"


# ------------------------------------------------------------------------- chart == kustomize


@pytest.mark.parametrize("name", sorted(ms.CHART_VALUES))
def test_chart_renders_the_same_objects_as_the_kustomization(name: str) -> None:
    kustomized = {k: ms.normalized(v) for k, v in ms.by_identity(ms.kustomize(name)).items()}
    charted = {
        k: ms.normalized(v)
        for k, v in ms.by_identity(ms.chart(ms.CHART_VALUES[name])).items()
        if (k[1], k[3]) not in ms.CHART_ONLY
    }
    assert sorted(kustomized) == sorted(charted), "same kinds and names"
    for key, obj in kustomized.items():
        assert charted[key] == obj, f"{key} differs between kustomize and helm"


def test_chart_release_labels_and_crd_retention() -> None:
    objects = ms.chart(["--set=crds.pytorchJob=true"])
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    assert {c["metadata"]["name"] for c in crds} == {
        "placementpolicies.torchgate.io",
        "teamquotas.torchgate.io",
        "pytorchjobs.kubeflow.org",
    }
    for crd in crds:
        # Deleting a CRD deletes every object of its kind: helm uninstall must leave them.
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_chart_namespace_value_moves_every_namespaced_reference() -> None:
    objects = ms.chart(["--set=namespace.name=gpu-admission"])
    text = yaml.safe_dump_all(objects)
    assert ms.NAMESPACE not in text
    namespaced = {o["metadata"].get("namespace") for o in objects} - {None}
    assert namespaced == {"gpu-admission", "default"}  # default: the webhook's Events Role
    pod = ms.find(objects, "Deployment", "torchgate-webhook")["spec"]["template"]["spec"]
    args = build_parser("certs").parse_args(pod["initContainers"][0]["args"])
    assert (args.namespace, str(args.secret)) == (
        "gpu-admission",
        "gpu-admission/torchgate-webhook-tls",
    )


def test_chart_without_namespace_creation_renders_no_namespace() -> None:
    objects = ms.chart(["--set=namespace.create=false"])
    assert not [o for o in objects if o["kind"] == "Namespace"]


def test_single_webhook_replica_gets_no_disruption_budget() -> None:
    # minAvailable 1 over one replica would block every drain of its node.
    objects = ms.chart(["--set=webhook.replicas=1"])
    assert not [o for o in objects if o["kind"] == "PodDisruptionBudget"]


def test_chart_places_the_listed_policies() -> None:
    objects = ms.chart([ms.SAMPLE])
    policy = ms.find(objects, "PlacementPolicy", "research-h100")
    sample = yaml.safe_load(ms.SAMPLE_POLICY.read_text(encoding="utf-8"))
    assert policy["spec"] == sample["spec"]
