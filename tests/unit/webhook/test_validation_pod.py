"""Pod template rules: volumes, mounts, images and the pytorch container."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders.job import job
from tests.unit.webhook.validationcases import (
    DUPLICATE,
    GPU,
    INVALID,
    MC0,
    MPOD,
    NOT_FOUND,
    REQUIRED,
    VOLUME,
    WC0,
    Pairs,
    case,
    check,
    master_container,
    setting,
)
from torchgate.pytorchjob.policy import DEFAULT_POLICY, PlacementPolicy

# ---------------------------------------------------------------------- rule 6: pod template sanity


TEMPLATES = [
    case(
        "mount-without-path",
        job()
        .master(pod_spec={"volumes": [VOLUME]})
        .workers(1)
        .edit(setting(*master_container("volumeMounts"), [{"name": "data"}]))
        .build(),
        [(REQUIRED, f"{MC0}.volumeMounts[0].mountPath")],
    ),
    case(
        "mount-of-undeclared-volume",
        job()
        .master()
        .workers(1)
        .edit(setting(*master_container("volumeMounts"), [{"name": "data", "mountPath": "/d"}]))
        .build(),
        [(NOT_FOUND, f"{MC0}.volumeMounts[0].name")],
    ),
    case(
        "env-entry-under-volume-mounts",
        job()
        .master(pod_spec={"volumes": [VOLUME]})
        .workers(1)
        .edit(
            setting(
                *master_container("volumeMounts"),
                [
                    {"name": "data", "mountPath": "/d"},
                    {"name": "NCCL_DEBUG", "value": "INFO"},
                ],
            )
        )
        .build(),
        [
            (REQUIRED, f"{MC0}.volumeMounts[1].mountPath"),
            (NOT_FOUND, f"{MC0}.volumeMounts[1].name"),
        ],
    ),
    case(
        "init-container-mount",
        job()
        .master(
            pod_spec={
                "initContainers": [
                    {
                        "name": "i",
                        "image": "busybox",
                        "volumeMounts": [{"name": "gone", "mountPath": "/g"}],
                    }
                ]
            }
        )
        .workers(1)
        .build(),
        [(NOT_FOUND, f"{MPOD}.initContainers[0].volumeMounts[0].name")],
    ),
    case(
        "duplicate-env-name",
        job()
        .master()
        .workers(1)
        .edit(
            setting(
                *master_container("env"), [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
            )
        )
        .build(),
        [(DUPLICATE, f"{MC0}.env[1].name")],
    ),
    case(
        "bad-quantities",
        job()
        .master(limits={"cpu": "lots", GPU: None, "memory": "-1Gi"}, requests={"cpu": "$CPU"})
        .workers(1)
        .build(),
        [
            (INVALID, f"{MC0}.resources.limits[cpu]"),
            (INVALID, f"{MC0}.resources.limits[{GPU}]"),
            (INVALID, f"{MC0}.resources.limits[memory]"),
            (INVALID, f"{MC0}.resources.requests[cpu]"),
        ],
    ),
    case(
        "placeholder-inside-image",
        job().master(image="gcr.io/<your_project>/mnist:latest").workers(1).build(),
        [(INVALID, f"{MC0}.image")],
    ),
    case(
        "envsubst-image",
        job().master().workers(1, image="${REGISTRY}${IMAGE}:latest").build(),
        [(INVALID, f"{WC0}.image")],
    ),
    case(
        "upper-case-image",
        job().master(image="Ubuntu").workers(1).build(),
        [(INVALID, f"{MC0}.image")],
    ),
    case(
        "init-container-image",
        job()
        .master(pod_spec={"initContainers": [{"name": "i", "image": "${INIT}"}]})
        .workers(1)
        .build(),
        [(INVALID, f"{MPOD}.initContainers[0].image")],
    ),
]


@pytest.mark.parametrize(("raw", "active_policy", "expected"), TEMPLATES)
def test_template_rules(raw: Any, active_policy: PlacementPolicy, expected: Pairs) -> None:
    check(raw, active_policy, expected)


def test_a_lone_angle_placeholder_image_is_refused_at_the_image() -> None:
    raw = job().master(image="<训练镜像>").workers(1).build()
    check(raw, DEFAULT_POLICY, [(INVALID, f"{MC0}.image")])
