"""Checkpoint lines and start-up banners in Megatron-LM and Megatron-DeepSpeed logs: what tells a restart in one log.

A Slurm job requeued with its output appended (`--open-mode=append`), or restarted by its launcher, goes on in
the same file: the start-up banner again, then `successfully loaded checkpoint from DIR ... at iteration N` and
the iterations from N + 1, some of them printed before; a job script that runs the program twice prints a second
banner and counts from 1 again. Those lines are the marks `validation.tables` accepts as a restart: without one a
counter that goes back is a spliced log.
"""

from __future__ import annotations

import re
from pathlib import Path

from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.nemo_resilience import LogEvent, LogEventKind, ResilienceLog
from clustercert.parsers.training import read_text

__all__ = ["parse_megatron_resilience"]

# Megatron-LM (training/checkpointing.py) and Megatron-DeepSpeed print, on rank 0:
#   "  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 50" (the ranks part since 2024)
#   "  successfully saved checkpoint from iteration      50 to /ckpt [ t 1/1, p 1/1 ]" ("at iteration" before)
# Linear on any line: a line is looked at once, from its first mark, and a folder is never scanned for its end.
_MARK = re.compile(r"successfully (loaded|saved) checkpoint ")
_LOADED_AT = re.compile(r" at iteration\s+(\d+)")
_SAVED_AT = re.compile(r"(?:from|at) iteration\s+(\d+)(?: to (\S+))?")
# Megatron-LM's start-up banner before its argument dump (training/arguments.py `_print_args`, rank 0 only), after
# whatever prefix a launcher adds (`0: [default0]:`)
_BANNER = "- arguments -"
_LAUNCH = re.compile(r"-{3,} arguments -{3,}\s*$")


def parse_megatron_resilience(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> ResilienceLog:
    """Every checkpoint loaded or saved that a Megatron log prints, with its line and iteration (none is fine)."""
    text = read_text(path, display, limit=limit)
    events: list[LogEvent] = []
    line, counted, at = 1, 0, 0
    while (mark := _MARK.search(text, at)) is not None:
        end = text.find("\n", mark.end())
        at = len(text) if end < 0 else end
        line += text.count("\n", counted, mark.start())
        counted = mark.start()
        rest = text[mark.end():at]
        if mark.group(1) == "loaded":  # "from DIR at iteration N": DIR may hold spaces, the last " at" ends it
            cut = rest.rfind(" at iteration")
            loaded = _LOADED_AT.match(rest, cut) if cut >= 0 and rest.startswith("from ") else None
            if loaded:
                events.append(LogEvent(LogEventKind.CHECKPOINT_LOADED, line, step=int(loaded.group(1)),
                                       detail=rest[5:cut].strip()[:200] or None))
        elif saved := _SAVED_AT.match(rest):
            events.append(LogEvent(LogEventKind.CHECKPOINT_SAVED, line, step=int(saved.group(1)),
                                   detail=(saved.group(2) or "")[:200] or None))
    relaunches = _relaunches(text)
    if relaunches:
        events = sorted(events + relaunches, key=lambda event: event.line)
    return ResilienceLog(file=display, events=events, straggler_reports=[])


def _relaunches(text: str) -> list[LogEvent]:
    """A RELAUNCH event at each line of Megatron's `arguments` banner after the first (found by str.find: linear
    on any text)."""
    events: list[LogEvent] = []
    line, counted = 1, 0
    at = text.find(_BANNER)
    while at >= 0:
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        if _LAUNCH.search(text, start, end) is not None:
            line += text.count("\n", counted, start)
            counted = start
            events.append(LogEvent(LogEventKind.RELAUNCH, line))
        at = text.find(_BANNER, end)
    return events[1:]
