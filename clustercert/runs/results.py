"""results.json (schema_version 1): the outcome, every check and every workload measurement."""

from __future__ import annotations

import calendar
import datetime as dt
import json
import re
from dataclasses import dataclass
from typing import Any

import orjson

from clustercert.catalog import LoadedCatalog
from clustercert.errors import CatalogError
from clustercert.evidence.bundle import LoadedBundle
from clustercert.evidence.system import describe_system
from clustercert.evidence.window import CollectionWindow, collection_window
from clustercert.metrics.suspects import SuspectInputs, rank_suspects
from clustercert.phases.profile import apply_profile, profile_outcome, profile_section
from clustercert.runs.findings import group_findings
from clustercert.runs.history import compare_headlines, headline
from clustercert.verdicts import Check, Outcome, outcome_reasons

__all__ = [
    "RESULTS_SCHEMA_VERSION",
    "RunMeta",
    "build_results",
    "dump_json",
    "dump_json_bytes",
    "previous_run_section",
    "valid_until",
    "validity",
]

RESULTS_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class RunMeta:
    """What makes a run itself: recorded in the manifest and replayed by `rerun`."""

    run_id: str
    started_at: str  # ISO-8601 UTC, e.g. 2026-11-29T17:00:00Z
    bundle_path: str  # absolute, as the user's path named it (runs before 2026-12-06: as the user gave it)
    signer: str  # key fingerprint
    dev_key: bool
    previous_run: dict[str, Any] | None = None  # history.RunRecord.summary() of the cluster's previous run
    catalog_arg: str | None = None  # `--catalog` as the user typed it (an id or a path); None: bundle.yaml's
    baselines_arg: str | None = None  # `--baselines`, made absolute; None: none given
    profile: str = "full"  # the certification profile judged (`--profile`, else bundle.yaml's, else full)
    # who signs, as the PDF certificate names them, and its SHA-256 (attest.signing.signer_identity)
    signer_identity: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"run_id": self.run_id, "started_at": self.started_at, "bundle_path": self.bundle_path,
               "signer": self.signer, "dev_key": self.dev_key, "previous_run": self.previous_run,
               "catalog_arg": self.catalog_arg, "profile": self.profile, "signer_identity": self.signer_identity}
        if self.baselines_arg is not None:  # runs without one record what they always did
            out["baselines_arg"] = self.baselines_arg
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunMeta:
        previous = data.get("previous_run")
        return cls(run_id=str(data["run_id"]), started_at=str(data["started_at"]),
                   bundle_path=str(data["bundle_path"]), signer=str(data["signer"]), dev_key=bool(data["dev_key"]),
                   previous_run=dict(previous) if previous else None,
                   catalog_arg=None if data.get("catalog_arg") is None else str(data["catalog_arg"]),
                   baselines_arg=None if data.get("baselines_arg") is None else str(data["baselines_arg"]),
                   profile=str(data.get("profile") or "full"),
                   signer_identity={str(k): str(v) for k, v in data["signer_identity"].items()}
                   if data.get("signer_identity") else None)

    def started(self) -> dt.datetime:
        return dt.datetime.fromisoformat(self.started_at.replace("Z", "+00:00"))


def valid_until(started: dt.datetime, months: int) -> dt.date:
    """The same day `months` later (clamped to the month's last day)."""
    month0 = started.month - 1 + months
    year, month = started.year + month0 // 12, month0 % 12 + 1
    day = min(started.day, calendar.monthrange(year, month)[1])
    return dt.date(year, month, day)


def validity(window: CollectionWindow | None, started: dt.datetime, months: int) -> tuple[dt.date, str]:
    """When a certification stops being valid, and from what: the last evidence date when the evidence prints
    one (re-certifying old evidence never extends its validity), else the day certify ran (said so)."""
    if window is not None:
        return (valid_until(window.last, months),
                f"{months} months from the last evidence timestamp {window.last.date().isoformat()} "
                f"({window.last_file})")
    return (valid_until(started, months),
            f"{months} months from the day certify ran {started.date().isoformat()}: no evidence file prints a "
            "timestamp")


def pass_rule(catalog: LoadedCatalog) -> str:
    rules = catalog.spec.rules
    return (f"every suite workload's step-time ratio t_baseline / t_measured > {rules.pass_ratio:g} "
            f"({rules.repeats} of its repeats), and every other required check passes")


def build_results(
    meta: RunMeta,
    bundle: LoadedBundle,
    catalog: LoadedCatalog,
    checks: list[Check],
    workloads: list[dict[str, Any]],
    sections: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """results.json; `sections` holds each phase's own data by phase name (chart series included). The checks are
    judged under the run's profile (`phases.profile`): those outside it are advisory."""
    profile = catalog.spec.profiles.get(meta.profile)
    if profile is None:
        raise CatalogError(f"{catalog.path}: the run certifies profile {meta.profile!r}, which the catalog does not "
                           f"define (it has {', '.join(catalog.spec.profiles)})")
    checks = apply_profile(checks, meta.profile, profile)
    outcome = profile_outcome(checks, profile)
    window = collection_window(bundle)
    shown = {name: section for name, section in sections.items() if section is not None}  # a phase with no evidence
    judged = [c.to_json() for c in checks]
    suspects = rank_suspects(SuspectInputs(
        nodes=bundle.spec.system.nodes, covered=frozenset(n for r in bundle.spec.runs for n in r.nodes or []),
        run_files={r.id: bundle.shown(r.files[0]) for r in bundle.spec.runs}, sections=shown, checks=judged))
    until, basis = validity(window, meta.started(), catalog.spec.rules.validity_months)
    return {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "run_id": meta.run_id,
        "started_at": meta.started_at,
        "cluster": bundle.spec.cluster.model_dump(),
        "system": bundle.spec.system.gpu,
        "synthetic": bundle.spec.synthetic,
        "recipe_version": bundle.spec.recipe_version,
        "catalog": {"id": catalog.spec.id, "version": catalog.spec.version, "sha256": catalog.sha256,
                    "title": catalog.spec.title, "shipped": catalog.shipped,
                    "chosen": catalog_choice(meta, bundle, catalog), "baselines": catalog.baselines},
        "outcome": outcome.value,
        "profile": profile_section(meta.profile, catalog, bundle, checks),
        "reasons": [r.to_json() for r in outcome_reasons(checks)],
        # the reasons grouped by what explains them (page one): a shared path, node or file is one line
        "findings": group_findings(checks, bundle, sections),
        # the baseline rule is the efficiency phase's: a profile without it passes on its own checks
        "pass_rule": pass_rule(catalog) if "efficiency" in profile.phases else
        f"every check the {profile.title.lower()} profile decides ({', '.join(profile.phases)}) passes",
        "evidence_window": window.to_json() if window is not None else None,
        "valid_until": until.isoformat() if outcome is Outcome.CERTIFIED else None,
        "validity_basis": basis if outcome is Outcome.CERTIFIED else None,
        "system_under_test": describe_system(bundle).to_json(),
        "rules": catalog.spec.rules.model_dump(mode="json"),
        "checks": judged,
        "workloads": workloads,
        "phases": shown,
        "suspects": suspects,
        "previous_run": previous_run_section(meta.previous_run, workloads),
    }


def catalog_choice(meta: RunMeta, bundle: LoadedBundle, catalog: LoadedCatalog) -> str:
    """Who chose the catalog that judged, from what the run records (a rerun names the same)."""
    if meta.catalog_arg is not None:
        return f"named by the person running certify (--catalog {meta.catalog_arg})"
    edition = catalog.spec.edition
    if edition is not None and edition.release == bundle.spec.recipe_version:
        return f"the shipped edition of recipe release {edition.release}, which the evidence records"
    return "the shipped catalog bundle.yaml names"


def previous_run_section(previous: dict[str, Any] | None, workloads: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The previous run of the same cluster and the change of each headline figure since (None for a first run)."""
    if previous is None:
        return None
    changes = compare_headlines(previous["headline"], headline({"workloads": workloads}))
    return {"run_id": previous["run_id"], "started_at": previous["started_at"], "outcome": previous["outcome"],
            "changes": [c.to_json() for c in changes], "regressed": any(c.regressed for c in changes)}


def dump_json(data: Any) -> str:
    """Canonical JSON text: sorted keys are not used so the schema's order reads well; stable floats."""
    return dump_json_bytes(data).decode()


# json.dumps(indent=2) runs Python's pure-Python encoder (its C encoder writes no indentation): seconds for a
# cluster's results and validation, a hundred megabytes. orjson writes the same bytes in C but for the
# numbers of magnitude below 1e-4 (orjson `0.00001`, `1.5e-7`; Python `1e-05`, `1.5e-07`), which are rewritten
# with Python's repr, found by a scan for their text and each confirmed by a match of its whole line (a value
# line of indented JSON: so never text inside a string). Python's C encoder (no indentation) first checks that
# json takes the data, raising what json raises (NaN or infinity, a type it cannot write, a cycle); what orjson
# refuses or would write in its own way (integers beyond 64 bits, keys that are not strings, subclasses of
# float or tuple, lone surrogates) is written by json.dumps itself. tests/unit/test_dump_json.py compares the
# bytes with json.dumps on random documents.
_TINY_TEXT = re.compile(rb"e-[0-9]|0\.0000")
_TINY_LINE = re.compile(rb'^( *(?:"(?:[^"\\\n]|\\.)*": )?)(-?(?:0\.0000[0-9]*|[0-9](?:\.[0-9]+)?e-[0-9]+))(,?)$', re.M)


def dump_json_bytes(data: Any) -> bytes:
    """dump_json(data), UTF-8 encoded: the same bytes, written by orjson where it writes them alike."""
    json.dumps(data, ensure_ascii=False, allow_nan=False)  # json's own refusals, at C speed
    try:
        text = orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    except (orjson.JSONEncodeError, TypeError):
        return (json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()
    out: bytearray | None = None  # made only when a number is rewritten; the text's pieces added uncopied
    view = memoryview(text)
    done = 0
    for hit in _TINY_TEXT.finditer(text):
        if hit.start() < done:
            continue
        line = _TINY_LINE.match(text, text.rfind(b"\n", 0, hit.start()) + 1)
        if line is None or line.end(2) <= hit.start():
            continue
        if out is None:
            out = bytearray()
        out += view[done:line.start(2)]
        out += repr(float(line.group(2))).encode()
        done = line.end(2)
    if out is None:
        return text
    out += view[done:]
    view.release()
    return bytes(out)
