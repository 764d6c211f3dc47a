"""The scale report's PNGs, from the JSON of every size run so far (matplotlib, Agg backend).

Rules:
- ``scale-summary.png``: one panel per figure the report quotes, nodes on the x axis: pod-create
  rate (plain script and controller, the 0.8 line), admission and release latency, the
  controller's CPU and RSS per 1,000 pods, and the webhook's p99 idle and under load.
- ``scale-timeline-<nodes>.png``: per size, the pods held and the controller's RSS over the run.
- Sizes are sorted by node count; a figure a run lacks (NaN) is left out of its line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def load(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """The size documents, by node count."""
    docs = [json.loads(p.read_text()) for p in paths]
    return sorted(docs, key=lambda d: d["setup"]["nodes"])


def summary_plot(docs: Sequence[dict[str, Any]], out: Path) -> Path:
    """``scale-summary.png`` in ``out``."""
    nodes = [d["setup"]["nodes"] for d in docs]
    figure, axes = plt.subplots(2, 2, figsize=(11, 8))
    rate = axes[0][0]
    rate.plot(nodes, [d["plain"]["pods_per_second"] for d in docs], "o-", label="plain script")
    rate.plot(nodes, [d["controller"]["burst"]["pods_per_second"] for d in docs], "s-",
              label="torchgate controller")  # fmt: skip
    rate.plot(nodes, [0.8 * d["plain"]["pods_per_second"] for d in docs], ":", color="grey",
              label="0.8 x plain")  # fmt: skip
    for n, d in zip(nodes, docs, strict=True):
        spread = f" ({d['ratio_min']:.2f}-{d['ratio_max']:.2f})" if "ratio_min" in d else ""
        rate.annotate(f"{d['ratio_controller_to_plain']:.2f}{spread}",
                      (n, d["controller"]["burst"]["pods_per_second"]),
                      textcoords="offset points", xytext=(4, 6))  # fmt: skip
    rate.set(title="Pod creates/s in the burst, medians (ratio to plain)", xlabel="nodes",
             ylabel="pods/s")  # fmt: skip
    rate.set_ylim(bottom=0)
    rate.legend()

    latency = axes[0][1]
    for key, part, label in (
        ("admission_p50_seconds", "stream", "admission p50 (stream)"),
        ("admission_p99_seconds", "stream", "admission p99 (stream)"),
        ("release_gone_p99_seconds", "stream", "release p99 (stream)"),
        ("admission_p99_seconds", "burst", "admission p99 (burst)"),
        ("release_gone_p99_seconds", "burst", "release p99 (burst)"),
    ):
        latency.plot(nodes, [d["controller"][part][key] for d in docs], "o-", label=label)
    latency.set(title="Created -> all pods bound; Master done -> pods gone", xlabel="nodes",
                ylabel="seconds", yscale="log")  # fmt: skip
    latency.legend(fontsize="small")

    cost = axes[1][0]
    cost.plot(nodes, [d["controller"]["burst"]["controller_cpu_seconds_per_1000_pods"]
                      for d in docs], "o-", label="CPU s per 1,000 pods (burst)")  # fmt: skip
    cost.plot(nodes, [d["controller"]["stream"]["controller_cpu_seconds_per_1000_pods"]
                      for d in docs], "o-", label="CPU s per 1,000 pods (stream)")  # fmt: skip
    cost.plot(nodes, [d["controller"]["burst"]["controller_rss_mib_per_1000_pods"]
                      for d in docs], "s-", label="RSS MiB per 1,000 pods held")  # fmt: skip
    cost.set(title="Controller cost per 1,000 pods", xlabel="nodes")
    cost.set_ylim(bottom=0)
    cost.legend(fontsize="small")

    hook = axes[1][1]
    for where, label in (("idle", "idle"), ("burst", "during the burst"),
                         ("stream", "during the stream")):  # fmt: skip
        values = [
            (d["webhook_idle"] if where == "idle" else d["controller"][where]["webhook"])[
                "server_p99_ms"
            ]
            for d in docs
        ]
        hook.plot(nodes, values, "o-", label=f"server p99 {label}")
    hook.set(title="Webhook validate, server-side p99", xlabel="nodes", ylabel="ms")
    hook.set_ylim(bottom=0)
    hook.legend(fontsize="small")
    figure.tight_layout()
    path = out / "scale-summary.png"
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def timeline_plot(doc: dict[str, Any], out: Path) -> Path:
    """``scale-timeline-<nodes>.png`` in ``out``."""
    nodes = doc["setup"]["nodes"]
    timeline = doc["controller"]["timeline"]
    seconds = [t for t, _, _ in timeline]
    figure, pods = plt.subplots(figsize=(9, 4))
    pods.plot(seconds, [held for _, _, held in timeline], color="tab:blue")
    pods.set(xlabel="seconds from the first job", ylabel="pods held",
             title=f"{nodes} nodes: burst, then the steady stream")  # fmt: skip
    rss = pods.twinx()
    rss.plot(seconds, [r for _, r, _ in timeline], color="tab:red")
    rss.set_ylabel("controller RSS (MiB)", color="tab:red")
    figure.tight_layout()
    path = out / f"scale-timeline-{nodes}.png"
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def plot_all(paths: Sequence[Path], out: Path) -> list[Path]:
    """Every PNG from the size documents at ``paths``."""
    docs = load(paths)
    out.mkdir(parents=True, exist_ok=True)
    return [summary_plot(docs, out), *(timeline_plot(d, out) for d in docs)]
