"""The user and admin documents name only what the product has.

Commands and flags parse with the real parsers (:func:`torchgate.cli.build_parser`), a synopsis's
``[--flag N]`` is the flag's default, metric names are those the controller and the webhook
declare, Helm value paths are in the chart's values.yaml, keys of the product's domain
(``torchgate.io/...``) are the values of constants the code declares, and the condition types and
reasons and Event reasons they name are those :mod:`torchgate.pytorchjob.reasons` declares. What
the documents name is read by :mod:`tests.docsread`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import pkgutil
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
import yaml

from tests import docsread as dr
from tests import monitoring as mon
from torchgate import cli
from torchgate.pytorchjob import reasons

CHART_VALUES = dr.REPO_ROOT / "manifests" / "chart" / "torchgate" / "values.yaml"
CRDS = dr.REPO_ROOT / "manifests" / "crds"
SAMPLES = dr.REPO_ROOT / "manifests" / "samples"
DECLARING_PACKAGES = ("torchgate", "torchgate_dev")
_KEY_VALUE = re.compile(r"(?:[a-z0-9-]+\.)*torchgate\.io/[A-Za-z0-9._-]+")
_SYNOPSIS_DEFAULT = re.compile(r"\[(--[a-z0-9-]+)[ =]([^\s\[\]]+)\]")
_PLACEHOLDER = re.compile(r"[A-Z][A-Z_]*")


# ------------------------------------------------------------------ commands


def _subcommand_parser(
    parser: argparse.ArgumentParser, word: str
) -> argparse.ArgumentParser | None:
    """The parser of ``word`` when ``parser`` has subcommands and ``word`` is one of them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and word in action.choices:
            chosen: argparse.ArgumentParser = action.choices[word]
            return chosen
    return None


def _synopsis_words(words: tuple[str, ...]) -> list[str]:
    """Words of a synopsis without its brackets and ellipses (``[--policy FILE]...``)."""
    cleaned = (word.strip("[]").removesuffix("...").strip("[]") for word in words)
    return [word for word in cleaned if word and word not in {"|", "..."}]


def _is_flag(word: str) -> bool:
    return word.startswith("-") and len(word) > 1 and not re.fullmatch(r"-[0-9.]+", word)


def command_problems(command: dr.Command) -> list[str]:
    """What in ``command`` the real parsers do not accept."""
    where = command.mention.where()
    words = _synopsis_words(command.words)
    parser = cli.build_parser(None if not words or _is_flag(words[0]) else words[0])
    rest = words
    if words and not _is_flag(words[0]):
        selected = _subcommand_parser(parser, words[0])
        if selected is None:
            return [f"{where}: torchgate has no command {words[0]!r} ({command.mention.text})"]
        parser, rest = selected, words[1:]
    problems = []
    for word in rest:
        nested = None if _is_flag(word) else _subcommand_parser(parser, word)
        if nested is not None:
            parser = nested
        elif _is_flag(word) and word.split("=", 1)[0] not in parser._option_string_actions:
            problems.append(f"{where}: {parser.prog} has no flag {word.split('=', 1)[0]}")
    if command.concrete and not problems:
        problems += _parse_problems(command)
    if not command.concrete:
        problems += _default_problems(parser, command.mention)
    return problems


def _default_problems(parser: argparse.ArgumentParser, mention: dr.Mention) -> list[str]:
    """A synopsis's ``[--flag VALUE]`` that is not the flag's default (``[--flag N]``: a name)."""
    problems = []
    for flag, documented in _SYNOPSIS_DEFAULT.findall(mention.text):
        action = parser._option_string_actions.get(flag)
        if action is None:
            continue  # reported above
        if _PLACEHOLDER.fullmatch(documented) and documented not in (action.choices or ()):
            continue
        if not _same_value(action.default, documented):
            problems.append(
                f"{mention.where()}: {parser.prog} {flag} defaults to {action.default!r}, "
                f"the synopsis says {documented}"
            )
    return problems


def _same_value(default: object, documented: str) -> bool:
    if isinstance(default, int | float) and not isinstance(default, bool):
        try:
            return float(documented) == default
        except ValueError:
            return False
    return str(default) == documented


def _parse_problems(command: dr.Command) -> list[str]:
    """The parser's complaint when the whole command line does not parse."""
    words = list(command.words)
    selected = next((w for w in words if not w.startswith("-")), None)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            cli.build_parser(selected).parse_args(words)
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            complaint = errors.getvalue().strip().splitlines()[-1]
            return [f"{command.mention.where()}: {complaint} ({command.mention.text})"]
    return []


def every_command() -> Iterator[dr.Command]:
    for document in dr.DOCUMENTS:
        yield from dr.commands(document, dr.read(document))


@pytest.mark.parametrize("document", dr.DOCUMENTS)
def test_every_command_and_flag_the_documents_give_parses_with_the_real_parsers(
    document: str,
) -> None:
    problems = [p for c in dr.commands(document, dr.read(document)) for p in command_problems(c)]
    assert not problems, "\n".join(problems)


def test_the_documents_give_commands_of_each_kind() -> None:
    """The reader finds what there is (a reader that finds nothing would pass every check)."""
    found = list(every_command())
    assert {c.words[0] for c in found if c.words} >= set(cli.COMMANDS)
    assert any(c.concrete for c in found)
    assert any(not c.concrete and _SYNOPSIS_DEFAULT.search(c.mention.text) for c in found)


# ------------------------------------------------------------------ metrics


@pytest.mark.parametrize("document", dr.DOCUMENTS)
def test_every_metric_the_documents_name_is_declared(document: str) -> None:
    declared = mon.declared()
    wrong = [
        f"{m.where()}: {m.text}"
        for m in dr.metric_names(document, dr.read(document))
        if m.text not in declared
    ]
    assert not wrong, f"metrics neither the controller nor the webhook declares: {wrong}"


# ------------------------------------------------------------------ Helm values


@cache
def chart_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(CHART_VALUES.read_text(encoding="utf-8"))
    return values


def helm_value_exists(path: str) -> bool:
    """Whether values.yaml has ``path`` (``a.*``: ``a`` is a mapping; ``a[0].b``: ``a`` is)."""
    node: Any = chart_values()
    for key in path.split("[", 1)[0].split("."):
        if key == "*":
            return isinstance(node, dict)
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def helm_value_mentions(document: str, text: str) -> Iterator[dr.Mention]:
    return dr.helm_value_paths(document, text, top_level=frozenset(chart_values()))


@pytest.mark.parametrize("document", dr.DOCUMENTS)
def test_every_helm_value_the_documents_name_is_in_the_charts_values(document: str) -> None:
    wrong = [
        f"{m.where()}: {m.text}"
        for m in helm_value_mentions(document, dr.read(document))
        if not helm_value_exists(m.text)
    ]
    assert not wrong, f"Helm values not in {CHART_VALUES.name}: {wrong}"


# ------------------------------------------------------------------ keys


@cache
def declared_keys() -> frozenset[str]:
    """Values of the module-level string constants of the product's domain, in every module.

    And the keys the shipped samples use: the sample PlacementPolicy selects nodes labelled
    ``torchgate.io/pool``, a label the admin sets, which the documents reproduce with the sample.
    """
    found = {
        match.group(0)
        for sample in SAMPLES.glob("*.yaml")
        for match in _KEY_VALUE.finditer(sample.read_text(encoding="utf-8"))
    }
    for package_name in DECLARING_PACKAGES:
        package = importlib.import_module(package_name)
        for module_info in pkgutil.walk_packages(package.__path__, f"{package_name}."):
            if module_info.name.rsplit(".", 1)[-1] == "__main__":
                continue  # runs the command
            module = importlib.import_module(module_info.name)
            found.update(
                value
                for value in vars(module).values()
                if isinstance(value, str) and _KEY_VALUE.fullmatch(value)
            )
    return frozenset(found)


@cache
def object_prefixes() -> frozenset[str]:
    """The ``<kind>.<group>`` kubectl names our objects by (``teamquota.torchgate.io``)."""
    prefixes = set()
    for crd_file in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(crd_file.read_text(encoding="utf-8"))
        names = crd["spec"]["names"]
        prefixes.update(f"{names[n]}.{crd['spec']['group']}" for n in ("singular", "plural"))
    return frozenset(prefixes)


def key_mentions(document: str, text: str) -> Iterator[dr.Mention]:
    return dr.keys(document, text, object_prefixes=object_prefixes())


@pytest.mark.parametrize("document", dr.DOCUMENTS)
def test_every_key_of_the_products_domain_the_documents_name_is_declared(document: str) -> None:
    wrong = [
        f"{m.where()}: {m.text}"
        for m in key_mentions(document, dr.read(document))
        if m.text not in declared_keys()
    ]
    assert not wrong, f"keys no constant declares: {wrong}"


# ------------------------------------------------------------------ conditions and Events


def declared_status_words() -> frozenset[str]:
    """The condition types, condition reasons and Event reasons the product writes."""
    return frozenset(reasons.CONDITION_TYPES) | reasons.CONDITION_REASONS | reasons.EVENT_REASONS


@pytest.mark.parametrize("document", dr.DOCUMENTS)
def test_every_condition_and_event_reason_the_documents_name_is_declared(document: str) -> None:
    wrong = [
        f"{m.where()}: {m.text}"
        for m in dr.status_words(document, dr.read(document))
        if m.text not in declared_status_words()
    ]
    assert not wrong, f"condition types or reasons torchgate does not write: {wrong}"


def test_the_documents_name_condition_types_and_reasons_of_each_kind() -> None:
    """The reader finds what there is (a reader that finds nothing would pass every check)."""
    found = {m.text for d in dr.DOCUMENTS for m in dr.status_words(d, dr.read(d))}
    assert reasons.QUEUED in found
    assert set(reasons.QUEUED_REASONS.values()) <= found
    assert found & (reasons.RESTART_EVENT_REASONS - {reasons.REASON_RESTARTING})


def test_a_wrong_reason_planted_in_a_copy_of_operations_is_reported() -> None:
    planted = dr.read("docs/operations.md") + (
        "\nA job that waits gets the reason `WaitingForGodot`; a lost node, a Warning Event\n"
        "`NodeVanished` and the `Restarting` condition (`NodeLost`, `NodeGone` or `PodLost`).\n"
    )
    mentions = list(dr.status_words("docs/operations.md", planted))
    wrong = [m.text for m in mentions if m.text not in declared_status_words()]
    assert wrong == ["WaitingForGodot", "NodeVanished", "NodeGone", "PodLost"]
    assert [m.text for m in mentions][-4:] == ["Restarting", "NodeLost", "NodeGone", "PodLost"]


# ------------------------------------------------------------------ links


def link_problems(document: str, text: str) -> list[str]:
    """Links to files that do not exist, or to headings a Markdown file does not have."""
    problems = []
    for link in dr.links(document, text):
        if link.target is not None and not link.target.exists():
            problems.append(f"{link.mention.where()}: no file {link.mention.text}")
        elif link.anchor and (link.target is None or link.target.suffix == ".md"):
            target_text = text if link.target is None else link.target.read_text(encoding="utf-8")
            if link.anchor not in dr.anchors(target_text):
                problems.append(f"{link.mention.where()}: no heading for {link.mention.text}")
    return problems


@pytest.mark.parametrize("document", dr.DOCUMENTS)
def test_every_link_names_a_file_and_a_heading_that_exist(document: str) -> None:
    problems = link_problems(document, dr.read(document))
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------ the checks fail on a drift


def test_a_wrong_name_planted_in_a_copy_of_readme_is_reported() -> None:
    readme = dr.read("README.md")
    planted = readme + (
        "\n```sh\ntorchgate explain train --no-such-flag\n```\n"
        "\nSynopsis `torchgate top [--interval 7]`, `torchgate_controller_no_such_total`,"
        " `_no_such_seconds`, Helm `webhook.noSuchValue`, `torchgate.io/no-such-annotation`,"
        " [a section](#no-such-section), [a page](docs/no-such-page.md).\n"
    )
    planted_commands = [c for c in dr.commands("README.md", planted) if "--" in c.mention.text]
    problems = [p for c in planted_commands for p in command_problems(c)]
    assert [p.split(": ", 1)[1] for p in problems] == [
        "torchgate explain has no flag --no-such-flag",
        "torchgate top --interval defaults to 2.0, the synopsis says 7",
    ]
    assert "torchgate_controller_no_such_total" not in mon.declared()
    metrics = [m.text for m in dr.metric_names("README.md", planted)]
    assert "torchgate_controller_no_such_total" in metrics
    assert metrics[-1] == "torchgate_controller_no_such_seconds"  # the shortened name
    assert metrics[-1] not in mon.declared()
    helm = [m.text for m in helm_value_mentions("README.md", planted)]
    assert helm[-1] == "webhook.noSuchValue"
    assert not helm_value_exists(helm[-1])
    key = [m.text for m in key_mentions("README.md", planted)][-1]
    assert key == "torchgate.io/no-such-annotation"
    assert key not in declared_keys()
    assert [p.split(": ", 1)[1] for p in link_problems("README.md", planted)] == [
        "no heading for #no-such-section",
        "no file docs/no-such-page.md",
    ]
