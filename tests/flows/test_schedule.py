"""A scheduled certification as an operator runs it: `clustercert server` of its own (UI on, on a home that has a
database already, every request to the internet caught), the served deployment, a run, its report and alert, what
the API and the UI show of it, a rerun."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, run_cli
from tests.flows.conftest import (
    PrefectServer,
    TelemetryDouble,
    home_with_a_database,
    operator_env,
    operator_server,
    stop,
)

# NOT CERTIFIED: its reasons, failed checks and log lines are what an operator must see
SAMPLE = ROOT / "evidence" / "gb200-degraded"
CLUSTER = "example-cloud-gb200-west"
# Where the operator publishes the run folders (the report's link is made under it)
REPORTS_URL = "https://reports.example/clustercert"
pytestmark = pytest.mark.slow


class Receiver:
    """A webhook receiver on 127.0.0.1 that keeps every JSON body POSTed to it."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _previous_run(reports: Path) -> None:
    """A previous run of the same cluster whose llama3-70b FP8 figures were far better (so this run regressed)."""
    folder = reports / "20200106T030000Z-previous"
    folder.mkdir(parents=True)
    results = {"run_id": folder.name, "started_at": "2020-01-06T03:00:00Z", "cluster": {"name": CLUSTER},
               "outcome": "CERTIFIED",
               "workloads": [{"workload": "llama3-70b", "precision": "fp8", "delta_pct": 9.0, "mfu": 0.9}]}
    (folder / "results.json").write_text(json.dumps(results))
    # Signed like a real run folder: only a folder that verifies is history (issue 14 item 7).
    from clustercert.attest.manifest import write_manifest
    from clustercert.attest.signing import ensure_dev_key, load_signing_key

    keys = Path(os.environ["CLUSTERCERT_KEY_DIR"])  # the test run's key folder (another worker may be creating it)
    ensure_dev_key(keys, passphrase=None, now=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    write_manifest(folder, reports, [], {"run": {"bundle_path": "/b/previous"}}, load_signing_key(keys, None),
                   run_files=["results.json"])


async def _api(server: PrefectServer, deployment: str) -> dict[str, Any]:
    from prefect.client.orchestration import PrefectClient
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterDeploymentId,
        FlowRunFilterId,
        FlowRunFilterParentFlowRunId,
        FlowRunFilterState,
        FlowRunFilterStateName,
        LogFilter,
        LogFilterFlowRunId,
    )

    async with PrefectClient(api=server.api_url) as client:
        deadline = time.monotonic() + 60
        while True:
            try:
                found = await client.read_deployment_by_name(f"scheduled-certify/{deployment}")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        schedules = [s.schedule.model_dump() for s in found.schedules]
        run = await client.create_flow_run_from_deployment(found.id)
        deadline = time.monotonic() + 180
        while not (run.state and run.state.is_final()):
            assert time.monotonic() < deadline, "the scheduled run did not finish in 180 s"
            await asyncio.sleep(0.5)
            run = await client.read_flow_run(run.id)
        # The triggered run and its subflow runs (the server is shared with other tests), and the runs the cron
        # schedule has put on the server.
        flow_runs, frontier = [run], [run.id]
        while frontier:
            children = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=frontier)))
            flow_runs += children
            frontier = [c.id for c in children]
        flow_runs += await client.read_flow_runs(flow_run_filter=FlowRunFilter(
            deployment_id=FlowRunFilterDeploymentId(any_=[found.id]), state=FlowRunFilterState(
                name=FlowRunFilterStateName(any_=["Scheduled"]))))
        names = {r.id: (await client.read_flow(r.flow_id)).name for r in flow_runs}
        ids = [r.id for r in flow_runs]
        task_runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))
        artifacts = await client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[r.id for r in flow_runs])))
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        while not events and time.monotonic() < deadline:
            response = await client._client.post(
                "/events/filter", json={"filter": {"event": {"name": ["clustercert.run.alert"]}}, "limit": 50})
            events = response.json()["events"]
            if not events:
                await asyncio.sleep(0.5)
        # the served process sends its logs in batches: the run's last lines may come after its final state
        logs: list[str] = []
        deadline = time.monotonic() + 30
        while not any("run folder:" in line for line in logs) and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            logs = [log.message for log in await client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])))]
        ui_settings = (await client._client.get(server.api_url.removesuffix("/api") + "/ui-settings")).json()
        admin = (await client._client.get("/admin/settings")).json()
        return {"run": run, "schedules": schedules, "flow_runs": flow_runs, "flow_names": names,
                "task_runs": task_runs, "artifacts": artifacts, "events": events, "logs": logs,
                "ui_settings": ui_settings, "admin_settings": admin}


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("schedule")
    bundles, reports = work / "bundles", work / "reports"
    shutil.copytree(SAMPLE, bundles / "a-new")
    shutil.copytree(SAMPLE, bundles / "z-old")  # sealed earlier: the newest sealed bundle is a-new despite its name
    old = time.time() - 86400
    os.utime(bundles / "z-old" / "MANIFEST.sha256", (old, old))
    _previous_run(reports)
    receiver, double = Receiver(), TelemetryDouble()
    started = time.monotonic()
    try:
        with operator_server(home_with_a_database(work / "prefect"), double) as server:
            env = operator_env(double, **server.env(), CLUSTERCERT_REPORTS_DIR=str(reports),
                               CLUSTERCERT_ALERT_WEBHOOK=receiver.url, CLUSTERCERT_REPORTS_URL=REPORTS_URL,
                               TMPDIR=str(work / "tmp"))  # Prefect's runner_storage there
            (work / "tmp").mkdir()
            with (work / "serve.log").open("wb") as log:
                serve = subprocess.Popen(
                    # the catalog as a path typed from where the command runs (the bundle's own catalog, by its file)
                    [sys.executable, "-m", "clustercert", "schedule", str(bundles), "--cron", "0 3 * * 1",
                     "--catalog", "references/exemplar-gb200.yaml"], cwd=ROOT, env=env, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    api = asyncio.run(_api(server, "certify-bundles"))
                finally:
                    stop(serve)
            served_output = (work / "serve.log").read_text()
            yield {"api": api, "bundles": bundles, "reports": reports, "received": receiver.received,
                   "served_output": served_output, "seconds": time.monotonic() - started, "server": server,
                   "telemetry": double.asked}
    finally:
        receiver.close()
        double.close()


def _run_dir(scheduled: dict[str, Any]) -> Path:
    return next(p for p in scheduled["reports"].iterdir() if p.name != "20200106T030000Z-previous")


def test_the_scheduled_run_certifies_the_newest_sealed_bundle(scheduled: dict[str, Any]) -> None:
    api = scheduled["api"]
    assert api["run"].state.name == "NOT CERTIFIED", scheduled["served_output"][-3000:]
    assert api["schedules"] == [{"cron": "0 3 * * 1", "timezone": None, "day_or": True}]
    run_dir = _run_dir(scheduled)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["predicate"]["run"]["bundle_path"] == str(scheduled["bundles"] / "a-new")
    # read where it was typed and recorded whole: the deployment certifies later, from its worker's folder
    assert manifest["predicate"]["run"]["catalog_arg"] == str(ROOT / "references" / "exemplar-gb200.yaml")
    assert manifest["predicate"]["outcome"] == "NOT CERTIFIED"
    proc = run_cli("verify", str(run_dir))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_flow_runs_subflows_tasks_and_artifacts_are_in_the_api(scheduled: dict[str, Any]) -> None:
    api = scheduled["api"]
    # The cron schedule has put future runs on the server: Mondays at 03:00 UTC.
    future = [r for r in api["flow_runs"] if r.state_name == "Scheduled"]
    assert future and all(r.expected_start_time.weekday() == 0 and (r.expected_start_time.hour,
                          r.expected_start_time.minute) == (3, 0) for r in future)
    ran = [r for r in api["flow_runs"] if r.state_name != "Scheduled"]
    by_name = {api["flow_names"][r.id]: r for r in ran}
    phases = ["efficiency", "resilience", "scaling"]
    assert sorted(by_name) == sorted(["certify", "scheduled-certify", *phases]) and len(ran) == 5
    # the runs of the certification end named by its outcome (of type COMPLETED: the run did its work); its phases
    # as any flow
    assert all(r.state_type.value == "COMPLETED" for r in ran)
    assert [by_name[name].state_name for name in ("scheduled-certify", "certify", *phases)] == [
        "NOT CERTIFIED", "NOT CERTIFIED", "Completed", "Completed", "Completed"]
    assert by_name["scheduled-certify"].deployment_id is not None
    assert by_name["certify"].parent_task_run_id is not None
    assert all(by_name[p].parent_task_run_id is not None for p in phases)
    tasks: dict[str, list[Any]] = {}
    for t in api["task_runs"]:
        tasks.setdefault(t.name.rsplit("-", 1)[0], []).append(t)  # a task run is named <task>-<suffix>
    # On threads each phase subflow parses its evidence in one task: the efficiency phase's training logs and MLPerf
    # runs too (a task per training log only on a Dask cluster, tests/flows/test_dask.py)
    assert "parse-training-log" not in tasks, sorted(tasks)
    assert sorted(t.flow_run_id for t in tasks["parse-runs"]) == sorted(by_name[p].id for p in phases)
    for name in ("resolve-source", "load-inputs", "judge-efficiency", "parse-runs", "judge-scaling",
                 "judge-resilience", "validate", "gate", "judge", "render-and-sign", "publish-artifacts",
                 "report-outcome", "alert", "post-webhook"):
        assert name in tasks, sorted(tasks)


def _results(scheduled: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads((_run_dir(scheduled) / "results.json").read_text()))


def _by_flow(scheduled: dict[str, Any]) -> dict[str, Any]:
    api = scheduled["api"]
    return {api["flow_names"][r.id]: r for r in api["flow_runs"] if r.state_name != "Scheduled"}


def _required_failures(results: dict[str, Any]) -> int:
    return sum(1 for c in results["checks"] if c["severity"] == "required" and c["status"] == "FAIL")


def test_each_run_carries_the_outcome_where_the_ui_shows_it(scheduled: dict[str, Any]) -> None:
    """The scheduled run and its certify run: the state named by the outcome and why in its message, tags to filter
    by; the certify run named by its run folder; the scheduled run's log says the outcome, the folder and the
    first reasons."""
    results, by_name = _results(scheduled), _by_flow(scheduled)
    assert results["outcome"] == "NOT CERTIFIED"
    failing = _required_failures(results)
    assert failing > 3  # more reasons than the log names
    first = results["reasons"][0]
    for name in ("scheduled-certify", "certify"):
        run = by_name[name]
        assert run.state.message == (f"{CLUSTER}: NOT CERTIFIED ({failing} required checks fail); {first['line']} "
                                     f"(and {len(results['reasons']) - 1} more)")
        assert {"clustercert", "outcome:not-certified", f"cluster:{CLUSTER}"} <= set(run.tags)
    assert by_name["certify"].name == results["run_id"] == _run_dir(scheduled).name
    logs = scheduled["api"]["logs"]
    assert f"{CLUSTER}: NOT CERTIFIED ({failing} required checks fail)" in logs, logs
    assert f"run folder: {_run_dir(scheduled)}" in logs
    shown = [line for line in logs if line.startswith(("FAIL ", "ERROR "))]
    assert [line.split(" [")[0] for line in shown] == [r["line"] for r in results["reasons"][:3]]
    assert f"and {len(results['reasons']) - 3} more reasons in {_run_dir(scheduled)}/results.json" in logs


def test_the_artifacts_are_the_summary_the_failed_checks_and_the_report_link(scheduled: dict[str, Any]) -> None:
    api, results, by_name = scheduled["api"], _results(scheduled), _by_flow(scheduled)
    run_id = results["run_id"]
    certify_id = by_name["certify"].id
    arts = {a.key: a for a in api["artifacts"] if a.key}
    prefix = f"clustercert-{CLUSTER}-"
    keys = [prefix + k for k in ("summary", "failed-checks", "report", f"run-{run_id.lower()}")]
    assert sorted(arts) == sorted(keys)
    assert [arts[k].type for k in keys] == ["markdown", "table", "markdown", "markdown"]  # a link is markdown
    assert all(arts[k].flow_run_id == certify_id for k in keys)
    # the scheduled run holds its own copy of the summary, unkeyed (the Artifacts page lists the certify run's)
    own = [a for a in api["artifacts"] if a.flow_run_id == by_name["scheduled-certify"].id]
    assert len(own) == 1 and own[0].key is None and own[0].data == arts[prefix + "summary"].data
    assert arts[keys[3]].data == arts[prefix + "summary"].data

    summary = arts[prefix + "summary"].data
    assert summary.startswith(f"# NOT CERTIFIED: {CLUSTER}\n\n**Why:** {_required_failures(results)} required "
                              "checks fail\n")
    assert f"- {results['reasons'][0]['status']} {results['reasons'][0]['phase']}:" in summary
    for w in results["workloads"]:  # each workload's figures rounded, with units
        row = next(line for line in summary.splitlines() if line.startswith(f"| {w['workload']} "))
        assert f"| {w['step_time_s']['mean']:.3g} s | {w['baseline']['step_time_s']:.3g} s | " in row
        assert f"| {w['delta_pct']:+.1f} % (" in row and f"| {100 * w['mfu']:.1f} % | {w['status']} |" in row
    assert "**regressed**" in summary
    assert re.search(r"\d\.\d{5}", summary) is None  # no figure as Python prints a float
    assert f"[report.pdf]({REPORTS_URL}/{run_id}/report.pdf)" in summary
    assert f"[results.json]({REPORTS_URL}/{run_id}/results.json)" in summary

    table = arts[prefix + "failed-checks"].data
    rows = json.loads(table) if isinstance(table, str) else table
    failed = [r for r in results["reasons"] if r["status"] in ("FAIL", "ERROR")]
    assert 0 < len(failed) <= 25
    assert [(r["check"], r["status"]) for r in rows] == [(r["check"], r["status"]) for r in failed]
    checks = {c["id"]: c for c in results["checks"]}
    for row in rows:
        c = checks[row["check"]]
        assert row["measured / target"] == f"{c['measured']:.4g} / {c['target']:.4g} {c['unit']}".strip()
    assert re.search(r"\d\.\d{5}", json.dumps(rows)) is None

    assert arts[prefix + "report"].data == f"[report.pdf of {run_id}]({REPORTS_URL}/{run_id}/report.pdf)"
    assert not [a.key for a in api["artifacts"] if "file:" in (a.data if isinstance(a.data, str) else
                                                                 json.dumps(a.data))]


def test_a_regression_raises_an_event_and_calls_the_webhook(scheduled: dict[str, Any]) -> None:
    assert len(scheduled["received"]) == 1
    alert = scheduled["received"][0]
    assert alert["cluster"] == CLUSTER and alert["outcome"] == "NOT CERTIFIED"
    assert alert["run_id"] == _run_dir(scheduled).name
    assert {(r["workload"], r["figure"]) for r in alert["regressions"]} == {("llama3-70b/fp8", "delta_pct"),
                                                                           ("llama3-70b/fp8", "mfu")}
    assert alert["reasons"] == ["outcome NOT CERTIFIED",
                                "2 headline figure(s) regressed since run 20200106T030000Z-previous"]
    events = scheduled["api"]["events"]
    assert len(events) == 1 and events[0]["payload"]["run_id"] == alert["run_id"]
    assert events[0]["resource"]["prefect.resource.id"] == f"clustercert.cluster.{CLUSTER}"
    results = json.loads((_run_dir(scheduled) / "results.json").read_text())
    assert results["previous_run"]["run_id"] == "20200106T030000Z-previous"
    assert results["previous_run"]["regressed"] is True


def test_the_runs_page_and_the_summary_show_the_outcome_in_a_browser(scheduled: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    """Prefect's UI in headless Chromium, as an operator opens it (bench/check_ui.py): the runs page's state badges
    and the summary artifact's page say the outcome without a click; the UI reaches its server on this port (it
    read /ui-settings), or it would show "Can't connect to Server API"."""
    from bench.check_ui import find_chromium, look

    chromium = find_chromium()
    if chromium is None:
        reason = "needs Debian's chromium (apt-get install -y chromium)"
        if os.environ.get("CLUSTERCERT_REQUIRE_REAL_SAMPLES") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    results = _results(scheduled)
    shown = look(scheduled["server"].api_url, tmp_path, chromium, key=f"clustercert-{CLUSTER}-summary")
    runs = shown["runs"]
    assert "Can't connect" not in runs, runs[:2000]
    # each run of the certification: its flow, its name, its tags, its state badge (the run id names certify's)
    for flow_name, run in (("scheduled-certify", _by_flow(scheduled)["scheduled-certify"].name),
                           ("certify", results["run_id"])):
        badge = rf"{flow_name} {re.escape(run)} (\S+ )*?outcome:not-certified (\S+ )?NOT CERTIFIED "
        assert re.search(badge, runs), runs
    summary = shown["summary"]
    assert (f"NOT CERTIFIED: {CLUSTER} Why: {_required_failures(results)} required checks fail "
            f"{results['reasons'][0]['status']} {results['reasons'][0]['phase']}:") in summary, summary[:3000]
    grok = next(w for w in results["workloads"] if w["workload"] == "grok1-314b")
    assert f"grok1-314b BF16 512 {grok['step_time_s']['mean']:.3g} s" in summary
    for name in ("runs", "summary"):
        png = (tmp_path / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_rerun_refuses_changed_evidence_naming_the_file(scheduled: dict[str, Any], tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(scheduled["bundles"] / "a-new", bundle)
    victim = bundle / "training" / "grok1-314b" / "bf16" / "512" / "r2.log"
    _flip_byte(victim)
    proc = run_cli("rerun", str(_run_dir(scheduled)), "--bundle", str(bundle))
    assert proc.returncode == 3
    assert proc.stderr.strip() == (f"error: {victim}: changed since the run (sha256 differs from the run's "
                                   "manifest.json); a re-run needs the evidence as it was")


def test_rerun_refuses_missing_evidence_naming_the_file(scheduled: dict[str, Any], tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(scheduled["bundles"] / "a-new", bundle)
    victim = bundle / "training" / "deepseek-v3" / "bf16" / "512" / "r1.log"
    victim.unlink()
    proc = run_cli("rerun", str(_run_dir(scheduled)), "--bundle", str(bundle))
    assert proc.returncode == 3
    assert proc.stderr.startswith(f"error: {victim}: missing; the run's manifest lists it.")


def test_rerun_reproduces_the_scheduled_run_but_a_planted_change_and_warns_of_other_software(
        scheduled: dict[str, Any], tmp_path: Path) -> None:
    """One re-run of the scheduled run's folder with results and one package version changed in it: the changes are
    its only differences (results.json otherwise, validation.json, the HTML and unsigned PDF of the report are
    reproduced), the many in one list shown as two and a count, and the package its only warning. (The exit-0
    "identical" case: tests/e2e/test_certify.py.)"""
    run_dir = tmp_path / _run_dir(scheduled).name
    shutil.copytree(_run_dir(scheduled), run_dir)
    results = json.loads((run_dir / "results.json").read_text())
    old = results["workloads"][0]["mfu"]
    results["workloads"][0]["mfu"] = 0.5
    # and every line of the first check with many evidence spans one further on: many differences in one list
    k, check = next((k, c) for k, c in enumerate(results["checks"]) if len(c["evidence"]) >= 4)
    lines = [span["line"] for span in check["evidence"]]
    for span in check["evidence"]:
        span["line"] += 1
    (run_dir / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    now = manifest["predicate"]["software"]["pandas"]
    manifest["predicate"]["software"]["pandas"] = "0.0.1"
    (run_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    proc = run_cli("rerun", str(run_dir), env=scheduled["server"].env())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    at = f"results.json.checks[{k}].evidence"
    assert list(results).index("checks") < list(results).index("workloads")  # the order differences are found in
    assert proc.stderr.splitlines() == [
        f"warning: software differs from the manifest's: pandas: recorded 0.0.1, now {now}",
        f"differs: {1 + len(lines)} difference(s) from {run_dir}",
        f"  {at}[0].line: {lines[0] + 1} -> {lines[0]}",
        f"  {at}[1].line: {lines[1] + 1} -> {lines[1]}",
        f"  ... and {len(lines) - 2} more differences in {at}",
        f"  results.json.workloads[0].mfu: 0.5 -> {json.dumps(old)}"]


def test_runs_lists_both_runs_and_marks_the_regression(scheduled: dict[str, Any]) -> None:
    reports = str(scheduled["reports"])
    listed = json.loads(run_cli("runs", "--reports-dir", reports, "--cluster", CLUSTER, "--json").stdout)
    assert [r["run_id"] for r in listed] == ["20200106T030000Z-previous", _run_dir(scheduled).name]
    assert listed[1]["bundle_path"] == str(scheduled["bundles"] / "a-new") and listed[1]["outcome"] == "NOT CERTIFIED"
    assert set(listed[1]["headline"]) == {"deepseek-v3/bf16", "grok1-314b/bf16", "llama3.1-405b/fp8",
                                          "llama3-70b/fp8"}
    table = run_cli("runs", "--reports-dir", reports).stdout
    assert table.count("REGRESSED") == 1 and "llama3-70b/fp8" in table
    assert "no runs of cluster nowhere" in run_cli("runs", "--reports-dir", reports, "--cluster", "nowhere").stdout


def test_nothing_phoned_home(scheduled: dict[str, Any]) -> None:
    """Every process of the scheduled certification (the server, on a home that had a database already, and the
    served deployment) ran without the sandbox's quieting settings: none of them sent a request to the internet
    (the telemetry double saw none, over the whole module), the server did not try ("Failed to send telemetry"),
    and it tells Prefect's clients that analytics are off (they ask it before sending their own)."""
    assert scheduled["telemetry"] == []
    assert "telemetry" not in scheduled["server"].log_text().lower(), scheduled["server"].log_text()[-3000:]
    assert scheduled["api"]["admin_settings"]["server"]["analytics_enabled"] is False


def test_the_ui_is_handed_its_own_servers_address(scheduled: dict[str, Any]) -> None:
    """`clustercert server --port N` hands its UI the API at port N (Prefect's default was 4200's)."""
    assert scheduled["api"]["ui_settings"]["api_url"] == scheduled["server"].api_url
    assert not scheduled["server"].api_url.endswith(":4200/api")
