"""The Exemplar program's rules on what llmb-run recorded per job: each way a run was told to differ from its recipe
is a named deviation (such a run never counts toward the verdict), and one recipe release throughout."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from clustercert.catalog import LoadedCatalog
from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import Bundle, Phase, RunSpec
from clustercert.evidence.provenance import Span
from clustercert.parsers.llmb_config import LlmbConfig
from clustercert.verdicts import Check, DeclaredCheck, Severity, Status

__all__ = ["DEVIATIONS", "Deviation", "deviations", "judge_job_configs"]

PHASE = Phase.EFFICIENCY.value

# (check subject, the llmb-config key, what the check asks): the ways llmb-run lets a run differ from its recipe
DEVIATIONS: tuple[tuple[str, str, str], ...] = (
    ("model_overrides", "job_config.model_overrides", "no model_overrides"),
    ("env_overrides", "job_config.env_overrides", "no env_overrides"),
    ("mbridge_args", "job_config.mbridge_args", "no raw Megatron-Bridge arguments (mbridge_args)"),
    ("proxy", "job_config.proxy", "not a proxy run (proxy: false, a scale the recipe runs for real)"),
    ("profile", "job_config.profile_enabled", "profiling off (profile_enabled: false)"),
    ("container", "container_info.images", "the recipe's container"),
)


@dataclass(frozen=True)
class Deviation:
    """One way a run differs from its recipe, as its llmb-config records it."""

    subject: str
    key: str
    value: str
    line: int | None


def deviations(config: LlmbConfig, catalog: LoadedCatalog, workload: str) -> list[Deviation]:
    """What `config` (a run of `workload`) says it changed from the recipe of `catalog`'s edition."""
    recipe = catalog.spec.recipes.get(workload)
    found: dict[str, str] = {}
    if config.model_overrides:
        found["model_overrides"] = str(config.model_overrides)
    if config.env_overrides:
        found["env_overrides"] = str(config.env_overrides)
    if config.mbridge_args:
        found["mbridge_args"] = " ".join(config.mbridge_args)
    if config.proxy:
        found["proxy"] = "proxy: true"
    elif recipe is not None and recipe.is_proxy(config.dtype, config.scale):
        found["proxy"] = f"scale {config.scale}, a proxy scale of the recipe"
    if config.profile_enabled:
        found["profile"] = "profile_enabled: true"
    if recipe is not None and config.images and config.images[0] != recipe.container:
        found["container"] = f"{config.images[0]} (the recipe's: {recipe.container})"
    return [Deviation(subject, key, found[subject], config.line(key)) for subject, key, _ in DEVIATIONS
            if subject in found]


def _located(config: LlmbConfig, d: Deviation) -> str:
    return f"{config.file}" + (f" line {d.line}" if d.line else "") + f": {d.key} {d.value}"


def judge_job_configs(bundle: Bundle, catalog: LoadedCatalog,
                      configs: Mapping[str, LlmbConfig | EvidenceError]) -> tuple[list[Check], dict[str, str]]:
    """Each training run's recorded deviations as named checks (advisory: the run is set aside, and the suite
    entry it would have served is judged without it), and the one-release rule (required); with the runs set
    aside, each with why."""
    checks: list[Check] = []
    aside: dict[str, str] = {}
    releases: dict[str, tuple[str, LlmbConfig]] = {}
    for run in bundle.runs:
        config = configs.get(run.id)
        if config is None:
            continue
        if isinstance(config, EvidenceError):
            aside[run.id] = f"its llmb-config cannot be read ({config})"
            checks.append(Check(
                id=f"{PHASE}.{run.id}_config_readable", title=f"Run {run.id}: llmb-run's record of the job is usable",
                phase=PHASE, severity=Severity.REQUIRED, status=Status.ERROR, measured=None, target=None, unit="",
                message=str(config), evidence=(Span(config.file, config.line or 0, config.line or 0, 1),)))
            continue
        releases[run.id] = (config.release, config)
        checks += _deviation_checks(run, config, catalog, aside)
    if releases:
        checks.append(_one_release(releases, bundle.recipe_version))
    return checks, aside


def _deviation_checks(run: RunSpec, config: LlmbConfig, catalog: LoadedCatalog, aside: dict[str, str]) -> list[Check]:
    found = {d.subject: d for d in deviations(config, catalog, run.workload or "")}
    if found:
        aside[run.id] = "; ".join(_located(config, d) for d in found.values())
    out: list[Check] = []
    for subject, key, asks in DEVIATIONS:
        declared = DeclaredCheck(f"{PHASE}.{run.id}_config_{subject}", f"Run {run.id}: {asks}", PHASE,
                                 Severity.ADVISORY)
        d = found.get(subject)
        if d is None:
            out.append(declared.judged(Status.PASS, f"{config.file}: {key} as the recipe has it"))
            continue
        out.append(declared.judged(
            Status.WARN, f"{_located(config, d)}: a deviation from the recipe; the run does not count toward the "
            "verdict", evidence=(Span(config.file, d.line or 0, d.line or 0, 1),),
            summary=f"run {run.id} set aside: {subject} {d.value}"))
    return out


def _one_release(releases: Mapping[str, tuple[str, LlmbConfig]], declared: str) -> Check:
    """The program requires one recipe release for the whole submission."""
    by_release: dict[str, list[str]] = {}
    for run_id, (release, _) in releases.items():
        by_release.setdefault(release, []).append(run_id)
    check = DeclaredCheck(f"{PHASE}.recipe_release_one", "Every run uses one recipe release (the program's rule)",
                          PHASE, Severity.REQUIRED)
    if len(by_release) == 1:
        (release, runs), = by_release.items()
        note = "" if release == declared else f" (bundle.yaml declares {declared}: the jobs' own records win)"
        return check.judged(Status.PASS, f"all {len(runs)} runs record recipe release {release} "
                            f"(workload_info.gsw_version){note}")
    listed = "; ".join(f"{release}: {', '.join(sorted(runs))}" for release, runs in sorted(by_release.items()))
    first = next(iter(releases.values()))[1]
    return check.judged(Status.FAIL, f"runs record {len(by_release)} recipe releases (workload_info.gsw_version): "
                        f"{listed}. Re-run the workloads of the other releases with one release",
                        evidence=tuple(Span(c.file, c.line("workload_info.gsw_version") or 0,
                                            c.line("workload_info.gsw_version") or 0, 1)
                                       for _, c in releases.values())[:20] or (Span(first.file, 0, 0, 1),))
