"""Resilience lines in NeMo 2 logs: in-job restarts, checkpoints saved and loaded, straggler reports."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.training import parse_number, read_text_lines

__all__ = [
    "LogEvent",
    "LogEventKind",
    "RankScore",
    "ResilienceLog",
    "StragglerReport",
    "parse_nemo_resilience",
]

_HINT = "Keep the file as evidence; re-run the job and add the new log to bundle.yaml as a further run."
_STEP = re.compile(r"Training epoch (\d+), iteration (\d+)/(\d+)\s*\|")
_GLOBAL = re.compile(r"\bglobal_step:\s*(\d+)")
_TS = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)")
_WG_FAILED = re.compile(r"Worker group FAILED\.?\s*(.*)")
_WG_OK = re.compile(r"WorkerState\.SUCCEEDED|Worker group SUCCEEDED")
_WORKER_EXIT = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
_LOADED = re.compile(r"Restored all states from the checkpoint at (\S+)")
_CKPT_STEP = re.compile(r"step=(\d+)")
_REPORT = re.compile(r"GPU (relative|individual) performance:")
_SCORE = re.compile(r"Rank=(\d+)\s+Node=(\S+)\s+Score=(\S+)")
_WARNING = re.compile(r"STRAGGLER DETECTION WARNING:?\s*(.*)")
_AFFECTED = re.compile(r"StragglerId\(rank=(\d+), node='([^']*)'\)")
_TERMINATE = re.compile(r"Detected stragglers\. Terminating training")


class LogEventKind(StrEnum):
    """Resilience events a NeMo log shows."""

    RESTART = "restart"  # the printed step went back: the job restarted from a checkpoint
    WORKER_FAILED = "worker_failed"
    WORKER_GROUP_FAILED = "worker_group_failed"
    WORKER_GROUP_SUCCEEDED = "worker_group_succeeded"
    CHECKPOINT_SAVED = "checkpoint_saved"
    CHECKPOINT_LOADED = "checkpoint_loaded"
    STRAGGLER_WARNING = "straggler_warning"
    STRAGGLER_TERMINATION = "straggler_termination"
    # the training program started again in the same output (Megatron's `arguments` banner, after the first one): a
    # step counter that restarts after it is a new launch (a job script running the program twice), not a splice
    RELAUNCH = "relaunch"


@dataclass(frozen=True)
class LogEvent:
    """One resilience event with its line; `step` as printed where the line names one."""

    kind: LogEventKind
    line: int
    step: int | None = None
    ts: str | None = None
    detail: str | None = None
    ranks: list[int] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "line": self.line,
            "step": self.step,
            "ts": self.ts,
            "detail": self.detail,
            "ranks": self.ranks,
            "nodes": self.nodes,
        }


@dataclass(frozen=True)
class RankScore:
    """One rank's straggler score (reference median / rank median of compute time)."""

    rank: int
    node: str
    score: float
    line: int


@dataclass(frozen=True)
class StragglerReport:
    """A `GPU relative performance` or `GPU individual performance` block."""

    kind: str
    line: int
    scores: list[RankScore]

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "line": self.line,
            "scores": [
                {"rank": s.rank, "node": s.node, "score": s.score, "line": s.line} for s in self.scores
            ],
        }


@dataclass(frozen=True)
class ResilienceLog:
    """Resilience events and straggler reports of one NeMo log."""

    file: str
    events: list[LogEvent]
    straggler_reports: list[StragglerReport]

    def to_json(self) -> dict[str, object]:
        return {
            "events": [e.to_json() for e in self.events],
            "straggler_reports": [r.to_json() for r in self.straggler_reports],
        }


def parse_nemo_resilience(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> ResilienceLog:
    """Every resilience event and straggler report in a NeMo log (none is fine: a clean run has none)."""
    lines = read_text_lines(path, display, limit=limit)
    events: list[LogEvent] = []
    reports: list[StragglerReport] = []
    last_step: int | None = None
    report: tuple[str, int, list[RankScore]] | None = None
    for number, raw in enumerate(lines, start=1):
        stamp = _TS.search(raw)
        ts = stamp.group(1) if stamp else None
        if report is not None:
            score = _SCORE.search(raw)
            if score:
                value = parse_number(score.group(3), file=display, line=number, field="Score", hint=_HINT)
                report[2].append(RankScore(int(score.group(1)), score.group(2), value, number))
                continue
            reports.append(StragglerReport(report[0], report[1], report[2]))
            report = None
        step = _STEP.search(raw)
        if step:
            printed = _GLOBAL.search(raw)
            current = int(printed.group(1)) if printed else int(step.group(2))
            if last_step is not None and current <= last_step:
                events.append(LogEvent(LogEventKind.RESTART, number, step=current, ts=ts,
                                       detail=f"step went back from {last_step} to {current}"))
            last_step = current
            continue
        head = _REPORT.search(raw)
        if head:
            report = (head.group(1), number, [])
            continue
        event = _event(raw, number, last_step, ts)
        if event is not None:
            events.append(event)
    if report is not None:
        reports.append(StragglerReport(report[0], report[1], report[2]))
    for item in reports:
        if not item.scores:
            raise EvidenceError(
                display,
                f"expected 'Rank=N Node=X Score=S' lines after the report header, got none. {_HINT}",
                line=item.line,
                field="Score",
            )
    return ResilienceLog(file=display, events=events, straggler_reports=reports)


def _event(raw: str, number: int, last_step: int | None, ts: str | None) -> LogEvent | None:
    """The resilience event line `number` records (a straggler warning or termination, a worker group's or a
    worker's end, a checkpoint loaded or saved), if any; `last_step`: the step printed last."""
    warning = _WARNING.search(raw)
    if warning:
        affected = _AFFECTED.findall(raw)
        return LogEvent(LogEventKind.STRAGGLER_WARNING, number, step=last_step, ts=ts, detail=warning.group(1)[:200],
                        ranks=sorted(int(r) for r, _ in affected), nodes=sorted({n for _, n in affected}))
    if _TERMINATE.search(raw):
        return LogEvent(LogEventKind.STRAGGLER_TERMINATION, number, step=last_step, ts=ts)
    failed = _WG_FAILED.search(raw)
    if failed:
        return LogEvent(LogEventKind.WORKER_GROUP_FAILED, number, step=last_step, ts=ts,
                        detail=failed.group(1).strip()[:200])
    if _WG_OK.search(raw):
        return LogEvent(LogEventKind.WORKER_GROUP_SUCCEEDED, number, step=last_step, ts=ts)
    exited = _WORKER_EXIT.search(raw)
    if exited:
        return LogEvent(LogEventKind.WORKER_FAILED, number, step=last_step, ts=ts,
                        detail=f"exitcode {exited.group(1)}", ranks=[int(exited.group(2))])
    loaded = _LOADED.search(raw)
    if loaded:
        ckpt = _CKPT_STEP.search(loaded.group(1))
        return LogEvent(LogEventKind.CHECKPOINT_LOADED, number, step=int(ckpt.group(1)) if ckpt else None, ts=ts,
                        detail=loaded.group(1)[:200])
    if "Async checkpoint save for step" in raw or "Saved checkpoint" in raw:
        ckpt = _CKPT_STEP.search(raw)
        return LogEvent(LogEventKind.CHECKPOINT_SAVED, number, step=int(ckpt.group(1)) if ckpt else None, ts=ts)
    return None
