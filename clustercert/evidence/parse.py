"""Parse every file of a bundle with its run's parser, keeping each unusable file's error as a finding."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import LoadedBundle, RunKind, RunSpec
from clustercert.parsers import FORMATS
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.mlperf import parse_mlperf_files
from clustercert.parsers.nemo_resilience import ResilienceLog, parse_nemo_resilience

__all__ = ["ParsedBundle", "ParsedFile", "parse_bundle", "parse_run"]


@dataclass(frozen=True)
class ParsedFile:
    """One evidence file of one run: what its parser read, or the error that makes it unusable."""

    run: str
    kind: RunKind
    rel: str
    display: str
    result: object | None
    error: EvidenceError | None = None
    resilience: ResilienceLog | None = None

    @property
    def usable(self) -> bool:
        return self.error is None


ParsedBundle = dict[str, list[ParsedFile]]


def parse_run(bundle: LoadedBundle, run: RunSpec, limit: int = DEFAULT_LIMIT) -> list[ParsedFile]:
    """Every file of `run`, parsed with the run's format (sacct in the bundle's timezone, MLPerf's ruleset)."""
    out: list[ParsedFile] = []
    if run.format == "mlperf" and len(run.files) > 1:
        return [_parse_mlperf_listed(bundle, run, limit)]
    for rel in run.files:
        display = str(bundle.root / rel)
        parser = FORMATS.get(run.format)
        if parser is None:
            error = EvidenceError(
                f"{bundle.root / 'bundle.yaml'} run '{run.id}'",
                f"expected a format in ({', '.join(sorted(FORMATS))}), got '{run.format}'. Fix bundle.yaml",
                field="format",
            )
            out.append(ParsedFile(run.id, run.kind, rel, display, None, error))
            continue
        options: dict[str, object] = {"limit": limit}
        if run.format == "sacct":
            options["timezone"] = bundle.spec.timezone
            options["fields"] = run.fields
        if run.format == "mlperf" and run.ruleset is not None:
            options["ruleset"] = run.ruleset
        try:
            path = bundle.resolve(rel, entry=f"run '{run.id}' files")
            result = parser(path, display, **options)
            resilience = parse_nemo_resilience(path, display, limit=limit) if run.format == "nemo" else None
        except EvidenceError as exc:
            out.append(ParsedFile(run.id, run.kind, rel, display, None, exc))
            continue
        out.append(ParsedFile(run.id, run.kind, rel, display, result, None, resilience))
    return out


def _parse_mlperf_listed(bundle: LoadedBundle, run: RunSpec, limit: int) -> ParsedFile:
    """An MLPerf result listed file by file is one result: every run scored together (named by its folder)."""
    parents = {str(PurePosixPath(f).parent) for f in run.files}
    rel = parents.pop() if len(parents) == 1 else run.files[0]
    display = str(bundle.root / rel)
    try:
        listed = [(bundle.resolve(f, entry=f"run '{run.id}' files"), str(bundle.root / f)) for f in run.files]
        result = parse_mlperf_files(listed, display, ruleset=run.ruleset, limit=limit)
    except EvidenceError as exc:
        return ParsedFile(run.id, run.kind, rel, display, None, exc)
    return ParsedFile(run.id, run.kind, rel, display, result)


def parse_bundle(bundle: LoadedBundle, limit: int = DEFAULT_LIMIT) -> ParsedBundle:
    """Every run's files parsed, by run id in bundle order."""
    return {run.id: parse_run(bundle, run, limit) for run in bundle.spec.runs}
