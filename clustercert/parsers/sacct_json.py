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

import functools
import json
import re
from array import array
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from clustercert.errors import EvidenceError
from clustercert.parsers.common import json_refusals
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
    steps. Decoded a job at a time (_jobs_apart): the document decoded whole held many times its size."""
    apart = _jobs_apart(text, display)
    if apart is None:  # a document whose jobs could not be told apart: decoded whole
        with json_refusals(display):
            document = json.loads(text)
        records = _record_spans(text)
    else:
        document, records = apart
    if not isinstance(document, dict) or not isinstance(document.get("jobs"), list):
        raise EvidenceError(display, f"expected sacct's JSON object with a 'jobs' list, got none. {_HINT}",
                            line=1, field="jobs")
    raws: Iterable[object] = document["jobs"] if apart is None else _decoded_jobs(text, display, document, records)
    jobs: list[SacctJob] = []
    for index, raw in enumerate(raws):
        line = records.lines[index] if index < len(records.lines) else 1
        jobs.append(_job(raw, display, line, records.steps_of(index), zone))
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


def _job(raw: object, display: str, line: int, own_lines: list[int], zone: ZoneInfo) -> SacctJob:
    """The job (and its steps) of one record of the `jobs` list, at `line`; its steps' objects at `own_lines`."""
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
    for number, step in enumerate(raw_steps):
        at = own_lines[number] if number < len(own_lines) else line
        steps.append(_step(step, job_id, display, at, zone))
    return SacctJob(
        job_id=job_id, state=state, state_raw=state_raw,
        elapsed_s=_seconds(times.get("elapsed"), display, line, "time.elapsed"),
        start=_moment(times.get("start"), zone, display, line, "time.start"),
        end=_moment(times.get("end"), zone, display, line, "time.end"),
        submit=_moment(times.get("submission"), zone, display, line, "time.submission"),
        line=line, steps=steps, incarnation=1)


def _jobs_apart(text: str, display: str) -> tuple[object, _Records] | None:
    """The document with each object of its `jobs` list left empty (`{}`: the line breaks inside kept, so that an
    error's line is the file's), and where those objects and their steps lie (_record_spans()); None where the
    objects found are not the document's jobs one for one (a `jobs` key given twice, say).

    The objects are found by _record_spans(); the document with them left empty decodes as JSON (its
    error raised, located) and each object decodes on its own as JSON ending where it was found to end
    (_decoded_jobs()), so the text is the JSON document it would be decoded whole: a value put where a value was."""
    records = _record_spans(text)
    parts: list[str] = []
    at = 0
    for start, end in zip(records.starts, records.ends, strict=True):
        parts += [text[at:start], "{}", "\n" * text.count("\n", start, end)]
        at = end
    parts.append(text[at:])
    skeleton = "".join(parts)
    del parts
    with json_refusals(display):
        document = json.loads(skeleton)
    listed = document.get("jobs") if isinstance(document, dict) else None
    if isinstance(listed, list) and sum(isinstance(raw, dict) for raw in listed) != len(records.starts):
        return None
    return document, records


def _decoded_jobs(text: str, display: str, document: dict[str, Any], records: _Records) -> Iterator[object]:
    """Each record of the document's `jobs` list (as _jobs_apart() left it), the objects decoded one at a time
    from their place in `text`."""
    found = zip(records.starts, records.ends, strict=True)
    decode = _DECODER.raw_decode
    for raw in document["jobs"]:
        if not isinstance(raw, dict):
            yield raw
            continue
        start, end = next(found)
        with json_refusals(display):
            job, stop = decode(text, start)
        if stop != end:  # not the object found there (no valid document has one): decoded whole, it says why
            with json_refusals(display):
                json.loads(text)
            raise EvidenceError(display, f"expected a job object that ends at its closing brace, got one that "
                                         f"does not. {_HINT}", line=text.count("\n", 0, start) + 1, field="jobs")
        yield job


_DECODER = json.JSONDecoder()


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
    return None if number is None else _float(number)


# A job's steps repeat its times and durations: each read once (a few thousand remembered), one str or float
# object for them all, as the --parsable2 reading shares them, not one per step
_float = functools.lru_cache(maxsize=1 << 12)(float)


@functools.lru_cache(maxsize=1 << 12)
def _iso(number: int, zone: ZoneInfo) -> str:
    return datetime.fromtimestamp(number, zone).isoformat()


def _moment(value: object, zone: ZoneInfo, display: str, line: int, name: str) -> str | None:
    number = _number(value, display, line, name)
    if not number:  # 0: no such time yet (sacct's Unknown)
        return None
    try:
        return _iso(number, zone)
    except (OverflowError, OSError, ValueError):
        raise EvidenceError(display, f"expected a time (seconds since 1970), got {number}. {_HINT}", line=line,
                            field=name) from None


class _Records:
    """Where the objects of the document's `jobs` list lie: each one's line, start and end (past its closing
    brace) in the text, and the lines of its `steps` objects; machine integers in arrays, not a tuple and a list
    of numbers per job."""

    def __init__(self) -> None:
        self.lines, self.starts, self.ends = array("q"), array("q"), array("q")
        self.step_lines = array("q")
        self.step_from = array("q", [0])  # where each job's step lines begin in step_lines, and the end

    def steps_of(self, index: int) -> list[int]:
        """The lines of the step objects of the `index`-th job."""
        if index + 1 >= len(self.step_from):
            return []
        return self.step_lines[self.step_from[index]:self.step_from[index + 1]].tolist()


def _record_spans(text: str) -> _Records:
    """Each job object of the top-level `jobs` list, and the step objects of its `steps` list (_Records): the
    document's brackets followed outside its strings."""
    records = _Records()
    stack: list[str] = []  # per open bracket: '{', or '[' and the key whose value it opens
    key: str | None = None
    at, line = 0, 1  # the lines counted so far: up to offset `at`
    opened = (0, 0)  # the line and start of the job object open now

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
                opened = (line_of(token.start()), token.start())
            elif len(stack) == 4 and stack[1] == "[jobs" and stack[3] == "[steps":
                records.step_lines.append(line_of(token.start()))
            stack.append("{")
            key = None
        else:
            if stack:
                stack.pop()
                if found == "}" and len(stack) == 2 and stack[1] == "[jobs":
                    records.lines.append(opened[0])
                    records.starts.append(opened[1])
                    records.ends.append(token.end())
                    records.step_from.append(len(records.step_lines))
            key = None
    return records


def _shown(value: object) -> str:
    return "nothing" if value is None else repr(value)[:40]


def _said(errors: list[Any]) -> str:
    first = errors[0]
    if isinstance(first, dict):
        first = first.get("description") or first.get("error") or first
    return str(first)[:120]
