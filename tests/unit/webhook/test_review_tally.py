"""The per-review metrics, counted as plain numbers, expose what a Counter and Histogram would."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from torchgate.webhook.server import REVIEW_SECONDS_BUCKETS, Metrics

# (route, outcome, seconds): None for a review answered 400, which is counted but not timed.
ANSWERS = [
    ("validate", "allowed", 0.0003),
    ("validate", "allowed", 0.0002),  # on a bound: counted in that bound's bucket
    ("validate", "denied", 0.04),
    ("mutate", "allowed", 0.00001),
    ("mutate", "error", 3.0),  # above every bound: only in +Inf
    ("mutate", "bad_request", None),
]


def _prometheus_reference() -> str:
    registry = CollectorRegistry()
    reviews = Counter(
        "torchgate_webhook_reviews_total",
        "AdmissionReviews answered, by route and outcome.",
        ["route", "outcome"],
        registry=registry,
    )
    latency = Histogram(
        "torchgate_webhook_review_seconds",
        "Time to answer an AdmissionReview (server side), by route.",
        ["route"],
        buckets=REVIEW_SECONDS_BUCKETS,
        registry=registry,
    )
    for route in ("mutate", "validate"):
        latency.labels(route)
        for outcome in ("allowed", "denied", "error", "bad_request"):
            reviews.labels(route, outcome)
    for route, outcome, seconds in ANSWERS:
        reviews.labels(route, outcome).inc()
        if seconds is not None:
            latency.labels(route).observe(seconds)
    return generate_latest(registry).decode()


def _without_timestamps(text: str) -> list[str]:
    return sorted(re.sub(r"^(\S+_created\S*) \S+$", r"\1", line) for line in text.splitlines())


def test_the_tally_exposes_what_a_labelled_counter_and_histogram_expose() -> None:
    metrics = Metrics()
    for route, outcome, seconds in ANSWERS:
        tally = metrics.reviews.routes[route]
        tally.answered[outcome] += 1
        if seconds is not None:
            tally.observe(seconds)
    ours = [
        line
        for line in _without_timestamps(generate_latest(metrics.registry).decode())
        if "torchgate_webhook_review" in line
    ]
    assert ours == _without_timestamps(_prometheus_reference())
