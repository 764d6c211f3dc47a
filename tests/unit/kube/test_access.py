"""TokenReview and SubjectAccessReview, cached: answers kept for a while, tokens never."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from torchgate.kube.access import AccessReviews, Attributes, User, bearer_token


class Apiserver:
    def __init__(self) -> None:
        self.reviews: list[dict[str, Any]] = []
        self.allow = True

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        self.reviews.append(kw["body"])
        if kw["body"]["kind"] == "TokenReview":
            if kw["body"]["spec"]["token"] != "good":
                return {"status": {"authenticated": False}}
            user = {"username": "u", "uid": "1", "groups": ["g"], "extra": {"k": ["v"]}}
            return {"status": {"authenticated": True, "user": user}}
        return {"status": {"allowed": self.allow}}

    async def watch(self, path: str, query: Mapping[str, str]) -> AsyncIterator[dict[str, Any]]:
        for _ in ():
            yield {}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


ASK = Attributes("get", "torchgate.io", "pools")


async def test_a_token_is_reviewed_once_per_ttl_and_kept_by_its_digest() -> None:
    apiserver, clock = Apiserver(), Clock()
    reviews = AccessReviews(apiserver, ttl=60, clock=clock)  # type: ignore[arg-type]

    first = await reviews.authenticate("good")
    again = await reviews.authenticate("good")
    clock.now = 61
    later = await reviews.authenticate("good")

    assert first == again == later == User("u", "1", ("g",), {"k": ("v",)})
    assert len(apiserver.reviews) == 2
    assert all("good" not in str(key) for key in reviews._users.entries)


async def test_a_denial_is_kept_shorter_than_an_allowance() -> None:
    apiserver, clock = Apiserver(), Clock()
    reviews = AccessReviews(apiserver, ttl=60, negative_ttl=5, clock=clock)  # type: ignore[arg-type]
    user = User("u", groups=("g",))
    apiserver.allow = False

    assert not await reviews.authorize(user, ASK)
    apiserver.allow = True
    assert not await reviews.authorize(user, ASK), "still the cached denial"
    clock.now = 6
    assert await reviews.authorize(user, ASK)

    sar = apiserver.reviews[-1]["spec"]
    assert (sar["user"], sar["groups"]) == ("u", ["g"])
    assert sar["resourceAttributes"] == {
        "verb": "get",
        "group": "torchgate.io",
        "resource": "pools",
    }


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        (None, None),
    ],
    ids=["bearer", "spacing", "basic", "empty", "absent"],
)
def test_only_bearer_tokens_are_read(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token
