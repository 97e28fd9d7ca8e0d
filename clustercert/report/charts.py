"""The report's charts: matplotlib (Agg) figures as PNG data URIs with deterministic bytes."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Chart",
    "bus_bandwidth_charts",
    "event_timeline_chart",
    "goodput_chart",
    "scaling_chart",
    "step_time_charts",
    "straggler_map_chart",
]

DPI = 110
# Fixed style: the bundled DejaVu font and no hashing salt or metadata that could vary between runs.
_RC: dict[str, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 8.0,
    "axes.titlesize": 9.0,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "svg.hashsalt": "clustercert",
    "path.simplify": False,
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
}
_COLORS = ["#1f5fa8", "#c0392b", "#2e8b57", "#8e44ad", "#d68910", "#17808a", "#7f8c8d", "#a04000"]
BADPUT_COLORS = {
    "productive": "#2e8b57", "checkpoint": "#1f5fa8", "restart": "#c0392b", "stall": "#d68910",
    "lost_work": "#8e44ad", "idle": "#7f8c8d", "initialization": "#17808a",
}


@dataclass(frozen=True)
class Chart:
    """One figure: `uri` is a data:image/png URI; `alt` describes what it shows for readers who cannot see it."""

    id: str
    title: str
    alt: str
    uri: str


def _rc() -> Any:
    import matplotlib

    return matplotlib.rc_context(_RC)  # type: ignore[arg-type]  # the stubs want literal keys


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _png(fig: Any) -> str:

    buffer = io.BytesIO()
    with _rc():
        # Agg writes no timestamp; dropping "Software" leaves no version string in the PNG either.
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _draw(width: float, height: float) -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    with _rc():
        return _figure(width, height)


def _color(i: int) -> str:
    return _COLORS[i % len(_COLORS)]


def step_time_charts(series: Sequence[dict[str, Any]]) -> list[Chart]:
    """Step time per iteration for each workload (every repeat a line), the measurement window shaded."""

    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for s in series:
        groups.setdefault((str(s["workload"]), str(s["precision"]), int(s["gpus"])), []).append(s)
    charts = []
    for (workload, precision, gpus), runs in groups.items():
        with _rc():
            fig = _draw(6.6, 2.3)
            ax = fig.add_subplot()
            first, last = runs[0]["window"]
            ax.axvspan(first - 0.5, last + 0.5, color="#f3d98b", alpha=0.5, label=f"window {first}–{last}")
            for i, run in enumerate(runs):
                ax.plot(run["iterations"], run["step_time_s"], lw=1.0, marker=".", ms=2.5, color=_color(i),
                        label=str(run["run"]))
            # Warm-up steps can be many times the steady step time; clip them so the window's spread shows.
            values = sorted(float(v) for run in runs for v in run["step_time_s"])
            median = values[len(values) // 2]
            steady = [v for v in values if v <= 1.2 * median]
            clipped = len(values) - len(steady)
            if clipped:
                span = max(steady[-1] - steady[0], 0.01 * median)
                ax.set_ylim(steady[0] - 0.5 * span, steady[-1] + 0.5 * span)
                ax.text(0.01, 0.97, f"{clipped} warm-up point(s) above the axis", transform=ax.transAxes,
                        fontsize=6.5, va="top", color="#555555")
            ax.set_xlabel("iteration")
            ax.set_ylabel("step time (s)")
            ax.set_title(f"{workload} {precision.upper()} at {gpus} GPUs: step time per iteration")
            ax.legend(loc="upper right", fontsize=6.5, ncols=2)
            uri = _png(fig)
        n = sum(len(r["iterations"]) for r in runs)
        charts.append(Chart(
            id=f"chart-step-{workload}-{precision}-{gpus}",
            title=f"{workload} {precision.upper()} step time",
            alt=(f"Line chart of step time against iteration for {len(runs)} run(s) of {workload} "
                 f"{precision.upper()} at {gpus} GPUs ({n} points); the measurement window, iterations "
                 f"{first} to {last}, is shaded"
                 + (f"; {clipped} warm-up point(s) above 1.2 times the median are clipped." if clipped else ".")),
            uri=uri,
        ))
    return charts


def scaling_chart(weak: Sequence[dict[str, Any]]) -> Chart | None:
    """Weak-scaling efficiency against GPU count, one line per workload, with the ideal line at 100 %."""

    if not weak:
        return None
    with _rc():
        fig = _draw(6.6, 2.6)
        ax = fig.add_subplot()
        gpus_all = sorted({int(p["gpus"]) for w in weak for p in w["points"]})
        ax.plot(gpus_all, [100.0] * len(gpus_all), ls="--", color="#555555", lw=1.0, label="ideal (100 %)")
        for i, w in enumerate(weak):
            points = sorted(w["points"], key=lambda p: int(p["gpus"]))
            ax.plot([p["gpus"] for p in points], [100.0 * float(p["efficiency"]) for p in points], marker="o",
                    ms=3.5, color=_color(i), label=f"{w['workload']} {str(w['precision']).upper()}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(gpus_all, [str(g) for g in gpus_all])
        ax.set_xlabel("GPUs")
        ax.set_ylabel("weak-scaling efficiency (%)")
        ax.set_title("Scaling efficiency against GPU count")
        ax.legend(fontsize=6.5, loc="lower left")
        uri = _png(fig)
    return Chart(
        id="chart-scaling", title="Weak-scaling efficiency",
        alt=(f"Line chart of weak-scaling efficiency in percent against GPU count ({', '.join(map(str, gpus_all))}) "
             f"for {len(weak)} workload(s), with a dashed ideal line at 100 %."),
        uri=uri,
    )


def _gbps(value: Any) -> str:
    return "none" if value is None else f"{float(value):.1f} GB/s"


def bus_bandwidth_charts(collectives: Sequence[dict[str, Any]]) -> list[Chart]:
    """Bus bandwidth against message size per collective run, with its target and the plausibility ceiling."""

    charts = []
    for c in collectives:
        with _rc():
            fig = _draw(6.6, 2.3)
            ax = fig.add_subplot()
            sizes = [float(s) for s in c["sizes_bytes"]]
            ax.plot(sizes, c["busbw_gbps"], marker=".", ms=3, color=_color(0), label="measured busbw")
            if c.get("target_gbps") is not None:
                ax.axhline(float(c["target_gbps"]), color="#2e8b57", ls="--", lw=1.0,
                           label=f"target {float(c['target_gbps']):.0f} GB/s")
            ax.axhline(float(c["ceiling_gbps"]), color="#c0392b", ls=":", lw=1.2,
                       label=f"plausibility ceiling {float(c['ceiling_gbps']):.0f} GB/s")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel("bus bandwidth (GB/s)")
            ax.set_title(f"{c['collective']} over {c['ranks']} ranks ({c['scope']}): {c['status']}")
            ax.legend(fontsize=6.5, loc="upper left")
            uri = _png(fig)
        charts.append(Chart(
            id=f"chart-busbw-{c['run']}", title=f"{c['collective']} {c['scope']} bus bandwidth",
            alt=(f"Line chart of {c['collective']} bus bandwidth against message size over {c['ranks']} ranks "
                 f"({c['scope']}), {len(sizes)} sizes; large-message busbw {_gbps(c.get('large_busbw_gbps'))} "
                 f"against a target of {_gbps(c.get('target_gbps'))} and a plausibility ceiling of "
                 f"{_gbps(c.get('ceiling_gbps'))}; status {c['status']}."),
            uri=uri,
        ))
    return charts


def straggler_map_chart(stragglers: Sequence[dict[str, Any]]) -> Chart | None:
    """Relative score per GPU, nodes grouped by NVLink domain; flagged ranks outlined."""
    import matplotlib

    # scores read from a log's straggler report name a rank and node, not a GPU index: no place on the map
    stragglers = [s for s in stragglers if s.get("gpu") is not None]
    if not stragglers:
        return None
    nodes: list[tuple[str, str]] = sorted({(str(s["domain"]), str(s["node"])) for s in stragglers})
    gpus = sorted({int(s["gpu"]) for s in stragglers})
    row = {n: i for i, n in enumerate(nodes)}
    col = {g: i for i, g in enumerate(gpus)}
    grid = [[float("nan")] * len(gpus) for _ in nodes]
    for s in stragglers:
        grid[row[(str(s["domain"]), str(s["node"]))]][col[int(s["gpu"])]] = float(s["relative_score"])
    flagged = [s for s in stragglers if s["flagged"]]
    with _rc():
        height = min(9.0, 1.2 + 0.16 * len(nodes))
        fig = _draw(6.6, height)
        ax = fig.add_subplot()
        ax.grid(False)
        image = ax.imshow(grid, aspect="auto", cmap="viridis_r", interpolation="nearest")
        for s in flagged:
            ax.add_patch(matplotlib.patches.Rectangle(
                (col[int(s["gpu"])] - 0.5, row[(str(s["domain"]), str(s["node"]))] - 0.5), 1, 1,
                fill=False, edgecolor="#c0392b", lw=1.6))
        ax.set_xticks(range(len(gpus)), [str(g) for g in gpus])
        step = max(1, len(nodes) // 40)
        ax.set_yticks(range(0, len(nodes), step), [f"{d} / {n}" for d, n in nodes[::step]], fontsize=5.5)
        # Thin lines between NVLink domains.
        for i in range(1, len(nodes)):
            if nodes[i][0] != nodes[i - 1][0]:
                ax.axhline(i - 0.5, color="white", lw=1.2)
        ax.set_xlabel("GPU")
        ax.set_title("Straggler map: relative score by NVLink domain / node / GPU (red: flagged)")
        fig.colorbar(image, ax=ax, label="relative score (1 = median)", shrink=0.8)
        uri = _png(fig)
    domains = sorted({d for d, _ in nodes})
    return Chart(
        id="chart-stragglers", title="Straggler map",
        alt=(f"Heat map of the relative score of {len(stragglers)} ranks on {len(nodes)} nodes in {len(domains)} "
             f"NVLink domain(s), {len(gpus)} GPUs per node; {len(flagged)} flagged rank(s) outlined in red"
             + (": " + ", ".join(f"{s['node']} GPU {s['gpu']}" for s in flagged[:8]) if flagged else "") + "."),
        uri=uri,
    )


def goodput_chart(goodput: dict[str, Any]) -> Chart | None:
    """The timeline of productive and badput intervals above a bar of badput seconds by kind."""

    intervals = goodput.get("intervals") or []
    badput: dict[str, float] = {str(k): float(v) for k, v in (goodput.get("badput") or {}).items()}
    if not intervals and not badput:
        return None
    kinds = sorted({str(i["kind"]) for i in intervals} | set(badput))
    color = {k: BADPUT_COLORS.get(k, _color(j)) for j, k in enumerate(kinds)}
    with _rc():
        fig = _draw(6.6, 2.8)
        top, bottom = fig.subplots(2, 1, height_ratios=[1, 1.3])
        for kind in kinds:
            spans = [(float(i["start_s"]), float(i["end_s"]) - float(i["start_s"])) for i in intervals
                     if str(i["kind"]) == kind]
            if spans:
                top.broken_barh(spans, (0, 1), facecolors=color[kind], label=kind)
        top.set_yticks([])
        top.set_xlabel("time since start (s)")
        top.set_title(f"Goodput timeline: goodput {100.0 * float(goodput.get('goodput', 0.0)):.2f} % of "
                      f"{float(goodput.get('wall_s', 0.0)):.0f} s")
        top.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        names = sorted(badput, key=lambda k: -badput[k])
        bottom.barh(names, [badput[k] for k in names], color=[color[k] for k in names])
        bottom.invert_yaxis()
        bottom.set_xlabel("badput (s)")
        uri = _png(fig)
    return Chart(
        id="chart-goodput", title="Goodput timeline and badput breakdown",
        alt=(f"Timeline of {len(intervals)} intervals coloured by kind over {float(goodput.get('wall_s', 0.0)):.0f} s, "
             f"goodput {100.0 * float(goodput.get('goodput', 0.0)):.2f} %; below it a bar chart of badput seconds: "
             + ", ".join(f"{k} {badput[k]:.0f} s" for k in names) + "."),
        uri=uri,
    )


def event_timeline_chart(events: Sequence[dict[str, Any]]) -> Chart | None:
    """Faults, detection, restart and resume as marks on one lane per event type."""

    if not events:
        return None
    types = list(dict.fromkeys(str(e["type"]) for e in sorted(events, key=lambda e: float(e["time_s"]))))
    lane = {t: i for i, t in enumerate(types)}
    with _rc():
        fig = _draw(6.6, min(6.0, 1.0 + 0.28 * len(types)))
        ax = fig.add_subplot()
        for i, t in enumerate(types):
            xs = [float(e["time_s"]) for e in events if str(e["type"]) == t]
            ax.scatter(xs, [lane[t]] * len(xs), s=18, color=_color(i), zorder=3)
        ax.set_yticks(range(len(types)), types)
        ax.invert_yaxis()
        ax.set_xlabel("time since start (s)")
        ax.set_title("Resilience events")
        uri = _png(fig)
    return Chart(
        id="chart-events", title="Resilience event timeline",
        alt=(f"Timeline of {len(events)} resilience events on {len(types)} lanes ({', '.join(types)}), "
             "each a dot at the time it happened; the events are listed in the table below."),
        uri=uri,
    )
