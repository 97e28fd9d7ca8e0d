"""The evidence's collection window, validity counted from it, and the outcome's reasons list."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from clustercert.evidence.provenance import Span
from clustercert.evidence.window import collection_window, stamps_in
from clustercert.runs.results import RunMeta, build_results
from clustercert.verdicts import Check, Severity, Status, outcome_reasons
from tests.unit.phase_bundles import gb200, write_bundle

LOG = ("[NeMo I 2025-10-20 08:00:00 nemo_logging:393] Experiments will be logged at /x\n"
       "Training epoch 0, iteration 0/1 | global_batch_size: 2048 | reduced_train_loss: 11.0 | "
       "train_step_timing in s: 7.7\n")
EVENTS = ('{"ts": "2025-11-03T10:15:00.000+00:00", "type": "job_started", "by": "scheduler"}\n'
          '{"ts": "2025-11-03T11:00:00+01:00", "type": "checkpoint_saved", "by": "trainer"}\n')
RUNS = [{"id": "l70-r1", "phase": "efficiency", "kind": "training", "format": "nemo", "workload": "llama3-70b",
         "precision": "fp8", "gpus": 512, "gbs": 2048, "seq_len": 8192, "files": ["r1.log"]},
        {"id": "events", "phase": "resilience", "kind": "events", "format": "events-jsonl", "files": ["events.jsonl"]}]
PASS = Check(id="efficiency.x_meets_baseline", title="x", phase="efficiency", severity=Severity.REQUIRED,
             status=Status.PASS, measured=1.0, target=1.0, unit="s", message="ok")
TODAY = RunMeta(run_id="r", started_at="2026-12-01T09:00:00Z", bundle_path="b", signer="s", dev_key=True)


def test_year_old_evidence_is_not_made_valid_again_by_certifying_it_today(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b", RUNS, {"r1.log": LOG, "events.jsonl": EVENTS})
    results = build_results(TODAY, bundle, gb200(), [PASS], [], {})
    assert results["outcome"] == "CERTIFIED"
    # the last evidence timestamp is 2025-11-03 10:15 UTC (11:00+01:00 is 10:00 UTC, earlier); + 12 months
    assert results["evidence_window"] == {
        "first": "2025-10-20T08:00:00Z", "last": "2025-11-03T10:15:00Z", "first_file": "r1.log",
        "last_file": "events.jsonl", "files_with_timestamps": 2}
    assert results["valid_until"] == "2026-11-03"  # already past on 2026-12-01, not 2027-12-01
    assert results["validity_basis"].startswith("12 months from the last evidence timestamp 2025-11-03")


def test_undated_evidence_counts_from_the_day_certify_ran_and_says_so(tmp_path: Path) -> None:
    log = LOG.replace("[NeMo I 2025-10-20 08:00:00 nemo_logging:393] ", "")
    bundle = write_bundle(tmp_path / "b", RUNS[:1], {"r1.log": log})
    assert collection_window(bundle) is None
    results = build_results(TODAY, bundle, gb200(), [PASS], [], {})
    assert results["evidence_window"] is None and results["valid_until"] == "2027-12-01"
    assert "no evidence file prints a timestamp" in results["validity_basis"]


def test_stamps_are_read_in_the_bundle_timezone() -> None:
    tokyo = dt.timezone(dt.timedelta(hours=9))
    got = stamps_in("[2025-03-07 22:39:36,176] x 2025-13-40 00:00:00 y 2025-03-08T01:00:00Z", tokyo)
    assert got == [dt.datetime(2025, 3, 7, 22, 39, 36, 176000, tzinfo=tokyo),
                   dt.datetime(2025, 3, 8, 1, 0, tzinfo=dt.UTC)]  # the impossible date is not a timestamp


def _check(cid: str, status: Status, severity: Severity, message: str, summary: str | None = None) -> Check:
    return Check(id=cid, title=cid, phase=cid.split(".")[0], severity=severity, status=status, measured=None,
                 target=None, unit="", message=message, summary=summary,
                 evidence=(Span("a.log", 3, 7, 5),))


def test_reasons_list_every_failing_or_erroring_check_required_first() -> None:
    checks = [
        _check("scaling.a", Status.ERROR, Severity.REQUIRED, "x.log: expected a number, got 'n/a'. Fix it"),
        _check("resilience.b", Status.WARN, Severity.ADVISORY, "slow"),
        _check("efficiency.c", Status.FAIL, Severity.REQUIRED, "long message", summary="Grok-1 -7.4 %"),
        _check("efficiency.d", Status.PASS, Severity.REQUIRED, "fine"),
        _check("scaling.e", Status.ERROR, Severity.ADVISORY, "degraded link(s): n1 - n2 18 GB/s; n3 - n4 19 GB/s"),
    ]
    reasons = outcome_reasons(checks)
    assert [r.check for r in reasons] == ["efficiency.c", "scaling.a", "scaling.e"]
    assert reasons[0].line == "FAIL efficiency: Grok-1 -7.4 %" and reasons[0].where == ("a.log:3-7",)
    assert reasons[1].summary == "x.log: expected a number, got 'n/a'"  # first clause of the message
    assert reasons[2].summary == "degraded link(s): n1 - n2 18 GB/s"
    assert outcome_reasons([checks[1], checks[3]]) == []


def test_runs_printing_different_software_are_flagged(tmp_path: Path) -> None:
    from clustercert.evidence.system import describe_system

    runs = [dict(RUNS[0], id=f"l70-r{i}", repeat=i, files=[f"r{i}.log"]) for i in (1, 2)]
    bundle = write_bundle(tmp_path / "b", runs, {
        "r1.log": ("x:1:1 [0] NCCL INFO cudaDriverVersion 12080\n"
                   "x:1:1 [0] NCCL INFO NCCL version 2.26.5+cuda12.8\n" + LOG),
        "r2.log": "NCCL version 2.27.3+cuda12.9\n" + LOG})
    facts = describe_system(bundle)
    assert facts.printed["nccl"] == {"2.26.5+cuda12.8": ["l70-r1"], "2.27.3+cuda12.9": ["l70-r2"]}
    assert facts.printed["cuda_driver_api"] == {"12.8": ["l70-r1"]}  # 12080 = CUDA 12.8
    assert facts.disagreements == ["nccl differs between runs: 2.26.5+cuda12.8 (l70-r1); 2.27.3+cuda12.9 (l70-r2)"]
    assert facts.declared["nodes"] == 6 and facts.declared["recipe_version"] == "25.05.05"


def test_stamps_are_found_where_a_scan_at_every_offset_finds_them() -> None:
    """stamps_in looks for each stamp from its hyphen (a literal search, 70x faster on a cluster's nccl-tests
    outputs); the oracle is the stamp pattern tried at every offset (its finditer): texts dense with digits,
    hyphens, colons, spaces and T, near-stamps, stamps run into each other and into digits, every optional part."""
    import random

    from clustercert.evidence.window import _TS, _stamp_matches

    rng = random.Random(13)
    pieces = ["2025-03-07 22:39:36", "2025-03-07T22:39:36", "2025-13-40 00:00:00", ",176", ".5", ".1234567",
              "Z", "+09:00", "-0530", "+01", "-", "--", "1", "12", "2025", ":", " ", "T", "x", "\n", "٣",
              "2025-03-07 22:39", "-03-07 22:39:36", "1-02-03 04:05:06"]
    for _ in range(30_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 14)))
        want = [(m.span(), m.groups()) for m in _TS.finditer(text)]
        assert [(m.span(), m.groups()) for m in _stamp_matches(text)] == want, text
    # by hand: a stamp right after another's offset is one; one right after a digit is none
    text = "2025-03-07 22:39:36,5+09:00x2025-03-08T00:00:00Z12025-03-09 00:00:00"
    assert [m.groups() for m in _stamp_matches(text)] == [("2025-03-07", "22:39:36", "5", "+09:00"),
                                                          ("2025-03-08", "00:00:00", None, "Z")]
