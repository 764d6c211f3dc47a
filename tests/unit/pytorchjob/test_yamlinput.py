"""YAML read as kubectl reads it: what PyYAML would build but go-yaml refuses is an error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from torchgate.pytorchjob.yamlinput import (
    MAX_EXPANDED_NODES,
    load_documents,
    stored_number,
    stored_scalar,
)

SHARED = Path(__file__).resolve().parents[3].parent / "shared"


def laughs(levels: int, width: int) -> str:
    """Nested anchors, each aliased ``width`` times by the next: ``width ** levels`` values."""
    value = "&a0 [" + ", ".join(["lol"] * width) + "]"
    for level in range(1, levels):
        value = f"&a{level} [{value}, " + ", ".join([f"*a{level - 1}"] * (width - 1)) + "]"
    return f"kind: PyTorchJob\nspec:\n  x: {value}\n"


@pytest.mark.parametrize(
    "path",
    sorted(
        [*(SHARED / "realworld").glob("*.yaml"), *(SHARED / "seeds" / "manifests").glob("*.yaml")]
    ),
    ids=lambda path: path.name,
)
def test_documents_are_what_the_safe_loader_builds(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert [obj for _, obj in load_documents(text)] == list(yaml.safe_load_all(text))


def test_shared_aliases_and_merge_keys_are_read() -> None:
    text = "base: &b {image: x}\nmaster: {<<: *b, name: m}\nworker: *b\n"
    ((_, obj),) = load_documents(text)
    assert obj["master"] == {"image": "x", "name": "m"}
    assert obj["worker"] == {"image": "x"}


@pytest.mark.parametrize(
    "text",
    ["args: &a [*a]\n", "spec: &s {spec: *s}\n", "a: &a [[[*a]]]\n"],
    ids=["list", "mapping", "nested"],
)
def test_an_anchor_containing_its_own_alias_is_an_error(text: str) -> None:
    with pytest.raises(yaml.MarkedYAMLError) as raised:
        load_documents(text)
    assert raised.value.problem_mark is not None
    assert raised.value.problem_mark.line == 0


def test_aliases_expanding_beyond_the_limit_are_an_error() -> None:
    assert MAX_EXPANDED_NODES < 9**9
    with pytest.raises(yaml.MarkedYAMLError):
        load_documents(laughs(9, 9))  # a kilobyte of text, 387 million values


def test_aliases_within_the_limit_are_read() -> None:
    assert MAX_EXPANDED_NODES > 6**6
    ((_, obj),) = load_documents(laughs(6, 6))
    assert len(obj["spec"]["x"]) == 6


def test_nesting_deeper_than_the_parser_follows_is_an_error() -> None:
    with pytest.raises(yaml.YAMLError):
        load_documents("spec: " + "[" * 3000 + "]" * 3000 + "\n")


@pytest.mark.parametrize(
    ("scalar", "stored"),
    [
        ("1", 1),
        ("1.0", 1),  # a float64 1 to go-yaml, written 1 by Go's encoding/json
        ("-0.0", 0),
        ("1e3", 1000),  # a string to PyYAML (YAML 1.1 floats need a dot)
        ("1E3", 1000),
        ("1.0e+16", 10**16),
        (".5", 0.5),
        ("-.5", -0.5),
        ("1.5", 1.5),
        ("1e-7", 1e-7),
        ("1e21", 1e21),  # written 1e+21: Go's 'e' format from 1e21
        ("1_000", 1000),
        ("0o17", 15),  # a string to PyYAML
        ("017", 15),
        ("08", 8),  # no octal to strconv.ParseInt, but yamlStyleFloat: a string to PyYAML
        ("0x1F", 31),
        ("-0b101", -5),
        ("9223372036854775807", 2**63 - 1),
        ("9223372036854775808", 9223372036854776000),  # a uint64, a float64 to the apiserver
        ("100000000000000000000", 10**20),  # beyond uint64: go-yaml's float64
        ("-0x8000000000000001", "-0x8000000000000001"),  # no int64, signed: no uint64
        ("1e400", "1e400"),  # strconv.ParseFloat's range error: the text
        ("1:30", "1:30"),  # 90 to PyYAML (sexagesimal), a string to go-yaml
        ("1.2.3", "1.2.3"),
        ("123abc", "123abc"),
        ("._5", "._5"),
    ],
)
def test_plain_numbers_are_read_as_the_cluster_stores_them(scalar: str, stored: object) -> None:
    ((_, obj),) = load_documents(f"value: {scalar}\nquoted: '{scalar}'\n")

    assert obj == {"value": stored, "quoted": scalar}
    assert type(obj["value"]) is type(stored)


def test_an_explicitly_tagged_number_is_stored_as_any_other() -> None:
    ((_, obj),) = load_documents("a: !!float 1\nb: !!float 1.5\nc: !!int 3\n")
    assert obj == {"a": 1, "b": 1.5, "c": 3}
    assert type(obj["a"]) is int


def test_an_explicit_integer_of_too_many_digits_is_an_error_or_kept() -> None:
    with pytest.raises(yaml.MarkedYAMLError):
        load_documents("a: !!int " + "1" * 5000 + "\n")
    ((_, obj),) = load_documents("a: !!int " + "1" * 400 + "\n")  # beyond every float64
    assert obj == {"a": int("1" * 400)}


def test_timestamps_booleans_and_nulls_are_read_as_before() -> None:
    text = "day: 2018-12-16\non: yes\nnothing: ~\nspecial: [.inf, -.Inf]\n"
    ((_, obj),) = load_documents(text)
    assert obj == yaml.safe_load(text)


@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**70), 2**70))
def test_a_stored_number_keeps_its_float64_and_reads_back_as_itself(number: float) -> None:
    stored = stored_number(number)

    assert float(stored) == float(number)  # the apiserver's float64 (or int64) is kept
    assert stored_scalar(json.dumps(stored)) == stored  # what it sends reads back the same
    assert isinstance(stored, int) == (abs(float(number)) < 1e21 and float(number).is_integer())
