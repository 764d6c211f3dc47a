"""AdmissionReview in, AdmissionReview out: the pure core of both webhook routes.

Two channels, as in kopf: a request that is not a well-formed ``admission.k8s.io/v1``
AdmissionReview (bad JSON, no ``request.uid``, no object) raises ``BadReview`` and the server
answers HTTP 400; everything else is a decision, answered HTTP 200 with the request's
``apiVersion``, ``kind`` and ``uid`` echoed. A denial carries a ``Status`` with code 422, reason
``Invalid`` and one ``details.causes`` entry per field error, the shape the apiserver itself uses
for invalid objects, so ``kubectl`` prints every cause.

A review of a job's ``scale`` subresource (``kubectl scale``, an HPA: ``request.subResource``
``scale``, ``request.resource`` ``pytorchjobs``, an ``autoscaling/v1`` Scale in ``request.kind``
and ``request.object``) is judged on the stored job, which the server reads for it
(``scale_subject`` names it): ``validation.validate_scale`` on the Scale's ``spec.replicas``. A
job that could not be read refuses the scale with the reason (code 503, fail closed).

A CREATE or UPDATE of an admin object, a ``torchgate.io`` PlacementPolicy or TeamQuota, is judged
by the parser the webhook's cache and the controller load it with (``ADMIN_OBJECTS``: one
declaration, no second validator), so a policy that would be left out once stored is refused at
``kubectl apply`` instead, every error at its field path in the same Status as a job's denial
(naming the object's own kind and group). Only the object written is judged: an UPDATE that
fixes a policy stored invalid (while the webhook was down) is allowed, and DELETE never comes
here. A TeamQuota is also judged against the teams the webhook knows (``team_for``): a namespace
it newly lists that another team owns is refused (``pool.claimed_elsewhere``), as the controller
would otherwise leave the later of the two teams by name out, with all its namespaces.
A PlacementPolicy that parses is allowed, with a warning for each stored policy it ties with
(``policyties``: the same priority on some namespace where nothing above them matches, so only
the names decide which one applies), naming the other policy, the namespaces and why.

``evaluate`` is what ``torchgate check`` runs offline: exactly the mutating route's defaulting
followed by the validating route's checks on the defaulted object, and, as on a cluster, the first
step that refuses the job gives the verdict alone: the apiserver stops at the mutating webhook's
denial, and at its own validation of the mutated object (the CRD's schema, which ``check`` passes
as ``between``) before asking the validating webhook.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson
import pybase64

from torchgate.pytorchjob import names
from torchgate.pytorchjob.devices import NO_CLAIMS, ClaimLookup
from torchgate.pytorchjob.fieldpath import (
    FieldError,
    FieldPath,
    FieldWarning,
    dedupe,
    render_warnings,
)
from torchgate.pytorchjob.policy import PlacementPolicy, parse_policy
from torchgate.pytorchjob.policyties import tie_warning, ties_of
from torchgate.pytorchjob.pool import (
    QUOTA_KIND,
    QUOTA_PLURAL,
    TeamQuota,
    claimed_elsewhere,
    parse_team_quota,
)
from torchgate.webhook.defaulting import Defaulted, default_job
from torchgate.webhook.validation import Team, validate_create, validate_scale, validate_update

ADMISSION_API_VERSION = "admission.k8s.io/v1"
# isinstance() tries the exact JSON type first; the ABC check alone is several times slower.
_OBJECT: Final = (dict, Mapping)
PolicyLookup = Callable[[str], PlacementPolicy]
PolicyListing = Callable[[], Iterable[PlacementPolicy]]  # the valid policies the webhook holds
TeamLookup = Callable[[str], Team | None]
ClaimsLookup = Callable[[str], ClaimLookup]  # what the webhook sees of DRA in a namespace
# The job a review of its scale subresource scales, as read from the apiserver, or why it could
# not be read (one line).
StoredJob = Mapping[str, Any] | str
SCALE: Final = "scale"
AdminParser = Callable[[object], tuple[object | None, list[FieldError]]]
# The torchgate.io objects the validating route judges, by resource: their kind and the parser
# that loads them everywhere else (webhook.policysource, controller.admission.poolsource).
ADMIN_OBJECTS: Final[Mapping[str, tuple[str, AdminParser]]] = {
    names.POLICY_PLURAL: (names.POLICY_KIND, parse_policy),
    QUOTA_PLURAL: (QUOTA_KIND, parse_team_quota),
}


class BadReview(ValueError):
    """The body is not an AdmissionReview we can answer (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Defaulting then validation of one object, as ``torchgate check`` reports it."""

    allowed: bool
    errors: tuple[FieldError, ...]
    warnings: tuple[FieldWarning, ...]
    patch: list[dict[str, Any]]
    object: Any


def evaluate(
    job: Mapping[str, Any],
    policy: PlacementPolicy,
    *,
    old: Mapping[str, Any] | None = None,
    team: Team | None = None,
    between: Callable[[Any], Sequence[FieldError]] = lambda _: (),
) -> Evaluation:
    """Run the mutating webhook's defaulting, then the validating webhook's rules.

    A CREATE of ``job``, or, given the stored ``old``, an UPDATE of it to ``job``, each judged as
    the two routes judge it. ``between`` is what the apiserver checks of the mutated object
    before the validating webhook is asked. A refusal by the mutating webhook or by ``between``
    is the verdict: later steps are not asked, as on a cluster.
    """
    defaulted = default_job(job, policy, old=old)
    refused = defaulted.errors or between(defaulted.object)
    if refused:
        return Evaluation(
            allowed=False,
            errors=tuple(dedupe(refused)),
            warnings=tuple(defaulted.warnings),
            patch=defaulted.patch,
            object=defaulted.object,
        )
    verdict = (
        validate_create(defaulted.object, policy, team=team)
        if old is None
        else validate_update(old, defaulted.object, policy, team=team)
    )
    errors = tuple(dedupe(verdict.errors))  # the defaulting refused nothing (above)
    return Evaluation(
        allowed=not errors,
        errors=errors,
        warnings=(*defaulted.warnings, *verdict.warnings),
        patch=defaulted.patch,
        object=defaulted.object,
    )


def parse_review(body: bytes) -> dict[str, Any]:
    """Decode and sanity-check an AdmissionReview body; raise ``BadReview`` with a short reason."""
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview(f"body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise BadReview("body must be a JSON object (an AdmissionReview)")
    if review.get("kind") != "AdmissionReview":
        raise BadReview("kind must be AdmissionReview")
    if review.get("apiVersion") != ADMISSION_API_VERSION:
        raise BadReview(f"apiVersion must be {ADMISSION_API_VERSION}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("request must be an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid must be a non-empty string")
    operation = request.get("operation")
    if operation in ("CREATE", "UPDATE") and not isinstance(request.get("object"), dict):
        raise BadReview(f"request.object must be an object for {operation}")
    if operation == "UPDATE" and not isinstance(request.get("oldObject"), dict):
        raise BadReview("request.oldObject must be an object for UPDATE")
    return review


def mutate(
    review: Mapping[str, Any], policy_for: PolicyLookup, claims_for: ClaimsLookup | None = None
) -> dict[str, Any]:
    """Answer the mutating route: defaults as a JSON Patch plus ``torchgate:`` warnings."""
    request = review["request"]
    if not _is_ours(request) or request.get("operation") not in ("CREATE", "UPDATE"):
        return allowed_answer(review)
    job = request["object"]
    namespace = namespace_of(request)
    policy = policy_for(namespace)
    claims = claims_for(namespace) if claims_for is not None else NO_CLAIMS
    old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
    defaulted: Defaulted = default_job(job, policy, old=old, claims=claims)
    warnings = render_warnings(defaulted.warnings)
    if defaulted.errors:
        return respond(review, errors=defaulted.errors, warnings=warnings, job=job)
    return respond(review, allowed=True, patch=defaulted.patch, warnings=warnings)


def validate(
    review: Mapping[str, Any],
    policy_for: PolicyLookup,
    team_for: TeamLookup | None = None,
    claims_for: ClaimsLookup | None = None,
    stored: StoredJob | None = None,
    *,
    policies: PolicyListing | None = None,
) -> dict[str, Any]:
    """Answer the validating route: allow, or deny with every field error.

    ``team_for`` gives the TeamQuota owning a namespace (``None``: no quota applies there);
    ``policies`` the stored PlacementPolicies a written one may tie with (``None``: none);
    ``claims_for`` what the webhook sees of DRA there (``None``: nothing). A review of a job's
    ``scale`` subresource carries an ``autoscaling/v1`` Scale, not the job: ``stored`` is the job
    the server read for it (``scale_subject``), or why it could not; without one it is refused.
    """
    request = review["request"]
    if request.get("subResource") == SCALE:
        return _validate_scale(review, stored, policy_for, team_for, claims_for)
    admin = _admin_object(request)
    if admin is not None:
        return _validate_admin_object(review, *admin, team_for, policies)
    operation = request.get("operation")
    if not _is_ours(request) or operation not in ("CREATE", "UPDATE"):
        return allowed_answer(review)
    job = request["object"]
    namespace = namespace_of(request)
    policy = policy_for(namespace)
    team = team_for(namespace) if team_for is not None else None
    claims = claims_for(namespace) if claims_for is not None else NO_CLAIMS
    if operation == "CREATE":
        # The generic registry's BeforeCreate (FillObjectMetaSystemFields) gives every new object
        # its uid before validating admission: on this route a uid is never the user's.
        verdict = validate_create(job, policy, team=team, uid_from_server=True, claims=claims)
    else:
        verdict = validate_update(request["oldObject"], job, policy, team=team, claims=claims)
    if verdict.errors:
        warnings = render_warnings(verdict.warnings)
        return respond(review, errors=verdict.errors, warnings=warnings, job=job)
    if not verdict.warnings:  # the usual answer
        return allowed_answer(review)
    return respond(review, allowed=True, warnings=render_warnings(verdict.warnings))


def scale_subject(request: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the PyTorchJob a review of its ``scale`` subresource is about.

    ``None`` for every other review, and for a scale review naming no job (``validate`` refuses
    that one: there is nothing to read).
    """
    if request.get("subResource") != SCALE or not _is_our_resource(request):
        return None
    name = request.get("name")
    if not isinstance(name, str) or not name:
        return None
    return namespace_of(request), name


def _admin_object(request: Mapping[str, Any]) -> tuple[str, AdminParser] | None:
    """The kind and parser of the torchgate.io admin object a review is about, if it is one."""
    resource = request.get("resource")
    if not isinstance(resource, _OBJECT) or resource.get("group") != names.POLICY_GROUP:
        return None
    if request.get("subResource"):  # status: the webhook's and the controller's own reports
        return None
    return ADMIN_OBJECTS.get(str(resource.get("resource")))


def _validate_admin_object(
    review: Mapping[str, Any],
    kind: str,
    parse: AdminParser,
    team_for: TeamLookup | None,
    policies: PolicyListing | None,
) -> dict[str, Any]:
    """A PlacementPolicy or TeamQuota written: refused with every error its parser finds.

    A TeamQuota that parses is refused too for the namespaces it newly claims from another team;
    a PlacementPolicy that parses is allowed with a warning per stored policy it ties with.
    """
    request = review["request"]
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return allowed_answer(review)
    written = request["object"]
    parsed, errors = parse(written)
    if isinstance(parsed, TeamQuota) and team_for is not None:
        old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
        errors = claimed_elsewhere(parsed, lambda ns: _owner(team_for, ns), _listed(old))
    if isinstance(parsed, PlacementPolicy) and policies is not None:
        warnings = tie_warnings(parsed, policies())
        if warnings:
            return respond(review, allowed=True, warnings=render_warnings(warnings))
    if not errors:
        return allowed_answer(review)
    return respond(review, errors=errors, job=written, kind=kind, group=names.POLICY_GROUP)


_PRIORITY: Final = FieldPath.root("spec").child("priority")


def tie_warnings(written: PlacementPolicy, stored: Iterable[PlacementPolicy]) -> list[FieldWarning]:
    """A ``spec.priority`` warning per stored policy ``written`` ties with (``policyties``)."""
    return [
        FieldWarning(_PRIORITY, tie_warning(tie, written.name)) for tie in ties_of(written, stored)
    ]


def _owner(team_for: TeamLookup, namespace: str) -> str | None:
    team = team_for(namespace)
    return None if team is None else team.quota.name


def _listed(quota: object) -> list[str]:
    """The namespaces a stored TeamQuota lists, however malformed the rest of it."""
    spec = quota.get("spec") if isinstance(quota, _OBJECT) else None
    listed = spec.get("namespaces") if isinstance(spec, _OBJECT) else None
    if not isinstance(listed, list):
        return []
    return [namespace for namespace in listed if isinstance(namespace, str)]


def _validate_scale(
    review: Mapping[str, Any],
    stored: StoredJob | None,
    policy_for: PolicyLookup,
    team_for: TeamLookup | None,
    claims_for: ClaimsLookup | None,
) -> dict[str, Any]:
    """A scale of a job's Workers, judged on the stored job (``validation.scaling``)."""
    request = review["request"]
    if not _is_our_resource(request) or request.get("operation") != "UPDATE":
        return allowed_answer(review)
    if stored is None:
        named = scale_subject(request) is not None
        stored = "the PyTorchJob was not read" if named else "the review names no PyTorchJob"
    if isinstance(stored, str):
        return respond(review, status=unavailable_status(f"cannot judge this scale: {stored}"))
    scale = request["object"]
    spec = scale.get("spec")
    replicas = spec.get("replicas") if isinstance(spec, _OBJECT) else None
    namespace = namespace_of(request)
    team = team_for(namespace) if team_for is not None else None
    claims = claims_for(namespace) if claims_for is not None else NO_CLAIMS
    verdict = validate_scale(stored, replicas, policy_for(namespace), team=team, claims=claims)
    warnings = render_warnings(verdict.warnings)
    if verdict.errors:
        return respond(review, errors=verdict.errors, warnings=warnings, job=stored)
    return respond(review, allowed=True, warnings=warnings)


def unavailable_status(message: str) -> dict[str, Any]:
    """A ``Status`` 503: the webhook could not learn what it needs to decide (fail closed)."""
    return {
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "ServiceUnavailable",
        "code": 503,
    }


def allowed_answer(review: Mapping[str, Any]) -> dict[str, Any]:
    """``respond(review, allowed=True)``: the plain allowed answer, built directly."""
    return {
        "apiVersion": review["apiVersion"],
        "kind": review["kind"],
        "response": {"uid": review["request"]["uid"], "allowed": True},
    }


def forecast_subject(review: Mapping[str, Any]) -> dict[str, Any] | None:
    """The job a forecast is asked for: a PyTorchJob being created, with its namespace set."""
    request = review["request"]
    if not _is_ours(request) or request.get("operation") != "CREATE":
        return None
    job = request.get("object")
    if not isinstance(job, Mapping):
        return None
    metadata = job.get("metadata")
    metadata = dict(metadata) if isinstance(metadata, Mapping) else {}
    metadata["namespace"] = namespace_of(request)
    return {**job, "metadata": metadata}


def with_warning(answer: dict[str, Any], warning: str) -> dict[str, Any]:
    """``answer`` (an AdmissionReview response) with one more warning, last."""
    response = answer["response"]
    response["warnings"] = [*response.get("warnings", ()), warning]
    return answer


def respond(
    review: Mapping[str, Any],
    *,
    allowed: bool = False,
    patch: Sequence[Mapping[str, Any]] = (),
    warnings: Sequence[str] = (),
    errors: Sequence[FieldError] = (),
    job: Any = None,
    status: Mapping[str, Any] | None = None,
    kind: str = names.KIND,
    group: str = names.GROUP,
) -> dict[str, Any]:
    """Build the response AdmissionReview (echoing apiVersion, kind and uid).

    ``errors`` become an Invalid Status about ``job``, an object of ``kind`` in ``group``.
    """
    response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": allowed and not errors}
    if patch and response["allowed"]:
        response["patchType"] = "JSONPatch"
        # pybase64: SIMD base64, an order of magnitude cheaper than binascii for a patch of KBs.
        response["patch"] = pybase64.b64encode_as_string(_json_bytes(list(patch)))
    if errors:
        response["status"] = invalid_status(errors, job, kind=kind, group=group)
    elif status is not None:
        response["status"] = dict(status)
    if warnings:
        response["warnings"] = list(warnings)
    return {"apiVersion": review["apiVersion"], "kind": review["kind"], "response": response}


def _json_bytes(value: Any) -> bytes:
    """JSON of ``value``: orjson, or the standard library for what orjson refuses.

    orjson stops at 64-bit integers and 255 levels of nesting; JSON has neither limit, and a
    patch can carry both (a sum of user counts, a copied user value), so they must not become an
    internal error.
    """
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def invalid_status(
    errors: Sequence[FieldError], job: Any, *, kind: str = names.KIND, group: str = names.GROUP
) -> dict[str, Any]:
    """A ``Status`` like the apiserver's for an invalid object (``errors.NewInvalid``)."""
    name = ""
    if isinstance(job, Mapping) and isinstance(job.get("metadata"), Mapping):
        name = str(job["metadata"].get("name") or job["metadata"].get("generateName") or "")
    texts = [str(error) for error in errors]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return {
        "metadata": {},
        "status": "Failure",
        "message": f'{kind}.{group} "{name}" is invalid: {joined}',
        "reason": "Invalid",
        "details": {
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [
                {"reason": e.type.value, "field": e.field, "message": e.body()} for e in errors
            ],
        },
        "code": 422,
    }


def internal_error(review: Mapping[str, Any], message: str) -> dict[str, Any]:
    """Deny with code 500 (fail closed) when our own code failed."""
    status = {"metadata": {}, "status": "Failure", "message": message, "code": 500}
    status["reason"] = "InternalError"
    return respond(review, allowed=False, status=status)


def _is_ours(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind")
    return (
        isinstance(kind, _OBJECT)
        and kind.get("group") == names.GROUP
        and kind.get("kind") == names.KIND
    )


def _is_our_resource(request: Mapping[str, Any]) -> bool:
    """The request is about PyTorchJobs (their subresources too), whatever ``kind`` it carries."""
    resource = request.get("resource")
    return (
        isinstance(resource, _OBJECT)
        and resource.get("group") == names.GROUP
        and resource.get("resource") == names.PLURAL
    )


def namespace_of(request: Mapping[str, Any]) -> str:
    """The namespace a review's object is in (``default`` when it names none)."""
    namespace = request.get("namespace")
    if isinstance(namespace, str) and namespace:
        return namespace
    job = request.get("object")
    metadata = job.get("metadata") if isinstance(job, _OBJECT) else None
    value = metadata.get("namespace") if isinstance(metadata, _OBJECT) else None
    return value if isinstance(value, str) and value else "default"
