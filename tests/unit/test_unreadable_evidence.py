"""A file the bundle lists but no parser can read leaves what it would show unjudged: ERRORs naming it (the run is
INCOMPLETE), never a FAIL, which says the cluster did not show something (NOT CERTIFIED), nor a crash. The shipped
sample is CERTIFIED; each kind of its files is emptied in turn (one file per phase, kind, scope and GPU count) and
judged by every phase. Emptying them found five such FAILs and, without the event log, a crash."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from clustercert.catalog import load_catalog
from clustercert.evidence.bundle import load_bundle
from clustercert.phases.efficiency import judge_efficiency
from clustercert.phases.resilience import judge_resilience
from clustercert.phases.scaling import judge_scaling
from clustercert.settings import PROJECT_ROOT
from clustercert.verdicts import Status
from tests.unit.phase_bundles import parse_all

SAMPLE = PROJECT_ROOT / "evidence" / "gb200-seed"


def _one_of_each() -> list[str]:
    picked: dict[tuple[object, ...], str] = {}
    for run in yaml.safe_load((SAMPLE / "bundle.yaml").read_text())["runs"]:
        picked.setdefault((run["phase"], run["kind"], run.get("scope"), run.get("gpus")), run["files"][0])
    return sorted(picked.values())


FILES = _one_of_each()


def test_every_kind_of_file_is_tried() -> None:
    kinds = {(r["phase"], r["kind"]) for r in yaml.safe_load((SAMPLE / "bundle.yaml").read_text())["runs"]}
    assert len(FILES) >= len(kinds) >= 8  # training of two phases, collectives, five kinds of long-run evidence


@pytest.mark.parametrize("emptied", FILES)
def test_an_unreadable_file_is_an_error_never_a_failure(tmp_path: Path, emptied: str) -> None:
    root = tmp_path / "bundle"
    shutil.copytree(SAMPLE, root)
    (root / "MANIFEST.sha256").unlink()
    (root / emptied).write_bytes(b"")
    bundle = load_bundle(root)
    catalog = load_catalog(bundle.spec.catalog, PROJECT_ROOT / "references", relative_to=root)
    parsed = parse_all(bundle)
    checks = [*judge_efficiency(bundle.spec, catalog, parsed).checks, *judge_scaling(bundle, catalog, parsed).checks,
              *judge_resilience(bundle, catalog, parsed).checks]
    assert [c.id for c in checks if c.status is Status.FAIL] == []
    # each error names the file and says it is empty (a log's text, the per-rank timings' table)
    unread = re.compile(rf"{re.escape(str(root / emptied))}: expected (log text|a Parquet or CSV table), got an "
                        "empty file")
    errors = [c for c in checks if c.status is Status.ERROR]
    assert errors and all(unread.search(c.message) for c in errors), [(c.id, c.message[:200]) for c in errors]


def _groups() -> list[tuple[str, str, str]]:
    runs = yaml.safe_load((SAMPLE / "bundle.yaml").read_text())["runs"]
    return sorted({(r["phase"], r["kind"], r.get("scope") or "") for r in runs})


@pytest.mark.parametrize("group", _groups(), ids=lambda g: "-".join(part for part in g if part))
def test_evidence_left_out_is_judged_as_not_shown(tmp_path: Path, group: tuple[str, str, str]) -> None:
    """The same bundle with every run of one kind left out (a cluster that keeps no event log, no per-rank timings,
    no full-scale sweep): judged without a crash (the event log's absence crashed it, 613d466), and what is missing
    is a failure to show or a skip, never an ERROR: every file that is there reads."""
    root = tmp_path / "bundle"
    shutil.copytree(SAMPLE, root)
    (root / "MANIFEST.sha256").unlink()
    spec = yaml.safe_load((root / "bundle.yaml").read_text())
    spec["runs"] = [r for r in spec["runs"] if (r["phase"], r["kind"], r.get("scope") or "") != group]
    (root / "bundle.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    bundle = load_bundle(root)
    catalog = load_catalog(bundle.spec.catalog, PROJECT_ROOT / "references", relative_to=root)
    parsed = parse_all(bundle)
    checks = [*judge_efficiency(bundle.spec, catalog, parsed).checks, *judge_scaling(bundle, catalog, parsed).checks,
              *judge_resilience(bundle, catalog, parsed).checks]
    assert [(c.id, c.message[:160]) for c in checks if c.status is Status.ERROR] == []
