"""Who is calling, and may they: TokenReview and SubjectAccessReview, with their answers cached.

Why: torchgate's own HTTPS endpoint (the controller's pool service) is called by the webhook and
by people's command lines with a bearer token. The apiserver says whose token it is
(TokenReview) and what RBAC lets that user do (SubjectAccessReview), the way kube-rbac-proxy and
controller-runtime's metrics filter ask, so access is granted with ordinary RBAC and nothing is
trusted for arriving on the network. Answers are kept for ``ttl`` seconds (unknown tokens and
denials for ``negative_ttl``), so the webhook calling on every admission costs the apiserver a
couple of requests a minute, not two per admission.

Rules:

1. ``authenticate``: the user an authenticated token belongs to, else ``None``; answers are keyed
   by the token's SHA-256, never by the token.
2. ``authorize``: whether RBAC lets the user do ``Attributes`` (a verb on a resource, in a
   namespace or cluster-wide, optionally on one name). The resource may be virtual (``create
   forecasts.torchgate.io``): RBAC grants what it is asked about.
3. A review the apiserver does not answer is an ``ApiError`` for the caller to turn into 503;
   it is not cached.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from torchgate.kube.client import KubeApi
from torchgate.kube.resources import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS

MAX_ENTRIES: Final = 4096


@dataclass(frozen=True, slots=True)
class User:
    """An authenticated user, as TokenReview reports it."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Attributes:
    """What a SubjectAccessReview asks: a verb on a resource (``namespace`` empty: cluster)."""

    verb: str
    group: str
    resource: str
    namespace: str = ""
    name: str = ""

    def as_spec(self) -> dict[str, str]:
        """``spec.resourceAttributes`` of the review."""
        out = {"verb": self.verb, "group": self.group, "resource": self.resource}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.name:
            out["name"] = self.name
        return out


class _Expiring:
    """Answers kept until their deadline, at most ``MAX_ENTRIES`` (the oldest go first)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.entries: dict[object, tuple[float, Any]] = {}

    def get(self, key: object) -> tuple[bool, Any]:
        found = self.entries.get(key)
        if found is None or found[0] <= self.clock():
            self.entries.pop(key, None)
            return False, None
        return True, found[1]

    def put(self, key: object, value: Any, seconds: float) -> None:
        if len(self.entries) >= MAX_ENTRIES:
            del self.entries[next(iter(self.entries))]
        self.entries[key] = (self.clock() + seconds, value)


class AccessReviews:
    """TokenReview and SubjectAccessReview, cached (see the module docstring)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        ttl: float = 60.0,
        negative_ttl: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.ttl = ttl
        self.negative_ttl = negative_ttl
        self._users = _Expiring(clock)
        self._decisions = _Expiring(clock)

    async def authenticate(self, token: str) -> User | None:
        """The token's user, or ``None`` when the apiserver does not accept it (rule 1)."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        known, user = self._users.get(digest)
        if known:
            return user  # type: ignore[no-any-return]
        review = await self.api.request(
            "POST",
            TOKEN_REVIEWS.path(),
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
        found = _user_of(review)
        self._users.put(digest, found, self.ttl if found is not None else self.negative_ttl)
        return found

    async def authorize(self, user: User, attributes: Attributes) -> bool:
        """Whether RBAC lets ``user`` do ``attributes`` (rule 2)."""
        key = (user.name, user.uid, user.groups, tuple(sorted(user.extra.items())), attributes)
        known, allowed = self._decisions.get(key)
        if known:
            return bool(allowed)
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "resourceAttributes": attributes.as_spec(),
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {name: list(values) for name, values in user.extra.items()}
        review = await self.api.request(
            "POST",
            SUBJECT_ACCESS_REVIEWS.path(),
            body={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": spec,
            },
        )
        status = review.get("status") if isinstance(review, Mapping) else None
        decision = isinstance(status, Mapping) and status.get("allowed") is True
        self._decisions.put(key, decision, self.ttl if decision else self.negative_ttl)
        return decision


def _user_of(review: object) -> User | None:
    status = review.get("status") if isinstance(review, Mapping) else None
    if not isinstance(status, Mapping) or status.get("authenticated") is not True:
        return None
    user = status.get("user")
    if not isinstance(user, Mapping) or not isinstance(user.get("username"), str):
        return None
    groups = user.get("groups")
    extra = user.get("extra")
    return User(
        name=user["username"],
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in groups) if isinstance(groups, list) else (),
        extra={
            str(name): tuple(str(v) for v in values)
            for name, values in (extra.items() if isinstance(extra, Mapping) else ())
            if isinstance(values, list)
        },
    )


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, else ``None``."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None
