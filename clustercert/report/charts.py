"""The report's charts: matplotlib (Agg) figures as PNG data URIs with deterministic bytes."""

from __future__ import annotations

import base64
import contextlib
import contextvars
import functools
import io
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "Chart",
    "bus_bandwidth_charts",
    "event_timeline_chart",
    "goodput_chart",
    "judged_score",
    "pair_heatmap_chart",
    "scaling_chart",
    "shared_charts",
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
_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
_DASHES = ["-", "--", "-.", ":"]
_BODY_IN = 7.09  # a chart is drawn at the page body's width (A4 less 15 mm margins), in inches
_MIN_PT = 6.5  # the smallest label on the printed page, in points


def _pt(fig_width_in: float) -> float:
    """The font size that prints at _MIN_PT once a figure this wide is scaled to the page body's width."""
    return _MIN_PT * max(1.0, fig_width_in / _BODY_IN)


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


_F = TypeVar("_F", bound=Callable[..., Any])
_SHARED: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("clustercert_charts", default=None)


@contextlib.contextmanager
def shared_charts(drawn: dict[str, Any] | None = None) -> Iterator[None]:
    """Within it, a chart asked for twice with the same data is drawn once: the auditor's report and its redacted
    copy share every chart no hostname, user name or process id enters (the same data gives the same bytes).

    `drawn` is where the charts are kept, keyed by their function and arguments: what another process drew for the
    same data (`clustercert.report.ahead`) is taken from there, and what is drawn within is added to it."""
    token = _SHARED.set({} if drawn is None else drawn)
    try:
        yield
    finally:
        _SHARED.reset(token)


def _shareable(fn: _F) -> _F:
    @functools.wraps(fn)
    def drawn(*args: Any, **kwargs: Any) -> Any:
        memo = _SHARED.get()
        if memo is None:
            return fn(*args, **kwargs)
        key = fn.__name__ + json.dumps([args, kwargs], sort_keys=True, default=repr)
        if key not in memo:
            memo[key] = fn(*args, **kwargs)
        return memo[key]

    return drawn  # type: ignore[return-value]


def _rc() -> Any:
    import matplotlib

    return matplotlib.rc_context(_RC)  # type: ignore[arg-type]  # the stubs want literal keys


def _figure(width: float, height: float, *, constrained: bool = True) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=DPI, layout="constrained" if constrained else None)


def _png(fig: Any) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    buffer = io.BytesIO()
    canvas: Any = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    with _rc():
        # Printed by the Agg canvas, not savefig: a figure with a layout engine is laid out at the start of its one
        # draw, where savefig drew it once more without output only to lay it out.
        # Agg writes no timestamp; dropping "Software" leaves no version string in the PNG either.
        canvas.print_png(buffer, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _draw(width: float, height: float, *, constrained: bool = True) -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    with _rc():
        return _figure(width, height, constrained=constrained)


_PAD_PT = 3.0  # the constrained layout's pad between the figure's edge and what it holds (3/72 inch)


def _fit_margins(fig: Any, ax: Any) -> None:
    """Lays out a figure of one axes: by `_margins()` where it measures them, else by the constrained layout."""
    margins = _margins(fig, ax)
    if margins is None:
        fig.set_layout_engine("constrained")
        return
    width, height = (inches * 72.0 for inches in fig.get_size_inches())
    left, right, bottom, top = margins
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height)


def _margins(fig: Any, ax: Any) -> tuple[float, float, float, float] | None:
    """The margins (left, right, bottom, top, in points) of a figure of one plain axes, from the sizes of its texts:
    what the constrained layout finds for it (on each side the pad, then the texts and ticks of that side), without
    drawing the figure once more to find them (the constrained layout draws a chart twice, once only to lay it out);
    None for a chart that is not plain (another axes or a colour bar, a legend outside the axes, minor tick labels,
    an offset above an axis, rotated tick labels).

    Each text is measured as the PNG draws it: its own extent by the Agg renderer the PNG is drawn with."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    legend = ax.get_legend()
    if len(fig.axes) != 1 or (legend is not None and legend.get_bbox_to_anchor() is not ax.bbox):
        return None
    canvas: Any = FigureCanvasAgg(fig)  # the canvas `_png` then prints the figure on
    renderer = canvas.get_renderer()
    points = 72.0 / fig.dpi
    xs, ys = _tick_labels(ax, 0, renderer, points), _tick_labels(ax, 1, renderer, points)
    if xs is None or ys is None:
        return None

    def room(label: Any, pad: float, side: int) -> float:  # an axis label and its pad; nothing without one
        size = _extent(label, renderer, points)[side]
        return size + pad if size else 0.0

    left = _PAD_PT + room(ax.yaxis.label, ax.yaxis.labelpad, 0) + max((c for *_, c in ys), default=0.0) \
        + _tick_room("y")
    bottom = _PAD_PT + room(ax.xaxis.label, ax.xaxis.labelpad, 1) + max((c for *_, c in xs), default=0.0) \
        + _tick_room("x")
    # the title sits its pad above the axes, its descent below that line: where it reaches, as it is placed now
    top = _PAD_PT + (max(0.0, ax.title.get_window_extent(renderer).y1 - ax.bbox.y1) * points
                     if ax.title.get_text() else 0.0)
    right = _PAD_PT
    # A tick label near either end of the axes reaches past that end (an x label by half its width, a y label by
    # about half its height): the axes' size as the margins so far make it
    span = fig.get_size_inches()[0] * 72.0 - left - right
    for at, before, after, _ in xs:
        left = max(left, _PAD_PT + before - at * span)
        right = max(right, _PAD_PT + after - (1.0 - at) * span)
    rise = fig.get_size_inches()[1] * 72.0 - top - bottom
    for at, below, above, _ in ys:
        top = max(top, _PAD_PT + above - (1.0 - at) * rise)
        bottom = max(bottom, _PAD_PT + below - at * rise)
    return left, right, bottom, top


def _extent(text: Any, renderer: Any, points: float) -> tuple[float, float]:
    """A text's width and height in points, as `renderer` draws it; nothing when it is empty."""
    if not text.get_visible() or not text.get_text():
        return 0.0, 0.0
    box = text.get_window_extent(renderer)
    return box.width * points, box.height * points


def _tick_room(axis: str) -> float:
    """The ticks outside the axes and the pad to their labels, of the "x" or "y" axis."""
    import matplotlib

    rc: Any = matplotlib.rcParams
    return (0.0 if rc[f"{axis}tick.direction"] == "in" else float(rc[f"{axis}tick.major.size"])) \
        + float(rc[f"{axis}tick.major.pad"])


def _tick_labels(ax: Any, along: int, renderer: Any, points: float) -> list[tuple[float, float, float, float]] | None:
    """Each tick label of the x (`along` 0) or y (1) axis within its view: where its tick is, as a fraction of the
    axes from their left (or bottom) edge, an inverted axis too; how far the label reaches before and after its
    tick along the axis, and its size across; in points. None where the axis is not plain."""
    axis = ax.xaxis if along == 0 else ax.yaxis
    axis.get_majorticklabels()  # the labels' texts and places, as the ticks are drawn
    if (axis.get_major_formatter().get_offset() or any(t.get_text() for t in axis.get_minorticklabels())
            or any(t.label1.get_rotation() != 0.0 for t in axis.get_major_ticks())):
        return None
    first, last = axis.get_view_interval()  # at the axes' left (bottom) and right (top) edges
    scale = axis.get_transform()
    start, end = scale.transform([first, last])
    place = ax.get_xaxis_transform() if along == 0 else ax.get_yaxis_transform()
    out = []
    for tick in axis.get_major_ticks():
        loc = tick.get_loc()
        if not (min(first, last) <= loc <= max(first, last) and tick.label1.get_text()):
            continue
        box = tick.label1.get_window_extent(renderer)  # centred on its tick, or (y) on its baseline's middle
        at = place.transform((loc, 0.0) if along == 0 else (0.0, loc))[along]
        low, high = (box.x0, box.x1) if along == 0 else (box.y0, box.y1)
        out.append(((scale.transform([loc])[0] - start) / (end - start), (at - low) * points,
                    (high - at) * points, (box.height if along == 0 else box.width) * points))
    return out


def _color(i: int) -> str:
    return _COLORS[i % len(_COLORS)]


@_shareable
def step_time_charts(series: Sequence[dict[str, Any]]) -> list[Chart]:
    """Step time per iteration for each workload (every repeat a line), the measurement window shaded."""

    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for s in series:
        groups.setdefault((str(s["workload"]), str(s["precision"]), int(s["gpus"])), []).append(s)
    charts = []
    for (workload, precision, gpus), runs in groups.items():
        with _rc():
            fig = _draw(6.6, 2.3, constrained=False)
            ax = fig.add_subplot()
            first, last = runs[0]["window"]
            ax.axvspan(first - 0.5, last + 0.5, color="#f3d98b", alpha=0.5, label=f"window {first}–{last}")
            for i, run in enumerate(runs):
                ax.plot(run["iterations"], run["step_time_s"], lw=1.0, marker=".", ms=2.5, color=_color(i),
                        label=str(run["run"]))
            baseline = runs[0].get("baseline_step_s")
            if baseline is not None:
                ax.axhline(float(baseline), color="#111111", ls="--", lw=1.0, label=f"baseline {float(baseline):.3f} s")
            # Warm-up steps can be many times the steady step time; clip them so the window's spread shows.
            values = sorted(float(v) for run in runs for v in run["step_time_s"] if v is not None)
            median = values[len(values) // 2]
            steady = [v for v in values if v <= 1.2 * median]
            clipped = len(values) - len(steady)
            if clipped:
                low = min(steady[0], float(baseline)) if baseline is not None else steady[0]
                high = max(steady[-1], float(baseline)) if baseline is not None else steady[-1]
                span = max(high - low, 0.01 * median)
                ax.set_ylim(low - 0.5 * span, high + 0.5 * span)
                ax.text(0.01, 0.97, f"{clipped} warm-up point(s) above the axis", transform=ax.transAxes,
                        fontsize=6.5, va="top", color="#555555")
            ax.set_xlabel("iteration")
            ax.set_ylabel("step time (s)")
            ax.set_title(f"{workload} {precision.upper()} at {gpus} GPUs: step time per iteration")
            ax.legend(loc="upper right", fontsize=6.5, ncols=2)
            _fit_margins(fig, ax)
            uri = _png(fig)
        n = sum(len(r["iterations"]) for r in runs)
        charts.append(Chart(
            id=f"chart-step-{workload}-{precision}-{gpus}",
            title=f"{workload} {precision.upper()} step time",
            alt=(f"Line chart of step time against iteration for {len(runs)} run(s) of {workload} "
                 f"{precision.upper()} at {gpus} GPUs ({n} points); the measurement window, iterations "
                 f"{first} to {last}, is shaded"
                 + (f"; the baseline's {float(baseline):.3f} s is a dashed line" if baseline is not None else "")
                 + (f"; {clipped} warm-up point(s) above 1.2 times the median are clipped." if clipped else ".")),
            uri=uri,
        ))
    return charts


@_shareable
def scaling_chart(weak: Sequence[dict[str, Any]], target: float | None = None) -> Chart | None:
    """Weak-scaling efficiency against GPU count, one line per workload, the ideal at 100 % and the target line.

    The axis starts at 0 % (or below the lowest point) so a 1 % drop looks like one."""
    if not weak or not any(w.get("points") for w in weak):
        return None
    with _rc():
        fig = _draw(6.6, 2.6, constrained=False)
        ax = fig.add_subplot()
        gpus_all = sorted({int(p["gpus"]) for w in weak for p in w["points"]})
        ax.plot(gpus_all, [100.0] * len(gpus_all), ls="--", color="#555555", lw=1.0, label="ideal (100 %)")
        if target is not None:
            ax.axhline(100.0 * float(target), color="#c0392b", ls=":", lw=1.2,
                       label=f"target {100.0 * float(target):.0f} %")
        effs = [100.0 * float(p["efficiency"]) for w in weak for p in w["points"]]
        ax.set_ylim(min(0.0, min(effs) - 5.0), max(110.0, max(effs) + 5.0))
        for i, w in enumerate(weak):
            points = sorted(w["points"], key=lambda p: int(p["gpus"]))
            # lines at the same efficiencies lie on each other: each its own marker, size and dash shows them all
            ax.plot([p["gpus"] for p in points], [100.0 * float(p["efficiency"]) for p in points],
                    marker=_MARKERS[i % len(_MARKERS)], ms=max(3.0, 7.5 - 1.5 * i), mfc="none" if i % 2 else None,
                    ls=_DASHES[i % len(_DASHES)], lw=1.2, color=_color(i),
                    label=f"{w['workload']} {str(w['precision']).upper()}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(gpus_all, [str(g) for g in gpus_all])
        ax.set_xlabel("GPUs")
        ax.set_ylabel("weak-scaling efficiency (%)")
        ax.set_title("Scaling efficiency against GPU count")
        ax.legend(fontsize=6.5, loc="lower left")
        _fit_margins(fig, ax)
        uri = _png(fig)
    return Chart(
        id="chart-scaling", title="Weak-scaling efficiency",
        alt=(f"Line chart of weak-scaling efficiency in percent against GPU count ({', '.join(map(str, gpus_all))}) "
             f"for {len(weak)} workload(s), on an axis from 0 %, with a dashed ideal line at 100 %"
             + (f" and a dotted target line at {100.0 * float(target):.0f} %." if target is not None else ".")),
        uri=uri,
    )


def _gbps(value: Any) -> str:
    return "none" if value is None else f"{float(value):.1f} GB/s"


@_shareable
def bus_bandwidth_charts(collectives: Sequence[dict[str, Any]]) -> list[Chart]:
    """Bus bandwidth against message size per collective run, with its target and expected value; the axis is
    scaled to the data, the target and the expected value (the ceiling is drawn only when it is in range)."""

    charts = []
    for c in collectives:
        with _rc():
            uri = _png(_bus_figure(c))
        sizes = c["sizes_bytes"]
        charts.append(Chart(
            id=f"chart-busbw-{c['run']}", title=f"{c['collective']} {c['scope']} bus bandwidth",
            alt=(f"Line chart of {c['collective']} bus bandwidth against message size over {c['ranks']} ranks "
                 f"({c['scope']}), {len(sizes)} sizes; large-message busbw {_gbps(c.get('large_busbw_gbps'))} "
                 f"(gated; peak {_gbps(c.get('peak_busbw_gbps'))}, the file's average "
                 f"{_gbps(c.get('avg_busbw_gbps'))}) against a target of {_gbps(c.get('target_gbps'))}, an "
                 f"expected value of {_gbps(c.get('expected_gbps'))} and a plausibility ceiling of "
                 f"{_gbps(c.get('ceiling_gbps'))}; status {c['status']}."),
            uri=uri,
        ))
    return charts


def _bus_figure(c: dict[str, Any]) -> Any:
    """The figure of one collective run's bus bandwidth chart (inside `_rc()`), laid out by `_fit_margins`."""
    fig = _draw(6.6, 2.3, constrained=False)
    ax = fig.add_subplot()
    sizes = [float(s) for s in c["sizes_bytes"]]
    values = [float(v) for v in c["busbw_gbps"]]
    ax.plot(sizes, values, marker=".", ms=3, color=_color(0), label="measured busbw")
    lines = [float(c[k]) for k in ("target_gbps", "expected_gbps") if c.get(k) is not None]
    top = max([*values, *lines, 1.0]) * 1.15
    if c.get("expected_gbps") is not None:
        ax.axhline(float(c["expected_gbps"]), color="#17808a", ls="-.", lw=1.0,
                   label=f"expected {float(c['expected_gbps']):.0f} GB/s (link model)")
    if c.get("target_gbps") is not None:
        ax.axhline(float(c["target_gbps"]), color="#2e8b57", ls="--", lw=1.0,
                   label=f"target {float(c['target_gbps']):.0f} GB/s")
    if float(c["ceiling_gbps"]) <= top:
        ax.axhline(float(c["ceiling_gbps"]), color="#c0392b", ls=":", lw=1.2,
                   label=f"plausibility ceiling {float(c['ceiling_gbps']):.0f} GB/s")
    upper = max(top, float(c["ceiling_gbps"]) * 1.05) if float(c["ceiling_gbps"]) <= top else top
    ax.set_ylim(0.0, upper)
    ax.set_xscale("log", base=2)
    # Sizes as nccl-tests users read them (64 MiB, not 2^26): plain text, so no mathtext parse per distinct label
    # (a sizeable part of these charts' drawing)
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(_bytes_label))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("message size")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"{c['collective']} over {c['ranks']} ranks ({c['scope']}): {c['status']}")
    ax.legend(fontsize=6.5, loc="lower right")
    _fit_margins(fig, ax)
    return fig


def _bytes_label(value: float, _pos: int | None = None) -> str:
    """A tick's byte count in binary units: 8 B, 512 KiB, 64 MiB, 16 GiB (a log-2 axis ticks at powers of two)."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:g} {unit}"
    return f"{value:g} B"


@_shareable
def pair_heatmap_chart(pairs: Sequence[dict[str, Any]]) -> Chart | None:
    """Nodes x nodes: each measured pair's worst fraction of its peers' median; failed pairs crossed, degraded
    ones outlined. A node in most bad pairs shows as a bad row and column, a bad link as one cell."""
    import matplotlib

    if not pairs:
        return None
    nodes = sorted({str(n) for p in pairs for n in p["nodes"]})
    if len(nodes) < 3:
        return None
    index = {n: i for i, n in enumerate(nodes)}
    worst: dict[tuple[int, int], float] = {}
    failed: set[tuple[int, int]] = set()
    degraded: set[tuple[int, int]] = set()
    for p in pairs:
        a, b = (index[str(n)] for n in p["nodes"])
        cells = [(a, b), (b, a)]
        share = p.get("fraction_of_median")
        for cell in cells:
            if p["busbw_gbps"] is None:
                failed.add(cell)
            elif share is not None:
                worst[cell] = min(worst.get(cell, 2.0), float(share))
            if p["degraded"]:
                degraded.add(cell)
    grid = [[worst.get((r, c), float("nan")) for c in range(len(nodes))] for r in range(len(nodes))]
    with _rc():
        size = min(7.0, 2.4 + 0.22 * len(nodes))
        fig = _draw(size + 1.2, size)
        ax = fig.add_subplot()
        ax.grid(False)
        image = ax.imshow(grid, cmap="RdYlGn", vmin=0.0, vmax=1.2, interpolation="nearest")
        for r, c in sorted(failed):
            ax.plot([c - 0.4, c + 0.4], [r - 0.4, r + 0.4], color="black", lw=1.0)
            ax.plot([c - 0.4, c + 0.4], [r + 0.4, r - 0.4], color="black", lw=1.0)
        for r, c in sorted(degraded - failed):
            ax.add_patch(matplotlib.patches.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="#000000",
                                                      lw=1.2))
        step = max(1, len(nodes) // 40)
        labels = [n for n in nodes[::step]]
        ax.set_xticks(range(0, len(nodes), step), labels, rotation=90, fontsize=_pt(size + 1.2))
        ax.set_yticks(range(0, len(nodes), step), labels, fontsize=_pt(size + 1.2))
        ax.set_title("Node pairs: worst busbw / median of its peers (x: failed, outlined: degraded)")
        fig.colorbar(image, ax=ax, label="fraction of the median of pairs of its shape", shrink=0.8)
        uri = _png(fig)
    bad_nodes: dict[str, int] = {}
    for r, c in failed | degraded:
        if r < c:
            for n in (nodes[r], nodes[c]):
                bad_nodes[n] = bad_nodes.get(n, 0) + 1
    top = sorted(bad_nodes.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    return Chart(
        id="chart-pairs", title="Node pair heat map",
        alt=(f"Heat map of {len(nodes)} nodes by {len(nodes)} nodes: for each measured pair the lowest busbw as a "
             f"fraction of the median of its peers; {len({tuple(sorted(c)) for c in failed}) } failed and "
             f"{len({tuple(sorted(c)) for c in degraded - failed})} degraded pair(s) marked"
             + ("; nodes in the most bad pairs: " + ", ".join(f"{n} ({k})" for n, k in top) if top else "") + "."),
        uri=uri,
    )


@_shareable
def straggler_map_chart(stragglers: Sequence[dict[str, Any]], threshold: float | None = None) -> Chart | None:
    """The judged score per GPU (the lower of its relative score over the run and over its worst window), nodes
    grouped by NVLink domain, on fixed bounds: red below `threshold` (flagged), amber from it to halfway to 1,
    green above; flagged ranks outlined."""
    import matplotlib
    from matplotlib.colors import BoundaryNorm, ListedColormap

    stragglers = [s for s in stragglers if s.get("gpu") is not None and s.get("relative_score") is not None]
    if not stragglers:  # nothing was scored per GPU: no chart for a check that judged nothing
        return None
    nodes: list[tuple[str, str]] = sorted({(str(s["domain"]), str(s["node"])) for s in stragglers})
    gpus = sorted({int(s["gpu"]) for s in stragglers})
    row = {n: i for i, n in enumerate(nodes)}
    col = {g: i for i, g in enumerate(gpus)}
    grid = [[float("nan")] * len(gpus) for _ in nodes]
    for s in stragglers:
        grid[row[(str(s["domain"]), str(s["node"]))]][col[int(s["gpu"])]] = judged_score(s)
    flagged = [s for s in stragglers if s["flagged"]]
    line = float(threshold) if threshold is not None else 0.9
    bounds = [0.0, line, (line + 1.0) / 2.0, 1.0 + 1e-9]
    with _rc():
        height = min(9.0, 1.2 + 0.16 * len(nodes))
        fig = _draw(6.6, height)
        ax = fig.add_subplot()
        ax.grid(False)
        image = ax.imshow(grid, aspect="auto", cmap=ListedColormap(["#c0392b", "#d68910", "#2e8b57"]),
                          norm=BoundaryNorm(bounds, 3), interpolation="nearest")
        for s in flagged:
            ax.add_patch(matplotlib.patches.Rectangle(
                (col[int(s["gpu"])] - 0.5, row[(str(s["domain"]), str(s["node"]))] - 0.5), 1, 1,
                fill=False, edgecolor="#c0392b", lw=1.6))
        ax.set_xticks(range(len(gpus)), [str(g) for g in gpus])
        step = max(1, len(nodes) // 40)
        ax.set_yticks(range(0, len(nodes), step), [f"{d} / {n}" for d, n in nodes[::step]], fontsize=_pt(6.6))
        # Thin lines between NVLink domains.
        for i in range(1, len(nodes)):
            if nodes[i][0] != nodes[i - 1][0]:
                ax.axhline(i - 0.5, color="white", lw=1.2)
        ax.set_xlabel("GPU")
        ax.set_title(f"Straggler map: judged score by NVLink domain / node / GPU (red: flagged, below {line:.2f})")
        fig.colorbar(image, ax=ax, label="judged score (1 = the fastest GPU)", shrink=0.8, ticks=[*bounds[:3], 1.0])
        uri = _png(fig)
    domains = sorted({d for d, _ in nodes})
    return Chart(
        id="chart-stragglers", title="Straggler map",
        alt=(f"Heat map of the judged score of {len(stragglers)} ranks on {len(nodes)} nodes in {len(domains)} "
             f"NVLink domain(s), {len(gpus)} GPUs per node; {len(flagged)} flagged rank(s) outlined in red"
             + (": " + ", ".join(f"{s['node']} GPU {s['gpu']}" for s in flagged[:8]) if flagged else "") + "."),
        uri=uri,
    )


def judged_score(s: dict[str, Any]) -> float:
    """The score a straggler is judged by: the lower of its relative score over the run and over its worst window."""
    window = s.get("lowest_window_score")
    return min(float(s["relative_score"]), float(window)) if window is not None else float(s["relative_score"])


_SPARE = ["#e377c2", "#bcbd22", "#000000", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#aec7e8"]


def _distinct_colors(kinds: Sequence[str]) -> dict[str, str]:
    """Each kind its own colour: the fixed one where it has one, else one no other kind uses."""
    out = {k: BADPUT_COLORS[k] for k in kinds if k in BADPUT_COLORS}
    taken = {*out.values(), BADPUT_COLORS["productive"]}  # productive's green is kept for productive time
    free = [c for c in [*_COLORS, *_SPARE] if c not in taken]
    for k in kinds:
        if k not in out:
            out[k] = free.pop(0) if free else "#333333"
    return out


@_shareable
def goodput_chart(goodput: dict[str, Any]) -> Chart | None:
    """The timeline of productive and badput intervals above a bar of badput seconds by kind."""

    intervals = goodput.get("intervals") or []
    badput: dict[str, float] = {str(k): float(v) for k, v in (goodput.get("badput") or {}).items()}
    if not intervals and not badput:
        return None
    kinds = sorted({str(i["kind"]) for i in intervals} | set(badput))
    color = _distinct_colors(kinds)
    with _rc():
        fig = _draw(6.6, 2.8)
        top, bottom = fig.subplots(2, 1, height_ratios=[1, 1.3])
        wall = float(goodput.get("wall_s", 0.0))
        if wall > 0 and "productive" not in kinds:
            # The intervals are the badput ones: the rest of the wall time is productive, drawn under them so the
            # timeline covers the whole run.
            top.broken_barh([(0.0, wall)], (0, 1), facecolors=BADPUT_COLORS["productive"], alpha=0.35,
                            label="productive (the rest)")
        for kind in kinds:
            spans = [(float(i["start_s"]), float(i["end_s"]) - float(i["start_s"])) for i in intervals
                     if str(i["kind"]) == kind]
            if spans:
                top.broken_barh(spans, (0, 1), facecolors=color[kind], label=kind)
        top.set_yticks([])
        if wall > 0:
            top.set_xlim(0.0, wall)
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
        alt=(f"Timeline of the whole run, {float(goodput.get('wall_s', 0.0)):.0f} s, with {len(intervals)} intervals "
             "coloured by kind, "
             f"goodput {100.0 * float(goodput.get('goodput', 0.0)):.2f} %; below it a bar chart of badput seconds: "
             + ", ".join(f"{k} {badput[k]:.0f} s" for k in names) + "."),
        uri=uri,
    )


@_shareable
def event_timeline_chart(events: Sequence[dict[str, Any]]) -> Chart | None:
    """Faults, detection, restart and resume as marks on one lane per event type."""

    if not events:
        return None
    types = list(dict.fromkeys(str(e["type"]) for e in sorted(events, key=lambda e: float(e["time_s"]))))
    lane = {t: i for i, t in enumerate(types)}
    with _rc():
        fig = _draw(6.6, min(6.0, 1.0 + 0.28 * len(types)), constrained=False)
        ax = fig.add_subplot()
        for i, t in enumerate(types):
            xs = [float(e["time_s"]) for e in events if str(e["type"]) == t]
            ax.scatter(xs, [lane[t]] * len(xs), s=18, color=_color(i), zorder=3)
        ax.set_yticks(range(len(types)), types)
        ax.invert_yaxis()
        ax.set_xlabel("time since start (s)")
        ax.set_title("Resilience events")
        _fit_margins(fig, ax)
        uri = _png(fig)
    return Chart(
        id="chart-events", title="Resilience event timeline",
        alt=(f"Timeline of {len(events)} resilience events on {len(types)} lanes ({', '.join(types)}), "
             "each a dot at the time it happened; the events are listed in the table below."),
        uri=uri,
    )
