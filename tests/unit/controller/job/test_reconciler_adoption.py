"""The reconciler adopts a job's orphaned Service as Kubernetes' ControllerRefManager does.

Over an API that stores Services and answers an adoption patch as the apiserver does: the
patch must be a strategic merge patch carrying the Service's uid (409 when it names another),
and a second controlling reference is refused (422). The job is read past the cache first: a
job replaced by a new uid adopts nothing. Assertions read the API's store and the requests it
was sent.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from tests.unit.controller.job.test_reconciler_name_holders import (
    KEY,
    MASTER,
    Rig,
    ServicesApi,
    status_error,
)
from torchgate.kube.client import STRATEGIC_MERGE_PATCH
from torchgate.kube.errors import ApiError


class AdoptingApi(ServicesApi):
    """``ServicesApi`` that also serves the job by GET and adoption patches of Services."""

    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__(job)
        self.patches: list[tuple[str, Any, str]] = []

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        if method == "GET" and "/pytorchjobs/" in path:
            return copy.deepcopy(self.job)
        if method == "PATCH" and "/services/" in path:
            self.patches.append((path, copy.deepcopy(body), content_type))
            return self._adopt(path, body, content_type)
        return await super().request(
            method, path, query=query, body=body, content_type=content_type
        )

    def _adopt(self, path: str, body: Any, content_type: str) -> Any:
        name = path.rsplit("/", 1)[-1]
        stored = self.services.get(name)
        if stored is None:
            raise status_error(404, "NotFound", path, "PATCH")
        if content_type != STRATEGIC_MERGE_PATCH:
            raise status_error(415, "UnsupportedMediaType", path, "PATCH")
        metadata = stored["metadata"]
        if body["metadata"].get("uid") != metadata["uid"]:
            raise status_error(409, "Conflict", path, "PATCH")  # the precondition
        references = [*metadata.get("ownerReferences", []), *body["metadata"]["ownerReferences"]]
        if sum(1 for r in references if r.get("controller")) > 1:
            raise status_error(422, "Invalid", path, "PATCH")  # one controller only
        metadata["ownerReferences"] = references
        return copy.deepcopy(stored)


def orphan_rig() -> Rig:
    """The job ``sq`` over ``AdoptingApi``."""
    rig = Rig()
    rig.api = AdoptingApi(rig.api.job)
    rig.reconciler.api = rig.api
    return rig


async def _orphan(rig: Rig) -> dict[str, Any]:
    """Let the job make its Service, then strip the reference (what --cascade=orphan leaves)."""
    helper = Rig()
    await helper.reconcile()
    service = copy.deepcopy(helper.api.services[MASTER])
    service["metadata"].pop("ownerReferences")
    service["metadata"]["uid"] = "uid-of-the-service"
    service["metadata"]["resourceVersion"] = "1"
    rig.api.services[MASTER] = copy.deepcopy(service)
    rig.services.remember(copy.deepcopy(service))
    return service


async def test_an_orphaned_service_is_adopted_with_its_uid_as_the_precondition() -> None:
    rig = orphan_rig()
    await _orphan(rig)

    await rig.reconcile()

    assert [(path.rsplit("/", 1)[-1], body, kind) for path, body, kind in rig.api.patches] == [
        (
            MASTER,
            {
                "metadata": {
                    "ownerReferences": [
                        {
                            "apiVersion": "kubeflow.org/v1",
                            "kind": "PyTorchJob",
                            "name": "sq",
                            "uid": rig.uid,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                    "uid": "uid-of-the-service",
                }
            },
            STRATEGIC_MERGE_PATCH,
        )
    ]
    owners = rig.api.services[MASTER]["metadata"]["ownerReferences"]
    assert [o["uid"] for o in owners if o["controller"]] == [rig.uid]
    assert rig.queued().get("reason") != "PodNameConflict"
    assert KEY in rig.waiting(), "queued for admission: the name is the job's own"
    rig.admitter.cycle()
    await rig.reconcile()
    assert sorted(rig.api.created_pods) == [MASTER, "sq-worker-0"]
    assert len(rig.api.patches) == 1, "adopted once"


async def test_a_job_replaced_meanwhile_adopts_nothing() -> None:
    """The cache still has the job; the apiserver has a new one of its name (another uid)."""
    rig = orphan_rig()
    await _orphan(rig)
    rig.api.job["metadata"]["uid"] = "uid-of-the-job-made-again"

    assert await rig.reconcile() is None, "the job's change reconciles it again"

    assert rig.api.patches == []
    assert "ownerReferences" not in rig.api.services[MASTER]["metadata"]
    assert rig.api.created_pods == []


async def test_a_service_another_controller_took_meanwhile_is_not_taken() -> None:
    """The cache shows an orphan; the apiserver has it controlled by another: 422, no write."""
    rig = orphan_rig()
    await _orphan(rig)
    theirs = {"uid": "uid-of-another", "controller": True, "kind": "Other", "name": "x"}
    rig.api.services[MASTER]["metadata"]["ownerReferences"] = [theirs]

    with pytest.raises(ApiError):
        await rig.reconcile()

    assert rig.api.services[MASTER]["metadata"]["ownerReferences"] == [theirs]
    assert rig.api.created_pods == []
