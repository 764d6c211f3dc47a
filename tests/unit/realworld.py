"""The real-world PyTorchJobs of ``../shared``, and values that break them, for robustness tests.

The 29 published manifests of ``shared/realworld`` and the seeds' jobs, read once; ``field_paths``
lists every path of a job (mapping keys and list indexes), and ``mutated`` replaces the value at
one path by a wrong one, or deletes it. ``WRONG_VALUES`` are the kinds that found bugs: wrong JSON
types, numbers beyond int64, strings of more digits than Python converts, deep nesting.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Final

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SHARED: Final = Path(__file__).resolve().parents[2].parent / "shared"
DELETE: Final = object()


def _load() -> list[tuple[str, dict[str, Any]]]:
    files = sorted((SHARED / "realworld").glob("*.yaml"))
    files += sorted((SHARED / "seeds" / "manifests").glob("*.yaml"))
    jobs = []
    for path in files:
        for index, document in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if isinstance(document, dict) and document.get("kind") == "PyTorchJob":
                jobs.append((f"{path.name}[{index}]", document))
    return jobs


REALWORLD_JOBS: Final = _load()

BROKEN_JOB_SETTINGS: Final = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""How the tests over ``broken_jobs`` run: deterministic, a few seconds, big examples allowed."""


def field_paths(node: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every path under ``node``: keys of mappings, indexes of lists."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(field_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out.extend(field_paths(value, (*prefix, index)))
    return out


def _nested(depth: int) -> Any:
    value: Any = "x"
    for level in range(depth):
        value = [value] if level % 2 else {"a": value}
    return value


WRONG_VALUES: Final = st.sampled_from(
    [
        None,
        0,
        -1,
        2**63 - 1,
        2**70,
        -(2**70),
        1.5,
        1e308,
        True,
        "",
        "x",
        "12",
        "ünï😀",
        "9" * 5000,
        "-5",
        "1e1000000",
        "2026-13-45T99:99:99Z",
        [],
        [1, "a", None],
        [{"a": 1}],
        {},
        {"a": {"b": [None]}},
        _nested(60),
        DELETE,
    ]
) | st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def mutated(job: dict[str, Any], where: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """A copy of ``job`` with ``value`` at ``where`` (``DELETE``: the field removed)."""
    raw = copy.deepcopy(job)
    node = raw
    for token in where[:-1]:
        node = node[token]
    if value is DELETE:
        del node[where[-1]]
    else:
        node[where[-1]] = copy.deepcopy(value)
    return raw


@st.composite
def broken_jobs(draw: st.DrawFn, jobs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One of ``jobs`` with one value anywhere replaced by a wrong one."""
    _, job = draw(st.sampled_from(jobs))
    where = draw(st.sampled_from(field_paths(job)))
    return mutated(job, where, draw(WRONG_VALUES))
