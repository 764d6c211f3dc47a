"""The webhook refuses exactly the profile annotations and fields the real apiserver refuses.

``pod.pod_confinement`` refuses a template's legacy AppArmor and seccomp annotations that the
apiserver would refuse in every pod the controller creates from it (an annotation naming no
container, a value it does not know, one disagreeing with the template's profile field), and
``pod.profile_fields`` the pod's and containers' ``seccompProfile``/``appArmorProfile`` it
would refuse (no type or an unknown one, a ``localhostProfile`` missing, out of place or one it
refuses). Those rules are a reading of the apiserver's Go code; this test holds the reading to
the apiserver itself: seeded random templates, each judged by the rules and sent as a pod (dry
run) to the running kube-apiserver, whose refusals must be the rules' (a disagreement with an
annotation, which the apiserver reports at the field, mapped to the annotation, where the
webhook reports it), on every supported Kubernetes version: a release that changes this
validation fails here.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from typing import Any

import pytest

from tests.e2e.conftest import Cluster
from tests.unit.webhook.test_validation_policy import (
    APPARMOR_PREFIX,
    INVALID_PROFILES,
    PRIVILEGED,
    SECCOMP_POD,
    SECCOMP_PREFIX,
    SPECS,
    VALID_PROFILES,
    annotated,
    security,
)
from torchgate.webhook.validation import validate_create

pytestmark = [pytest.mark.e2e, pytest.mark.all_versions]  # the reading holds on each

KEYS = [
    *(f"{APPARMOR_PREFIX}{name}" for name in ("pytorch", "init", "sidecar")),
    SECCOMP_POD,
    *(f"{SECCOMP_PREFIX}{name}" for name in ("pytorch", "init", "sidecar")),
]
VALUES = [
    *("unconfined", "Unconfined", "runtime/default", "runtime/default ", "docker/default", ""),
    *("localhost/", "localhost/a", "localhost/b", "localhost/ a", "localhost/a ", "localhost//a"),
    *("localhost/\u00a0a", "localhost/a\x1c", "localhost/../a", "localhost/a/..", "bogus"),
    *("localhost/a..b", "localhost/x/../y"),
]
PROFILES = [None, None, *VALID_PROFILES]
INVALID_SHARE = 0.1  # of the profiles drawn: about half the pods have none
PROFILE_FIELD = re.compile(
    r"(spec\.(containers|initContainers)\[(\d+)\]|spec)\.securityContext\."
    r"(appArmorProfile|seccompProfile)\."
)
TEMPLATE = f"{SPECS}[Master].template."
SAMPLES = 300


def apiserver_refusals(status: int, body: dict[str, Any], pod: dict[str, Any]) -> Counter[Any]:
    """The apiserver's refusals as (reason, field): a disagreement's at its annotation."""
    found: Counter[Any] = Counter()
    if status == 201:
        return found
    for cause in body.get("details", {}).get("causes", []):
        field, reason = cause["field"], cause["reason"]
        if field.startswith("metadata.annotations."):  # seccomp: .Child(k)
            field = f"metadata.annotations[{field.removeprefix('metadata.annotations.')}]"
        elif reason == "FieldValueForbidden" and (match := PROFILE_FIELD.match(field)):
            if match[2] is None:  # the pod's: only seccomp's is compared with an annotation
                field = f"metadata.annotations[{SECCOMP_POD}]"
            else:
                name = pod["spec"][match[2]][int(match[3])]["name"]
                prefix = APPARMOR_PREFIX if match[4] == "appArmorProfile" else SECCOMP_PREFIX
                field = f"metadata.annotations[{prefix}{name}]"
        elif not field.startswith("metadata.annotations[") and not PROFILE_FIELD.match(field):
            field = f"unexpected: {field}: {cause.get('message')}"
        found[(reason, field)] += 1
    return found


def profile(draw: random.Random) -> dict[str, Any] | None:
    """A profile field, one the apiserver refuses in ``INVALID_SHARE`` of the draws."""
    return draw.choice(INVALID_PROFILES if draw.random() < INVALID_SHARE else PROFILES)


def test_the_webhook_refuses_exactly_the_profile_annotations_and_fields_the_apiserver_refuses(
    cluster: Cluster,
) -> None:
    namespace = cluster.new_namespace("profiles")
    draw = random.Random(21)
    disagreements = []
    for sample in range(SAMPLES):
        entries = {key: draw.choice(VALUES) for key in draw.sample(KEYS, draw.randint(1, 4))}
        pod_context, training, init = (security(profile(draw), profile(draw)) for _ in range(3))
        with_init = draw.random() < 0.5
        raw = annotated(
            master=entries, pod=pod_context, training=training, init=init if with_init else None
        )
        template = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{sample}", "annotations": entries},
            "spec": {**template["spec"], "restartPolicy": "Never"},
        }
        verdict = validate_create(raw, PRIVILEGED)  # no policy refusal: the apiserver's only

        status, body = cluster.api_request(
            "POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", pod
        )

        assert status in (201, 422), body
        ours = Counter(
            (e.type.value, e.field.removeprefix(TEMPLATE))
            for e in verdict.errors
            if e.field.startswith(TEMPLATE)  # Worker's pod spec is Master's
        )
        theirs = apiserver_refusals(status, body, pod)
        if ours != theirs:
            disagreements.append((pod, ours, theirs))
    assert disagreements == []
