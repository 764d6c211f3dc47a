"""The CRD schema's numbers judged as the apiserver judges them (``crdschema`` rules 4 and 6)."""

from __future__ import annotations

from typing import Any

import pytest

from torchgate.kube.manifestfiles import crd_version
from torchgate.pytorchjob.crdschema import NO_PATH, integer_errors, scale_errors
from torchgate.pytorchjob.fieldpath import ErrorType, FieldPath

REPLICAS = FieldPath.root("spec", "pytorchReplicaSpecs", "Worker", "replicas")
TYPE = (ErrorType.TYPE_INVALID, str(REPLICAS))
RANGE = (ErrorType.INVALID, str(NO_PATH))


@pytest.mark.parametrize(
    ("number", "integer_format", "expected"),
    [
        (2, "int32", []),
        (2.0, "int32", []),  # a client sending 2.0 as JSON: a whole float64 is an integer
        (1.5, "int32", [TYPE, RANGE]),
        (1.0000000001, "int32", [RANGE]),  # an integer to IsFloat64AJSONInteger, not in range
        (2**31, "int32", [RANGE]),
        (2**31, "int64", []),
        (-(2**63), "int64", []),
        (10**20, "int64", [TYPE, RANGE]),  # beyond int64: the apiserver's float64
        (9007199254740992.0, "int64", [TYPE]),  # 2**53: beyond IsFloat64AJSONInteger, in range
        (1e21, "", [TYPE, RANGE]),
        (-1, "uint32", [RANGE]),
        (10**400, "int32", [TYPE, RANGE]),  # an !!int beyond every float64: no crash
    ],
)
def test_a_number_at_an_integer_schema_is_judged_as_kube_openapi_judges_it(
    number: float, integer_format: str, expected: list[tuple[ErrorType, str]]
) -> None:
    schema = {"type": "integer", "format": integer_format}

    errors = list(integer_errors(number, schema, REPLICAS))

    assert [(e.type, e.field) for e in errors] == expected


def test_the_type_error_names_the_format_and_the_range_error_the_field() -> None:
    type_error, range_error = integer_errors(1.5, {"type": "integer", "format": "int32"}, REPLICAS)
    assert str(type_error) == (
        f'{REPLICAS}: Invalid value: "float64": {REPLICAS} in body must be of type int32: "float64"'
    )
    assert str(range_error) == (
        f'<nil>: Invalid value: "": Checked value must be of type integer with format int32 in '
        f"{REPLICAS}"
    )


@pytest.mark.parametrize(
    ("replicas", "refused"),
    [(0, False), (2**31 - 1, False), (-1, True), (2**31, True), (1.5, True), (10**20, True)],
)
def test_the_scale_subresource_holds_an_int32_count(replicas: Any, refused: bool) -> None:
    job = {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": replicas}}}}

    errors = scale_errors(job, crd_version=crd_version())

    assert [e.field for e in errors] == ([f".{REPLICAS}"] if refused else [])
