"""Replica and pod-template rules: replica fields, the ``pytorch`` container, node pool, volumes.

Why here: these are the parts of a replica spec the controller copies into every pod it
creates. A ``replicas: 2`` on Master, a template without a ``pytorch`` container, a
``nodeSelector`` asking for another pool than the policy's, or a ``hostPath`` the admin has not
allowed each produce pods that cannot run as intended, so they are refused with the field at
fault; so is a template sharing the node's network, PID or IPC namespace without the policy's
``allowPrivileged`` (``policy.HOST_NAMESPACES``: a user who may only write PyTorchJobs would get
pods that see and signal every process of the node, other tenants' included), and one that
takes its pods out of the admin's control of the pool without it: a toleration of every taint,
of torchgate's quarantine or of a cordon (``taints.escapes``), or an ``Unconfined`` seccomp or
AppArmor profile (``policy.CONFINEMENT_PROFILES``, or the legacy AppArmor annotation in the
template's metadata, which Kubernetes still honours: ``pod_confinement``). A ``nodeName`` is
refused under any policy: torchgate places the pods; so is a profile annotation or profile field
the apiserver refuses in every pod (an annotation naming no container, an unknown value, one
disagreeing with the profile field; a field without its type or ``localhostProfile``, or with one
it does not know), and a toleration it refuses in every pod (``taints.entry_errors``): the job
would be stored and its pods never created. Replica types other than
Master and Worker are reported last, after every known replica.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from torchgate.pytorchjob import gang, names
from torchgate.pytorchjob.fieldpath import (
    ErrorType,
    FieldError,
    FieldPath,
    FieldWarning,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    required,
)
from torchgate.pytorchjob.policy import (
    ANNOTATION_LOCALHOST_PREFIX,
    ANNOTATION_RUNTIME_DEFAULT,
    APPARMOR_ANNOTATION_PREFIX,
    APPARMOR_ANNOTATION_UNCONFINED,
    CONFINEMENT_PROFILES,
    HOST_NAMESPACES,
    LOCALHOST,
    PROFILE_TYPES,
    RUNTIME_DEFAULT,
    SECCOMP_ANNOTATION_DOCKER_DEFAULT,
    SECCOMP_CONTAINER_ANNOTATION_PREFIX,
    SECCOMP_POD_ANNOTATION,
    UNCONFINED,
    PlacementPolicy,
)
from torchgate.pytorchjob.spec import canonical_replica_type
from torchgate.pytorchjob.taints import (
    EVERY_TAINT,
    RESERVED_TAINTS,
    entry_errors,
    escapes,
    toleration_of,
)
from torchgate.webhook.validation.facts import (
    NONE,
    OBJECT,
    ContainerFacts,
    Finding,
    Findings,
    JobFacts,
    ReplicaFacts,
    at,
    placeholder_hint,
    quote,
    remember_valid,
)


def replica_spec_present(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """A replica entry is an object (``Master: null`` has no containers)."""
    if replica.spec is None:
        return [required(at(replica.pod_path, "containers"), "must be specified")]
    return NONE


def replica_count(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """``replicas`` is a count: exactly 1 for Master, 1 to ``gang.MAX_REPLICAS`` for Worker."""
    pods = replica.pods
    if pods == 1 or (
        pods is not None and 1 < pods <= gang.MAX_REPLICAS and replica.key != names.MASTER
    ):
        return NONE  # the usual counts (an absent ``replicas`` reads as 1), without a lookup
    raw = replica.spec.get("replicas") if replica.spec is not None else None
    if raw is None:
        return NONE
    if replica.pods is None:
        detail = "must be a non-negative integer" + placeholder_hint(raw)
        return [invalid(at(replica.path, "replicas"), raw, detail)]
    if replica.key == names.MASTER and replica.pods != 1:
        return [forbidden(at(replica.path, "replicas"), "must be 1")]
    if replica.key == names.WORKER and replica.pods < 1:
        return [forbidden(at(replica.path, "replicas"), "must be at least 1")]
    if replica.pods > gang.MAX_REPLICAS:
        detail = f"must be less than or equal to {gang.MAX_REPLICAS}"
        return [invalid(at(replica.path, "replicas"), raw, detail)]
    return NONE


def elastic_worker_count(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """An elastic job's Workers are within its bounds: its pods fit its ``PET_NNODES`` range.

    The bounds count Workers (``gang``: what ``kubectl scale`` and an HPA move; an unset bound
    copies the other, as the training-operator defaults it), while every pod runs torchrun with
    ``PET_NNODES`` = the Masters plus the bounds (``facts.expected_nnodes``, as the controller
    passes it): fewer Workers than ``minReplicas`` never complete the rendezvous (the job hangs
    until torchrun's join timeout), more than ``maxReplicas`` are left out of it, holding their
    GPUs idle. Bounds the elastic policy rule refuses are left to it.
    """
    bounds = job.elastic_workers
    nnodes = job.expected_nnodes
    pods = replica.pods
    if (
        replica.key != names.WORKER
        or bounds is None
        or nnodes is None
        or pods is None
        or pods < 1
        or bounds[0] > bounds[1]
        or bounds[0] <= pods <= bounds[1]
    ):
        return NONE
    low, high = bounds
    outcome = (
        "fewer never complete the rendezvous"
        if pods < low
        else "more are left out of the rendezvous, holding their GPUs idle"
    )
    launched = (
        "every pod, the Master too, starts torchrun" if nnodes[0] > low else "torchrun is started"
    )
    detail = (
        f"must be within {low}..{high}, spec.elasticPolicy minReplicas..maxReplicas (which count "
        f"Workers; an unset bound copies the other): {launched} with PET_NNODES="
        f"{gang.format_nnodes(nnodes, elastic=True)}, and {outcome}"
    )
    return [invalid(at(replica.path, "replicas"), pods, detail)]


def restart_policy(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """``restartPolicy`` is one the training-operator knows."""
    restart = replica.spec.get("restartPolicy") if replica.spec is not None else None
    if restart is not None and restart not in names.RESTART_POLICIES:
        return [not_supported(at(replica.path, "restartPolicy"), restart, names.RESTART_POLICIES)]
    return NONE


def template_shape(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """``template`` and ``template.spec`` are objects (the pod rules need them)."""
    if replica.spec is None or replica.template_readable:  # read with the facts: the usual case
        return NONE
    template = replica.spec.get("template")
    if template is not None and not isinstance(template, OBJECT):
        return [invalid(at(replica.path, "template"), template, "must be an object")]
    pod_spec = template.get("spec") if isinstance(template, OBJECT) else None
    if pod_spec is not None and not isinstance(pod_spec, OBJECT):
        return [invalid(at(replica.path, "template", "spec"), pod_spec, "must be an object")]
    return NONE


def pytorch_container(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """The pod template has a container named ``pytorch``."""
    containers = replica.pod_spec.get("containers")
    if isinstance(containers, list) and containers:
        index = replica.training_container
        if index is not None and containers[index].get("name") == names.CONTAINER_NAME:
            return NONE
    path = at(replica.pod_path, "containers")
    if containers is None or containers == []:
        return [required(path, "must be specified")]
    if not isinstance(containers, list):
        return [invalid(path, containers, "must be a list of containers")]
    return [required(path, "must have at least one container with name pytorch")]


def node_selector(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """``nodeSelector`` does not ask for another pool than the policy places jobs on."""
    selector = replica.pod_spec.get("nodeSelector")
    if selector is None:
        return NONE
    if not isinstance(selector, OBJECT):
        path = at(replica.pod_path, "nodeSelector")
        return [invalid(path, selector, "must map label keys to values")]
    found: list[Finding] = []
    for key, wanted in job.policy.node_selector.items():
        asked = selector.get(key)
        if asked is not None and asked != wanted:
            found.append(
                invalid(
                    at(replica.pod_path, "nodeSelector").key(key),
                    asked,
                    f"{job.policy_label} places jobs on nodes labelled "
                    f"{key}={wanted}; this replica asks for a different pool",
                )
            )
    return found


def volumes(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """``volumes``: a list of named, unique volumes; hostPath only where the policy allows."""
    declared = replica.pod_spec.get("volumes")
    if declared is None:
        return NONE
    path = replica.pod_path
    if not isinstance(declared, list):
        return [invalid(at(path, "volumes"), declared, "must be a list of volumes")]
    if replica.host_paths is not None:  # every volume well formed: only hostPaths to look at
        found: list[Finding] = []
        for index, host_path in replica.host_paths:
            found.extend(_host_path(job, path, index, host_path))
        return found
    found = []
    seen: set[str] = set()
    for index, volume in enumerate(declared):
        if not isinstance(volume, OBJECT):
            found.append(invalid(at(path, "volumes", index), volume, "must be an object"))
            continue
        name = volume.get("name")
        if not isinstance(name, str) or not name:
            found.append(required(at(path, "volumes", index, "name"), "must be specified"))
        elif name in seen:
            found.append(duplicate(at(path, "volumes", index, "name"), name))
        else:
            seen.add(name)
        host_path = volume.get("hostPath")
        if host_path is not None:
            found.extend(_host_path(job, path, index, host_path))
    return found


def host_namespaces(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """``hostNetwork``, ``hostPID`` and ``hostIPC`` only where the policy allows privilege."""
    if job.policy.allow_privileged:
        return NONE
    return [
        forbidden(
            at(replica.pod_path, field),
            f"{field} is not allowed by {job.policy_label} (allowPrivileged: false): the pods "
            "would share the node's namespace, reaching its processes or network, other jobs' "
            "included",
        )
        for field in HOST_NAMESPACES
        if replica.pod_spec.get(field) is True
    ]


def tolerations(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """Tolerations the apiserver takes; none of every taint, the quarantine or a cordon.

    The syntax is ``taints.entry_errors``' under every policy (a pod holding a toleration the
    apiserver refuses is never created); the escapes are refused unless the policy allows
    privilege. The policy's own tolerations, which the mutating webhook copies in, pass whole:
    parsing the policy refused any the apiserver would (``policy._parse_tolerations``). Own as
    JSON compares them (``PlacementPolicy.wrote``): ``tolerationSeconds: true`` equals the
    policy's ``1`` in Python, not in a pod, and is judged as the template's.
    """
    entries = replica.pod_spec.get("tolerations")
    policy = job.policy
    if entries is None or (
        type(entries) is list
        and tuple(entries) == policy.tolerations
        and policy.untimed_tolerations  # else ``==`` is not JSON's: each entry asks ``wrote``
    ):
        return NONE  # the usual list: the policy's own, valid and allowed
    if not isinstance(entries, list):
        path = at(replica.pod_path, "tolerations")
        return [invalid(path, entries, "must be a list of tolerations")]
    found: list[Finding] = []
    for index, entry in enumerate(entries):
        if _seen_harmless(entry):
            continue
        if not policy.wrote(entry):
            errors = entry_errors(entry, at(replica.pod_path, "tolerations", index))
            if errors:
                found.extend(errors)
                continue  # the pod is refused whatever it tolerates
        escaped = policy.escaped_taint(entry) if isinstance(entry, OBJECT) else None
        if escaped is None:
            if isinstance(entry, OBJECT) and escapes(toleration_of(entry)) is None:
                _remember_harmless(entry)  # valid, and escapes nothing under any policy
            continue
        if escaped == EVERY_TAINT:
            what = (
                "a toleration without a key tolerates every taint, torchgate's quarantine of "
                "failing nodes, cordons and health taints included"
            )
            instead = "name the taint it is for (key: nvidia.com/gpu, operator: Exists)"
        else:
            what = f"the taint {escaped} is {RESERVED_TAINTS[escaped]}"
            instead = "only the cluster admin may place pods on such nodes"
        found.append(
            forbidden(
                at(replica.pod_path, "tolerations", index),
                f"{what}; tolerating it is not allowed by {job.policy_label} "
                f"(allowPrivileged: false): {instead}",
            )
        )
    return found


# Tolerations found valid and escaping nothing under any policy (``taints.escapes``), kept
# across reviews as their items: a job's own (a dedicated pool's taint) recur from job to job,
# and one C-level set lookup costs a fraction of the checks. Only entries of strings are kept:
# 1 == 1.0 == True, while a string equals only the same string, so a hit is the same
# toleration (``facts.remember_valid``).
_HARMLESS_TOLERATIONS: Final[set[tuple[tuple[str, Any], ...]]] = set()
_HARMLESS_KEPT: Final = 1024


def _seen_harmless(entry: object) -> bool:
    if type(entry) is not dict:
        return False
    try:
        return tuple(entry.items()) in _HARMLESS_TOLERATIONS
    except TypeError:  # an unhashable value (a list): never kept
        return False


def _remember_harmless(entry: Mapping[str, Any]) -> None:
    if type(entry) is dict and all(type(value) is str for value in entry.values()):
        remember_valid(_HARMLESS_TOLERATIONS, tuple(entry.items()), most=_HARMLESS_KEPT)


def node_name(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """No ``nodeName``: torchgate places the gang (pinned hosts: ``torchgate.io/hosts``)."""
    if replica.pod_spec.get("nodeName") in (None, ""):
        return NONE
    return [
        forbidden(
            at(replica.pod_path, "nodeName"),
            "torchgate places the job's pods: a nodeName would skip kube-scheduler and the "
            "admin's placement (quotas, quarantine, the gang's planned nodes); pin hosts with "
            f"the annotation {names.ANNOTATION_HOSTS}",
        )
    ]


def pod_confinement(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """No ``Unconfined`` profile unless privileged; no profile field or annotation it refuses.

    The fields are ``profile_fields``' (shared with the containers); the annotations are here.

    Found (k8s.io/kubernetes v1.37.2 and v1.36.3): creating a pod copies an annotation
    ``container.apparmor.security.beta.kubernetes.io/<c>: unconfined`` into container ``<c>``'s
    unset ``appArmorProfile`` (``pkg/registry/core/pod/strategy.go:997``; ``:973`` in v1.36.3),
    so it is refused like the field; the seccomp annotations are ignored since 1.27 (the kubelet
    reads only the fields, ``pkg/kubelet/kuberuntime/helpers.go:304``): a warning says so.

    Refused under every policy, as the apiserver refuses every pod of the template
    (``pkg/apis/core/validation/validation.go`` v1.37.2, v1.36.3 in brackets): an AppArmor
    annotation naming no container or init container (Invalid, ``:5517`` [``:5362``]), or whose
    value is not ``""``, ``runtime/default``, ``unconfined`` nor ``localhost/...`` (Invalid,
    ``:5529`` [``:5374``]); a seccomp annotation whose value is not ``runtime/default``,
    ``docker/default``, ``unconfined`` nor ``localhost/<relative path without ..>`` (Invalid,
    ``:5429`` [``:5274``]); an annotation disagreeing with the ``appArmorProfile`` (the
    container's, else the pod's, once the annotation was copied, ``:5540`` [``:5385``]; a
    Windows pod skips this check but refuses every AppArmor field, ``:5025``, ``:5080``) or
    ``seccompProfile`` (the pod annotation with the pod's, a container's with that container's
    own, ``:5784`` [``:5626``]) the template sets (Forbidden).
    """
    found = profile_fields(job, replica.pod_spec.get("securityContext"), replica.pod_path)
    if not replica.profile_annotations:
        return found
    annotations = at(replica.path, "template", "metadata", "annotations")
    legacy: list[Finding] = []
    for key, value in replica.profile_annotations:
        if not isinstance(value, str):
            continue  # the pod would not decode: the controller's create reports it
        path = annotations.key(key)
        if key.startswith(APPARMOR_ANNOTATION_PREFIX):
            legacy.extend(_apparmor_annotation(job, replica, path, key, value))
        elif key == SECCOMP_POD_ANNOTATION or key.startswith(SECCOMP_CONTAINER_ANNOTATION_PREFIX):
            legacy.extend(_seccomp_annotation(replica, path, key, value))
            legacy.append(
                FieldWarning(
                    path,
                    "ignored since Kubernetes 1.27: the kubelet reads only "
                    "securityContext.seccompProfile; set that field instead",
                )
            )
    return [*found, *legacy]


def _apparmor_annotation(
    job: JobFacts, replica: ReplicaFacts, path: FieldPath, key: str, value: str
) -> Findings:
    """What the apiserver, then the policy, refuse of one legacy AppArmor annotation."""
    name = key[len(APPARMOR_ANNOTATION_PREFIX) :]
    container = _named_container(replica, name)
    found: list[Finding] = []
    if container is None:
        found.append(
            invalid(path, name, "container not found: no container of the template has this name")
        )
    if value not in _APPARMOR_VALUES and not value.startswith(ANNOTATION_LOCALHOST_PREFIX):
        found.append(
            invalid(
                path,
                value,
                f"invalid AppArmor profile name: {quote(value)} (use {ANNOTATION_RUNTIME_DEFAULT}"
                f", {APPARMOR_ANNOTATION_UNCONFINED} or {ANNOTATION_LOCALHOST_PREFIX}<profile>)",
            )
        )
    if container is None:
        return found
    field = "appArmorProfile"
    where = at(container.path, "securityContext", field)
    profile = _profile(container.fields.get("securityContext"), field)
    if profile is None and not _copied_apparmor(value):
        # the annotation is not copied into the field: the pod's profile applies
        where = at(replica.pod_path, "securityContext", field)
        profile = _profile(replica.pod_spec.get("securityContext"), field)
    if profile is not None:
        found.extend(_disagreement(path, value, profile, where, "apparmor", _APPARMOR_DEFAULT))
    if value == APPARMOR_ANNOTATION_UNCONFINED and not job.policy.allow_privileged:
        found.append(
            forbidden(
                path,
                f"{_unconfined_refusal(job)} (this annotation sets the container's "
                "securityContext.appArmorProfile)",
            )
        )
    return found


def _seccomp_annotation(replica: ReplicaFacts, path: FieldPath, key: str, value: str) -> Findings:
    """What the apiserver refuses of one legacy seccomp annotation (the kubelet ignores it)."""
    found: list[Finding] = []
    if value.startswith(ANNOTATION_LOCALHOST_PREFIX):
        found.extend(_local_descending_path(value[len(ANNOTATION_LOCALHOST_PREFIX) :], path))
    elif value not in _SECCOMP_VALUES:
        found.append(
            invalid(
                path,
                value,
                f"must be a valid seccomp profile ({ANNOTATION_RUNTIME_DEFAULT}, "
                f"{SECCOMP_ANNOTATION_DOCKER_DEFAULT}, {APPARMOR_ANNOTATION_UNCONFINED} or "
                f"{ANNOTATION_LOCALHOST_PREFIX}<profile>)",
            )
        )
    field = "seccompProfile"
    if key == SECCOMP_POD_ANNOTATION:
        security, where = replica.pod_spec.get("securityContext"), replica.pod_path
    else:  # a container's: compared with that container's own field only
        name = key[len(SECCOMP_CONTAINER_ANNOTATION_PREFIX) :]
        container = _named_container(replica, name)
        if container is None:
            return found
        security, where = container.fields.get("securityContext"), container.path
    profile = _profile(security, field)
    if profile is not None:
        where = at(where, "securityContext", field)
        found.extend(_disagreement(path, value, profile, where, "seccomp", _SECCOMP_DEFAULT))
    return found


# What the apiserver accepts in the annotations (``localhost/<profile>`` aside).
_APPARMOR_VALUES: Final = frozenset(
    {"", ANNOTATION_RUNTIME_DEFAULT, APPARMOR_ANNOTATION_UNCONFINED}
)
_APPARMOR_DEFAULT: Final = (ANNOTATION_RUNTIME_DEFAULT,)
_SECCOMP_DEFAULT: Final = (ANNOTATION_RUNTIME_DEFAULT, SECCOMP_ANNOTATION_DOCKER_DEFAULT)
_SECCOMP_VALUES: Final = frozenset({*_SECCOMP_DEFAULT, APPARMOR_ANNOTATION_UNCONFINED})
# Go's ``unicode.IsSpace`` (what ``strings.TrimSpace`` trims); ``str.isspace`` adds \x1c-\x1f.
_GO_SPACE: Final = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_LOCALHOST_PROFILE_MAX: Final = 4095  # bytes: PATH_MAX - 1


def _copied_apparmor(value: str) -> bool:
    """Whether pod creation copies the annotation into the container's unset field.

    ``podutil.ApparmorFieldForAnnotation``, kept only when ``ValidateAppArmorProfileField``
    accepts it (``strategy.go:997``): then the field and the annotation agree by construction.
    """
    if value in (APPARMOR_ANNOTATION_UNCONFINED, ANNOTATION_RUNTIME_DEFAULT):
        return True
    if not value.startswith(ANNOTATION_LOCALHOST_PREFIX):
        return False
    profile = value[len(ANNOTATION_LOCALHOST_PREFIX) :]
    return not _apparmor_field(LOCALHOST, profile, _NOWHERE)


def _disagreement(
    path: FieldPath,
    value: str,
    profile: Mapping[str, Any],
    where: FieldPath,
    kind: str,
    runtime_default: tuple[str, ...],
) -> Findings:
    """A Forbidden error when the annotation's ``value`` says another profile than the field."""
    wanted = profile.get("type")
    if wanted == UNCONFINED:
        agrees = value == APPARMOR_ANNOTATION_UNCONFINED
    elif wanted == RUNTIME_DEFAULT:
        agrees = value in runtime_default
    elif wanted == LOCALHOST:
        if not value.startswith(ANNOTATION_LOCALHOST_PREFIX):
            agrees = False
        elif value[len(ANNOTATION_LOCALHOST_PREFIX) :] != profile.get("localhostProfile"):
            return [
                forbidden(
                    path,
                    f"{kind} profile in annotation and field must match: "
                    f"{where.child('localhostProfile')} is "
                    f"{quote(str(profile.get('localhostProfile')))}",
                )
            ]
        else:
            agrees = True
    else:
        return NONE  # the field's own validation judges another type
    if agrees:
        return NONE
    return [
        forbidden(
            path,
            f"{kind} type in annotation and field must match: {where.child('type')} is "
            f"{quote(str(wanted))}",
        )
    ]


def _named_container(replica: ReplicaFacts, name: str) -> ContainerFacts | None:
    """The container or init container called ``name`` (``podSpecHasContainer``)."""
    for container in (*replica.init_containers, *replica.containers):
        if container.fields.get("name") == name:
            return container
    return None


def _profile(security: object, field: str) -> Mapping[str, Any] | None:
    """``security[field]`` when both are objects (a profile set), else None."""
    if not isinstance(security, OBJECT):
        return None
    profile = security.get(field)
    return profile if isinstance(profile, OBJECT) else None


def profile_fields(job: JobFacts, security: object, path: FieldPath) -> Findings:
    """The profiles of a ``securityContext`` (a pod's or a container's, at ``path``) are valid.

    Refused under every policy, as the apiserver refuses every pod with them
    (``pkg/apis/core/validation/validation.go`` v1.37.2, v1.36.3 in brackets, called for the
    pod's at ``:5720`` [``:5569``] and each container's at ``:8824``, ``:8840`` [``:8501``,
    ``:8517``]): a ``seccompProfile`` (``validateSeccompProfileField``, ``:5404`` [``:5249``])
    without a ``type`` (Required) or with another than ``PROFILE_TYPES`` (NotSupported), of type
    ``Localhost`` without ``localhostProfile`` (Required) or with an absolute one or one with a
    ``..`` (Invalid, ``validateLocalDescendingPath``, ``:1421`` [``:1398``]), of another type
    with one (Invalid); an ``appArmorProfile`` (``ValidateAppArmorProfileField``, ``:5468``
    [``:5313``]) alike, except that its ``localhostProfile`` may be neither empty (Required),
    padded with whitespace (Invalid) nor longer than 4095 bytes (TooLong), may be absolute, and
    that a type it does not know is the only error. Then, unless the policy allows privilege,
    no ``Unconfined`` profile (Forbidden). A profile whose ``type`` or ``localhostProfile`` is
    not a string would not decode: the controller's create reports it.
    """
    if not isinstance(security, OBJECT):
        return NONE
    found: list[Finding] = []
    for field in CONFINEMENT_PROFILES:
        profile = security.get(field)
        if not isinstance(profile, OBJECT):
            continue
        kind, local = profile.get("type"), profile.get("localhostProfile")
        if not isinstance(kind, _OPTIONAL_TEXT) or not isinstance(local, _OPTIONAL_TEXT):
            continue
        where = at(path, "securityContext", field)
        if local is not None or kind not in _BARE_TYPES:  # the usual profile: a bare type
            check = _seccomp_field if field == "seccompProfile" else _apparmor_field
            found.extend(check(kind, local, where))
        if kind == UNCONFINED and not job.policy.allow_privileged:
            found.append(forbidden(at(where, "type"), _unconfined_refusal(job)))
    return found


def _seccomp_field(kind: str | None, local: str | None, where: FieldPath) -> Findings:
    """What ``validateSeccompProfileField`` refuses of a ``seccompProfile`` at ``where``."""
    found: list[Finding] = []
    if not kind:
        found.append(required(at(where, "type"), "type is required when seccompProfile is set"))
    elif kind not in PROFILE_TYPES:
        found.append(not_supported(at(where, "type"), kind, PROFILE_TYPES))
    path = at(where, "localhostProfile")
    if kind == LOCALHOST:
        if local is None:
            found.append(required(path, "must be set when seccomp type is Localhost"))
        else:
            found.extend(_local_descending_path(local, path))
    elif local is not None:
        profile = {"type": kind, "localhostProfile": local}
        found.append(invalid(path, profile, "can only be set when seccomp type is Localhost"))
    return found


def _apparmor_field(kind: str | None, local: str | None, where: FieldPath) -> Findings:
    """What ``ValidateAppArmorProfileField`` refuses of an ``appArmorProfile`` at ``where``."""
    path = at(where, "localhostProfile")
    if kind == LOCALHOST:
        if local is None:
            return [required(path, "must be set when AppArmor type is Localhost")]
        found: list[Finding] = []
        if local.strip(_GO_SPACE) != local:
            found.append(invalid(path, local, "must not be padded with whitespace"))
        elif local == "":
            found.append(required(path, "must be set when AppArmor type is Localhost"))
        if len(local.encode()) > _LOCALHOST_PROFILE_MAX:
            detail = f"must have at most {_LOCALHOST_PROFILE_MAX} bytes"
            found.append(FieldError(ErrorType.TOO_LONG, path, detail, ""))
        return found
    if kind in PROFILE_TYPES:
        if local is None:
            return NONE
        return [invalid(path, local, "can only be set when AppArmor type is Localhost")]
    if not kind:
        return [required(at(where, "type"), "type is required when appArmorProfile is set")]
    return [not_supported(at(where, "type"), kind, PROFILE_TYPES)]


def _local_descending_path(location: str, path: FieldPath) -> Findings:
    """``validateLocalDescendingPath``: relative, without a ``..`` element."""
    found: list[Finding] = []
    if location.startswith("/"):
        found.append(invalid(path, location, "must be a relative path"))
    if ".." in location.split("/"):
        found.append(invalid(path, location, "must not contain '..'"))
    return found


_OPTIONAL_TEXT: Final = (str, type(None))
_BARE_TYPES: Final = frozenset({RUNTIME_DEFAULT, UNCONFINED})  # types needing nothing else
_NOWHERE: Final = FieldPath()


def _unconfined_refusal(job: JobFacts) -> str:
    return (
        f"{UNCONFINED} is not allowed by {job.policy_label} (allowPrivileged: false): the "
        "container would run without the kernel's confinement; use RuntimeDefault, or a "
        "Localhost profile the admin installed"
    )


def _host_path(job: JobFacts, pod_path: FieldPath, index: int, host_path: object) -> Findings:
    location = host_path.get("path") if isinstance(host_path, OBJECT) else None
    if not isinstance(location, str) or not location:
        return [
            required(
                at(pod_path, "volumes", index, "hostPath", "path"),
                "must be an absolute path on the node",
            )
        ]
    if job.policy.allows_host_path(location):
        return NONE
    refusal = _host_path_refusal(job.policy, job.policy_label, location)
    return [forbidden(at(pod_path, "volumes", index, "hostPath"), refusal)]


def _host_path_refusal(policy: PlacementPolicy, label: str, location: str) -> str:
    """Why the policy refuses a hostPath volume at ``location``."""
    allowed = ", ".join(policy.allowed_host_paths) or "none"
    if location.rstrip("/") == "/dev/shm":
        instead = "use an emptyDir with medium: Memory for /dev/shm"
    else:
        instead = "use a persistentVolumeClaim, or ask the cluster admin to allow the path"
    return (
        f"hostPath {quote(location)} is not allowed by {label} "
        f"(allowedHostPaths: {allowed}); {instead}"
    )


def init_containers_list(job: JobFacts, replica: ReplicaFacts) -> Findings:
    """``initContainers``, when present, is a list."""
    entries = replica.pod_spec.get("initContainers")
    if entries is not None and not isinstance(entries, list):
        return [
            invalid(at(replica.pod_path, "initContainers"), entries, "must be a list of containers")
        ]
    return NONE


def unknown_replica_types(job: JobFacts) -> Findings:
    """Replica types other than Master and Worker (reported after every known replica)."""
    found: list[Finding] = []
    for replica in job.replicas:
        if replica.key in names.REPLICA_TYPES:
            continue
        detail = 'supported values: "Master", "Worker"'
        canonical = canonical_replica_type(replica.key)
        if canonical is not None:
            detail += (
                f" (the mutating webhook renames {quote(replica.key)} to {quote(canonical)}; "
                "seeing it here means that webhook did not run)"
            )
        found.append(FieldError(ErrorType.NOT_SUPPORTED, replica.path, detail, replica.key))
    return found
