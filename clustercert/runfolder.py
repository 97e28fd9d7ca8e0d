"""The steps of a certification that touch disk: load inputs, parse runs, write and seal the run folder."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustercert.attest import write_manifest
from clustercert.bundle import LoadedBundle, RunKind, RunSpec, load_bundle, read_seal
from clustercert.catalog import LoadedCatalog, load_catalog
from clustercert.errors import EvidenceError
from clustercert.hashing import sha256_file
from clustercert.parsers import TrainingLog, parse_training_log
from clustercert.report import build_context, render_html, render_pdf
from clustercert.results import RunMeta, dump_json
from clustercert.signing import KeyPair
from clustercert.software import software_versions

__all__ = ["Inputs", "check_seal", "load_inputs", "parse_training_run", "write_run_folder"]


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


def write_run_folder(
    run_dir: Path,
    inputs: Inputs,
    results: dict[str, Any],
    meta: RunMeta,
    key: KeyPair,
    templates_dir: Path,
    validation: dict[str, Any] | None = None,
) -> dict[str, Path]:
    """results.json, validation.json (when given), catalog copy, report.html, report.pdf, then manifest.json
    and its signature."""
    run_dir.mkdir(parents=True, exist_ok=False)
    bundle, catalog = inputs.bundle, inputs.catalog
    software = software_versions()
    (run_dir / "results.json").write_text(dump_json(results), encoding="utf-8")
    if validation is not None:
        (run_dir / "validation.json").write_text(dump_json(validation), encoding="utf-8")
    shutil.copyfile(catalog.path, run_dir / "catalog.yaml")
    inventory = [
        {"path": rel, "bytes": (bundle.root / rel).stat().st_size, "sha256": sha256_file(bundle.root / rel)}
        for rel in bundle.evidence_files()
    ]
    context = build_context(
        results,
        meta=meta.to_json(),
        system=bundle.spec.system.model_dump(),
        models={k: v.name for k, v in catalog.spec.models.items()},
        sources={k: v.model_dump() for k, v in catalog.spec.sources.items()},
        inventory=inventory,
        software=software,
    )
    html = render_html(context, templates_dir)
    (run_dir / "report.html").write_text(html, encoding="utf-8")
    (run_dir / "report.pdf").write_bytes(render_pdf(html, run_dir))
    predicate = {
        "outcome": results["outcome"],
        "catalog": {"id": catalog.spec.id, "sha256": catalog.sha256},
        "software": software,
        "run": meta.to_json(),
        "bundle_path": meta.bundle_path,
        "cluster": bundle.spec.cluster.name,
    }
    write_manifest(run_dir, bundle.root, ["bundle.yaml", *bundle.evidence_files()], predicate, key)
    return {name: run_dir / name for name in ("report.html", "report.pdf", "results.json", "manifest.json")}
