"""The text printed after a run: each round's figures, then the medians over rounds. Pure."""

from __future__ import annotations

from typing import Any


def cores(shares: dict[str, float]) -> str:
    """``name share`` pairs, busiest process first."""
    return ", ".join(
        f"{name} {share:.2f}" for name, share in sorted(shares.items(), key=lambda kv: -kv[1])
    )


def round_lines(number: int, result: dict[str, Any]) -> list[str]:
    """One round's figures."""
    c, b = result["controller"], result["baseline"]
    loaded = result["baseline_with_job_submissions"]
    ratio = result["ratio_controller_to_plain"]
    ratio_loaded = result["ratio_controller_to_plain_with_job_submissions"]
    return [
        f"round {number}",
        f"  baseline (plain script): {b['pods_per_second']:.0f} pods/s;"
        f" while the {loaded['jobs_submitted_meanwhile']} jobs are submitted:"
        f" {loaded['pods_per_second']:.0f} pods/s",
        f"  controller first wave:   {c['first_wave_pods_per_second']:.0f} pods/s"
        f" = {c['first_wave_jobs_per_second']:.1f} jobs/s"
        f" ({ratio:.0%} of plain, {ratio_loaded:.0%} of plain with the same submissions)",
        "  create -> all pods created: first wave"
        f" p50 {c['create_to_all_pods_first_wave_p50']:.2f}s"
        f" p99 {c['create_to_all_pods_first_wave_p99']:.2f}s;"
        f" all jobs p50 {c['create_to_all_pods_all_jobs_p50']:.2f}s"
        f" p99 {c['create_to_all_pods_all_jobs_p99']:.2f}s",
        "  Master success -> other pods deleted (requested):"
        f" p50 {c['release_requested_p50']:.3f}s p99 {c['release_requested_p99']:.3f}s;"
        f" gone: p50 {c['release_gone_p50']:.3f}s p99 {c['release_gone_p99']:.3f}s",
        f"  jobs done {c['jobs_done']}/{c['jobs']};"
        f" overall {c['overall_jobs_per_second']:.1f} jobs/s;"
        f" controller peak RSS {c['controller_peak_rss_mib']:.0f} MiB,"
        f" CPU {c['controller_cpu_seconds']:.0f}s"
        f" ({c['controller_cpu_share_of_one_core']:.0%} of one core)",
        f"  apiserver writes/s: plain script {b['apiserver_writes_per_second']:.0f},"
        f" controller first wave {c['apiserver_writes_per_second_first_wave']:.0f}",
        f"  machine CPU busy (2 cores = 100%): plain script {b['machine_cpu_busy']:.0%},"
        f" with submissions {loaded['machine_cpu_busy']:.0%},"
        f" controller first wave {c['machine_cpu_busy_first_wave']:.0%}",
        "  CPU cores by process, plain script: " + cores(b["cpu_cores_by_process"]),
        "    with submissions: " + cores(loaded["cpu_cores_by_process"]),
        "    controller first wave: " + cores(c["cpu_cores_by_process_first_wave"]),
        "  apiserver writes per pod in the window, plain script: "
        + ", ".join(f"{k} {v}" for k, v in b["apiserver_writes_per_pod_in_window"].items()),
        "    with submissions: "
        + ", ".join(f"{k} {v}" for k, v in loaded["apiserver_writes_per_pod_in_window"].items()),
        "    controller first wave: "
        + ", ".join(f"{k} {v}" for k, v in c["apiserver_writes_per_pod_first_wave"].items()),
        "  apiserver writes per job (8 pods), whole controller run: "
        + ", ".join(f"{k} {v}" for k, v in c["apiserver_writes_per_job"].items()),
        "  seconds to each tenth of the pods: plain script "
        + " ".join(f"{t:.1f}" for t in b["deciles_seconds"])
        + "; with submissions "
        + " ".join(f"{t:.1f}" for t in loaded["deciles_seconds"])
        + "; controller first wave "
        + " ".join(f"{t:.1f}" for t in c["first_wave_deciles_seconds"]),
        "  controller creates in the first wave: "
        + ", ".join(f"{k} {v}" for k, v in c["controller_creates_first_wave"].items()),
    ]


def summary_lines(result: dict[str, Any], out: str) -> list[str]:
    """The medians over rounds, each followed by every round's value."""
    summary = result["summary"]

    def figures(name: str, fmt: str) -> str:
        entry = summary[name]
        values = ", ".join(format(v, fmt) for v in entry["rounds"])
        return f"{format(entry['median'], fmt)} ({values})"

    return [
        f"summary over {summary['rounds']} round(s): median (each round)",
        "  controller vs plain script with the same submissions: "
        + figures("ratio_controller_to_plain_with_job_submissions", ".2f"),
        "  controller vs plain script alone: " + figures("ratio_controller_to_plain", ".2f"),
        "  first wave pods/s: controller "
        + figures("controller_first_wave_pods_per_second", ".0f")
        + "; plain "
        + figures("plain_pods_per_second", ".0f")
        + "; plain with submissions "
        + figures("plain_with_submissions_pods_per_second", ".0f"),
        "  jobs admitted/s in the first wave: "
        + figures("controller_first_wave_jobs_per_second", ".1f"),
        "  create -> all pods, first wave p50 "
        + figures("create_to_all_pods_first_wave_p50", ".2f")
        + " s, p99 "
        + figures("create_to_all_pods_first_wave_p99", ".2f")
        + " s",
        "  Master success -> deletion requested p50 "
        + figures("release_requested_p50", ".3f")
        + " s, p99 "
        + figures("release_requested_p99", ".3f")
        + " s",
        "  controller peak RSS MiB " + figures("controller_peak_rss_mib", ".0f"),
        "  controller creates in the first wave, in flight "
        + figures("controller_creates_in_flight_first_wave", ".1f")
        + f" of {result['setup']['write_concurrency']}, waiting for a slot "
        + figures("controller_creates_waiting_first_wave", ".1f"),
        f"  targets: {summary['targets']}",
        f"written to {out}",
    ]
