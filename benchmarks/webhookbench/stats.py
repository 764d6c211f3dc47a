"""The statistics: phase results, percentiles, the sustained-rate rule and the summary (pure).

Rules:

* Percentiles are nearest-rank over every answered request; an empty list has none (``None``).
* A server sustains a fixed rate when every answer is a correct 200, it achieves at least 95 %
  of the rate and the client-side p99 stays at or under the SLO.
* The summary keeps, per server and route, the highest sustained rate (a retry that sustains
  counts), the latencies at 1,000 reviews/s, the best error-free throughput per generator and
  the lowest CPU time per review.
* Ratios to bare pair each round with bare's run of the same round and take the median over
  rounds; the targets are torchgate at >= 0.40 of bare (throughput and CPU capacity) and a
  server-side p99 <= 2 ms at 1,000 reviews/s (wall clock and CPU time).
* The run is judged by its target line (``target_line``): torchgate's throughput on every route
  at least ``TARGET_VS_BARE`` of bare's (median over rounds). A route without a ratio (bare or
  torchgate not run) is not judged.
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any, Final

TARGET_VS_BARE: Final = 0.40


@dataclasses.dataclass
class PhaseResult:
    """What one phase measured."""

    sent: int = 0
    ok: int = 0
    errors: int = 0
    error_kinds: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    client: list[float] = dataclasses.field(default_factory=list)
    server: list[float] = dataclasses.field(default_factory=list)
    server_cpu: list[float] = dataclasses.field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    first_bad: str = ""


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of unsorted ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 3)


def latency_report(result: PhaseResult) -> dict[str, Any]:
    return {
        "client_p50_ms": ms(percentile(result.client, 50)),
        "client_p99_ms": ms(percentile(result.client, 99)),
        "server_p50_ms": ms(percentile(result.server, 50)),
        "server_p99_ms": ms(percentile(result.server, 99)),
        "server_cpu_p50_ms": ms(percentile(result.server_cpu, 50)),
        "server_cpu_p99_ms": ms(percentile(result.server_cpu, 99)),
    }


def sustained(
    *, errors: int, achieved: float, rate: float, p99_ms: float | None, slo_ms: float
) -> bool:
    """Whether a fixed-rate phase sustained ``rate``: no error, >= 95 % achieved, p99 in the SLO."""
    return errors == 0 and achieved >= 0.95 * rate and p99_ms is not None and p99_ms <= slo_ms


def summarise(rates: list[dict[str, Any]], maxima: list[dict[str, Any]]) -> dict[str, Any]:
    """Per server and route: highest sustained rate, latency at 1,000/s, best throughput, ratios."""
    summary: dict[str, Any] = {}
    for row in rates:  # in run order: a retry (attempt 2) replaces a failed attempt 1
        entry = summary.setdefault(row["server"], {}).setdefault(row["route"], {})
        if row["sustained"]:
            entry["max_sustained_rps"] = max(entry.get("max_sustained_rps", 0), row["target_rps"])
        if row["target_rps"] == 1000:
            keys = ["client_p50_ms", "client_p99_ms", "server_p50_ms", "server_p99_ms"]
            keys += ["server_cpu_p50_ms", "server_cpu_p99_ms", "server_wait_percent", "sustained"]
            entry["at_1000_rps"] = {k: row[k] for k in keys}
    for row in maxima:
        entry = summary.setdefault(row["server"], {}).setdefault(row["route"], {})
        key = "max_rps" if row["generator"] == "python" else "max_rps_wrk"
        if row["throughput_rps"] is not None and row["errors"] == 0:
            entry[key] = max(entry.get(key, 0.0), row["throughput_rps"])
        cost = row["server_cpu_us_per_review"]
        if row["generator"] == "python" and cost is not None:
            best = entry.get("server_cpu_us_per_review")
            entry["server_cpu_us_per_review"] = cost if best is None else min(best, cost)
    # Ratios to bare pair each attempt with bare's attempt of the same round (run back to back,
    # so both met the same machine) and take the median over rounds: one disturbed phase moves
    # neither the median nor, unlike a ratio of two bests, pairs figures from different minutes.
    by_round: dict[tuple[str, str, str, int], dict[str, Any]] = {
        (row["server"], row["route"], row["generator"], row["attempt"]): row for row in maxima
    }
    for (name, route, generator, attempt), row in by_round.items():
        base = by_round.get(("bare", route, generator, attempt))
        if base is None or row["errors"] or base["errors"]:
            continue
        entry = summary[name][route]
        suffix = "" if generator == "python" else "_wrk"
        if row["throughput_rps"] and base["throughput_rps"]:
            ratios = entry.setdefault(f"max_rps{suffix}_vs_bare_rounds", [])
            ratios.append(round(row["throughput_rps"] / base["throughput_rps"], 3))
        cost, base_cost = row["server_cpu_us_per_review"], base["server_cpu_us_per_review"]
        if generator == "python" and cost and base_cost:
            entry.setdefault("cpu_capacity_vs_bare_rounds", []).append(round(base_cost / cost, 3))
    for routes in summary.values():
        for entry in routes.values():
            for key in ("max_rps_vs_bare", "max_rps_wrk_vs_bare", "cpu_capacity_vs_bare"):
                if entry.get(f"{key}_rounds"):
                    entry[key] = round(statistics.median(entry[f"{key}_rounds"]), 3)
    targets: dict[str, Any] = {}
    for route, entry in summary.get("torchgate", {}).items():
        ratio = entry.get("max_rps_vs_bare")
        cpu_ratio = entry.get("cpu_capacity_vs_bare")
        p99 = entry.get("at_1000_rps", {}).get("server_p99_ms")
        cpu_p99 = entry.get("at_1000_rps", {}).get("server_cpu_p99_ms")
        targets[route] = {
            "throughput_vs_bare_at_least_0.40": None if ratio is None else ratio >= TARGET_VS_BARE,
            "cpu_capacity_vs_bare_at_least_0.40": (
                None if cpu_ratio is None else cpu_ratio >= TARGET_VS_BARE
            ),
            "server_p99_at_1000_rps_at_most_2ms": None if p99 is None else p99 <= 2.0,
            "server_cpu_p99_at_1000_rps_at_most_2ms": None if cpu_p99 is None else cpu_p99 <= 2.0,
        }
    summary["targets"] = targets
    return summary


def target_line(summary: dict[str, Any]) -> tuple[str, bool]:
    """The line a run ends with, and whether it passes.

    Each route's torchgate throughput as a share of bare's (median over rounds) must be at
    least ``TARGET_VS_BARE``; ``FAIL`` marks a route below it.
    """
    parts: list[str] = []
    passed = True
    for route, entry in sorted(summary.get("torchgate", {}).items()):
        ratio = entry.get("max_rps_vs_bare")
        if ratio is None:
            parts.append(f"{route} n/a")
            continue
        ok = ratio >= TARGET_VS_BARE
        passed = passed and ok
        parts.append(f"{route} {ratio:.2f} {'PASS' if ok else 'FAIL'}")
    text = f"TARGET torchgate throughput >= {TARGET_VS_BARE:.2f} of bare (median over rounds): " + (
        ", ".join(parts) or "n/a"
    )
    return text, passed
