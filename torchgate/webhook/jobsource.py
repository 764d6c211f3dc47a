"""The stored PyTorchJob a review of its ``scale`` subresource is about, read live.

Why: ``kubectl scale pytorchjob`` and an HPA write the job's ``scale`` subresource, and the
apiserver sends such a review with an ``autoscaling/v1`` Scale (the new Worker count), not the
job; the validating route needs the job to judge the scale (``validation.scaling``). Why one GET
and not a cache: scales are rare (a user's ``kubectl scale``, an HPA's sync of an elastic job)
and a cache of every job would cost the webhook memory and a watch it otherwise never needs. The
read is bounded by ``READ_TIMEOUT_SECONDS``, well under the configurations' ``timeoutSeconds``
(5), so a slow apiserver gives the user a clear refusal, not the apiserver's "context deadline
exceeded". A failed read is said in one line; the review refuses the scale with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Final

from torchgate.kube.client import KubeApi
from torchgate.kube.errors import ApiError, NotFound
from torchgate.kube.resources import PYTORCHJOBS

READ_TIMEOUT_SECONDS: Final = 2.0


class StoredJobs:
    """Reads one PyTorchJob by namespace and name (``get`` on ``pytorchjobs``)."""

    def __init__(self, api: KubeApi, *, timeout: float = READ_TIMEOUT_SECONDS) -> None:
        self.api = api
        self.timeout = timeout

    async def read(self, namespace: str, name: str) -> Mapping[str, Any] | str:
        """The stored job, or why it could not be read (one line, for the refusal)."""
        what = f"PyTorchJob {namespace}/{name}"
        try:
            async with asyncio.timeout(self.timeout):
                job = await self.api.request("GET", PYTORCHJOBS.path(namespace, name))
        except NotFound:
            return f"{what} not found"
        except ApiError as exc:
            return f"could not read {what}: {exc}"
        except TimeoutError:
            return f"could not read {what} within {self.timeout:g}s"
        if not isinstance(job, Mapping):
            return f"could not read {what}: the apiserver answered no object"
        return job
