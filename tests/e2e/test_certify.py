"""The whole pipeline as a user runs it: certify the shipped sample, verify, tamper, bad evidence."""

from __future__ import annotations

import io
import itertools
import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clustercert.evidence.bundle import load_bundle
from tests.conftest import ISOLATED_ENV, ROOT, run_cli, run_cli_on_terminal

SAMPLE = ROOT / "evidence" / "gb200-seed"
pytestmark = pytest.mark.slow

# DOMAIN.md section 4, worked numbers (FLOPs per sequence) in each baseline's convention.
FLOPS = {"llama3-70b": 3.68003e15, "grok1-314b": 4.27405e15, "deepseek-v3": 1.06493e15}
PEAK = {"bf16": 2450e12, "fp8": 4900e12}
STEP_LINE = re.compile(r"iteration (\d+)/\d+ .*train_step_timing in s: ([0-9.]+)")


@pytest.fixture(scope="session")
def certified(seed_certified: dict[str, Any]) -> dict[str, Any]:
    assert seed_certified["rc"] == 0, seed_certified["stderr"]
    return seed_certified


def _window_times(log: Path) -> list[float]:
    times = {}
    for line in log.read_text().splitlines():
        m = STEP_LINE.search(line)
        if m and 35 <= int(m.group(1)) <= 44:
            times[int(m.group(1))] = float(m.group(2))
    return [times[i] for i in range(35, 45)]


def test_certify_writes_the_run_folder(certified: dict[str, Any]) -> None:
    run_dir = certified["run_dir"]
    assert certified["out"]["outcome"] == "CERTIFIED"
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "catalog.yaml", "manifest.dsse.json", "manifest.json", "report.html", "report.pdf", "report.redacted.html",
        "report.redacted.pdf", "results.json", "validation.json"]
    # The cover's notice, on every run signed with a development key (the "created a development key" note is
    # printed only by the run that created the key: another test may have, depending on the order tests run in).
    assert "signed with a development key: run `clustercert keys init`" in certified["stdout"]


def test_results_are_computed_from_the_raw_log(certified: dict[str, Any]) -> None:
    results = json.loads((certified["run_dir"] / "results.json").read_text())
    assert results["schema_version"] == 1 and results["outcome"] == "CERTIFIED"
    assert results["valid_until"] is not None
    by_name = {w["workload"]: w for w in results["workloads"]}
    for name, flops in FLOPS.items():
        w = by_name[name]
        log = certified["bundle"] / next(r for r in w["repeats"] if r["run"] == w["run_used"])["file"]
        times = _window_times(log)
        mean = statistics.fmean(times)
        assert w["step_time_s"]["mean"] == pytest.approx(mean, rel=1e-12)
        assert w["step_time_s"]["std"] == pytest.approx(statistics.stdev(times), rel=1e-9)
        assert w["step_time_s"]["window"] == [35, 44]
        assert w["tokens_per_s_per_gpu"] == pytest.approx(w["seq_len"] * w["gbs"] / mean / 512, rel=1e-12)
        assert w["mfu"] == pytest.approx(flops * w["gbs"] / mean / 512 / PEAK[w["precision"]], rel=1e-4)
        assert w["tflops_per_gpu"] == pytest.approx(flops * w["gbs"] / mean / 512 / 1e12, rel=1e-4)
        assert w["delta_pct"] == pytest.approx(100 * (w["baseline"]["step_time_s"] / mean - 1), rel=1e-9)
        assert w["ci_low_pct"] <= w["delta_pct"] <= w["ci_high_pct"]
        assert w["status"] == "PASS" and w["baseline"]["source"]
    # The seed scenario's margins (DOMAIN.md section 1): about +1.9, +4.7, +3.8, +2.4 %.
    margins = {"deepseek-v3": 1.9, "grok1-314b": 4.7, "llama3.1-405b": 3.8, "llama3-70b": 2.4}
    for name, margin in margins.items():
        assert by_name[name]["delta_pct"] == pytest.approx(margin, abs=0.4)
    assert by_name["llama3-70b"]["baseline"]["illustrative"] is True


def test_pdf_is_a_real_report(certified: dict[str, Any]) -> None:
    from pypdf import PdfReader

    reader = PdfReader(certified["run_dir"] / "report.pdf")
    cover = reader.pages[0].extract_text()  # the outcome, the cluster and the notices, on the first page
    assert "CERTIFIED" in cover and "example-cloud-gb200-east" in cover
    assert "development key" in cover and "synthetic" in cover
    assert len(reader.pages) >= 2


def test_verify_accepts_the_untouched_run(certified: dict[str, Any]) -> None:
    proc = run_cli("verify", str(certified["run_dir"]), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["valid"] and out["signer"].startswith("SHA256:")
    assert out["checked"] == 7 + 1 + len(load_bundle(certified["bundle"]).evidence_files())
    assert out["pdf_signer"] == "Organization: clustercert, Common Name: clustercert development key"
    assert out["warnings"] == [_dev_warning(out["signer"])]


def _dev_warning(signer: str) -> str:
    return (f"signed with a development key ({signer}), which certify created on its own: it proves the files "
            "are unchanged, not who certified them. Sign with a real key (`clustercert keys init`) for a report "
            "others can trust")


def test_verify_prints_the_development_key_warning(certified: dict[str, Any]) -> None:
    proc = run_cli("verify", str(certified["run_dir"]))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning: signed with a development key (SHA256:" in proc.stderr


def _copy(certified: dict[str, Any], dest: Path) -> tuple[Path, Path]:
    run_dir, bundle = dest / "run", dest / "bundle"
    shutil.copytree(certified["run_dir"], run_dir)
    shutil.copytree(certified["bundle"], bundle)
    return run_dir, bundle


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


RUN_FILES = ["catalog.yaml", "report.html", "report.pdf", "report.redacted.html", "report.redacted.pdf",
             "results.json", "validation.json", "manifest.json", "manifest.dsse.json"]
EVIDENCE = "training/grok1-314b/bf16/512/r2.log"
KEY_DIR = Path(ISOLATED_ENV["CLUSTERCERT_KEY_DIR"])


def test_verify_command_names_the_first_broken_item(certified: dict[str, Any], tmp_path: Path) -> None:
    run_dir, bundle = _copy(certified, tmp_path)
    _flip_byte(run_dir / "results.json")
    (run_dir / "report.html").unlink()
    proc = run_cli("verify", str(run_dir), "--bundle", str(bundle))
    assert proc.returncode == 1
    signer = json.loads((run_dir / "manifest.json").read_text())["predicate"]["run"]["signer"]
    assert proc.stderr.splitlines() == [
        f"invalid: {run_dir / 'report.html'}: missing (listed in the manifest)",
        f"  also: {run_dir / 'results.json'}: changed (sha256 differs from the manifest)",
        f"warning: {_dev_warning(signer)}",
    ]


@pytest.mark.parametrize(("action", "target"), [
    *[("change", name) for name in RUN_FILES],
    *[("remove", name) for name in RUN_FILES],
    ("add", "extra.txt"),
    ("change", "evidence"), ("remove", "evidence"), ("change", "bundle.yaml"),
])
def test_verify_names_the_tampered_file(certified: dict[str, Any], tmp_path: Path, action: str, target: str) -> None:
    from clustercert.attest.manifest import verify_run

    run_dir, bundle = _copy(certified, tmp_path)
    victim = bundle / EVIDENCE if target == "evidence" else bundle / target if target == "bundle.yaml" \
        else run_dir / target
    if action == "add":
        victim.write_text("hello")
    elif action == "remove":
        victim.unlink()
    else:
        _flip_byte(victim)
    # In-process (what `verify` prints after "invalid: "); the command line itself is tested below.
    result = verify_run(run_dir, key_dir=KEY_DIR, trust=None, bundle=bundle)
    assert not result.ok
    assert result.problems[0].startswith(f"{victim}: "), result.problems


def _append_incremental_update(pdf: Path) -> None:
    """What an editor does when it saves changes: a new revision after the signed one."""
    import io

    from pyhanko.pdf_utils import generic
    from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter

    writer = IncrementalPdfFileWriter(io.BytesIO(pdf.read_bytes()))
    writer.root["/Lang"] = generic.pdf_string("fr")
    writer.update_root()
    out = io.BytesIO()
    writer.write(out)
    pdf.write_bytes(out.getvalue())


def test_verify_of_a_run_whose_bundle_moved_says_so_once_and_how_to_point_at_it(certified: dict[str, Any],
                                                                                tmp_path: Path) -> None:
    """The run records its bundle's absolute path; where no bundle.yaml is there (moved, or a folder --bundle gave
    that holds none) one problem says so, with the count of evidence files not checked, not one per file."""
    run_dir, bundle = _copy(certified, tmp_path)
    statement = json.loads((run_dir / "manifest.json").read_text())
    recorded = statement["predicate"]["run"]["bundle_path"]
    assert Path(recorded).is_absolute() and Path(recorded).resolve() == Path(certified["bundle"]).resolve()
    evidence = sum(1 for s in statement["subject"] if s["name"].startswith("evidence/"))
    assert evidence > 50  # the seed's logs, bundle.yaml and its seal
    signer = statement["predicate"]["run"]["signer"]
    gone = tmp_path / "elsewhere"
    gone.mkdir()
    proc = run_cli("verify", str(run_dir), "--bundle", str(gone))
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"invalid: {gone / 'bundle.yaml'}: missing (the folder --bundle gave), so the {evidence} evidence file(s) the "
        "manifest lists cannot be checked. Give --bundle DIR where the bundle is now",
        f"warning: {_dev_warning(signer)}",
    ]
    moved = run_cli("verify", str(run_dir), "--bundle", str(bundle))  # where it is now: valid
    assert moved.returncode == 0 and moved.stdout.startswith("valid: "), moved.stderr


def test_pdf_with_an_appended_update_is_invalid_even_in_a_re_signed_manifest(
    certified: dict[str, Any], tmp_path: Path
) -> None:
    from clustercert.attest.manifest import write_manifest
    from clustercert.attest.signing import load_signing_key

    run_dir, bundle = _copy(certified, tmp_path)
    pdf = run_dir / "report.pdf"
    _append_incremental_update(pdf)
    proc = run_cli("verify", str(run_dir), "--bundle", str(bundle))
    assert proc.returncode == 1
    # its hash is compared first: a PDF that is not the one signed is never parsed (issue 55 item 6)
    assert proc.stderr.startswith(f"invalid: {pdf}: changed (sha256 differs from the manifest)"), proc.stderr
    # An insider with the manifest key re-signs the manifest over the altered PDF: the PDF check still fails.
    statement = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").unlink()
    (run_dir / "manifest.dsse.json").unlink()
    key = load_signing_key(KEY_DIR, None)
    evidence = [s["name"][len("evidence/"):] for s in statement["subject"] if s["name"].startswith("evidence/")]
    predicate = {k: v for k, v in statement["predicate"].items() if k not in ("schema_version", "pdf_signer")}
    write_manifest(run_dir, bundle, evidence, predicate, key)
    proc = run_cli("verify", str(run_dir), "--bundle", str(bundle))
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"invalid: {pdf}: the PDF signature does not cover the whole file"), proc.stderr


def test_pdf_first_revision_is_the_unsigned_report(certified: dict[str, Any]) -> None:
    """The signature is an incremental update: cutting the file at the first %%EOF gives a PDF that draws the
    same pages (each page's content stream, byte for byte, and the cover's text) and carries no signature."""
    from pypdf import PdfReader

    data = (certified["run_dir"] / "report.pdf").read_bytes()
    first = data[: data.index(b"%%EOF") + len(b"%%EOF")]
    assert len(first) < len(data) and data.startswith(first)
    unsigned, signed = PdfReader(io.BytesIO(first)), PdfReader(io.BytesIO(data))
    drawn = [[p.get_contents().get_data() for p in pdf.pages] for pdf in (unsigned, signed)]
    assert drawn[0] == drawn[1] and len(drawn[0]) >= 2 and all(drawn[0])
    assert unsigned.pages[0].extract_text() == signed.pages[0].extract_text()
    assert "CERTIFIED" in unsigned.pages[0].extract_text()
    assert "/AcroForm" not in unsigned.trailer["/Root"] and "/AcroForm" in signed.trailer["/Root"]


def test_verify_refuses_an_untrusted_signer(certified: dict[str, Any], tmp_path: Path) -> None:
    run_dir, bundle = _copy(certified, tmp_path)
    other_keys = tmp_path / "other-keys"
    assert run_cli("keys", "init", env={"CLUSTERCERT_KEY_DIR": str(other_keys)}).returncode == 0
    proc = run_cli("verify", str(run_dir), "--bundle", str(bundle), env={"CLUSTERCERT_KEY_DIR": str(other_keys)})
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"invalid: {run_dir / 'manifest.dsse.json'}: signed by SHA256:")
    assert "which is not a trusted key" in proc.stderr
    proc = run_cli("verify", str(run_dir), "--bundle", str(bundle), "--trust", str(other_keys / "manifest_ed25519.pub"))
    assert proc.returncode == 1 and "which is not a trusted key" in proc.stderr
    # Trusting the right key explicitly (from anywhere) is enough, for the envelope and, through it, the PDF.
    mine = KEY_DIR / "manifest_ed25519.pub"
    proc = run_cli("verify", str(run_dir), "--bundle", str(bundle), "--trust", str(mine),
                   env={"CLUSTERCERT_KEY_DIR": str(other_keys)})
    assert proc.returncode == 0, proc.stderr


def test_rerun_under_another_key_says_first_why_the_redacted_copy_will_differ(certified: dict[str, Any],
                                                                               tmp_path: Path) -> None:
    """The redacted copy's pseudonyms are keyed by the signing key: a re-run of a redacted run under another key
    says so before any work, naming both keys; with the evidence gone it then stops at the first missing file."""
    run_dir = certified["run_dir"]
    other_keys = tmp_path / "other-keys"
    made = run_cli("keys", "init", env={"CLUSTERCERT_KEY_DIR": str(other_keys)})
    assert made.returncode == 0, made.stderr
    # keys init names the manifest key, then the PDF certificate's SHA-256
    other = made.stdout.strip().rpartition("manifest key ")[2].split(";")[0]
    mine = json.loads((run_dir / "manifest.json").read_text())["predicate"]["run"]["signer"]
    assert other.startswith("SHA256:") and mine.startswith("SHA256:") and other != mine
    gone = tmp_path / "gone"
    gone.mkdir()
    proc = run_cli("rerun", str(run_dir), "--bundle", str(gone), env={"CLUSTERCERT_KEY_DIR": str(other_keys)})
    assert proc.returncode == 3, proc.stderr
    warning, error = proc.stderr.splitlines()
    assert warning == (f"warning: the run was signed by key {mine}; this re-run signs with {other}. The redacted "
                       "copy's pseudonyms are keyed by the signing key, so report.redacted.html and "
                       "report.redacted.pdf will differ: set CLUSTERCERT_KEY_DIR to the keys that signed the run to "
                       "reproduce them")
    assert error.startswith(f"error: {gone / 'bundle.yaml'}: missing; the run's manifest lists it"), error
    # under the key that signed it, no such warning (and the same stop at the missing evidence)
    proc = run_cli("rerun", str(run_dir), "--bundle", str(gone))
    assert proc.returncode == 3 and proc.stderr.startswith(f"error: {gone}"), proc.stderr


def test_pdf_signed_by_another_certificate_is_untrusted(certified: dict[str, Any], tmp_path: Path) -> None:
    """A PDF re-signed by someone else's certificate fails, even listed in a manifest signed by a trusted key."""
    import datetime as dt

    from clustercert.attest.manifest import write_manifest
    from clustercert.attest.signing import init_keys, load_signing_key, sign_pdf

    run_dir, bundle = _copy(certified, tmp_path)
    pdf = run_dir / "report.pdf"
    data = pdf.read_bytes()
    unsigned = data[: data.index(b"%%EOF") + len(b"%%EOF")] + b"\n"
    other = init_keys(tmp_path / "other", passphrase=None, common_name="someone else", dev=False,
                      now=dt.datetime.now(dt.UTC))
    pdf.write_bytes(sign_pdf(other, unsigned, reason="x", location="y"))
    statement = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").unlink()
    (run_dir / "manifest.dsse.json").unlink()
    key = load_signing_key(KEY_DIR, None)
    evidence = [s["name"][len("evidence/"):] for s in statement["subject"] if s["name"].startswith("evidence/")]
    predicate = {k: v for k, v in statement["predicate"].items() if k not in ("schema_version", "pdf_signer")}
    write_manifest(run_dir, bundle, evidence, predicate, key)
    proc = run_cli("verify", str(run_dir), "--bundle", str(bundle))
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"invalid: {pdf}: the PDF is signed by Organization: clustercert, "
                                  "Common Name: someone else, which is not a trusted certificate"), proc.stderr


def test_verify_and_pyhanko_name_the_signer_keys_init_was_given(certified: dict[str, Any], tmp_path: Path) -> None:
    """`keys init` with a common name, organisation and e-mail: the certificate's subject names them, and both
    `verify` and a plain pyHanko validation (its API, no clustercert) say who signed."""
    import hashlib

    from asn1crypto import x509 as asn1_x509
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from pyhanko.pdf_utils.reader import PdfFileReader
    from pyhanko.sign.validation import validate_pdf_signature
    from pyhanko_certvalidator import ValidationContext

    from clustercert.attest.manifest import write_manifest
    from clustercert.attest.signing import load_signing_key, sign_pdf

    keys = tmp_path / "named-keys"
    made = run_cli("keys", "init", "--common-name", "Jane Auditor", "--organisation", "Example Audit Ltd",
                   "--email", "jane@example.com", env={"CLUSTERCERT_KEY_DIR": str(keys)})
    assert made.returncode == 0, made.stderr
    cert = x509.load_pem_x509_certificate((keys / "pdf_signer.cert.pem").read_bytes())
    sha = hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
    assert made.stdout.strip().endswith(f"PDF certificate SHA-256 {sha}"), made.stdout
    run_dir, bundle = _copy(certified, tmp_path)
    pdf = run_dir / "report.pdf"
    named = load_signing_key(keys, None)
    for copy in (pdf, run_dir / "report.redacted.pdf"):  # each PDF of the run folder, signed by the named signer
        data = copy.read_bytes()
        copy.write_bytes(sign_pdf(named, data[: data.index(b"%%EOF") + len(b"%%EOF")] + b"\n", reason="x",
                                  location="y"))
    statement = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").unlink()
    (run_dir / "manifest.dsse.json").unlink()
    evidence = [s["name"][len("evidence/"):] for s in statement["subject"] if s["name"].startswith("evidence/")]
    predicate = {k: v for k, v in statement["predicate"].items() if k not in ("schema_version", "pdf_signer")}
    write_manifest(run_dir, bundle, evidence, predicate, named)
    proc = run_cli("verify", str(run_dir), "--bundle", str(bundle), "--json", env={"CLUSTERCERT_KEY_DIR": str(keys)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shown = json.loads(proc.stdout)["pdf_signer"]
    assert all(part in shown for part in ("Jane Auditor", "Example Audit Ltd", "jane@example.com")), shown
    # pyHanko alone, trusting the certificate the signer handed out
    with pdf.open("rb") as handle:
        [signature] = PdfFileReader(handle).embedded_signatures
        root = asn1_x509.Certificate.load(cert.public_bytes(serialization.Encoding.DER))
        status = validate_pdf_signature(signature, ValidationContext(trust_roots=[root], allow_fetching=False))
    assert status.intact and status.valid and status.trusted
    subject = status.signing_cert.subject.native
    assert (subject["common_name"], subject["organization_name"], subject["email_address"]) == (
        "Jane Auditor", "Example Audit Ltd", "jane@example.com")


def test_an_unknown_profile_is_refused_in_one_line_before_any_run(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    proc = run_cli("certify", str(SAMPLE), "--profile", "smoke", "--reports-dir", str(reports))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == ("error: --profile: expected one of the profiles of catalog "
                                                    "exemplar-gb200 (full, network, health), got 'smoke'")
    assert "Traceback" not in proc.stderr and not list(reports.glob("*/results.json"))


def test_keys_init_refuses_an_address_that_is_not_one(tmp_path: Path) -> None:
    proc = run_cli("keys", "init", "--email", "jane at example", env={"CLUSTERCERT_KEY_DIR": str(tmp_path / "k")})
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: keys init --email: expected an address such as name@example.com, got "
                                   "'jane at example'")
    assert not (tmp_path / "k").exists()


def test_verify_warns_when_the_certification_has_expired(certified: dict[str, Any]) -> None:
    import datetime as dt

    from clustercert.attest.manifest import verify_run

    run_dir = certified["run_dir"]
    until = dt.date.fromisoformat(certified["out"]["valid_until"])
    key_dir = KEY_DIR
    ok = verify_run(run_dir, key_dir=key_dir, trust=None, bundle=None, today=until)
    dev = _dev_warning(ok.signer or "")
    assert ok.ok and ok.warnings == [dev]
    late = verify_run(run_dir, key_dir=key_dir, trust=None, bundle=None, today=until + dt.timedelta(days=1))
    assert late.ok and late.warnings == [
        dev, f"the certification expired on {until}; the signatures are still checked as above"]


def test_redacted_copy_hides_hostnames_the_auditor_copy_keeps_them(certified: dict[str, Any]) -> None:
    nodes = load_bundle(certified["bundle"]).spec.system.nodes
    auditor = (certified["run_dir"] / "report.html").read_text()
    customer = (certified["run_dir"] / "report.redacted.html").read_text()
    assert all(n in auditor for n in nodes[:3])
    # not even inside run ids and file names (nccl-pair-gb-r4-n10-gb-r7-n10, pair/gb-r1-n02-gb-r2-n02.log)
    assert not any(re.search(rf"(?<![A-Za-z0-9]){re.escape(n)}(?![A-Za-z0-9])", customer) for n in nodes)
    assert "customer copy" in customer


def test_changed_evidence_of_a_sealed_bundle_is_refused(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(SAMPLE, bundle)
    victim = bundle / "training" / "deepseek-v3" / "bf16" / "512" / "r3.log"
    _flip_byte(victim)
    proc = run_cli("certify", str(bundle), "--reports-dir", str(tmp_path / "reports"))
    assert proc.returncode == 3
    assert proc.stderr.strip() == (
        f"error: {victim}: changed since the bundle was sealed (sha256 differs from MANIFEST.sha256)")


def test_a_long_hash_of_the_evidence_is_progress_and_the_refusal_comes_last(tmp_path: Path) -> None:
    """At cluster scale the load hashes gigabytes before any flow starts (a 4,096-GPU bundle: 20 s). Here one log
    grown to 1 GiB (a sparse file: no disk used, 3-4 s to read) and so changed since the seal: while it is hashed,
    plain lines name it and how far the load is; then the refusal, alone on its line, last."""
    bundle = tmp_path / "bundle"
    shutil.copytree(SAMPLE, bundle)
    rel = "training/deepseek-v3/bf16/512/r3.log"
    manifest = bundle / "MANIFEST.sha256"  # a seal from before sizes were recorded: the file is hashed to be judged
    manifest.write_text("".join(ln for ln in manifest.read_text().splitlines(keepends=True) if not ln.startswith("#")))
    with (bundle / rel).open("r+b") as handle:
        handle.seek(1024**3 - 1)
        handle.write(b"\n")
    files = len(load_bundle(bundle).evidence_files()) + 1  # and bundle.yaml
    proc = run_cli("certify", str(bundle), "--reports-dir", str(tmp_path / "reports"))
    assert proc.returncode == 3, proc.stderr
    *progress, error = proc.stderr.splitlines()
    assert error == f"error: {bundle / rel}: changed since the bundle was sealed (sha256 differs from MANIFEST.sha256)"
    said = [re.fullmatch(rf"progress \[ *([0-9.]+) s\] hash: sha256 of the evidence: {re.escape(rel)} \(1\.0 GiB\); "
                         rf"(\d+) of {files} files \(([0-9.]+ [KMG]?i?B) of 1\.0 GiB\) hashed", line)
            for line in progress]
    assert said and all(said), progress
    assert all(float(m[1]) >= 1.0 for m in said if m)  # the first second says nothing


def test_every_file_changed_since_the_seal_is_counted_and_evidence_check_names_each(tmp_path: Path) -> None:
    """The refusal named the first changed file only: the run was refused again for the next one, once that was
    mended. It names the first and counts the rest; the seal's check lists each (evidence check's problems)."""
    from clustercert.runs.folder import seal_problems

    bundle = tmp_path / "bundle"
    shutil.copytree(SAMPLE, bundle)
    victims = [bundle / "collectives" / "cross-rack" / "128gpus-2.log",  # in MANIFEST.sha256's order
               bundle / "training" / "deepseek-v3" / "bf16" / "512" / "r3.log"]
    for victim in victims:
        _flip_byte(victim)
    gone = bundle / "notes.txt"  # sealed with the bundle, removed since
    gone.write_text("rack 3 recabled\n")
    manifest = bundle / "MANIFEST.sha256"
    manifest.write_text(manifest.read_text() + f"{'0' * 64}  notes.txt\n")
    gone.unlink()
    proc = run_cli("certify", str(bundle), "--reports-dir", str(tmp_path / "reports"))
    assert (proc.returncode, proc.stdout) == (3, ""), proc.stdout + proc.stderr
    assert proc.stderr == (
        f"error: {victims[0]}: changed since the bundle was sealed (sha256 differs from MANIFEST.sha256); and 2 more "
        "files changed or missing since the bundle was sealed (`clustercert evidence check` names each)\n")
    assert [str(p) for p in seal_problems(load_bundle(bundle))] == [
        *(f"{v}: changed since the bundle was sealed (sha256 differs from MANIFEST.sha256)" for v in victims),
        f"{gone}: listed in MANIFEST.sha256 but missing. Restore it or re-seal the bundle"]


def test_bad_catalog_is_a_configuration_error(tmp_path: Path) -> None:
    bad = tmp_path / "cat.yaml"
    bad.write_text("schema_version: 1\nid: x\n")
    proc = run_cli("certify", str(SAMPLE), "--catalog", str(bad), "--reports-dir", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bad}") and "Traceback" not in proc.stderr


def test_standalone_script_verifies_without_clustercert(certified: dict[str, Any], tmp_path: Path) -> None:
    """scripts/verify_run_folder.py (documented in the README) needs only Python and cryptography."""
    import subprocess
    import sys

    run_dir, bundle = _copy(certified, tmp_path)
    script = [sys.executable, "-I", str(ROOT / "scripts" / "verify_run_folder.py"), str(run_dir),
              "--key", str(KEY_DIR / "manifest_ed25519.pub"), "--bundle", str(bundle)]
    ok = subprocess.run(script, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    _flip_byte(bundle / EVIDENCE)
    bad = subprocess.run(script, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert bad.returncode == 1
    assert bad.stderr.strip() == f"invalid: {bundle / EVIDENCE}: sha256 differs from the manifest"


def test_a_rerun_stopped_midway_leaves_nothing_in_the_temporary_folder(certified: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    """SIGTERM ends a command with os._exit, past the `finally` that removed the re-run's temporary folder: each
    stopped re-run left one (with the replayed run's files once it had written them). Stopped once the replayed
    run's folder exists, it leaves nothing there."""
    import os
    import signal
    import time

    from tests.conftest import shared_prefect_server

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "TMPDIR": str(temporary),
           "PREFECT_API_URL": shared_prefect_server().api_url}
    run_id = json.loads((certified["run_dir"] / "manifest.json").read_text())["predicate"]["run"]["run_id"]
    rerun = subprocess.Popen([sys.executable, "-m", "clustercert", "rerun", str(certified["run_dir"])], cwd=ROOT,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not list(temporary.glob(f"clustercert-rerun-*/{run_id}")):
        assert rerun.poll() is None and time.monotonic() < deadline, rerun.communicate()
        time.sleep(0.05)
    rerun.send_signal(signal.SIGTERM)
    out, err = rerun.communicate(timeout=60)
    assert rerun.returncode == 143, out + err
    assert err.splitlines()[-1].startswith("stopped by SIGTERM"), err
    assert list(temporary.iterdir()) == []


# `clustercert rerun` as a user runs it, SIGTERM arriving just as its temporary folder is made (tempfile.mkdtemp
# returned; the handler runs at the next step of the main thread)
_RERUN_SIGNALLED = """
import os, signal, sys, tempfile
from clustercert.cli.app import entry

made = tempfile.mkdtemp


def mkdtemp(*args, **kwargs):
    name = made(*args, **kwargs)
    print("made", name, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    return name


tempfile.mkdtemp = mkdtemp
sys.argv = ["clustercert", "rerun", sys.argv[1]]
entry()
"""


def test_a_rerun_stopped_as_its_temporary_folder_is_made_leaves_nothing(certified: dict[str, Any],
                                                                         tmp_path: Path) -> None:
    """The re-run's temporary folder is made and recorded as the run's own with a signal waiting: stopped in
    between, the re-run left the empty folder in the temporary folder."""
    import os

    from tests.conftest import shared_prefect_server

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "TMPDIR": str(temporary),
           "PREFECT_API_URL": shared_prefect_server().api_url}
    run = subprocess.run([sys.executable, "-c", _RERUN_SIGNALLED, str(certified["run_dir"])], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 143, run.stdout + run.stderr
    assert run.stderr.splitlines()[-1].startswith("stopped by SIGTERM"), run.stderr
    assert run.stdout.startswith(f"made {temporary}{os.sep}clustercert-rerun-"), run.stdout
    assert list(temporary.iterdir()) == []


def test_rerun_on_one_core_of_a_copied_bundle_reproduces_both_copies_byte_for_byte(certified: dict[str, Any],
                                                                                   tmp_path: Path) -> None:
    """Same inputs + the run metadata recorded in the manifest => the same results, the same HTML bytes and the same
    unsigned PDF (the signed PDF's first revision), for the auditor's report and its redacted copy. The
    certification rendered the redacted copy's PDF in a second process (its progress says so); the re-run, held to
    one core as a user's job on one core is, renders both in one process, one after the other: the bytes are the
    same. The auditor re-runs it from a copy of the evidence in a folder of their own (`--bundle`): results and
    reports name each evidence file by its path in the bundle, so where the bundle lies changes nothing (they named
    it by its whole path: every name differed, 689 differences, and no re-run of a copied bundle was identical)."""
    assert "report: report.redacted.pdf: rendered by a second process meanwhile" in certified["stderr"]
    one_core = ("taskset", "-c", "0")
    held = subprocess.run([*one_core, sys.executable, "-c", "from clustercert.report.ahead import usable_cores; "
                           "print(usable_cores())"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert held.stdout == "1\n", held.stdout + held.stderr  # so: no second process for the PDF, nor the charts
    run_dir = certified["run_dir"]
    results = (run_dir / "results.json").read_text()
    html = (run_dir / "report.html").read_text()
    assert str(certified["bundle"]) not in results  # the report names the bundle once: in the command it re-runs
    assert html.count(str(certified["bundle"])) == 1
    assert f"<code>clustercert certify {certified['bundle']}</code>" in html
    named = {e["file"] for c in json.loads(results)["checks"] for e in c["evidence"]}
    assert "training/llama3-70b/fp8/512/r1.log" in named and all((certified["bundle"] / f).is_file() for f in named)
    copy = tmp_path / "auditor" / "evidence"
    shutil.copytree(certified["bundle"], copy)
    # at a terminal, as an auditor runs it: a live line shows the re-run's stages, the clock running
    proc, shown = run_cli_on_terminal("rerun", str(run_dir), "--bundle", str(copy), prefix=one_core, timeout=600)
    assert proc.returncode == 0, proc.stdout + shown
    assert proc.stdout == (f"identical: results.json, report.html and the unsigned report.pdf, report.redacted.html "
                           f"and the unsigned report.redacted.pdf of {run_dir} reproduced\n")
    assert "Traceback" not in shown
    stages = [stage for stage, _ in itertools.groupby(re.findall(r"\[\s*[\d.]+ s\] (\w+): ", shown))]
    assert stages[0] == "start" and stages[-1] == "compare" and "report" in stages, shown
    assert shown.rstrip().splitlines()[-1].startswith("done in ")


def test_the_collection_window_is_in_results_and_the_signed_manifest(certified: dict[str, Any]) -> None:
    results = json.loads((certified["run_dir"] / "results.json").read_text())
    window = results["evidence_window"]
    # the seed's first stamp is its training logs' banner ([NeMo I 2026-11-02 03:00:00 ...]); its last is the
    # resilience run's final event, 2026-11-02 12:00:11 UTC (evidence/gb200-seed/resilience/events.jsonl)
    assert window["first"] == "2026-11-02T03:00:00Z" and window["last"].startswith("2026-11-02T12:00:11")
    assert results["valid_until"] == "2027-11-02"  # 12 months from the last evidence date, not from today
    statement = json.loads((certified["run_dir"] / "manifest.json").read_text())
    predicate = statement["predicate"]
    assert predicate["evidence_window"] == window and predicate["valid_until"] == "2027-11-02"
