"""The operations commands' refusals: schedule without a server or with a bad cron, rerun of a non-run folder."""

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
