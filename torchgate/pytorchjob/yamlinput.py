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

Not an error: two equal keys in one mapping (``env:`` twice in a container). kubectl converts
YAML to JSON keeping the last of them, without a word and under strict field validation too (the
apiserver never sees the first), for manifests and PlacementPolicies alike; PyYAML keeps the last
too, so the commands read the object kubectl sends and give the cluster's verdict on it
(``tests/e2e/test_check_agrees_e2e.py`` checks this with the real kubectl).

Errors are ``yaml.MarkedYAMLError``s, so callers report them as any other YAML error: with the
line and column of the anchor (rules 1 and 2) when there is one.
"""

from __future__ import annotations

from typing import Any, Final

import yaml
from yaml.composer import ComposerError

MAX_EXPANDED_NODES: Final = 400_000
"""Most values aliases may expand a document to (go-yaml allows any aliasing below this)."""


def load_documents(text: str) -> list[tuple[yaml.Node | None, Any]]:
    """Every document of ``text``: its node tree (for line numbers) and the object built from it.

    Raises ``yaml.YAMLError`` for text that is not YAML, or breaks the rules above.
    """
    try:
        nodes: list[yaml.Node | None] = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
        for node in nodes:
            if node is not None:
                expanded_size(node)
        loader = yaml.SafeLoader("")
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
