"""Efficiency phase: each suite workload's step time against its baseline, run validity and stability."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from clustercert.baselines import SOURCE_KEY
from clustercert.catalog import Baseline, LoadedCatalog, SuiteEntry
from clustercert.editions import RecipeConfig
from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import Bundle, LoadedBundle, Phase, RunKind, RunSpec
from clustercert.evidence.provenance import Span
from clustercert.metrics.convergence import LossProblem, judge_loss
from clustercert.metrics.flops import CANONICAL, Attention, FlopsConvention, ModelShape, model_flops_per_sequence
from clustercert.metrics.mlperf import MlperfRun, RunStatus, score_time_to_train
from clustercert.metrics.stats import bootstrap_mean_interval, hierarchical_bootstrap_interval, median_index
from clustercert.metrics.throughput import (
    Comparison,
    RunThroughput,
    WindowProblem,
    compare_printed_tflops,
    compare_with_baseline,
    measure_window,
    mfu,
    tflops_per_gpu,
    tokens_per_s_per_gpu,
)
from clustercert.mlperf_benchmarks import MlperfBenchmarks
from clustercert.parsers.llmb_config import LlmbConfig
from clustercert.parsers.mlperf import MlperfResult
from clustercert.parsers.training import TrainingLog, TrainingStep, step_column
from clustercert.phases.conformance import recipe_check
from clustercert.phases.program import judge_job_configs
from clustercert.verdicts import Check, DeclaredCheck, Severity, Status, lacking

__all__ = [
    "EfficiencyResult", "WorkloadResult", "baseline_kind", "copied_message", "judge_efficiency", "mlperf_asked",
    "window_values",
]

PHASE = Phase.EFFICIENCY.value


@dataclass(frozen=True)
class RunResult:
    run_id: str
    repeat: int
    file: str
    throughput: RunThroughput


@dataclass(frozen=True)
class WorkloadResult:
    workload: str
    precision: str
    gpus: int
    gbs: int
    seq_len: int
    used: RunResult
    repeats: tuple[RunResult, ...]
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    tflops_per_gpu_canonical: float
    mfu: float
    mfu_canonical: float
    flops_convention: str
    log_tflops_per_gpu: float | None
    log_flops_convention: str | None
    baseline: Baseline
    baseline_source_title: str
    baseline_source_url: str | None
    delta_pct: float
    ci_low_pct: float
    ci_high_pct: float
    status: Status
    ci_low_s: float  # hierarchical bootstrap interval of the combined step time (every repeat)
    ci_high_s: float
    ci_method: str
    peak_tflops: float  # the catalog's dense peak per GPU at the precision, the MFU's denominator

    def to_json(self) -> dict[str, object]:
        t = self.used.throughput
        return {
            "workload": self.workload,
            "precision": self.precision,
            "gpus": self.gpus,
            "gbs": self.gbs,
            "seq_len": self.seq_len,
            "run_used": self.used.run_id,
            "repeats": [
                {"run": r.run_id, "repeat": r.repeat, "step_time_s": r.throughput.mean_s, "file": r.file,
                 "delta_pct": 100.0 * (self.baseline.step_time_s / r.throughput.mean_s - 1.0),
                 "used": r.run_id == self.used.run_id, "printed_tflops_per_gpu": r.throughput.tflops_mean,
                 "printed_tflops_steps": r.throughput.tflops_steps}
                for r in self.repeats
            ],
            "step_time_s": {
                "mean": t.mean_s, "std": t.std_s, "ci_low": self.ci_low_s, "ci_high": self.ci_high_s,
                "ci_method": self.ci_method, "window": list(t.window), "n": len(t.step_times),
            },
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "tflops_per_gpu": self.tflops_per_gpu,
            "tflops_per_gpu_canonical": self.tflops_per_gpu_canonical,
            "mfu": self.mfu,
            "mfu_canonical": self.mfu_canonical,
            "peak_tflops": self.peak_tflops,
            "flops_convention": self.flops_convention,
            "log_tflops_per_gpu": self.log_tflops_per_gpu,
            "log_flops_convention": self.log_flops_convention,
            "baseline": {
                "step_time_s": self.baseline.step_time_s,
                "mfu": self.baseline.mfu_published,
                "source": self.baseline.source,
                "source_title": self.baseline_source_title,
                "source_url": self.baseline_source_url,
                "source_table": self.baseline.source_table,
                "recipe_version": self.baseline.recipe_version,
                "illustrative": self.baseline.illustrative,
                "kind": baseline_kind(self.baseline),
                "derivation": self.baseline.derivation,
            },
            "delta_pct": self.delta_pct,
            "ci_low_pct": self.ci_low_pct,
            "ci_high_pct": self.ci_high_pct,
            "status": self.status.value,
        }


@dataclass(frozen=True)
class EfficiencyResult:
    checks: list[Check]
    workloads: list[WorkloadResult]
    step_series: list[dict[str, object]]

    def section(self) -> dict[str, object]:
        """The phase's part of results.json beyond its checks (chart data included)."""
        return {"step_series": self.step_series}


def baseline_kind(baseline: Baseline) -> str:
    """published, supplied or derived: the catalogs before the 26.08 editions say derived by `illustrative`."""
    return baseline.kind or ("derived" if baseline.illustrative else "published")


def _subject(workload: str, precision: str, gpus: int) -> str:
    return f"{workload}-{precision}-{gpus}"


def _problem_check(run: RunSpec, file: str, problem: WindowProblem | EvidenceError) -> Check:
    if isinstance(problem, EvidenceError):
        message, span = str(problem), Span(problem.file, problem.line or 0, problem.line or 0, 1)
    else:
        located = EvidenceError(file, problem.message, line=problem.line, field=problem.field)
        message, span = str(located), Span(file, problem.line or 0, problem.line or 0, 1)
    return Check(
        id=f"{PHASE}.{run.id}_valid", title=f"Run {run.id} is a valid measurement", phase=PHASE,
        severity=Severity.REQUIRED, status=Status.ERROR, measured=None, target=None, unit="",
        message=message, evidence=(span,),
    )


def _recipe_table(catalog: LoadedCatalog, run: RunSpec) -> tuple[RecipeConfig, str] | None:
    """The configuration-table row of the run's recipe at its precision and GPU count, with the table's source
    (an edition's catalog has them), or None."""
    recipe = catalog.spec.recipes.get(run.workload or "")
    row = recipe.configuration(run.precision.value, run.gpus) if recipe and run.precision and run.gpus else None
    return (row, recipe.source) if row is not None and recipe is not None else None


def _loss_check(run: RunSpec, file: str, log: TrainingLog, explode_factor: float, required: bool) -> Check:
    verdict = judge_loss(log.steps, log.nan_marks, explode_factor)
    severity = Severity.REQUIRED if required else Severity.ADVISORY
    if verdict.problem is LossProblem.NONE:
        status = Status.PASS
    elif verdict.problem is LossProblem.NOT_LOGGED:
        status = Status.SKIPPED
    else:
        status = Status.FAIL if required else Status.WARN
    line = verdict.line or 0
    return Check(
        id=f"{PHASE}.{run.id}_loss_sane", title=f"Run {run.id}: the logged loss is finite and falls", phase=PHASE,
        severity=severity, status=status, measured=verdict.tail_mean, target=verdict.head_mean, unit="loss",
        message=f"{file}" + (f":{verdict.line}" if verdict.line else "") + f": {verdict.message}",
        evidence=(Span(file, line, line, 1),) if verdict.line else (),
    )


LOG_TFLOPS_TOLERANCE = 0.02  # a printed TFLOP/s within 2 % of a convention's value is explained by it


def _candidate_conventions(baseline: Baseline) -> list[FlopsConvention]:
    """Causal and non-causal, each plain and with the baseline's overrides (errata, fixed vocabulary)."""
    own = baseline.flops_convention.flops()
    out: list[FlopsConvention] = [own] if own.per_sample is not None else []
    for attention in (Attention.CAUSAL, Attention.NON_CAUSAL):
        for conv in (FlopsConvention(attention), FlopsConvention(attention, own.kv_groups, own.vocab)):
            if conv not in out:
                out.append(conv)
    return out


def match_log_convention(
    shape: ModelShape, seq_len: int, gbs: int, gpus: int, steps: list[tuple[float, float]], baseline: Baseline
) -> tuple[float, str | None, dict[str, float]]:
    """The log's mean printed TFLOP/s per GPU, the convention explaining it within 2 % (None if none), ratios.

    `steps` holds (step time s, printed TFLOP/s) of the window's steps; each convention's ratio is the median of
    printed / (F x GBS / t / GPUs), so the log's own step times are used.
    """
    printed = sum(p for _, p in steps) / len(steps)
    ratios: dict[str, float] = {}
    for conv in _candidate_conventions(baseline):
        flops = model_flops_per_sequence(shape, seq_len, conv)
        per_step = sorted(p / tflops_per_gpu(flops, gbs, t, gpus) for t, p in steps)
        mid = len(per_step) // 2
        ratios[conv.describe()] = (per_step[mid] if len(per_step) % 2 else 0.5 * (per_step[mid - 1] + per_step[mid]))
    best = min(ratios, key=lambda k: abs(ratios[k] - 1.0))
    return printed, best if abs(ratios[best] - 1.0) <= LOG_TFLOPS_TOLERANCE else None, ratios


def _mlperf_step_time(result: MlperfResult) -> str:
    """The step time MLPerf's `tracked_stats` give (the runs' mean), as a clause of the message; "" without them."""
    times = [t for r in result.runs if (t := r.step_time_s) is not None]
    if not times:
        return ""
    how = ("train_step_time" if any(r.step_times_s for r in result.runs)
           else "global_batch_size / tracked throughput in samples/s")
    return f"; step time {sum(times) / len(times):.3f} s (mean of {len(times)} runs' tracked_stats: {how})"


@dataclass(frozen=True)
class MlperfFlops:
    """What an MLPerf run's MFU is derived from beside its result: the benchmarks' FLOPs per sample and the
    catalog's peaks (clustercert.mlperf_benchmarks, references/mlperf-benchmarks.yaml)."""

    benchmarks: MlperfBenchmarks
    peaks_tflops: Mapping[str, float]
    peaks_from: str  # where the peaks come from, as the message names it (the catalog)


def mlperf_asked(bundle: LoadedBundle, catalog: LoadedCatalog) -> bool:
    """Whether the efficiency phase judges an MLPerf result (with the benchmarks file's FLOPs): an MLPerf run in
    the bundle. `catalog` is not asked: a signature shared with the health phase's `phase_asked`."""
    return any(r.kind is RunKind.MLPERF for r in bundle.spec.runs)


def mlperf_mfu(run: RunSpec, result: MlperfResult, flops: MlperfFlops) -> tuple[float | None, str]:
    """The MFU of an MLPerf result (the runs' mean step time, DOMAIN.md section 1's MFU) and the message clause that
    says how, or None and why it was not derived: never a FLOPs count the benchmarks file does not publish."""
    bench = result.benchmark or run.id
    counted = flops.benchmarks.flops(bench)
    if counted is None:
        return None, f"; MFU not derived: no FLOPs for {bench}"
    times = [t for r in result.runs if (t := r.step_time_s) is not None]
    batches = sorted({r.global_batch_size or 0 for r in result.runs if r.step_time_s is not None})
    gpus = run.gpus or result.system_gpus
    precision = run.precision.value if run.precision is not None else None
    peak = flops.peaks_tflops.get(precision) if precision is not None else None
    if not times:
        return None, "; MFU not derived: no tracked_stats step time in the runs"
    if len(batches) != 1 or batches[0] == 0:
        return None, "; MFU not derived: the runs do not log one global_batch_size"
    if gpus is None:
        return None, "; MFU not derived: the number of GPUs is neither in bundle.yaml (gpus) nor in the system JSON"
    if precision is None or peak is None:
        return None, ("; MFU not derived: " + ("bundle.yaml gives the run no precision (the peak depends on it)"
                                               if precision is None else f"the catalog has no {precision} peak"))
    step = sum(times) / len(times)
    value = mfu(counted.flops_per_sample, batches[0], step, gpus, peak)
    return value, (f"; MFU {value:.1%} ({counted.describe()}; global batch {batches[0]}, {gpus} GPUs, "
                   f"{precision} peak {peak:g} TFLOP/s from {flops.peaks_from})")


def judge_mlperf(
    runs: list[RunSpec], parsed: Mapping[str, object | EvidenceError], targets: Mapping[str, float],
    flops: MlperfFlops | None = None,
) -> list[Check]:
    """MLPerf time-to-train per `kind: mlperf` run: advisory unless the catalog sets a target (minutes); the step
    time and, where `flops` publishes the benchmark's FLOPs, the MFU are reported beside it."""
    checks: list[Check] = []
    for run in runs:
        result = parsed.get(run.id)
        check_id = f"{PHASE}.mlperf-{run.id}_time_to_train"
        if isinstance(result, EvidenceError):
            checks.append(Check(
                id=check_id, title=f"MLPerf {run.id} time to train", phase=PHASE, severity=Severity.ADVISORY,
                status=Status.ERROR, measured=None, target=None, unit="min", message=str(result),
                evidence=(Span(result.file, result.line or 0, result.line or 0, 1),)))
            continue
        if not isinstance(result, MlperfResult):
            continue
        bench = result.benchmark or run.id
        target = targets.get(bench)
        scored = score_time_to_train([
            MlperfRun(r.file, r.minutes if r.minutes is not None else float("inf"),
                      RunStatus.SUCCESS if r.minutes is not None else
                      RunStatus.MISSING_STOP if r.stop_ms is None else RunStatus.ABORTED,
                      (Span(r.file, r.start_line or 0, r.stop_line or r.start_line or 0, 2),))
            for r in result.runs
        ], result.scaling_factor or 1.0)
        severity = Severity.REQUIRED if target is not None else Severity.ADVISORY
        on = f" on {result.system_name}" if result.system_name else ""  # the submission's system JSON names it
        title = f"MLPerf {bench} time to train{on}" + (f" within {target:g} min" if target is not None else "")
        steps = _mlperf_step_time(result)
        if flops is not None:
            steps += mlperf_mfu(run, result, flops)[1]
        if not scored.valid:
            status, message = Status.ERROR, f"{result.folder}: no valid score: {scored.reason}"
        elif target is None:
            status = Status.SKIPPED
            message = (f"score {scored.minutes:.2f} min (olympic mean of {scored.runs} runs, scaling factor "
                       f"{scored.scaling_factor:g}){steps}; reported only (the catalog sets no target)")
        else:
            status = Status.PASS if scored.minutes <= target else Status.FAIL
            message = f"score {scored.minutes:.2f} min vs target {target:g} min ({scored.runs} runs){steps}"
        checks.append(Check(
            id=check_id, title=title, phase=PHASE, severity=severity, status=status,
            measured=scored.minutes if scored.valid else None, target=target, unit="min", message=message,
            evidence=scored.evidence))
    return checks


def judge_efficiency(
    bundle: Bundle, catalog: LoadedCatalog, logs: Mapping[str, TrainingLog | EvidenceError],
    mlperf: Mapping[str, object | EvidenceError] | None = None,
    configs: Mapping[str, LlmbConfig | EvidenceError] | None = None,
    benchmarks: MlperfBenchmarks | None = None,
) -> EfficiencyResult:
    """Judge every suite workload; `logs` maps a run id to its parsed log or the error that stopped parsing,
    `configs` a run id to llmb-run's record of its job (a run that deviates from its recipe is set aside),
    `benchmarks` the MLPerf benchmarks' FLOPs per sample (an MLPerf run's MFU)."""
    rules = catalog.spec.rules
    checks, aside = judge_job_configs(bundle, catalog, configs or {})
    workloads: list[WorkloadResult] = []
    series: list[dict[str, object]] = []
    runs = [r for r in bundle.runs if r.phase is Phase.EFFICIENCY and r.kind is RunKind.TRAINING]
    # a phase no profile of the catalog decides is measured and reported, never decisive; which of the judged
    # checks decide is the chosen profile's (phases.profile)
    required = catalog.spec.judges(Phase.EFFICIENCY)
    for entry in catalog.spec.suite:
        baseline = catalog.baseline_for(entry.workload, entry.precision, entry.gpus)
        subject = _subject(entry.workload, entry.precision, entry.gpus)
        declared = DeclaredCheck(
            f"{PHASE}.{subject}_meets_baseline",
            f"{entry.workload} {entry.precision.upper()} at {entry.gpus} GPUs reaches > {rules.pass_ratio:.0%} of "
            "baseline", PHASE, Severity.REQUIRED)
        if baseline is None:  # an edition's targets come with certify --baselines; without one nothing is judged
            checks.append(declared.judged(
                Status.ERROR, f"no baseline for {subject}: the catalog {catalog.spec.id} publishes none and the "
                "baselines file " + ("given has no entry for it" if catalog.baselines else "was not given") +
                ". Give its target with certify --baselines FILE", unit="s"))
            continue
        workload = _Workload(entry, baseline, subject)
        every = sorted(
            (r for r in runs if (r.workload, r.precision, r.gpus) == (entry.workload, entry.precision, entry.gpus)),
            key=lambda r: r.repeat,
        )
        mine = [r for r in every if r.id not in aside]
        if not mine:
            set_aside = "; ".join(f"run {r.id} set aside: {aside[r.id]}" for r in every)
            checks.append(lacking(declared.judged(
                Status.FAIL if required else Status.SKIPPED,
                f"the bundle has no efficiency training run of {workload.subject} that counts: the cluster did not "
                "show it" + (f" ({set_aside})" if set_aside else ""), target=baseline.step_time_s, unit="s")))
            continue
        valid, run_checks, run_series = _valid_runs(mine, workload, bundle, catalog, logs)
        checks += run_checks
        series += run_series
        if not valid:
            checks.append(declared.judged(
                Status.ERROR, f"no valid run of {workload.subject}: every repeat is unusable (see the run checks)",
                target=baseline.step_time_s, unit="s"))
            continue
        judged, result = _judge_workload(declared, workload, valid, catalog, logs)
        checks += judged
        workloads.append(result)
    if not required:
        note = f" (advisory: catalog {catalog.spec.id} does not require the efficiency phase)"
        checks = [replace(c, severity=Severity.ADVISORY, message=c.message + note)
                  if c.severity is Severity.REQUIRED else c for c in checks]
    mlperf_runs = [r for r in bundle.runs if r.kind is RunKind.MLPERF]
    if mlperf is not None:
        flops = (MlperfFlops(benchmarks, {p.value: v for p, v in catalog.spec.peaks_tflops.items()},
                             f"catalog {catalog.spec.id}") if benchmarks is not None else None)
        checks.extend(judge_mlperf(mlperf_runs, mlperf, rules.mlperf_targets_minutes, flops))
    return EfficiencyResult(checks=checks, workloads=workloads, step_series=series)


@dataclass(frozen=True)
class _Workload:
    """A suite entry being judged, with its baseline."""

    entry: SuiteEntry
    baseline: Baseline
    subject: str  # `<workload>-<precision>-<gpus>`, as check ids name it


def _valid_runs(
    mine: list[RunSpec], workload: _Workload, bundle: Bundle, catalog: LoadedCatalog,
    logs: Mapping[str, TrainingLog | EvidenceError],
) -> tuple[list[RunResult], list[Check], list[dict[str, object]]]:
    """The repeats of a workload measured over the baseline's window, each run's checks (recipe, loss, validity),
    and each usable run's step times for the report's chart."""
    rules = catalog.spec.rules
    baseline = workload.baseline
    window = baseline.window
    valid: list[RunResult] = []
    checks: list[Check] = []
    series: list[dict[str, object]] = []
    measured_by: dict[tuple[object, ...], tuple[RunSpec, str]] = {}  # a window's values -> the run that measured it
    for run in mine:
        file = run.files[0]
        parsed = logs[run.id]
        if isinstance(parsed, EvidenceError):
            checks.append(_problem_check(run, file, parsed))
            continue
        recipe = recipe_check(run, file, bundle.recipe_version, baseline, list(rules.recipe_fields),
                              parsed.settings, _recipe_table(catalog, run))
        checks.append(recipe)
        if recipe.status is Status.ERROR:
            continue
        checks.append(_loss_check(run, file, parsed, rules.loss_explode_factor, rules.loss_check == "required"))
        measured = measure_window(parsed.steps, parsed.nan_marks, (window.first, window.last),
                                  resamples=rules.bootstrap_resamples, seed=rules.bootstrap_seed)
        if isinstance(measured, list):
            checks.extend(_problem_check(run, parsed.file, p) for p in measured[:1])
            continue
        values = window_values(parsed, window.first, window.last)
        copied = measured_by.setdefault(values, (run, parsed.file))
        if copied[0] is not run:
            checks.append(_copied_check(run, parsed.file, copied, measured.lines))
            continue
        valid.append(RunResult(run.id, run.repeat, parsed.file, measured))
        series.append({
            "run": run.id, "workload": run.workload, "precision": workload.entry.precision.value, "gpus": run.gpus,
            "iterations": list(step_column(parsed.steps, "iteration")),
            "step_time_s": list(step_column(parsed.steps, "step_time_s")),
            "window": [window.first, window.last], "baseline_step_s": baseline.step_time_s,
        })
        checks.append(Check(
            id=f"{PHASE}.{run.id}_valid", title=f"Run {run.id} is a valid measurement", phase=PHASE,
            severity=Severity.REQUIRED, status=Status.PASS, measured=float(len(measured.step_times)),
            target=float(window.last - window.first + 1), unit="steps",
            message=f"iterations {window.first}-{window.last} complete, no nan",
            evidence=(Span(parsed.file, measured.lines[0], measured.lines[-1], len(measured.lines)),),
        ))
    return valid, checks, series


def window_values(parsed: TrainingLog, first: int, last: int) -> tuple[object, ...]:
    """What a run measured over the window: each step's iteration, step time and loss, in the log's order. Two
    runs that measured the same (one log copied under another name, a byte changed elsewhere) are one run."""
    iterations = step_column(parsed.steps, "iteration")
    times = step_column(parsed.steps, "step_time_s")
    losses = step_column(parsed.steps, "loss")
    return tuple((i, t, loss) for i, t, loss in zip(iterations, times, losses, strict=True) if first <= i <= last)


def copied_message(file: str, other_file: str, other: str, run: str, what: str) -> str:
    """What a run whose measured window is another's (`other`'s, in `other_file`) is told: one measurement."""
    return (f"{file} and {other_file}: the measured windows are identical (iteration, step time and loss of every "
            f"step): one measurement, listed as runs {other} and {run}. Keep the run's own log and re-run {what}")


def _copied_check(run: RunSpec, file: str, first: tuple[RunSpec, str], lines: tuple[int, ...]) -> Check:
    """A repeat whose measured window is another repeat's, value for value: one measurement, not two."""
    other, other_file = first
    return Check(
        id=f"{PHASE}.{run.id}_valid", title=f"Run {run.id} is a valid measurement", phase=PHASE,
        severity=Severity.REQUIRED, status=Status.ERROR, measured=None, target=None, unit="",
        message=copied_message(file, other_file, other.id, run.id, "the repeat"),
        evidence=(Span(file, lines[0], lines[-1], len(lines)), Span(other_file, 0, 0, 1)),
    )


def _judge_workload(declared: DeclaredCheck, workload: _Workload, valid: list[RunResult], catalog: LoadedCatalog,
                    logs: Mapping[str, TrainingLog | EvidenceError]) -> tuple[list[Check], WorkloadResult]:
    """A workload's checks against its baseline (step time, stability, the TFLOP/s its log prints) from its valid
    repeats, and what the report shows of it."""
    rules = catalog.spec.rules
    entry, baseline = workload.entry, workload.baseline
    means = [r.throughput.mean_s for r in valid]
    pick = {"median": median_index(means), "best": means.index(min(means)), "worst": means.index(max(means)),
            "latest": len(valid) - 1}  # `valid` is in repeat order: the latest valid run (Exemplar 26.05 on)
    used = valid[pick[rules.repeats]]
    t = used.throughput
    # the latest rule judges one run: its interval is that run's steps alone
    groups = [used.throughput.step_times] if rules.repeats == "latest" else [r.throughput.step_times for r in valid]
    interval = hierarchical_bootstrap_interval(
        groups, rule="median" if rules.repeats == "latest" else rules.repeats,
        resamples=rules.bootstrap_resamples, seed=rules.bootstrap_seed)
    target = _tflops_target(baseline)
    if target is not None and t.tflops_mean is not None:
        # issue 57: a TFLOP/s baseline is met by the TFLOP/s the log prints, as the program reads it
        printed_values = [s.tflops_per_gpu for s in logs_steps(logs, used.run_id, t.window)
                          if s.tflops_per_gpu is not None and math.isfinite(s.tflops_per_gpu)]
        cmp = compare_printed_tflops(t.tflops_mean, target, rules.pass_ratio, bootstrap_mean_interval(
            printed_values, resamples=rules.bootstrap_resamples, seed=rules.bootstrap_seed))
    else:
        cmp = compare_with_baseline(t, baseline.step_time_s, rules.pass_ratio, interval)
    status = Status.PASS if cmp.passed else Status.FAIL
    span = Span(used.file, t.lines[0], t.lines[-1], len(t.lines))
    checks = [_baseline_check(declared, workload, valid, used, cmp, catalog)]
    cv = t.std_s / t.mean_s
    checks.append(Check(
        id=f"{PHASE}.{workload.subject}_step_time_stable",
        title=f"{workload.subject} step time is stable over the window",
        phase=PHASE, severity=Severity.ADVISORY,
        status=Status.PASS if cv <= rules.step_time_cv_max else Status.WARN,
        measured=cv, target=rules.step_time_cv_max, unit="cv",
        message=f"coefficient of variation {cv:.4f} (std {t.std_s:.4f} s over {len(t.step_times)} steps)",
        evidence=(span,),
    ))
    try:
        spec: ModelShape | None = catalog.spec.models[entry.workload].shape()
    except ValueError:  # a model DOMAIN.md's formula does not describe: its baseline gives the FLOPs per sequence
        spec = None
    printed = [(s.step_time_s, s.tflops_per_gpu) for s in logs_steps(logs, used.run_id, t.window)
               if s.step_time_s and s.tflops_per_gpu]
    log_tflops: float | None = None
    log_convention: str | None = None
    if printed and spec is None:
        log_tflops = sum(p for _, p in printed) / len(printed)
    elif printed and spec is not None:
        log_tflops, log_convention, ratios = match_log_convention(
            spec, baseline.seq_len, baseline.gbs, entry.gpus, printed, baseline)
        shown = ", ".join(f"{k}: {v:.3f}" for k, v in ratios.items())
        checks.append(Check(
            id=f"{PHASE}.{workload.subject}_log_tflops_explained",
            title=f"{workload.subject}: the TFLOP/s the log prints matches a known FLOPs convention (within 2 %)",
            phase=PHASE, severity=Severity.ADVISORY, status=Status.PASS if log_convention else Status.WARN,
            measured=log_tflops, target=None, unit="TFLOP/s/GPU",
            message=(f"the log prints {log_tflops:.1f} TFLOP/s/GPU on average: "
                     + (f"the {log_convention} convention" if log_convention else "no convention explains it")
                     + f" (printed / computed per convention: {shown})"),
            evidence=(span,),
        ))
    f_base = _flops(spec, baseline.seq_len, baseline.flops_convention.flops())
    f_canon = _flops(spec, baseline.seq_len, CANONICAL) if spec is not None else f_base
    peak = catalog.peak_tflops(entry.precision)
    method = (f"hierarchical bootstrap of the {rules.repeats} repeat: {len(valid)} repeat(s) resampled with "
              f"replacement, then the steps within each, {rules.bootstrap_resamples} resamples, seed "
              f"{rules.bootstrap_seed}")
    return checks, WorkloadResult(
        workload=entry.workload, precision=entry.precision.value, gpus=entry.gpus, gbs=baseline.gbs,
        seq_len=baseline.seq_len, used=used, repeats=tuple(valid),
        tokens_per_s_per_gpu=tokens_per_s_per_gpu(baseline.seq_len, baseline.gbs, t.mean_s, entry.gpus),
        tflops_per_gpu=tflops_per_gpu(f_base, baseline.gbs, t.mean_s, entry.gpus),
        tflops_per_gpu_canonical=tflops_per_gpu(f_canon, baseline.gbs, t.mean_s, entry.gpus),
        mfu=mfu(f_base, baseline.gbs, t.mean_s, entry.gpus, peak),
        mfu_canonical=mfu(f_canon, baseline.gbs, t.mean_s, entry.gpus, peak),
        flops_convention=baseline.flops_convention.flops().describe(),
        log_tflops_per_gpu=log_tflops, log_flops_convention=log_convention,
        baseline=baseline, baseline_source_title=catalog.spec.sources[baseline.source].title,
        baseline_source_url=catalog.spec.sources[baseline.source].url,
        delta_pct=cmp.delta_pct, ci_low_pct=cmp.ci_low_pct, ci_high_pct=cmp.ci_high_pct, status=status,
        ci_low_s=interval[0], ci_high_s=interval[1], ci_method=method, peak_tflops=peak,
    )


def _flops(spec: ModelShape | None, seq_len: int, convention: FlopsConvention) -> float:
    if spec is None:
        if convention.per_sample is None:
            raise ValueError("a model outside DOMAIN.md's formula needs its baseline's flops_per_sample")
        return convention.per_sample
    return model_flops_per_sequence(spec, seq_len, convention)


def _tflops_target(baseline: Baseline) -> float | None:
    """The TFLOP/s per GPU a baselines file (certify --baselines) gave for the workload, else None."""
    return baseline.tflops_per_gpu_published if baseline.source == SOURCE_KEY else None


def _baseline_check(declared: DeclaredCheck, workload: _Workload, valid: list[RunResult], used: RunResult,
                    cmp: Comparison, catalog: LoadedCatalog) -> Check:
    """The workload's step time against its baseline, with the interval over repeats and steps; against a
    TFLOP/s baseline, the TFLOP/s its log prints (the step time where the log prints none)."""
    rules = catalog.spec.rules
    entry, baseline = workload.entry, workload.baseline
    t = used.throughput
    target = _tflops_target(baseline)
    kind = "" if baseline_kind(baseline) == "published" else f" (baseline {baseline_kind(baseline)}, not published)"
    if target is not None and t.tflops_mean is not None:
        per_repeat = ", ".join(f"r{r.repeat} " + (f"{100.0 * (r.throughput.tflops_mean / target - 1.0):+.1f} %"
                                                  if r.throughput.tflops_mean is not None else "prints none")
                               for r in valid)
        measured, aim, unit = t.tflops_mean, target, "TFLOP/s/GPU"
        message = (f"printed TFLOP/s {t.tflops_mean:.1f} per GPU (mean of {t.tflops_steps} steps of iterations "
                   f"{t.window[0]}-{t.window[1]}) vs baseline {target:g} TFLOP/s per GPU: {cmp.delta_pct:+.1f} % "
                   f"(95 % CI {cmp.ci_low_pct:+.1f} to {cmp.ci_high_pct:+.1f} over run {used.run_id}'s printed "
                   f"steps; repeats {per_repeat}); the log's printed TFLOP/s was compared, not the step time "
                   f"({t.mean_s:.3f} s; the baseline converted to {baseline.step_time_s:.3f} s); {rules.repeats} of "
                   f"{len(valid)} repeat(s), run {used.run_id}{kind}")
        against = f"baseline {target:g} TFLOP/s per GPU"
    else:
        per_repeat = ", ".join(f"r{r.repeat} {100.0 * (baseline.step_time_s / r.throughput.mean_s - 1.0):+.1f}"
                               for r in valid)
        measured, aim, unit = t.mean_s, baseline.step_time_s, "s"
        message = (f"step time {t.mean_s:.3f} s vs baseline {baseline.step_time_s:.3f} s: "
                   f"{cmp.delta_pct:+.1f} % (95 % CI {cmp.ci_low_pct:+.1f} to {cmp.ci_high_pct:+.1f} over "
                   f"repeats and steps; repeats {per_repeat} %); {rules.repeats} of {len(valid)} repeat(s), "
                   f"run {used.run_id}{kind}"
                   + ("" if target is None else
                      f"; the log prints no TFLOP/s over iterations {t.window[0]}-{t.window[1]}, so the TFLOP/s "
                      f"baseline {target:g} per GPU was compared through its converted step time"))
        against = f"baseline {baseline.step_time_s:.3f} s"
    return Check(
        id=declared.id, title=declared.title, phase=PHASE, severity=declared.severity,
        status=Status.PASS if cmp.passed else Status.FAIL, measured=measured, target=aim, unit=unit,
        message=message, delta_pct=cmp.delta_pct, ci_low=cmp.ci_low_pct, ci_high=cmp.ci_high_pct,
        evidence=(Span(used.file, t.lines[0], t.lines[-1], len(t.lines)),),
        summary=(f"{catalog.spec.models[entry.workload].name} {entry.precision.upper()} at {entry.gpus} GPUs: "
                 f"{cmp.delta_pct:+.1f} % vs the {baseline_kind(baseline)} "
                 f"{against} (PASS needs > {100.0 * (rules.pass_ratio - 1.0):+.1f} %)"
                 f", run {used.run_id}"),
    )


def logs_steps(
    logs: Mapping[str, TrainingLog | EvidenceError], run_id: str, window: tuple[int, int]
) -> list[TrainingStep]:
    """The printed steps of a run's measurement window."""
    log = logs[run_id]
    if isinstance(log, EvidenceError):
        return []
    return [s for s in log.steps if window[0] <= s.iteration <= window[1]]
