"""Defaulting for PyTorchJobs: what the mutating webhook persists, and the JSON Patch that does it.

Why persist defaults in a webhook: the training-operator applies its defaults in memory inside the
controller, so users never see them and the validating webhook sees un-defaulted objects. Here the
stored object *is* what runs: ``kubectl get -o yaml`` shows the ``/dev/shm`` volume, the cleanup
policy and the placement, and every change is announced as a ``torchgate:`` warning.

Why build the patch while defaulting instead of diffing a defaulted deep copy: the webhook's budget
is a couple of milliseconds for a 16-replica job, and deep-copy + ``jsonpatch.make_patch`` costs
most of it. Defaulting only records one RFC 6902 operation per write (``_Patch``) and reads the
input, which is never mutated; the defaulted ``object`` is built from the input and the patch only
when asked for (the mutating route sends the patch and never asks). Building it copies only the
containers along the paths the patch writes; the rest shares the input's objects. So applying
``patch`` to the input gives exactly ``object``, by construction.

Invariant that makes reading the input enough: no default reads a field an earlier default of the
same job wrote, except through what the defaulter keeps itself (the replica specs after renaming,
a pod's node selector after placement). A field created with several defaults is written as one
operation (a missing ``runPolicy`` is added whole).

Rules: operate on the raw object and never drop fields we do not model; never silently override a
value the user set (a conflict with the admin's placement policy is returned as an error instead).
A ``/dev/shm`` volume of ours the template already declares (same name, same ``emptyDir``) is
mounted again, not declared twice (``_default_shared_memory``).

On UPDATE (``_JobDefaulter.run_update``), three rules, none of which changes pods already running
(the controller builds pods from the template only when it creates a gang):

1. Run-policy fields the old object had and the new one lost (``kubectl replace`` with the
   original manifest) are restored (``_restore_run_policy``).
2. A replica's pod template the update left equal to the stored one is untouched; one it changed
   is defaulted as on CREATE, by the same defaulter under the same policy
   (``_default_changed_replicas``). ``kubectl apply`` sends a JSON merge patch, which replaces a
   list whole (``pytorchjob.applying``): applying the same manifest again replaces ``containers``
   with the manifest's, without the port, the ``/dev/shm`` mount and ``IPC_LOCK`` the webhook
   added. Defaulted again they are the stored template exactly, so the job does not change; a
   template the user edited gets the defaults it needs now; what the user removed stays removed
   unless it is a default (then it comes back, as on CREATE). So with a replica spec the update
   changed or added: a ``replicas`` or ``restartPolicy`` it lacks is defaulted as on CREATE
   (``_default_changed_replicas``; the controller reads a missing one the same way, so nothing
   running changes, and the stored job says what it runs by, as a created one does).
3. A ``minAvailable`` the update left at the stored job's default gang size follows the new job's
   default gang size (``_follow_gang_size``): that value means "the whole gang", and the merge
   patch keeps it when the manifest changes the replica counts. Left behind, a larger gang would
   be admitted with only the old number of pods placed together (the rest as extras, where they
   fit), and a smaller one refused for a ``minAvailable`` above its replicas. Any other value is
   the user's and stays.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from torchgate.pytorchjob import gang, names
from torchgate.pytorchjob.affinity import (
    MATCH_EXPRESSIONS,
    REQUIRED_AFFINITY,
    require,
    required_terms,
)
from torchgate.pytorchjob.devices import NO_CLAIMS, ClaimLookup, pod_gpus
from torchgate.pytorchjob.fieldpath import FieldError, FieldPath, FieldWarning, duplicate, invalid
from torchgate.pytorchjob.policy import PlacementPolicy
from torchgate.pytorchjob.spec import (
    as_int,
    canonical_replica_type,
    pinned_hosts,
    pytorch_container_index,
)

SHM_PATH = "/dev/shm"
SHM_VOLUME = "torchgate-dshm"
IPC_LOCK = "IPC_LOCK"
_RESTART_POLICY_DEFAULTED: Final = f"defaulted to {names.DEFAULT_RESTART_POLICY}"
_PORT_ADDED: Final = f"added {names.PORT_NAME} {names.DEFAULT_PORT}"
_RESTORED_ON_UPDATE = ("cleanPodPolicy", "backoffLimit", "ttlSecondsAfterFinished", "managedBy")

Token = str | int
# isinstance() tries the exact JSON type first; the ABC check alone is several times slower.
_OBJECT: Final = (dict, Mapping)


_UNBUILT: Final = object()


@dataclass(slots=True)
class Defaulted:
    """The result of defaulting: the patch from the input to the defaulted object, and why.

    ``object`` (the input with ``patch`` applied) is built on first access.
    """

    source: Any
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[FieldWarning] = field(default_factory=list)
    errors: list[FieldError] = field(default_factory=list)
    _object: Any = field(default=_UNBUILT, init=False, repr=False, compare=False)

    @property
    def object(self) -> Any:
        """The defaulted object: a copy of the input with ``patch`` applied.

        The input itself when it is not a job to default (not an object, or no ``spec``).
        """
        if self._object is _UNBUILT:
            self._object = _apply(self.source, self.patch)
        return self._object


class _Patch:
    """The JSON Patch of a job's defaults, one RFC 6902 operation per write.

    A value handed to ``set``/``append`` belongs to the operation from then on: it is never
    changed afterwards (a later default writing below it is a mistake; build the value whole).
    """

    def __init__(self) -> None:
        self.ops: list[dict[str, Any]] = []

    def set(self, parent: tuple[Token, ...], key: str, value: Any) -> None:
        """Add or replace member ``key`` of the object at ``parent``."""
        self.ops.append({"op": "add", "path": _pointer((*parent, key)), "value": value})

    def append(self, parent: tuple[Token, ...], value: Any) -> None:
        """Append ``value`` to the list at ``parent``."""
        self.ops.append({"op": "add", "path": _pointer((*parent, "-")), "value": value})

    def move(self, parent: tuple[Token, ...], source: str, target: str) -> None:
        """Rename member ``source`` of the object at ``parent`` to ``target``."""
        self.ops.append(
            {"op": "move", "from": _pointer((*parent, source)), "path": _pointer((*parent, target))}
        )


def _apply(source: Any, ops: list[dict[str, Any]]) -> Any:
    """``source`` with ``ops`` (``_Patch``'s) applied, copying only the containers they write.

    A value an operation adds is shared by the result and the operation (a value two operations
    add is copied for the second, so the result has no shared parts); a later write below it
    copies it first, so recorded values never change.
    """
    if not ops:
        return dict(source) if isinstance(source, _OBJECT) else source
    root = dict(source)
    # The containers made here, by path: only these are written in place. A path keeps naming
    # the same container because containers are only replaced by a first write, by an ``add``
    # over an existing member or by ``move``, and the last two forget every path.
    copies: dict[tuple[str, ...], Any] = {(): root}
    added: set[int] = set()

    def writable(tokens: tuple[str, ...]) -> Any:
        node = copies.get(tokens)
        if node is None:
            parent = writable(tokens[:-1])
            key: str | int = int(tokens[-1]) if type(parent) is list else tokens[-1]
            node = parent[key]
            node = list(node) if isinstance(node, list) else dict(node)
            parent[key] = node
            copies[tokens] = node
        return node

    for op in ops:
        *parent, key = _tokens(op["path"])
        node = writable(tuple(parent))
        if op["op"] == "move":
            *_, source_key = _tokens(op["from"])
            node[key] = node.pop(source_key)
            copies = {(): root}
            continue
        value = op["value"]
        if id(value) in added:
            value = copy.deepcopy(value)
        added.add(id(value))
        if type(node) is list:
            node.append(value)  # the patch appends to lists only ("-")
        else:
            if key in node:
                copies = {(): root}
            node[key] = value
    return root


def _tokens(pointer: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


# The same few paths recur in every job of a shape (Master/Worker, container 0, ...): rendering
# JSON pointers and field paths once per path instead of once per write halves defaulting's cost.
@functools.lru_cache(maxsize=4096)
def _pointer(tokens: tuple[Token, ...]) -> str:
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


@functools.lru_cache(maxsize=4096)
def _path(tokens: Sequence[Token]) -> FieldPath:
    """The Kubernetes field path of a token path (map keys under replica specs print as [key])."""
    path = FieldPath()
    previous: Token | None = None
    for token in tokens:
        if isinstance(token, int):
            path = path.index(token)
        elif previous in ("pytorchReplicaSpecs", "nodeSelector", "annotations", "labels"):
            path = path.key(token)
        else:
            path = path.child(token)
        previous = token
    return path


_RUN_POLICY_AT: Final = ("spec", "runPolicy")
_SCHEDULING_AT: Final = (*_RUN_POLICY_AT, "schedulingPolicy")
_RUN_POLICY_REASONS: Final = {
    "cleanPodPolicy": "pods still running when the job ends are deleted",
    "managedBy": "the Kubeflow training-operator leaves this job alone",
}


@dataclass(frozen=True, slots=True)
class _PolicyView:
    """What defaulting derives from a policy alone, built once per policy, not per review."""

    source: str  # how warnings and errors name the policy
    node_selector: tuple[tuple[str, str], ...]  # sorted, the order the patch adds them in
    node_selector_added: str  # the warning when every one of them is added
    tolerations_added: str  # the warning when every toleration is added
    rdma: frozenset[str]
    ipc_lock_added: dict[str, str]  # the warning, by the RDMA resource that asks for IPC_LOCK
    shared_memory: str  # the warning for a /dev/shm volume
    # (field, value, warning) of each run-policy default, in the order they are added; the
    # warnings are built here, once per policy, as their paths and texts never change.
    run_policy: tuple[tuple[str, Any, FieldWarning], ...]
    # The same for a job without ``runPolicy`` (added whole): its fields, then their warnings.
    run_policy_fields: Mapping[str, Any]
    run_policy_warnings: tuple[FieldWarning, ...]
    schedule_timeout: tuple[str, Any, FieldWarning] | None  # the same for scheduleTimeoutSeconds

    @classmethod
    def of(cls, policy: PlacementPolicy) -> _PolicyView:
        """The view of ``policy``."""
        defaults = policy.job_defaults
        wanted: dict[str, Any] = {"cleanPodPolicy": defaults.clean_pod_policy}
        if defaults.backoff_limit is not None:
            wanted["backoffLimit"] = defaults.backoff_limit
        if defaults.ttl_seconds_after_finished is not None:
            wanted["ttlSecondsAfterFinished"] = defaults.ttl_seconds_after_finished
        if defaults.managed_by is not None:
            wanted["managedBy"] = defaults.managed_by
        run_policy = []
        for key, value in wanted.items():
            reason = f" ({_RUN_POLICY_REASONS[key]})" if key in _RUN_POLICY_REASONS else ""
            text = f"defaulted to {value}{reason}"
            run_policy.append((key, value, _warning((*_RUN_POLICY_AT, key), text)))
        source = f"PlacementPolicy {policy.name}"
        node_selector = tuple(sorted(policy.node_selector.items()))
        size = policy.shared_memory_size_limit or "no size limit"
        return cls(
            source=source,
            node_selector=node_selector,
            node_selector_added=_added(", ".join(f"{k}={v}" for k, v in node_selector), source),
            tolerations_added=_added(str(len(policy.tolerations)), source),
            rdma=frozenset(policy.rdma_resources),
            ipc_lock_added={name: _ipc_lock_added(name) for name in policy.rdma_resources},
            shared_memory=f"mounted a memory-backed emptyDir at {SHM_PATH} ({size})",
            run_policy=tuple(run_policy),
            run_policy_fields=wanted,
            run_policy_warnings=tuple(warning for _, _, warning in run_policy),
            schedule_timeout=None
            if defaults.schedule_timeout_seconds is None
            else (
                "scheduleTimeoutSeconds",
                defaults.schedule_timeout_seconds,
                _warning(
                    (*_SCHEDULING_AT, "scheduleTimeoutSeconds"),
                    f"defaulted to {defaults.schedule_timeout_seconds}",
                ),
            ),
        )


def _added(what: str, source: str) -> str:
    return f"added {what} from {source}"


def _ipc_lock_added(resource: str) -> str:
    return f"added {IPC_LOCK} for {resource} (RDMA needs locked memory)"


# Views by policy identity (a policy holds dicts, so it has no hash): the webhook serves a few
# policies for a long time, each replaced as a whole when its object changes.
_VIEWS: dict[int, tuple[PlacementPolicy, _PolicyView]] = {}
_VIEWS_KEPT: Final = 64


def _view_of(policy: PlacementPolicy) -> _PolicyView:
    entry = _VIEWS.get(id(policy))
    if entry is None or entry[0] is not policy:  # holding the policy keeps its id unique
        if len(_VIEWS) >= _VIEWS_KEPT:
            _VIEWS.clear()
        entry = (policy, _PolicyView.of(policy))
        _VIEWS[id(policy)] = entry
    return entry[1]


@functools.lru_cache(maxsize=4096)
def _warning(tokens: tuple[Token, ...], text: str) -> FieldWarning:
    """The warning about the field at ``tokens`` (immutable, so one object serves every job)."""
    return FieldWarning(_path(tokens), text)


@functools.lru_cache(maxsize=4096)
def _moved_warning(
    segments: tuple[Token, ...], depth: int, pod_at: tuple[Token, ...], text: str
) -> FieldWarning:
    """``_warning`` about ``segments`` with its first ``depth`` tokens replaced by ``pod_at``.

    What ``_replay`` gives a later replica: memoised apart from ``_warning`` because building
    the moved tokens costs more than looking the result up.
    """
    return _warning((*pod_at, *segments[depth:]), text)


def default_job(
    job: Any,
    policy: PlacementPolicy,
    *,
    old: Mapping[str, Any] | None = None,
    claims: ClaimLookup = NO_CLAIMS,
) -> Defaulted:
    """Default a PyTorchJob for CREATE (``old`` is None) or UPDATE; never mutates ``job``.

    ``claims``: what the webhook sees of DRA in the namespace (claimed GPUs get ``/dev/shm``).
    """
    if not isinstance(job, _OBJECT) or not isinstance(job.get("spec"), _OBJECT):
        result = Defaulted(job)  # nothing to default; validation reports the shape
        result._object = job
        return result
    patch = _Patch()
    result = Defaulted(job, patch.ops)
    defaulter = _JobDefaulter(job, patch, policy, result, claims)
    if old is None:
        defaulter.run()
    else:
        _restore_run_policy(job, patch, old, result)
        defaulter.run_update(old)
    return result


def _restore_run_policy(
    job: Mapping[str, Any], patch: _Patch, old: Mapping[str, Any], result: Defaulted
) -> None:
    old_spec = old.get("spec")
    old_policy = old_spec.get("runPolicy") if isinstance(old_spec, _OBJECT) else None
    if not isinstance(old_policy, _OBJECT):
        return
    spec = job["spec"]
    run_policy = spec.get("runPolicy")
    if run_policy is None:
        restored = {k: old_policy[k] for k in _RESTORED_ON_UPDATE if k in old_policy}
        if restored:
            patch.set(("spec",), "runPolicy", restored)
            result.warnings.extend(_restored_warning(k, v) for k, v in restored.items())
        return
    if not isinstance(run_policy, _OBJECT):
        return
    for key in _RESTORED_ON_UPDATE:
        if key in old_policy and key not in run_policy:
            patch.set(("spec", "runPolicy"), key, old_policy[key])
            result.warnings.append(_restored_warning(key, old_policy[key]))


def _positive(value: object) -> int | None:
    number = as_int(value)
    return number if number is not None and number > 0 else None


def _restored_warning(key: str, value: Any) -> FieldWarning:
    return FieldWarning(
        FieldPath.root("spec", "runPolicy", key), f"kept at {value!r} from the stored job"
    )


class _PodDefaults(NamedTuple):
    """What defaulting a pod spec wrote and warned (with no error), to replay on an equal one.

    Master and Worker usually share one pod template: the second is given the first one's
    operations and warnings at its own paths instead of being defaulted again. A NamedTuple:
    immutable like a frozen dataclass, without its ``object.__setattr__`` per field (about
    1,400 instructions each).
    """

    pod_spec: Mapping[str, Any]
    pod_at: tuple[Token, ...]
    ops: list[dict[str, Any]]
    warnings: list[FieldWarning]


class _JobDefaulter:
    """The CREATE defaults, in a fixed order (replica specs, templates, run policy)."""

    def __init__(
        self,
        job: Mapping[str, Any],
        patch: _Patch,
        policy: PlacementPolicy,
        result: Defaulted,
        claims: ClaimLookup,
    ) -> None:
        self.patch = patch
        self.policy = policy
        self.claims = claims
        self.gpus = policy.gpus(claims)
        self.view = _view_of(policy)
        self.result = result
        self.warnings = result.warnings
        self.job = job
        # The replica specs as the patch leaves their keys (``_normalise_keys`` renames some).
        self.specs: Mapping[str, Any] | None = None
        self.pod_defaults: list[_PodDefaults] = []
        metadata = self.job.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, _OBJECT) else None
        self.hosts = pinned_hosts(annotations)

    def run(self) -> None:
        specs = self.job["spec"].get("pytorchReplicaSpecs")
        if isinstance(specs, _OBJECT):
            self.specs = specs = self._normalise_keys(specs)
            for replica_type in names.REPLICA_TYPES:
                replica = specs.get(replica_type)
                if isinstance(replica, _OBJECT):
                    self._default_replica(("spec", "pytorchReplicaSpecs", replica_type), replica)
        self._default_run_policy()

    def run_update(self, old: Mapping[str, Any]) -> None:
        """The UPDATE defaults after ``_restore_run_policy`` (module rules 2 and 3)."""
        specs = self.job["spec"].get("pytorchReplicaSpecs")
        if not isinstance(specs, _OBJECT):
            return
        self.specs = specs  # an update's keys are not renamed: validation reports strays
        old_spec = old.get("spec")
        old_spec = old_spec if isinstance(old_spec, _OBJECT) else {}
        self._default_changed_replicas(specs, old_spec)
        self._follow_gang_size(old_spec)

    def _default_changed_replicas(
        self, specs: Mapping[str, Any], old_spec: Mapping[str, Any]
    ) -> None:
        """Default as on CREATE each replica spec, and template, that differs from the stored."""
        old_specs = old_spec.get("pytorchReplicaSpecs")
        old_specs = old_specs if isinstance(old_specs, _OBJECT) else {}
        for replica_type in names.REPLICA_TYPES:
            replica = specs.get(replica_type)
            old_replica = old_specs.get(replica_type)
            if not isinstance(replica, _OBJECT) or replica == old_replica:
                continue
            at = ("spec", "pytorchReplicaSpecs", replica_type)
            self._default_replica_fields(at, replica)
            old_template = old_replica.get("template") if isinstance(old_replica, _OBJECT) else None
            if replica.get("template") != old_template:
                self._default_template(at, replica)

    def _follow_gang_size(self, old_spec: Mapping[str, Any]) -> None:
        """A ``minAvailable`` left at the stored default gang size follows the new one."""
        at = ("spec", "runPolicy", "schedulingPolicy")
        kept = _member(self.job["spec"], *at[1:], "minAvailable")
        if kept is None or kept != _member(old_spec, *at[1:], "minAvailable"):
            return  # none, or the update set it: the user's
        stored = as_int(kept)
        if stored is None or stored != _default_gang_size(old_spec):
            return
        size = self._gang_size()
        if size is None or size == stored:
            return
        self.patch.set(at, "minAvailable", size)
        self.warnings.append(
            _warning((*at, "minAvailable"), f"followed the gang size: {size} (was {stored})")
        )

    # ------------------------------------------------------------------ replica specs

    def _normalise_keys(self, specs: Mapping[str, Any]) -> Mapping[str, Any]:
        """Rename replica types to their canonical spelling; return the specs as renamed."""
        parent = ("spec", "pytorchReplicaSpecs")
        renamed = specs
        for key in list(specs):
            if key in names.REPLICA_TYPES:  # already canonical: the usual case
                continue
            canonical = canonical_replica_type(key)
            if canonical is None or canonical == key:
                continue
            if canonical in renamed:
                self.result.errors.append(
                    duplicate(
                        _path((*parent, key)),
                        key,
                        f"the same replica type as {canonical}; keep one of them",
                    )
                )
                continue
            self.patch.move(parent, key, canonical)
            renamed = dict(renamed)
            renamed[canonical] = renamed.pop(key)
            self.warnings.append(_warning((*parent, canonical), f"renamed from {key!r}"))
        return renamed

    # A replica's defaults read the input's nodes: each default reads only fields no earlier
    # default of the replica writes (``_pin_hosts`` is given the node selector as
    # ``_default_placement`` leaves it).
    def _default_replica(self, at: tuple[Token, ...], replica: Mapping[str, Any]) -> None:
        self._default_replica_fields(at, replica)
        self._default_template(at, replica)

    def _default_replica_fields(self, at: tuple[Token, ...], replica: Mapping[str, Any]) -> None:
        """The replica spec's own defaults at ``at``: ``replicas`` and ``restartPolicy``."""
        if "replicas" not in replica:
            self.patch.set(at, "replicas", 1)
            self.warnings.append(_warning((*at, "replicas"), "defaulted to 1"))
        if "restartPolicy" not in replica:
            self.patch.set(at, "restartPolicy", names.DEFAULT_RESTART_POLICY)
            self.warnings.append(_warning((*at, "restartPolicy"), _RESTART_POLICY_DEFAULTED))

    def _default_template(self, at: tuple[Token, ...], replica: Mapping[str, Any]) -> None:
        """The defaults of the pod template of the replica spec at ``at``."""
        template = replica.get("template")
        if not isinstance(template, _OBJECT) or not isinstance(template.get("spec"), _OBJECT):
            return
        pod_at = (*at, "template", "spec")
        pod_spec = template["spec"]
        containers = pod_spec.get("containers")
        if not isinstance(containers, list):
            return
        for earlier in self.pod_defaults:
            if earlier.pod_spec == pod_spec:  # identity, then ``==`` (C-level, cheap)
                self._replay(earlier, pod_at)
                return
        ops, warnings, errors = len(self.patch.ops), len(self.warnings), len(self.result.errors)
        self._default_pod(pod_at, pod_spec, containers)
        if len(self.result.errors) == errors:
            recorded = _PodDefaults(
                pod_spec, pod_at, self.patch.ops[ops:], self.warnings[warnings:]
            )
            self.pod_defaults.append(recorded)

    def _replay(self, earlier: _PodDefaults, pod_at: tuple[Token, ...]) -> None:
        """Give the pod spec at ``pod_at`` the defaults ``earlier`` (an equal one) received."""
        old_prefix = _pointer(earlier.pod_at)
        new_prefix = _pointer(pod_at)
        cut = len(old_prefix)
        # An operation's value is never changed, so both operations may hold the same value.
        ops = self.patch.ops
        for op in earlier.ops:
            moved = op.copy()  # a dict's copy is cheaper than a literal merging it
            moved["path"] = new_prefix + op["path"][cut:]
            ops.append(moved)
        depth = len(earlier.pod_at)
        self.warnings.extend(
            [_moved_warning(w.path.segments, depth, pod_at, w.text) for w in earlier.warnings]
        )

    def _default_pod(
        self, pod_at: tuple[Token, ...], pod_spec: Mapping[str, Any], containers: list[Any]
    ) -> None:
        """The defaults of a pod spec.

        What they write and warn is a function of the pod spec and of the job's policy, claims
        and pinned hosts, never of the replica: ``_replay`` relies on it.
        """
        pytorch = pytorch_container_index(pod_spec)
        if pytorch is not None:
            self._default_port((*pod_at, "containers", pytorch), containers[pytorch])
            if pod_gpus(pod_spec, self.gpus, self.claims) != 0:
                self._default_shared_memory(pod_at, pod_spec, pytorch, containers[pytorch])
        for index, container in enumerate(containers):
            if isinstance(container, _OBJECT):
                self._default_ipc_lock((*pod_at, "containers", index), container)
        self._default_placement(pod_at, pod_spec)

    def _default_port(self, at: tuple[Token, ...], container: Mapping[str, Any]) -> None:
        ports = container.get("ports")
        port = {"name": names.PORT_NAME, "containerPort": names.DEFAULT_PORT}
        if ports is None:
            self.patch.set(at, "ports", [port])
        elif isinstance(ports, list):
            for existing in ports:
                if isinstance(existing, _OBJECT) and existing.get("name") == names.PORT_NAME:
                    return
            self.patch.append((*at, "ports"), port)
        else:
            return
        self.warnings.append(_warning((*at, "ports"), _PORT_ADDED))

    def _default_shared_memory(
        self,
        pod_at: tuple[Token, ...],
        pod_spec: Mapping[str, Any],
        pytorch: int,
        container: Mapping[str, Any],
    ) -> None:
        container_at = (*pod_at, "containers", pytorch)
        mounts = container.get("volumeMounts")
        if mounts is not None and not isinstance(mounts, list):
            return
        for mount in mounts or ():
            if isinstance(mount, _OBJECT) and mount.get("mountPath") == SHM_PATH:
                return
        volumes = pod_spec.get("volumes")
        if volumes is not None and not isinstance(volumes, list):
            return
        taken: dict[str, Any] = {}
        for volume in volumes or ():  # a name that is not a string is validation's to report
            if isinstance(volume, _OBJECT) and isinstance(volume.get("name"), str):
                taken.setdefault(volume["name"], volume)
        empty_dir: dict[str, Any] = {"medium": "Memory"}
        if self.policy.shared_memory_size_limit:
            empty_dir["sizeLimit"] = self.policy.shared_memory_size_limit
        name = SHM_VOLUME
        suffix = 1
        while name in taken and taken[name] != {"name": name, "emptyDir": empty_dir}:
            suffix += 1
            name = f"{SHM_VOLUME}-{suffix}"
        volume = {"name": name, "emptyDir": empty_dir}
        if volumes is None:
            self.patch.set(pod_at, "volumes", [volume])
        elif name not in taken:  # else ours, declared already (module rules): mounted again
            self.patch.append((*pod_at, "volumes"), volume)
        mount = {"name": name, "mountPath": SHM_PATH}
        if mounts is None:
            self.patch.set(container_at, "volumeMounts", [mount])
        else:
            self.patch.append((*container_at, "volumeMounts"), mount)
        self.warnings.append(_warning(container_at, self.view.shared_memory))

    def _default_ipc_lock(self, at: tuple[Token, ...], container: Mapping[str, Any]) -> None:
        resources = container.get("resources")
        if not isinstance(resources, _OBJECT):
            return
        rdma = self.view.rdma
        wanted = None  # the first RDMA resource asked for, limits before requests
        for section in ("limits", "requests"):
            values = resources.get(section)
            if isinstance(values, _OBJECT) and not rdma.isdisjoint(values):
                for name in values:
                    if name in rdma:
                        wanted = name
                        break
                break
        if wanted is None:
            return
        context = container.get("securityContext")
        if context is None:
            self.patch.set(at, "securityContext", {"capabilities": {"add": [IPC_LOCK]}})
        elif not isinstance(context, _OBJECT):
            return
        elif context.get("capabilities") is None:
            self.patch.set((*at, "securityContext"), "capabilities", {"add": [IPC_LOCK]})
        elif not isinstance(context["capabilities"], _OBJECT):
            return
        elif context["capabilities"].get("add") is None:
            self.patch.set((*at, "securityContext", "capabilities"), "add", [IPC_LOCK])
        elif isinstance(context["capabilities"]["add"], list):
            if IPC_LOCK in context["capabilities"]["add"]:
                return
            self.patch.append((*at, "securityContext", "capabilities", "add"), IPC_LOCK)
        else:
            return
        self.warnings.append(
            _warning(
                (*at, "securityContext", "capabilities", "add"), self.view.ipc_lock_added[wanted]
            )
        )

    # ------------------------------------------------------------------ placement

    def _default_placement(self, pod_at: tuple[Token, ...], pod_spec: Mapping[str, Any]) -> None:
        source = self.view.source
        selector = pod_spec.get("nodeSelector")
        wanted = self.view.node_selector
        if wanted and selector is None:
            selector = dict(wanted)  # the operation's value: never changed afterwards
            self.patch.set(pod_at, "nodeSelector", selector)
            self.warnings.append(_warning((*pod_at, "nodeSelector"), self.view.node_selector_added))
        elif wanted and isinstance(selector, _OBJECT):
            added = []
            for key, value in wanted:
                current = selector.get(key)
                if current is None:
                    self.patch.set((*pod_at, "nodeSelector"), key, value)
                    added.append((key, value))
                elif current != value:
                    self.result.errors.append(
                        invalid(
                            _path((*pod_at, "nodeSelector", key)),
                            current,
                            f"{source} places jobs of this namespace on {key}={value}",
                        )
                    )
            if added:
                text = (
                    self.view.node_selector_added
                    if len(added) == len(wanted)
                    else _added(", ".join(f"{k}={v}" for k, v in added), source)
                )
                self.warnings.append(_warning((*pod_at, "nodeSelector"), text))
                selector = {**selector, **dict(added)}
        self._default_tolerations(pod_at, pod_spec, source)
        if self.hosts:
            self._pin_hosts(pod_at, pod_spec, selector)

    def _default_tolerations(
        self, pod_at: tuple[Token, ...], pod_spec: Mapping[str, Any], source: str
    ) -> None:
        if not self.policy.tolerations:
            return
        current = pod_spec.get("tolerations")
        if current is not None and not isinstance(current, list):
            return
        missing = [dict(t) for t in self.policy.tolerations if t not in (current or [])]
        if not missing:
            return
        if current is None:
            self.patch.set(pod_at, "tolerations", missing)
        else:
            for toleration in missing:
                self.patch.append((*pod_at, "tolerations"), toleration)
        if len(missing) == len(self.policy.tolerations):
            self.warnings.append(_warning((*pod_at, "tolerations"), self.view.tolerations_added))
        else:
            self.warnings.append(
                _warning((*pod_at, "tolerations"), _added(str(len(missing)), source))
            )

    def _pin_hosts(
        self, pod_at: tuple[Token, ...], pod_spec: Mapping[str, Any], selector: object
    ) -> None:
        """Require the pinned hosts; ``selector`` is the node selector after placement."""
        expression = {"key": names.HOSTNAME_LABEL, "operator": "In", "values": list(self.hosts)}
        origin = f"annotation {names.ANNOTATION_HOSTS}"
        pinned_by_selector = (
            selector.get(names.HOSTNAME_LABEL) if isinstance(selector, _OBJECT) else None
        )
        if pinned_by_selector is not None and pinned_by_selector not in self.hosts:
            self.result.errors.append(
                invalid(
                    _path((*pod_at, "nodeSelector", names.HOSTNAME_LABEL)),
                    pinned_by_selector,
                    f"conflicts with the hosts pinned by {origin}",
                )
            )
            return
        affinity = pod_spec.get("affinity")
        node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, _OBJECT) else None
        required = (
            node_affinity.get(REQUIRED_AFFINITY) if isinstance(node_affinity, _OBJECT) else None
        )
        terms = required.get("nodeSelectorTerms") if isinstance(required, _OBJECT) else None
        if any(
            value is not None and not isinstance(value, _OBJECT)
            for value in (affinity, node_affinity, required)
        ) or (terms is not None and not isinstance(terms, list)):
            return  # not ours to rewrite; the API server refuses the malformed affinity
        for index, term in enumerate(terms or []):
            conflict = self._conflicting_host_requirement(term, expression)
            if conflict is not None:
                self.result.errors.append(
                    invalid(
                        _path(
                            (
                                *pod_at,
                                "affinity",
                                "nodeAffinity",
                                REQUIRED_AFFINITY,
                                "nodeSelectorTerms",
                                index,
                            )
                        ),
                        conflict,
                        f"already constrains {names.HOSTNAME_LABEL}, which conflicts with the "
                        f"hosts pinned by {origin}",
                    )
                )
        pinned = require(affinity, expression, MATCH_EXPRESSIONS)
        if required_terms(pinned) == terms:
            return
        self.patch.set(pod_at, "affinity", pinned)
        self.warnings.append(
            _warning((*pod_at, "affinity"), f"pinned to hosts {','.join(self.hosts)} ({origin})")
        )

    @staticmethod
    def _conflicting_host_requirement(term: object, expression: Mapping[str, Any]) -> object:
        """The values of a term's other requirement on the hostname label, if it has one."""
        if not isinstance(term, _OBJECT) or not isinstance(term.get("matchExpressions"), list):
            return None
        ours = [
            e
            for e in term["matchExpressions"]
            if isinstance(e, _OBJECT) and e.get("key") == names.HOSTNAME_LABEL
        ]
        if not ours or any(e == expression for e in ours):
            return None
        return ours[0].get("values")

    # ------------------------------------------------------------------ run policy

    def _default_run_policy(self) -> None:
        spec = self.job["spec"]
        run_policy = spec.get("runPolicy")
        if run_policy is not None and not isinstance(run_policy, _OBJECT):
            return
        at = _RUN_POLICY_AT
        if run_policy is None:  # added whole, as one operation
            created = dict(self.view.run_policy_fields)  # the operation's own value
            self.warnings.extend(self.view.run_policy_warnings)
            scheduling = self._missing_scheduling(None)
            if scheduling:
                created["schedulingPolicy"] = {key: value for key, value, _ in scheduling}
                self.warnings.extend([warning for _, _, warning in scheduling])
            self.patch.set(("spec",), "runPolicy", created)
            return
        for key, value, warning in self.view.run_policy:
            if key not in run_policy:
                self.patch.set(at, key, value)
                self.warnings.append(warning)
        self._default_scheduling(at, run_policy)

    def _default_scheduling(self, at: tuple[Token, ...], run_policy: Mapping[str, Any]) -> None:
        scheduling = run_policy.get("schedulingPolicy")
        if scheduling is not None and not isinstance(scheduling, _OBJECT):
            return
        missing = self._missing_scheduling(scheduling)
        if not missing:
            return
        if scheduling is None:
            self.patch.set(at, "schedulingPolicy", {key: value for key, value, _ in missing})
        else:
            for key, value, _ in missing:
                self.patch.set(_SCHEDULING_AT, key, value)
        self.warnings.extend([warning for _, _, warning in missing])

    def _missing_scheduling(
        self, scheduling: Mapping[str, Any] | None
    ) -> list[tuple[str, Any, FieldWarning]]:
        """(field, value, warning) of each scheduling-policy default ``scheduling`` lacks."""
        present = scheduling or {}
        missing: list[tuple[str, Any, FieldWarning]] = []
        if "minAvailable" not in present:
            minimum = self._gang_size()
            if minimum is not None:
                text = f"defaulted to {minimum} (all-or-nothing)"
                warning = _warning((*_SCHEDULING_AT, "minAvailable"), text)
                missing.append(("minAvailable", minimum, warning))
        timeout = self.view.schedule_timeout
        if timeout is not None and "scheduleTimeoutSeconds" not in present:
            missing.append(timeout)
        return missing

    def _gang_size(self) -> int | None:
        """``_default_gang_size`` of the job, with its replica specs as the patch leaves them."""
        if self.specs is None:
            return None
        return _default_gang_size(self.job["spec"], specs=self.specs)


def _default_gang_size(
    spec: Mapping[str, Any], *, specs: Mapping[str, Any] | None = None
) -> int | None:
    """``gang.default_gang_size`` of a job's ``spec``; None when it is not a count the API stores.

    ``specs``: the replica specs, when not the spec's own (renamed by the patch).
    """
    if specs is None:
        specs = spec.get("pytorchReplicaSpecs")
    if not isinstance(specs, _OBJECT):
        return None
    counts: dict[str, int] = {}
    for replica_type in names.REPLICA_TYPES:
        replica = specs.get(replica_type)
        if not isinstance(replica, _OBJECT):
            continue
        raw = replica.get("replicas", 1)
        count = raw if type(raw) is int else as_int(raw)  # the usual count, without the call
        if count is None or count < 0:
            return None
        counts[replica_type] = count
    elastic = spec.get("elasticPolicy")
    workers = counts.get(names.WORKER, 0)
    bounds = None
    if elastic is not None and isinstance(elastic, _OBJECT) and names.WORKER in counts:
        low, high = (_positive(elastic.get(key)) for key in ("minReplicas", "maxReplicas"))
        bounds = gang.elastic_bounds(low, high, workers=workers)
    size = gang.default_gang_size(
        masters=counts.get(names.MASTER, 0), workers=workers, elastic=bounds
    )
    return size if 0 < size <= gang.MAX_COUNT else None  # else not storable: no default


def _member(node: object, *keys: str) -> object:
    """The value at ``keys`` below ``node``; None where a step is missing or not an object."""
    for key in keys:
        if not isinstance(node, _OBJECT):
            return None
        node = node.get(key)
    return node
