"""Draw the README's PNG charts from the JSON the benches write with ``--json``.

Run: ``python bench/charts.py [--results docs/figures] [--out docs/figures]``
(needs matplotlib: ``pip install -e '.[bench]'``).

Reads whichever of these exist in ``--results`` and draws one PNG for each:

- ``log_size.json`` (bench/log_size_bench.py) -> ``log_size.png``: produce and
  consume MB/s against the log's size;
- ``latency.json`` (bench/latency_bench.py) -> ``latency.png``: produce ->
  long-poll consume latency percentiles, and ``idle_cpu.png``: an idle
  broker's CPU against its log count;
- ``recovery.json`` (bench/log_bench.py) -> ``recovery.png``: recovery time
  against the newest segment's size, full scan against the checkpoint.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

CAVEAT = "2 shared cores (load 3-10 from other work); figures vary run to run"


def save(fig, out: Path, name: str, title: str) -> None:
    fig.suptitle(title, fontsize=11)
    fig.text(0.5, 0.005, CAVEAT, ha="center", fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    print(f"wrote {out / name}")


def log_size_chart(data: dict, out: Path) -> None:
    rows = data["rows"]
    sizes = [r["log_gb"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, run, label, marker in (("produce_mb_s", "produce", "produce (acks=-1 at the end)", "o"),
                                    ("consume_tail_mb_s", "tail", "consume, tail (recent data)", "s"),
                                    ("consume_start_mb_s", "start", "consume, offset 0 (oldest data)", "^")):
        medians = [r[key] for r in rows]
        if all("runs_mb_s" in r for r in rows):  # whiskers: the slowest and fastest window
            spread = [[m - min(r["runs_mb_s"][run]) for m, r in zip(medians, rows)],
                      [max(r["runs_mb_s"][run]) - m for m, r in zip(medians, rows)]]
            ax.errorbar(sizes, medians, yerr=spread, marker=marker, capsize=4, label=label)
        else:
            ax.plot(sizes, medians, marker=marker, label=label)
    ax.set_xlabel("log size (GB)")
    ax.set_ylabel(f"MB/s over a {rows[0]['window_bytes'] / 1e6:.0f} MB window")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, out, "log_size.png", "Throughput against log size (one topic, 200 B messages)")


def latency_charts(data: dict, out: Path) -> None:
    if "latency_ms" in data:
        lat = data["latency_ms"]
        names = [n for n in ("p50", "p90", "p99", "p99.9", "max") if n in lat]
        fig, ax = plt.subplots(figsize=(7, 4))
        bars = ax.bar(names, [lat[n] for n in names], color="tab:blue")
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
        ax.set_ylabel("ms, produce -> long-poll consume")
        ax.grid(axis="y", alpha=0.3)
        save(fig, out, "latency.png", f"End-to-end latency, {data['rate']} msg/s, "
             f"flush interval {data['flush_interval_ms']} ms ({lat['messages']:,} messages)")
    if data.get("idle"):
        fig, ax = plt.subplots(figsize=(7, 4))
        counts = [r["logs"] for r in data["idle"]]
        ax.plot(counts, [r["core_share"] * 100 for r in data["idle"]], marker="o")
        ax.set_xscale("log")
        ax.set_xlabel("logs (empty partitions) on the broker")
        ax.set_ylabel(f"% of one core over {data['idle_seconds']:.0f} s")
        ax.set_ylim(bottom=0, top=max(1.0, *(r["core_share"] * 120 for r in data["idle"])))
        ax.grid(alpha=0.3)
        tick_pct = 100 / 100 / data["idle_seconds"]  # /proc counts CPU in 10 ms clock ticks
        ax.text(0.02, 0.92, f"0 = under one 10 ms clock tick in {data['idle_seconds']:.0f} s "
                f"(< {tick_pct:.1f}% of a core)", transform=ax.transAxes, fontsize=8)
        save(fig, out, "idle_cpu.png", "Idle broker CPU against log count")


def recovery_chart(data: dict, out: Path) -> None:
    rows = data["recovery"]
    sizes = [r["segment_mb"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label, style in (("full_scan_cached_s", "full scan, page cache warm", "o-"),
                              ("full_scan_evicted_s", "full scan, page cache evicted", "o--"),
                              ("checkpoint_cached_s", "recovery checkpoint, warm", "s-"),
                              ("checkpoint_evicted_s", "recovery checkpoint, evicted", "s--")):
        ax.plot(sizes, [r[key] for r in rows], style, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [f"{s:,.0f}" for s in sizes])
    ax.set_yscale("log")
    ax.set_xlabel("newest segment (MB)")
    ax.set_ylabel("seconds to open the log after a crash")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    save(fig, out, "recovery.png", "Recovery time against segment size")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", default="docs/figures", help="directory of the benches' JSON files")
    parser.add_argument("--out", default="docs/figures", help="directory for the PNGs")
    args = parser.parse_args()
    results, out = Path(args.results), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, draw in (("log_size.json", log_size_chart), ("latency.json", latency_charts),
                       ("recovery.json", recovery_chart)):
        path = results / name
        if path.exists():
            draw(json.loads(path.read_text()), out)
        else:
            print(f"no {path}: skipped")


if __name__ == "__main__":
    main()
