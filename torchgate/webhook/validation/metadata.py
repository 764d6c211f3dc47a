"""Metadata rules: the job's name, the pinned-hosts and progress annotations, create-only fields.

Why the name is checked here and not left to the apiserver: the controller derives pod and
Service names from it (``<job>-worker-<i>``), and those must be DNS-1035 labels of at most 63
characters. A name the apiserver accepts for the PyTorchJob can still make every pod creation
fail, so the limit is enforced on the longest name the controller will derive, elastic growth
included.
"""

from __future__ import annotations

from torchgate.pytorchjob import names
from torchgate.pytorchjob.fieldpath import (
    forbidden,
    invalid,
    not_supported,
    required,
)
from torchgate.pytorchjob.progress import ANNOTATION_PROGRESS_DEADLINE, parse_deadline
from torchgate.pytorchjob.spec import derived_name_error, pinned_hosts
from torchgate.webhook.validation.facts import (
    ANNOTATIONS,
    GENERATED_SUFFIX,
    HOSTS_ANNOTATION,
    METADATA,
    NAME,
    NONE,
    OBJECT,
    STATUS,
    Finding,
    Findings,
    JobFacts,
)

# ``-worker-`` and ``-master-``: what a derived name adds to the job name before the index.
_LONGEST_INFIX = max(len(replica_type) for replica_type in names.REPLICA_TYPES) + 2


def metadata_is_object(job: JobFacts) -> Findings:
    """``metadata``, when present, is an object."""
    metadata = job.metadata
    if metadata is not None and not isinstance(metadata, OBJECT):
        return [invalid(METADATA, metadata, "must be an object")]
    return NONE


def name(job: JobFacts) -> Findings:
    """A name (or generateName) that gives valid names to every pod the controller derives."""
    metadata = job.metadata
    if metadata is None:
        metadata = {}
    elif not isinstance(metadata, OBJECT):
        return NONE
    given, prefix = metadata.get("name"), metadata.get("generateName")
    if given is not None and given != "" and not isinstance(given, str):
        return [invalid(NAME, given, "must be a string")]
    if not given and not (isinstance(prefix, str) and prefix):
        return [required(NAME, "name or generateName is required")]
    job_name = job.job_name
    assert job_name is not None
    problems = names.dns1035_errors(job_name)
    if problems:
        shown = given if given else prefix
        detail = ", ".join(problems)
        if not given:
            detail = f"generateName plus 5 random characters must be a valid name: {detail}"
        return [invalid(NAME, shown, detail)]
    return _derived_name_length(job, job_name, generated=not given)


def _derived_name_length(job: JobFacts, job_name: str, *, generated: bool) -> Findings:
    # Lengths only: the longest name is built when it is too long (most names are not).
    # Indexes are never negative: pods are a count or None, and elastic bounds at least 1.
    workers = job.elastic_workers
    elastic_highest = workers[1] - 1 if workers else 0
    total = job.total_replicas
    if (
        total is not None
        and len(job_name) + _LONGEST_INFIX + len(str(max(total, elastic_highest)))
        <= names.DNS_LABEL_MAX
    ):
        return NONE  # even the longest type with an index past every pod fits (the usual job)
    highest = []
    for replica in job.known_replicas:
        index = (replica.pods or 1) - 1
        if index < elastic_highest and replica.key == names.WORKER:
            index = elastic_highest
        highest.append((replica.key, index))
    suffix = len(GENERATED_SUFFIX) if generated else None
    too_long = derived_name_error(job_name, highest, generated_suffix=suffix)
    return NONE if too_long is None else [too_long]


def progress_deadline_annotation(job: JobFacts) -> Findings:
    """``torchgate.io/progress-deadline-seconds`` is a positive whole number of seconds."""
    metadata = job.metadata
    annotations = metadata.get("annotations") if isinstance(metadata, OBJECT) else None
    if not isinstance(annotations, OBJECT) or ANNOTATION_PROGRESS_DEADLINE not in annotations:
        return NONE
    value = annotations[ANNOTATION_PROGRESS_DEADLINE]
    if parse_deadline(value) is None or not isinstance(value, str):
        path = ANNOTATIONS.key(ANNOTATION_PROGRESS_DEADLINE)
        return [invalid(path, value, "must be a positive whole number of seconds")]
    return NONE


def pinned_hosts_annotation(job: JobFacts) -> Findings:
    """``torchgate.io/hosts`` lists node names, each allowed by the policy."""
    metadata = job.metadata
    if not isinstance(metadata, OBJECT):
        return NONE
    annotations = metadata.get("annotations")
    if annotations is None:
        return NONE
    if not isinstance(annotations, OBJECT):
        return [invalid(ANNOTATIONS, annotations, "must map keys to strings")]
    raw = annotations.get(names.ANNOTATION_HOSTS)
    if raw is None:
        return NONE
    if not isinstance(raw, str):
        return [invalid(HOSTS_ANNOTATION, raw, "must be a comma-separated list of node names")]
    allowed = job.policy.allowed_hosts
    found: list[Finding] = []
    for host in pinned_hosts(annotations):
        if not names.is_dns1123_subdomain(host):
            found.append(
                invalid(
                    HOSTS_ANNOTATION,
                    host,
                    "must be node names (lower-case DNS-1123 subdomains) separated by commas",
                )
            )
        elif allowed and host not in allowed:
            found.append(not_supported(HOSTS_ANNOTATION, host, allowed))
    return found


def create_only_fields(job: JobFacts) -> Findings:
    """On create, no ``resourceVersion``, ``uid`` or ``status`` (pasted ``kubectl get`` output)."""
    if not job.creating:
        return NONE
    found: list[Finding] = []
    metadata = job.metadata
    if isinstance(metadata, OBJECT):
        for key in ("resourceVersion",) if job.uid_from_server else ("resourceVersion", "uid"):
            if metadata.get(key) not in (None, ""):
                found.append(
                    forbidden(
                        METADATA.child(key),
                        "must not be set when creating (this looks like `kubectl get -o "
                        "yaml` output: drop resourceVersion, uid and status)",
                    )
                )
    if job.raw.get("status") not in (None, {}):
        found.append(
            forbidden(STATUS, "must not be set when creating; the controller reports status")
        )
    return found
