"""Taints and tolerations: Kubernetes' matching, and the taints a template may not tolerate.

Declared once for the controller and the webhook. The controller's placement (``admission.nodes``)
keeps a gang off every ``NoSchedule``/``NoExecute`` taint its pods do not tolerate and restarts a
gang whose node got a ``NoExecute`` taint (``job.disruption``), with ``Toleration.tolerates``:
kube-scheduler's ``TaintToleration`` filter (``ToleratesTaint``: an empty ``effect`` matches every
effect; an empty ``key``, which Kubernetes allows only with ``Exists``, every key; ``Exists``
every value, ``Equal`` (or no operator) the same value). It must mirror kube-scheduler: a gang
placed where the scheduler then refuses a pod holds its reservation for nothing.

Why some tolerations are the admin's to grant: the tenant who writes a PyTorchJob's templates
gets them in the pods the controller creates, so a toleration in a template decides which taints
of the pool keep those pods away. Rules (``escapes``, one function):

1. A toleration with no key (``operator: Exists``) and an effect of ``NoSchedule``, ``NoExecute``
   or none tolerates *every* taint of that effect: torchgate's quarantine, a cordon, a
   health agent's ``NoExecute`` taint on a failing GPU, whatever the admin will add. Pods would
   be placed onto such nodes and left on them (the gang is never restarted off a sick node, whose
   faults then never count towards its quarantine). Naming the taint (``key: nvidia.com/gpu,
   operator: Exists``) is the form a job needs.
2. A toleration of a ``RESERVED_TAINTS`` key, whatever its value: torchgate's quarantine taint
   (``torchgate.io/quarantine``, whose value is the cause) and the cordon's
   (``node.kubernetes.io/unschedulable``: kube-scheduler's ``NodeUnschedulable`` filter lets a pod
   tolerating it onto a cordoned node). Both are ``NoSchedule``; a toleration of them with
   another effect tolerates nothing.

``PreferNoSchedule`` is only a preference and escapes nothing; tolerating a named health taint
(``node.kubernetes.io/not-ready``, ``unreachable``, for ``tolerationSeconds`` or not) is the
job's own choice and takes nothing from the admin: torchgate judges a lost node by its
``Ready`` condition, not by those taints. The webhook refuses what ``escapes`` returns, at
``...template.spec.tolerations[i]``, unless the policy says ``allowPrivileged`` or wrote the
toleration itself (its ``tolerations``, compared as JSON compares them: ``PlacementPolicy.wrote``).

Why the syntax of a toleration is declared here too: the apiserver refuses a pod holding a
toleration it cannot decode or validate, so a template holding one gives a job whose pods are
never created; a policy's tolerations are copied into every template by the mutating webhook, so
one the apiserver refuses would do that to every job of the policy. The webhook (a template's
``tolerations``, the ``scheduler.alpha.kubernetes.io/tolerations`` annotation) and the policy
parser refuse them with the same two functions, a reading of k8s.io/kubernetes v1.37.2 (v1.36.3
reads alike):

3. ``entry_errors``: a pod's ``tolerations[i]`` as the apiserver decodes it (``sigs.k8s.io/json``:
   field names match case-sensitively, an unknown one is dropped, ``null`` leaves the zero
   value): an object or ``null``; ``key``, ``operator``, ``value``, ``effect`` strings;
   ``tolerationSeconds`` an integer within int64 (``1.5``, ``"5"``, ``true`` fail the decode,
   the whole pod with them). Invalid at the entry or the field; then rule 4.
4. ``toleration_errors``: ``ValidateTolerations`` (``pkg/apis/core/validation``) of one
   toleration: a ``key``, when set, is a qualified name (Invalid at ``key``); an empty ``key``
   needs ``operator: Exists`` (Invalid at ``operator``); ``tolerationSeconds`` needs
   ``effect: NoExecute`` (Invalid at ``effect``); ``Equal`` or no operator needs a label value
   (Invalid at ``operator``, where Kubernetes reports it), ``Exists`` an empty value (Invalid at
   ``operator``); another operator is NotSupported (``Lt``/``Gt`` are behind the alpha gate
   ``TaintTolerationComparisonOperators``, off by default); an ``effect``, when set, is one of
   ``TAINT_EFFECTS`` (NotSupported).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from torchgate.pytorchjob import names
from torchgate.pytorchjob.digits import INT64
from torchgate.pytorchjob.fieldpath import FieldError, FieldPath, invalid, not_supported
from torchgate.pytorchjob.spec import as_list, as_text

BLOCKING_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_OPERATORS: Final = ("Equal", "Exists")
COMPARISON_OPERATORS: Final = ("Lt", "Gt")
"""Numeric operators behind the alpha gate ``TaintTolerationComparisonOperators`` (off)."""
TAINT_UNSCHEDULABLE: Final = "node.kubernetes.io/unschedulable"
RESERVED_TAINTS: Final = {
    names.TAINT_QUARANTINE: "torchgate's quarantine of a failing node",
    TAINT_UNSCHEDULABLE: "a cordon (kubectl cordon, drain)",
}
"""``NoSchedule`` taints only the admin may let pods tolerate (rule 2), and what they mean."""
EVERY_TAINT: Final = ""
"""What ``escapes`` returns for a toleration of every key (rule 1)."""


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint."""

    key: str
    value: str
    effect: str
    added: str = ""  # ``timeAdded`` (RFC 3339; Kubernetes sets it on NoExecute taints only)

    def __str__(self) -> str:
        value = f"={self.value}" if self.value else ""
        return f"{self.key}{value}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration (``operator`` empty means ``Equal``).

    ``seconds`` (``tolerationSeconds``) bounds how long a ``NoExecute`` taint is tolerated once
    added; placement ignores it, as kube-scheduler does (``job.disruption`` counts it).
    """

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ``Toleration.ToleratesTaint``: empty key with ``Exists`` matches all."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return False


def toleration_of(raw: Mapping[str, Any]) -> Toleration:
    """One toleration as Kubernetes reads it (a missing operator is ``Equal``)."""
    return Toleration(
        as_text(raw.get("key")),
        as_text(raw.get("operator")) or "Equal",
        as_text(raw.get("value")),
        as_text(raw.get("effect")),
        _seconds(raw.get("tolerationSeconds")),
    )


def tolerations_of(pod_spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    """The well-formed tolerations of a pod spec."""
    return tuple(
        toleration_of(t) for t in as_list(pod_spec.get("tolerations")) if isinstance(t, Mapping)
    )


def _seconds(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def escapes(toleration: Toleration) -> str | None:
    """The taint key ``toleration`` lets a pod past that only the admin may (``EVERY_TAINT``: all).

    ``None`` when it escapes nothing the admin keeps pods off (rules in the module docstring).
    Each answer agrees with ``tolerates``: a key is returned exactly when the toleration tolerates
    some taint of that key with the effect the rule is about.
    """
    if toleration.operator not in ("Exists", "Equal", ""):
        return None  # ``Lt``/``Gt`` (behind a feature gate) compare numbers: tolerated nowhere here
    if not toleration.key:  # ``Equal`` without a key (Kubernetes refuses it) matches every key
        return EVERY_TAINT if toleration.effect in ("", *BLOCKING_EFFECTS) else None
    if toleration.key not in RESERVED_TAINTS or toleration.effect not in ("", "NoSchedule"):
        return None
    return toleration.key


_TEXT_FIELDS: Final = ("key", "operator", "value", "effect")


def entry_errors(entry: object, path: FieldPath) -> list[FieldError]:
    """A pod's ``tolerations[i]`` as the apiserver decodes and validates it (rules 3 and 4)."""
    if entry is None:
        return toleration_errors(Toleration(operator=""), path)
    if not isinstance(entry, Mapping):
        return [invalid(path, entry, "must be a toleration object")]
    found: list[FieldError] = []
    for field in _TEXT_FIELDS:
        text = entry.get(field)
        if text is not None and not isinstance(text, str):
            found.append(invalid(path.child(field), text, "must be a string (quote it)"))
    seconds = entry.get("tolerationSeconds")
    if seconds is not None and (type(seconds) is not int or seconds not in INT64):
        found.append(
            invalid(path.child("tolerationSeconds"), seconds, "must be an integer (int64)")
        )
    if found:
        return found  # the decode fails: nothing is validated
    return toleration_errors(
        Toleration(
            entry.get("key") or "",
            entry.get("operator") or "",
            entry.get("value") or "",
            entry.get("effect") or "",
            seconds,
        ),
        path,
    )


def toleration_errors(toleration: Toleration, path: FieldPath) -> list[FieldError]:
    """``ValidateTolerations`` of one decoded toleration at ``path`` (rule 4)."""
    found: list[FieldError] = []
    key, operator, value, effect = (
        toleration.key,
        toleration.operator,
        toleration.value,
        toleration.effect,
    )
    if key:
        found.extend(invalid(path.child("key"), key, m) for m in names.label_key_errors(key))
    elif operator != "Exists":
        found.append(
            invalid(
                path.child("operator"),
                operator,
                'operator must be Exists when `key` is empty, which means "match all values and '
                'all keys"',
            )
        )
    if toleration.seconds is not None and effect != "NoExecute":
        found.append(
            invalid(
                path.child("effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            )
        )
    if operator in ("Equal", ""):
        messages = names.label_value_errors(value)
        if messages:
            found.append(invalid(path.child("operator"), value, ";".join(messages)))
    elif operator == "Exists":
        if value:
            found.append(
                invalid(
                    path.child("operator"), value, "value must be empty when `operator` is 'Exists'"
                )
            )
    elif operator in COMPARISON_OPERATORS:
        supported = (*TOLERATION_OPERATORS, *COMPARISON_OPERATORS)
        found.append(not_supported(path.child("operator"), operator, supported))
    else:
        found.append(not_supported(path.child("operator"), operator, TOLERATION_OPERATORS))
    if effect and effect not in TAINT_EFFECTS:
        found.append(not_supported(path.child("effect"), effect, TAINT_EFFECTS))
    return found
