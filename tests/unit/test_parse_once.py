"""One parse per evidence file per certification: the phases and the validation suites read the same parsed
object from the certification's evidence set; a file that changed on disk is parsed again; nothing is kept after
the run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from clustercert.evidence.bundle import RunKind
from clustercert.evidence.guards import forget_reads
from clustercert.evidence.parse import ParsedOnce, parse_bundle
from clustercert.phases.evidence import ResilienceRunLog, parse_run
from clustercert.runs.evidence import EvidenceSet
from clustercert.runs.folder import load_inputs
from tests.conftest import ROOT

LIMIT = 2 * 1024**3


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    root = tmp_path / "bundle"
    shutil.copytree(ROOT / "evidence" / "gb200-seed", root)
    forget_reads()
    return root


def test_the_validation_reads_what_the_phases_parsed(bundle: Path) -> None:
    evidence = EvidenceSet(load_inputs(bundle, ROOT / "references"), LIMIT)
    runs = evidence.bundle.spec.runs
    phases = {r.id: evidence.for_phase(r) for r in runs}
    validation = evidence.for_validation()
    for r in runs:
        first = phases[r.id]
        own = first.training if isinstance(first, ResilienceRunLog) else first
        assert validation[r.id][0].result is own, r.id
    assert {r.kind for r in runs} >= {RunKind.TRAINING, RunKind.COLLECTIVE, RunKind.RESILIENCE}


def test_a_changed_file_is_parsed_again_and_the_end_of_a_run_forgets(bundle: Path) -> None:
    with EvidenceSet(load_inputs(bundle, ROOT / "references"), LIMIT) as evidence:
        run = next(r for r in evidence.bundle.spec.runs if r.kind is RunKind.TRAINING)
        first = evidence.for_phase(run)
        assert evidence.for_phase(run) is first
        log = bundle / run.files[0]
        log.write_text(log.read_text() + "\n")
        again = evidence.for_phase(run)
        assert again is not first
    assert evidence.parsed_files() == 0
    assert evidence.for_phase(run) is not again


def test_a_certification_keeps_every_parse_and_no_process_wide_memo_keeps_any(bundle: Path) -> None:
    """A cluster's bundle has thousands of files: the evidence set (the certify flow's) drops none of its parses,
    so the validation reads the telemetry the resilience phase parsed even after every other file; outside a set
    nothing is remembered (each parse is a new one); the set's end forgets everything."""
    inputs = load_inputs(bundle, ROOT / "references")
    runs = inputs.bundle.spec.runs
    assert len(runs) > 3
    with EvidenceSet(inputs, LIMIT) as evidence:
        telemetry = next(r for r in runs if r.kind is RunKind.TELEMETRY)
        first = evidence.for_phase(telemetry)
        for r in runs:
            evidence.for_phase(r)
        assert evidence.parsed_files() > 3
        assert evidence.for_validation()[telemetry.id][0].result is first
    assert evidence.parsed_files() == 0
    alone = parse_run(inputs.bundle, telemetry, LIMIT)
    assert parse_run(inputs.bundle, telemetry, LIMIT) is not alone
    assert parse_bundle(inputs.bundle, LIMIT)[telemetry.id][0].result is not alone


def test_releasing_the_parses_keeps_the_record_of_what_was_read(bundle: Path) -> None:
    """After the validation the certify flow drops the parses (a cluster's telemetry columns are not kept through
    the rendering) but not the records of the bytes read, which the run folder's last check compares."""
    from clustercert.evidence.guards import digests_read

    inputs = load_inputs(bundle, ROOT / "references")
    run = next(r for r in inputs.bundle.spec.runs if r.kind is RunKind.TELEMETRY)
    with EvidenceSet(inputs, LIMIT) as evidence:
        first = evidence.for_phase(run)
        path = bundle / run.files[0]
        read = digests_read(path)
        assert len(read) == 1 and evidence.parsed_files()
        evidence.release()
        assert evidence.parsed_files() == 0 and digests_read(path) == read
        assert evidence.for_phase(run) is not first  # parsed again if asked again
    assert evidence.parsed_files() == 0 and digests_read(path) == set()


def test_one_file_reached_by_two_paths_is_parsed_once_and_recorded_under_its_real_path(bundle: Path) -> None:
    """A parse is remembered by the file's device and inode, the record of what was read by its real path as the
    kernel names the open file: a bundle reached through a linked folder is the same files as the folder itself."""
    from clustercert.evidence.guards import digests_read, read_mark
    from clustercert.evidence.hashing import sha256_file
    from clustercert.parsers.nccl_tests import parse_nccl_tests

    alias = bundle.parent / "alias"
    alias.symlink_to(bundle, target_is_directory=True)
    rel = next(r for r in load_inputs(bundle, ROOT / "references").bundle.spec.runs
               if r.kind is RunKind.COLLECTIVE).files[0]
    mark = read_mark()
    parsed = ParsedOnce()
    first = parsed(parse_nccl_tests, alias / rel, "shown", limit=LIMIT)
    assert parsed(parse_nccl_tests, bundle / rel, "shown", limit=LIMIT) is first
    digest = sha256_file(bundle / rel)
    assert digests_read(bundle / rel, since=mark) == {digest} == digests_read(alias / rel, since=mark)
    assert str((alias / rel).resolve()) in guards_registry()


def guards_registry() -> set[str]:
    """The paths the registry of reads holds."""
    from clustercert.evidence import guards

    with guards._READS_LOCK:
        return set(guards._READS)
