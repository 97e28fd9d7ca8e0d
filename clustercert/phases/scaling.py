"""Scaling phase: weak-scaling efficiency per workload, collective bus bandwidth per scope, degraded pairs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from clustercert.catalog import LoadedCatalog, ReferenceResult, Rules, Window
from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import LoadedBundle, Phase, RunKind, RunSpec
from clustercert.evidence.provenance import Span
from clustercert.metrics.collectives import (
    Bound,
    Collective,
    CollectiveResult,
    CollectiveRun,
    LinkRates,
    NodeVerdict,
    PairResult,
    Placement,
    Scope,
    busbw_factor,
    busbw_samples,
    carried,
    find_below_peers,
    find_degraded_pairs,
    judge_collective,
    link_bound,
    plausibility_ceiling_gbps,
    rank_nodes,
    row_disagreement,
)
from clustercert.metrics.scaling import ScalingMode, ScalingPoint, ScalingResult, classify_scaling, weak_scaling
from clustercert.metrics.stats import median_index
from clustercert.metrics.throughput import WindowProblem, measure_window
from clustercert.parsers.common import finite
from clustercert.parsers.nccl_tests import CollectiveTest, NcclTestsResult
from clustercert.parsers.training import TrainingLog
from clustercert.phases import PhaseResult
from clustercert.phases.efficiency import copied_message, window_values
from clustercert.verdicts import Check, DeclaredCheck, Severity, Status, lacking

__all__ = ["judge_scaling", "reference_fit"]

PHASE = Phase.SCALING.value
_LISTED = 12  # findings named one by one in a message; the rest are counted (all are in results.json)
# A reference result is carried only to runs within this factor of its ranks per NVLink domain: the hierarchical
# shape adds its phases where NCCL overlaps them, so it under-predicts far from its reference (10 H100 nodes x 1
# carried to x 8 gives 230 GB/s where x 8 reaches 364)
_CARRY_SPAN = 2.0
_NCCL_HINT = ("Keep the file in the bundle as evidence of the failure; re-run nccl-tests on these nodes and add "
              "the new log as a further run")


def _declared(check_id: str, title: str, severity: Severity) -> DeclaredCheck:
    return DeclaredCheck(check_id, title, PHASE, severity)


def _named(items: Sequence[str], shown: int = 2) -> str:
    """The first `shown` findings by name and a count of the rest: a summary fits one line."""
    return ", ".join(items[:shown]) + (f" and {len(items) - shown} more" if len(items) > shown else "")


def _listed(items: Sequence[str], sep: str) -> str:
    """The first _LISTED of `items` joined by `sep`, and a count of the rest (each is in results.json)."""
    rest = len(items) - _LISTED
    return sep.join(items[:_LISTED]) + (f"{sep.rstrip()} and {rest} more (each in results.json)" if rest > 0 else "")


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


@dataclass
class _Repeats:
    """What the training runs of one workload showed: the usable ones by GPU count, the problems of the others."""

    by_gpus: dict[int, list[_Point]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    problem_gpus: list[int] = field(default_factory=list)  # the GPU count of each problem's run
    spans: list[Span] = field(default_factory=list)  # each problem's place
    # a scaling run whose measured window is another run's, value for value (a log copied under another GPU count
    # shows perfect weak scaling): what it is told, and both files' places
    copies: list[str] = field(default_factory=list)
    copy_spans: list[Span] = field(default_factory=list)

    def unusable(self, run: RunSpec, problem: str, span: Span) -> None:
        self.problems.append(problem)
        self.problem_gpus.append(int(run.gpus or 0))
        self.spans.append(span)


def _window(catalog: LoadedCatalog, workload: str, precision: str) -> Window | None:
    """The measurement window of the workload's baseline (any GPU count), else of the catalog's first baseline."""
    own = catalog.baselines_for(workload, precision)
    if own:
        return own[0].window
    return catalog.spec.baselines[0].window if catalog.spec.baselines else None


def _weak_scaling(
    bundle: LoadedBundle, catalog: LoadedCatalog, parsed: Mapping[str, object | EvidenceError], required: bool
) -> tuple[list[Check], list[dict[str, object]]]:
    """One weak-scaling check per workload and precision the suite names or a scaling run measured."""
    rules = catalog.spec.rules
    runs = [r for r in bundle.spec.runs if r.kind is RunKind.TRAINING and r.phase in (Phase.SCALING, Phase.EFFICIENCY)]
    suite = {(e.workload, e.precision.value) for e in catalog.spec.suite}
    checks: list[Check] = []
    section: list[dict[str, object]] = []
    for workload, precision in _scaling_keys(catalog, runs):
        title = (f"{workload} {precision.upper()} keeps >= {rules.scaling_efficiency_min:.0%} of its per-GPU "
                 "throughput as GPUs grow (weak scaling)")
        declared = _declared(f"{PHASE}.{workload}-{precision}_weak_scaling_efficiency", title,
                             Severity.REQUIRED if required and (workload, precision) in suite else Severity.ADVISORY)
        mine = [r for r in runs if (r.workload, r.precision.value if r.precision else "") == (workload, precision)]
        repeats = _repeats(mine, parsed, _window(catalog, workload, precision), rules)
        chosen = _chosen(repeats.by_gpus, rules.repeats)
        spans = [*repeats.spans, *(p.span for p in chosen)]
        if repeats.copies:  # copied evidence: required wherever scaling is, whatever the suite names
            checks.append(_declared(declared.id, declared.title, Severity.REQUIRED if required else
                                    Severity.ADVISORY).judged(
                Status.ERROR, "; ".join(repeats.copies), target=rules.scaling_efficiency_min, unit="ratio",
                evidence=[*repeats.copy_spans, *spans]))
            continue
        if len(chosen) < 2:
            status = Status.ERROR if repeats.problems else _absent(declared.severity is Severity.REQUIRED)
            shown = f" ({'; '.join(repeats.problems)})" if repeats.problems else ""
            counts = ", ".join(map(str, sorted(repeats.by_gpus)))
            # the workload first: a reason shows this message's first clause, one line per workload
            judged = declared.judged(
                status,
                f"{workload} {precision.upper()}: weak scaling needs usable training runs at 2 or more GPU counts, "
                f"got {f'{counts} GPUs only' if counts else 'none'}{shown}: the cluster did not show it. Add runs of "
                "this workload at smaller GPU counts (phase scaling)",
                target=rules.scaling_efficiency_min, unit="ratio", evidence=spans,
            )
            checks.append(judged if status is Status.ERROR else lacking(judged))
            continue
        points = [ScalingPoint(int(p.run.gpus or 0), int(p.run.gbs or 0), int(p.run.seq_len or 0), p.step_time_s,
                               (p.span,)) for p in chosen]
        one_length = len({p.seq_len for p in points}) == 1
        if not one_length or classify_scaling(points) is not ScalingMode.WEAK:
            shape = [(p.gpus, p.gbs, p.seq_len) for p in points]
            checks.append(declared.judged(
                Status.ERROR,
                f"{bundle.shown('bundle.yaml')}: expected GBS proportional to GPUs at one sequence length for weak "
                f"scaling, got (gpus, gbs, seq_len) {shape}. Re-run at GBS = k x GPUs",
                target=rules.scaling_efficiency_min, unit="ratio", evidence=spans,
            ))
            continue
        check, entry = _weak_check(declared, weak_scaling(points), chosen, repeats, rules.scaling_efficiency_min)
        checks.append(check)
        section.append({"workload": workload, "precision": precision, **entry})
    return checks, section


def _scaling_keys(catalog: LoadedCatalog, runs: Sequence[RunSpec]) -> list[tuple[str, str]]:
    """(workload, precision) of each suite entry, then of each scaling run the suite does not name, in order."""
    keys: list[tuple[str, str]] = []
    for entry in catalog.spec.suite:
        if (entry.workload, entry.precision.value) not in keys:
            keys.append((entry.workload, entry.precision.value))
    for run in runs:
        key = (str(run.workload), run.precision.value if run.precision else "")
        if run.phase is Phase.SCALING and key not in keys:
            keys.append(key)
    return keys


def _repeats(runs: Sequence[RunSpec], parsed: Mapping[str, object | EvidenceError], window: Window | None,
             rules: Rules) -> _Repeats:
    """Each run's mean step time over `window`, or why it has none."""
    out = _Repeats()
    measured_by: dict[tuple[object, ...], tuple[RunSpec, str]] = {}  # a window's values -> the run that measured it
    for run in runs:
        log = parsed.get(run.id)
        if isinstance(log, EvidenceError):
            out.unusable(run, str(log), _error_span(log))
            continue
        if not isinstance(log, TrainingLog) or window is None:
            continue
        measured = measure_window(log.steps, log.nan_marks, (window.first, window.last),
                                  resamples=rules.bootstrap_resamples, seed=rules.bootstrap_seed)
        if isinstance(measured, list):
            first: WindowProblem = measured[0]
            located = EvidenceError(log.file, first.message, line=first.line, field=first.field)
            out.unusable(run, f"{located}. Re-run {run.id} and add the new log as a further repeat",
                         Span(log.file, first.line or 0, first.line or 0, 1))
            continue
        span = Span(log.file, measured.lines[0], measured.lines[-1], len(measured.lines))
        other, other_file = measured_by.setdefault(window_values(log, window.first, window.last), (run, log.file))
        if other is not run:
            # two efficiency repeats are the efficiency phase's finding; a scaling run in the pair is this one's
            said = copied_message(log.file, other_file, other.id, run.id, run.id)
            out.unusable(run, said, span)
            if Phase.SCALING in (run.phase, other.phase):
                out.copies.append(said)
                out.copy_spans += [span, Span(other_file, 0, 0, 1)]
            continue
        out.by_gpus.setdefault(int(run.gpus or 0), []).append(_Point(run, measured.mean_s, span))
    return out


def _chosen(by_gpus: Mapping[int, list[_Point]], rule: str) -> list[_Point]:
    """The repeat the catalog's rule picks (median, best or worst step time, or the latest) at each GPU count, by
    GPU count."""
    chosen: list[_Point] = []
    for gpus in sorted(by_gpus):
        repeats = sorted(by_gpus[gpus], key=lambda p: p.run.repeat)
        times = [p.step_time_s for p in repeats]
        pick = {"median": median_index(times), "best": times.index(min(times)),
                "worst": times.index(max(times)), "latest": len(times) - 1}[rule]
        chosen.append(repeats[pick])
    return chosen


def _weak_check(declared: DeclaredCheck, result: ScalingResult, chosen: Sequence[_Point], repeats: _Repeats,
                minimum: float) -> tuple[Check, dict[str, object]]:
    """The weak-scaling check of a workload measured at 2 or more GPU counts, and its section entry."""
    worst = min(result.points, key=lambda p: p.efficiency)
    passed = result.min_efficiency >= minimum
    problems = repeats.problems
    # an unusable repeat is judged by its own run check; only a GPU count left without any usable run
    # makes the scaling evidence incomplete
    missing = sorted(set(repeats.problem_gpus) - set(repeats.by_gpus))
    status = Status.FAIL if not passed else Status.ERROR if missing else Status.PASS
    detail = ", ".join(f"{p.gpus} GPUs {p.efficiency:.3f}" for p in result.points)
    extra = (f"; no usable run at {missing} GPUs: {'; '.join(problems)}" if missing
             else f"; {len(problems)} unusable repeat(s) left out" if problems else "")
    # an ERROR's finding is the GPU count left without a run (and why its first run was unusable), not the
    # ratios that were measured
    lacking = next((f"no usable run at {', '.join(map(str, missing))} GPUs: {problem}"
                    for gpus, problem in zip(repeats.problem_gpus, problems, strict=True) if gpus in missing), None)
    check = declared.judged(
        status,
        f"efficiency vs {result.reference_gpus} GPUs (tokens/s/GPU ratio): {detail}; lowest {worst.efficiency:.3f} "
        f"at {worst.gpus} GPUs, minimum {minimum:.2f}{extra}",
        measured=result.min_efficiency, target=minimum, unit="ratio",
        evidence=[*repeats.spans, *(p.span for p in chosen)], summary=lacking if status is Status.ERROR else None,
    )
    entry: dict[str, object] = {
        "reference_gpus": result.reference_gpus,
        "status": status.value,
        "points": [
            {"gpus": p.gpus, "gbs": p.gbs, "step_time_s": p.step_time_s,
             "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu, "efficiency": p.efficiency,
             "run": c.run.id}
            for p, c in zip(result.points, chosen, strict=True)
        ],
    }
    return check, entry


@dataclass(frozen=True)
class _Measured:
    run: RunSpec
    result: CollectiveResult
    sizes: list[int]
    busbw: list[float]
    error: str | None  # an aborted test: a failed measurement, never a zero
    avg_reported: float | None  # the file's own `# Avg bus bandwidth`
    ranks_per_node: int | None
    domains: int
    target: float | None
    target_basis: str  # where the target comes from (the model, a fixed catalog target, or none and why)
    efficiency: float | None
    cause: str | None = None  # the root cause an aborted test printed
    truncated: bool = False  # the capture stops inside the test, no error printed: nothing against the cluster
    line: int = 0  # the line of its number: the gated row's, or the error's that aborted it
    target_source: str = "none"  # the authority of the target, as the report's Source column names it


def _number_line(test: CollectiveTest, large_message_bytes: int) -> int:
    """Where a finding about `test` points: the row of its gated busbw (the highest at sizes at or above the
    large-message size, else at its largest size), or the root cause an aborted test printed; its first line when
    it has neither."""
    if test.error is not None:
        return test.cause_line or test.line
    large = [r for r in test.rows if r.size_bytes >= large_message_bytes] or test.rows[-1:]
    return max(large, key=lambda r: max(r.busbw_oop, r.busbw_ip)).line if large else test.line


def _number_span(file: str, test: CollectiveTest, large_message_bytes: int) -> Span:
    """The evidence of a test's judged number: the one line it was read from (`_number_line`: its gated busbw row,
    or the root cause an aborted test printed); the whole test where it has neither."""
    has_number = bool(test.rows) if test.error is None else test.cause_line is not None
    if has_number:
        line = _number_line(test, large_message_bytes)
        return Span(file, line, line, 1)
    return Span(file, test.line, test.last_line, max(1, len(test.rows)))


def _link_rates(bundle: LoadedBundle, catalog: LoadedCatalog) -> tuple[LinkRates, str | None]:
    """Per-GPU link rates of the declared topology; the second value says why B_net is unknown."""
    system = bundle.spec.system
    nvl = catalog.spec.nvlink_gbps_per_direction
    net = system.interconnect
    if net is None:
        return LinkRates(nvl, None), (f"{bundle.shown('bundle.yaml')} field 'system.interconnect': expected the "
                                      "scale-out network (scale_out, nics_per_node), got none")
    rate = catalog.spec.scale_out_gbps.get(net.scale_out)
    if rate is None:
        known = ", ".join(sorted(catalog.spec.scale_out_gbps)) or "none"
        return LinkRates(nvl, None), (f"{bundle.shown('bundle.yaml')} field 'system.interconnect.scale_out': "
                                      f"expected one of the catalog's scale_out_gbps ({known}), got {net.scale_out!r}")
    return LinkRates(nvl, rate * net.nics_per_node / system.gpus_per_node), None


def _placement(ranks: int, hosts: Sequence[str], nodes: Sequence[str], domain_of: Mapping[str, str],
               scope: Scope, gpus_per_node: int) -> Placement:
    """NVLink domains a run spans (a node outside every declared domain is a domain of its own).

    From the log's rank lines when it has them, else from the run's nodes in bundle.yaml, else from its
    scope: one domain for nvlink-domain, one per `gpus_per_node` ranks (at least 2) for the others.
    """
    if hosts:
        per: dict[str, int] = {}
        for host in hosts:
            key = domain_of.get(host, host)
            per[key] = per.get(key, 0) + 1
        return Placement(ranks, len(per), min(per.values()))
    if nodes:
        count = len({domain_of.get(n, n) for n in nodes})
    else:
        count = 1 if scope is Scope.NVLINK_DOMAIN else max(2, ranks // max(1, gpus_per_node))
    return Placement(ranks, count, max(1, ranks // count))


@dataclass(frozen=True)
class _Links:
    """What a collective run's target follows from: the declared topology's link rates and NVLink domains."""

    rates: LinkRates
    no_net: str | None  # why the scale-out rate is unknown
    domain_of: Mapping[str, str]  # node -> its NVLink domain
    gpus_per_node: int
    system: str  # the bundle's GPU system id, which published gates name


@dataclass(frozen=True)
class _Target:
    gbps: float | None
    basis: str  # where the target comes from (the model, a fixed catalog target, or none and why)
    efficiency: float | None
    expected_gbps: float | None
    source: str  # the authority, as the report's Source column names it


def _collective_runs(
    bundle: LoadedBundle, catalog: LoadedCatalog, parsed: Mapping[str, object | EvidenceError], required: bool
) -> tuple[list[Check], list[_Measured]]:
    """Per-run problems as checks (unusable files, bad scopes), and every usable test judged on its own."""
    rates, no_net = _link_rates(bundle, catalog)
    links = _Links(rates, no_net, {node: d.name for d in bundle.spec.system.nvlink_domains for node in d.nodes},
                   bundle.spec.system.gpus_per_node, bundle.spec.system.gpu)
    checks: list[Check] = []
    out: list[_Measured] = []
    yaml = bundle.shown("bundle.yaml")
    severity = Severity.REQUIRED if required else Severity.ADVISORY
    measured_by: dict[tuple[object, ...], tuple[str, str]] = {}  # a file's tables -> the run and file that hold them
    for run in bundle.spec.runs:
        if run.kind is not RunKind.COLLECTIVE:
            continue
        valid = _declared(f"{PHASE}.{run.id}_valid", f"Collective run {run.id} is a usable measurement", severity)
        try:
            scope = Scope(run.scope or "")
        except ValueError:
            checks.append(valid.judged(
                Status.ERROR,
                f"{yaml} run '{run.id}' field 'scope': expected one of {', '.join(s.value for s in Scope)}, "
                f"got {run.scope!r}. Fix bundle.yaml",
            ))
            continue
        if scope is Scope.PAIR and len(run.nodes or []) != 2:
            checks.append(valid.judged(
                Status.ERROR,
                f"{yaml} run '{run.id}' field 'nodes': expected the 2 nodes of the pair, got {run.nodes or []}. "
                "Fix bundle.yaml",
            ))
            continue
        result = parsed.get(run.id)
        if isinstance(result, EvidenceError):
            checks.append(valid.judged(Status.ERROR, str(result), evidence=(_error_span(result),)))
            continue
        if not isinstance(result, NcclTestsResult):
            continue
        tables = _tables(result)
        other, other_file = measured_by.setdefault(tables, (run.id, result.file)) if tables else (run.id, "")
        if other != run.id:
            checks.append(valid.judged(
                Status.ERROR,
                f"{result.file} and {other_file}: the measured tables are identical (message size, times and bus "
                f"bandwidths of every row): one measurement, listed as runs {other} and {run.id}. Keep the run's "
                f"own output and re-run {run.id}",
                evidence=(Span(result.file, 0, 0, 1), Span(other_file, 0, 0, 1)),
            ))
            continue
        for test in result.tests:
            span = Span(result.file, test.line, test.last_line, max(1, len(test.rows)))
            try:
                collective = Collective(test.collective)
            except ValueError:
                checks.append(_declared(valid.id, valid.title, Severity.ADVISORY).judged(
                    Status.SKIPPED,
                    f"{result.file} line {test.line}: collective '{test.collective}' has no busbw rule; reported only",
                    evidence=(span,),
                ))
                continue
            number = _number_span(result.file, test, catalog.spec.rules.large_message_bytes)
            out.append(_measured_test(run, scope, test, collective, number, catalog, links))
    return checks, _peer_targets(out, catalog.spec.rules.degraded_pair_fraction)


def _tables(result: NcclTestsResult) -> tuple[object, ...]:
    """What a collective run measured: each test's collective and the numbers of every row (empty when no test
    has a row). Two runs that measured the same, number for number, are one measurement: a real run's times and
    bandwidths differ from any other's."""
    return tuple((test.collective, tuple(row[:7] for row in test.rows)) for test in result.tests if test.rows)


def _peer_targets(measured: list[_Measured], fraction: float) -> list[_Measured]:
    """Pair runs that no absolute figure covers (the bundle declares no scale-out network) get the pairwise
    sweep's own rule as their target: `fraction` of the median of the pairs of their shape (3 or more)."""
    out = list(measured)
    index = {id(m): i for i, m in enumerate(out)}
    for peers in _pair_peers([m for m in measured if m.result.scope is Scope.PAIR]):
        values = [m.result.busbw_gbps for m in peers if m.result.busbw_gbps is not None]
        if len(values) < 3:
            continue
        median = statistics.median(values)
        for m in peers:
            if m.target is None and m.target_basis.startswith("no link bound"):
                out[index[id(m)]] = replace(
                    m, target=fraction * median, target_source="peer median of this sweep",
                    target_basis=(f"{fraction:g} x the median {median:.1f} GB/s of the {len(peers)} pairs of its shape "
                                  f"in this sweep: the bundle declares no scale-out network, so no absolute figure "
                                  f"applies ({m.target_basis[len('no link bound: '):]})"))
    return out


def _measured_test(run: RunSpec, scope: Scope, test: CollectiveTest, collective: Collective, span: Span,
                   catalog: LoadedCatalog, links: _Links) -> _Measured:
    """One test of a collective run judged against its target; `span` is the line of its judged number."""
    rules = catalog.spec.rules
    sizes = [row.size_bytes for row in test.rows]
    oop, ip = [row.busbw_oop for row in test.rows], [row.busbw_ip for row in test.rows]
    ranks = test.ranks or run.gpus or 0
    nodes = tuple(run.nodes or dict.fromkeys(test.hosts))
    placement = _placement(ranks, test.hosts, nodes, links.domain_of, scope, links.gpus_per_node)
    bound = link_bound(collective, placement, links.rates)
    target = _target(catalog, scope, collective, placement, bound, links)
    targets = {scope.value: {collective.value: target.gbps}} if target.gbps is not None else {}
    judged = judge_collective(
        CollectiveRun(collective, scope, ranks, busbw_samples(sizes, oop, ip), complete=test.error is None,
                      nodes=nodes, evidence=(span,), disagreement=_disagreement(collective, test)),
        targets, catalog.spec.nvlink_gbps_per_direction, rules.large_message_bytes,
        bound=bound, expected_gbps=target.expected_gbps,
    )
    return _Measured(
        run, judged, sizes, list(map(max, oop, ip)),
        test.error, test.reported_avg_busbw, test.ranks_per_host or (ranks // len(nodes) if nodes else None),
        placement.domains, target.gbps, target.basis, target.efficiency, cause=test.cause, truncated=test.truncated,
        line=_number_line(test, rules.large_message_bytes), target_source=target.source,
    )


def _disagreement(collective: Collective, test: CollectiveTest) -> str | None:
    """The printed average where it disagrees with the rows read, else the first row whose numbers disagree with
    each other (its out-of-place half first), named by its line."""
    if (average := test.average_disagreement) is not None:
        return average
    factor = busbw_factor(collective, test.ranks) if test.ranks is not None and test.ranks >= 2 else None
    for row in test.rows:
        why = row_disagreement(collective, test.ranks, row.size_bytes, row.time_us_oop, row.algbw_oop,
                               row.busbw_oop, factor) or \
            row_disagreement(collective, test.ranks, row.size_bytes, row.time_us_ip, row.algbw_ip,
                             row.busbw_ip, factor)
        if why is not None:
            return f"line {row.line}: {why}"
    return None


def _target(catalog: LoadedCatalog, scope: Scope, collective: Collective, placement: Placement, bound: Bound,
            links: _Links) -> _Target:
    """A run's busbw target and its source, in this order: the catalog's fixed target for its scope; a published
    gate that covers it; target_fraction x a reference result (published, or a healthy real cluster's) of its
    collective and link class carried to its shape; target_fraction x the model's efficiency x its link bound
    (clustercert's own model, where no figure exists). None, and why, where none applies."""
    rules = catalog.spec.rules
    model = rules.collective_model
    cls: Literal["nvlink", "scale-out"] = "nvlink" if placement.domains <= 1 else "scale-out"
    fixed = rules.collective_targets_gbps.get(scope.value, {}).get(collective.value)
    efficiency = model.efficiency.get(cls, {}).get(collective.value) if model is not None else None
    modelled = bound.gbps * efficiency if bound.gbps is not None and efficiency is not None else None
    reference = _reference(catalog, collective, placement, links)
    expected = reference[0] if reference is not None else modelled
    if fixed is not None:
        return _Target(fixed, f"fixed catalog target rules.collective_targets_gbps.{scope.value}", efficiency,
                       expected, "catalog: collective_targets_gbps (its own reason)")
    if model is None:
        return _Target(None, "the catalog has no collective_model", efficiency, expected, "none")
    gate = next((g for g in model.public_gates if g.system == links.system and g.scope == scope.value
                 and g.collective == collective.value and g.min_ranks <= placement.ranks
                 and (g.max_ranks is None or placement.ranks <= g.max_ranks)), None)
    if gate is not None:
        title = catalog.spec.sources[gate.source].title
        return _Target(gate.gbps, f"published gate {gate.gbps:g} GB/s ({title}{'; ' + gate.note if gate.note else ''})",
                       efficiency, expected, f"published gate: {gate.source}")
    if reference is not None:
        value, ref = reference
        return _Target(model.target_fraction * value,
                       f"{model.target_fraction:g} x expected {value:.1f} GB/s: {ref.note} ({ref.gbps:g} GB/s at "
                       f"{ref.ranks} ranks over {ref.domains} NVLink domain(s)), carried to {placement.ranks} ranks "
                       f"over {placement.domains} by the model's shape", efficiency, value,
                       f"reference: {ref.source}")
    if bound.gbps is None:
        return _Target(None, f"no link bound: {links.no_net or bound.formula}", efficiency, expected, "none")
    if modelled is None:
        return _Target(None, f"the catalog's collective_model sets no {cls} efficiency for {collective.value}",
                       efficiency, expected, "none")
    return _Target(model.target_fraction * modelled,
                   f"{model.target_fraction:g} x expected {modelled:.1f} GB/s of clustercert's own link model (no "
                   f"published figure for this collective and shape), efficiency {efficiency:g} x bound "
                   f"{bound.formula}", efficiency, modelled,
                   f"model: {model.source} (no published figure)")


def _reference(catalog: LoadedCatalog, collective: Collective, placement: Placement, links: _Links,
               among: Sequence[ReferenceResult] | None = None) -> tuple[float, ReferenceResult] | None:
    """The catalog's reference result (or one `among` these) nearest the run's shape (ranks per domain, then
    domains, then ranks) among those of its collective, its link class and its scale-out rate, carried to the
    run's shape."""
    model = catalog.spec.rules.collective_model
    one = placement.domains <= 1
    pool = among if among is not None else (model.references if model else [])
    k = placement.ranks_per_domain
    mine = [r for r in pool if r.collective == collective.value
            and (r.domains <= 1) == one and (one or r.net_gbps == links.rates.net_gbps)
            and max(k / r.ranks_per_domain, r.ranks_per_domain / k) <= _CARRY_SPAN]
    if not mine:
        return None

    def distance(r: ReferenceResult) -> tuple[float, float, float]:
        return (abs(math.log(placement.ranks_per_domain / r.ranks_per_domain)),
                abs(math.log(placement.domains / r.domains)), abs(math.log(placement.ranks / r.ranks)))

    ref = min(mine, key=distance)
    value = carried(collective, placement, links.rates, Placement(ref.ranks, ref.domains, ref.ranks_per_domain),
                    ref.gbps)
    return None if value is None else (value, ref)


def _where(m: _Measured) -> str:
    where = m.result.evidence[0] if m.result.evidence else None
    return f"{where.file} line {where.first}" if where else m.run.id


def _problem_text(m: _Measured) -> str:
    loc = _where(m)
    if m.truncated:
        return (f"{loc} ({m.run.id}): expected a complete nccl-tests table, got a {m.error}. Capture the whole "
                "output of the test and add it to the bundle")
    if m.error is not None:
        return f"{loc} ({m.run.id}): expected a complete nccl-tests table, got a test that {m.error}. {_NCCL_HINT}"
    if m.result.implausible:
        top = max(m.busbw) if m.busbw else 0.0
        bound = m.result.bound.formula if m.result.bound is not None else "2 x NVLink per direction"
        return (f"{loc} ({m.run.id}): expected busbw at most the plausibility ceiling {m.result.ceiling_gbps:g} GB/s "
                f"(2 x the link bound, {bound}), got {top:g} GB/s. Check the file's units and how it was produced")
    return f"{loc} ({m.run.id}): {m.result.problem}. {_NCCL_HINT}"


def _status_of(m: _Measured) -> Status:
    if m.result.busbw_gbps is None:
        return Status.ERROR
    if m.target is None:
        return Status.SKIPPED
    return Status.PASS if m.result.busbw_gbps >= m.target else Status.FAIL


def _shape(m: _Measured) -> tuple[str, str, int, int | None, int | None]:
    """Runs compare with runs of the same shape: scope, collective, ranks, ranks per node, largest message."""
    return (m.result.scope.value, m.result.collective.value, m.result.ranks, m.ranks_per_node,
            max(m.sizes) if m.sizes else None)


def _collective_checks(
    catalog: LoadedCatalog, measured: list[_Measured], required: bool, unread: Mapping[str, list[str]] | None = None,
) -> tuple[list[Check], list[dict[str, object]]]:
    """The target check of each (scope, collective). `unread`: by scope, the errors of its collective runs that
    could not be read (which collectives they ran is unknown): a required collective without a usable run at such a
    scope cannot be judged (ERROR), which is not the cluster failing to show it."""
    must = _required_collectives(catalog)
    # each (scope, collective) the catalog requires, then each other one measured, in the order first measured;
    # the runs of each, in the order measured
    of_key: dict[tuple[str, str], list[_Measured]] = {(scope, coll): [] for scope, colls in must.items()
                                                      for coll in colls}
    for m in measured:
        of_key.setdefault((m.result.scope.value, m.result.collective.value), []).append(m)
    checks: list[Check] = []
    section: list[dict[str, object]] = []
    for (scope, coll), mine in of_key.items():
        needed = coll in must.get(scope, [])
        check_id = f"{PHASE}.{scope}-{coll}_busbw_meets_target"
        title = f"{coll} bus bandwidth at scope {scope} reaches its target (the link model's expected x fraction)"
        if not mine:
            declared = _declared(check_id, title, Severity.REQUIRED if required and needed else Severity.ADVISORY)
            checks.append(_no_usable_run(declared, scope, coll, (unread or {}).get(scope, [])))
            continue
        severity = Severity.REQUIRED if required and (needed or any(m.target is not None for m in mine)) \
            else Severity.ADVISORY
        section += (_collective_entry(m, scope, coll) for m in mine)
        checks.append(_target_check(_declared(check_id, title, severity), scope, coll, mine))
    return checks, section


def _required_collectives(catalog: LoadedCatalog) -> dict[str, list[str]]:
    """By scope, the collectives the catalog requires: its model's, then those with a fixed target."""
    model = catalog.spec.rules.collective_model
    must: dict[str, list[str]] = {scope: list(colls) for scope, colls in (model.required if model else {}).items()}
    for scope, colls in catalog.spec.rules.collective_targets_gbps.items():
        must.setdefault(scope, [])
        must[scope] += [c for c in colls if c not in must[scope]]
    return must


def _no_usable_run(declared: DeclaredCheck, scope: str, coll: str, lost: list[str]) -> Check:
    """A (scope, collective) without a usable run: ERROR where unreadable runs at the scope may have run it."""
    if lost:
        return declared.judged(
            Status.ERROR,
            f"no usable {coll} nccl-tests run at scope {scope}, and {'; '.join(lost)}: whether it ran "
            f"{coll} cannot be told. Mend the file or re-run nccl-tests at this scope",
            unit="GB/s", summary=f"{coll} at scope {scope} cannot be judged: {lost[0]}",
        )
    return lacking(declared.judged(
        _absent(declared.severity is Severity.REQUIRED),
        f"the bundle has no usable {coll} nccl-tests run at scope {scope}: the cluster did not show it. "
        "Add a collective run (phase scaling, format nccl-tests) with this scope",
        unit="GB/s",
    ))


def _collective_entry(m: _Measured, scope: str, coll: str) -> dict[str, object]:
    """A measured run as the report's collectives section shows it."""
    return {
        "run": m.run.id, "scope": scope, "collective": coll, "ranks": m.result.ranks,
        "ranks_per_node": m.ranks_per_node, "domains": m.domains,
        "sizes_bytes": m.sizes, "busbw_gbps": m.busbw,
        "large_busbw_gbps": m.result.busbw_gbps, "peak_busbw_gbps": m.result.peak_gbps,
        "avg_busbw_gbps": m.avg_reported, "gated": "large_busbw_gbps",
        "target_gbps": m.target, "expected_gbps": m.result.expected_gbps,
        "bound_gbps": m.result.bound.gbps if m.result.bound else None,
        "model": m.target_basis, "target_source": m.target_source, "efficiency": m.efficiency,
        "ceiling_gbps": m.result.ceiling_gbps,
        "nodes": list(m.result.nodes), "file": m.result.evidence[0].file if m.result.evidence else None,
        "line": m.line or (m.result.evidence[0].first if m.result.evidence else None),
        "problem": _problem_text(m) if m.result.busbw_gbps is None else None, "cause": m.cause,
        "status": _status_of(m).value,
    }


def _target_check(declared: DeclaredCheck, scope: str, coll: str, mine: list[_Measured]) -> Check:
    """The target check of a (scope, collective) with runs: FAIL where one is below its target, ERROR where one
    is unusable or a target needs topology the bundle did not declare, SKIPPED where none has a target."""
    judged = [m for m in mine if m.target is not None and m.result.busbw_gbps is not None]
    unusable = [m for m in mine if m.result.busbw_gbps is None]
    untargeted = [m for m in mine if m.target is None and m.result.busbw_gbps is not None]
    below = [m for m in judged if m.result.busbw_gbps is not None and m.target is not None
             and m.result.busbw_gbps < m.target]
    ratios = [(m.result.busbw_gbps / m.target, m) for m in judged
              if m.result.busbw_gbps is not None and m.target]
    worst = min(ratios, key=lambda x: x[0])[1] if ratios else None
    problems = [_problem_text(m) for m in unusable]
    summary = None
    if below:
        status = Status.FAIL
        summary = f"{scope} {coll} below target: " + _named(
            [f"{m.run.id} {m.result.busbw_gbps:.1f} < {m.target:.1f} GB/s" for m in below])
        message = (f"{len(below)} of {len(mine)} run(s) below their target: "
                   + _listed([f"{m.run.id} {m.result.busbw_gbps:.1f} GB/s < target {m.target:.1f} "
                              f"(expected {m.result.expected_gbps or 0:.1f}, {_where(m)})" for m in below], "; ")
                   + f". Target = {below[0].target_basis}. Check the NICs, cables and switch ports these runs "
                     "cross, then re-run nccl-tests and add the new logs as further runs")
    elif unusable:
        status = Status.ERROR
        message = "unusable evidence: " + _listed(problems, " | ")
        if untargeted:
            message += f"; {len(untargeted)} usable run(s) have no target: {untargeted[0].target_basis}"
    elif not judged:
        # a target that needs topology the bundle did not declare is missing evidence; a collective the
        # catalog's model does not cover is reported only
        status = Status.ERROR if any(m.target_basis.startswith("no link bound") for m in untargeted) \
            else Status.SKIPPED
        # the finding first (a reason shows the message's first clause): why there is no target, then what
        # was measured
        gbps = [m.result.busbw_gbps for m in untargeted if m.result.busbw_gbps is not None]
        message = (f"no target for {len(untargeted)} measured run(s): {untargeted[0].target_basis}. Declare the "
                   f"topology the target follows from. Large-message busbw {min(gbps):.1f}-{max(gbps):.1f} "
                   "GB/s: " + _listed([f"{m.run.id} {m.result.busbw_gbps:.1f}" for m in untargeted], ", "))
    else:
        status = Status.PASS
        assert worst is not None
        message = (f"{len(judged)} run(s) at or above their target; lowest against its target "
                   f"{worst.run.id} {worst.result.busbw_gbps:.1f} GB/s, target {worst.target:.1f}, expected "
                   f"{worst.result.expected_gbps or 0:.1f} ({worst.target_basis})")
    if status is Status.FAIL and problems:
        message += "; also unusable: " + _listed(problems, " | ")
    shown = below[0] if below else worst
    # the run whose number the check shows first (its line holds it), then the other runs below, then the rest
    first = [shown, *(m for m in below if m is not shown)] if shown is not None else below
    spans = [s for m in mine for s in m.result.evidence]
    return declared.judged(
        status, message,
        measured=shown.result.busbw_gbps if shown else None, target=shown.target if shown else None,
        unit="GB/s", evidence=[s for m in first for s in m.result.evidence]
        + [s for s in spans if all(s not in m.result.evidence for m in first)], summary=summary,
    )


def _peer_checks(catalog: LoadedCatalog, measured: list[_Measured], required: bool) -> list[Check]:
    """A run far below the runs of its own shape is a finding even where its target holds (3+ runs)."""
    fraction = catalog.spec.rules.degraded_pair_fraction
    groups: dict[tuple[str, str, int, int | None, int | None], list[_Measured]] = {}
    for m in measured:
        if m.result.scope is not Scope.PAIR and not m.result.implausible:
            groups.setdefault(_shape(m), []).append(m)
    # a failed run (no table, so no message sizes) joins the largest group of its shape
    for key in [k for k in groups if k[4] is None]:
        peers = [k for k in groups if k[:4] == key[:4] and k[4] is not None]
        if peers:
            groups[max(peers, key=lambda k: len(groups[k]))] += groups.pop(key)
    checks: list[Check] = []
    severity = Severity.REQUIRED if required else Severity.ADVISORY
    seen: set[str] = set()
    for (scope, coll, ranks, rpn, size), mine in groups.items():
        judged = find_below_peers([m.result.busbw_gbps for m in mine], fraction)
        if judged is None:
            continue
        below = [(p, m) for p, m in zip(judged, mine, strict=True) if p.below and p.busbw_gbps is not None]
        check_id = f"{PHASE}.{scope}-{coll}-{ranks}ranks_no_run_below_peers"
        if check_id in seen:  # another shape with the same rank count: name it fully
            check_id = f"{PHASE}.{scope}-{coll}-{ranks}ranks-{rpn}per-node-{size}B_no_run_below_peers"
        seen.add(check_id)
        title = (f"No {coll} run at scope {scope} ({ranks} ranks) is below {fraction:.0%} of the median of its "
                 f"{len(mine)} peers")
        median = judged[0].median_gbps
        spans = [s for m in mine for s in m.result.evidence]
        summary = None
        if below:
            status = Status.FAIL
            summary = f"{scope} {coll} below {fraction:.0%} of its peers' median {median:.1f} GB/s: " + _named(
                [f"{m.run.id} {p.fraction_of_median:.0%}" for p, m in below])
            message = (f"{len(below)} of {len(mine)} run(s) below {fraction:.0%} of the median {median:.1f} GB/s of "
                       f"runs of the same shape ({coll}, {ranks} ranks, {rpn} per node): "
                       + "; ".join(f"{m.run.id} {p.busbw_gbps:.1f} GB/s = {p.fraction_of_median:.0%} ({_where(m)})"
                                   for p, m in below)
                       + ". Check the links these runs cross that their peers do not")
            worst = min(p.fraction_of_median or 0.0 for p, _ in below)
        else:
            status = Status.PASS
            shares = [p.fraction_of_median for p in judged if p.fraction_of_median is not None]
            worst = min(shares)
            message = (f"{len(shares)} run(s) of the same shape, median {median:.1f} GB/s, lowest {worst:.0%} of it "
                       f"(at least {fraction:.0%})")
        checks.append(_declared(check_id, title, severity).judged(status, message, measured=worst, target=fraction,
                             unit="fraction of median", evidence=[s for _, m in below for s in m.result.evidence]
                             + [s for s in spans if all(s not in m.result.evidence for _, m in below)],
                             summary=summary))
    return checks


@dataclass
class _Pairs:
    """Pair measurements judged against the median of their peers: the report's rows and the findings."""

    domain_of: Mapping[str, str]  # node -> its NVLink domain
    section: list[dict[str, object]] = field(default_factory=list)
    degraded: list[tuple[float, str]] = field(default_factory=list)  # (fraction of the median, -1 failed; finding)
    spans: list[Span] = field(default_factory=list)  # the evidence of the pairs that are neither failed nor degraded
    # (fraction of the median as in `degraded`, the pair's nodes, its evidence): a finding's own files come first
    bad_spans: list[tuple[float, list[str], Sequence[Span]]] = field(default_factory=list)
    bad_pair: dict[tuple[str, str], bool] = field(default_factory=dict)  # node pair -> any of its runs bad

    def add(self, m: _Measured, judged: PairResult, peers: int) -> None:
        """One pair run as judged among `peers` runs of its shape."""
        coll, rpn = m.result.collective.value, m.ranks_per_node
        nodes = list(judged.nodes)
        self.section.append({
            "run": m.run.id, "collective": coll, "ranks": m.result.ranks, "ranks_per_node": rpn, "nodes": nodes,
            "domains": [self.domain_of.get(n, n) for n in nodes], "busbw_gbps": judged.busbw_gbps,
            "median_gbps": finite(judged.median_gbps), "fraction_of_median": judged.fraction_of_median,
            "degraded": judged.degraded, "failed": judged.busbw_gbps is None,
            "cause": m.cause or (m.error if judged.busbw_gbps is None else None), "peers": peers,
        })
        key = (nodes[0], nodes[1])
        self.bad_pair[key] = self.bad_pair.get(key, False) or judged.degraded
        if not judged.degraded:
            self.spans.extend(judged.evidence)
            return
        if judged.busbw_gbps is None:
            why = m.cause or m.error or "no usable table"
            shown, share, median = f"failed ({why!r}, {_where(m)})", "", ""
        else:
            shown = f"{judged.busbw_gbps:.1f} GB/s"
            share = f", {judged.fraction_of_median:.0%} of" if judged.fraction_of_median is not None else ""
            median = (f" the median {judged.median_gbps:.1f} GB/s of {peers} {coll} pairs at {rpn} GPUs "
                      "per node")
        ends = " - ".join(f"{n} ({self.domain_of[n]})" if n in self.domain_of else n for n in nodes)
        order = -1.0 if judged.fraction_of_median is None else judged.fraction_of_median
        self.degraded.append((order, f"{ends} {coll} {shown}{share}{median}"))
        self.bad_spans.append((order, nodes, judged.evidence))


def _pair_peers(pairs: list[_Measured]) -> list[list[_Measured]]:
    """Pair runs grouped like with like: same collective, ranks, ranks per node and largest message size (a
    failed run, which has no sizes, joins the largest group of its shape); implausible runs left out."""
    groups: dict[tuple[str, int, int | None], list[_Measured]] = {}
    for m in pairs:
        if not m.result.implausible:
            groups.setdefault((m.result.collective.value, m.result.ranks, m.ranks_per_node), []).append(m)
    peers: list[list[_Measured]] = []
    for group in groups.values():
        by_size: dict[int | None, list[_Measured]] = {}
        for m in group:
            by_size.setdefault(max(m.sizes) if m.sizes else None, []).append(m)
        failed = by_size.pop(None, [])
        if by_size:
            biggest = max(by_size, key=lambda k: len(by_size[k]))
            by_size[biggest] += failed
        else:
            by_size[None] = failed
        peers += by_size.values()
    return peers


def _pair_checks(
    bundle: LoadedBundle, catalog: LoadedCatalog, measured: list[_Measured], required: bool
) -> tuple[list[Check], list[dict[str, object]], list[dict[str, object]]]:
    """The degraded-link and suspect-node checks of the pairwise sweep, its rows and its nodes' rows."""
    # a capture cut short says nothing about the pair's link: it is unusable evidence (the target check says so),
    # never a failed pair
    pairs = [m for m in measured if m.result.scope is Scope.PAIR and not m.truncated]
    if not pairs:
        return [], [], []
    fraction = catalog.spec.rules.degraded_pair_fraction
    found = _Pairs({node: d.name for d in bundle.spec.system.nvlink_domains for node in d.nodes})
    for mine in _pair_peers(pairs):
        for m, judged in zip(mine, find_degraded_pairs([m.result for m in mine], fraction), strict=True):
            found.add(m, judged, len(mine))
    # The failed and degraded pairs' files first, in the order the finding names them (a reason shows the first)
    found.bad_spans.sort(key=lambda b: b[0])
    severity = Severity.REQUIRED if required else Severity.ADVISORY
    verdicts = rank_nodes([(k, v) for k, v in found.bad_pair.items()])
    nodes_section: list[dict[str, object]] = [
        {"node": v.node, "bad_pairs": v.bad_pairs, "pairs": v.pairs, "share": v.share, "suspect": v.suspect}
        for v in verdicts
    ]
    checks = [_degraded_link_check(found, fraction, severity), _suspect_node_check(found, verdicts, severity)]
    return checks, found.section, nodes_section


def _degraded_link_check(found: _Pairs, fraction: float, severity: Severity) -> Check:
    title = (f"No node pair fails or falls below {fraction:.0%} of the median of pairs of its shape (collective, "
             "GPUs per node, message sizes)")
    pair_summary: str | None = None
    if found.degraded:
        # failed pairs first, then the slowest
        texts = [text for _, text in sorted(found.degraded, key=lambda d: d[0])]
        listed = _listed(texts, "; ")
        status, message = Status.FAIL, (f"{len(found.degraded)} failed or degraded pair measurement(s): {listed}"
                                        ". Check the cables, NICs and switch ports between these nodes")
        pair_summary = f"{len(found.degraded)} failed or degraded pair measurement(s): " + _named(texts, 1)
    else:
        status, message = (Status.PASS, f"{len(found.section)} pair measurement(s), none below {fraction:.0%} of "
                                        "the median")
    worst = min((float(p["fraction_of_median"]) for p in found.section  # type: ignore[arg-type]
                 if p["fraction_of_median"] is not None), default=None)
    return _declared(f"{PHASE}.pairs_no_degraded_link", title, severity).judged(
        status, message, measured=worst, target=fraction, unit="fraction of median",
        evidence=[s for _, _, ev in found.bad_spans for s in ev] + found.spans, summary=pair_summary)


def _suspect_node_check(found: _Pairs, verdicts: Sequence[NodeVerdict], severity: Severity) -> Check:
    suspects = [v for v in verdicts if v.suspect]
    node_summary: str | None = None
    node_title = "No node sits in most of its pairs' failures (a node fault, not a link fault)"
    bad_pair = found.bad_pair
    if suspects:
        node_status = Status.FAIL
        node_message = ("node(s) in most of their failed or degraded pairs: "
                        + ", ".join(f"{v.node} {v.bad_pairs} of {v.pairs} pairs" for v in suspects)
                        + f" ({len(bad_pair)} node pairs judged, {sum(bad_pair.values())} bad). Take these nodes "
                          "out of service and check their NICs, cables and GPUs before the links")
        node_summary = "suspect node(s): " + _named(
            [f"{v.node} in {v.bad_pairs} of its {v.pairs} pairs" for v in suspects])
    elif verdicts:
        node_status = Status.PASS
        node_message = ("bad pairs do not share a node: most "
                        + ", ".join(f"{v.node} {v.bad_pairs} of {v.pairs}" for v in verdicts[:3])
                        + "; the pairs check names the links")
    else:
        node_status, node_message = Status.PASS, f"{len(bad_pair)} node pairs, none failed or degraded"
    # The bad pairs of the suspect nodes first, then the other bad pairs, then the rest
    suspect = {v.node for v in suspects}
    bad_spans = sorted(found.bad_spans, key=lambda b: not suspect.intersection(b[1]))
    return _declared(f"{PHASE}.pairs_no_suspect_node", node_title, severity).judged(
        node_status, node_message, measured=suspects[0].share if suspects else None, target=0.5,
        unit="share of pairs", evidence=[s for _, _, ev in bad_spans for s in ev] + found.spans,
        summary=node_summary)


def judge_scaling(
    bundle: LoadedBundle, catalog: LoadedCatalog, parsed: Mapping[str, object | EvidenceError]
) -> PhaseResult:
    """Judge the scaling phase; `parsed` maps run ids to parsed evidence (or the error that stopped parsing)."""
    required = catalog.spec.judges(Phase.SCALING)
    checks: list[Check] = []
    has_evidence = any(r.phase is Phase.SCALING for r in bundle.spec.runs)
    if required:
        present = _declared(f"{PHASE}.evidence_present", "The bundle holds scaling-phase evidence",
                            Severity.REQUIRED).judged(
            Status.PASS if has_evidence else Status.FAIL,
            "scaling runs present" if has_evidence else
            "the bundle has no run of phase scaling: the cluster did not show it. Add scaling training runs "
            "and nccl-tests collective runs (phase scaling)",
        )
        checks.append(present if has_evidence else lacking(present))
    weak_checks, weak = _weak_scaling(bundle, catalog, parsed, required)
    run_checks, measured = _collective_runs(bundle, catalog, parsed, required)
    unread: dict[str, list[str]] = {}  # by scope, the collective runs that could not be read
    for run in bundle.spec.runs:
        if run.kind is RunKind.COLLECTIVE and run.scope is not None and isinstance(v := parsed.get(run.id),
                                                                                     EvidenceError):
            unread.setdefault(str(run.scope), []).append(str(v))
    coll_checks, collectives = _collective_checks(catalog, measured, required, unread)
    peer_checks = _peer_checks(catalog, measured, required)
    pair_checks, pairs, nodes = _pair_checks(bundle, catalog, measured, required)
    checks += weak_checks + run_checks + coll_checks + peer_checks + pair_checks
    ceiling = plausibility_ceiling_gbps(catalog.spec.nvlink_gbps_per_direction)
    model = catalog.spec.rules.collective_model
    gates = [{**g.model_dump(), "source_title": catalog.spec.sources[g.source].title}
             for g in (model.public_gates if model else []) if g.system == bundle.spec.system.gpu]
    return PhaseResult(checks=checks, section={
        "weak_scaling": weak, "collectives": collectives, "pairs": pairs, "pair_nodes": nodes,
        "ceiling_gbps": ceiling, "public_gates": gates, "reference_fit": reference_fit(catalog),
    })


def reference_fit(catalog: LoadedCatalog) -> list[dict[str, object]]:
    """How the model fits the catalog's reference results: each one beside the value the nearest other reference
    of its collective and link class gives it when carried to its shape, and beside the link model alone."""
    model = catalog.spec.rules.collective_model
    if model is None:
        return []
    rows: list[dict[str, object]] = []
    nvl = catalog.spec.nvlink_gbps_per_direction
    for ref in model.references:
        collective = Collective(ref.collective)
        placement = Placement(ref.ranks, ref.domains, ref.ranks_per_domain)
        rates = LinkRates(nvl, ref.net_gbps)
        others = [r for r in model.references if r is not ref and r.collective == ref.collective
                  and (r.domains <= 1) == (ref.domains <= 1) and r.net_gbps == ref.net_gbps]
        links = _Links(rates, None, {}, 1, "")
        near = _reference(catalog, collective, placement, links, among=others) if others else None
        cls: Literal["nvlink", "scale-out"] = "nvlink" if ref.domains <= 1 else "scale-out"
        efficiency = model.efficiency.get(cls, {}).get(ref.collective)
        bound = link_bound(collective, placement, rates).gbps
        rows.append({
            "collective": ref.collective, "ranks": ref.ranks, "domains": ref.domains,
            "ranks_per_domain": ref.ranks_per_domain, "gbps": ref.gbps, "note": ref.note,
            "source": ref.source,
            "carried_gbps": near[0] if near else None, "carried_from": near[1].note if near else None,
            "fits": None if near is None else ref.gbps >= model.target_fraction * near[0],
            "link_model_gbps": bound * efficiency if bound is not None and efficiency is not None else None,
        })
    return rows
