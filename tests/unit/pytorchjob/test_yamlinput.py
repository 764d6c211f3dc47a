"""YAML read as kubectl reads it: what PyYAML would build but go-yaml refuses is an error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from torchgate.pytorchjob.yamlinput import MAX_EXPANDED_NODES, load_documents

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
