"""Run history: index of run folders, the previous run of a cluster, headline changes and regressions, alerts."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from clustercert.attest.manifest import write_manifest
from clustercert.attest.signing import KeyPair, init_keys
from clustercert.errors import EvidenceError
from clustercert.runs.alerts import alert_payload
from clustercert.runs.history import LeftOut, compare_headlines, index_runs, previous_summary
from clustercert.runs.results import previous_run_section
from clustercert.runs.sources import resolve_source


def _workload(name: str, delta: float | None, mfu: float | None) -> dict[str, Any]:
    return {"workload": name, "precision": "fp8", "delta_pct": delta, "mfu": mfu}


KEYS: dict[str, KeyPair] = {}


def _key(keys: Path) -> KeyPair:
    if str(keys) not in KEYS:
        KEYS[str(keys)] = init_keys(keys, passphrase=None, common_name="t", dev=True,
                                    now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    return KEYS[str(keys)]


def _run(reports: Path, run_id: str, started: str, cluster: str, outcome: str, workloads: list[dict[str, Any]],
         *, sign: bool = True) -> Path:
    """A run folder as `certify` leaves it: results.json and a catalog copy under a signed manifest."""
    folder = reports / run_id
    folder.mkdir(parents=True)
    results = {"run_id": run_id, "started_at": started, "cluster": {"name": cluster}, "outcome": outcome,
               "workloads": workloads}
    (folder / "results.json").write_text(json.dumps(results))
    (folder / "catalog.yaml").write_text("id: x\n")
    if sign:
        write_manifest(folder, reports, [], {"run": {"bundle_path": f"/b/{run_id}"}}, _key(reports.parent / "keys"),
                       run_files=["results.json", "catalog.yaml"])
    return folder


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    r = tmp_path / "reports"
    _run(r, "b", "2026-02-01T00:00:00Z", "east", "CERTIFIED", [_workload("llama3-70b", 2.0, 0.40)])
    _run(r, "a", "2026-01-01T00:00:00Z", "east", "NOT CERTIFIED", [_workload("llama3-70b", -6.0, 0.37)])
    _run(r, "c", "2026-01-15T00:00:00Z", "west", "CERTIFIED", [_workload("llama3-70b", 3.0, 0.41)])
    (r / "broken").mkdir()
    (r / "broken" / "results.json").write_text("{not json")
    (r / "empty").mkdir()
    return r


def test_index_is_oldest_first_and_skips_unreadable_folders(reports: Path) -> None:
    keys = reports.parent / "keys"
    records = index_runs(reports, key_dir=keys)
    assert [(r.run_id, r.cluster, r.outcome, r.bundle_path) for r in records] == [
        ("a", "east", "NOT CERTIFIED", "/b/a"), ("c", "west", "CERTIFIED", "/b/c"), ("b", "east", "CERTIFIED", "/b/b")]
    assert [r.run_id for r in index_runs(reports, "east", key_dir=keys)] == ["a", "b"]
    assert records[0].headline == {"llama3-70b/fp8": {"delta_pct": -6.0, "mfu": 0.37}}
    assert index_runs(reports / "missing", key_dir=keys) == []


def test_only_folders_that_verify_are_history(reports: Path) -> None:
    """Hostile corpus: a folder left by a killed run (no envelope), one altered after signing, one with an
    extra file, and one signed by another key are not history: `runs` and alerts never compare against them."""
    keys = reports.parent / "keys"
    best = [_workload("llama3-70b", 9.0, 0.5)]
    _run(reports, "killed", "2026-03-01T00:00:00Z", "east", "CERTIFIED", best, sign=False)
    altered = _run(reports, "altered", "2026-03-02T00:00:00Z", "east", "NOT CERTIFIED", best)
    (altered / "results.json").write_text((altered / "results.json").read_text().replace("NOT CERTIFIED", "CERTIFIED"))
    extra = _run(reports, "extra", "2026-03-03T00:00:00Z", "east", "CERTIFIED", best)
    (extra / "error.log").write_text("Traceback\n")
    other_keys = reports.parent / "other-keys"
    write_manifest(_run(reports, "forged", "2026-03-04T00:00:00Z", "east", "CERTIFIED", best, sign=False), reports, [],
                   {"run": {"bundle_path": "/b/x"}}, _key(other_keys), run_files=["results.json", "catalog.yaml"])
    left_out: list[LeftOut] = []
    assert [r.run_id for r in index_runs(reports, key_dir=keys, left_out=left_out)] == ["a", "c", "b"]
    # each folder left out is named with the first reason, in the folder's own words for its files
    reasons = {gone.run_dir.name: gone.problem for gone in left_out}
    assert reasons.pop("forged").startswith("manifest.dsse.json: signed by SHA256:")
    assert reasons == {
        "altered": "results.json: changed (sha256 differs from the manifest)",
        "broken": "manifest.dsse.json: missing (the signed manifest)",
        "empty": "manifest.dsse.json: missing (the signed manifest)",
        "extra": "error.log: not listed in the manifest",
        "killed": "manifest.dsse.json: missing (the signed manifest)",
    }
    assert previous_summary(index_runs(reports, key_dir=keys), "east", "2027-01-01T00:00:00Z")["run_id"] == "b"  # type: ignore[index]
    assert [r.run_id for r in index_runs(reports, key_dir=other_keys)] == ["forged"]


def test_a_signed_folder_whose_results_lack_a_field_is_left_out_with_the_field(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    folder = reports / "old"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"run_id": "old", "started_at": "2026-01-01T00:00:00Z"}))
    write_manifest(folder, reports, [], {"run": {"bundle_path": "/b/old"}}, _key(tmp_path / "keys"),
                   run_files=["results.json"])
    left_out: list[LeftOut] = []
    assert index_runs(reports, key_dir=tmp_path / "keys", left_out=left_out) == []
    assert left_out == [LeftOut(folder, "results.json: expected a run's results, got KeyError('cluster')")]


def test_previous_run_is_the_latest_earlier_run_of_the_same_cluster(reports: Path) -> None:
    records = index_runs(reports, key_dir=reports.parent / "keys")
    assert previous_summary(records, "east", "2026-03-01T00:00:00Z") == {
        "run_id": "b", "started_at": "2026-02-01T00:00:00Z", "outcome": "CERTIFIED",
        "headline": {"llama3-70b/fp8": {"delta_pct": 2.0, "mfu": 0.40}}}
    assert previous_summary(records, "east", "2026-02-01T00:00:00Z")["run_id"] == "a"  # type: ignore[index]
    assert previous_summary(records, "east", "2026-01-01T00:00:00Z") is None
    assert previous_summary(records, "north", "2027-01-01T00:00:00Z") is None


def test_regression_thresholds() -> None:
    before = {"w/fp8": {"delta_pct": 3.0, "mfu": 0.500}, "gone/fp8": {"delta_pct": 1.0, "mfu": 0.3}}
    # delta falls 1.5 points (> 1.0: regressed); MFU falls 0.8 % (< 1 %: not regressed).
    after = {"w/fp8": {"delta_pct": 1.5, "mfu": 0.496}, "new/fp8": {"delta_pct": 1.0, "mfu": 0.3}}
    changes = {c.figure: c for c in compare_headlines(before, after)}
    assert set(changes) == {"delta_pct", "mfu"} and all(c.workload == "w/fp8" for c in changes.values())
    assert changes["delta_pct"].regressed and changes["delta_pct"].change == pytest.approx(-1.5)
    assert not changes["mfu"].regressed
    assert compare_headlines({"w/fp8": {"delta_pct": 3.0, "mfu": 0.5}},
                             {"w/fp8": {"delta_pct": 2.5, "mfu": 0.49}})[1].regressed  # MFU -2 %
    missing = compare_headlines({"w/fp8": {"delta_pct": None, "mfu": 0.5}}, {"w/fp8": {"delta_pct": 1.0, "mfu": None}})
    assert missing == []


def test_results_section_and_alerts() -> None:
    previous = {"run_id": "p", "started_at": "2026-01-01T00:00:00Z", "outcome": "CERTIFIED",
                "headline": {"w/fp8": {"delta_pct": 5.0, "mfu": 0.5}}}
    section = previous_run_section(previous, [_workload("w", 2.0, 0.5)])
    assert section is not None and section["regressed"] is True
    assert section["changes"][0] == {"workload": "w/fp8", "figure": "delta_pct", "previous": 5.0, "current": 2.0,
                                     "change": -3.0, "regressed": True}
    assert previous_run_section(None, []) is None
    results = {"outcome": "CERTIFIED", "cluster": {"name": "east"}, "run_id": "r", "previous_run": section}
    alert = alert_payload(results, "/reports/r")
    assert alert is not None and alert["reasons"] == ["1 headline figure(s) regressed since run p"]
    assert alert_payload({**results, "previous_run": None}, "/x") is None
    bad = alert_payload({**results, "outcome": "INCOMPLETE", "previous_run": None}, "/x")
    assert bad is not None and bad["reasons"] == ["outcome INCOMPLETE"] and bad["regressions"] == []


def test_newest_sealed_bundle_of_a_folder(tmp_path: Path) -> None:
    for name, age in (("a", 10), ("b", 100), ("unsealed", 0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "bundle.yaml").write_text("schema_version: 1\n")
        if name != "unsealed":
            seal = tmp_path / name / "MANIFEST.sha256"
            seal.write_text("")
            os.utime(seal, (time.time() - age, time.time() - age))
    assert resolve_source(tmp_path) == tmp_path / "a"
    assert resolve_source(tmp_path / "b") == tmp_path / "b"
    (tmp_path / "none").mkdir()
    with pytest.raises(EvidenceError, match="found none"):
        resolve_source(tmp_path / "none")
    with pytest.raises(EvidenceError, match="missing path"):
        resolve_source(tmp_path / "gone")
