"""The shapes a local torchgate installation is made of: webhook registration and fake GPU pools.

Why a module of its own: how torchgate is registered with the apiserver (which resources and
operations, ``failurePolicy: Fail``, ``sideEffects: None``, the namespaces left out, the timeout)
is a contract that ``torchgate dev``, the e2e tests and the install manifests must all keep. One
pure function builds both configurations, so a change to the contract lands everywhere at once
and a test of the shape covers every user of it. The same goes for the probe objects that tell
whether the apiserver already calls the webhook (a configuration takes effect a moment after it
is created, so "registered" is not yet "admitting"). The fake GPU pools and the API paths of the
few kinds ``torchgate dev`` creates (it server-side applies them without kubectl) live here too.

Everything here is pure: dicts in, dicts out, ``ValueError`` for input that cannot be right.
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from torchgate.pytorchjob import names
from torchgate.pytorchjob.pool import QUOTA_PLURAL
from torchgate_dev.controlplane import kwok

CONFIGURATION_NAME: Final = "torchgate"
MUTATING_WEBHOOK: Final = "mutate.pytorchjobs.torchgate.io"
VALIDATING_WEBHOOK: Final = "validate.pytorchjobs.torchgate.io"
POLICIES_WEBHOOK: Final = "validate.policies.torchgate.io"
# PlacementPolicies and TeamQuotas are refused when written if they would not load, but a webhook
# that is down lets them through (left out and reported, as before): it must never lock admins
# out of fixing a policy, nor keep an install from creating its policies before the webhook runs.
POLICIES_FAILURE_POLICY: Final = "Ignore"
MUTATE_PATH: Final = "/mutate"
VALIDATE_PATH: Final = "/validate"
DEFAULT_TIMEOUT_SECONDS: Final = 5
# kube-system hosts the cluster's own machinery; an outage of the webhook must never block it.
DEFAULT_EXCLUDED_NAMESPACES: Final = ("kube-system",)
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"  # set on every namespace since 1.21
# A job being deleted is never sent to the webhook: the updates it still gets are finalizers
# coming off (the garbage collector's ``orphan`` and ``foregroundDeletion``, anyone's own), and
# with the webhook down ``failurePolicy: Fail`` would refuse them and keep the job forever.
NOT_BEING_DELETED: Final = {
    "name": "not-being-deleted",
    "expression": "!has(object.metadata.deletionTimestamp)",
}
FAILURE_POLICIES: Final = ("Fail", "Ignore")

POOL_LABEL: Final = "pool"
# Topology of the fake pools (docs/pool-sharing.md): coarsest first, as a PlacementPolicy lists
# them in spec.topology.levels. Nodes are racked in pairs and racks grouped two to a block, so
# the default 4-node pool has one block of two racks and ``--pool a100=16x8`` four blocks.
BLOCK_LABEL: Final = "topology.torchgate.io/block"
RACK_LABEL: Final = "topology.torchgate.io/rack"
TOPOLOGY_LEVELS: Final = (BLOCK_LABEL, RACK_LABEL, names.HOSTNAME_LABEL)
NODES_PER_RACK: Final = 2
RACKS_PER_BLOCK: Final = 2
PROBE_NAME: Final = "torchgate-admission-probe"
PROBE_STRAY_ARGUMENT: Final = "--world-size=2"
_PROBE_IMAGE: Final = "registry.invalid/torchgate/probe:1"

_DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_POOL_SPEC = re.compile(r"(?P<name>[^=]+)=(?P<count>[0-9]+)(?:x(?P<gpus>[0-9]+))?(?P<dra>:dra)?")
_MAX_POOL_NODES: Final = 500
_MAX_NODE_GPUS: Final = 64


# --------------------------------------------------------------------------- webhook registration


@dataclass(frozen=True, slots=True)
class ServiceEndpoint:
    """The webhook behind an in-cluster Service (what the install manifests use)."""

    namespace: str
    name: str
    port: int = 443


Endpoint = str | ServiceEndpoint
"""Where the apiserver calls the webhook: a base URL ``https://host:port`` or a Service."""


def client_config(endpoint: Endpoint, path: str, ca_bundle: bytes) -> dict[str, Any]:
    """``clientConfig`` for one route of the webhook.

    Raises:
        ValueError: The URL is not ``https://host[:port]`` (the apiserver only calls https and
            refuses query strings and fragments), or the CA bundle is empty.
    """
    if not ca_bundle.strip():
        raise ValueError("the CA bundle is empty")
    encoded = base64.b64encode(ca_bundle).decode("ascii")
    if isinstance(endpoint, ServiceEndpoint):
        if not 1 <= endpoint.port <= 65535:
            raise ValueError(f"Service port {endpoint.port} is not within 1..65535")
        service = {
            "namespace": endpoint.namespace,
            "name": endpoint.name,
            "path": path,
            "port": endpoint.port,
        }
        return {"service": service, "caBundle": encoded}
    parsed = urllib.parse.urlsplit(endpoint)
    if parsed.scheme != "https" or not parsed.hostname:
        raise ValueError(f"webhook URL {endpoint!r} must be https://host[:port]")
    if parsed.query or parsed.fragment or parsed.username or parsed.password:
        raise ValueError(f"webhook URL {endpoint!r} must not carry a query, fragment or user")
    return {"url": endpoint.rstrip("/") + path, "caBundle": encoded}


def webhook_configurations(
    endpoint: Endpoint,
    *,
    ca_bundle: bytes,
    name: str = CONFIGURATION_NAME,
    failure_policy: str = "Fail",
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
    excluded_namespaces: Sequence[str] = DEFAULT_EXCLUDED_NAMESPACES,
) -> list[dict[str, Any]]:
    """The MutatingWebhookConfiguration and ValidatingWebhookConfiguration, in that order.

    Both cover ``kubeflow.org/v1`` ``pytorchjobs`` on CREATE and UPDATE (the mutating route
    leaves updates alone, the validating one checks immutability), the validating one also
    ``pytorchjobs/scale`` on UPDATE (``kubectl scale``, an HPA: it judges the job as it would be
    after the scale, :mod:`torchgate.webhook.validation.scaling`), fail closed, have no side
    effects (so ``--dry-run=server`` calls them too), speak AdmissionReview v1 only, and skip
    the ``excluded_namespaces`` and every job being deleted (:data:`NOT_BEING_DELETED`: a
    ``matchConditions`` entry, so removing a finalizer never waits for the webhook). The
    validating configuration has a second webhook, :data:`POLICIES_WEBHOOK`: CREATE and UPDATE
    of ``torchgate.io`` PlacementPolicies and TeamQuotas on the same route, always
    :data:`POLICIES_FAILURE_POLICY` (``failure_policy`` is the jobs' only).

    Raises:
        ValueError: A parameter the apiserver would refuse (see :func:`client_config`; the
            timeout must be 1..30 s; the failure policy Fail or Ignore).
    """
    if failure_policy not in FAILURE_POLICIES:
        raise ValueError(f"failurePolicy must be one of {', '.join(FAILURE_POLICIES)}")
    if not 1 <= timeout_seconds <= 30:
        raise ValueError(f"timeoutSeconds {timeout_seconds} is not within 1..30")
    rules = [
        {
            "apiGroups": [names.GROUP],
            "apiVersions": [names.VERSION],
            "resources": [names.PLURAL],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
    ]
    scale_rule = {
        "apiGroups": [names.GROUP],
        "apiVersions": [names.VERSION],
        "resources": [f"{names.PLURAL}/scale"],
        "operations": ["UPDATE"],
        "scope": "Namespaced",
    }
    namespace_selector: dict[str, Any] = {}
    if excluded_namespaces:
        namespace_selector["matchExpressions"] = [
            {
                "key": NAMESPACE_NAME_LABEL,
                "operator": "NotIn",
                "values": list(excluded_namespaces),
            }
        ]

    def webhook(webhook_name: str, path: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "name": webhook_name,
            "clientConfig": client_config(endpoint, path, ca_bundle),
            "rules": rules,
            "failurePolicy": failure_policy,
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": timeout_seconds,
            "namespaceSelector": namespace_selector,
            "matchConditions": [dict(NOT_BEING_DELETED)],
        }

    policies = {
        "name": POLICIES_WEBHOOK,
        "clientConfig": client_config(endpoint, VALIDATE_PATH, ca_bundle),
        "rules": [
            {
                "apiGroups": [names.POLICY_GROUP],
                "apiVersions": [names.POLICY_VERSION],
                "resources": [names.POLICY_PLURAL, QUOTA_PLURAL],
                "operations": ["CREATE", "UPDATE"],
                "scope": "Cluster",
            }
        ],
        "failurePolicy": POLICIES_FAILURE_POLICY,
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": timeout_seconds,
        "matchConditions": [dict(NOT_BEING_DELETED)],
    }
    api_version = "admissionregistration.k8s.io/v1"
    mutating = webhook(MUTATING_WEBHOOK, MUTATE_PATH, rules)
    mutating["reinvocationPolicy"] = "Never"
    return [
        {
            "apiVersion": api_version,
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [mutating],
        },
        {
            "apiVersion": api_version,
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                webhook(VALIDATING_WEBHOOK, VALIDATE_PATH, [*rules, scale_rule]),
                policies,
            ],
        },
    ]


# --------------------------------------------------------------------------- admission probes


def probe_job(namespace: str, *, stray_argument: bool = False) -> dict[str, Any]:
    """A minimal CPU PyTorchJob to create with ``dryRun=All`` (nothing is stored).

    Plain, the mutating webhook defaults it (it has no ``runPolicy``). With ``stray_argument``
    it passes ``--world-size``, which only the validating webhook refuses.
    """
    args = ["--backend", "gloo", *([PROBE_STRAY_ARGUMENT] if stray_argument else [])]

    def replica() -> dict[str, Any]:
        container = {"name": names.CONTAINER_NAME, "image": _PROBE_IMAGE, "args": list(args)}
        return {
            "replicas": 1,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [container]}},
        }

    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {"name": PROBE_NAME, "namespace": namespace},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    }


def probe_path(namespace: str) -> str:
    """API path to POST probe jobs to, as a dry run."""
    return f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{namespace}/{names.PLURAL}?dryRun=All"


def mutation_seen(status: int, body: Mapping[str, Any]) -> bool:
    """Whether the dry-run answer to the plain probe carries the mutating webhook's defaults."""
    spec = body.get("spec") if status in (200, 201) else None
    run_policy = spec.get("runPolicy") if isinstance(spec, Mapping) else None
    return isinstance(run_policy, Mapping) and "cleanPodPolicy" in run_policy


def validation_seen(status: int, body: Mapping[str, Any]) -> bool:
    """Whether the answer to the stray-argument probe is the validating webhook's refusal."""
    details = body.get("details") if status == 422 else None
    causes = details.get("causes") if isinstance(details, Mapping) else None
    return isinstance(causes, list) and any(
        isinstance(cause, Mapping) and str(cause.get("field", "")).endswith(".args")
        for cause in causes
    )


# --------------------------------------------------------------------------- API paths

# The cluster-scoped kinds a dev cluster creates, by (apiVersion, kind): their collection path.
_COLLECTIONS: Final = {
    ("v1", "Node"): "/api/v1/nodes",
    ("resource.k8s.io/v1", "DeviceClass"): "/apis/resource.k8s.io/v1/deviceclasses",
    ("resource.k8s.io/v1", "ResourceSlice"): "/apis/resource.k8s.io/v1/resourceslices",
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): (
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    ),
    (names.POLICY_API_VERSION, names.POLICY_KIND): (
        f"/apis/{names.POLICY_API_VERSION}/{names.POLICY_PLURAL}"
    ),
    (names.POLICY_API_VERSION, "TeamQuota"): f"/apis/{names.POLICY_API_VERSION}/teamquotas",
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): (
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): (
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    ),
}
FIELD_MANAGER: Final = "torchgate-dev"


def apply_path(obj: Mapping[str, Any]) -> str:
    """Where to server-side apply ``obj`` (one of the cluster-scoped kinds a dev cluster makes).

    Raises:
        ValueError: Another kind, or no name.
    """
    collection = _COLLECTIONS.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if collection is None or not isinstance(name, str) or not name:
        raise ValueError(
            f"cannot apply {obj.get('kind')!r} {name!r}: not a kind torchgate dev makes"
        )
    return f"{collection}/{name}?fieldManager={FIELD_MANAGER}&force=true"


def object_path(obj: Mapping[str, Any]) -> str:
    """The object's own path (for reading it back); see :func:`apply_path`."""
    return apply_path(obj).partition("?")[0]


def registration_current(
    expected: Sequence[Mapping[str, Any]], found: Sequence[Mapping[str, Any] | None]
) -> bool:
    """Whether the configurations ``found`` (read back, None when missing) send to our webhook.

    ``expected`` is :func:`webhook_configurations`' answer for the running webhook; ``found``
    the same objects as the apiserver holds them, in that order. Each must exist and have every
    expected webhook with the same ``clientConfig`` (URL and CA): a configuration that is gone,
    or points at another port or CA, means the apiserver does not call the webhook that runs (a
    ``dev up`` stopped before registering it, a configuration deleted by hand).
    """
    if len(expected) != len(found):
        return False
    for want, have in zip(expected, found, strict=True):
        if not isinstance(have, Mapping) or not isinstance(have.get("webhooks"), list):
            return False
        held = {
            webhook.get("name"): webhook.get("clientConfig")
            for webhook in have["webhooks"]
            if isinstance(webhook, Mapping)
        }
        if any(
            held.get(webhook["name"]) != webhook["clientConfig"] for webhook in want["webhooks"]
        ):
            return False
    return True


# --------------------------------------------------------------------------- fake GPU pools


@dataclass(frozen=True, slots=True)
class NodePool:
    """``count`` fake nodes ``<name>-<i>`` labelled ``pool=<name>``, ``gpus`` GPUs each.

    ``dra``: the GPUs are not in the nodes' allocatable but published in ResourceSlices for
    Dynamic Resource Allocation (``kwok.dra_node``, ``kwok.gpu_resource_slice``).

    Each node also carries its topology: ``RACK_LABEL`` ``<name>-r<i // NODES_PER_RACK>`` and
    ``BLOCK_LABEL`` ``<name>-b<rack // RACKS_PER_BLOCK>`` (``kubernetes.io/hostname`` is its name).
    """

    name: str
    count: int
    gpus: int = 8
    dra: bool = False

    def __post_init__(self) -> None:
        if not _DNS_1123_LABEL.fullmatch(self.name) or len(self.name) > 50:
            raise ValueError(
                f"pool name {self.name!r} must be a lower-case DNS label of at most 50 characters"
            )
        if not 1 <= self.count <= _MAX_POOL_NODES:
            raise ValueError(f"pool {self.name}: node count must be within 1..{_MAX_POOL_NODES}")
        if not 0 <= self.gpus <= _MAX_NODE_GPUS:
            raise ValueError(f"pool {self.name}: GPUs per node must be within 0..{_MAX_NODE_GPUS}")

    @property
    def node_names(self) -> list[str]:
        """``<name>-0`` .. ``<name>-<count-1>``."""
        return [f"{self.name}-{index}" for index in range(self.count)]

    def topology_labels(self, index: int) -> dict[str, str]:
        """The block and rack labels of node ``<name>-<index>``."""
        rack = index // NODES_PER_RACK
        return {
            BLOCK_LABEL: f"{self.name}-b{rack // RACKS_PER_BLOCK}",
            RACK_LABEL: f"{self.name}-r{rack}",
        }

    def describe(self) -> str:
        """``a100-0..3 (pool=a100, 8 GPUs each)``; ``, through DRA`` for a DRA pool."""
        last = f"..{self.count - 1}" if self.count > 1 else ""
        how = ", through DRA" if self.dra else ""
        return f"{self.name}-0{last} ({POOL_LABEL}={self.name}, {self.gpus} GPUs each{how})"


DEFAULT_POOLS: Final = (
    NodePool("a100", 4, 8),
    NodePool("t4", 2, 8),
    NodePool("dra", 2, 8, dra=True),
)


def parse_pool(text: str) -> NodePool:
    """``NAME=COUNT`` or ``NAME=COUNTxGPUS`` (default 8 GPUs), e.g. ``a100=4x8``.

    ``:dra`` after it for GPUs through Dynamic Resource Allocation (``dra=2x8:dra``).

    Raises:
        ValueError: The text does not have that form or a value is out of range.
    """
    match = _POOL_SPEC.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not NAME=COUNT or NAME=COUNTxGPUS (e.g. a100=4x8)")
    gpus = match.group("gpus")
    return NodePool(
        match.group("name"),
        int(match.group("count")),
        int(gpus) if gpus else 8,
        dra=match.group("dra") is not None,
    )


def pool_nodes(pools: Sequence[NodePool]) -> list[dict[str, Any]]:
    """The Node objects of all pools (kwok-managed, GPUs in capacity and allocatable).

    Raises:
        ValueError: Two pools share a name.
    """
    seen: set[str] = set()
    nodes: list[dict[str, Any]] = []
    for pool in pools:
        if pool.name in seen:
            raise ValueError(f"pool {pool.name!r} is given twice")
        seen.add(pool.name)
        for index, node in enumerate(pool.node_names):
            labels = {POOL_LABEL: pool.name, **pool.topology_labels(index)}
            if pool.dra:
                nodes.append(kwok.dra_node(node, labels=labels))
            else:
                nodes.append(kwok.gpu_node(node, gpus=pool.gpus, labels=labels))
    return nodes


def pool_devices(pools: Sequence[NodePool]) -> list[dict[str, Any]]:
    """The DeviceClasses and ResourceSlices of the DRA pools (nothing without one)."""
    slices = [
        kwok.gpu_resource_slice(node, pool.gpus)
        for pool in pools
        if pool.dra
        for node in pool.node_names
    ]
    return [*kwok.dra_device_classes(), *slices] if slices else []
