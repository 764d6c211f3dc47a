"""Image references: the kubelet's grammar, and the placeholders that break it."""

from __future__ import annotations

import pytest

from torchgate.webhook.imageref import (
    ImageReference,
    ImageReferenceError,
    image_reference_problem,
    is_lone_placeholder,
    parse_image_reference,
    unfilled_placeholder,
)

SHA256 = "a" * 64

VALID = [
    pytest.param("pytorch-demo", ImageReference(None, "pytorch-demo", None, None), id="short"),
    pytest.param(
        "pytorch-cpu:py3.8", ImageReference(None, "pytorch-cpu", "py3.8", None), id="short-tag"
    ),
    pytest.param(
        "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
        ImageReference("docker.io", "kubeflowkatib/pytorch-mnist", "v1beta1-45c5727", None),
        id="docker-hub",
    ),
    pytest.param(
        "159553542841.dkr.ecr.us-west-2.amazonaws.com/fsdp:llama2-efa-main-02-13",
        ImageReference(
            "159553542841.dkr.ecr.us-west-2.amazonaws.com", "fsdp", "llama2-efa-main-02-13", None
        ),
        id="ecr",
    ),
    pytest.param(
        "localhost:5000/a/b@sha256:" + SHA256,
        ImageReference("localhost:5000", "a/b", None, "sha256:" + SHA256),
        id="port-and-digest",
    ),
    pytest.param(
        "quay.io/x/y:1.0@sha256:" + SHA256,
        ImageReference("quay.io", "x/y", "1.0", "sha256:" + SHA256),
        id="tag-and-digest",
    ),
    pytest.param("[::1]:5000/x", ImageReference("[::1]:5000", "x", None, None), id="ipv6-host"),
    pytest.param(
        "Registry/app", ImageReference("Registry", "app", None, None), id="upper-case-host"
    ),
    pytest.param("ubuntu:Latest", ImageReference(None, "ubuntu", "Latest", None), id="upper-tag"),
    pytest.param("a__b/c--d.e", ImageReference(None, "a__b/c--d.e", None, None), id="separators"),
]


@pytest.mark.parametrize(("image", "expected"), VALID)
def test_valid_references(image: str, expected: ImageReference) -> None:
    assert parse_image_reference(image) == expected
    assert image_reference_problem(image) is None


INVALID = [
    pytest.param("", id="empty"),
    pytest.param(" ubuntu", id="leading-space"),
    pytest.param("ubuntu ", id="trailing-space"),
    pytest.param("Ubuntu", id="upper-case-repository"),
    pytest.param("foo/Bar", id="upper-case-path"),
    pytest.param("YOUR_REGISTRY/app:1", id="placeholder-registry"),
    pytest.param("gcr.io/<your_project>/pytorch_dist_mnist:latest", id="angle-placeholder"),
    pytest.param("${REGISTRY}${IMAGE}:latest", id="envsubst"),
    pytest.param("${IMAGE_URI}", id="envsubst-whole"),
    pytest.param("$(IMAGE)", id="kubernetes-style-variable"),
    pytest.param("{{ .Values.image }}", id="helm"),
    pytest.param("<训练镜像>", id="lone-angle-placeholder"),
    pytest.param("a-", id="trailing-separator"),
    pytest.param("a:" + "x" * 129, id="tag-too-long"),
    pytest.param("a@sha256:" + "A" * 64, id="upper-case-digest"),
    pytest.param("a@sha256:" + "a" * 63, id="short-digest"),
    pytest.param("a@md5:" + "a" * 32, id="unsupported-digest"),
    pytest.param("a" * 64, id="bare-image-id"),
    pytest.param("a/" * 128 + "b", id="name-too-long"),
    pytest.param("registry.example.com:port/app", id="non-numeric-port"),
]


@pytest.mark.parametrize("image", INVALID)
def test_invalid_references(image: str) -> None:
    with pytest.raises(ImageReferenceError):
        parse_image_reference(image)
    assert image_reference_problem(image) is not None


@pytest.mark.parametrize(
    ("image", "placeholder"),
    [
        pytest.param("gcr.io/<your_project>/x:latest", "<your_project>", id="angle"),
        pytest.param("${REGISTRY}${IMAGE}:latest", "${REGISTRY}", id="first-of-several"),
        pytest.param("${IMAGE_URI}", "${IMAGE_URI}", id="envsubst"),
        pytest.param("$IMAGE", "$IMAGE", id="bare-dollar"),
        pytest.param("$(IMAGE):1", "$(IMAGE)", id="parenthesised"),
        pytest.param("{{ .Values.image }}", "{{ .Values.image }}", id="helm"),
        pytest.param("YOUR_REGISTRY/app", "YOUR_REGISTRY", id="screaming-your"),
        pytest.param("gcr.io/project/app:1", None, id="none"),
    ],
)
def test_unfilled_placeholder(image: str, placeholder: str | None) -> None:
    assert unfilled_placeholder(image) == placeholder


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        pytest.param("<训练镜像>", True, id="seed-000"),
        pytest.param("<image>", True, id="ascii"),
        pytest.param(" <image> ", True, id="padded"),
        pytest.param("<image>:latest", False, id="with-tag"),
        pytest.param("gcr.io/<p>/x", False, id="inside-reference"),
        pytest.param("<a><b>", False, id="two-placeholders"),
        pytest.param("<>", False, id="empty-brackets"),
    ],
)
def test_is_lone_placeholder(image: str, expected: bool) -> None:
    assert is_lone_placeholder(image) is expected
