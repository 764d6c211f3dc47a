"""What the user and admin documents name, read for tests/unit/test_docs_match.py.

The documents describe commands and flags, metric names, Helm values and the annotation and label
keys of the product's domain. Each kind of name is found where the documents put it:

- commands: a line of a shell code block (``sh``, ``bash``, ``shell``; in a block with ``$``
  prompts only the lines after one) whose command, or the command after a ``|``, ``&&``, ``;`` or
  ``(``, is ``torchgate`` or ``kubectl torchgate``; an inline code span that starts with either;
  and an unlabelled block that starts with ``torchgate <command>`` (a synopsis with ``[--flag
  VALUE]`` brackets);
- metric names: every ``torchgate_<name>`` word that is not a Python package (``torchgate_dev``);
- Helm value paths: ``--set a.b=...`` anywhere, an inline span ``a.b`` whose first key is a
  top-level key of the chart's values.yaml in a paragraph about Helm or the chart, and a span
  that follows the word "Helm" (``Helm
  `networkPolicy.enabled```, ``with Helm: an entry of `placementPolicies```);
- keys: every ``torchgate.io/<name>`` or ``<sub>.torchgate.io/<name>`` word, except kubectl's
  ``<kind>.torchgate.io/<object>`` (``teamquota.torchgate.io/vision created``) and the bad value
  a field error quotes.

The functions take a document's text, so a test can plant a wrong name in a copy.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = (
    "README.md",
    "docs/operations.md",
    "docs/pool-sharing.md",
    "docs/real-node.md",
    "docs/development.md",
    "benchmarks/README.md",
)
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell"})

_FENCE = re.compile(r"^\s*(```|~~~)\s*([A-Za-z0-9_+-]*)")
_INLINE = re.compile(r"`([^`]+)`")
_METRIC = re.compile(r"(?<![\w./-])torchgate_[a-z0-9_]+(?![\w/])")
_SHORTENED_METRIC = re.compile(r"(_[a-z][a-z0-9_]*)(?:\{.*\})?")
_KEY = re.compile(r"(?<![\w./-])((?:[a-z0-9-]+\.)*torchgate\.io)/([A-Za-z0-9._-]*[A-Za-z0-9])(-?)")
_SET = re.compile(r"--set(?:-string|-json)?(?:\s|\\\n)+([A-Za-z_][A-Za-z0-9_.\[\]]*)=")
_VALUE_PATH = re.compile(r"^[a-z][A-Za-z0-9]*(?:\.(?:[A-Za-z][A-Za-z0-9]*|\*))*$")


@dataclass(frozen=True, slots=True)
class Mention:
    """A name or a command a document gives, and where."""

    document: str
    line: int
    text: str

    def where(self) -> str:
        """``document:line``, for a failure message."""
        return f"{self.document}:{self.line}"


@dataclass(frozen=True, slots=True)
class CodeBlock:
    """A fenced code block: its language (``""`` when unlabelled) and its lines from ``first``."""

    language: str
    first: int
    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Command:
    """A ``torchgate`` command line: the words after ``torchgate``.

    ``concrete`` is a command to run as written (a shell block's line), not a synopsis
    (``[--flag N]``, ``...``) or a mention in prose.
    """

    mention: Mention
    words: tuple[str, ...]
    concrete: bool


def read(document: str) -> str:
    """The text of a document named relative to the repository."""
    return (REPO_ROOT / document).read_text(encoding="utf-8")


def code_blocks(text: str) -> Iterator[CodeBlock]:
    """The fenced code blocks of a Markdown text."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(opening.group(1)):
            end += 1
        yield CodeBlock(opening.group(2), index + 2, tuple(lines[index + 1 : end]))
        index = end + 1


def prose(text: str) -> str:
    """The text with each code block blanked, its fences too (line numbers stay)."""
    lines = text.splitlines()
    for block in code_blocks(text):
        for number in range(block.first - 2, min(block.first + len(block.lines), len(lines))):
            lines[number] = ""
    return "\n".join(lines)


def inline_spans(document: str, text: str) -> Iterator[Mention]:
    """The inline code spans of the prose, whitespace (a line break in a span) made one space."""
    body = prose(text)
    for match in _INLINE.finditer(body):
        line = body.count("\n", 0, match.start()) + 1
        yield Mention(document, line, " ".join(match.group(1).split()))


def _logical_lines(block: CodeBlock) -> Iterator[tuple[int, str]]:
    """A block's lines with backslash continuations joined, each with its first line's number."""
    pending: list[str] = []
    start = block.first
    for offset, line in enumerate(block.lines):
        if not pending:
            start = block.first + offset
        if line.rstrip().endswith("\\"):
            pending.append(line.rstrip()[:-1])
            continue
        pending.append(line)
        yield start, " ".join(pending)
        pending = []
    if pending:
        yield start, " ".join(pending)


def _shell_lines(block: CodeBlock) -> Iterator[tuple[int, str]]:
    """The command lines of a block: every line of a shell block, else the ``$`` prompts'."""
    prompted = any(line.startswith("$ ") for line in block.lines)
    for number, line in _logical_lines(block):
        if prompted:
            if line.startswith("$ "):
                yield number, line[2:]
        elif block.language in SHELL_LANGUAGES and not line.lstrip().startswith("#"):
            yield number, line


def _after_torchgate(words: list[str]) -> list[str] | None:
    """The words after ``torchgate`` when ``words`` is a torchgate command, else None."""
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # VAR=value torchgate ...
        words = words[1:]
    if words and words[0].rsplit("/", 1)[-1] in ("torchgate", "kubectl-torchgate"):
        return words[1:]  # .venv/bin/torchgate too
    if words[:2] == ["kubectl", "torchgate"]:
        return words[2:]
    return None


def _segments(line: str) -> Iterator[list[str]]:
    """The simple commands of a shell line (split at ``|``, ``&&``, ``;``, parentheses)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    segment: list[str] = []
    try:
        for token in lexer:
            if token and set(token) <= set("|&;()<>"):
                yield segment
                segment = []
            else:
                segment.append(token)
    except ValueError:  # an unbalanced quote: not a command of ours to check
        return
    yield segment


def commands(document: str, text: str) -> Iterator[Command]:
    """Every torchgate command the document gives, in code blocks and inline code."""
    for block in code_blocks(text):
        for number, line in _shell_lines(block):
            for segment in _segments(line):
                words = _after_torchgate(segment)
                if words is not None:
                    yield Command(Mention(document, number, line), tuple(words), concrete=True)
        if block.language == "" and block.lines and block.lines[0].startswith("torchgate "):
            synopsis = " ".join(line.rstrip().removesuffix("\\") for line in block.lines)
            words = synopsis.split()[1:]
            yield Command(Mention(document, block.first, synopsis), tuple(words), concrete=False)
    for span in inline_spans(document, text):
        words = _after_torchgate(span.text.split())
        if words is not None:
            yield Command(span, tuple(words), concrete=False)


def metric_names(document: str, text: str) -> Iterator[Mention]:
    """Every ``torchgate_*`` metric name the document gives.

    A list may shorten the names after its first: ```torchgate_controller_reconcile_seconds`,
    `_queue_depth`, `_jobs{state}``` names ``torchgate_controller_queue_depth`` second.
    """
    for number, line in enumerate(text.splitlines(), 1):
        for match in _METRIC.finditer(line):
            if importlib.util.find_spec(match.group(0)) is None:  # torchgate_dev is a package
                yield Mention(document, number, match.group(0))
    blank_lines = [number for number, line in enumerate(prose(text).splitlines(), 1) if not line]
    component, since = None, 0
    for span in inline_spans(document, text):
        full = _METRIC.match(span.text)
        if full is not None and importlib.util.find_spec(full.group(0)) is None:
            component = "_".join(full.group(0).split("_", 2)[:2])  # torchgate_controller
            since = span.line
        shortened = _SHORTENED_METRIC.fullmatch(span.text)
        same_paragraph = not any(since < blank < span.line for blank in blank_lines)
        if shortened is not None and component is not None and same_paragraph:
            yield Mention(document, span.line, component + shortened.group(1))


def keys(document: str, text: str, *, object_prefixes: frozenset[str]) -> Iterator[Mention]:
    """Every annotation, label, taint or API-version key of the product's domain.

    ``object_prefixes`` (``teamquota.torchgate.io``) are kubectl's names of objects, not keys.
    A trailing ``-`` (``kubectl taint ... torchgate.io/quarantine-``) removes the key: it names it.
    A key followed by ``...`` is a family (``torchgate.io/topology-...``), not a name; one quoted as
    the bad value of a field error (``Unsupported value: "topology.torchgate.io/row"``) is what a
    refused job wrote.
    """
    for number, line in enumerate(text.splitlines(), 1):
        for match in _KEY.finditer(line):
            refused = line[: match.start()].endswith(' value: "')
            if refused or match.group(1) in object_prefixes or line.startswith("...", match.end()):
                continue
            yield Mention(document, number, f"{match.group(1)}/{match.group(2)}")


def helm_value_paths(document: str, text: str, *, top_level: frozenset[str]) -> Iterator[Mention]:
    """Every Helm value path the document gives (``a.b.c``; ``a.*`` for all of ``a``'s)."""
    for match in _SET.finditer(text):
        yield Mention(document, text.count("\n", 0, match.start()) + 1, match.group(1))
    body = prose(text)
    for match in _INLINE.finditer(body):
        span = " ".join(match.group(1).split())
        before = body[max(0, match.start() - 40) : match.start()]
        in_helm_context = re.search(r"Helm:?\s+(?:an entry of\s+)?$", before) is not None
        paragraph = body[body.rfind("\n\n", 0, match.start()) + 1 : body.find("\n\n", match.end())]
        about_the_chart = re.search(r"\b(Helm|chart)\b", paragraph) is not None
        names_a_value = about_the_chart and span.split(".", 1)[0] in top_level and "." in span
        if _VALUE_PATH.match(span) and (in_helm_context or names_a_value):
            yield Mention(document, body.count("\n", 0, match.start()) + 1, span)


_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True, slots=True)
class Link:
    """A relative link of a document: the file it names (None: the document) and the anchor."""

    mention: Mention
    target: Path | None
    anchor: str


def links(document: str, text: str) -> Iterator[Link]:
    """The document's links to files of the repository (not ``http(s)://`` nor ``mailto:``)."""
    body = prose(text)
    for match in _LINK.finditer(body):
        address = match.group(1)
        if re.match(r"[a-z]+:", address):
            continue
        path, _, anchor = address.partition("#")
        target = (REPO_ROOT / document).parent / path if path else None
        line = body.count("\n", 0, match.start()) + 1
        yield Link(Mention(document, line, address), target, anchor)


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a text's headings (``## What it refuses``: ``what-it-refuses``).

    Lower case, anything but letters, digits, ``_``, ``-`` and spaces dropped, spaces made ``-``;
    a repeated heading gets ``-1``, ``-2``, ...
    """
    found: set[str] = set()
    for line in prose(text).splitlines():
        heading = _HEADING.match(line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        candidate, repeat = slug, 0
        while candidate in found:
            repeat += 1
            candidate = f"{slug}-{repeat}"
        found.add(candidate)
    return found


_REASON = re.compile(r"[A-Z][a-z]+(?:[A-Z][a-z]*)*")
_ABOUT_STATUS = r"(?:reasons?|Events?|conditions?)"
_INTRODUCES_STATUS = re.compile(rf"\b{_ABOUT_STATUS}:?\s*\(?\s*$")
_NAMES_STATUS = re.compile(rf"^\s+{_ABOUT_STATUS}\b")
_LIST_SEPARATOR = re.compile(r"^\s*(?:\([^()]*\))?\s*(?:,\s*(?:and\s+|or\s+)?|(?:and|or)\s+|/)$")


def status_words(document: str, text: str) -> Iterator[Mention]:
    """Every condition type, condition reason and Event reason the document names.

    A word in backticks (``NodeLost``) right after "reason", "Event" or "condition" (either in
    the plural, a colon or a parenthesis between: ``reason `NodeLost```, ``Event (`GangAdmitted`,
    ...``) or right before one (```Queued` condition``), and the words listed after it, joined by
    commas, "and", "or" or ``/``, each perhaps followed by a parenthesis (``reason
    `WaitingForQuota` (its team's quota ...), `WaitingForResources` or ...``).
    """
    body = prose(text)
    spans = [m for m in _INLINE.finditer(body) if _REASON.fullmatch(m.group(1))]
    listing_end: int | None = None
    for span in spans:
        after = body[span.end() : span.end() + 20]
        in_list = listing_end is not None and _LIST_SEPARATOR.match(
            body[listing_end : span.start()]
        )
        if (
            in_list
            or _INTRODUCES_STATUS.search(body[max(0, span.start() - 20) : span.start()])
            or _NAMES_STATUS.match(after)
        ):
            yield Mention(document, body.count("\n", 0, span.start()) + 1, span.group(1))
            listing_end = span.end()
        else:
            listing_end = None
