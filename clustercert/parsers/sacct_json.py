"""Slurm `sacct --json` dumps: the same jobs and steps as a `--parsable2` dump, each record with its line.

sacct prints its records through Slurm's OpenAPI data parser, whose schema changed between releases: 22.05
(`openapi/dbv0.0.38`) prints a job's state as `{"current": "COMPLETED"}`, a step's as `"COMPLETED"`, a step's id
as `{"job_id": 7, "id": "batch"}` and every time as a number; later releases print states as lists
(`["COMPLETED"]`), a step's id whole (`"7.batch"`) and some times as `{"set": true, "number": 1733390000}`. All of
them are read. Times are seconds since the epoch, written as ISO-8601 in the bundle's timezone (as the
`--parsable2` reading writes a dump's local times); 0 or an unset number is no time (a job not yet started or
ended, sacct's `Unknown`).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from clustercert.errors import EvidenceError
from clustercert.parsers.common import json_of
from clustercert.parsers.sacct_records import STATES, SacctJob, SacctResult, SacctStep, base_state

__all__ = ["is_sacct_json", "parse_sacct_json"]

_HINT = "Dump it again with `sacct --json` (or `sacct --parsable2 --format ...`)."
# a JSON string (escapes included) or a bracket: enough to follow the document's nesting and find its objects
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]]')
_KEY_AFTER = re.compile(r"\s*:")


def is_sacct_json(text: str) -> bool:
    """True for what `sacct --json` prints: a JSON object whose `jobs` list holds job records (sniffed text)."""
    head = text.lstrip()[:4096]
    return head.startswith("{") and '"jobs"' in text and '"job_id"' in text and (
        '"meta"' in head or '"steps"' in text)


def parse_sacct_json(text: str, display: str, *, timezone: str, zone: ZoneInfo,
                     fields: list[str] | None = None) -> SacctResult:
    """Every job of the dump's text (each incarnation of a requeued job that `--duplicates` printed) with its
    steps."""
    document = json_of(text.encode("utf-8"), display)
    if not isinstance(document, dict) or not isinstance(document.get("jobs"), list):
        raise EvidenceError(display, f"expected sacct's JSON object with a 'jobs' list, got none. {_HINT}",
                            line=1, field="jobs")
    job_lines, step_lines = _record_lines(text)
    jobs: list[SacctJob] = []
    for index, raw in enumerate(document["jobs"]):
        line = job_lines[index] if index < len(job_lines) else 1
        if not isinstance(raw, dict):
            raise EvidenceError(display, f"expected a job object, got {type(raw).__name__}. {_HINT}", line=line,
                                field="jobs")
        job_id = _job_id(raw.get("job_id"), display, line)
        state_raw, state = _state(raw.get("state"), display, line, "state")
        times = raw.get("time")
        if not isinstance(times, dict):
            raise EvidenceError(display, f"expected the job's 'time' object, got {_shown(times)}. {_HINT}",
                                line=line, field="time")
        steps: list[SacctStep] = []
        raw_steps = raw.get("steps", [])
        if not isinstance(raw_steps, list):
            raise EvidenceError(display, f"expected the job's 'steps' list, got {_shown(raw_steps)}. {_HINT}",
                                line=line, field="steps")
        own_lines = step_lines.get(index, [])
        for number, step in enumerate(raw_steps):
            at = own_lines[number] if number < len(own_lines) else line
            steps.append(_step(step, job_id, display, at, zone))
        jobs.append(SacctJob(
            job_id=job_id, state=state, state_raw=state_raw,
            elapsed_s=_seconds(times.get("elapsed"), display, line, "time.elapsed"),
            start=_moment(times.get("start"), zone, display, line, "time.start"),
            end=_moment(times.get("end"), zone, display, line, "time.end"),
            submit=_moment(times.get("submission"), zone, display, line, "time.submission"),
            line=line, steps=steps, incarnation=1))
    if not jobs:
        errors = document.get("errors")
        said = f" (sacct said: {_said(errors)})" if isinstance(errors, list) and errors else ""
        raise EvidenceError(display, f"expected sacct job records, found none{said}. {_HINT}", field="jobs")
    jobs = _numbered(jobs)
    warnings = []
    if fields:
        warnings.append(f"{display}: a `sacct --json` dump names its own fields: the bundle's `fields` list "
                        f"({', '.join(fields)[:60]}) is not used")
    return SacctResult(file=display, fields=[], timezone=timezone, jobs=jobs, warnings=warnings)


def _numbered(jobs: list[SacctJob]) -> list[SacctJob]:
    """`jobs` with each requeued job's incarnations numbered in the order they were submitted (`--duplicates`
    prints every incarnation under one id, not always in order: 22.05 printed a requeued job's first incarnation
    ahead of every other job and its second in the job's place)."""
    by_id: dict[str, list[int]] = {}
    for index, job in enumerate(jobs):
        by_id.setdefault(job.job_id, []).append(index)
    for indexes in by_id.values():
        if len(indexes) > 1:
            ordered = sorted(indexes, key=lambda i: (_epoch(jobs[i].submit), _epoch(jobs[i].start), i))
            for incarnation, index in enumerate(ordered, start=1):
                jobs[index] = jobs[index]._replace(incarnation=incarnation)
    return jobs


def _epoch(moment: str | None) -> float:
    return 0.0 if moment is None else datetime.fromisoformat(moment).timestamp()


def _step(raw: object, job_id: str, display: str, line: int, zone: ZoneInfo) -> SacctStep:
    if not isinstance(raw, dict):
        raise EvidenceError(display, f"expected a step object, got {type(raw).__name__}. {_HINT}", line=line,
                            field="steps")
    named = raw.get("step")
    step = named.get("id") if isinstance(named, dict) else None
    if isinstance(step, bool) or not isinstance(step, int | str) or str(step).strip() == "":
        raise EvidenceError(display, f"expected the step's id (step.id), got {_shown(step)}. {_HINT}", line=line,
                            field="step.id")
    text = str(step).strip()
    # 22.05 names the step alone (`batch`, 0) beside its job id; later releases write it whole (`7.batch`)
    step_id = text if text.startswith(f"{job_id}.") else f"{job_id}.{text}"
    state_raw, state = _state(raw.get("state"), display, line, "state")
    times = raw.get("time")
    if not isinstance(times, dict):
        raise EvidenceError(display, f"expected the step's 'time' object, got {_shown(times)}. {_HINT}",
                            line=line, field="time")
    return SacctStep(step_id=step_id, state=state, state_raw=state_raw,
                     elapsed_s=_seconds(times.get("elapsed"), display, line, "time.elapsed"),
                     start=_moment(times.get("start"), zone, display, line, "time.start"),
                     end=_moment(times.get("end"), zone, display, line, "time.end"), line=line)


def _job_id(value: object, display: str, line: int) -> str:
    number = _number(value, display, line, "job_id")
    if number is None or number <= 0:
        raise EvidenceError(display, f"expected a job id, got {_shown(value)}. {_HINT}", line=line, field="job_id")
    return str(number)


def _state(value: object, display: str, line: int, name: str) -> tuple[str, str]:
    """(the state as printed, its base state): `{"current": [...]}`, a list (the base state first, then flags
    such as REQUEUED) or a text."""
    current = value.get("current") if isinstance(value, dict) else value
    listed = current if isinstance(current, list) else [current]
    words = [w.strip() for w in listed if isinstance(w, str)]
    if not words or len(words) != len(listed):
        raise EvidenceError(display, f"expected a Slurm state, got {_shown(value)}. {_HINT}", line=line, field=name)
    state_raw = " ".join(words)
    try:
        return state_raw, base_state(state_raw)
    except ValueError:
        raise EvidenceError(display, f"expected a Slurm state ({', '.join(sorted(STATES))}), got "
                            f"{state_raw[:40]!r}. {_HINT}", line=line, field=name) from None


def _number(value: object, display: str, line: int, name: str) -> int | None:
    """A whole number printed plain or as `{"set": ..., "infinite": ..., "number": ...}`; None when unset."""
    if isinstance(value, dict):
        if value.get("set") is False or value.get("infinite") is True:
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise EvidenceError(display, f"expected a whole number, got {_shown(value)}. {_HINT}", line=line,
                            field=name)
    return value


def _seconds(value: object, display: str, line: int, name: str) -> float | None:
    number = _number(value, display, line, name)
    if number is not None and number < 0:
        raise EvidenceError(display, f"expected seconds of 0 or more, got {number}. {_HINT}", line=line,
                            field=name)
    return None if number is None else float(number)


def _moment(value: object, zone: ZoneInfo, display: str, line: int, name: str) -> str | None:
    number = _number(value, display, line, name)
    if not number:  # 0: no such time yet (sacct's Unknown)
        return None
    try:
        return datetime.fromtimestamp(number, zone).isoformat()
    except (OverflowError, OSError, ValueError):
        raise EvidenceError(display, f"expected a time (seconds since 1970), got {number}. {_HINT}", line=line,
                            field=name) from None


def _record_lines(text: str) -> tuple[list[int], dict[int, list[int]]]:
    """The line of each job object of the top-level `jobs` list, and of each step object of a job's `steps`
    list (by the job's index): the document's brackets followed outside its strings."""
    jobs: list[int] = []
    steps: dict[int, list[int]] = {}
    stack: list[str] = []  # per open bracket: '{', or '[' and the key whose value it opens
    key: str | None = None
    at, line = 0, 1  # the lines counted so far: up to offset `at`

    def line_of(offset: int) -> int:
        nonlocal at, line
        line += text.count("\n", at, offset)
        at = offset
        return line

    for token in _TOKEN.finditer(text):
        found = token.group()
        if found[0] == '"':
            key = found[1:-1] if _KEY_AFTER.match(text, token.end()) else None
        elif found == "[":
            stack.append(f"[{key}")
            key = None
        elif found == "{":
            if len(stack) == 2 and stack[1] == "[jobs":
                jobs.append(line_of(token.start()))
            elif len(stack) == 4 and stack[1] == "[jobs" and stack[3] == "[steps" and jobs:
                steps.setdefault(len(jobs) - 1, []).append(line_of(token.start()))
            stack.append("{")
            key = None
        else:
            if stack:
                stack.pop()
            key = None
    return jobs, steps


def _shown(value: object) -> str:
    return "nothing" if value is None else repr(value)[:40]


def _said(errors: list[Any]) -> str:
    first = errors[0]
    if isinstance(first, dict):
        first = first.get("description") or first.get("error") or first
    return str(first)[:120]
