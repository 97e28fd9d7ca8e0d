"""The operations commands' refusals: schedule without a server or with a bad cron, rerun of a non-run folder, a
log given where a bundle is asked for."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ROOT, free_port, run_cli

SAMPLE = ROOT / "evidence" / "gb200-seed"


def test_schedule_without_a_server_says_one_is_needed() -> None:
    proc = run_cli("schedule", str(SAMPLE), "--cron", "0 3 * * 1")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: schedule needs a Prefect server: PREFECT_API_URL is not set. Start one with `clustercert server` "
        "and set PREFECT_API_URL=http://127.0.0.1:4200/api (see README)"]


def test_schedule_against_a_server_that_does_not_answer_is_refused_in_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}/api"  # nobody serves it
    proc = run_cli("schedule", str(SAMPLE), "--cron", "0 3 * * 1",
                   env={"PREFECT_API_URL": url, "PREFECT_API_REQUEST_TIMEOUT": "2"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"error: PREFECT_API_URL {url}: no Prefect server answers there (Connection refused; asked for 2 s). Start "
        "one (`clustercert server`) and point PREFECT_API_URL at it (see README)"]
    assert proc.stdout == ""


def test_schedule_refuses_a_bad_cron() -> None:
    proc = run_cli("schedule", str(SAMPLE), "--cron", "every monday",
                   env={"PREFECT_API_URL": "http://127.0.0.1:9/api"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --cron: expected a cron expression such as '0 3 * * 1', got 'every monday'"


def test_rerun_of_a_folder_without_manifest_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli("rerun", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.strip() == f"error: {tmp_path}: not a run folder (no manifest.json)"


def test_runs_of_an_empty_reports_dir(tmp_path: Path) -> None:
    proc = run_cli("runs", "--reports-dir", str(tmp_path), "--json")
    assert proc.returncode == 0 and proc.stdout.strip() == "[]"
    proc = run_cli("runs", "--reports-dir", str(tmp_path))
    assert (proc.returncode, proc.stdout) == (0, "no runs\n"), proc.stderr


def test_runs_says_its_folder_is_missing_and_refuses_a_file(tmp_path: Path) -> None:
    """A mistyped --reports-dir read "no runs" as an empty history would; a file given for it too."""
    missing = tmp_path / "reprots"
    proc = run_cli("runs", "--reports-dir", str(missing))
    assert (proc.returncode, proc.stdout) == (0, f"no runs: {missing} does not exist\n"), proc.stderr
    proc = run_cli("runs", "--reports-dir", str(missing), "--json")
    assert (proc.returncode, proc.stdout.strip()) == (0, "[]"), proc.stderr
    afile = tmp_path / "results.json"
    afile.write_text("{}")
    proc = run_cli("runs", "--reports-dir", str(afile))
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stdout
    assert proc.stderr == f"error: {afile}: expected the reports folder, got a file\n"


def test_a_log_given_for_the_bundle_is_refused_naming_it() -> None:
    log = SAMPLE / "collectives" / "cross-rack" / "128gpus-1.log"
    for command in (("certify", str(log)), ("evidence", "check", str(log))):
        proc = run_cli(*command)
        assert (proc.returncode, proc.stdout) == (3, ""), proc.stdout + proc.stderr
        assert proc.stderr == f"error: {log}: expected a bundle folder or its bundle.yaml, got another file\n"


def test_a_folder_of_files_without_bundle_yaml_is_told_to_run_evidence_init(tmp_path: Path) -> None:
    """Files as collected, not yet described: every command that reads a bundle names the command that drafts its
    bundle.yaml (it said 'Fix bundle.yaml (see DESIGN.md ...)', a file that is not there and a document that is not
    shipped); nothing is written, the folder stays as it was."""
    folder = tmp_path / "collected"
    folder.mkdir()
    log = SAMPLE / "collectives" / "cross-rack" / "128gpus-1.log"
    (folder / log.name).write_bytes(log.read_bytes())
    reports = tmp_path / "reports"
    for command in (("certify", str(folder), "--reports-dir", str(reports)), ("evidence", "check", str(folder)),
                    ("evidence", "seal", str(folder))):
        proc = run_cli(*command)
        assert (proc.returncode, proc.stdout) == (3, ""), proc.stdout + proc.stderr
        assert proc.stderr == (f"error: {folder / 'bundle.yaml'}: expected the bundle.yaml that describes the "
                               f"evidence, got none. Draft one from the folder's files: clustercert evidence init "
                               f"{folder}\n")
    assert sorted(p.name for p in folder.iterdir()) == [log.name]
    assert not reports.exists() or list(reports.iterdir()) == []  # no run folder
