"""The webhook refuses exactly the pod metadata and profile fields the real apiserver refuses.

``pod.pod_confinement`` refuses a template's legacy AppArmor and seccomp annotations that the
apiserver would refuse in every pod the controller creates from it (an annotation naming no
container, a value it does not know, one disagreeing with the template's profile field), and
``pod.profile_fields`` the pod's and containers' ``seccompProfile``/``appArmorProfile`` it
would refuse (no type or an unknown one, a ``localhostProfile`` missing, out of place or one it
refuses); ``podmetadata`` the template labels and annotations it would refuse (key and value
syntax, the annotations' total size, the mirror-pod, tolerations and deletion-cost
annotations). Those rules are a reading of the apiserver's Go code; this test holds the reading
to the apiserver itself: seeded random templates, each judged by the rules and sent as a pod
(dry run, with the metadata the controller gives a pod) to the running kube-apiserver, whose
refusals must be the rules' (a disagreement with an annotation, which the apiserver reports at
the field, and a key or a tolerations value it reports at ``metadata.annotations``, mapped to
the annotation, where the webhook reports them; a label's error compared without its key,
which the apiserver does not give), on every supported Kubernetes version: a release that
changes this validation fails here.
"""

from __future__ import annotations

import json
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
from torchgate.pytorchjob import names
from torchgate.webhook.validation import validate_create
from torchgate.webhook.validation.podmetadata import (
    ANNOTATION_DELETION_COST,
    ANNOTATION_MIRROR_POD,
    ANNOTATION_TOLERATIONS,
    ANNOTATIONS_SIZE_MAX,
)

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
LABEL_KEY = re.compile(r"(?<=^metadata\.labels)\[.*\]$")
BAD_KEY = re.compile(r'Invalid value: ("(?:[^"\\]|\\.)*")')
TEMPLATE = f"{SPECS}[Master].template."
SAMPLES = 300
# Template metadata the apiserver accepts or refuses (``podmetadata``), drawn in every other pod.
LABEL_KEYS = [
    *("app", "team.example.com/name", "Bad Key", "a/b/c", "-lead", "x" * 64, "/name"),
    *("UPPER.example.com/x", "example.com/", "ok_key.1", f"{'a' * 254}/x"),
]
LABEL_VALUES = ["v", "", "a b", "x" * 64, "-x", "ok.value_1", "\u00fcml", "a" * 63]
OTHER_KEYS = [
    *("example.com/note", "Example.COM/Note", "bad key", "a/b/c", "/x", "x" * 64, "ok"),
    *("\u212aey", "\u0130d", "\u0131d", ANNOTATION_MIRROR_POD),
]
TOLERATIONS = [
    *("", "[]", "null", "[null]", "{}", "x", "[1]", "NaN", "[{}]", '[{"operator":"Exists"}]'),
    '[{"key":"a","operator":"Exists"}]',
    '[{"key":"a b"}]',
    '[{"operator":"Equal","key":"k","value":"a b"}]',
    '[{"key":"k","operator":"Exists","value":"v"}]',
    '[{"key":"k","operator":"Lt","value":"1"}]',
    '[{"key":"k","operator":"In"}]',
    '[{"key":"k","effect":"Bogus"}]',
    '[{"key":"k","tolerationSeconds":5}]',
    '[{"key":"k","effect":"NoExecute","tolerationSeconds":-5}]',
    '[{"KEY":"k","Operator":"Exists"}]',
    '[{"key":"k","tolerationSeconds":1.5}]',
    '[{"key":"k","tolerationSeconds":"5"}]',
    '[{"key":5}]',
    '[{"key":"a b","key":null}]',
    '[{"key":"k","key":"a b"}]',
    '[{"\u212aey":"a b","operator":"Exists"}]',
    '[{"key":"k","effect":"NoExecute","toleration\u017feconds":1}]',
    '[{"key":"k"}] x',
    '[{"key":"k","effect":"NoExecute","tolerationSeconds":9223372036854775808}]',
    '[{"key":"k","unknown":{"a":[1,2.5,null]}}]',
    '[{"key":"k","operator":"Exists","effect":"NoExecute","tolerationSeconds":null}]',
]
DELETION_COSTS = [
    *("", "0", "-0", "007", "+1", "12", "-12", "2147483647", "2147483648", "-2147483648"),
    *("-2147483649", "1.5", "abc", " 1", "-", "-007"),
]
BIG = "example.com/big"
# What the controller adds to a pod at the longest: the largest attempt, the longest node name.
OWN_ANNOTATIONS = names.longest_own_pod_annotations()


def template_metadata(draw: random.Random, entries: dict[str, str]) -> dict[str, str]:
    """Labels (returned) and annotations (added to ``entries``) the apiserver may refuse."""
    labels = dict(
        zip(
            draw.sample(LABEL_KEYS, draw.randint(0, 3)),
            draw.sample(LABEL_VALUES, 3),  # distinct: the apiserver's errors carry no key
            strict=False,
        )
    )
    for key in draw.sample(OTHER_KEYS, draw.randint(0, 2)):
        entries[key] = draw.choice(["", "x"])
    if draw.random() < 0.5:
        entries[ANNOTATION_TOLERATIONS] = draw.choice(TOLERATIONS)
    if draw.random() < 0.3:
        entries[ANNOTATION_DELETION_COST] = draw.choice(DELETION_COSTS)
    if draw.random() < 0.1:  # at the total size limit, the controller's annotation included
        used = sum(len(k.encode()) + len(v.encode()) for k, v in entries.items())
        used += sum(len(k) + len(v) for k, v in OWN_ANNOTATIONS.items()) + len(BIG)
        entries[BIG] = "v" * (ANNOTATIONS_SIZE_MAX - used + draw.choice([0, 1]))
    return labels


def apiserver_refusals(status: int, body: dict[str, Any], pod: dict[str, Any]) -> Counter[Any]:
    """The apiserver's refusals as (reason, field): a disagreement's at its annotation."""
    found: Counter[Any] = Counter()
    if status == 201:
        return found
    for cause in body.get("details", {}).get("causes", []):
        field, reason = cause["field"], cause["reason"]
        message = cause.get("message", "")
        if field.startswith(f"metadata.annotations.{ANNOTATION_TOLERATIONS}["):  # .Child(k)
            field = field.replace(ANNOTATION_TOLERATIONS, f"[{ANNOTATION_TOLERATIONS}]")
            field = field.replace(".[", "[", 1)
        elif field.startswith("metadata.annotations."):  # seccomp: .Child(k)
            field = f"metadata.annotations[{field.removeprefix('metadata.annotations.')}]"
        elif field == "metadata.annotations" and (key := BAD_KEY.match(message)):
            field = f"metadata.annotations[{json.loads(key[1])}]"  # a key, or tolerations'
        elif field == "metadata.labels":
            pass
        elif reason == "FieldValueForbidden" and (match := PROFILE_FIELD.match(field)):
            if match[2] is None:  # the pod's: only seccomp's is compared with an annotation
                field = f"metadata.annotations[{SECCOMP_POD}]"
            else:
                name = pod["spec"][match[2]][int(match[3])]["name"]
                prefix = APPARMOR_PREFIX if match[4] == "appArmorProfile" else SECCOMP_PREFIX
                field = f"metadata.annotations[{prefix}{name}]"
        elif (
            not field.startswith("metadata.annotations")
            and not PROFILE_FIELD.match(field)
            and field != "metadata.labels"
        ):
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
        labels = template_metadata(draw, entries) if sample % 2 else {}
        pod_context, training, init = (security(profile(draw), profile(draw)) for _ in range(3))
        with_init = draw.random() < 0.5
        raw = annotated(
            master=entries, pod=pod_context, training=training, init=init if with_init else None
        )
        template = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
        template["metadata"]["labels"] = labels
        pod = {  # the metadata the controller gives it (``build_pod``)
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"p{sample}",
                "labels": labels,
                "annotations": {**entries, **OWN_ANNOTATIONS},
            },
            "spec": {**template["spec"], "restartPolicy": "Never"},
        }
        verdict = validate_create(raw, PRIVILEGED)  # no policy refusal: the apiserver's only

        status, body = cluster.api_request(
            "POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", pod
        )

        assert status in (201, 422), body
        ours = Counter(
            (e.type.value, LABEL_KEY.sub("", e.field.removeprefix(TEMPLATE)))
            for e in verdict.errors
            if e.field.startswith(TEMPLATE)  # Worker's pod spec is Master's
        )
        theirs = apiserver_refusals(status, body, pod)
        if ours != theirs:
            disagreements.append((pod, ours, theirs))
    assert disagreements == []
