"""What a Dockerfile build reads from its context folder, by Docker's ``.dockerignore`` rules.

Why: the product image is rebuilt only when what its build reads changed (see
:mod:`torchgate_dev.node.productimage`), and what it reads from the repository is exactly the build
context: every file the ``.dockerignore`` lets through. Walking the context with the same rules
as the builder means a change under ``tests/`` or ``.venv`` never costs a build, and a change to
any file the Dockerfile could ``COPY`` always does, without parsing the Dockerfile.

The rules are moby's ``patternmatcher`` (which buildah's copy follows): patterns are cleaned
paths relative to the context; ``*`` and ``?`` stay within one path component, ``**`` spans any
number; ``!`` makes an exception; a rule matches a path or any of its parent folders, and the
last matching rule decides. Checked against buildah 1.28: ``COPY . /ctx`` with this
repository's ``.dockerignore`` copies exactly the files :func:`context_digests` lists.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from torchgate_dev.node import oci

_WILDCARDS: Final = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class IgnoreRule:
    """One ``.dockerignore`` line: its cleaned pattern, regex, and whether it is an exception."""

    pattern: str
    regex: re.Pattern[str]
    exception: bool


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """The regex of a cleaned pattern, as moby translates it (``**`` crosses ``/``)."""
    out, index = "^", 0
    while index < len(pattern):
        char = pattern[index]
        index += 1
        if char == "*" and pattern[index : index + 1] == "*":
            index += 1
            if pattern[index : index + 1] == "/":
                index += 1
            out += ".*" if index == len(pattern) else "(.*/)?"
        elif char == "*":
            out += "[^/]*"
        elif char == "?":
            out += "[^/]"
        elif char == "\\" and index < len(pattern):
            out += re.escape(pattern[index])
            index += 1
        elif char in ".+()|{}$^":
            out += "\\" + char
        else:
            out += char  # letters, "/" and "[...]" classes pass through
    return re.compile(out + "$")


def parse_dockerignore(text: str) -> tuple[IgnoreRule, ...]:
    """The rules of a ``.dockerignore``: comments and blank lines dropped, paths cleaned."""
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        if exception:
            line = line[1:].strip()
        pattern = os.path.normpath(line).lstrip("/") or "."
        rules.append(IgnoreRule(pattern, pattern_regex(pattern), exception))
    return tuple(rules)


def is_ignored(path: str, rules: Sequence[IgnoreRule]) -> bool:
    """Whether the build context leaves out ``path`` (relative, ``/``-separated)."""
    parts = path.split("/")
    candidates = ["/".join(parts[: depth + 1]) for depth in range(len(parts))]
    ignored = False
    for rule in rules:
        if any(rule.regex.match(candidate) for candidate in candidates):
            ignored = not rule.exception
    return ignored


def must_walk(folder: str, rules: Sequence[IgnoreRule]) -> bool:
    """Whether a folder's contents can be in the context.

    It can when the folder is kept, or when an exception may reach inside it: one naming a path
    below it, or one whose first component has a wildcard.
    """
    if not is_ignored(folder, rules):
        return True
    prefix = f"{folder}/"
    return any(
        rule.exception
        and (
            f"{rule.pattern}/".startswith(prefix)
            or not _WILDCARDS.isdisjoint(rule.pattern.split("/")[0])
        )
        for rule in rules
    )


def context_digests(root: Path, rules: Sequence[IgnoreRule]) -> dict[str, str]:
    """``path -> "<sha256 digest>:<mode>"`` for every file of the build context.

    The mode is the permission bits (``COPY`` keeps them); symbolic links are digested by their
    target; modification times do not count (the builders' caches ignore them too).
    """
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        relative = Path(folder).relative_to(root).as_posix()
        prefix = "" if relative == "." else f"{relative}/"
        dirs[:] = sorted(name for name in dirs if must_walk(prefix + name, rules))
        for name in sorted(files):
            path = prefix + name
            if is_ignored(path, rules):
                continue
            full = Path(folder) / name
            info = full.lstat()
            if stat.S_ISLNK(info.st_mode):
                data = b"symlink:" + os.readlink(full).encode()
            elif stat.S_ISREG(info.st_mode):
                data = full.read_bytes()
            else:
                continue
            found[path] = f"{oci.sha256_digest(data)}:{info.st_mode & 0o777:o}"
    return found
