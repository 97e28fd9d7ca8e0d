"""One parse per evidence file per certification: the phases and the validation suites read the same parsed
object; a file that changed on disk is parsed again; nothing is kept after the run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from clustercert.evidence import parse as evidence_parse
from clustercert.evidence.bundle import RunKind
from clustercert.evidence.parse import forget_parsed, parse_bundle
from clustercert.phases.evidence import ResilienceRunLog, parse_run
from clustercert.runs.folder import load_inputs
from tests.conftest import ROOT

LIMIT = 2 * 1024**3


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    root = tmp_path / "bundle"
    shutil.copytree(ROOT / "evidence" / "gb200-seed", root)
    forget_parsed()
    return root


def test_the_validation_reads_what_the_phases_parsed(bundle: Path) -> None:
    inputs = load_inputs(bundle, ROOT / "references")
    runs = inputs.bundle.spec.runs
    phases = {r.id: parse_run(inputs.bundle, r, LIMIT) for r in runs}
    validation = parse_bundle(inputs.bundle, LIMIT)
    for r in runs:
        first = phases[r.id]
        own = first.training if isinstance(first, ResilienceRunLog) else first
        assert validation[r.id][0].result is own, r.id
    assert {r.kind for r in runs} >= {RunKind.TRAINING, RunKind.COLLECTIVE, RunKind.RESILIENCE}


def test_a_changed_file_is_parsed_again_and_the_end_of_a_run_forgets(bundle: Path) -> None:
    inputs = load_inputs(bundle, ROOT / "references")
    run = next(r for r in inputs.bundle.spec.runs if r.kind is RunKind.TRAINING)
    first = parse_run(inputs.bundle, run, LIMIT)
    assert parse_run(inputs.bundle, run, LIMIT) is first
    log = bundle / run.files[0]
    log.write_text(log.read_text() + "\n")
    again = parse_run(inputs.bundle, run, LIMIT)
    assert again is not first
    forget_parsed()
    assert not evidence_parse._MEMO
    assert parse_run(inputs.bundle, run, LIMIT) is not again


def test_a_certification_keeps_every_parse_past_the_memo_bound(bundle: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's bundle has thousands of files: within `holding_parsed` (the certify flow) none is dropped, so
    the validation reads the telemetry the resilience phase parsed even after every other file; outside it the
    memo keeps its bound; the holder's end forgets everything."""
    monkeypatch.setattr(evidence_parse, "_MEMO_SIZE", 3)
    inputs = load_inputs(bundle, ROOT / "references")
    runs = inputs.bundle.spec.runs
    assert len(runs) > 3
    with evidence_parse.holding_parsed():
        telemetry = next(r for r in runs if r.kind is RunKind.TELEMETRY)
        first = parse_run(inputs.bundle, telemetry, LIMIT)
        for r in runs:
            parse_run(inputs.bundle, r, LIMIT)
        assert len(evidence_parse._MEMO) > 3
        assert parse_bundle(inputs.bundle, LIMIT)[telemetry.id][0].result is first
    assert not evidence_parse._MEMO
    for r in runs:
        parse_run(inputs.bundle, r, LIMIT)
    assert len(evidence_parse._MEMO) == 3
    forget_parsed()


def test_releasing_the_parses_keeps_the_record_of_what_was_read(bundle: Path) -> None:
    """After the validation the certify flow drops the parses (a cluster's telemetry columns are not kept through
    the rendering) but not the records of the bytes read, which the run folder's last check compares."""
    from clustercert.evidence.guards import digests_read

    inputs = load_inputs(bundle, ROOT / "references")
    run = next(r for r in inputs.bundle.spec.runs if r.kind is RunKind.TELEMETRY)
    with evidence_parse.holding_parsed():
        first = parse_run(inputs.bundle, run, LIMIT)
        path = bundle / run.files[0]
        read = digests_read(path)
        assert len(read) == 1 and evidence_parse._MEMO
        evidence_parse.release_parsed()
        assert not evidence_parse._MEMO and digests_read(path) == read
        assert parse_run(inputs.bundle, run, LIMIT) is not first  # parsed again if asked again
    assert not evidence_parse._MEMO and digests_read(path) == set()


def test_one_file_reached_by_two_paths_is_parsed_once_and_recorded_under_its_real_path(bundle: Path) -> None:
    """The memo knows a file by its device and inode, the record of what was read by its real path as the kernel
    names the open file: a bundle reached through a linked folder is the same files as the folder itself."""
    from clustercert.evidence.guards import digests_read, read_mark
    from clustercert.evidence.hashing import sha256_file
    from clustercert.parsers.nccl_tests import parse_nccl_tests

    alias = bundle.parent / "alias"
    alias.symlink_to(bundle, target_is_directory=True)
    rel = next(r for r in load_inputs(bundle, ROOT / "references").bundle.spec.runs
               if r.kind is RunKind.COLLECTIVE).files[0]
    mark = read_mark()
    first = evidence_parse.read_evidence(parse_nccl_tests, alias / rel, "shown", limit=LIMIT)
    assert evidence_parse.read_evidence(parse_nccl_tests, bundle / rel, "shown", limit=LIMIT) is first
    digest = sha256_file(bundle / rel)
    assert digests_read(bundle / rel, since=mark) == {digest} == digests_read(alias / rel, since=mark)
    assert str((alias / rel).resolve()) in guards_registry()


def guards_registry() -> set[str]:
    """The paths the registry of reads holds."""
    from clustercert.evidence import guards

    with guards._READS_LOCK:
        return set(guards._READS)
