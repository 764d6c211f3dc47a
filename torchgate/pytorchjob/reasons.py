"""The words torchgate writes about jobs and nodes: condition types, their reasons, Event reasons.

Why here: the controller writes them (``controller.job``'s status, plan, gang and finish; the
quarantine keeper), ``torchgate explain`` reads them back (a job's state from its conditions, its
restarts from its Events), and users' alerts, dashboards and scripts match them (``kubectl get
pytorchjobs`` shows the last condition's type as the State). So each is declared once, here, both
sides import it, and ``tests/unit/test_docs_match.py`` holds the documents to these declarations.
None is ever renamed: users' alerts and scripts depend on them.

What is declared:

- the training-operator's condition types and ``PyTorchJob*`` reasons (the conditions and the
  Events that announce them), and its ``ExitedWithCode`` Event per failed pod;
- torchgate's ``Queued`` condition, whose reason is what the admitter's wait kind is
  (``QUEUED_REASONS``) or a name conflict, and its ``Preempted`` condition;
- the causes of a gang restart (``Cause``, the label of ``gang_restarts_total``): every cause but
  ``ScheduleTimeout`` (announced by ``GangScheduleTimeout``) is also the reason of the Event, and
  the disruptions' of the ``Restarting`` condition, that tell of it (``RESTART_EVENT_REASONS``);
- the Events about actions (``GangAdmitted``, ``FailedCreate``) and about nodes
  (``NodeQuarantined``);
- the ``Valid`` condition of torchgate's own objects, which both write: the webhook a
  PlacementPolicy's, the controller a TeamQuota's (each with reasons of its own), and a
  TeamQuota's ``Deleting`` condition while its finalizer holds it;
- the ``Shadowed`` condition of a PlacementPolicy (the webhook's): where another policy of the
  same priority applies instead, by name only (``policyties``);
- ``CONDITION_TYPES``, ``CONDITION_REASONS`` and ``EVENT_REASONS``: every condition type and
  reason the product writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, get_args

# Condition types: the training-operator's, then torchgate's own.
CREATED: Final = "Created"
RUNNING: Final = "Running"
RESTARTING: Final = "Restarting"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
# The condition type as a type too: ``torchgate explain`` shows a suspended job in this state.
SuspendedState = Literal["Suspended"]
SUSPENDED: Final[SuspendedState] = "Suspended"
QUEUED: Final = "Queued"
PREEMPTED: Final = "Preempted"
VALID: Final = "Valid"  # of a PlacementPolicy or a TeamQuota
# Of a TeamQuota being deleted while its team's gangs hold capacity; and the state ``torchgate
# explain`` shows a job in once its deletion was asked for.
DeletingState = Literal["Deleting"]
DELETING: Final[DeletingState] = "Deleting"
OVER_QUOTA: Final = "OverQuota"  # of a TeamQuota whose team's gangs hold more than it may
SHADOWED: Final = "Shadowed"  # of a valid PlacementPolicy: True where a tie by name loses it
CONDITION_TYPES: Final = (
    CREATED,
    RUNNING,
    RESTARTING,
    SUCCEEDED,
    FAILED,
    SUSPENDED,
    QUEUED,
    PREEMPTED,
    VALID,
    DELETING,
    OVER_QUOTA,
    SHADOWED,
)

# The training-operator's reasons, on its conditions and on the Events that announce them.
REASON_CREATED: Final = "PyTorchJobCreated"
REASON_RUNNING: Final = "PyTorchJobRunning"
REASON_RESTARTING: Final = "PyTorchJobRestarting"
REASON_SUCCEEDED: Final = "PyTorchJobSucceeded"
REASON_FAILED: Final = "PyTorchJobFailed"
REASON_SUSPENDED: Final = "PyTorchJobSuspended"
REASON_RESUMED: Final = "PyTorchJobResumed"
# A forecast's reason for a job another controller runs (``runPolicy.managedBy``); on no condition.
REASON_MANAGED_ELSEWHERE: Final = "ManagedElsewhere"
REASON_BACKOFF_LIMIT: Final = "BackoffLimitExceeded"
REASON_DEADLINE: Final = "DeadlineExceeded"
REASON_FAILED_VALIDATION: Final = "PyTorchJobFailedValidation"
EXITED_WITH_CODE: Final = "ExitedWithCode"

# What a waiting job waits for (the admitter's wait kinds) -> its ``Queued`` condition's reason.
# Capacity keeps the reason it always had, so existing alerts and scripts keep matching.
REASON_WAITING_FOR_RESOURCES: Final = "WaitingForResources"
QUEUED_REASONS: Final[Mapping[str, str]] = {
    "Quota": "WaitingForQuota",
    "Capacity": REASON_WAITING_FOR_RESOURCES,
    "Topology": "WaitingForTopology",
    "Preempting": "WaitingForPreemption",
}
# Queued while pods or Services of another owner hold the names the gang needs (its pods' names,
# its Services': ``MASTER_ADDR`` names one). Kept as it was named before Services were checked.
REASON_NAME_CONFLICT: Final = "PodNameConflict"
# ``Preempted`` turned False once the job is admitted again (its reason when True: PREEMPTED).
REASON_READMITTED: Final = "Readmitted"

Cause = Literal[
    "ContainerFailed",
    "NodeLost",
    "NodeTainted",
    "PodDisrupted",
    "PodDeleted",
    "GangIncomplete",
    "Preempted",
    "ScheduleTimeout",
    "PodStuck",
    "Hang",
    "ImagePullFailed",
]
"""Why a gang restarted: the program failed, its Master made no progress for its deadline (a
hang, ``pytorchjob.progress``), or its image could not be pulled a second time, the causes
``backoffLimit`` counts; a disruption (``controller.job.disruption``); a member missing for no
known reason (gone while no controller watched, or a creation cut short); torchgate's own
preemption; or kube-scheduler did not bind the gang in time."""
CONTAINER_FAILED: Final[Cause] = "ContainerFailed"
NODE_LOST: Final[Cause] = "NodeLost"
NODE_TAINTED: Final[Cause] = "NodeTainted"
POD_DISRUPTED: Final[Cause] = "PodDisrupted"
POD_DELETED: Final[Cause] = "PodDeleted"
GANG_INCOMPLETE: Final[Cause] = "GangIncomplete"
# PREEMPTED, a condition type above, is a cause too.
SCHEDULE_TIMEOUT: Final[Cause] = "ScheduleTimeout"
POD_STUCK: Final[Cause] = "PodStuck"
HANG: Final[Cause] = "Hang"
IMAGE_PULL_FAILED: Final[Cause] = "ImagePullFailed"

# Events about what the controller did.
GANG_ADMITTED: Final = "GangAdmitted"
GANG_SCHEDULE_TIMEOUT: Final = "GangScheduleTimeout"
# The apiserver refused to create a pod (a ResourceQuota of the namespace, an admission policy),
# named as kube-controller-manager's ReplicaSet and Job controllers name theirs.
FAILED_CREATE: Final = "FailedCreate"
# A Service of the job's whose selector was changed (``MASTER_ADDR`` names it) is made again.
SERVICE_SELECTOR_CHANGED: Final = "ServiceSelectorChanged"

# Events of the quarantine keeper, on the Node and on the jobs whose faults counted.
NODE_QUARANTINED: Final = "NodeQuarantined"
NODE_QUARANTINE_LIFTED: Final = "NodeQuarantineLifted"
# A Node's recorded faults (``torchgate.io/quarantine-faults``) that cannot be read.
NODE_FAULT_HISTORY_UNREADABLE: Final = "NodeFaultHistoryUnreadable"

# ``Valid``'s reasons: a PlacementPolicy's (the webhook's, with a Warning Event when invalid) and a
# TeamQuota's (the controller's).
REASON_POLICY_ACCEPTED: Final = "Accepted"
REASON_POLICY_INVALID: Final = "InvalidSpec"
INVALID_PLACEMENT_POLICY: Final = "InvalidPlacementPolicy"
# ``Shadowed``'s reasons: a policy of the same priority applies on some of its namespaces because
# its name comes first; or no such tie.
REASON_POLICY_TIED: Final = "TiedAtSamePriority"
REASON_POLICY_NOT_TIED: Final = "NoTie"
REASON_QUOTA_VALID: Final = VALID
REASON_QUOTA_INVALID: Final = "Invalid"
# ``Deleting``'s reason: the TeamQuota's finalizer holds it until its team's admitted gangs end.
REASON_QUOTA_GANGS_RUNNING: Final = "GangsRunning"
# ``OverQuota``'s reason, and its Warning Event's: the quota was lowered below the team's usage.
REASON_QUOTA_USAGE_ABOVE: Final = "UsageAboveQuota"

RESTART_EVENT_REASONS: Final[frozenset[str]] = frozenset(
    {*get_args(Cause), REASON_RESTARTING, GANG_SCHEDULE_TIMEOUT} - {SCHEDULE_TIMEOUT}
)
"""The reasons of the Events that tell of a gang restart (``torchgate explain`` lists them)."""

CONDITION_REASONS: Final[frozenset[str]] = frozenset(
    {
        REASON_CREATED,
        REASON_RUNNING,
        REASON_RESTARTING,
        REASON_SUCCEEDED,
        REASON_FAILED,
        REASON_SUSPENDED,
        REASON_RESUMED,
        REASON_BACKOFF_LIMIT,
        REASON_DEADLINE,
        REASON_FAILED_VALIDATION,
        *QUEUED_REASONS.values(),
        REASON_NAME_CONFLICT,
        PREEMPTED,
        REASON_READMITTED,
        *(RESTART_EVENT_REASONS - {GANG_SCHEDULE_TIMEOUT, GANG_INCOMPLETE}),
        REASON_POLICY_ACCEPTED,
        REASON_POLICY_INVALID,
        REASON_POLICY_TIED,
        REASON_POLICY_NOT_TIED,
        REASON_QUOTA_VALID,
        REASON_QUOTA_INVALID,
        REASON_QUOTA_GANGS_RUNNING,
        REASON_QUOTA_USAGE_ABOVE,
    }
)
"""Every reason torchgate gives a condition."""

EVENT_REASONS: Final[frozenset[str]] = (
    CONDITION_REASONS
    | RESTART_EVENT_REASONS
    | {
        EXITED_WITH_CODE,
        GANG_ADMITTED,
        FAILED_CREATE,
        SERVICE_SELECTOR_CHANGED,
        NODE_QUARANTINED,
        NODE_QUARANTINE_LIFTED,
        NODE_FAULT_HISTORY_UNREADABLE,
        INVALID_PLACEMENT_POLICY,
    }
)
"""Every reason of the Events torchgate sends (a job's conditions are announced by Events)."""
