"""Scaling phase: weak-scaling efficiency per workload, collective bus bandwidth per scope, degraded pairs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clustercert.catalog import LoadedCatalog, Window
from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import LoadedBundle, Phase, RunKind, RunSpec
from clustercert.evidence.provenance import Span
from clustercert.metrics.collectives import (
    BusbwSample,
    Collective,
    CollectiveResult,
    CollectiveRun,
    Scope,
    find_degraded_pairs,
    judge_collective,
    plausibility_ceiling_gbps,
)
from clustercert.metrics.scaling import ScalingMode, ScalingPoint, classify_scaling, weak_scaling
from clustercert.metrics.stats import median_index
from clustercert.metrics.throughput import WindowProblem, measure_window
from clustercert.parsers.common import finite
from clustercert.parsers.nccl_tests import NcclTestsResult
from clustercert.parsers.training import TrainingLog
from clustercert.phases import PhaseResult
from clustercert.verdicts import Check, Severity, Status

__all__ = ["judge_scaling"]

PHASE = Phase.SCALING.value
_NCCL_HINT = "Re-run nccl-tests or remove the file from bundle.yaml."


def _check(
    check_id: str, title: str, severity: Severity, status: Status, message: str, *,
    measured: float | None = None, target: float | None = None, unit: str = "", evidence: Sequence[Span] = (),
) -> Check:
    return Check(id=check_id, title=title, phase=PHASE, severity=severity, status=status, measured=measured,
                 target=target, unit=unit, message=message, evidence=tuple(evidence))


def _error_span(error: EvidenceError) -> Span:
    return Span(error.file, error.line or 0, error.line or 0, 1)


def _absent(required: bool) -> Status:
    """Evidence a required check needs is absent: FAIL; for a phase the catalog does not require: SKIPPED."""
    return Status.FAIL if required else Status.SKIPPED


@dataclass(frozen=True)
class _Point:
    run: RunSpec
    step_time_s: float
    span: Span


def _window(catalog: LoadedCatalog, workload: str, precision: str) -> Window | None:
    """The measurement window of the workload's baseline (any GPU count), else of the catalog's first baseline."""
    own = catalog.baselines_for(workload, precision)
    if own:
        return own[0].window
    return catalog.spec.baselines[0].window if catalog.spec.baselines else None


def _weak_scaling(
    bundle: LoadedBundle, catalog: LoadedCatalog, parsed: Mapping[str, object | EvidenceError], required: bool
) -> tuple[list[Check], list[dict[str, object]]]:
    rules = catalog.spec.rules
    runs = [r for r in bundle.spec.runs if r.kind is RunKind.TRAINING and r.phase in (Phase.SCALING, Phase.EFFICIENCY)]
    keys: list[tuple[str, str]] = []
    for entry in catalog.spec.suite:
        if (entry.workload, entry.precision.value) not in keys:
            keys.append((entry.workload, entry.precision.value))
    for run in runs:
        key = (str(run.workload), run.precision.value if run.precision else "")
        if run.phase is Phase.SCALING and key not in keys:
            keys.append(key)
    suite = {(e.workload, e.precision.value) for e in catalog.spec.suite}
    checks: list[Check] = []
    section: list[dict[str, object]] = []
    for workload, precision in keys:
        subject = f"{workload}-{precision}"
        check_id = f"{PHASE}.{subject}_weak_scaling_efficiency"
        title = (f"{workload} {precision.upper()} keeps >= {rules.scaling_efficiency_min:.0%} of its per-GPU "
                 "throughput as GPUs grow (weak scaling)")
        severity = Severity.REQUIRED if required and (workload, precision) in suite else Severity.ADVISORY
        mine = [r for r in runs if (r.workload, r.precision.value if r.precision else "") == (workload, precision)]
        window = _window(catalog, workload, precision)
        problems: list[str] = []
        spans: list[Span] = []
        by_gpus: dict[int, list[_Point]] = {}
        failed_gpus: set[int] = set()
        for run in mine:
            log = parsed.get(run.id)
            if isinstance(log, EvidenceError):
                problems.append(str(log))
                spans.append(_error_span(log))
                failed_gpus.add(int(run.gpus or 0))
                continue
            if not isinstance(log, TrainingLog) or window is None:
                continue
            measured = measure_window(log.steps, log.nan_marks, (window.first, window.last),
                                      resamples=rules.bootstrap_resamples, seed=rules.bootstrap_seed)
            if isinstance(measured, list):
                first: WindowProblem = measured[0]
                located = EvidenceError(log.file, first.message, line=first.line, field=first.field)
                problems.append(f"{located}. Re-run {run.id} or remove it from bundle.yaml")
                spans.append(Span(log.file, first.line or 0, first.line or 0, 1))
                failed_gpus.add(int(run.gpus or 0))
                continue
            span = Span(log.file, measured.lines[0], measured.lines[-1], len(measured.lines))
            by_gpus.setdefault(int(run.gpus or 0), []).append(_Point(run, measured.mean_s, span))
        chosen: list[_Point] = []
        for gpus in sorted(by_gpus):
            repeats = sorted(by_gpus[gpus], key=lambda p: p.run.repeat)
            times = [p.step_time_s for p in repeats]
            pick = {"median": median_index(times), "best": times.index(min(times)),
                    "worst": times.index(max(times))}[rules.repeats]
            chosen.append(repeats[pick])
        spans.extend(p.span for p in chosen)
        if len(chosen) < 2:
            status = Status.ERROR if problems else _absent(severity is Severity.REQUIRED)
            shown = f" ({'; '.join(problems)})" if problems else ""
            counts = sorted(by_gpus)
            checks.append(_check(
                check_id, title, severity, status,
                f"weak scaling needs usable training runs at 2 or more GPU counts, got {counts}{shown}: "
                "the cluster did not show it. Add runs of this workload at smaller GPU counts (phase scaling)",
                target=rules.scaling_efficiency_min, unit="ratio", evidence=spans,
            ))
            continue
        seq = {int(p.run.seq_len or 0) for p in chosen}
        points = [ScalingPoint(int(p.run.gpus or 0), int(p.run.gbs or 0), int(p.run.seq_len or 0), p.step_time_s,
                               (p.span,)) for p in chosen]
        mode = classify_scaling(points) if len(seq) == 1 else None
        if mode is not ScalingMode.WEAK:
            shape = [(p.gpus, p.gbs, p.seq_len) for p in points]
            checks.append(_check(
                check_id, title, severity, Status.ERROR,
                f"{bundle.root / 'bundle.yaml'}: expected GBS proportional to GPUs at one sequence length for weak "
                f"scaling, got (gpus, gbs, seq_len) {shape}. Re-run at GBS = k x GPUs",
                target=rules.scaling_efficiency_min, unit="ratio", evidence=spans,
            ))
            continue
        result = weak_scaling(points)
        worst = min(result.points, key=lambda p: p.efficiency)
        passed = result.min_efficiency >= rules.scaling_efficiency_min
        # an unusable repeat is judged by its own run check; only a GPU count left without any usable run
        # makes the scaling evidence incomplete
        missing = sorted(failed_gpus - set(by_gpus))
        status = Status.FAIL if not passed else Status.ERROR if missing else Status.PASS
        detail = ", ".join(f"{p.gpus} GPUs {p.efficiency:.3f}" for p in result.points)
        extra = (f"; no usable run at {missing} GPUs: {'; '.join(problems)}" if missing
                 else f"; {len(problems)} unusable repeat(s) left out" if problems else "")
        checks.append(_check(
            check_id, title, severity, status,
            f"efficiency vs {result.reference_gpus} GPUs (tokens/s/GPU ratio): {detail}; lowest {worst.efficiency:.3f} "
            f"at {worst.gpus} GPUs, minimum {rules.scaling_efficiency_min:.2f}{extra}",
            measured=result.min_efficiency, target=rules.scaling_efficiency_min, unit="ratio", evidence=spans,
        ))
        section.append({
            "workload": workload, "precision": precision, "reference_gpus": result.reference_gpus,
            "status": status.value,
            "points": [
                {"gpus": p.gpus, "gbs": p.gbs, "step_time_s": p.step_time_s,
                 "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu, "efficiency": p.efficiency,
                 "run": c.run.id}
                for p, c in zip(result.points, chosen, strict=True)
            ],
        })
    return checks, section


@dataclass(frozen=True)
class _Measured:
    run: RunSpec
    result: CollectiveResult
    sizes: list[int]
    busbw: list[float]
    error: str | None  # an aborted test: a failed measurement, never a zero


def _collective_runs(
    bundle: LoadedBundle, catalog: LoadedCatalog, parsed: Mapping[str, object | EvidenceError], required: bool
) -> tuple[list[Check], list[_Measured]]:
    """Per-run problems as checks (unusable files, bad scopes), and every usable test judged on its own."""
    rules = catalog.spec.rules
    checks: list[Check] = []
    out: list[_Measured] = []
    yaml = bundle.root / "bundle.yaml"
    severity = Severity.REQUIRED if required else Severity.ADVISORY
    for run in bundle.spec.runs:
        if run.kind is not RunKind.COLLECTIVE:
            continue
        valid_id, valid_title = f"{PHASE}.{run.id}_valid", f"Collective run {run.id} is a usable measurement"
        try:
            scope = Scope(run.scope or "")
        except ValueError:
            checks.append(_check(
                valid_id, valid_title, severity, Status.ERROR,
                f"{yaml} run '{run.id}' field 'scope': expected one of {', '.join(s.value for s in Scope)}, "
                f"got {run.scope!r}. Fix bundle.yaml",
            ))
            continue
        if scope is Scope.PAIR and len(run.nodes or []) != 2:
            checks.append(_check(
                valid_id, valid_title, severity, Status.ERROR,
                f"{yaml} run '{run.id}' field 'nodes': expected the 2 nodes of the pair, got {run.nodes or []}. "
                "Fix bundle.yaml",
            ))
            continue
        result = parsed.get(run.id)
        if isinstance(result, EvidenceError):
            checks.append(_check(valid_id, valid_title, severity, Status.ERROR, str(result),
                                 evidence=(_error_span(result),)))
            continue
        if not isinstance(result, NcclTestsResult):
            continue
        for test in result.tests:
            span = Span(result.file, test.line, test.last_line, max(1, len(test.rows)))
            try:
                collective = Collective(test.collective)
            except ValueError:
                checks.append(_check(
                    valid_id, valid_title, Severity.ADVISORY, Status.SKIPPED,
                    f"{result.file} line {test.line}: collective '{test.collective}' has no busbw rule; reported only",
                    evidence=(span,),
                ))
                continue
            samples = tuple(
                s for row in test.rows
                for s in (BusbwSample(row.size_bytes, row.busbw_oop), BusbwSample(row.size_bytes, row.busbw_ip, True))
            )
            ranks = test.ranks or run.gpus or 0
            judged = judge_collective(
                CollectiveRun(collective, scope, ranks, samples, complete=test.error is None,
                              nodes=tuple(run.nodes or ()), evidence=(span,)),
                rules.collective_targets_gbps, catalog.spec.nvlink_gbps_per_direction, rules.large_message_bytes,
            )
            out.append(_Measured(
                run, judged, [r.size_bytes for r in test.rows],
                [max(r.busbw_oop, r.busbw_ip) for r in test.rows],
                test.error,
            ))
    return checks, out


def _problem_text(m: _Measured) -> str:
    where = m.result.evidence[0] if m.result.evidence else None
    loc = f"{where.file} line {where.first}" if where else m.run.id
    if m.error is not None:
        return f"{loc}: expected a complete nccl-tests table, got {m.error}. {_NCCL_HINT}"
    if m.result.implausible:
        top = max(m.busbw) if m.busbw else 0.0
        return (f"{loc}: expected busbw at most the plausibility ceiling {m.result.ceiling_gbps:g} GB/s "
                f"(2 x NVLink per direction), got {top:g} GB/s. Check units and parsing; {_NCCL_HINT}")
    return f"{loc}: {m.result.problem}. {_NCCL_HINT}"


def _collective_checks(
    catalog: LoadedCatalog, measured: list[_Measured], required: bool
) -> tuple[list[Check], list[dict[str, object]]]:
    targets = catalog.spec.rules.collective_targets_gbps
    keys: list[tuple[str, str]] = [(scope, coll) for scope, colls in targets.items() for coll in colls]
    for m in measured:
        key = (m.result.scope.value, m.result.collective.value)
        if key not in keys:
            keys.append(key)
    checks: list[Check] = []
    section: list[dict[str, object]] = []
    for scope, coll in keys:
        target = targets.get(scope, {}).get(coll)
        mine = [m for m in measured if (m.result.scope.value, m.result.collective.value) == (scope, coll)]
        severity = Severity.REQUIRED if required and target is not None else Severity.ADVISORY
        check_id = f"{PHASE}.{scope}-{coll}_busbw_meets_target"
        title = (f"{coll} bus bandwidth at scope {scope} reaches {target:g} GB/s" if target is not None
                 else f"{coll} bus bandwidth at scope {scope} (reported; the catalog sets no target)")
        spans = [s for m in mine for s in m.result.evidence]
        if not mine:
            checks.append(_check(
                check_id, title, severity, _absent(severity is Severity.REQUIRED),
                f"the bundle has no usable {coll} nccl-tests run at scope {scope}: the cluster did not show it. "
                "Add a collective run (phase scaling, format nccl-tests) with this scope",
                target=target, unit="GB/s",
            ))
            continue
        unusable = [m for m in mine if m.result.busbw_gbps is None]
        values = [(m.result.busbw_gbps, m) for m in mine if m.result.busbw_gbps is not None]
        below = [(v, m) for v, m in values if target is not None and v < target]
        lowest = min((v for v, _ in values), default=None)
        for m in mine:
            status = (Status.ERROR if m.result.busbw_gbps is None else Status.SKIPPED if target is None
                      else Status.PASS if m.result.meets_target else Status.FAIL)
            section.append({
                "run": m.run.id, "scope": scope, "collective": coll, "ranks": m.result.ranks,
                "sizes_bytes": m.sizes, "busbw_gbps": m.busbw, "target_gbps": target,
                "ceiling_gbps": m.result.ceiling_gbps, "large_busbw_gbps": m.result.busbw_gbps,
                "nodes": list(m.result.nodes), "problem": _problem_text(m) if m.result.busbw_gbps is None else None,
                "status": status.value,
            })
        if values:
            low_v, low_m = min(values, key=lambda x: x[0])
            high_v, high_m = max(values, key=lambda x: x[0])
            parts = [f"{len(values)} run(s), lowest {low_v:.1f} GB/s ({low_m.run.id})"
                     + (f", highest {high_v:.1f} GB/s ({high_m.run.id})" if len(values) > 1 else "")]
        else:
            parts = []
        problems = [_problem_text(m) for m in unusable]
        if below:
            status = Status.FAIL
            worst_v, worst = min(below, key=lambda x: x[0])
            message = (f"lowest large-message busbw {worst_v:.1f} GB/s ({worst.run.id}) is below the target "
                       f"{target:g} GB/s; {len(below)} of {len(mine)} run(s) below: "
                       + ", ".join(f"{m.run.id} {v:.1f}" for v, m in below))
        elif unusable:
            status = Status.ERROR
            message = "unusable evidence: " + " | ".join(problems)
        elif target is None:
            status = Status.SKIPPED
            message = f"large-message busbw {', '.join(parts)}; reported only (the catalog sets no target)"
        else:
            status = Status.PASS
            message = f"large-message busbw {', '.join(parts)}; target {target:g} GB/s"
        if below and problems:
            message += "; also unusable: " + " | ".join(problems)
        checks.append(_check(check_id, title, severity, status, message, measured=lowest, target=target,
                             unit="GB/s", evidence=spans))
    return checks, section


def _pair_checks(
    bundle: LoadedBundle, catalog: LoadedCatalog, measured: list[_Measured], required: bool
) -> tuple[list[Check], list[dict[str, object]]]:
    pairs = [m for m in measured if m.result.scope is Scope.PAIR]
    if not pairs:
        return [], []
    domain_of = {node: d.name for d in bundle.spec.system.nvlink_domains for node in d.nodes}
    fraction = catalog.spec.rules.degraded_pair_fraction
    section: list[dict[str, object]] = []
    degraded: list[str] = []
    spans: list[Span] = []
    collectives = sorted({m.result.collective.value for m in pairs})
    for coll in collectives:
        mine = [m for m in pairs if m.result.collective.value == coll and not m.result.implausible]
        for m, judged in zip(mine, find_degraded_pairs([m.result for m in mine], fraction), strict=True):
            nodes = list(judged.nodes)
            domains = [domain_of.get(n, "unknown") for n in nodes]
            section.append({
                "run": m.run.id, "collective": coll, "nodes": nodes, "domains": domains,
                "busbw_gbps": judged.busbw_gbps, "median_gbps": finite(judged.median_gbps),
                "fraction_of_median": judged.fraction_of_median, "degraded": judged.degraded,
            })
            spans.extend(judged.evidence)
            if judged.degraded:
                shown = "failed" if judged.busbw_gbps is None else f"{judged.busbw_gbps:.1f} GB/s"
                share = "" if judged.fraction_of_median is None else f", {judged.fraction_of_median:.0%} of"
                degraded.append(
                    f"{nodes[0]} ({domains[0]}) - {nodes[1]} ({domains[1]}) {coll} {shown}{share} the median "
                    f"{judged.median_gbps:.1f} GB/s"
                )
    severity = Severity.REQUIRED if required else Severity.ADVISORY
    title = f"No node pair's link is below {fraction:.0%} of the median pair bandwidth"
    if degraded:
        status, message = Status.FAIL, (f"degraded link(s): {'; '.join(degraded)}. Check the cables, NICs and "
                                        "switch ports between these nodes")
    else:
        status, message = Status.PASS, f"{len(section)} pair measurement(s), none below {fraction:.0%} of the median"
    worst = min((float(p["fraction_of_median"]) for p in section  # type: ignore[arg-type]
                 if p["fraction_of_median"] is not None), default=None)
    check = _check(f"{PHASE}.pairs_no_degraded_link", title, severity, status, message, measured=worst,
                   target=fraction, unit="fraction of median", evidence=spans)
    return [check], section


def judge_scaling(
    bundle: LoadedBundle, catalog: LoadedCatalog, parsed: Mapping[str, object | EvidenceError]
) -> PhaseResult:
    """Judge the scaling phase; `parsed` maps run ids to parsed evidence (or the error that stopped parsing)."""
    required = Phase.SCALING.value in catalog.spec.rules.required_phases
    checks: list[Check] = []
    has_evidence = any(r.phase is Phase.SCALING for r in bundle.spec.runs)
    if required:
        checks.append(_check(
            f"{PHASE}.evidence_present", "The bundle holds scaling-phase evidence", Severity.REQUIRED,
            Status.PASS if has_evidence else Status.FAIL,
            "scaling runs present" if has_evidence else
            "the bundle has no run of phase scaling: the cluster did not show it. Add scaling training runs "
            "and nccl-tests collective runs (phase scaling)",
        ))
    weak_checks, weak = _weak_scaling(bundle, catalog, parsed, required)
    run_checks, measured = _collective_runs(bundle, catalog, parsed, required)
    coll_checks, collectives = _collective_checks(catalog, measured, required)
    pair_checks, pairs = _pair_checks(bundle, catalog, measured, required)
    checks += weak_checks + run_checks + coll_checks + pair_checks
    ceiling = plausibility_ceiling_gbps(catalog.spec.nvlink_gbps_per_direction)
    return PhaseResult(checks=checks, section={
        "weak_scaling": weak, "collectives": collectives, "pairs": pairs, "ceiling_gbps": ceiling,
    })
