"""An Exemplar submission as llmb-run packs it, taken through `evidence init ARCHIVE`, seal, `certify --baselines`
and `verify` as a user runs them; and the ways a submission breaks the program's rules, each judged by name."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustercert.catalog import LoadedCatalog, load_catalog
from clustercert.evidence.bundle import Phase, RunKind, load_bundle
from clustercert.evidence.llmb import write_llmb_draft
from clustercert.phases.efficiency import judge_efficiency
from clustercert.runs.evidence import EvidenceSet
from clustercert.runs.folder import GivenFiles, load_inputs
from clustercert.simulate.llmb import LlmbJob, baseline_entry, pack_llmb_archive, suite_jobs, write_llmb_install
from clustercert.verdicts import Check, Status
from tests.conftest import ROOT, run_cli

pytestmark = pytest.mark.slow
REFERENCES = ROOT / "references"
# 128 GB200 trays in 8 racks of 16: the 512 GPUs of the suite
NODES = [f"gb-r{r}-n{n:02d}" for r in range(1, 9) for n in range(1, 17)]
SLOW_START = {"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}


@pytest.fixture(scope="module")
def gb200() -> LoadedCatalog:
    return load_catalog("exemplar-gb200-26.08", REFERENCES)


def baselines_file(path: Path, catalog: LoadedCatalog, jobs: list[LlmbJob], *, tflops_for: str = "") -> Path:
    """Targets 2 % slower than the runs (each passes at > 95 %); the workload `tflops_for` given as TFLOP/s."""
    entries = [baseline_entry(job, catalog, 1.02, as_tflops=job.workload == tflops_for) for job in jobs]
    path.write_text(yaml.safe_dump({"schema_version": 1, "supplied_by": "NVIDIA account team (test)",
                                    "date": "2026-11-15", "source": "Exemplar 26.08 targets for GB200",
                                    "baselines": entries}, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def submission(tmp_path_factory: pytest.TempPathFactory, gb200: LoadedCatalog) -> dict[str, Any]:
    """The whole GB200 suite packed as llmb-run packs it, and the user's journey through it: init, seal, certify
    with the account team's baselines, verify."""
    tmp = tmp_path_factory.mktemp("llmb")
    jobs = suite_jobs(gb200)
    jobs[1] = LlmbJob(**{**jobs[1].__dict__, "retries": 2})  # the launcher retried one job: its last log counts
    install = write_llmb_install(tmp / "install", gb200, jobs, nodes=NODES)
    archive = pack_llmb_archive(install, tmp)
    targets = baselines_file(tmp / "targets.yaml", gb200, jobs, tflops_for="pretrain_llama3.1_405b")
    init = run_cli("evidence", "init", str(archive))
    folder = archive.parent / archive.name.removesuffix(".tar.zst")
    text = (folder / "bundle.yaml").read_text() if (folder / "bundle.yaml").is_file() else ""
    (folder / "bundle.yaml").write_text(text.replace('provider: "FILL_IN"', 'provider: "Example Cloud"'))
    seal = run_cli("evidence", "seal", str(folder))
    certify = run_cli("certify", str(folder), "--baselines", str(targets), "--json", "--reports-dir",
                      str(tmp / "reports"), env=SLOW_START)
    out = json.loads(certify.stdout) if certify.stdout.startswith("{") else {}
    run_dir = Path(out["run_dir"]) if out else None
    verify = run_cli("verify", str(run_dir)) if run_dir else None
    return {"jobs": jobs, "archive": archive, "folder": folder, "targets": targets, "init": init, "seal": seal,
            "certify": certify, "out": out, "run_dir": run_dir, "verify": verify, "draft": text}


def test_the_archive_of_a_complete_suite_certifies(submission: dict[str, Any]) -> None:
    init, certify = submission["init"], submission["certify"]
    assert init.returncode == 0, init.stderr
    assert f"unpacked {submission['archive']} into {submission['folder']}" in init.stdout
    assert "the files cannot say 1 value; fill in each FILL_IN: provider: \"FILL_IN\"" in init.stdout
    assert submission["seal"].returncode == 0, submission["seal"].stderr
    assert certify.returncode == 0, certify.stderr + certify.stdout[-3000:]
    assert submission["out"]["outcome"] == "CERTIFIED"
    assert submission["verify"] is not None and submission["verify"].returncode == 0, submission["verify"].stdout


def test_the_run_records_archive_catalog_and_baselines(submission: dict[str, Any], gb200: LoadedCatalog) -> None:
    run_dir = submission["run_dir"]
    assert run_dir is not None
    results = json.loads((run_dir / "results.json").read_text())
    catalog = results["catalog"]
    assert (catalog["id"], catalog["shipped"]) == ("exemplar-gb200-26.08", True)
    assert catalog["chosen"] == "the shipped edition of recipe release 26.08.00, which the evidence records"
    import hashlib

    assert catalog["baselines"]["sha256"] == hashlib.sha256(submission["targets"].read_bytes()).hexdigest()
    assert (run_dir / "baselines.yaml").read_bytes() == submission["targets"].read_bytes()
    archive_sha = hashlib.sha256(submission["archive"].read_bytes()).hexdigest()
    bundle = yaml.safe_load((submission["folder"] / "bundle.yaml").read_text())
    assert bundle["archive"] == {"name": submission["archive"].name, "sha256": archive_sha}
    html = (run_dir / "report.html").read_text()
    assert "a shipped catalog, the shipped edition of recipe release 26.08.00" in html
    assert "supplied by NVIDIA account team (test) on 2026-11-15" in html
    kinds = {w["workload"] + "-" + w["precision"]: w["baseline"]["kind"] for w in results["workloads"]}
    assert len(kinds) == len(gb200.spec.suite) and set(kinds.values()) == {"supplied"}
    # the job the launcher retried: its last log is judged, the earlier one listed
    retried = submission["jobs"][1]
    run = next(r for r in bundle["runs"] if r["id"].endswith(f"job{retried.job_id}"))
    assert run["files"][0].endswith(f"_{retried.job_id}_1.out")
    assert run["retries"][0].endswith(f"_{retried.job_id}_0.out")
    used = next(w for w in results["workloads"] if w["run_used"] == run["id"])
    assert used["status"] == "PASS"


def _judged(tmp: Path, catalog: LoadedCatalog, jobs: list[LlmbJob], targets: list[LlmbJob]) -> dict[str, Check]:
    """The efficiency checks of an archive of `jobs` judged against baselines for `targets`, in process."""
    install = write_llmb_install(tmp / "install", catalog, jobs, nodes=NODES, nccl=False, prescreen=False)
    path, _, _ = write_llmb_draft(pack_llmb_archive(install, tmp), REFERENCES)
    # without the NCCL microbenchmark no file names the nodes: given as a user would
    path.write_text(path.read_text().replace('provider: "FILL_IN"', 'provider: "Example Cloud"')
                    .replace('nodes: ["FILL_IN"]', f"nodes: {json.dumps(NODES)}"))
    inputs = load_inputs(path.parent, REFERENCES,
                         given=GivenFiles(baselines=str(baselines_file(tmp / "t.yaml", catalog, targets))))
    evidence = EvidenceSet(inputs, 1 << 30)
    runs = [r for r in inputs.bundle.spec.runs if r.phase is Phase.EFFICIENCY and r.kind is RunKind.TRAINING]
    logs = {r.id: evidence.for_phase(r) for r in runs}
    result = judge_efficiency(inputs.bundle.spec, inputs.catalog, logs, {}, evidence.job_configs())  # type: ignore[arg-type]
    return {c.id: c for c in result.checks}


def _two(catalog: LoadedCatalog) -> list[LlmbJob]:
    """Llama 3.1 70B FP8 and Qwen3 235B BF16, the first entry of each in the suite."""
    jobs = suite_jobs(catalog)
    return [next(j for j in jobs if j.workload == w) for w in ("pretrain_llama3.1_70b", "pretrain_qwen3_235b")]


def test_a_run_with_model_overrides_does_not_count(tmp_path: Path, gb200: LoadedCatalog) -> None:
    jobs = _two(gb200)
    jobs[0] = LlmbJob(**{**jobs[0].__dict__, "model_overrides": {"num_layers": 40}})
    checks = _judged(tmp_path, gb200, jobs, jobs)
    run = f"pretrain_llama3.1_70b-{jobs[0].dtype}-512-job{jobs[0].job_id}"
    flagged = checks[f"efficiency.{run}_config_model_overrides"]
    assert flagged.status is Status.WARN
    assert re.search(rf"llmb-config_{jobs[0].job_id}\.yaml line \d+: job_config\.model_overrides "
                     r"\{'num_layers': 40\}", flagged.message)
    verdict = checks[f"efficiency.pretrain_llama3.1_70b-{jobs[0].dtype}-512_meets_baseline"]
    assert verdict.status is Status.FAIL and f"run {run} set aside" in verdict.message
    assert checks[f"efficiency.pretrain_qwen3_235b-{jobs[1].dtype}-512_meets_baseline"].status is Status.PASS


def test_a_proxy_run_does_not_count(tmp_path: Path, gb200: LoadedCatalog) -> None:
    jobs = _two(gb200)
    jobs[1] = LlmbJob(**{**jobs[1].__dict__, "proxy": True})
    checks = _judged(tmp_path, gb200, jobs, jobs)
    run = f"pretrain_qwen3_235b-{jobs[1].dtype}-512-job{jobs[1].job_id}"
    assert checks[f"efficiency.{run}_config_proxy"].status is Status.WARN
    assert "job_config.proxy proxy: true" in checks[f"efficiency.{run}_config_proxy"].message
    assert checks[f"efficiency.pretrain_qwen3_235b-{jobs[1].dtype}-512_meets_baseline"].status is Status.FAIL


def test_a_second_run_of_a_pair_is_listed_and_the_latest_judged(tmp_path: Path, gb200: LoadedCatalog) -> None:
    jobs = _two(gb200)
    slow = LlmbJob(**{**jobs[0].__dict__, "job_id": jobs[0].job_id - 50, "mfu": 0.2})  # an earlier, failed run
    checks = _judged(tmp_path, gb200, [slow, *jobs], jobs)
    verdict = checks[f"efficiency.pretrain_llama3.1_70b-{jobs[0].dtype}-512_meets_baseline"]
    assert verdict.status is Status.PASS
    assert f"latest of 2 repeat(s), run pretrain_llama3.1_70b-{jobs[0].dtype}-512-job{jobs[0].job_id}" in \
        verdict.message
    assert checks["efficiency.recipe_release_one"].status is Status.PASS


def test_a_nan_grad_norm_makes_the_run_invalid_naming_its_line(tmp_path: Path, gb200: LoadedCatalog) -> None:
    jobs = _two(gb200)
    jobs[0] = LlmbJob(**{**jobs[0].__dict__, "nan_at": 40})
    checks = _judged(tmp_path, gb200, jobs, jobs)
    valid = checks[f"efficiency.pretrain_llama3.1_70b-{jobs[0].dtype}-512-job{jobs[0].job_id}_valid"]
    assert valid.status is Status.ERROR
    assert re.search(rf"log-pretrain_llama3\.1_70b_\S+_{jobs[0].job_id}_0\.out line \d+ field 'grad norm'",
                     valid.message)
    verdict = checks[f"efficiency.pretrain_llama3.1_70b-{jobs[0].dtype}-512_meets_baseline"]
    assert verdict.status is Status.ERROR and "no valid run" in verdict.message
    assert checks[f"efficiency.pretrain_qwen3_235b-{jobs[1].dtype}-512_meets_baseline"].status is Status.PASS


def test_a_log_printing_another_tp_than_the_recipe_names_its_line(tmp_path: Path, gb200: LoadedCatalog) -> None:
    jobs = _two(gb200)
    jobs[1] = LlmbJob(**{**jobs[1].__dict__, "printed_tp": 4})
    checks = _judged(tmp_path, gb200, jobs, jobs)
    recipe = checks[f"efficiency.pretrain_qwen3_235b-{jobs[1].dtype}-512-job{jobs[1].job_id}_recipe_conforms"]
    assert recipe.status is Status.ERROR
    assert re.search(rf"TP \(tp\) 4 vs baseline 1 \(the log prints it at \S+_{jobs[1].job_id}_0\.out:\d+\)",
                     recipe.message)
    assert checks[f"efficiency.pretrain_qwen3_235b-{jobs[1].dtype}-512_meets_baseline"].status is not Status.PASS
    assert checks[f"efficiency.pretrain_llama3.1_70b-{jobs[0].dtype}-512_meets_baseline"].status is Status.PASS


def test_a_missing_workload_fails_naming_it(tmp_path: Path, gb200: LoadedCatalog) -> None:
    jobs = _two(gb200)
    checks = _judged(tmp_path, gb200, jobs[:1], jobs)
    verdict = checks[f"efficiency.pretrain_qwen3_235b-{jobs[1].dtype}-512_meets_baseline"]
    assert verdict.status is Status.FAIL
    assert "has no efficiency training run of pretrain_qwen3_235b" in verdict.message
    unjudged = checks["efficiency.pretrain_deepseek-v3_671b-bf16-512_meets_baseline"]  # no target given either
    assert unjudged.status is Status.ERROR and "no baseline for" in unjudged.message


def test_two_recipe_releases_fail_naming_the_runs(tmp_path: Path, gb200: LoadedCatalog) -> None:
    jobs = _two(gb200)
    jobs[1] = LlmbJob(**{**jobs[1].__dict__, "release": "26.05.00"})
    checks = _judged(tmp_path, gb200, jobs, jobs)
    one = checks["efficiency.recipe_release_one"]
    assert one.status is Status.FAIL
    assert f"26.05.00: pretrain_qwen3_235b-{jobs[1].dtype}-512-job{jobs[1].job_id}" in one.message


def test_an_archive_member_climbing_out_is_refused_naming_it(tmp_path: Path, gb200: LoadedCatalog) -> None:
    import tarfile

    install = write_llmb_install(tmp_path / "install", gb200, _two(gb200), nodes=NODES, nccl=False)
    info = tarfile.TarInfo("../x")
    info.size = 2
    archive = pack_llmb_archive(install, tmp_path, extra=[(info, b"x\n")])
    proc = run_cli("evidence", "init", str(archive))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stderr.strip().endswith(
        "member '../x': expected a path inside the archive, got one that climbs out with '..' or holds control "
        "characters. Unpack it yourself, look at what it holds, and give the folder to `evidence init` instead")
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path.parent / "x").exists() and not (tmp_path / "x").exists()
    assert not list(tmp_path.glob("llmb-archive_*/"))


def test_a_baselines_file_that_is_not_there_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli("certify", str(ROOT / "evidence" / "gb200-seed"), "--baselines", str(tmp_path / "none.yaml"),
                   "--reports-dir", str(tmp_path / "r"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == (f"error: {tmp_path / 'none.yaml'}: no such baselines file. Give the file of "
                                   "targets (docs/reference.md)")


def test_a_bundle_shipping_its_own_lenient_catalog_is_refused(tmp_path: Path) -> None:
    """Issue 55: the degraded sample with a lenient catalog of the shipped id inside the bundle stays uncertified."""
    import shutil

    bundle = tmp_path / "b"
    shutil.copytree(ROOT / "evidence" / "gb200-degraded", bundle)
    lenient = re.sub(r"pass_ratio: [0-9.]+", "pass_ratio: 0.5", (REFERENCES / "exemplar-gb200.yaml").read_text())
    (bundle / "mine.yaml").write_text(re.sub(r"(_min: )[0-9.]+", r"\g<1>0.1", lenient))
    text = (bundle / "bundle.yaml").read_text().replace("catalog: exemplar-gb200", "catalog: mine.yaml")
    (bundle / "bundle.yaml").write_text(text)
    from clustercert.evidence.bundle import seal_bundle

    seal_bundle(load_bundle(bundle))
    proc = run_cli("certify", str(bundle), "--reports-dir", str(tmp_path / "r"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "catalog: expected a catalog shipped in" in proc.stderr and "certify --catalog mine.yaml" in proc.stderr
    assert "CERTIFIED" not in proc.stdout
