"""Real evidence as collected goes into a bundle: MLPerf result folders, header-less sacct dumps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clustercert.evidence.bundle import load_bundle, seal_bundle
from clustercert.evidence.parse import parse_run as parse_files
from clustercert.parsers.mlperf import MlperfResult
from clustercert.phases.evidence import parse_run
from tests.conftest import ROOT, run_cli

MLPERF = "mlperf-training/dell-xe9680-h100-llama2_70b_lora"

BUNDLE = """\
schema_version: 1
cluster: {name: dell, provider: Dell}
system: {gpu: h100-sxm, gpus_per_node: 8, nodes: [n1]}
catalog: exemplar-h100
recipe_version: "4.0"
runs:
  - {id: lora, phase: efficiency, kind: mlperf, format: mlperf, ruleset: "4.0.0", files: FILES}
"""


def _hand_olympic(folder: Path) -> float:
    """Independent oracle: run_start/run_stop straight from each result file's :::MLLOG lines, by hand."""
    minutes = []
    for index in range(10):
        times = {}
        for line in (folder / f"result_{index}.txt").read_text().splitlines():
            if ":::MLLOG" in line:
                record = json.loads(line.split(":::MLLOG", 1)[1])
                if record["key"] in ("run_start", "run_stop"):
                    times[record["key"]] = record["time_ms"]
        minutes.append((times["run_stop"] - times["run_start"]) / 60000)
    kept = sorted(minutes)[1:-1]  # olympic: drop the fastest and the slowest of 10
    return sum(kept) / len(kept) * json.loads((folder / "scaling.json").read_text())["scaling_factor"]


def _mlperf_bundle(tmp_path: Path, real_samples: Path, files: list[str]) -> Path:
    shutil.copytree(real_samples / MLPERF, tmp_path / "mlperf")
    (tmp_path / "bundle.yaml").write_text(BUNDLE.replace("FILES", json.dumps(files)))
    return tmp_path


@pytest.mark.parametrize("listing", ["folder", "files"])
def test_an_mlperf_result_is_scored_from_all_its_runs(tmp_path: Path, real_samples: Path, listing: str) -> None:
    files = (["mlperf"] if listing == "folder"
             else [f"mlperf/result_{i}.txt" for i in range(10)] + ["mlperf/scaling.json", "mlperf/system.json"])
    bundle = load_bundle(_mlperf_bundle(tmp_path, real_samples, files))
    result = parse_run(bundle, bundle.spec.runs[0], 1 << 30)
    assert isinstance(result, MlperfResult), result
    assert len(result.runs) == 10 and result.error is None
    assert result.score_minutes == pytest.approx(_hand_olympic(real_samples / MLPERF))
    assert result.system_name == "XE9680x8H100-SXM-80GB"
    (checked,) = parse_files(bundle, bundle.spec.runs[0])
    assert isinstance(checked.result, MlperfResult) and checked.result.score_minutes == result.score_minutes
    # the seal names each file of the folder, never the folder
    sealed = seal_bundle(bundle).read_text().splitlines()
    named = sorted(["bundle.yaml", "mlperf/scaling.json", "mlperf/system.json"]
                   + [f"mlperf/result_{i}.txt" for i in range(10)])
    assert sorted(line.split("  ", 1)[1] for line in sealed if not line.startswith("#")) == named
    assert sorted(line.split("  ", 1)[1] for line in sealed if line.startswith("# size ")) == named  # and sizes


def test_evidence_seal_of_an_mlperf_folder(tmp_path: Path, real_samples: Path) -> None:
    root = _mlperf_bundle(tmp_path, real_samples, ["mlperf"])
    proc = run_cli("evidence", "seal", str(root))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"sealed 13 files: {root / 'MANIFEST.sha256'}"


SACCT = "slurm/sacct-multi-node.txt"
# SOURCES.md: the dump's documented `--format` list (it was written with --noheader)
SACCT_FIELDS = (
    "State,JobID,ReqCPUS,ReqMem,ReqNodes,Constraints,Submit,Eligible,Start,Elapsed,Suspended,End,ExitCode,"
    "DerivedExitCode,AllocNodes,NCPUS,MaxDiskRead,MaxDiskWrite,MaxPages,MaxRSS,MaxVMSize,CPUTime,UserCPU,"
    "SystemCPU,TotalCPU"
).split(",")

SACCT_BUNDLE = """\
schema_version: 1
cluster: {name: aws, provider: AWS}
system: {gpu: h100-sxm, gpus_per_node: 8, nodes: [n1]}
catalog: exemplar-h100
recipe_version: "1"
runs:
  - {id: sched, phase: resilience, kind: scheduler, format: sacct, FIELDSfiles: [sacct.txt]}
"""


def _sacct_bundle(tmp_path: Path, text: str, fields: list[str] | None) -> Path:
    (tmp_path / "sacct.txt").write_text(text)
    key = "" if fields is None else f"fields: {json.dumps(fields)}, "
    (tmp_path / "bundle.yaml").write_text(SACCT_BUNDLE.replace("FIELDS", key))
    return tmp_path


def test_a_headerless_sacct_dump_is_read_with_the_bundles_field_list(tmp_path: Path, real_samples: Path) -> None:
    bundle = load_bundle(_sacct_bundle(tmp_path, (real_samples / SACCT).read_text(), SACCT_FIELDS))
    result = parse_run(bundle, bundle.spec.runs[0], 1 << 30)
    assert not isinstance(result, Exception), result
    (job,) = result.jobs  # type: ignore[attr-defined]
    # read from the file by hand: job 845 (line 4), OUT_OF_MEMORY, Elapsed 00:05:01, one step 845.batch (line 5)
    assert (job.job_id, job.state, job.elapsed_s, job.line, [s.step_id for s in job.steps]) == (
        "845", "OUT_OF_MEMORY", 301, 4, ["845.batch"])
    assert result.warnings == []  # type: ignore[attr-defined]


def test_without_a_field_list_the_headerless_dump_is_named_unusable(tmp_path: Path, real_samples: Path) -> None:
    bundle = load_bundle(_sacct_bundle(tmp_path, (real_samples / SACCT).read_text(), None))
    result = parse_run(bundle, bundle.spec.runs[0], 1 << 30)
    assert str(result) == (f"{tmp_path / 'sacct.txt'} line 4: expected a header line or a field list "
                           "(--fields State,JobID,...), got neither. Dump with `sacct --parsable2 --format ...` and "
                           "pass the same field list.")


def test_rows_short_of_a_field_added_later_read_it_empty_with_a_warning(tmp_path: Path, real_samples: Path) -> None:
    text = (real_samples / SACCT).read_text()
    # a later dump added Partition at the end: its rows carry 26 fields, the real rows 25
    newer = text.splitlines()[3].replace("|845|", "|846|") + "|gpu"
    fields = [*SACCT_FIELDS, "Partition"]
    bundle = load_bundle(_sacct_bundle(tmp_path, text + newer + "\n", fields))
    result = parse_run(bundle, bundle.spec.runs[0], 1 << 30)
    assert not isinstance(result, Exception), result
    jobs = result.jobs  # type: ignore[attr-defined]
    # the real rows (lines 4-5: the job and its step) lack Partition, the newer job's (line 6) holds it: all read,
    # the lack said below
    assert [(j.job_id, j.line, [s.line for s in j.steps]) for j in jobs] == [("845", 4, [5]), ("846", 6, [])]
    assert result.warnings == [  # type: ignore[attr-defined]
        f"{tmp_path / 'sacct.txt'} lines 4-5: expected 26 fields as the field list names, got 25; "
        "the last 1 (Partition) read as empty"]
    proc = run_cli("evidence", "check", str(tmp_path), "--json")
    checked = json.loads(proc.stdout)
    assert checked["warnings"] == result.warnings  # type: ignore[attr-defined]
    # certify's gate turns them into an advisory WARN check of the run (validation.json keeps them)
    assert [w["message"] for w in checked["validation"]["parse_warnings"]] == result.warnings  # type: ignore[attr-defined]


def test_a_row_with_more_fields_than_the_list_is_refused_naming_its_line(tmp_path: Path, real_samples: Path) -> None:
    text = (real_samples / SACCT).read_text().rstrip("\n") + "|extra\n"
    bundle = load_bundle(_sacct_bundle(tmp_path, text, SACCT_FIELDS))
    result = parse_run(bundle, bundle.spec.runs[0], 1 << 30)
    assert str(result).startswith(f"{tmp_path / 'sacct.txt'} line 5 field 'row': expected at most 25 fields as "
                                  "the field list names, got 26.")


def test_a_duplicates_dump_keeps_each_incarnation_of_a_requeued_job(tmp_path: Path, real_samples: Path) -> None:
    lines = (real_samples / SACCT).read_text().splitlines()
    # `sacct --duplicates`: the first incarnation of 845 was requeued (NODE_FAIL), then ran again
    first = [lines[3].replace("OUT_OF_MEMORY|845|", "REQUEUED|845|"), lines[4].replace("OUT_OF_MEMORY", "NODE_FAIL")]
    bundle = load_bundle(_sacct_bundle(tmp_path, "\n".join([*lines[:3], *first, *lines[3:]]) + "\n", SACCT_FIELDS))
    result = parse_run(bundle, bundle.spec.runs[0], 1 << 30)
    assert not isinstance(result, Exception), result
    jobs = result.jobs  # type: ignore[attr-defined]
    assert [(j.job_id, j.incarnation, j.state, j.line, [s.line for s in j.steps]) for j in jobs] == [
        ("845", 1, "REQUEUED", 4, [5]), ("845", 2, "OUT_OF_MEMORY", 6, [7])]


def test_check_from_inside_the_bundle_and_with_a_catalog_typed_from_its_folder(tmp_path: Path,
                                                                              real_samples: Path) -> None:
    """`evidence seal .` and `evidence check .` in the bundle's folder; `--catalog mine.yaml` in the folder of the
    user's own catalog, outside the bundle: each path read where the user typed it ('.' sealed as a bundle whose
    every file linked outside it, and the catalog was looked for in the bundle)."""
    root = tmp_path / "bundle"
    root.mkdir()
    _sacct_bundle(root, (real_samples / SACCT).read_text(), SACCT_FIELDS)
    sealed = run_cli("evidence", "seal", ".", cwd=root)
    assert (sealed.returncode, sealed.stdout) == (0, "sealed 2 files: MANIFEST.sha256\n"), sealed.stderr
    checked = run_cli("evidence", "check", ".", "--json", cwd=root)
    assert checked.returncode == 0 and json.loads(checked.stdout)["usable"] is True, checked.stderr
    assert json.loads(checked.stdout)["bundle"] == str(root)  # named whole, not '.'
    assert run_cli("evidence", "check", ".", cwd=root).stdout.splitlines()[0] == f"{root}: sealed"
    mine = tmp_path / "catalogs" / "mine.yaml"
    mine.parent.mkdir()
    shutil.copyfile(ROOT / "references" / "exemplar-gb200.yaml", mine)  # another system: named with its path
    other = run_cli("evidence", "check", "../bundle", "--catalog", "mine.yaml", cwd=mine.parent)
    assert other.returncode == 3, other.stderr
    assert (f"expected the system the catalog exemplar-gb200 ({mine}) certifies, 'gb200-nvl72', got 'h100-sxm'"
            in other.stderr)
    shutil.copyfile(ROOT / "references" / "exemplar-h100.yaml", mine)
    proc = run_cli("evidence", "check", "../bundle", "--catalog", "mine.yaml", "--json", cwd=mine.parent)
    assert proc.returncode == 0 and json.loads(proc.stdout)["usable"] is True, proc.stderr
    (root / "mine.yaml").write_text("not: a catalog\n")  # a file of that name in the bundle: bundle.yaml's reading
    inside = run_cli("evidence", "check", "../bundle", "--catalog", "mine.yaml", cwd=mine.parent)
    assert inside.returncode == 2 and inside.stderr.startswith(f"error: {root / 'mine.yaml'} line 1"), inside.stderr
