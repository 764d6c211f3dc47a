"""With every webhook replica down, a PyTorchJob being deleted still goes away.

The install's webhook configurations (``manifests/base``, which the chart renders the same) are
registered with nothing behind their Service, as when every webhook pod is down. Writes to jobs
are refused (``failurePolicy: Fail``: nothing is admitted unchecked), but deleting a job with the
``Orphan`` or ``Foreground`` propagation, whose finalizer the garbage collector takes off with an
UPDATE, completes: a job being deleted is never sent to the webhook (``matchConditions``), so it
is not kept forever with its finalizer. The real webhook pods going down is
test_install_drills.py; this needs no image and no real node.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests import manifestset as ms
from tests.builders.job import job
from tests.e2e.conftest import Cluster
from tests.e2e.controller_process import get_job

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CONFIGURATION_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@contextlib.contextmanager
def webhook_down(cluster: Cluster) -> Iterator[None]:
    """The install's webhook configurations, with no webhook Service behind them."""
    assert cluster.get("service", "torchgate-webhook", ms.NAMESPACE) is None
    objects = ms.kustomize("base")
    cluster.apply([ms.find(objects, kind, "torchgate") for kind in CONFIGURATION_KINDS])
    try:
        yield
    finally:
        cluster.kubectl(
            "delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "torchgate",
            "--ignore-not-found",
        )  # fmt: skip


def owned_config_map(namespace: str, name: str, owner: dict[str, str]) -> dict[str, object]:
    """A ConfigMap the job owns, so the garbage collector has a dependent to act on."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": owner["name"],
                    "uid": owner["uid"],
                }
            ],
        },
        "data": {"note": "owned by the job"},
    }


@pytest.mark.parametrize("cascade", ["orphan", "foreground"])
def test_a_job_deleted_while_the_webhook_is_down_goes_away(cluster: Cluster, cascade: str) -> None:
    namespace = cluster.new_namespace("webhook-down")
    cluster.apply(job("deleted", namespace).master().workers(1).build())
    stored = get_job(cluster, namespace, "deleted")
    assert stored is not None
    owner = {"name": "deleted", "uid": stored["metadata"]["uid"]}
    cluster.apply(owned_config_map(namespace, "deleted-note", owner))

    with webhook_down(cluster):
        # Writes are refused, once the apiserver calls (fails to call) the webhook.
        def refused() -> bool:
            labelled = cluster.kubectl(
                "label", "pytorchjob", "deleted", "-n", namespace, "--overwrite", "probe=1",
                check=False,
            )  # fmt: skip
            return labelled.returncode != 0 and "failed calling webhook" in labelled.stderr

        cluster.wait_for(refused, timeout=30, what="the webhook configurations in effect")

        cluster.kubectl(
            "delete", "pytorchjob", "deleted", "-n", namespace, f"--cascade={cascade}",
            "--wait=false",
        )  # fmt: skip
        # The garbage collector notices a new kind within its 30 s discovery resync.
        cluster.wait_for(
            lambda: get_job(cluster, namespace, "deleted") is None,
            timeout=120,
            what=f"the job gone after its {cascade} deletion",
        )
        note = cluster.get("configmap", "deleted-note", namespace)
        if cascade == "orphan":
            assert note is not None
            assert not note["metadata"].get("ownerReferences")
        else:
            assert note is None
