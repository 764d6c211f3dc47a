"""Names, labels and constants shared by the webhook and the controller.

They are the compatibility surface with the Kubeflow training-operator: users' selectors
(``training.kubeflow.org/job-name=...,replica-type=master,replica-index=0``), their scripts
(``MASTER_ADDR`` is ``<job>-master-0``) and their tooling all depend on these exact strings, so
they live in one place and nowhere else.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from torchgate.pytorchjob.digits import MAX_DIGITS

GROUP: Final = "kubeflow.org"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "PyTorchJob"
PLURAL: Final = "pytorchjobs"

POLICY_GROUP: Final = "torchgate.io"
POLICY_VERSION: Final = "v1alpha1"
POLICY_API_VERSION: Final = f"{POLICY_GROUP}/{POLICY_VERSION}"
POLICY_KIND: Final = "PlacementPolicy"
POLICY_PLURAL: Final = "placementpolicies"

JobKey = tuple[str, str]
"""A job as the controller keys it: ``(namespace, name)``."""

ReplicaType = Literal["Master", "Worker"]
MASTER: Final[ReplicaType] = "Master"
WORKER: Final[ReplicaType] = "Worker"
# Deterministic processing order: Master before Worker, everywhere.
REPLICA_TYPES: Final[tuple[ReplicaType, ...]] = (MASTER, WORKER)

CONTAINER_NAME: Final = "pytorch"
PORT_NAME: Final = "pytorchjob-port"
DEFAULT_PORT: Final = 23456

# runPolicy.managedBy values; CONTROLLER_NAME is also the reportingComponent of its Events.
CONTROLLER_NAME: Final = "torchgate.io/controller"
TRAINING_OPERATOR: Final = "kubeflow.org/training-operator"
MULTIKUEUE: Final = "kueue.x-k8s.io/multikueue"
MANAGED_BY_VALUES: Final = (TRAINING_OPERATOR, MULTIKUEUE, CONTROLLER_NAME)

RESTART_POLICIES: Final = ("Always", "OnFailure", "Never", "ExitCode")
CLEAN_POD_POLICIES: Final = ("All", "Running", "None")
DEFAULT_RESTART_POLICY: Final = "OnFailure"

DEFAULT_GPU_RESOURCE: Final = "nvidia.com/gpu"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"

# Labels the training-operator puts on replica pods and Services.
LABEL_PREFIX: Final = "training.kubeflow.org/"
LABEL_OPERATOR_NAME: Final = LABEL_PREFIX + "operator-name"
LABEL_JOB_NAME: Final = LABEL_PREFIX + "job-name"
LABEL_REPLICA_TYPE: Final = LABEL_PREFIX + "replica-type"
LABEL_REPLICA_INDEX: Final = LABEL_PREFIX + "replica-index"
LABEL_JOB_ROLE: Final = LABEL_PREFIX + "job-role"
# The labels the controller sets on every replica pod (``job-role`` on the rendezvous master
# only, removed from the others): a template's own value for one of them never reaches a pod.
POD_LABELS: Final = frozenset(
    {LABEL_OPERATOR_NAME, LABEL_JOB_NAME, LABEL_REPLICA_TYPE, LABEL_REPLICA_INDEX, LABEL_JOB_ROLE}
)
OPERATOR_NAME: Final = "torchgate"

# torchgate's own annotations.
ANNOTATION_HOSTS: Final = "torchgate.io/hosts"
# Restarts counted against backoffLimit: the controller writes it, ``torchgate explain`` reads it.
ANNOTATION_RESTARTS: Final = "torchgate.io/restarts"
ANNOTATION_PLANNED_NODE: Final = "torchgate.io/planned-node"
ANNOTATION_GANG_ATTEMPT: Final = "torchgate.io/gang-attempt"


def own_pod_annotations(*, attempt: int, node: str | None) -> dict[str, str]:
    """The annotations the controller puts on a replica pod, replacing the template's own.

    The gang attempt that created it and, on a pod the admitter placed (every pod the controller
    creates: it creates them from the gang's reservation), the planned node. The webhook counts
    them in the template's annotation size (``podmetadata``): declared once, here.
    """
    annotations = {ANNOTATION_GANG_ATTEMPT: str(attempt)}
    if node is not None:
        annotations[ANNOTATION_PLANNED_NODE] = node
    return annotations


def longest_own_pod_annotations() -> dict[str, str]:
    """``own_pod_annotations`` at their longest, which the webhook counts in the 256 KiB.

    The largest gang attempt a pod can carry: the controller reads a job's attempt back from its
    annotation as at most ``digits.MAX_DIGITS`` digits, or (older jobs) takes its restarts, read
    so, plus one: ``10**MAX_DIGITS``. Attempts are not bounded by ``backoffLimit`` (disruptions,
    preemptions and schedule timeouts move a job to a new attempt uncounted). The longest node
    name: a DNS subdomain (``DNS_SUBDOMAIN_MAX`` bytes), what the apiserver takes for a Node.
    """
    return own_pod_annotations(attempt=10**MAX_DIGITS, node="n" * DNS_SUBDOMAIN_MAX)


# A quarantined node: a NoSchedule taint (kube-scheduler and torchgate's placement both honour
# it; its value is the cause) and labels that ``kubectl get nodes -L`` shows: the cause and the
# end of the cooldown in ISO 8601 basic format (``20261126T193000Z``, a valid label value).
TAINT_QUARANTINE: Final = "torchgate.io/quarantine"
LABEL_QUARANTINE: Final = TAINT_QUARANTINE
LABEL_QUARANTINE_UNTIL: Final = "torchgate.io/quarantine-until"
# A node's recent infrastructure faults, as the quarantine keeper counts them: a JSON list on the
# Node, so the count survives a controller restart or a leader failover (``quarantine.rules``).
ANNOTATION_QUARANTINE_FAULTS: Final = "torchgate.io/quarantine-faults"
# When a node's count last started afresh (its last quarantine, or an admin's clearing of one): a
# fault at or before it is never counted nor written again, whatever a controller held in memory.
ANNOTATION_QUARANTINE_FAULTS_SINCE: Final = "torchgate.io/quarantine-faults-since"

DNS_LABEL_MAX: Final = 63
DNS_SUBDOMAIN_MAX: Final = 253
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_KEY_NAME_MAX: Final = 63  # bytes
LABEL_VALUE_MAX: Final = 63  # bytes
_LABEL_KEY_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_KEY_TEXT: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_LABEL_VALUE_TEXT: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
_DNS1123_SUBDOMAIN_TEXT: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def replica_name(job_name: str, replica_type: str, index: int) -> str:
    """Pod and Service name of one replica: ``<job>-<master|worker>-<index>``."""
    return f"{job_name}-{replica_type.lower()}-{index}".replace("/", "-")


def replica_name_length(job_name: str, replica_type: str, index: int) -> int:
    """``len(replica_name(job_name, replica_type, index))``, without building the name.

    For the replica types (``Master``, ``Worker``: ASCII, so lower-casing keeps their length).
    """
    return len(job_name) + len(replica_type) + len(str(index)) + 2


def master_replica(has_master: bool) -> tuple[ReplicaType, int]:
    """Which replica is the rendezvous master: Master 0, or Worker 0 in worker-only jobs."""
    return (MASTER, 0) if has_master else (WORKER, 0)


def dns1035_errors(value: str) -> list[str]:
    """Kubernetes' ``IsDNS1035Label`` messages for ``value`` (empty when valid)."""
    messages: list[str] = []
    if len(value) > DNS_LABEL_MAX:
        messages.append(f"must be no more than {DNS_LABEL_MAX} characters")
    if not _DNS1035.fullmatch(value):
        messages.append(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
            "with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',"
            "  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        )
    return messages


def is_dns1123_label(value: str) -> bool:
    """Whether ``value`` is a DNS-1123 label (the shape of node host names and Service names)."""
    return len(value) <= DNS_LABEL_MAX and bool(_DNS1123_LABEL.fullmatch(value))


def is_dns1123_subdomain(value: str) -> bool:
    """Whether ``value`` is a DNS-1123 subdomain (node names, API groups): dot-joined labels.

    Each part is held to a label's 63 characters, which Kubernetes' ``IsDNS1123Subdomain`` does
    not ask (only 253 in all); no node name or API group comes near it.
    """
    return len(value) <= DNS_SUBDOMAIN_MAX and all(
        is_dns1123_label(part) for part in value.split(".")
    )


def resource_name_problem(name: str) -> str | None:
    """Why no custom resource (a PyTorchJob) can be named ``name``, if none can.

    The apiserver asks a custom resource's ``metadata.name`` to be a DNS-1123 subdomain (its
    ``NameIsDNSSubdomain``: at most 253 characters, no limit per part, unlike
    ``is_dns1123_subdomain``), so a name with a capital letter, ``.`` or ``..`` names none; the
    last two, as a URL path, would even name the collection or the namespace instead.
    """
    if len(name) <= DNS_SUBDOMAIN_MAX and _DNS1123_SUBDOMAIN.fullmatch(name):
        return None
    return f"{name!r} is not a resource name: {_DNS1123_SUBDOMAIN_TEXT}, at most 253 characters"


def label_key_errors(key: str) -> list[str]:
    """Kubernetes' ``IsQualifiedName`` (label keys, annotation keys) messages for ``key``.

    An optional DNS-1123 subdomain prefix and ``/``, then a name of at most 63 bytes; lengths
    are Go's, in UTF-8 bytes (a lone surrogate, which Go reads as U+FFFD, counts 3 as well).
    """
    parts = key.split("/")
    if len(parts) > 2:
        return [
            f"a valid label key {_LABEL_KEY_TEXT} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    messages: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            messages.append("prefix part must be non-empty")
        else:
            if _utf8_length(prefix) > DNS_SUBDOMAIN_MAX:
                messages.append(f"prefix part must be no more than {DNS_SUBDOMAIN_MAX} bytes")
            if not _DNS1123_SUBDOMAIN.fullmatch(prefix):
                messages.append(f"prefix part {_DNS1123_SUBDOMAIN_TEXT}")
    if not name:
        messages.append("name part must be non-empty")
    elif _utf8_length(name) > LABEL_KEY_NAME_MAX:
        messages.append(f"name part must be no more than {LABEL_KEY_NAME_MAX} bytes")
    if not _LABEL_KEY_NAME.fullmatch(name):
        messages.append(f"name part {_LABEL_KEY_TEXT}")
    return messages


def label_value_errors(value: str) -> list[str]:
    """Kubernetes' ``IsValidLabelValue`` messages for ``value`` (empty when valid)."""
    messages: list[str] = []
    if _utf8_length(value) > LABEL_VALUE_MAX:
        messages.append(f"must be no more than {LABEL_VALUE_MAX} bytes")
    if value and not _LABEL_KEY_NAME.fullmatch(value):
        messages.append(_LABEL_VALUE_TEXT)
    return messages


def _utf8_length(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def job_selector(job_name: str) -> dict[str, str]:
    """Labels that select every pod and Service of a job."""
    return {LABEL_OPERATOR_NAME: OPERATOR_NAME, LABEL_JOB_NAME: job_name.replace("/", "-")}


def replica_selector(job_name: str, replica_type: str) -> str:
    """The ``replicaStatuses[T].selector`` string (``metav1.FormatLabelSelector`` order)."""
    labels = {**job_selector(job_name), LABEL_REPLICA_TYPE: replica_type.lower()}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
