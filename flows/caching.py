"""Cross-run task caching: a key of the evidence sha256, the catalog hash and the code version, results persisted."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

from prefect.cache_policies import NO_CACHE, CacheKeyFnPolicy
from prefect.context import TaskRunContext
from prefect.serializers import PickleSerializer
from prefect.tasks import Task

from clustercert.evidence.bundle import BUNDLE_FILE
from clustercert.runs.evidence import EvidenceSet
from clustercert.runs.folder import Inputs, file_digest

__all__ = ["CACHED", "PERSIST_MAX_BYTES", "UNCACHED", "certify_cache_key", "code_version", "evidence_digest",
           "persisted"]

_CODE_ROOTS = ("clustercert", "flows")


@functools.cache
def code_version() -> str:
    """sha256 over the source of clustercert/ and flows/: any code change invalidates every cached result."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for package in _CODE_ROOTS:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


# The last Inputs evidence_digest() was asked for, and its digest: every cached task of a run asks for the same one.
_last_digest: tuple[Inputs, str] | None = None
# Held while a digest is computed: the efficiency flow submits a task per training log at once, and each would ask
# for the digest on its own thread before any had it (a listing of the whole bundle each, side by side).
_digest_lock = threading.Lock()


def evidence_digest(inputs: Inputs) -> str:
    """sha256 over bundle.yaml and every evidence file's sha256 (by relative path), as the run read them.

    Computed once per Inputs (the object the load made; the last one asked for is remembered), by one thread at a
    time (the others wait for it): a cluster's bundle is thousands of files, and a run has dozens of cached tasks,
    each of whose keys holds the digest."""
    with _digest_lock:
        return _evidence_digest(inputs)


def _evidence_digest(inputs: Inputs) -> str:
    global _last_digest
    last = _last_digest
    if last is not None and last[0] is inputs:
        return last[1]
    digest = hashlib.sha256()
    for rel in [BUNDLE_FILE, *inputs.bundle.evidence_files()]:
        value = inputs.digests.get(rel) or file_digest(inputs.bundle.root / rel)
        digest.update(f"{rel}\0{value}\n".encode())
    _last_digest = (inputs, digest.hexdigest())
    return _last_digest[1]


def _stable(value: Any) -> Any:
    if isinstance(value, EvidenceSet):  # its load, and the bound on a file's size its parsers keep to
        return {**_stable(value.inputs), "limit": value.limit}
    if isinstance(value, Inputs):
        # The bundle's location is part of the key: parsed rows and findings name their files by path.
        # the baselines file given replaces the catalog's targets: a result judged with other targets is another
        # and so do other reference files (the health rules, the MLPerf benchmarks' FLOPs)
        given = value.catalog.baselines
        return {"evidence": evidence_digest(value), "catalog": value.catalog.sha256,
                "bundle": str(value.bundle.root.resolve()),
                **({"baselines": given["sha256"]} if given else {}),
                **{r.reference.key: r.sha256 for r in value.references}}
    if isinstance(value, dict):
        return {str(k): _stable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_stable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)  # dataclasses (checks, parsed logs, run metadata) have deterministic reprs


def certify_cache_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    """The task's name and code version with its parameters, an `Inputs` (or an evidence set's) replaced by its
    evidence and catalog hashes and the bundle's location (results name evidence files by path)."""
    payload = {"task": context.task.name, "code": code_version(), "parameters": _stable(parameters)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, allow_nan=True).encode()).hexdigest()


# Task options for every cached task: results are persisted in Prefect's local storage (PREFECT_HOME/storage by
# default, or PREFECT_LOCAL_STORAGE_PATH) so a run interrupted by a crash resumes from them.
# Pickled by the standard library's pickler, not Prefect's default cloudpickle: every result is an instance of a
# class importable by name, and the standard pickler is the faster one for a sweep's thousands of parsed files.
CACHED: dict[str, Any] = {"cache_policy": CacheKeyFnPolicy(cache_key_fn=certify_cache_key), "persist_result": True,
                          "result_serializer": PickleSerializer(picklelib="pickle")}
# Task options for every other task. Prefect's default policy hashes a task's inputs for a cache key even where no
# result is persisted (so nothing can be found under it): the judge of a cluster's resilience run serialised its
# telemetry for a key nobody used (as much memory again, for seconds, and CPU on every certification).
UNCACHED: dict[str, Any] = {"cache_policy": NO_CACHE}

# Parsed evidence of more files than this is neither persisted nor looked up. Prefect pickles a result and writes
# it base64 in JSON: several copies of the parsed columns in memory at once (a day of 1 Hz telemetry took a
# certification past its memory), and every run pays for a copy that only a resumed run reads back, at a saving
# smaller than that cost (persisting a pairwise sweep's parse and reading it back each take about as long as the
# parse itself). Below this (a run of the shipped sample's size) that is tens of milliseconds, and a crash resumes
# from the persisted parse.
PERSIST_MAX_BYTES = 16 * 1024**2

_T = TypeVar("_T", bound=Task[Any, Any])


def persisted(task: _T, inputs: Inputs, run_ids: Iterable[str], max_bytes: int = PERSIST_MAX_BYTES) -> _T:
    """`task` as declared (cached, its result persisted) when the runs' files add up to at most `max_bytes`, else
    the same task without a cache (its result kept in memory only, for this run)."""
    wanted = set(run_ids)
    total = 0
    for run in inputs.bundle.spec.runs:
        if run.id in wanted:
            for rel in inputs.bundle.run_files(run):
                with contextlib.suppress(OSError):  # a missing file is the parser's finding, not the cache's
                    total += (inputs.bundle.root / rel).stat().st_size
    if total <= max_bytes:
        return task
    return task.with_options(cache_policy=NO_CACHE, persist_result=False)  # type: ignore[return-value]
