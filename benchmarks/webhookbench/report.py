"""The report: the JSON document and its text tables (pure).

The document holds ``meta``, ``servers`` (answer checks), ``rates`` and ``max_throughput`` (one
row per phase) and ``summary``. The caller gathers the machine facts and writes the files.
"""

from __future__ import annotations

from typing import Any

from webhookbench import SERVERS
from webhookbench.stats import summarise


def document(
    *,
    meta: dict[str, Any],
    checks: dict[str, dict[str, Any]],
    servers: list[str],
    rates: list[dict[str, Any]],
    maxima: list[dict[str, Any]],
) -> dict[str, Any]:
    """The JSON document: ``meta``, ``servers`` (answer checks), the phase rows, ``summary``."""
    report: dict[str, Any] = {
        "meta": meta,
        "servers": {name: {"checks": checks.get(name, {})} for name in servers},
        "rates": rates,
        "max_throughput": maxima,
    }
    report["summary"] = summarise(rates, maxima)
    return report


def _fmt(value: Any, width: int) -> str:
    if value is None:
        text = "-"
    elif isinstance(value, float):
        text = f"{value:.2f}" if value < 100 else f"{value:.0f}"
    else:
        text = str(value)
    return text.rjust(width)


def render(report: dict[str, Any]) -> str:
    lines = []
    meta = report["meta"]
    lines.append(
        f"torchgate webhook benchmark  ({meta['started']}; servers on core {meta['server_core']},"
        f" generator on core {meta['client_core']}; {meta['generator']})"
    )
    columns: tuple[tuple[str, int, str], ...] = (
        ("server", 10, "server"),
        ("route", 9, "route"),
        ("target/s", 9, "target_rps"),
        ("got/s", 8, "achieved_rps"),
        ("err", 4, "errors"),
        ("cli p50", 8, "client_p50_ms"),
        ("cli p99", 8, "client_p99_ms"),
        ("srv p50", 8, "server_p50_ms"),
        ("srv p99", 8, "server_p99_ms"),
        ("cpu p50", 8, "server_cpu_p50_ms"),
        ("cpu p99", 8, "server_cpu_p99_ms"),
        ("srv cpu%", 9, "server_cpu_percent"),
        ("wait%", 6, "server_wait_percent"),
        ("ok", 4, "sustained"),
    )
    lines.append("")
    lines.append(
        "Fixed rates (open loop); latencies in ms; wait% = share of the phase the server was"
        " runnable but another process had its core"
    )
    lines.append(" ".join(title.rjust(width) for title, width, _ in columns))
    for row in sorted(
        report["rates"],
        key=lambda r: (r["route"], SERVERS.index(r["server"]), r["target_rps"]),
    ):
        cells = []
        for _, width, key in columns:
            value = row.get(key)
            if key == "sustained":
                value = "yes" if value else "NO"
            cells.append(_fmt(value, width))
        lines.append(" ".join(cells))
    lines.append("")
    lines.append("Max throughput (closed loop)")
    columns = (
        ("server", 10, "server"),
        ("route", 9, "route"),
        ("gen", 7, "generator"),
        ("round", 6, "attempt"),
        ("req/s", 8, "throughput_rps"),
        ("err", 4, "errors"),
        ("srv p50", 8, "server_p50_ms"),
        ("srv p99", 8, "server_p99_ms"),
        ("us/review", 10, "server_cpu_us_per_review"),
        ("srv cpu%", 9, "server_cpu_percent"),
        ("wait%", 6, "server_wait_percent"),
        ("gen cpu%", 9, "generator_cpu_percent"),
        ("gen wait%", 10, "generator_wait_percent"),
    )
    lines.append(" ".join(title.rjust(width) for title, width, _ in columns))
    for row in report["max_throughput"]:
        lines.append(" ".join(_fmt(row.get(key), width) for _, width, key in columns))
    lines.append("")
    lines.append(
        "Summary (req/s and us/review: best round; vs bare: median over rounds of the ratio to"
        " bare's run just before)"
    )
    columns = (
        ("server", 10, "server"),
        ("route", 9, "route"),
        ("max ok/s", 9, "max_sustained_rps"),
        ("max req/s", 10, "max_rps"),
        ("vs bare", 8, "max_rps_vs_bare"),
        ("wrk req/s", 10, "max_rps_wrk"),
        ("vs bare", 8, "max_rps_wrk_vs_bare"),
        ("us/review", 10, "server_cpu_us_per_review"),
        ("cpu vs bare", 12, "cpu_capacity_vs_bare"),
        ("p50@1k", 7, "p50"),
        ("p99@1k", 7, "p99"),
    )
    lines.append(" ".join(title.rjust(width) for title, width, _ in columns))
    for name in SERVERS:
        for route, entry in report["summary"].get(name, {}).items():
            at = entry.get("at_1000_rps", {})
            row = {"server": name, "route": route, **entry}
            row["p50"], row["p99"] = at.get("server_p50_ms"), at.get("server_p99_ms")
            lines.append(" ".join(_fmt(row.get(key), width) for _, width, key in columns))
    lines.append(
        "(p50@1k/p99@1k: server-side ms at 1,000 reviews/s; max ok/s: highest sustained fixed rate)"
    )
    for route, checks in report["summary"].get("targets", {}).items():
        text = ", ".join(
            f"{k}: {'PASS' if v else 'FAIL' if v is False else 'n/a'}" for k, v in checks.items()
        )
        lines.append(f"targets {route}: {text}")
    return "\n".join(lines)
