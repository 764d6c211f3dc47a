"""The informer against a real apiserver: a list read in pages, each pod kept projected.

The unit tests script the apiserver's ``limit``/``continue`` answers; this checks the real one
hands the informer every pod over several pages at one resourceVersion, and the watch that
follows starts from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc

import pytest

from tests.e2e.conftest import Cluster
from torchgate.kube.client import KubeClient
from torchgate.kube.informer import Informer
from torchgate.kube.resources import PODS

pytestmark = [pytest.mark.e2e]


def test_a_paged_list_brings_every_pod_and_the_watch_follows(cluster: Cluster) -> None:
    namespace = cluster.new_namespace("paged")
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": namespace},
            "spec": {
                "nodeSelector": {"no-such-node": "true"},  # stays Pending: nothing runs it
                "containers": [
                    {
                        "name": "pytorch",
                        "image": "registry.example.com/train:1",
                        "env": [{"name": "BIG", "value": "x" * 500}],
                    }
                ],
            },
        }
        for i in range(5)
    ]
    cluster.apply(pods)

    async def run() -> tuple[set[str], bool]:
        api = await KubeClient.connect(str(cluster.kubeconfig))
        informer = Informer(api, PODS, namespace=namespace, page_size=2)
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.wait_for(informer.synced.wait(), 30)
            listed = {name for _, name in informer.store}
            cluster.apply({**pods[0], "metadata": {**pods[0]["metadata"], "name": "p5"}})
            for _ in range(300):
                if informer.get(namespace, "p5") is not None:
                    break
                await asyncio.sleep(0.1)
            kept = [informer.get(namespace, f"p{i}") for i in range(6)]
            projected = all(
                pod is not None and "env" not in pod["spec"]["containers"][0] for pod in kept
            )
            return listed, projected
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            del task
            gc.collect()  # the cancelled watch's stream: closed by its finalizer, not left open
            await asyncio.sleep(0.1)
            await api.close()

    listed, projected = asyncio.run(run())
    assert listed == {f"p{i}" for i in range(5)}
    assert projected
