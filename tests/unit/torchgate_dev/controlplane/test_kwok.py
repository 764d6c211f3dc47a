"""kwok stages and fake GPU nodes (torchgate_dev.controlplane.kwok)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.torchgate_dev.controlplane.planefiles import (
    fake_stage,
)
from torchgate_dev.controlplane import kwok

# ----------------------------------------------------------------------------- kwok stages


def selector_keys(stage: dict[str, Any]) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {
        expression["jq"]["key"]: (
            expression["jq"]["operator"],
            tuple(expression["jq"].get("values", ())),
        )
        for expression in stage["spec"]["selector"]["matchExpressions"]
    }


def test_torchgate_stages_act_only_on_running_pods_not_being_deleted() -> None:
    ending = [
        s for s in kwok.torchgate_stages() if s["metadata"]["name"] != kwok.SANDBOX_FAILURE_STAGE
    ]
    assert len(ending) == 2
    for stage in ending:
        keys = selector_keys(stage)
        assert stage["spec"]["resourceRef"] == {"apiGroup": "v1", "kind": "Pod"}
        assert keys[".metadata.deletionTimestamp"] == ("DoesNotExist", ())
        assert keys[".status.phase"] == ("In", ("Running",))
        (step,) = stage["spec"]["steps"]
        assert step["patch"]["subresource"] == "status"
        assert step["patch"]["root"] == "status"


def test_exit_code_and_run_seconds_stages_never_match_the_same_pod() -> None:
    stages = {stage["metadata"]["name"]: stage for stage in kwok.torchgate_stages()}
    exit_keys = selector_keys(stages[kwok.EXIT_STAGE])
    run_keys = selector_keys(stages[kwok.RUN_SECONDS_STAGE])

    shared = [key for key in exit_keys if kwok.ANNOTATION_FAKE_EXIT_CODE in key]
    assert len(shared) == 1
    assert exit_keys[shared[0]] == ("In", ("true",))
    assert run_keys[shared[0]] == ("NotIn", ("true",))


def test_run_seconds_stage_delays_until_a_deadline_from_its_annotation() -> None:
    stages = {stage["metadata"]["name"]: stage for stage in kwok.torchgate_stages()}
    delay = stages[kwok.RUN_SECONDS_STAGE]["spec"]["delay"]

    assert kwok.ANNOTATION_FAKE_RUN_SECONDS in delay["durationFrom"]["jq"]["expression"]
    assert "delay" not in stages[kwok.EXIT_STAGE]["spec"]


def test_stage_jq_keys_have_a_fallback_for_pods_without_the_annotation() -> None:
    # A jq error would make kwok skip every stage for that pod, so absent keys must yield "".
    for stage in kwok.torchgate_stages():
        for key in selector_keys(stage):
            if "annotations" in key:
                assert '// "")' in key


def test_stage_set_is_upstream_then_torchgate_and_round_trips_as_yaml(stages_dir: Path) -> None:
    text = kwok.render_stages(stages_dir)

    documents = list(yaml.safe_load_all(text))
    names = [document["metadata"]["name"] for document in documents]
    assert names == [
        "node-initialize",
        "node-heartbeat-with-lease",
        "pod-ready",
        "pod-delete",
        kwok.EXIT_STAGE,
        kwok.RUN_SECONDS_STAGE,
        kwok.SANDBOX_FAILURE_STAGE,
    ]
    assert documents[4:] == kwok.torchgate_stages()


def test_pods_whose_sandbox_fails_on_their_node_are_never_made_ready(stages_dir: Path) -> None:
    documents = {
        d["metadata"]["name"]: d for d in yaml.safe_load_all(kwok.render_stages(stages_dir))
    }
    failing = selector_keys(documents[kwok.SANDBOX_FAILURE_STAGE])
    (fails_here,) = [key for key in failing if kwok.ANNOTATION_FAKE_SANDBOX_FAILURE_NODE in key]
    assert failing[fails_here] == ("In", ("true",))
    assert failing[".status.phase"] == ("In", ("Pending",))
    assert failing[".status.containerStatuses"] == ("DoesNotExist", ())  # played once per pod
    ready = documents["pod-ready"]["spec"]["selector"]["matchExpressions"]
    assert {"key": fails_here, "operator": "NotIn", "values": ["true"]} in ready
    template = documents[kwok.SANDBOX_FAILURE_STAGE]["spec"]["steps"][0]["patch"]["template"]
    assert "reason: ContainerCreating" in template


def test_pods_whose_image_never_pulls_wait_for_it_on_every_node() -> None:
    (stage,) = [
        s for s in kwok.torchgate_stages() if s["metadata"]["name"] == kwok.SANDBOX_FAILURE_STAGE
    ]
    (fails_here,) = [key for key in selector_keys(stage) if "fake-image-pull-failure" in key]
    assert kwok.ANNOTATION_FAKE_SANDBOX_FAILURE_NODE in fails_here  # one stage, either fault
    assert kwok.image_pull_failure_annotation() == {kwok.ANNOTATION_FAKE_IMAGE_PULL_FAILURE: "true"}
    template = stage["spec"]["steps"][0]["patch"]["template"]
    assert "reason: ImagePullBackOff" in template


@pytest.mark.parametrize(
    "extra",
    [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
        {"apiVersion": kwok.STAGE_API_VERSION, "kind": "Stage", "metadata": {}},
        {"apiVersion": kwok.STAGE_API_VERSION, "kind": "Stage", "metadata": "oops"},
        {"apiVersion": kwok.STAGE_API_VERSION, "kind": "Stage", "metadata": {"name": "pod-ready"}},
    ],
    ids=["not-a-stage", "no-name", "bad-metadata", "duplicate-name"],
)
def test_stage_set_refuses_bad_documents(extra: dict[str, Any]) -> None:
    upstream = [yaml.safe_load(fake_stage("pod-ready")), extra]

    with pytest.raises(ValueError, match="document 1"):
        kwok.stage_documents(upstream)


def test_missing_upstream_stage_file_names_the_file(stages_dir: Path) -> None:
    (stages_dir / "pod-ready.yaml").unlink()

    with pytest.raises(ValueError, match=r"pod-ready\.yaml"):
        kwok.load_upstream_stages(stages_dir)


def test_stage_printer_prints_torchgate_stages_without_a_folder(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert kwok.main([]) == 0

    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert documents == kwok.torchgate_stages()


def test_stage_printer_exits_1_for_a_missing_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert kwok.main([str(tmp_path / "nowhere")]) == 1
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("factory", "value"),
    [
        (kwok.exit_code_annotation, -1),
        (kwok.exit_code_annotation, 256),
        (kwok.run_seconds_annotation, -1),
    ],
    ids=["exit-negative", "exit-too-big", "seconds-negative"],
)
def test_annotations_refuse_values_kwok_would_ignore(factory: Any, value: int) -> None:
    with pytest.raises(ValueError, match=str(value)):
        factory(value)


def test_annotations_carry_the_value_as_a_string() -> None:
    assert kwok.exit_code_annotation(137) == {kwok.ANNOTATION_FAKE_EXIT_CODE: "137"}
    assert kwok.run_seconds_annotation(30) == {kwok.ANNOTATION_FAKE_RUN_SECONDS: "30"}


# ----------------------------------------------------------------------------- fake GPU nodes


def test_gpu_node_is_managed_by_kwok_and_untainted() -> None:
    node = kwok.gpu_node("gpu-0", gpus=4, rdma=2, labels={"pool": "a"})

    assert node["metadata"]["annotations"][kwok.NODE_ANNOTATION] == kwok.NODE_ANNOTATION_VALUE
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-0"
    assert node["metadata"]["labels"]["pool"] == "a"
    assert "taints" not in node["spec"]
    for section in ("capacity", "allocatable"):
        resources = node["status"][section]
        assert resources["nvidia.com/gpu"] == "4"
        assert resources["rdma/hca"] == "2"
        assert resources["cpu"] == "64"
        assert resources["memory"] == "512Gi"


def test_gpu_node_takes_taints_and_another_gpu_resource() -> None:
    taint = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}

    node = kwok.gpu_node("amd-0", gpus=2, gpu_resource="amd.com/gpu", taints=[taint])

    assert node["spec"]["taints"] == [taint]
    assert node["status"]["allocatable"]["amd.com/gpu"] == "2"
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]


def test_gpu_node_capacity_and_allocatable_are_independent_copies() -> None:
    node = kwok.gpu_node("gpu-0")
    node["status"]["allocatable"]["cpu"] = "1"

    assert node["status"]["capacity"]["cpu"] == "64"


@pytest.mark.parametrize("field", ["gpus", "rdma", "pods"])
def test_gpu_node_refuses_negative_counts(field: str) -> None:
    with pytest.raises(ValueError, match="negative"):
        kwok.gpu_node("gpu-0", **{field: -1})  # type: ignore[arg-type]
