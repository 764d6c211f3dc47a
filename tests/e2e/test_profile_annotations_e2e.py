"""The webhook refuses exactly the profile annotations the real apiserver refuses in a pod.

``pod.pod_confinement`` refuses a template's legacy AppArmor and seccomp annotations that the
apiserver would refuse in every pod the controller creates from it (an annotation naming no
container, a value it does not know, one disagreeing with the template's profile field). That
rule is a reading of the apiserver's Go code; this test holds the reading to the apiserver
itself: seeded random templates, each judged by the rule and sent as a pod (dry run) to the
running kube-apiserver, whose refusals, mapped to the annotation each is about, must be the
rule's, on every supported Kubernetes version: a release that changes this validation fails
here.
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
    MANN,
    PRIVILEGED,
    SECCOMP_POD,
    SECCOMP_PREFIX,
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
PROFILES = [
    None,
    None,
    {"type": "Unconfined"},
    {"type": "RuntimeDefault"},
    {"type": "Localhost", "localhostProfile": "a"},
    {"type": "Localhost", "localhostProfile": "b"},
]
PROFILE_FIELD = re.compile(
    r"spec\.(containers|initContainers)\[(\d+)\]\.securityContext\.(appArmorProfile|seccompProfile)\."
)
SAMPLES = 200


def refused_annotations(status: int, body: dict[str, Any], pod: dict[str, Any]) -> Counter[Any]:
    """The apiserver's refusals as (reason, annotation key): a field's, the annotation's."""
    found: Counter[Any] = Counter()
    if status == 201:
        return found
    for cause in body.get("details", {}).get("causes", []):
        field, reason = cause["field"], cause["reason"]
        if field.startswith("metadata.annotations["):  # AppArmor: .Key(k)
            found[(reason, field.removeprefix("metadata.annotations[")[:-1])] += 1
        elif field.startswith("metadata.annotations."):  # seccomp: .Child(k)
            found[(reason, field.removeprefix("metadata.annotations."))] += 1
        elif match := PROFILE_FIELD.match(field):
            name = pod["spec"][match[1]][int(match[2])]["name"]
            prefix = APPARMOR_PREFIX if match[3] == "appArmorProfile" else SECCOMP_PREFIX
            found[(reason, prefix + name)] += 1
        elif field.startswith("spec.securityContext.seccompProfile."):
            found[(reason, SECCOMP_POD)] += 1
        else:
            found[(reason, f"unexpected: {field}: {cause.get('message')}")] += 1
    return found


def test_the_webhook_refuses_exactly_the_profile_annotations_the_apiserver_refuses(
    cluster: Cluster,
) -> None:
    namespace = cluster.new_namespace("profiles")
    draw = random.Random(21)
    disagreements = []
    for sample in range(SAMPLES):
        entries = {key: draw.choice(VALUES) for key in draw.sample(KEYS, draw.randint(1, 4))}
        pod_context, training, init = (
            security(draw.choice(PROFILES), draw.choice(PROFILES)) for _ in range(3)
        )
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
        ours = Counter((e.type.value, str(e.path)[len(MANN) + 1 : -1]) for e in verdict.errors)
        theirs = refused_annotations(status, body, pod)
        if ours != theirs:
            disagreements.append((pod, ours, theirs))
    assert disagreements == []
