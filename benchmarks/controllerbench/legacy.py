"""The ``(status, body)`` client that ``pool_bench.py`` and ``apiserver_costs.py`` import.

The controller benchmark no longer uses it (it goes through ``torchgate.kube``); these two
scripts still read ``Api.session`` directly (a watch of their own, merge patches), so it stays,
unchanged, until they move to ``KubeClient`` too. Then delete this module.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Any

import aiohttp

from torchgate.controlplane.cluster import ControlPlane


class Api:
    """A minimal async client with the admin token (the benchmark's own load)."""

    def __init__(self, plane: ControlPlane) -> None:
        self.server = plane.server
        context = ssl.create_default_context(cafile=str(plane.ca_file))
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=0),  # bounded() limits each phase
            headers={"Authorization": f"Bearer {plane.token}"},
        )

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One call: (HTTP status, decoded body)."""
        async with self.session.request(method, self.server + path, json=body) as response:
            return response.status, await response.json(content_type=None)

    async def close(self) -> None:
        """Close the session."""
        await self.session.close()


async def clear_namespace(api: Api, namespace: str) -> None:
    """Delete the round's jobs and pods and wait until they are gone: rounds start clean."""
    jobs_path = f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs"
    pods_path = f"/api/v1/namespaces/{namespace}/pods"
    await api.request("DELETE", jobs_path)
    await api.request("DELETE", pods_path + "?gracePeriodSeconds=0")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        jobs_left = (await api.request("GET", jobs_path + "?limit=1"))[1]["items"]
        pods_left = (await api.request("GET", pods_path + "?limit=1"))[1]["items"]
        if not jobs_left and not pods_left:
            return
        await api.request("DELETE", pods_path + "?gracePeriodSeconds=0")
        await asyncio.sleep(1)
    raise RuntimeError(f"namespace {namespace} still has jobs or pods after 300 s")
