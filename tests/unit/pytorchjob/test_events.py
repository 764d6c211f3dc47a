"""The one Event shape (``pytorchjob.events``): its rules, each a case."""

from __future__ import annotations

from torchgate.pytorchjob.events import MAX_MESSAGE, event_body, involved_object

INVOLVED = {"apiVersion": "torchgate.io/v1alpha1", "kind": "TeamQuota", "name": "vision"}
NOW = "2026-11-28T22:00:00Z"


def body(**extra: object) -> dict[str, object]:
    return event_body(
        "default",
        INVOLVED,
        type="Warning",
        reason="UsageAboveQuota",
        message="m",
        component="torchgate-controller",
        now=NOW,
        **extra,  # type: ignore[arg-type]
    )


def test_an_event_names_its_object_and_is_named_after_it_unless_given_a_name() -> None:
    generated = body()
    assert generated["involvedObject"] == INVOLVED
    assert generated["metadata"] == {"generateName": "vision.", "namespace": "default"}
    assert body(name="vision.1")["metadata"] == {"name": "vision.1", "namespace": "default"}


def test_its_message_is_cut_to_the_apiservers_limit_and_it_is_never_updated() -> None:
    long = event_body(
        "ns", INVOLVED, type="Normal", reason="r", message="x" * 5000, component="c", now=NOW
    )
    assert len(long["message"]) == MAX_MESSAGE
    assert (long["firstTimestamp"], long["lastTimestamp"], long["count"]) == (NOW, NOW, 1)


def test_a_reporting_component_is_written_only_when_given() -> None:
    assert "reportingComponent" not in body()
    assert body(reporting="torchgate.io/controller")["reportingComponent"] == (
        "torchgate.io/controller"
    )


def test_an_involved_object_names_the_stored_object_and_its_namespace_only_when_namespaced() -> (
    None
):
    metadata = {"name": "p", "uid": "u-1", "resourceVersion": "7", "labels": {"a": "b"}}
    assert involved_object("torchgate.io/v1alpha1", "PlacementPolicy", "p", metadata) == {
        "apiVersion": "torchgate.io/v1alpha1",
        "kind": "PlacementPolicy",
        "name": "p",
        "uid": "u-1",
        "resourceVersion": "7",
    }
    assert involved_object("kubeflow.org/v1", "PyTorchJob", "j", {}, namespace="ns") == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": "j",
        "namespace": "ns",
        "uid": None,
        "resourceVersion": None,
    }
