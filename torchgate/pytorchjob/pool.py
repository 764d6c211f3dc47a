"""Pool sharing settings: team quotas, preemption protection and topology levels, parsed.

Why a module of its own, beside ``policy.py``: the webhook needs these facts (a job asking for more
GPUs than its team could ever get is refused; a topology annotation naming no level is refused)
and the controller needs the same facts to admit, borrow, reclaim, preempt and place, so they are
declared once in the shared pure package. The PlacementPolicy's pool-sharing sections
(``spec.preemption``, ``spec.topology``) are parsed here, from the raw object ``policy.py`` reads
the rest of, and quotas live in their own small cluster-scoped object, ``TeamQuota``, so that
``kubectl get teamquotas`` prints one row per team with its quota, usage and borrowing (see
docs/pool-sharing.md for why quotas are not a list inside the policy).

Rules (each one function):

1. ``parse_team_quota``: ``metadata.name`` is set; ``spec.namespaces`` is a non-empty list of
   strings; ``spec.cohort`` is a DNS label (default ``default``); ``spec.nominalGPUs`` is a
   non-negative integer (required); ``spec.borrowingLimitGPUs`` is a non-negative integer or
   absent (absent: the team may borrow all idle quota of its cohort; 0: it never borrows);
   ``spec.resources[i]`` has a unique ``name`` other than the GPU resource, a non-negative
   ``nominal`` quantity and an optional non-negative ``borrowingLimit``. A TeamQuota with a
   ``metadata.deletionTimestamp`` is *deleting*: it stays valid and keeps governing its admitted
   gangs (quota, reclaim, protection) while the controller's finalizer holds it, but its team
   admits no new gang (``quota`` rule 5, ``poolsource`` rule 3).
2. ``resolve_teams``: a namespace belongs to at most one team. Teams claim namespaces in name
   order; a team listing a namespace an earlier team claimed is invalid (the error is at its
   ``spec.namespaces[i]``) and left out with all its namespaces. The webhook (which team's quota
   a job is checked against) and the controller (which team a gang counts for, the ``Valid``
   condition) both ask this one function. ``claimed_elsewhere`` is the same rule when a
   TeamQuota is written: a namespace it lists that it did not list before and another valid team
   owns is refused, whichever team is earlier by name, so that one team's edit never leaves
   another team, untouched, without its quota (its running gangs unprotected, its waiting jobs
   unlimited); a namespace moves by removing it from its team first.
3. ``parse_pool_settings``: ``spec.preemption.minimumRunSeconds`` is a non-negative integer,
   ``spec.preemption.neverPreemptPriority`` an integer (gangs at or above it are never
   preempted); ``spec.topology.levels`` is a list of distinct label keys, coarsest first;
   ``spec.topology.defaultLevel`` is one of them; ``spec.topology.defaultMode`` is ``Required`` or
   ``Preferred`` (default ``Preferred``).
4. ``topology_request``: a job may carry ``torchgate.io/topology-required`` or
   ``torchgate.io/topology-preferred`` (not both) naming one of the levels; without either, the
   policy's default level and mode apply; without a default, the gang is only packed tightly.
5. ``quota_ceiling``: the most a team can ever hold of one resource: its nominal plus its
   borrowing limit, and never more than the sum of its cohort's nominal quotas
   (``quota_ceilings``: every resource of a team at once, to keep);
   ``never_admissible`` says why a job asking for more can never be admitted (the webhook
   refuses it).
6. ``quota_usage``: what pods count against their team: the sum of what each takes from its node
   (``units.pod_units``), whatever the policy counts as GPUs (``devices.GpuSources``: its GPU
   resource, extended resources its GPU DeviceClasses serve, claimed GPUs) under the quota key
   ``GPUS``. A job's gang
   counts its first ``minAvailable`` pods in rank order, Master replicas first (``gang_usage``):
   the webhook refuses a job whose gang exceeds what its team can ever hold, and the admitter
   counts the same gang against the team's quota.
7. ``admission_order``: waiting gangs are decided higher priority first, then older (RFC 3339
   ``creationTimestamp`` sorts by time), then by namespace and name; the admitter's queue and
   the cycle both sort by it, and a job's queue position is its place in this order.

Amounts are integers in milli-units (``units``: ``8`` GPUs are ``8000``), so the admission cycle
does integer arithmetic only.

Parsing never raises: a malformed object yields field errors and is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from torchgate.pytorchjob.devices import NO_CLAIMS, ClaimLookup, GpuSources
from torchgate.pytorchjob.fieldpath import (
    FieldError,
    FieldPath,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    object_header,
    required,
)
from torchgate.pytorchjob.names import JobKey, is_dns1123_label, label_key_errors
from torchgate.pytorchjob.quantity import QuantityError, parse_quantity
from torchgate.pytorchjob.spec import JobSpec, as_int, pod_spec_of
from torchgate.pytorchjob.units import MILLI, Units, format_milli, pod_units, request_units

QUOTA_KIND: Final = "TeamQuota"
QUOTA_PLURAL: Final = "teamquotas"
DEFAULT_COHORT: Final = "default"
# The controller's finalizer on a TeamQuota whose team has admitted gangs (``poolsource`` rule 3).
QUOTA_FINALIZER: Final = "torchgate.io/gangs-running"
GPUS: Final = "gpus"  # the quota key for "whatever the job's policy counts as GPUs"
ANNOTATION_TOPOLOGY_REQUIRED: Final = "torchgate.io/topology-required"
ANNOTATION_TOPOLOGY_PREFERRED: Final = "torchgate.io/topology-preferred"
TOPOLOGY_MODES: Final = ("Required", "Preferred")

_SPEC = FieldPath.root("spec")
_ANNOTATIONS = FieldPath.root("metadata", "annotations")

TopologyMode = Literal["Required", "Preferred"]


# ------------------------------------------------------------------ model


@dataclass(frozen=True, slots=True)
class Limit:
    """A team's quota of one resource, in milli-units; ``borrowing`` ``None`` means no limit."""

    nominal: int
    borrowing: int | None = None

    @property
    def ceiling(self) -> int | None:
        """The most the team may hold: nominal plus ``borrowing`` (``None``: no limit)."""
        return None if self.borrowing is None else self.nominal + self.borrowing


@dataclass(frozen=True, slots=True)
class TeamQuota:
    """One team: the namespaces it owns and its quota per resource (``GPUS`` for GPUs).

    ``deleting``: its TeamQuota has a ``deletionTimestamp`` (rule 1).
    """

    name: str
    namespaces: tuple[str, ...]
    limits: Mapping[str, Limit]
    cohort: str = DEFAULT_COHORT
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class PreemptionSettings:
    """What the admin protects from preemption."""

    minimum_run_seconds: int = 0
    never_preempt_priority: int | None = None

    def protects(self, *, priority: int, run_seconds: float) -> bool:
        """Whether a running gang with this priority and run time may not be preempted."""
        if self.never_preempt_priority is not None and priority >= self.never_preempt_priority:
            return True
        return run_seconds < self.minimum_run_seconds


@dataclass(frozen=True, slots=True)
class TopologySettings:
    """Topology levels (node label keys, coarsest first) and the default for jobs."""

    levels: tuple[str, ...] = ()
    default_level: str | None = None
    default_mode: TopologyMode = "Preferred"


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """The pool-sharing sections of one PlacementPolicy."""

    preemption: PreemptionSettings = field(default_factory=PreemptionSettings)
    topology: TopologySettings = field(default_factory=TopologySettings)


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """Where a gang must (``required``) or should go: index into the levels, coarsest first."""

    level: int | None = None
    required: bool = False


# ------------------------------------------------------------------ rule 1: TeamQuota


def _quantity(value: object, path: FieldPath, errors: list[FieldError]) -> int | None:
    try:
        amount = parse_quantity(value)
    except QuantityError:
        errors.append(invalid(path, value, "must be a non-negative quantity"))
        return None
    if amount < 0:
        errors.append(invalid(path, value, "must be a non-negative quantity"))
        return None
    return request_units(amount)


def non_negative_count(value: object, path: FieldPath, errors: list[FieldError]) -> int | None:
    """``value`` as a non-negative integer, else ``None`` with an ``Invalid`` error at ``path``."""
    number = as_int(value)
    if number is None or number < 0:
        errors.append(invalid(path, value, "must be a non-negative integer"))
        return None
    return number


def _namespaces(value: object, errors: list[FieldError]) -> tuple[str, ...]:
    path = _SPEC.child("namespaces")
    if value is None:
        errors.append(required(path, "a team owns at least one namespace"))
        return ()
    if isinstance(value, Sequence) and not isinstance(value, str) and value:
        good = [item for item in value if isinstance(item, str) and item]
        if len(good) == len(value):
            return tuple(good)
    errors.append(invalid(path, value, "must be a non-empty list of namespace names"))
    return ()


def _other_resources(value: object, errors: list[FieldError]) -> dict[str, Limit]:
    path = _SPEC.child("resources")
    if value is None:
        return {}
    if not isinstance(value, Sequence) or isinstance(value, str):
        errors.append(invalid(path, value, "must be a list of {name, nominal, borrowingLimit}"))
        return {}
    limits: dict[str, Limit] = {}
    for index, item in enumerate(value):
        item_path = path.index(index)
        if not isinstance(item, Mapping):
            errors.append(invalid(item_path, item, "must be an object"))
            continue
        name = item.get("name")
        if not isinstance(name, str) or not name:
            errors.append(required(item_path.child("name"), "a resource name"))
            continue
        if name == GPUS or name in limits:
            errors.append(duplicate(item_path.child("name"), name))
            continue
        if "nominal" not in item:
            errors.append(required(item_path.child("nominal"), "the team's guaranteed amount"))
            continue
        nominal = _quantity(item.get("nominal"), item_path.child("nominal"), errors)
        borrowing = None
        if item.get("borrowingLimit") is not None:
            borrowing = _quantity(
                item.get("borrowingLimit"), item_path.child("borrowingLimit"), errors
            )
        if nominal is not None:
            limits[name] = Limit(nominal, borrowing)
    return limits


def parse_team_quota(raw: object) -> tuple[TeamQuota | None, list[FieldError]]:
    """Parse a TeamQuota object (rule 1)."""
    if not isinstance(raw, Mapping):
        return None, [invalid(FieldPath(), type(raw).__name__, "must be an object")]
    name, errors = object_header(raw, QUOTA_KIND)
    spec = raw.get("spec")
    if not isinstance(spec, Mapping):
        return None, [*errors, invalid(_SPEC, spec, "must be an object")]
    namespaces = _namespaces(spec.get("namespaces"), errors)
    cohort = spec.get("cohort", DEFAULT_COHORT)
    if not isinstance(cohort, str) or not is_dns1123_label(cohort):
        errors.append(invalid(_SPEC.child("cohort"), cohort, "must be a DNS label"))
        cohort = DEFAULT_COHORT
    gpus: int | None = None
    if spec.get("nominalGPUs") is None:
        errors.append(required(_SPEC.child("nominalGPUs"), "the team's guaranteed GPUs"))
    else:
        gpus = non_negative_count(spec.get("nominalGPUs"), _SPEC.child("nominalGPUs"), errors)
    borrowing: int | None = None
    if spec.get("borrowingLimitGPUs") is not None:
        borrowing = non_negative_count(
            spec.get("borrowingLimitGPUs"), _SPEC.child("borrowingLimitGPUs"), errors
        )
    limits = _other_resources(spec.get("resources"), errors)
    if gpus is not None:
        limits = {
            GPUS: Limit(gpus * MILLI, None if borrowing is None else borrowing * MILLI),
            **limits,
        }
    if errors:
        return None, errors
    metadata = raw.get("metadata")
    deleting = isinstance(metadata, Mapping) and bool(metadata.get("deletionTimestamp"))
    quota = TeamQuota(
        name=name, namespaces=namespaces, limits=limits, cohort=cohort, deleting=deleting
    )
    return quota, []


# ------------------------------------------------------------------ rule 2: the set of quotas


@dataclass(frozen=True, slots=True)
class Teams:
    """A set of TeamQuotas resolved (rule 2).

    Attributes:
        valid: The teams that own their namespaces, by name.
        owners: Namespace -> the name of the valid team owning it.
        errors: Team name -> why it is left out (only teams left out are keys).
    """

    valid: Mapping[str, TeamQuota]
    owners: Mapping[str, str]
    errors: Mapping[str, list[FieldError]]

    def owner_of(self, namespace: str) -> TeamQuota | None:
        """The team owning ``namespace``, ``None`` when no valid team does."""
        name = self.owners.get(namespace)
        return None if name is None else self.valid[name]

    def cohort_of(self, team: TeamQuota) -> tuple[TeamQuota, ...]:
        """The valid teams of ``team``'s cohort, itself included, by name."""
        return tuple(
            other for _, other in sorted(self.valid.items()) if other.cohort == team.cohort
        )


def resolve_teams(quotas: Iterable[TeamQuota]) -> Teams:
    """Which teams are valid and which namespaces each owns (rule 2)."""
    claimed: dict[str, str] = {}
    errors: dict[str, list[FieldError]] = {}
    ordered = sorted(quotas, key=lambda q: q.name)
    for quota in ordered:
        for index, namespace in enumerate(quota.namespaces):
            first = claimed.setdefault(namespace, quota.name)
            if first != quota.name:
                errors.setdefault(quota.name, []).append(_owned_by(index, namespace, first))
    valid = {quota.name: quota for quota in ordered if quota.name not in errors}
    owners = {namespace: team for namespace, team in claimed.items() if team in valid}
    return Teams(valid=valid, owners=owners, errors=errors)


def claimed_elsewhere(
    quota: TeamQuota, owner_of: Callable[[str], str | None], before: Iterable[str] = ()
) -> list[FieldError]:
    """The namespaces a written ``quota`` newly claims that another team owns (rule 2).

    ``owner_of`` names the valid team owning a namespace now; ``before``: the namespaces the
    TeamQuota listed before this write (an UPDATE), never refused again.
    """
    kept = frozenset(before)
    errors: list[FieldError] = []
    for index, namespace in enumerate(quota.namespaces):
        owner = None if namespace in kept else owner_of(namespace)
        if owner is not None and owner != quota.name:
            errors.append(_owned_by(index, namespace, owner))
    return errors


def _owned_by(index: int, namespace: str, owner: str) -> FieldError:
    return duplicate(
        _SPEC.child("namespaces").index(index), namespace, f"already owned by TeamQuota {owner}"
    )


# ------------------------------------------------------------------ rule 3: policy sections


def _parse_preemption(value: object, errors: list[FieldError]) -> PreemptionSettings:
    path = _SPEC.child("preemption")
    if value is None:
        return PreemptionSettings()
    if not isinstance(value, Mapping):
        errors.append(invalid(path, value, "must be an object"))
        return PreemptionSettings()
    minimum = 0
    if value.get("minimumRunSeconds") is not None:
        minimum = (
            non_negative_count(value["minimumRunSeconds"], path.child("minimumRunSeconds"), errors)
            or 0
        )
    never: int | None = None
    if value.get("neverPreemptPriority") is not None:
        never = as_int(value["neverPreemptPriority"])
        if never is None:
            errors.append(
                invalid(
                    path.child("neverPreemptPriority"),
                    value["neverPreemptPriority"],
                    "must be an integer",
                )
            )
    return PreemptionSettings(minimum_run_seconds=minimum, never_preempt_priority=never)


def _parse_levels(value: object, path: FieldPath, errors: list[FieldError]) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str):
        errors.append(invalid(path, value, "must be a list of node label keys, coarsest first"))
        return ()
    levels: list[str] = []
    for index, key in enumerate(value):
        if not isinstance(key, str) or label_key_errors(key):
            errors.append(invalid(path.index(index), key, "must be a node label key"))
        elif key in levels:
            errors.append(duplicate(path.index(index), key))
        else:
            levels.append(key)
    return tuple(levels)


def _parse_topology(value: object, errors: list[FieldError]) -> TopologySettings:
    path = _SPEC.child("topology")
    if value is None:
        return TopologySettings()
    if not isinstance(value, Mapping):
        errors.append(invalid(path, value, "must be an object"))
        return TopologySettings()
    levels = _parse_levels(value.get("levels"), path.child("levels"), errors)
    default_level = value.get("defaultLevel")
    if default_level is not None and default_level not in levels:
        errors.append(not_supported(path.child("defaultLevel"), default_level, levels))
        default_level = None
    mode = value.get("defaultMode", "Preferred")
    if mode not in TOPOLOGY_MODES:
        errors.append(not_supported(path.child("defaultMode"), mode, TOPOLOGY_MODES))
        mode = "Preferred"
    return TopologySettings(
        levels=levels,
        default_level=default_level if isinstance(default_level, str) else None,
        default_mode="Required" if mode == "Required" else "Preferred",
    )


def parse_pool_settings(raw: object) -> tuple[PoolSettings, list[FieldError]]:
    """The ``spec.preemption`` and ``spec.topology`` sections of a PlacementPolicy (rule 3).

    Errors use the policy's own paths, so they join ``parse_policy``'s report unchanged; the
    settings returned are the defaults for every section that had errors.
    """
    spec = raw.get("spec") if isinstance(raw, Mapping) else None
    if not isinstance(spec, Mapping):
        return PoolSettings(), []
    errors: list[FieldError] = []
    preemption = _parse_preemption(spec.get("preemption"), errors)
    topology = _parse_topology(spec.get("topology"), errors)
    return PoolSettings(preemption=preemption, topology=topology), errors


# ------------------------------------------------------------------ rule 4: job annotations


def topology_request(
    annotations: Mapping[str, str], settings: TopologySettings
) -> tuple[TopologyRequest, list[FieldError]]:
    """What topology a job asks for, from its annotations or the policy's default (rule 4)."""
    errors: list[FieldError] = []
    chosen: tuple[str, str, bool] | None = None
    for key, is_required in (
        (ANNOTATION_TOPOLOGY_REQUIRED, True),
        (ANNOTATION_TOPOLOGY_PREFERRED, False),
    ):
        value = annotations.get(key)
        if value is None:
            continue
        if chosen is not None:
            errors.append(forbidden(_ANNOTATIONS.key(key), f"may not be set with {chosen[0]}"))
            continue
        if not settings.levels:
            errors.append(
                forbidden(_ANNOTATIONS.key(key), "the placement policy defines no topology levels")
            )
            continue
        if value not in settings.levels:
            errors.append(not_supported(_ANNOTATIONS.key(key), value, settings.levels))
            continue
        chosen = (key, value, is_required)
    if errors:
        return TopologyRequest(), errors
    if chosen is not None:
        return TopologyRequest(settings.levels.index(chosen[1]), chosen[2]), []
    if settings.default_level is not None:
        return TopologyRequest(
            settings.levels.index(settings.default_level), settings.default_mode == "Required"
        ), []
    return TopologyRequest(), []


# ------------------------------------------------------------------ rule 5: ceilings


def quota_ceiling(team: TeamQuota, cohort: Iterable[TeamQuota], resource: str) -> int | None:
    """The most ``team`` can ever hold of ``resource`` (milli-units); ``None``: no quota on it.

    ``cohort`` is every team of the team's cohort, the team itself included.
    """
    limit = team.limits.get(resource)
    if limit is None:
        return None
    pool = sum(
        other.limits[resource].nominal
        for other in cohort
        if other.cohort == team.cohort and resource in other.limits and other.name != team.name
    )
    pool += limit.nominal
    return pool if limit.ceiling is None else min(pool, limit.ceiling)


def quota_ceilings(team: TeamQuota, cohort: Iterable[TeamQuota]) -> dict[str, int]:
    """``quota_ceiling`` of every resource ``team`` has a quota for (rule 5)."""
    teams = list(cohort)
    ceilings: dict[str, int] = {}
    for resource in team.limits:
        ceiling = quota_ceiling(team, teams, resource)
        if ceiling is not None:
            ceilings[resource] = ceiling
    return ceilings


def never_admissible(
    team: TeamQuota,
    cohort: Iterable[TeamQuota],
    usage: Mapping[str, int],
    *,
    ceilings: Mapping[str, int] | None = None,
) -> tuple[str, str] | None:
    """``(resource, message)`` when a gang using ``usage`` exceeds its team's ceiling (rule 5).

    ``ceilings``: ``quota_ceilings(team, cohort)``, when the caller keeps them (the webhook
    keeps them with the team it caches per namespace, instead of summing the cohort per review).
    """
    if ceilings is None:
        ceilings = quota_ceilings(team, cohort)
    for resource, want in usage.items():
        ceiling = ceilings.get(resource)
        if ceiling is not None and want > ceiling:
            unit = "GPUs" if resource == GPUS else resource
            return resource, (
                f"the job needs {format_milli(want)} {unit} but team {team.name} can hold at most "
                f"{format_milli(ceiling)} (nominal plus borrowing limit, within cohort "
                f"{team.cohort})"
            )
    return None


# ------------------------------------------------------------------ rule 6: quota usage


def quota_usage(requests: Iterable[Units], gpus: GpuSources) -> dict[str, int]:
    """What pods taking ``requests`` from their nodes count against quota (rule 6)."""
    total: dict[str, int] = {}
    gpu_names = gpus.resources
    for pod in requests:
        for name, amount in pod.items():
            key = GPUS if name in gpu_names else name
            total[key] = total.get(key, 0) + amount
    return total


def gang_usage(job: JobSpec, gpus: GpuSources, claims: ClaimLookup = NO_CLAIMS) -> dict[str, int]:
    """What ``job``'s gang counts against its team's quota (rule 6)."""
    left = job.min_available
    pods: list[Units] = []
    for replica in job.replica_specs:  # Master, then Worker: rank order
        count = min(left, replica.replicas)
        if count > 0:
            pods += [pod_units(pod_spec_of(replica.template), gpus, claims)] * count
            left -= count
    return quota_usage(pods, gpus)


# ------------------------------------------------------------------ rule 7: admission order


def admission_order(priority: int, created: str, key: JobKey) -> tuple[int, str, str, str]:
    """Sort key of a waiting gang: higher priority first, then older, then by name (rule 7)."""
    return -priority, created, key[0], key[1]
