"""``torchgate check`` gives the verdict the cluster gives, on every real-world job and every seed.

``torchgate check`` promises the webhook's defaulting then validation, offline, on files read as
``kubectl apply -f`` reads them. This module holds it to that: for each file of
``../shared/realworld`` and ``../shared/seeds/manifests``, the product CLI (``torchgate check -o
json``, a subprocess) and the real apiserver with the webhook registered must agree, job by job, on
admitted or refused, and on the set of ``(reason, field)`` of the refusal.

The cluster's side is what ``kubectl apply`` meets: each PyTorchJob document is created with
``dryRun=All&fieldValidation=Strict`` (kubectl's default ``--validate=strict``), which answers with
a Status whose ``details.causes`` are compared; a strict decoding refusal (HTTP 400, before any
admission step) carries no causes, so its ``unknown field "<path>"`` items are the causes, read
the same way from check's one-line input error. ``kubectl apply --dry-run=server`` on the same
documents must give the same verdict, so the raw request is known to be the one kubectl sends.

Both sides see the same namespace: a fresh one for jobs that name none (``check -n``, the
request's path), the declared one otherwise (created for the test when missing, as a dry run
still needs it). The webhook runs with no PlacementPolicy or TeamQuota in the cluster, which is
check's default (the built-in policy, no quotas). A difference check cannot know offline would be
listed in ``EXPECTED_DIFFERENCES`` with its reason; none is.

What check refuses of a file as ``kubectl apply`` refuses it, and what it judges of a file as
apply sends it, is shown on the real kubectl and apiserver too: a ``generateName`` without a name
(kubectl's own refusal), a ``-n`` naming a namespace that cannot exist, and the same job twice in
one file (created, then patched: an UPDATE the webhook judges as one, leaving the job check says).

Two things check relies on are shown here too. A field the CRD does not declare never reaches
the webhook: kubectl's strict validation refuses it, and a client sending ``fieldValidation=Warn``
(or none, as the Kubeflow SDK) or ``Ignore`` has it dropped while the apiserver decodes the job
(with a warning under Warn), so the job is admitted and stored without it. And two equal keys in
one YAML mapping are no error to kubectl: it sends the last of them, the one check reads.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import REPO_ROOT, Cluster
from tests.e2e.webhook_process import LocalWebhook, registered_webhook
from torchgate.pytorchjob import names

pytestmark = [pytest.mark.e2e, pytest.mark.all_versions]

SHARED = REPO_ROOT.parent / "shared"
FILES = [
    *sorted((SHARED / "realworld").glob("*.yaml")),
    *sorted((SHARED / "seeds" / "manifests").glob("*.yaml")),
]
STRICT_DRY_RUN = "?dryRun=All&fieldValidation=Strict"
UNKNOWN_FIELD = "UnknownField"  # the cause a strict decoding refusal stands for (no Status cause)
_UNKNOWN_FIELD = re.compile(r'unknown field "(?P<field>[^"]+)"')


class _ApiserverYaml(yaml.SafeLoader):
    """YAML as kubectl converts it to JSON: timestamps stay strings (``2018-12-16T21:39:09Z``)."""


_ApiserverYaml.add_constructor(
    "tag:yaml.org,2002:timestamp",
    lambda loader, node: loader.construct_scalar(node),  # type: ignore[arg-type]
)

EXPECTED_DIFFERENCES: dict[str, str] = {}
"""File name -> why check cannot give the cluster's verdict on it offline (none so far)."""


@dataclass(frozen=True)
class Verdict:
    """One job's outcome: admitted, or refused for these ``(reason, field)`` causes."""

    admitted: bool
    causes: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class JobDocument:
    """A PyTorchJob document of a file: its text as written, and the namespace it lands in."""

    text: str
    body: dict[str, Any]
    declared_namespace: str | None


def job_documents(path: Path) -> list[JobDocument]:
    """The file's PyTorchJob documents (kubeflow.org/v1), each cut from the file as written."""
    text = path.read_text(encoding="utf-8")
    documents = []
    for node in yaml.compose_all(text, Loader=yaml.SafeLoader):
        if node is None:
            continue
        source = text[node.start_mark.index : node.end_mark.index]
        body = yaml.load(source, Loader=_ApiserverYaml)
        if not (
            isinstance(body, dict)
            and body.get("kind") == names.KIND
            and body.get("apiVersion") == names.API_VERSION
        ):
            continue
        declared = (body.get("metadata") or {}).get("namespace")
        documents.append(JobDocument(source, body, declared if declared else None))
    return documents


def unknown_field_causes(message: str) -> frozenset[tuple[str, str]]:
    return frozenset((UNKNOWN_FIELD, m["field"]) for m in _UNKNOWN_FIELD.finditer(message))


def namespace_flag(documents: list[JobDocument], namespace: str) -> list[str]:
    """``-n NAMESPACE``, unless a job declares its own: kubectl apply -n refuses another one."""
    return [] if any(d.declared_namespace for d in documents) else ["-n", namespace]


def check_verdicts(path: Path, namespace: str) -> list[Verdict]:
    """``torchgate check -o json [-n NAMESPACE] FILE``: one verdict per job, in document order."""
    scope = namespace_flag(job_documents(path), namespace)
    result = subprocess.run(
        [sys.executable, "-m", "torchgate", "check", "-o", "json", *scope, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode == 2:  # refused before admission, as kubectl or the apiserver refuses it
        causes = unknown_field_causes(result.stderr)
        assert causes, result.stderr
        return [Verdict(False, causes) for _ in job_documents(path)]
    assert result.returncode in (0, 1), result.stderr
    return [
        Verdict(
            bool(item["allowed"]),
            frozenset((error["type"], error["field"]) for error in item["errors"]),
        )
        for item in json.loads(result.stdout)["results"]
    ]


def cluster_verdict(cluster: Cluster, document: JobDocument, namespace: str) -> Verdict:
    """The apiserver's answer to creating the job as kubectl apply does, dry run."""
    target = document.declared_namespace or namespace
    path = f"/apis/{names.API_VERSION}/namespaces/{target}/pytorchjobs{STRICT_DRY_RUN}"
    status, body = cluster.api_request("POST", path, document.body)
    if status in (200, 201):
        return Verdict(True)
    causes = frozenset(
        (cause.get("reason", ""), cause.get("field", ""))
        for cause in body.get("details", {}).get("causes", [])
    )
    if status == 400 and "strict decoding error" in body.get("message", ""):
        causes = unknown_field_causes(body["message"])
    assert causes, f"HTTP {status} without causes: {body}"
    return Verdict(False, causes)


def kubectl_admits(cluster: Cluster, documents: list[JobDocument], namespace: str) -> bool:
    """Whether ``kubectl apply --dry-run=server`` accepts all the file's jobs."""
    text = "\n---\n".join(document.text for document in documents)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8") as copy:
        copy.write(text)
        copy.flush()
        scope = namespace_flag(documents, namespace)
        result = cluster.kubectl("apply", "--dry-run=server", "-f", copy.name, *scope, check=False)
    return result.returncode == 0


@pytest.fixture(scope="module")
def webhook(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalWebhook]:
    """The webhook, registered with ``failurePolicy: Fail``, with check's default policy."""
    for kind in ("placementpolicies", "teamquotas"):
        assert cluster.list_objects(kind) == [], f"{kind} in the cluster: not check's default"
    with registered_webhook(cluster, tmp_path_factory.mktemp("webhook")) as server:
        yield server


def ensure_namespaces(cluster: Cluster, documents: list[JobDocument]) -> list[str]:
    """The namespaces the jobs declare that had to be created (a dry run needs them too)."""
    created = []
    for namespace in sorted({d.declared_namespace for d in documents if d.declared_namespace}):
        if cluster.get("namespace", namespace) is None:
            cluster.kubectl("create", "namespace", namespace)
            created.append(namespace)
    return created


def test_every_file_is_a_job_file() -> None:
    assert len(FILES) == 33
    assert all(job_documents(path) for path in FILES)
    assert set(EXPECTED_DIFFERENCES) <= {path.name for path in FILES}


def verdicts(cluster: Cluster, path: Path) -> tuple[list[Verdict], list[Verdict]]:
    """(check's, the cluster's) verdicts on the file's jobs; kubectl must agree with the latter."""
    namespace = cluster.new_namespace("agree")
    documents = job_documents(path)
    created = ensure_namespaces(cluster, documents)
    try:
        from_cluster = [cluster_verdict(cluster, d, namespace) for d in documents]
        by_kubectl = kubectl_admits(cluster, documents, namespace)
        from_check = check_verdicts(path, namespace)
    finally:
        for name in created:
            cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
    assert by_kubectl == all(v.admitted for v in from_cluster)
    return from_check, from_cluster


@pytest.mark.parametrize("path", FILES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_check_gives_the_clusters_verdict(
    cluster: Cluster, webhook: LocalWebhook, path: Path
) -> None:
    from_check, from_cluster = verdicts(cluster, path)

    if path.name in EXPECTED_DIFFERENCES:
        assert from_check != from_cluster, f"agrees now: drop {path.name} from the table"
    else:
        assert from_check == from_cluster


SEED_003 = SHARED / "seeds" / "manifests" / "003-torchrun-cpu.yaml"
WORKER = "    Worker:\n"


@pytest.mark.parametrize(
    ("edit", "cause"),
    [
        (
            lambda text: text + text[text.index(WORKER) :].replace(WORKER, "    worker:\n"),
            ("FieldValueDuplicate", "spec.pytorchReplicaSpecs[worker]"),
        ),
        (
            lambda text: text.replace("spec:\n", "spec:\n  runPolicy: {suspend: 'no'}\n", 1),
            ("FieldValueTypeInvalid", "spec.runPolicy.suspend"),
        ),
    ],
    ids=["mutating-webhook-refuses-first", "schema-refuses-before-validating-webhook"],
)
def test_the_step_that_refuses_first_gives_the_verdict_alone(
    cluster: Cluster,
    webhook: LocalWebhook,
    tmp_path: Path,
    edit: Callable[[str], str],
    cause: tuple[str, str],
) -> None:
    # Seed 003 with a second Worker spelled "worker" (the mutating webhook refuses the duplicate;
    # the validating webhook would refuse the key too), or a quoted boolean (the CRD's schema;
    # the validating webhook is not asked).
    path = tmp_path / "job.yaml"
    path.write_text(edit(SEED_003.read_text(encoding="utf-8")), encoding="utf-8")

    from_check, from_cluster = verdicts(cluster, path)

    assert from_cluster == [Verdict(False, frozenset({cause}))]
    assert from_check == from_cluster


MISPLACED = (
    ("spec:\n", "spec:\n  cleanPodPolicy: None\n"),
    (WORKER + "      replicas: 1\n", WORKER + "      replicas: 1\n      imagePullPolicy: Always\n"),
    ("spec:\n", "spec:\n  runPolicy: {backoffLimit: 1, schedulingPolicy: {queueName: q}}\n"),
)
"""Seed 003 with fields its CRD does not declare: in spec, in a replica, in schedulingPolicy."""


def seed_003_misplaced(name: str) -> str:
    text = SEED_003.read_text(encoding="utf-8").replace("name: torchrun-cpu", f"name: {name}")
    for anchor, replacement in MISPLACED:
        text = text.replace(anchor, replacement, 1)
    return text


@pytest.mark.parametrize(
    ("validate", "warned"), [("warn", True), ("false", False)], ids=["warn", "ignore"]
)
def test_unknown_fields_under_lax_validation_are_dropped_before_the_webhook_sees_them(
    cluster: Cluster, webhook: LocalWebhook, validate: str, warned: bool
) -> None:
    # kubectl --validate=warn sends fieldValidation=Warn (what the apiserver assumes for clients
    # that send none), --validate=false sends Ignore: the apiserver prunes the unknown fields
    # while decoding, so the webhook is asked about the job without them and admits it.
    namespace = cluster.new_namespace("lax")

    result = cluster.kubectl(
        "create", f"--validate={validate}", "-n", namespace, "-f", "-",
        input=seed_003_misplaced("lax"), check=False,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    unknown = {m["field"] for m in _UNKNOWN_FIELD.finditer(result.stderr)}
    expected = {
        "spec.cleanPodPolicy",
        "spec.pytorchReplicaSpecs.Worker.imagePullPolicy",
        "spec.runPolicy.schedulingPolicy.queueName",
    }
    assert unknown == (expected if warned else set())
    stored = cluster.get("pytorchjob", "lax", namespace)
    assert stored is not None
    spec = stored["spec"]
    assert "cleanPodPolicy" not in spec
    assert "imagePullPolicy" not in spec["pytorchReplicaSpecs"]["Worker"]
    assert "queueName" not in spec["runPolicy"]["schedulingPolicy"]
    # The misplaced None is lost: the webhook (the CRD has no default for it) defaulted the real
    # field as for any job, so it was asked, and admitted the job.
    assert spec["runPolicy"]["cleanPodPolicy"] == "Running"


def test_a_client_sending_no_field_validation_has_unknown_fields_dropped(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    # The Kubeflow SDK's way: a plain POST, no fieldValidation (the apiserver's default is Warn).
    namespace = cluster.new_namespace("sdk")
    body = yaml.load(seed_003_misplaced("sdk"), Loader=_ApiserverYaml)

    status, created = cluster.api_request(
        "POST", f"/apis/{names.API_VERSION}/namespaces/{namespace}/pytorchjobs", body
    )

    assert status == 201, created
    spec = created["spec"]
    assert "cleanPodPolicy" not in spec
    assert "imagePullPolicy" not in spec["pytorchReplicaSpecs"]["Worker"]
    assert "queueName" not in spec["runPolicy"]["schedulingPolicy"]
    assert spec["runPolicy"]["cleanPodPolicy"] == "Running"  # the webhook was asked


MASTER_COMMAND_END = '                - "demo.py"\n'


def test_kubectl_keeps_the_last_of_two_equal_keys_as_check_does(
    cluster: Cluster, webhook: LocalWebhook, tmp_path: Path
) -> None:
    # Two env: keys in Master's container and two replicas: keys on Worker: kubectl converts the
    # YAML to JSON keeping the last of each (no error, no warning, under strict validation too),
    # as PyYAML does, so check reads the job kubectl sends.
    text = SEED_003.read_text(encoding="utf-8").replace(
        MASTER_COMMAND_END,
        MASTER_COMMAND_END
        + "              env: [{name: FIRST, value: '1'}]\n"
        + "              env: [{name: LAST, value: '2'}]\n",
        1,
    )
    text = text.replace(
        WORKER + "      replicas: 1\n", WORKER + "      replicas: -1\n      replicas: 2\n"
    )
    path = tmp_path / "job.yaml"
    path.write_text(text, encoding="utf-8")
    namespace = cluster.new_namespace("dup")

    result = cluster.kubectl(
        "apply", "--dry-run=server", "-o", "json", "-n", namespace, "-f", str(path), check=False
    )

    assert result.returncode == 0, result.stderr
    sent = json.loads(result.stdout)["spec"]["pytorchReplicaSpecs"]
    assert sent["Master"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "LAST", "value": "2"}
    ]
    assert sent["Worker"]["replicas"] == 2
    from_check, from_cluster = verdicts(cluster, path)
    assert from_check == from_cluster == [Verdict(True)]


def run_check(*args: str) -> subprocess.CompletedProcess[str]:
    """The product CLI's ``torchgate check``, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "torchgate", "check", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_generate_name_without_a_name_is_refused_by_kubectl_apply_and_by_check(
    cluster: Cluster, webhook: LocalWebhook, tmp_path: Path
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        SEED_003.read_text(encoding="utf-8").replace("name: torchrun-cpu", "generateName: j-"),
        encoding="utf-8",
    )
    namespace = cluster.new_namespace("gen")

    applied = cluster.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", str(path), check=False
    )
    created = cluster.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-f", str(path), check=False
    )
    checked = run_check("-n", namespace, str(path))

    refusal = "from j-: cannot use generate name with apply"
    assert (applied.returncode, applied.stderr.strip()) == (1, f"error: {refusal}")
    assert created.returncode == 0, created.stderr  # kubectl create takes it
    assert checked.returncode == 2
    assert f"{path}[0].metadata.generateName (line 4): {refusal}" in checked.stderr


def test_a_job_in_another_namespace_than_the_flag_is_refused_by_kubectl_apply_and_by_check(
    cluster: Cluster, webhook: LocalWebhook, tmp_path: Path
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        SEED_003.read_text(encoding="utf-8").replace(
            "name: torchrun-cpu", "name: torchrun-cpu\n  namespace: team-b"
        ),
        encoding="utf-8",
    )
    namespace = cluster.new_namespace("flag")

    applied = cluster.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", str(path), check=False
    )
    checked = run_check("-n", namespace, str(path))

    refusal = (
        f'the namespace from the provided object "team-b" does not match the namespace '
        f"\"{namespace}\". You must pass '--namespace=team-b' to perform this operation."
    )
    assert (applied.returncode, applied.stderr.strip()) == (1, f"error: {refusal}")
    assert checked.returncode == 2
    assert f"{path}[0].metadata.namespace (line 5): {refusal}" in checked.stderr


def test_a_namespace_flag_naming_no_possible_namespace_is_refused_by_the_apiserver_and_check(
    cluster: Cluster, webhook: LocalWebhook
) -> None:
    applied = cluster.kubectl(
        "apply", "--dry-run=server", "-n", "Bad_NS", "-f", str(SEED_003), check=False
    )
    made = cluster.kubectl("create", "namespace", "Bad_NS", check=False)
    checked = run_check("-n", "Bad_NS", str(SEED_003))

    assert applied.returncode == 1
    assert 'namespaces "Bad_NS" not found' in applied.stderr
    assert made.returncode == 1  # and no such namespace can be made
    assert "metadata.name: Invalid value" in made.stderr
    assert checked.returncode == 2
    assert "error: argument -n/--namespace: 'Bad_NS' is not a namespace name" in checked.stderr


APPLY_OUTCOME = {"CREATE": "created", "UPDATE": "configured", "NONE": "unchanged"}
"""What ``kubectl apply`` prints of an object, by what check says reaches the webhook."""


@pytest.mark.parametrize(
    "edit",
    [
        lambda text: text,
        lambda text: text.replace(WORKER + "      replicas: 1\n", WORKER + "      replicas: 3\n"),
        lambda text: text.replace(
            "spec:\n", "spec:\n  runPolicy: {managedBy: kubeflow.org/training-operator}\n", 1
        ),
    ],
    ids=["the-same-again", "more-workers", "managed-by-changed"],
)
def test_the_same_job_twice_is_created_then_updated_as_check_judges_it(
    cluster: Cluster, webhook: LocalWebhook, tmp_path: Path, edit: Callable[[str], str]
) -> None:
    # kubectl apply creates the first and patches it with the second (an UPDATE): the webhook
    # judges an update (changed templates defaulted again, managedBy immutable), and the job
    # stored is the one check shows: the three-way JSON merge patch replaced the containers
    # (without the port the webhook added, which it adds again) and kept what the manifest never
    # had (runPolicy; a gang size it defaulted follows the Workers).
    text = SEED_003.read_text(encoding="utf-8")
    path = tmp_path / "jobs.yaml"
    path.write_text(f"{text}---\n{edit(text)}", encoding="utf-8")
    namespace = cluster.new_namespace("twice")

    applied = cluster.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
    checked = run_check("-o", "json", "-n", namespace, str(path))

    results = json.loads(checked.stdout)["results"]
    assert checked.returncode == (0 if all(r["allowed"] for r in results) else 1)
    assert applied.returncode == checked.returncode
    assert [r["operation"] for r in results][:1] == ["CREATE"]
    printed = [
        f"pytorchjob.kubeflow.org/torchrun-cpu {APPLY_OUTCOME[r['operation']]}"
        for r in results
        if r["allowed"]
    ]
    assert applied.stdout.splitlines() == printed
    for result in results:
        for error in result["errors"]:
            assert f"{error['field']}: " in applied.stderr
    stored = cluster.get("pytorchjob", "torchrun-cpu", namespace)
    assert stored is not None
    last_admitted = [r for r in results if r["allowed"]][-1]["object"]
    # The CRD's schema defaults suspend, which check shows on no job (a creation neither).
    assert stored["spec"]["runPolicy"].pop("suspend") is False
    assert stored["spec"] == last_admitted["spec"]
