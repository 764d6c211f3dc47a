"""What the caches keep of each object: the fields some reader decides on, nothing else.

Why: the controller watches every pod of the cluster (each uses capacity), and a pod as the
apiserver sends it is mostly what no decision reads: the env torchgate injects, command and
args, volumes and mounts, probes, the kubelet's image and container ids, ``managedFields``.
Kept whole, 10,000 pods cost the controller hundreds of megabytes; projected as they arrive
(``kube.informer`` applies these to every listed, watched and written-through object), the
cache holds what the readers need. The webhook's ResourceClaim cache keeps only what admission
reads of a claim (its spec): allocations and ``reservedFor`` are the scheduler's.

Invariants:

- A projection only drops: every field it keeps is the object's own value, unchanged (shared,
  not copied), so a reader gets the same answer from the projected object as from the whole one
  for every field listed here.
- A projected object is never sent back to the apiserver: the controller writes pods only by
  creating the manifests it builds, deleting by name and labelling its own pod, and Nodes only by
  merge patches of the fields it read (taints, labels) with their ``resourceVersion`` and of its
  own annotation (``quarantine.rules`` rule 8).
- A projection is idempotent: projecting a projected object gives an equal object.
- Adding a reader of a field not kept here means adding the field here; the agreement test
  (``tests/unit/controller/test_projection.py``) calls every reader on whole and projected pods.

Rules (each one function):

1. ``project_pod``: a pod's name, namespace, uid, resourceVersion, labels, ownerReferences,
   creation and deletion times and grace period, and the annotations torchgate reads of a pod
   (``POD_ANNOTATIONS``: its gang attempt and planned node); of its spec, the node, priority,
   tolerations, overhead, pod-level resource claims, the PodGroup it names
   (``schedulingGroup``) and, of each container and init container, its name, resources and
   (init containers) restartPolicy; of its status, the phase, reason,
   conditions and, of each container status, its name and state. Readers: job ownership, gang
   attempt, replica counts, exit codes and hangs (``controller.job.model``, ``status``,
   ``gang``, ``finish``), disruptions (``disruption``), capacity and gangs (``admission.ledger``,
   ``units.pod_units``, ``devices.pod_gpus``), cleanup (``cleanup.clean_pod_policy_for``),
   gang objects (``gangobjects.joins_pod_group``).
2. ``project_node``: a Node's metadata (without ``managedFields``), its spec, and of its status
   the allocatable resources and conditions; the image list, addresses, node info and volume
   lists are dropped. Readers: ``admission.nodes.node_view``, ``disruption.node_health``,
   ``quarantine.rules``.
3. ``project_claim_spec``: a ResourceClaim's name, namespace, resourceVersion and spec (what
   ``devices.claim_spec_of`` reads); for the webhook, which never reads a claim's status.
4. ``without_managed_fields``: any other object, whole but for ``metadata.managedFields``
   (large, and read by nothing here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from torchgate.pytorchjob import names

Obj = dict[str, Any]

POD_METADATA: Final = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "ownerReferences",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
POD_ANNOTATIONS: Final = (names.ANNOTATION_GANG_ATTEMPT, names.ANNOTATION_PLANNED_NODE)
POD_SPEC: Final = (
    "nodeName",
    "priority",
    "tolerations",
    "overhead",
    "resourceClaims",
    "schedulingGroup",
)
CONTAINER: Final = ("name", "resources")
INIT_CONTAINER: Final = ("name", "resources", "restartPolicy")
POD_STATUS: Final = ("phase", "reason", "conditions")
CONTAINER_STATUS: Final = ("name", "state")

NODE_STATUS: Final = ("allocatable", "conditions")
CLAIM_METADATA: Final = ("name", "namespace", "resourceVersion")


def _pick(value: object, keys: Iterable[str]) -> Obj:
    """The entries of ``value`` under ``keys`` that it has (empty when it is not a mapping)."""
    if not isinstance(value, Mapping):
        return {}
    return {key: value[key] for key in keys if key in value}


def _pick_each(value: object, keys: Iterable[str]) -> object:
    """``_pick`` of each entry of a list; anything else as it is (readers skip malformed lists)."""
    if not isinstance(value, list):
        return value
    kept = tuple(keys)
    return [_pick(entry, kept) if isinstance(entry, Mapping) else entry for entry in value]


def _section(obj: Mapping[str, Any], section: str, out: Obj, picked: Obj) -> None:
    """Put ``picked`` into ``out`` under ``section`` when the object had that section."""
    if section in obj:
        out[section] = picked if isinstance(obj[section], Mapping) else obj[section]


# ------------------------------------------------------------------ rule 1: pods


def project_pod(pod: Mapping[str, Any]) -> Obj:
    """A pod with only the fields some reader decides on (rule 1)."""
    out: Obj = {}
    metadata = pod.get("metadata")
    kept_metadata = _pick(metadata, POD_METADATA)
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if annotations is not None:
        kept_metadata["annotations"] = (
            _pick(annotations, POD_ANNOTATIONS) if isinstance(annotations, Mapping) else annotations
        )
    _section(pod, "metadata", out, kept_metadata)
    spec = pod.get("spec")
    kept_spec = _pick(spec, POD_SPEC)
    if isinstance(spec, Mapping):
        for key, fields in (("containers", CONTAINER), ("initContainers", INIT_CONTAINER)):
            if key in spec:
                kept_spec[key] = _pick_each(spec[key], fields)
    _section(pod, "spec", out, kept_spec)
    status = pod.get("status")
    kept_status = _pick(status, POD_STATUS)
    if isinstance(status, Mapping) and "containerStatuses" in status:
        kept_status["containerStatuses"] = _pick_each(status["containerStatuses"], CONTAINER_STATUS)
    _section(pod, "status", out, kept_status)
    return out


# ------------------------------------------------------------------ rule 2: nodes


def project_node(node: Mapping[str, Any]) -> Obj:
    """A Node with its metadata and spec, and of its status what readers decide on (rule 2)."""
    out = without_managed_fields(node)
    if "status" in node:
        _section(node, "status", out, _pick(node["status"], NODE_STATUS))
    return out


# ------------------------------------------------------------------ rule 3: claims (webhook)


def project_claim_spec(claim: Mapping[str, Any]) -> Obj:
    """A ResourceClaim as admission reads it: its name and spec (rule 3)."""
    out: Obj = {key: claim[key] for key in ("apiVersion", "kind") if key in claim}
    _section(claim, "metadata", out, _pick(claim.get("metadata"), CLAIM_METADATA))
    if "spec" in claim:
        out["spec"] = claim["spec"]
    return out


# ------------------------------------------------------------------ rule 4: anything else


def without_managed_fields(obj: Mapping[str, Any]) -> Obj:
    """``obj`` without ``metadata.managedFields`` (rule 4)."""
    out = dict(obj)
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping) and "managedFields" in metadata:
        out["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
    return out
