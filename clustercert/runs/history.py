"""Past runs from the run folders under the reports dir: headline figures, the previous run, regressions."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DELTA_TOLERANCE_PTS", "MFU_TOLERANCE_REL", "Change", "LeftOut", "RunRecord", "compare_headlines",
           "headline", "index_runs", "previous_summary"]

# A figure regresses when it falls by more than this: delta_pct in percentage points, MFU relative.
DELTA_TOLERANCE_PTS = 1.0
MFU_TOLERANCE_REL = 0.01


def headline(results: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per workload (`<workload>/<precision>`): delta_pct vs baseline and MFU."""
    out: dict[str, dict[str, float | None]] = {}
    for w in results.get("workloads", []):
        out[f"{w['workload']}/{w['precision']}"] = {"delta_pct": w.get("delta_pct"), "mfu": w.get("mfu")}
    return out


@dataclass(frozen=True)
class RunRecord:
    """One run folder, as `clustercert runs` lists it."""

    run_dir: Path
    run_id: str
    started_at: str
    cluster: str
    bundle_path: str
    outcome: str
    headline: dict[str, dict[str, float | None]]

    def summary(self) -> dict[str, Any]:
        """What the next run of the same cluster records as its `previous_run` (JSON)."""
        return {"run_id": self.run_id, "started_at": self.started_at, "outcome": self.outcome,
                "headline": self.headline}


@dataclass(frozen=True)
class LeftOut:
    """A folder under the reports dir that is not history, and the first reason why (`verify`'s words)."""

    run_dir: Path
    problem: str


def _bundle_path(run_dir: Path) -> str:
    try:
        predicate = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))["predicate"]
        return str(predicate["run"]["bundle_path"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def index_runs(reports_dir: Path, cluster: str | None = None, *, key_dir: Path,
               left_out: list[LeftOut] | None = None) -> list[RunRecord]:
    """Every run folder that verifies (its envelope signed by a key in `key_dir`, every run file as signed, nothing
    else in it) and holds a readable results.json, oldest first. A folder left by a killed or failed run, or one
    altered since, is not history: neither `runs` nor an alert compares against it; each such folder is added to
    `left_out`, with the reason, so that `runs` can say what it did not list."""
    from clustercert.attest.manifest import verify_run

    records: list[RunRecord] = []
    if not reports_dir.is_dir():
        return records
    for run_dir in sorted(p for p in reports_dir.iterdir()
                          if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")):
        check = verify_run(run_dir, key_dir=key_dir, trust=None, bundle=None, evidence=False, pdf=False)
        if not check.ok:
            if left_out is not None:
                left_out.append(LeftOut(run_dir, _within(run_dir, check.problems[0] if check.problems
                                                          else "does not verify")))
            continue
        try:
            results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
            record = RunRecord(run_dir=run_dir, run_id=str(results["run_id"]), started_at=str(results["started_at"]),
                               cluster=str(results["cluster"]["name"]), bundle_path=_bundle_path(run_dir),
                               outcome=str(results["outcome"]), headline=headline(results))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if left_out is not None:
                left_out.append(LeftOut(run_dir, f"results.json: expected a run's results, got {exc!r}"))
            continue
        if cluster is None or record.cluster == cluster:
            records.append(record)
    return sorted(records, key=lambda r: (r.started_at, r.run_id))


def _within(run_dir: Path, problem: str) -> str:
    """`problem` with the folder's own path taken off the names of its files."""
    return problem.replace(f"{run_dir}/", "")


def previous_summary(records: list[RunRecord], cluster: str, before: str) -> dict[str, Any] | None:
    """The summary of the latest run of `cluster` that started strictly before `before` (ISO-8601 UTC)."""
    earlier = [r for r in records if r.cluster == cluster and r.started_at < before]
    return earlier[-1].summary() if earlier else None


@dataclass(frozen=True)
class Change:
    """One headline figure of one workload, previous run vs this one."""

    workload: str
    figure: str  # delta_pct | mfu
    previous: float
    current: float
    regressed: bool

    @property
    def change(self) -> float:
        return self.current - self.previous

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "figure": self.figure, "previous": self.previous,
                "current": self.current, "change": self.change, "regressed": self.regressed}


def compare_headlines(previous: dict[str, dict[str, float | None]],
                      current: dict[str, dict[str, float | None]]) -> list[Change]:
    """Changes of every figure both runs have; a fall beyond the tolerance is a regression."""
    changes: list[Change] = []
    for workload in sorted(set(previous) & set(current)):
        for figure in ("delta_pct", "mfu"):
            old, new = previous[workload].get(figure), current[workload].get(figure)
            if old is None or new is None:
                continue
            if figure == "delta_pct":
                regressed = new < old - DELTA_TOLERANCE_PTS
            else:
                regressed = new < old * (1 - MFU_TOLERANCE_REL)
            changes.append(Change(workload, figure, float(old), float(new), regressed))
    return changes
