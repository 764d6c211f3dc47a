"""Where the webhook's PlacementPolicies and TeamQuotas come from: files, the cluster, or defaults.

Admission must never wait on the apiserver for a policy (the apiserver is waiting on *us*), so
policies are served from an in-memory cache: loaded once from ``--policy`` files, or listed and then
watched from the cluster by the access layer's informer (:mod:`torchgate.kube.informer`). A policy
that does not parse is left out and reported (log line, a Warning Event on the object and a
``Valid=False`` condition in its status); it never takes admission down. The cached choice per
namespace is dropped whenever the set changes. Each replica compares the ``Valid`` condition it
would write with the policy's status as its informer holds it (``conditions.status_to_write``):
one that already says it (a restarted webhook, a second replica, its own write coming back)
writes nothing, nor records the Event again. Beside ``Valid``, a valid policy's status carries
``Shadowed`` (``policyties`` rule 4): ``True`` while another policy of the same priority applies
on some of its namespaces only because its name comes first (which namespaces, and which policy,
in the message), ``False`` otherwise. Whether a policy is shadowed depends on the others, so any
change of the set has every policy's status looked at again (each one written only when it
changes).

TeamQuotas (``torchgate.io/v1alpha1``, docs/pool-sharing.md) are cached the same way, beside the
policies (the same files, or a second informer: ``ClusterQuotas``), so the validating route can
refuse a job its team could never hold. A malformed TeamQuota is left out and logged; its status
(``Valid`` condition, usage) is the controller's to write. The webhook is ready once both caches
are filled.

ResourceClaims, ResourceClaimTemplates and DeviceClasses (``ClusterClaims``) are cached too, so a
job's claimed GPUs are counted as the controller counts them (``pytorchjob.devices``). Readiness
does not wait for them: a cluster without ``resource.k8s.io/v1`` still admits jobs. A claim or
template the listed caches do not see is read once live before a review is decided
(``ClusterClaims.confirm``): ``kubectl apply -f dir/`` creates a template and its job together,
and the job's review may come before the template's watch event, so only a template the
apiserver does not have either is refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml

from torchgate.kube.client import MERGE_PATCH, KubeApi
from torchgate.kube.dra import DraCaches
from torchgate.kube.errors import ApiError, NotFound
from torchgate.kube.informer import Informer
from torchgate.kube.resources import (
    DEVICE_CLASSES,
    EVENTS,
    PLACEMENT_POLICIES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    TEAM_QUOTAS,
)
from torchgate.pytorchjob import moments, names, reasons
from torchgate.pytorchjob.conditions import status_to_write
from torchgate.pytorchjob.devices import (
    NO_CLAIMS,
    RESOURCE_CLAIM_TEMPLATE,
    ClaimLookup,
    ConfirmedClaims,
    claim_spec_of,
    unseen_sources,
)
from torchgate.pytorchjob.events import event_body, involved_object
from torchgate.pytorchjob.fieldpath import FieldError
from torchgate.pytorchjob.manifests import yaml_problem
from torchgate.pytorchjob.policy import PlacementPolicy, parse_policy, select_policy
from torchgate.pytorchjob.policyties import Shadow, shadows
from torchgate.pytorchjob.pool import QUOTA_KIND, parse_team_quota
from torchgate.pytorchjob.projection import project_claim_spec
from torchgate.pytorchjob.yamlinput import load_documents
from torchgate.webhook.validation import Team
from torchgate.webhook.validation.sharing import resolve_team

log = logging.getLogger("torchgate.webhook.policies")


T = TypeVar("T")


class _AdminObjects(Generic[T]):
    """One kind of admin object (PlacementPolicies, TeamQuotas): the valid ones parsed, by name.

    An object that does not parse is left out, its errors kept in ``invalid`` and logged;
    ``changed`` runs after every change (it drops the choices per namespace made from the set).
    """

    def __init__(
        self,
        kind: str,
        parse: Callable[[Mapping[str, Any]], tuple[T | None, list[FieldError]]],
        changed: Callable[[], None],
    ) -> None:
        self.kind = kind
        self.parse = parse
        self.changed = changed
        self.valid: dict[str, T] = {}
        self.invalid: dict[str, list[FieldError]] = {}

    def put(self, raw: Mapping[str, Any], source: str) -> list[FieldError]:
        """Parse and store one object; return its errors (empty when valid)."""
        name = _name_of(raw)
        parsed, errors = self.parse(raw)
        if parsed is None:
            self.valid.pop(name, None)
            self.invalid[name] = errors
            log.error(
                "ignoring invalid %s %r from %s: %s",
                self.kind,
                name,
                source,
                "; ".join(str(e) for e in errors),
            )
        else:
            self.valid[name] = parsed  # a valid object has a name (``object_header``)
            self.invalid.pop(name, None)
        self.changed()
        return errors

    def remove(self, name: str) -> None:
        """Forget a deleted object."""
        self.valid.pop(name, None)
        self.invalid.pop(name, None)
        self.changed()

    def replace(self, objects: Iterable[Mapping[str, Any]], source: str) -> None:
        """Swap in a complete set."""
        self.valid.clear()
        self.invalid.clear()
        for raw in objects:
            self.put(raw, source)
        self.changed()


class PolicyCache:
    """The current valid policies and TeamQuotas, with per-namespace memos of the selection."""

    def __init__(self) -> None:
        self._by_namespace: dict[str, PlacementPolicy] = {}
        self._shadows: dict[str, list[Shadow]] | None = None
        self._policies = _AdminObjects(names.POLICY_KIND, parse_policy, self._policies_changed)
        self.invalid = self._policies.invalid
        self._team_by_namespace: dict[str, Team | None] = {}
        self._quotas = _AdminObjects(QUOTA_KIND, parse_team_quota, self._team_by_namespace.clear)
        self.invalid_quotas = self._quotas.invalid
        self.synced = asyncio.Event()
        # Cleared by a TeamQuota source that has not listed yet (``ClusterQuotas``): policies
        # are not reported synced before it, so admission never starts without the quotas.
        self.quotas_synced = asyncio.Event()
        self.quotas_synced.set()
        # What the webhook sees of DRA in a namespace (``ClusterClaims``); none without a cluster.
        self.claims_for: Callable[[str], ClaimLookup] = lambda _: NO_CLAIMS
        # What a review sees of DRA: ``claims_for`` plus live reads of what it misses.
        self.confirm_claims: Callable[[str, object], Awaitable[ClaimLookup]] = self._cached_claims

    async def _cached_claims(self, namespace: str, job: object) -> ClaimLookup:
        return self.claims_for(namespace)

    def _policies_changed(self) -> None:
        self._by_namespace.clear()
        self._shadows = None

    def shadows(self) -> dict[str, list[Shadow]]:
        """Where each valid policy is shadowed by a tie, by name (``policyties.shadows``)."""
        if self._shadows is None:
            self._shadows = shadows(self._policies.valid.values())
        return self._shadows

    def team_for(self, namespace: str) -> Team | None:
        """The TeamQuota owning ``namespace`` with its cohort, or ``None`` (no quota applies)."""
        if namespace not in self._team_by_namespace:
            self._team_by_namespace[namespace] = resolve_team(
                self._quotas.valid.values(), namespace
            )
        return self._team_by_namespace[namespace]

    def put_quota(self, raw: Mapping[str, Any], source: str) -> list[FieldError]:
        """Parse and store one TeamQuota; return its errors (empty when valid)."""
        return self._quotas.put(raw, source)

    def remove_quota(self, name: str) -> None:
        """Forget a deleted TeamQuota."""
        self._quotas.remove(name)

    def replace_quotas(self, objects: Iterable[Mapping[str, Any]], source: str) -> None:
        """Swap in a complete set of TeamQuotas."""
        self._quotas.replace(objects, source)

    def policy_for(self, namespace: str) -> PlacementPolicy:
        """The policy that applies to jobs in ``namespace``."""
        policy = self._by_namespace.get(namespace)
        if policy is None:
            policy = select_policy(self._policies.valid.values(), namespace)
            self._by_namespace[namespace] = policy
        return policy

    def put(self, raw: Mapping[str, Any], source: str) -> list[FieldError]:
        """Parse and store one policy object; return its errors (empty when valid)."""
        return self._policies.put(raw, source)

    def remove(self, name: str) -> None:
        """Forget a deleted policy."""
        self._policies.remove(name)

    def replace_all(self, objects: Iterable[Mapping[str, Any]], source: str) -> None:
        """Swap in a complete set (after a list or a file reload)."""
        self._policies.replace(objects, source)

    def policies(self) -> list[PlacementPolicy]:
        """The valid policies, in name order."""
        return [self._policies.valid[name] for name in sorted(self._policies.valid)]

    @property
    def names(self) -> list[str]:
        """Names of the valid policies, sorted."""
        return sorted(self._policies.valid)


def _name_of(raw: Mapping[str, Any]) -> str:
    metadata = raw.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) and name else "<unnamed>"


class PolicyFileError(ValueError):
    """A policy file that cannot be read, is not UTF-8 or not YAML."""


def read_policy_files(
    paths: Iterable[Path], *, kinds: tuple[str, ...] = (names.POLICY_KIND,)
) -> list[dict[str, Any]]:
    """Documents of ``kinds`` (default PlacementPolicy) from YAML files (``PolicyFileError``)."""
    objects: list[dict[str, Any]] = []
    for path in paths:
        try:
            documents = [obj for _, obj in load_documents(path.read_text(encoding="utf-8"))]
        except OSError as exc:
            raise PolicyFileError(f"{path}: cannot read: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise PolicyFileError(f"{path}: not UTF-8 text") from None
        except yaml.YAMLError as exc:
            raise PolicyFileError(yaml_problem(str(path), exc)) from None
        for document in documents:
            if isinstance(document, dict) and document.get("kind") in kinds:
                objects.append(document)
    return objects


def split_kinds(
    objects: Iterable[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(PlacementPolicy documents, TeamQuota documents) of ``objects``, in order."""
    policies: list[dict[str, Any]] = []
    quotas: list[dict[str, Any]] = []
    for raw in objects:
        (quotas if raw.get("kind") == QUOTA_KIND else policies).append(raw)
    return policies, quotas


class FilePolicies:
    """Policies (and TeamQuotas) from ``--policy`` files, reloaded when a file changes."""

    def __init__(self, cache: PolicyCache, paths: list[Path]) -> None:
        self.cache = cache
        self.paths = paths
        self._stamps: tuple[tuple[int, int], ...] | None = None

    def load(self) -> None:
        """Read all files now; keep the previous set if any file is unreadable."""
        try:
            stamps = tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in self.paths)
            objects = read_policy_files(self.paths, kinds=(names.POLICY_KIND, QUOTA_KIND))
        except (OSError, PolicyFileError) as exc:
            log.error("keeping the previous policies: %s", exc)
            return
        self._stamps = stamps
        policies, quotas = split_kinds(objects)
        self.cache.replace_all(policies, "file")
        self.cache.replace_quotas(quotas, "file")
        self.cache.synced.set()
        log.info("loaded %d policies from files: %s", len(self.cache.names), self.cache.names)

    def changed(self) -> bool:
        """Whether any file's mtime or size differs from the last load."""
        try:
            stamps = tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in self.paths)
        except OSError:
            return False
        return stamps != self._stamps

    async def watch(self, interval: float) -> None:
        """Reload the files whenever they change."""
        while True:
            await asyncio.sleep(interval)
            if self.changed():
                self.load()


class ClusterQuotas:
    """TeamQuotas listed and watched from the apiserver by an informer (read only).

    Until its first list the cache's ``quotas_synced`` is clear, which holds back
    ``ClusterPolicies`` from reporting the cache synced (the webhook's readiness).
    """

    def __init__(self, cache: PolicyCache, api: KubeApi) -> None:
        self.cache = cache
        self.informer = Informer(api, TEAM_QUOTAS)
        self.informer.add_handler(self._apply)
        cache.quotas_synced.clear()

    async def run(self) -> None:
        """Keep the cache's TeamQuotas in step with the cluster (cancel to stop)."""
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.informer.run())
            await self.informer.synced.wait()
            self.cache.quotas_synced.set()

    def _apply(self, kind: str, raw: dict[str, Any], old: dict[str, Any] | None) -> None:
        if kind == "DELETED":
            self.cache.remove_quota(_name_of(raw))
        else:
            self.cache.put_quota(raw, "cluster")


class ClusterClaims:
    """ResourceClaims, ResourceClaimTemplates and DeviceClasses, listed and watched (read only).

    Admission does not wait for them: until they have listed, a template the webhook does not
    see is reported as a warning, not refused (``validation.claims``).
    """

    def __init__(self, cache: PolicyCache, api: KubeApi) -> None:
        self.caches = DraCaches(
            # Admission reads a claim's spec only; allocations and consumers are not kept.
            claims=Informer(api, RESOURCE_CLAIMS, project=project_claim_spec),
            templates=Informer(api, RESOURCE_CLAIM_TEMPLATES),
            classes=Informer(api, DEVICE_CLASSES),
        )
        self.api = api
        cache.claims_for = self.caches.view
        cache.confirm_claims = self.confirm

    async def confirm(self, namespace: str, job: object) -> ClaimLookup:
        """What ``job`` in ``namespace`` sees, with one live GET of each source the caches miss.

        Only once the caches have listed (before, a miss is "not seen yet" and warned about, not
        refused). A GET answered 404 leaves the object missing; any other failure makes the
        lookup incomplete, so the review warns rather than refuses on a cache that may be behind.
        """
        seen = self.caches.view(namespace)
        missing = unseen_sources(job, seen)
        if not missing:
            return seen
        found: dict[tuple[str, str], Mapping[str, Any]] = {}
        complete = True
        for kind, name in missing:
            try:
                raw = await self._read(kind, namespace, name)
            except NotFound:
                continue
            except ApiError as exc:
                log.warning("could not read %s %s/%s: %s", kind, namespace, name, exc)
                complete = False
                continue
            spec = claim_spec_of(kind, raw)
            if spec is not None:
                found[kind, name] = spec
        return ConfirmedClaims(seen, found, complete)

    async def _read(self, kind: str, namespace: str, name: str) -> Any:
        if kind == RESOURCE_CLAIM_TEMPLATE:
            return await self.api.request("GET", RESOURCE_CLAIM_TEMPLATES.path(namespace, name))
        return await self.api.request("GET", RESOURCE_CLAIMS.path(namespace, name))

    async def run(self) -> None:
        """Keep the caches in step with the cluster (cancel to stop)."""
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.caches.claims.run())
            tasks.create_task(self.caches.templates.run())
            tasks.create_task(self.caches.classes.run())


class ClusterPolicies:
    """Policies listed and watched from the apiserver (``torchgate.io/v1alpha1``) by an informer.

    The informer re-lists on 410 Gone or a broken stream and reports what changed meanwhile, so
    the cache follows every event; each policy's validity is then reported (best effort) by a
    second task, so admission never waits on a status write, and only when its stored status
    does not already say it.
    """

    def __init__(self, cache: PolicyCache, api: KubeApi) -> None:
        self.cache = cache
        self.api = api
        self.informer = Informer(api, PLACEMENT_POLICIES)
        self.informer.add_handler(self._apply)
        # Names whose status is to be looked at, each once however often it changed meanwhile.
        self._pending: dict[str, None] = {}
        self._woken = asyncio.Event()

    async def run(self) -> None:
        """Keep the cache in step with the cluster (cancel to stop)."""
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.informer.run())
            tasks.create_task(self._report_changes())
            await self.informer.synced.wait()
            await self.cache.quotas_synced.wait()
            self.cache.synced.set()

    def _apply(self, kind: str, raw: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = _name_of(raw)
        if kind == "DELETED":
            self.cache.remove(name)
        else:
            self.cache.put(raw, "cluster")
            self._pending[name] = None
        self._woken.set()  # a deletion too: another policy's Shadowed may move

    async def _report_changes(self) -> None:
        reported: dict[str, list[Shadow]] = {}
        while True:
            await self._woken.wait()
            self._woken.clear()
            # Once per batch of changes: the policies whose Shadowed moved are looked at too.
            current = self.cache.shadows()
            moved = {
                name for name in {*current, *reported} if current.get(name) != reported.get(name)
            }
            self._pending.update(dict.fromkeys(sorted(moved)))
            reported = current
            while self._pending:
                name = next(iter(self._pending))
                del self._pending[name]
                raw = self.informer.get("", name)
                if raw is not None:
                    await self._report(raw)

    async def _report(self, raw: Mapping[str, Any]) -> None:
        """Record a policy's validity in its status, and an Event when it is invalid.

        Nothing when the status the informer holds already says it: the condition's time moves
        only with its status, read back from there, so a restarted webhook keeps it too.
        """
        name = _name_of(raw)
        errors = self.cache.invalid.get(name, [])
        message = "; ".join(str(e) for e in errors) or "policy is valid and in use"
        generation = raw.get("metadata", {}).get("generation")
        condition = {
            "type": reasons.VALID,
            "status": "False" if errors else "True",
            "reason": reasons.REASON_POLICY_INVALID if errors else reasons.REASON_POLICY_ACCEPTED,
            "message": message[:1024],
            "observedGeneration": generation,
        }
        conditions = [condition]
        if name in self.cache.names:  # only a policy in use is shadowed or not
            conditions.append(shadowed_condition(self.cache.shadows().get(name, []), generation))
        status = status_to_write({"conditions": conditions}, raw.get("status"), now=_now())
        if status is None:
            return
        try:
            await self.api.request(
                "PATCH",
                PLACEMENT_POLICIES.path(None, name, "status"),
                body={"status": status},
                content_type=MERGE_PATCH,
            )
            if errors:
                await self._event(raw, message)
        except Exception as exc:  # reporting is best effort; admission keeps working
            log.warning("could not report the state of PlacementPolicy %r: %s", name, exc)

    async def _event(self, raw: Mapping[str, Any], message: str) -> None:
        involved = involved_object(
            names.POLICY_API_VERSION, names.POLICY_KIND, _name_of(raw), raw.get("metadata", {})
        )
        event = event_body(
            "default",
            involved,
            type="Warning",
            reason=reasons.INVALID_PLACEMENT_POLICY,
            message=message,
            component="torchgate-webhook",
            now=_now(),
        )
        await self.api.request("POST", EVENTS.path("default"), body=event)


def shadowed_condition(shadowed: list[Shadow], generation: object) -> dict[str, Any]:
    """A valid policy's ``Shadowed`` condition: where ties by name lose it, if anywhere."""
    message = "; ".join(shadow.message() for shadow in shadowed) or (
        "no policy of the same priority applies instead of this one on any of its namespaces"
    )
    return {
        "type": reasons.SHADOWED,
        "status": "True" if shadowed else "False",
        "reason": reasons.REASON_POLICY_TIED if shadowed else reasons.REASON_POLICY_NOT_TIED,
        "message": message[:1024],
        "observedGeneration": generation,
    }


def _now() -> str:
    return moments.format_time(datetime.now(UTC))
