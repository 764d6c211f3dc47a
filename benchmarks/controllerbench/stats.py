"""Figures from samples: percentiles, deciles, write counts, the summary over rounds. Pure.

Rules:
- A percentile is the nearest-rank value of the sorted samples; no samples give NaN.
- Request counts come from the apiserver's ``apiserver_request_total`` lines, watch events from
  ``apiserver_watch_events_total`` and ``apiserver_watch_events_sizes_sum`` (its ``/metrics`` is
  ~1.7 MB, scraped twice a second by a process that shares the rig's cores: only those lines are
  split, instead of parsing every family), by ``"<verb> <resource>[/<subresource>]"``; writes
  are the POST, PUT, PATCH and DELETE among them.
- The summary gives the median over rounds and every round's value; every ratio pairs figures of
  the same round (the VM's speed drifts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from poolbench.stats import over as figure_over

WRITE_VERBS: Final = ("POST", "PUT", "PATCH", "DELETE")
REQUEST_TOTAL: Final = "apiserver_request_total{"
WATCH_EVENTS: Final = "apiserver_watch_events_total{"
WATCH_BYTES: Final = "apiserver_watch_events_sizes_sum{"


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank ``fraction`` percentile of ``values`` (NaN when empty)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def deciles(times: Sequence[float]) -> list[float]:
    """Seconds from the first of ``times`` (sorted) to each tenth of them."""
    return [
        round(times[min(len(times) - 1, len(times) * k // 10)] - times[0], 2) for k in range(1, 11)
    ]


def request_counts(metrics_text: str) -> dict[str, float]:
    """Every request the apiserver served so far, and every watch event it sent, from ``/metrics``.

    Requests by ``"<verb> <resource>[/<subresource>]"`` (GET, LIST and WATCH too), watch events
    as ``"watch events <Kind>"`` (``apiserver_watch_events_total`` counts an event once per
    watcher it is sent to) and their encoded bytes as ``"watch bytes <Kind>"``.
    """
    counts: dict[str, float] = {}
    for line in metrics_text.splitlines():
        if line.startswith(REQUEST_TOTAL):
            labels, value = _labels_and_value(line, REQUEST_TOTAL)
            resource = labels.get("resource", "")
            sub = labels.get("subresource", "")
            key = f"{labels.get('verb', '')} {resource}{'/' + sub if sub else ''}"
        elif line.startswith(WATCH_EVENTS):
            labels, value = _labels_and_value(line, WATCH_EVENTS)
            key = f"watch events {labels.get('kind', labels.get('resource', ''))}"
        elif line.startswith(WATCH_BYTES):
            labels, value = _labels_and_value(line, WATCH_BYTES)
            key = f"watch bytes {labels.get('kind', labels.get('resource', ''))}"
        else:
            continue
        counts[key] = counts.get(key, 0.0) + value
    return counts


def _labels_and_value(line: str, prefix: str) -> tuple[dict[str, str], float]:
    labels_text, _, value = line.rpartition(" ")
    inside = labels_text[len(prefix) : -1]
    pairs = (part.split("=", 1) for part in inside.split(",") if "=" in part)
    return {name: text.strip('"') for name, text in pairs}, float(value)


def write_counts(counts: dict[str, float]) -> dict[str, float]:
    """The write requests of :func:`request_counts`' figures (POST, PUT, PATCH, DELETE)."""
    return {k: v for k, v in counts.items() if k.split(" ", 1)[0] in WRITE_VERBS}


def read_counts(counts: dict[str, float]) -> dict[str, float]:
    """Everything of :func:`request_counts`' figures but the writes: reads and watch events."""
    return {k: v for k, v in counts.items() if k.split(" ", 1)[0] not in WRITE_VERBS}


def writes_since(before: dict[str, float], after: dict[str, float], per: int) -> dict[str, float]:
    """Write requests between two samples, per job or per pod, largest first."""
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    rows = {k: round(v / per, 2) for k, v in delta.items() if v > 0}
    return dict(sorted(rows.items(), key=lambda kv: -kv[1]))


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds; every ratio pairs figures of the same round (the VM's speed drifts)."""

    def over(path: tuple[str, ...]) -> dict[str, Any]:
        return figure_over(rounds, *path)

    summary: dict[str, Any] = {
        "rounds": len(rounds),
        "ratio_controller_to_plain": over(("ratio_controller_to_plain",)),
        "ratio_controller_to_plain_with_job_submissions": over(
            ("ratio_controller_to_plain_with_job_submissions",)
        ),
        "plain_pods_per_second": over(("baseline", "pods_per_second")),
        "plain_with_submissions_pods_per_second": over(
            ("baseline_with_job_submissions", "pods_per_second")
        ),
        "controller_first_wave_pods_per_second": over(("controller", "first_wave_pods_per_second")),
        "controller_first_wave_jobs_per_second": over(("controller", "first_wave_jobs_per_second")),
        "create_to_all_pods_first_wave_p50": over(
            ("controller", "create_to_all_pods_first_wave_p50")
        ),
        "create_to_all_pods_first_wave_p99": over(
            ("controller", "create_to_all_pods_first_wave_p99")
        ),
        "create_to_all_pods_all_jobs_p50": over(("controller", "create_to_all_pods_all_jobs_p50")),
        "create_to_all_pods_all_jobs_p99": over(("controller", "create_to_all_pods_all_jobs_p99")),
        "release_requested_p50": over(("controller", "release_requested_p50")),
        "release_requested_p99": over(("controller", "release_requested_p99")),
        "release_gone_p50": over(("controller", "release_gone_p50")),
        "release_gone_p99": over(("controller", "release_gone_p99")),
        "controller_peak_rss_mib": over(("controller", "controller_peak_rss_mib")),
        "jobs_done": over(("controller", "jobs_done")),
        "controller_creates_in_flight_first_wave": over(
            ("controller", "controller_creates_first_wave", "in_flight_mean")
        ),
        "controller_creates_waiting_first_wave": over(
            ("controller", "controller_creates_first_wave", "waiting_mean")
        ),
    }
    ratio = summary["ratio_controller_to_plain_with_job_submissions"]["median"]
    release_p99 = max(summary["release_requested_p99"]["rounds"])
    summary["targets"] = {
        "throughput_ratio_at_least_0_8": ratio >= 0.8,
        "release_requested_p99_at_most_1s": release_p99 <= 1.0,
    }
    return summary
