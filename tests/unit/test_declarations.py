"""The product's keys and reasons are each written once, in the module that declares them.

A ``torchgate.io/...`` key (annotation, label, taint, managedBy value) is a string literal in one
module of torchgate or torchgate-dev; the condition types and reasons and the Event reasons the
product writes are string literals only in :mod:`torchgate.pytorchjob.reasons`. Everything else
imports them, so the controller, the webhook and the commands that read them back cannot disagree.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from torchgate.pytorchjob import reasons

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCES = (REPO_ROOT / "torchgate", REPO_ROOT / "dev" / "torchgate_dev")
DECLARATIONS = REPO_ROOT / "torchgate" / "pytorchjob" / "reasons.py"
_KEY = re.compile(r"(?:[a-z0-9-]+\.)*torchgate\.io/[A-Za-z0-9._-]+")
# Words Kubernetes uses for other things too: pod phases (``status.phase``, which also name a
# cleanPodPolicy), and the apiserver's Status reason of a refused object.
KUBERNETES_WORDS = frozenset({"Running", "Succeeded", "Failed", "Invalid"})


def string_literals(source: str) -> Iterator[tuple[str, int]]:
    """Every string constant of a module's source, with its line."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value, node.lineno


def literal_places(
    wanted: Callable[[str], object], roots: Iterable[Path] = SOURCES
) -> dict[str, list[str]]:
    """Where each string literal ``wanted`` accepts is written (``path:line``)."""
    places: dict[str, list[str]] = defaultdict(list)
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for value, line in string_literals(path.read_text(encoding="utf-8")):
                if wanted(value):
                    places[value].append(f"{path.relative_to(root.parent)}:{line}")
    return places


def written_elsewhere(roots: Iterable[Path] = SOURCES) -> dict[str, list[str]]:
    """The reasons written as literals outside their declarations, and where."""
    words = reasons.EVENT_REASONS | reasons.CONDITION_REASONS | set(reasons.CONDITION_TYPES)
    places = literal_places((words - KUBERNETES_WORDS).__contains__, roots)
    elsewhere = {
        word: [w for w in where if not w.startswith("torchgate/pytorchjob/reasons.py:")]
        for word, where in places.items()
    }
    return {word: where for word, where in elsewhere.items() if where}


def test_every_key_of_the_products_domain_is_written_once() -> None:
    places = literal_places(_KEY.fullmatch)
    assert places, "the scan finds the keys"
    twice = {key: where for key, where in places.items() if len(where) > 1}
    assert not twice, f"keys written in more than one place: {twice}"


def test_the_reasons_are_written_only_where_they_are_declared() -> None:
    assert written_elsewhere() == {}


def test_a_reason_written_inline_is_reported(tmp_path: Path) -> None:
    """The scan sees an inline reason (a check that finds nothing would pass every time)."""
    module = tmp_path / "torchgate" / "gang.py"
    module.parent.mkdir()
    module.write_text('draft.event("Normal", "GangAdmitted", "creating 2 pods")\n')
    assert written_elsewhere([module.parent]) == {"GangAdmitted": ["torchgate/gang.py:1"]}
