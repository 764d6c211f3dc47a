"""Pool-sharing rules: topology annotations, and jobs their team's quota can never hold.

Why the webhook checks these although the controller decides admission: a job whose gang needs
more GPUs than its team could ever get (its nominal quota plus its borrowing limit, never more
than its cohort's nominal quotas together) would wait forever with a ``Quota`` reason, and a
topology annotation naming a level the policy does not list would be ignored or wait forever;
both are visible in the manifest, so ``kubectl apply`` refuses them with the field to fix.

Rules (each one function; the facts come from ``facts.read_job``, the team from the webhook's
TeamQuota cache or ``torchgate check``'s ``--policy`` files):

1. ``topology_annotations``: ``torchgate.io/topology-required`` / ``-preferred`` name one of the
   active policy's ``spec.topology.levels``, and not both (``pool.topology_request``), errors at
   ``metadata.annotations[<key>]``.
2. ``team_quota``: the gang's quota usage (``pool.gang_usage``: the job's ``minAvailable`` pods in
   rank order, Master first, as the controller counts it) is no more of any resource its team
   has a quota for than ``pool.quota_ceiling``; else ``FieldValueForbidden`` at
   ``spec.pytorchReplicaSpecs``. Without a TeamQuota owning the namespace no quota applies.

``resolve_team`` picks the team of a namespace from a set of TeamQuotas by ``pool.resolve_teams``,
the rule the controller counts quota by: a team claiming a namespace another team owns is left
out, as malformed ones are.
"""

from __future__ import annotations

from collections.abc import Iterable

from torchgate.pytorchjob.fieldpath import forbidden
from torchgate.pytorchjob.pool import (
    ANNOTATION_TOPOLOGY_PREFERRED,
    ANNOTATION_TOPOLOGY_REQUIRED,
    TeamQuota,
    gang_usage,
    never_admissible,
    resolve_teams,
    topology_request,
)
from torchgate.pytorchjob.spec import parse_job
from torchgate.webhook.validation.facts import NONE, OBJECT, REPLICA_SPECS, Findings, JobFacts, Team

_TOPOLOGY_KEYS = (ANNOTATION_TOPOLOGY_REQUIRED, ANNOTATION_TOPOLOGY_PREFERRED)


def resolve_team(quotas: Iterable[TeamQuota], namespace: str) -> Team | None:
    """The team owning ``namespace`` among the valid ``quotas``, with its cohort; else ``None``."""
    teams = resolve_teams(quotas)
    quota = teams.owner_of(namespace)
    return None if quota is None else Team(quota=quota, cohort=teams.cohort_of(quota))


# ------------------------------------------------------------------ rule 1


def topology_annotations(job: JobFacts) -> Findings:
    """Topology annotations name one of the policy's levels, and only one is set."""
    metadata = job.metadata
    annotations = metadata.get("annotations") if isinstance(metadata, OBJECT) else None
    if not isinstance(annotations, OBJECT) or (
        ANNOTATION_TOPOLOGY_REQUIRED not in annotations
        and ANNOTATION_TOPOLOGY_PREFERRED not in annotations
    ):
        return NONE
    given = {key: str(annotations[key]) for key in _TOPOLOGY_KEYS if key in annotations}
    _, errors = topology_request(given, job.policy.topology)
    return errors


# ------------------------------------------------------------------ rule 2


def team_quota(job: JobFacts) -> Findings:
    """The gang fits what its team could ever hold (``pool.never_admissible``)."""
    team = job.team
    if team is None or not job.spec_readable:
        return NONE
    spec, errors = parse_job(job.raw)
    if spec is None or errors:  # the spec rules report what is wrong with it
        return NONE
    usage = gang_usage(spec, job.gpus, job.claims)
    found = never_admissible(team.quota, team.cohort, usage, ceilings=team.ceilings)
    if found is None:
        return NONE
    return [forbidden(REPLICA_SPECS, found[1])]
