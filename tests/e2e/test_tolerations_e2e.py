"""Template tolerations and metadata values: refused at admission exactly as pods would be.

``pod.tolerations`` refuses a template's toleration the apiserver would not decode or validate in
a pod (``taints.entry_errors``), and ``podmetadata`` a template label or annotation value that is
not a string: a pod with either is refused at every create, so the job would be stored and never
get a pod. The first test holds that reading to the running kube-apiserver: seeded random
tolerations and metadata values, each template judged by the rules and sent as a pod (dry run,
with the annotations the controller gives a pod), on every supported Kubernetes version. The
second shows the refusal where a user meets it: ``kubectl apply --dry-run=server`` of a
PyTorchJob, through the apiserver (whose CRD schema does not type anything under ``template``,
so the job reaches the webhook: a ``metadata`` that is not an object too) and the webhook,
refused with the field named. The third holds the policy's tolerations to JSON's equality: under
a policy tolerating for ``tolerationSeconds: 1``, a template's ``true`` (``== 1`` in Python, no
int64 to the pod's decode) is refused, while a ``1.0`` reaches the webhook, and is stored, as
``1``: the apiserver reads a custom resource's numbers as int64 or float64 and writes the float
64 ``1`` back as ``1``.
"""

from __future__ import annotations

import random
import secrets
from collections import Counter
from typing import Any

import pytest

from tests.builders.job import job
from tests.builders.policy import parsed_policy, policy
from tests.e2e.conftest import Cluster
from tests.e2e.webhook_process import LocalWebhook
from tests.e2e.webhook_process import webhook as webhook  # the module-scoped fixture
from tests.unit.webhook.validationcases import SPECS
from torchgate.pytorchjob import names
from torchgate.webhook.validation import validate_create

pytestmark = [pytest.mark.e2e, pytest.mark.all_versions]

TEMPLATE = f"{SPECS}[Master].template."
SAMPLES = 200
FIELD_VALUES: dict[str, list[Any]] = {
    "key": ["nvidia.com/gpu", "k", "", "a b", "x" * 64, "example.com/", 5, None],
    "operator": ["Exists", "Equal", "Exists", "", "Lt", "In", True, None],
    "value": ["", "v", "a b", "x" * 64, None, 1],
    "effect": ["NoSchedule", "NoExecute", "PreferNoSchedule", "", "Bogus", None],
    "tolerationSeconds": [None, 30, -5, 0, 1.5, "5", 2**63, True, 1.0],
    "Key": ["a b"],  # dropped: field names match case-sensitively
}
METADATA_VALUES: list[Any] = ["v", "", None, 1, True, 1.5, ["v"], {"a": "b"}]
PRIVILEGED = parsed_policy("priv", allowPrivileged=True)  # no escape refused: the syntax only


def undecodable(tolerations: Any, metadata: dict[str, Any]) -> list[str]:
    """The template paths Go's decoding of the pod fails at (this test's own model of it)."""
    found = [
        f"metadata.{kind}[{key}]"
        for kind in ("labels", "annotations")
        for key, value in metadata[kind].items()
        if value is not None and not isinstance(value, str)
    ]
    if tolerations is None:
        return found
    if not isinstance(tolerations, list):
        return [*found, "spec.tolerations"]
    for index, entry in enumerate(tolerations):
        where = f"spec.tolerations[{index}]"
        if entry is None:
            continue
        if not isinstance(entry, dict):
            found.append(where)
            continue
        found += [
            f"{where}.{field}"
            for field in ("key", "operator", "value", "effect")
            if entry.get(field) is not None and not isinstance(entry[field], str)
        ]
        seconds = entry.get("tolerationSeconds")
        if seconds is not None and not (type(seconds) is int and -(2**63) <= seconds < 2**63):
            found.append(f"{where}.tolerationSeconds")
    return found


def toleration(draw: random.Random) -> Any:
    """A toleration entry, written right or wrong, or not an object."""
    if draw.random() < 0.05:
        return draw.choice([None, "k", ["k"]])
    fields = draw.sample(sorted(FIELD_VALUES), draw.randint(1, 4))
    return {field: draw.choice(FIELD_VALUES[field]) for field in fields}


def apiserver_refusals(status: int, body: dict[str, Any]) -> Counter[tuple[str, str]]:
    """The apiserver's field refusals of the pod's tolerations as (reason, template path)."""
    found: Counter[tuple[str, str]] = Counter()
    for cause in body.get("details", {}).get("causes", []) if status == 422 else []:
        found[(cause["reason"], cause["field"])] += 1
    return found


def test_the_webhook_refuses_exactly_the_tolerations_and_metadata_values_pods_are_refused_for(
    cluster: Cluster,
) -> None:
    namespace = cluster.new_namespace("tolerations")
    draw = random.Random(37)
    disagreements = []
    statuses: Counter[int] = Counter()
    for sample in range(SAMPLES):
        tolerations: Any = [toleration(draw) for _ in range(draw.randint(0, 3))]
        if draw.random() < 0.03:
            tolerations = draw.choice([{"key": "k"}, "k"])
        labels = {"app": draw.choice(METADATA_VALUES)} if draw.random() < 0.2 else {}
        annotations = {"note": draw.choice(METADATA_VALUES)} if draw.random() < 0.2 else {}
        raw = job().master(pod_spec={"tolerations": tolerations}).workers(1).build()
        template = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
        template["metadata"] = {"labels": labels, "annotations": annotations}
        pod = {  # what the controller sends (``build_pod``)
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"p{sample}",
                "labels": labels,
                "annotations": {
                    **annotations,
                    **names.longest_own_pod_annotations(),
                },
            },
            "spec": {**template["spec"], "restartPolicy": "Never"},
        }
        verdict = validate_create(raw, PRIVILEGED)
        ours = Counter(
            (e.type.value, e.field.removeprefix(TEMPLATE))
            for e in verdict.errors
            if e.field.startswith(TEMPLATE)  # the Worker's template is valid
        )
        failing = undecodable(tolerations, template["metadata"])

        status, body = cluster.api_request(
            "POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", pod
        )

        assert status in (201, 400, 422), body
        statuses[status] += 1
        if failing:  # one decode error for the whole pod (400): the rules name each field
            expected = Counter({("FieldValueInvalid", where): 1 for where in failing})
            if status != 400 or not expected.keys() <= ours.keys():
                disagreements.append((pod, status, body.get("message"), ours))
        elif ours != apiserver_refusals(status, body):
            disagreements.append((pod, status, apiserver_refusals(status, body), ours))
    assert disagreements == []
    assert min(statuses[201], statuses[400], statuses[422]) >= SAMPLES // 10, statuses


def test_kubectl_dry_run_of_a_job_with_a_bad_toleration_or_label_value_names_the_field(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    namespace = cluster.new_namespace("tolerations")
    raw = job("bad-toleration", namespace).master().workers(1).build()
    worker = raw["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    worker["spec"]["tolerations"] = [{"key": "example.com/dedicated", "operator": "Exist"}]
    worker["metadata"] = {"labels": {"version": 2}}

    status, body = cluster.api_request(
        "POST",
        f"/apis/{names.API_VERSION}/namespaces/{namespace}/pytorchjobs?dryRun=All",
        raw,
    )

    assert status == 422, body
    causes = {(c["reason"], c["field"]) for c in body["details"]["causes"]}
    worker_path = f"{SPECS}[Worker].template"  # the webhook's path form: the schema let it by
    assert causes == {
        ("FieldValueNotSupported", f"{worker_path}.spec.tolerations[0].operator"),
        ("FieldValueInvalid", f"{worker_path}.metadata.labels[version]"),
    }


def test_kubectl_dry_run_of_a_job_whose_template_metadata_is_not_an_object_names_it(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    namespace = cluster.new_namespace("tolerations")
    raw = job("bad-metadata", namespace).master().workers(1).build()
    raw["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"] = "app: x"

    status, body = cluster.api_request(
        "POST",
        f"/apis/{names.API_VERSION}/namespaces/{namespace}/pytorchjobs?dryRun=All",
        raw,
    )

    assert status == 422, body
    causes = {(c["reason"], c["field"]) for c in body["details"]["causes"]}
    # The webhook's path form (the schema's would be ...Worker.template.metadata, TypeInvalid)
    assert causes == {("FieldValueInvalid", f"{SPECS}[Worker].template.metadata")}


def test_a_toleration_passes_as_the_policys_own_only_when_equal_as_json(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    namespace = cluster.new_namespace("tolerations")
    timed = {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 1,
    }
    name = f"e2e-timed-{secrets.token_hex(3)}"
    status, body = cluster.api_request(
        "POST",
        f"/apis/{names.POLICY_API_VERSION}/{names.POLICY_PLURAL}",
        policy(name, namespaces=[namespace], priority=1000, tolerations=[timed]),
    )
    assert status == 201, body

    def dry_run(seconds: Any) -> tuple[int, dict[str, Any]]:
        """The Master's toleration written with ``seconds`` (the Worker gets the policy's)."""
        raw = job("timed", namespace).master().workers(1).build()
        if seconds is not None:
            template = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
            template["spec"]["tolerations"] = [{**timed, "tolerationSeconds": seconds}]
        return cluster.api_request(
            "POST",
            f"/apis/{names.API_VERSION}/namespaces/{namespace}/pytorchjobs?dryRun=All",
            raw,
        )

    def master_tolerations(body: dict[str, Any]) -> Any:
        return body["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["tolerations"]

    try:
        cluster.wait_for(  # the webhook applies the policy: its toleration is added
            lambda: (r := dry_run(None))[0] == 201 and timed in master_tolerations(r[1]),
            timeout=30,
            what="the policy's toleration added to a job of its namespace",
        )

        refused_status, refused = dry_run(True)
        admitted_status, admitted = dry_run(1.0)

        assert refused_status == 422, refused
        assert {(c["reason"], c["field"]) for c in refused["details"]["causes"]} == {
            ("FieldValueInvalid", f"{SPECS}[Master].template.spec.tolerations[0].tolerationSeconds")
        }
        assert admitted_status == 201, admitted
        [stored] = master_tolerations(admitted)  # the policy's, as the webhook found it
        assert stored == timed
        assert type(stored["tolerationSeconds"]) is int
    finally:
        cluster.api_request(
            "DELETE", f"/apis/{names.POLICY_API_VERSION}/{names.POLICY_PLURAL}/{name}"
        )
