"""Checkpoint lines in Megatron-LM and Megatron-DeepSpeed logs: what tells a job's restart inside one log.

A Slurm job requeued with its output appended (`--open-mode=append`), or restarted by its launcher, goes on in
the same file: the start-up banner again, then `successfully loaded checkpoint from DIR ... at iteration N` and
the iterations from N + 1, some of them printed before. That line is the mark `validation.tables` accepts as a
restart: without it a counter that goes back is a spliced log.
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
    return ResilienceLog(file=display, events=events, straggler_reports=[])
