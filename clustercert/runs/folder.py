"""The steps of a certification that touch disk: load inputs, parse runs, write and seal the run folder."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustercert.attest.manifest import ENVELOPE, write_manifest
from clustercert.attest.signing import KeyPair, sign_pdf
from clustercert.attest.software import software_record
from clustercert.catalog import LoadedCatalog, load_catalog
from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import LoadedBundle, RunKind, RunSpec, load_bundle, read_seal
from clustercert.evidence.hashing import sha256_file
from clustercert.parsers import TrainingLog, parse_training_log
from clustercert.report import Redactor, build_context, render_html, render_pdf
from clustercert.runs.results import RunMeta, dump_json

__all__ = ["Inputs", "check_seal", "load_inputs", "parse_training_run", "render_reports", "write_run_folder"]


@dataclass(frozen=True)
class Inputs:
    bundle: LoadedBundle
    catalog: LoadedCatalog


def load_inputs(bundle_path: Path, references_dir: Path, catalog_override: str | None = None) -> Inputs:
    bundle = load_bundle(bundle_path)
    catalog = load_catalog(catalog_override or bundle.spec.catalog, references_dir, relative_to=bundle.root)
    return Inputs(bundle, catalog)


def check_seal(bundle: LoadedBundle) -> None:
    """When the bundle is sealed, every listed file must still match; an unsealed bundle is accepted."""
    sealed = read_seal(bundle)
    if sealed is None:
        return
    for rel, digest in sealed.items():
        path = bundle.root / rel
        if not path.is_file():
            raise EvidenceError(str(path), "listed in MANIFEST.sha256 but missing. Restore it or re-seal the bundle")
        if sha256_file(path) != digest:
            raise EvidenceError(str(path), "changed since the bundle was sealed (sha256 differs from MANIFEST.sha256)")


def parse_training_run(bundle: LoadedBundle, run: RunSpec, limit: int) -> TrainingLog | EvidenceError:
    """The parsed log of a training run, or the error that makes it unusable (kept as a finding)."""
    if run.kind is not RunKind.TRAINING:
        raise ValueError(f"run {run.id} is not a training run")
    rel = run.files[0]
    try:
        return parse_training_log(bundle.resolve(rel), f"{bundle.root / rel}", run.format, limit=limit)
    except EvidenceError as exc:
        return exc


def render_reports(
    inputs: Inputs,
    results: dict[str, Any],
    meta: RunMeta,
    software: dict[str, str],
    *,
    validation: dict[str, Any] | None,
    redaction_secret: bytes | None,
    base_dir: Path,
    templates_dir: Path,
) -> dict[str, tuple[str, bytes]]:
    """The HTML and unsigned PDF of the report ("report") and, given a secret, of its redacted copy
    ("report.redacted"): the same arguments give the same bytes (what `rerun` compares)."""
    bundle, catalog = inputs.bundle, inputs.catalog
    inventory = [
        {"path": rel, "bytes": (bundle.root / rel).stat().st_size, "sha256": sha256_file(bundle.root / rel)}
        for rel in bundle.evidence_files()
    ]
    system = bundle.spec.system.model_dump()
    models = {k: v.name for k, v in catalog.spec.models.items()}
    sources = {k: v.model_dump() for k, v in catalog.spec.sources.items()}
    copies: list[tuple[str, dict[str, Any]]] = [("report", {"results": results, "meta": meta.to_json(),
                                                           "system": system, "inventory": inventory,
                                                           "validation": validation})]
    if redaction_secret is not None:
        redactor = Redactor(redaction_secret, [str(n) for n in system.get("nodes", [])])
        copies.append(("report.redacted", {**redactor(copies[0][1]), "redacted": True}))
    out = {}
    for stem, data in copies:
        context = build_context(
            data["results"], meta=data["meta"], system=data["system"], models=models, sources=sources,
            inventory=data["inventory"], software=software, validation=data["validation"],
            redacted=bool(data.get("redacted", False)),
        )
        html = render_html(context, templates_dir)
        out[stem] = (html, render_pdf(html, base_dir))
    return out


def write_run_folder(
    run_dir: Path,
    inputs: Inputs,
    results: dict[str, Any],
    meta: RunMeta,
    key: KeyPair,
    templates_dir: Path,
    *,
    validation: dict[str, Any] | None = None,
    redact: bool = False,
) -> dict[str, Path]:
    """results.json, catalog copy, report.html, report.pdf (signed), the redacted copy when asked, then
    manifest.json and its DSSE envelope."""
    run_dir.mkdir(parents=True, exist_ok=False)
    bundle, catalog = inputs.bundle, inputs.catalog
    software = software_record()
    (run_dir / "results.json").write_text(dump_json(results), encoding="utf-8")
    if validation is not None:
        (run_dir / "validation.json").write_text(dump_json(validation), encoding="utf-8")
    shutil.copyfile(catalog.path, run_dir / "catalog.yaml")
    rendered = render_reports(inputs, results, meta, software, validation=validation,
                              redaction_secret=key.redaction_secret() if redact else None, base_dir=run_dir,
                              templates_dir=templates_dir)
    signing = {"reason": f"clustercert certification {results['outcome']} of {bundle.spec.cluster.name}",
               "location": f"run {meta.run_id}"}
    paths = {}
    for stem, (html, unsigned) in rendered.items():
        (run_dir / f"{stem}.html").write_text(html, encoding="utf-8")
        (run_dir / f"{stem}.pdf").write_bytes(sign_pdf(key, unsigned, **signing))
        paths[f"{stem}.html"] = run_dir / f"{stem}.html"
        paths[f"{stem}.pdf"] = run_dir / f"{stem}.pdf"
    predicate = {
        "outcome": results["outcome"],
        "valid_until": results["valid_until"],
        "validity_basis": results.get("validity_basis"),
        "evidence_window": results.get("evidence_window"),
        "catalog": {"id": catalog.spec.id, "sha256": catalog.sha256},
        "software": software,
        "run": meta.to_json(),
        "bundle_path": meta.bundle_path,
        "cluster": bundle.spec.cluster.name,
        "redacted_copy": redact,
    }
    write_manifest(run_dir, bundle.root, ["bundle.yaml", *bundle.evidence_files()], predicate, key)
    return {**paths, "results.json": run_dir / "results.json", "manifest.json": run_dir / "manifest.json",
            "manifest.dsse.json": run_dir / ENVELOPE}
