"""YAML files read as kubectl reads them: every document, or one error with its line, never a crash.

``torchgate check`` and ``torchgate simulate`` read manifests (``pytorchjob.manifests``), and
check and the webhook read PlacementPolicy files, with PyYAML's safe loader, which builds
whatever the text describes. Some of that kubectl (go-yaml, under sigs.k8s.io/yaml) refuses, and
for good reason: what PyYAML builds would make the checks crash or never finish. So the text is
composed first and its node tree checked before anything is built.

Rules (each one function):

1. An anchor whose value contains its own alias (``args: &a [*a]``) is an error, as in go-yaml
   ("anchor value contains itself"): PyYAML builds a list that contains itself, which no JSON
   encoder writes and no walk of the job ends (``self_containing``).
2. Aliases may not expand a document beyond ``MAX_EXPANDED_NODES`` values, go-yaml's threshold
   for aliasing ("document contains excessive aliasing"): nine nested anchors of nine aliases
   each ("billion laughs") are a kilobyte of text and billions of values to check
   (``expanded_size``).
3. Nesting deeper than the parser can follow (it recurses per level) is an error, not a
   ``RecursionError``.
4. A plain scalar that starts like a number is what the cluster stores of it, which is what its
   webhooks are sent (``stored_scalar``). kubectl reads YAML with go-yaml v2, where ``1e3``,
   ``1.0e3``, ``0o17`` and ``08`` are numbers (PyYAML reads strings) and ``1:30`` is a string
   (PyYAML reads 90); it sends them as Go's ``encoding/json`` writes them. The apiserver decodes
   a JSON number as an int64 when the literal is one, else as a float64, and writes the object
   it stores and sends to webhooks with ``encoding/json`` again, which writes a float64 that is a
   whole number below 1e21 as an integer (``1``, not ``1.0``: the ``'f'`` format, ``'e'`` from
   1e21). So ``tolerationSeconds: 1.0`` is ``1`` on the cluster, ``replicas: 1e3`` is ``1000``,
   an integer beyond int64 is the integer its float64 prints as, ``1.5`` and ``1e21`` stay
   floats, and a number go-yaml cannot read (``1e400``) stays the text. A number tagged
   explicitly (``!!float 1``) is stored as any other.

Not an error: two equal keys in one mapping (``env:`` twice in a container). kubectl converts
YAML to JSON keeping the last of them, without a word and under strict field validation too (the
apiserver never sees the first), for manifests and PlacementPolicies alike; PyYAML keeps the last
too, so the commands read the object kubectl sends and give the cluster's verdict on it
(``tests/e2e/test_check_agrees_e2e.py`` checks this with the real kubectl).

Errors are ``yaml.MarkedYAMLError``s, so callers report them as any other YAML error: with the
line and column of the anchor (rules 1 and 2) when there is one.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any, Final

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

from torchgate.pytorchjob.digits import INT64

MAX_EXPANDED_NODES: Final = 400_000
"""Most values aliases may expand a document to (go-yaml allows any aliasing below this)."""

_NUMBER_TAG: Final = "tag:torchgate.io,2026:number"
_NUMBER_LIKE: Final = re.compile(r"[-+]?[0-9.][0-9a-zA-Z_.+-]*\Z")
"""Plain scalars rule 4 reads (timestamps are read before, as go-yaml reads them first)."""
_GO_INTEGER: Final = re.compile(
    r"(?P<sign>[-+]?)(?:0[xX](?P<hex>[0-9a-fA-F]+)|0[oO](?P<oct>[0-7]+)|0[bB](?P<bin>[01]+)"
    r"|(?P<octal>0[0-7]*)|(?P<dec>[1-9][0-9]*))\Z"
)
"""go-yaml's integers: ``strconv.ParseInt(text, 0, 64)``'s syntax, underscores removed first."""
_GO_FLOAT: Final = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?\Z")
"""go-yaml's ``yamlStyleFloat`` (a scalar starting with ``.`` needs no more: ``ParseFloat``)."""
_GO_SPECIAL_FLOATS: Final = {
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
_UINT64_LIMIT: Final = 2**64
_FLOAT64_LIMIT: Final = 2**1024
"""The first integer beyond every float64 (``float()`` overflows)."""
_MOST_INTEGER_CHARACTERS: Final = 67
"""A sign, ``0b`` and 64 binary digits: longer text is no int64 or uint64 to go-yaml."""
_GO_INTEGER_BASES: Final = {"hex": 16, "oct": 8, "bin": 2, "octal": 8, "dec": 10}


def stored_scalar(text: str) -> int | float | str:
    """What the cluster stores of a plain scalar that starts like a number (rule 4).

    go-yaml's reading (``resolve``: an int64, else a uint64, else a float64 of its float syntax,
    else the text), then the apiserver's storage of what kubectl sent (``stored_number``).
    """
    if text in _GO_SPECIAL_FLOATS:
        return _GO_SPECIAL_FLOATS[text]
    plain = text if text.startswith(".") else text.replace("_", "")
    integer = _go_integer(plain)
    # An int64, else (unsigned) a uint64: go-yaml's ParseInt, then ParseUint.
    if integer is not None and (
        integer in INT64 or (plain[0] not in "+-" and 0 <= integer < _UINT64_LIMIT)
    ):
        return stored_number(integer)
    if _GO_FLOAT.match(plain):
        number = float(plain)
        if math.isfinite(number):
            return stored_number(number)
    return text


def _go_integer(plain: str) -> int | None:
    found = _GO_INTEGER.match(plain) if len(plain) <= _MOST_INTEGER_CHARACTERS else None
    if found is None:
        return None
    for group, base in _GO_INTEGER_BASES.items():
        digits = found[group]
        if digits is not None:
            magnitude = int(digits, base)
            return -magnitude if found["sign"] == "-" else magnitude
    return None  # pragma: no cover - the pattern always matches one group


def stored_number(number: int | float) -> int | float:
    """A number kubectl sent, as the apiserver stores it and sends it to webhooks (rule 4).

    An integer beyond int64 is a float64 to the apiserver; a float64 that is a whole number below
    1e21 is written as the integer Go prints it as (its shortest digits, then zeros).
    """
    if isinstance(number, int):
        if number in INT64 or not -_FLOAT64_LIMIT < number < _FLOAT64_LIMIT:
            return number  # beyond float64 only when tagged !!int: go-yaml refuses it, kept
        number = float(number)
    if number.is_integer() and abs(number) < 1e21:
        return int(Decimal(repr(number)))
    return number


class _KubectlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, its plain numbers read as the cluster stores them (rule 4)."""


_KubectlLoader.yaml_implicit_resolvers = {
    first: [
        (tag, pattern)
        for tag, pattern in resolvers
        if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_KubectlLoader.add_implicit_resolver(_NUMBER_TAG, _NUMBER_LIKE, list("-+0123456789."))
_KubectlLoader.add_constructor(
    _NUMBER_TAG,
    lambda loader, node: stored_scalar(loader.construct_scalar(node)),  # type: ignore[arg-type]
)


def _stored_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | float:
    """A number tagged ``!!int``, stored as any other (rule 4)."""
    try:
        return stored_number(loader.construct_yaml_int(node))
    except ValueError:  # more digits than Python converts: no int64 either
        problem = "an !!int of more digits than any integer Kubernetes reads"
        raise ConstructorError(None, None, problem, node.start_mark) from None


def _stored_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | float:
    """A number tagged ``!!float`` (``!!float 1``), stored as any other (rule 4)."""
    return stored_number(loader.construct_yaml_float(node))


_KubectlLoader.add_constructor("tag:yaml.org,2002:int", _stored_int)
_KubectlLoader.add_constructor("tag:yaml.org,2002:float", _stored_float)


def load_documents(text: str) -> list[tuple[yaml.Node | None, Any]]:
    """Every document of ``text``: its node tree (for line numbers) and the object built from it.

    Raises ``yaml.YAMLError`` for text that is not YAML, or breaks the rules above.
    """
    try:
        nodes: list[yaml.Node | None] = list(yaml.compose_all(text, Loader=_KubectlLoader))
        for node in nodes:
            if node is not None:
                expanded_size(node)
        loader = _KubectlLoader("")
        return [(node, None if node is None else loader.construct_document(node)) for node in nodes]
    except RecursionError:
        raise ComposerError(None, None, "nested too deeply", None) from None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def self_containing(node: yaml.Node) -> ComposerError:
    """Rule 1's error, at the anchored node."""
    return ComposerError(None, None, "an anchor's value contains its own alias", node.start_mark)


def expanded_size(root: yaml.Node) -> int:
    """How many values ``root`` builds, aliases expanded (rules 1 and 2).

    The composer makes an alias the very node its anchor names, so the tree is a graph: a node
    met again on the path to it is an anchor containing itself, and a node met again elsewhere
    is an alias, counted again (its size is kept, so the walk reads each node once).
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise self_containing(node)
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(_children(node)))
    size = sizes[id(root)]
    if size > MAX_EXPANDED_NODES and size > len(sizes):
        problem = f"aliases expand the document beyond {MAX_EXPANDED_NODES} values"
        raise ComposerError(None, None, problem, root.start_mark)
    return size
