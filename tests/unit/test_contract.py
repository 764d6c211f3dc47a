"""The env contract is one declaration: the controller, the webhook and README follow it.

``pytorchjob.contract`` declares every injected variable; these tests fail when the controller
injects a name it does not declare (or never injects a declared one), when the webhook does not
refuse a reserved name or flag the controller overrides, when it refuses a default, or when
README's table and the declaration disagree.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.builders import container, gpu_job, job
from tests.unit.controller.helpers import parse, with_uid
from torchgate.controller.envvars import merge_env, rank_env
from torchgate.pytorchjob import contract
from torchgate.pytorchjob.fieldpath import ErrorType
from torchgate.pytorchjob.policy import DEFAULT_POLICY
from torchgate.webhook.validation import validate_create

README = Path(__file__).resolve().parents[2] / "README.md"


def injected_names(raw: Any) -> set[str]:
    parsed = parse(with_uid(raw))
    return {
        entry["name"]
        for replica, count in (("Master", 1), ("Worker", 2))
        if replica in raw["spec"]["pytorchReplicaSpecs"]
        for index in range(count)
        for entry in rank_env(parsed, replica, index, gpus_per_pod=1)
    }


def test_the_controller_injects_exactly_the_declared_names() -> None:
    plain = injected_names(gpu_job("plain", workers=2).build())
    elastic = injected_names(
        gpu_job("el", workers=2)
        .elastic(
            minReplicas=1,
            maxReplicas=3,
            maxRestarts=2,
            standalone=True,
            rdzvConf=[{"key": "timeout", "value": "90"}],
        )
        .build()
    )

    assert plain | elastic == contract.NAMES
    assert plain == {v.name for v in contract.VARIABLES if v.elastic is not True}
    assert elastic == {v.name for v in contract.VARIABLES if v.elastic is not False}


@pytest.mark.parametrize("name", sorted(contract.RESERVED))
def test_the_webhook_refuses_every_reserved_name_the_controller_injects(name: str) -> None:
    raw = job().master(**{}).workers(1).build()
    raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"] = [
        container(env={name: "x"})
    ]

    verdict = validate_create(raw, DEFAULT_POLICY)

    field = "spec.pytorchReplicaSpecs[Master].template.spec.containers[0].env[0].name"
    assert (ErrorType.FORBIDDEN, field) in [(e.type, e.field) for e in verdict.errors]


@pytest.mark.parametrize("name", sorted(contract.DEFAULTS))
def test_a_default_the_user_sets_is_admitted_and_kept(name: str) -> None:
    raw = job().master().workers(1).build()
    raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"] = [
        container(env={name: "0"})
    ]

    assert validate_create(raw, DEFAULT_POLICY).allowed
    ours = rank_env(parse(with_uid(raw)), "Master", 0, gpus_per_pod=0)
    merged = merge_env([{"name": name, "value": "0"}], ours)
    assert [e["value"] for e in merged if e["name"] == name] == ["0"]


@pytest.mark.parametrize("flag", sorted(contract.STRAY_FLAGS))
def test_the_webhook_refuses_every_flag_that_overrides_an_injected_name(flag: str) -> None:
    raw = job().master(args=[f"{flag}=1"]).workers(1).build()

    verdict = validate_create(raw, DEFAULT_POLICY)

    field = "spec.pytorchReplicaSpecs[Master].template.spec.containers[0].args"
    assert (ErrorType.FORBIDDEN, field) in [(e.type, e.field) for e in verdict.errors]


def test_readme_lists_exactly_the_declared_names() -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Env and networking contract") :]
    section = section[: section.index("\n### ", 1)]
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    assert set(re.findall(r"`((?:PET_|PYTHON|MASTER|WORLD|RANK)[A-Z_]*)", table)) == contract.NAMES
