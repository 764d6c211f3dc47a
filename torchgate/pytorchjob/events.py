"""One shape for the core/v1 Events torchgate records, whichever component records them.

Why one place: the controller (about jobs, nodes and TeamQuotas) and the webhook (about
PlacementPolicies) each record Events, and ``kubectl describe`` and ``torchgate explain`` read them
back by the same fields. Rules:

1. An Event names its object in ``involvedObject`` as given, and lives in ``namespace`` (a
   cluster-scoped object's in ``default``, where Kubernetes puts node Events).
2. Its ``message`` is cut to 1,024 characters (the apiserver's limit for an Event message).
3. With ``name``, it is created under that name (the controller's recorder picks its own);
   otherwise the apiserver names it after its object (``generateName``).
4. ``firstTimestamp`` and ``lastTimestamp`` are ``now`` and ``count`` is 1: torchgate never
   updates an Event.
5. ``involved_object``: the reference to an object as stored (its ``uid`` and
   ``resourceVersion`` from its metadata; a namespace only for a namespaced object).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_MESSAGE: int = 1024


def involved_object(
    api_version: str,
    kind: str,
    name: object,
    metadata: Mapping[str, Any],
    *,
    namespace: str | None = None,
) -> dict[str, Any]:
    """The ``involvedObject`` naming a stored object by its ``metadata`` (rule 5)."""
    reference: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "name": name}
    if namespace is not None:
        reference["namespace"] = namespace
    reference["uid"] = metadata.get("uid")
    reference["resourceVersion"] = metadata.get("resourceVersion")
    return reference


def event_body(
    namespace: str,
    involved: Mapping[str, Any],
    *,
    type: str,
    reason: str,
    message: str,
    component: str,
    now: str,
    name: str | None = None,
    reporting: str | None = None,
) -> dict[str, Any]:
    """The core/v1 Event about ``involved``, as it is created (rules in the module docstring)."""
    metadata = (
        {"name": name, "namespace": namespace}
        if name is not None
        else {"generateName": f"{involved.get('name')}.", "namespace": namespace}
    )
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": metadata,
        "involvedObject": dict(involved),
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "type": type,
        "source": {"component": component},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    if reporting is not None:
        body["reportingComponent"] = reporting
    return body
