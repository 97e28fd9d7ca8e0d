"""Recipe conformance, the logged-loss sanity check and the repeats' interval, judged on hand-written bundles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustercert.catalog import LoadedCatalog
from clustercert.metrics.convergence import LossProblem, judge_loss
from clustercert.parsers.training import NanMark, TrainingStep
from clustercert.phases.efficiency import judge_efficiency
from clustercert.verdicts import Check, Severity, Status
from tests.unit.phase_bundles import by_id, gb200, parse_all, write_bundle

GBS, GPUS = 2048, 512  # the Llama 3 70B FP8 baseline (illustrative, step 7.758 s, recipe 26.04.01)
LAYOUT = {"tp": 1, "pp": 1, "cp": 1, "fsdp": 512}


def _log(step: float, losses: list[float] | None = None) -> str:
    losses = losses or [11.0 - 0.1 * i for i in range(50)]
    return "".join(
        f"Training epoch 0, iteration {i}/49 | global_batch_size: {GBS} | global_step: {i} | "
        f"reduced_train_loss: {losses[i]} | train_step_timing in s: {step + 0.01 * (i % 3)}\n"
        for i in range(50)
    )


def _judge(tmp_path: Path, runs: list[dict[str, Any]], files: dict[str, str | bytes],
           catalog: LoadedCatalog | None = None) -> dict[str, Check]:
    bundle = write_bundle(tmp_path / "b", runs, files)
    parsed = parse_all(bundle)
    logs = {k: v for k, v in parsed.items()}
    result = judge_efficiency(bundle.spec, catalog or gb200(), logs)  # type: ignore[arg-type]
    return by_id(result.checks)


def _run(i: int, **extra: Any) -> dict[str, Any]:
    run = {"id": f"l70-r{i}", "phase": "efficiency", "kind": "training", "format": "nemo", "workload": "llama3-70b",
           "precision": "fp8", "gpus": GPUS, "gbs": GBS, "seq_len": 8192, "parallelism": LAYOUT, "repeat": i,
           "files": [f"r{i}.log"]}
    run.update(extra)
    return run


def test_a_parallelism_mismatch_makes_the_comparison_invalid(tmp_path: Path) -> None:
    checks = _judge(tmp_path, [_run(1, parallelism={"tp": 2, "pp": 1, "cp": 1, "fsdp": 256})], {"r1.log": _log(7.6)})
    recipe = checks["efficiency.l70-r1_recipe_conforms"]
    assert recipe.status is Status.ERROR and recipe.severity is Severity.REQUIRED
    assert "TP (tp) 2 vs baseline 1" in recipe.message and "FSDP (fsdp) 256 vs baseline 512" in recipe.message
    assert recipe.message.startswith("r1.log: cannot be compared with the baseline")
    # no silent PASS: the workload's comparison is not made
    assert checks["efficiency.llama3-70b-fp8-512_meets_baseline"].status is Status.ERROR


def test_a_recipe_version_difference_counts_unless_the_catalog_allows_it(tmp_path: Path) -> None:
    # The bundle says 25.05.05; the illustrative baseline is from 26.04.01 and allows that, with its reason.
    allowed = _judge(tmp_path / "a", [_run(1)], {"r1.log": _log(7.6)})
    recipe = allowed["efficiency.l70-r1_recipe_conforms"]
    assert recipe.status is Status.PASS
    assert "allowed by the catalog: recipe version (recipe_version) 25.05.05 vs baseline 26.04.01" in recipe.message
    assert allowed["efficiency.llama3-70b-fp8-512_meets_baseline"].status is Status.PASS  # 7.758 / 7.61 > 0.95
    strict = gb200()
    spec = strict.spec.model_copy(update={"baselines": [
        b.model_copy(update={"allowed_differences": {}}) for b in strict.spec.baselines]})
    checks = _judge(tmp_path / "s", [_run(1)], {"r1.log": _log(7.6)}, LoadedCatalog(strict.path, strict.sha256, spec))
    recipe = checks["efficiency.l70-r1_recipe_conforms"]
    assert recipe.status is Status.ERROR
    assert "recipe version (recipe_version) 25.05.05 vs baseline 26.04.01" in recipe.message


def test_a_gbs_mismatch_names_the_field(tmp_path: Path) -> None:
    checks = _judge(tmp_path, [_run(1, gbs=1024)], {"r1.log": _log(7.6)})
    recipe = checks["efficiency.l70-r1_recipe_conforms"]
    assert recipe.status is Status.ERROR and "GBS (gbs) 1024 vs baseline 2048" in recipe.message


def test_undeclared_parallelism_is_said_not_compared(tmp_path: Path) -> None:
    run = _run(1)
    del run["parallelism"]
    recipe = _judge(tmp_path, [run], {"r1.log": _log(7.6)})["efficiency.l70-r1_recipe_conforms"]
    assert recipe.status is Status.WARN and "TP, PP, CP, VP, EP, ETP, FSDP were not compared" in recipe.message


def test_an_exploding_loss_is_a_warning_or_a_failure_when_required(tmp_path: Path) -> None:
    losses = [11.0 - 0.1 * i for i in range(50)]
    losses[40:] = [30.0] * 10  # 30 > 1.5 x 11.0: exploded at iteration 40, line 41
    checks = _judge(tmp_path / "a", [_run(1)], {"r1.log": _log(7.6, losses)})
    loss = checks["efficiency.l70-r1_loss_sane"]
    assert loss.status is Status.WARN and loss.severity is Severity.ADVISORY
    assert loss.message.startswith("r1.log:41: the loss explodes: 30 is above 1.5 x the first loss 11")
    required = _judge(tmp_path / "r", [_run(1)], {"r1.log": _log(7.6, losses)}, gb200(loss_check="required"))
    assert required["efficiency.l70-r1_loss_sane"].status is Status.FAIL
    assert required["efficiency.l70-r1_loss_sane"].severity is Severity.REQUIRED


def test_a_falling_loss_passes_and_a_flat_one_warns(tmp_path: Path) -> None:
    checks = _judge(tmp_path / "f", [_run(1)], {"r1.log": _log(7.6)})
    assert checks["efficiency.l70-r1_loss_sane"].status is Status.PASS
    flat = _judge(tmp_path / "c", [_run(1)], {"r1.log": _log(7.6, [10.84] * 50)})["efficiency.l70-r1_loss_sane"]
    assert flat.status is Status.WARN and "does not fall" in flat.message


def test_judge_loss_by_hand() -> None:
    def steps(values: list[float]) -> list[TrainingStep]:
        return [TrainingStep(iteration=i, step_time_s=1.0, line=i + 1, loss=v) for i, v in enumerate(values)]
    # 8 losses: first quarter = first 2 (mean 9.5), last quarter = last 2 (mean 6.5): falls
    ok = judge_loss(steps([10, 9, 9, 8, 8, 7, 7, 6]), [], 1.5)
    assert ok.problem is LossProblem.NONE and (ok.head_mean, ok.tail_mean) == (9.5, 6.5)
    assert judge_loss(steps([10, 9, 16]), [], 1.5).problem is LossProblem.EXPLODES  # 16 > 15
    assert judge_loss(steps([10, 9, 15]), [], 1.5).problem is LossProblem.DOES_NOT_FALL  # 15 is not above 15
    assert judge_loss(steps([10, 9]), [NanMark(line=3, field="loss")], 1.5).problem is LossProblem.NOT_FINITE
    assert judge_loss(steps([10]), [], 1.5).problem is LossProblem.NOT_LOGGED


def test_the_interval_covers_the_spread_between_repeats(tmp_path: Path) -> None:
    # Three repeats whose steps barely vary but whose means differ: 7.50, 7.60, 7.90 s. The median repeat is
    # 7.60 s; the hierarchical interval must reach the other repeats' values (a steps-only bootstrap of the
    # median repeat would be within 7.60-7.62 s).
    runs = [_run(i) for i in (1, 2, 3)]
    files: dict[str, str | bytes] = {f"r{i}.log": _log(t) for i, t in zip((1, 2, 3), (7.5, 7.6, 7.9), strict=True)}
    bundle = write_bundle(tmp_path / "b", runs, files)
    result = judge_efficiency(bundle.spec, gb200(), parse_all(bundle))  # type: ignore[arg-type]
    w = result.workloads[0].to_json()
    t = w["step_time_s"]
    assert isinstance(t, dict)
    # the median of three resampled repeat means lies between the lowest and highest repeat
    assert 7.50 <= t["ci_low"] < 7.55 and 7.65 < t["ci_high"] <= 7.92
    assert t["ci_low"] <= t["mean"] <= t["ci_high"]
    assert "hierarchical bootstrap" in t["ci_method"]
    repeats = w["repeats"]
    assert isinstance(repeats, list) and [r["used"] for r in repeats] == [False, True, False]
    # window 35-44: the offsets 0.01 x (i mod 3) sum to 0.11, so r1's mean is 7.511 s
    assert repeats[0]["delta_pct"] == pytest.approx(100 * (7.758 / 7.511 - 1), abs=1e-9)
