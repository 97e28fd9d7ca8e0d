"""nv-fabricmanager logs (`/var/log/fabricmanager.log`): the warnings and errors, NVSwitch SXid errors decoded."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.health.common import LineCounter, read_tool_text

__all__ = ["FabricManagerEntry", "FabricManagerLog", "parse_fabric_manager", "parse_fabric_manager_of"]

_FIX = "Add /var/log/fabricmanager.log as nv-fabricmanager wrote it"
# read over "\n" + the text: each pattern starts with its line's `\n`, found at C speed (`^` in MULTILINE mode is
# tried at every offset); a match at offset k of that text is the line at offset k of the log
_ENTRY = re.compile(r"\n\[([A-Z][a-z]{2} \d\d \d{4} \d\d:\d\d:\d\d)\] \[([A-Z]+)\] \[tid \d+\] ?([^\n]*)")
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "FATAL")
# a line that starts as an entry does: it must be a whole entry (a log cut inside one is not read as clean)
_STARTED = re.compile(r"\n\[[A-Z][a-z]{2} ")
_SXID = re.compile(r"detected NVSwitch (non-fatal|fatal) error (\d+) on fid (\d+) on NVSwitch pci bus id "
                   r"(\S+) physical id (\d+) port (\d+)")


@dataclass(frozen=True)
class FabricManagerEntry:
    """One warning or error entry; an NVSwitch error also gives its SXid, switch and port."""

    level: str
    stamp: str
    message: str
    line: int
    fatal: bool | None = None  # None: not an NVSwitch error
    sxid: int | None = None
    switch_pci: str | None = None
    switch_physical_id: int | None = None
    port: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"level": self.level, "stamp": self.stamp, "message": self.message, "line": self.line,
                "fatal": self.fatal, "sxid": self.sxid, "switch_pci": self.switch_pci,
                "switch_physical_id": self.switch_physical_id, "port": self.port}


@dataclass(frozen=True)
class FabricManagerLog:
    """The entries of one log counted by level, and its warnings and errors in file order."""

    file: str
    line: int
    last_line: int
    levels: dict[str, int]
    entries: list[FabricManagerEntry]
    first_stamp: str
    last_stamp: str

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "last_line": self.last_line, "levels": self.levels,
                "first_stamp": self.first_stamp, "last_stamp": self.last_stamp,
                "entries": [e.to_json() for e in self.entries]}


def parse_fabric_manager(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> FabricManagerLog:
    """Every warning and error of a fabric manager log (none is a clean log)."""
    text = read_tool_text(path, display, limit=limit, what="a fabric manager log")
    return parse_fabric_manager_of(text, display)


def parse_fabric_manager_of(text: str, display: str, *, first_line: int = 1) -> FabricManagerLog:
    """parse_fabric_manager() of a log's text; `first_line` is the file line the text starts at."""
    lines = LineCounter(text, first_line)
    levels: Counter[str] = Counter()
    entries: list[FabricManagerEntry] = []
    first: re.Match[str] | None = None
    last: re.Match[str] | None = None
    whole: set[int] = set()
    lined = "\n" + text
    for found in _ENTRY.finditer(lined):
        at = found.start()  # the entry's offset in `text`
        if first is None:
            first = found
            if text[:at].strip():
                raise EvidenceError(display, f"expected fabric manager entries `[Feb 25 2025 13:59:45] [INFO] [tid "
                                    f"1803] ...`, got {text.lstrip()[:60]!r} first. {_FIX}",
                                    line=lines.line_at(len(text) - len(text.lstrip())))
        last = found
        whole.add(at)
        stamp, level, message = found.groups()
        if level not in _LEVELS:
            raise EvidenceError(display, f"expected a level ({', '.join(_LEVELS)}), got {level[:20]!r}. {_FIX}",
                                line=lines.line_at(at))
        levels[level] += 1
        if level in ("DEBUG", "INFO"):
            continue
        sxid = _SXID.search(message)
        line = lines.line_at(at)
        if sxid is None:
            entries.append(FabricManagerEntry(level, stamp, message.strip(), line))
        else:
            kind, code, _, pci, physical, port = sxid.groups()
            entries.append(FabricManagerEntry(level, stamp, message.strip(), line, fatal=kind == "fatal",
                                              sxid=int(code), switch_pci=pci, switch_physical_id=int(physical),
                                              port=int(port)))
    for started in _STARTED.finditer(lined):
        at = started.start()
        if at not in whole:
            end = text.find("\n", at)
            bad = text[at:] if end < 0 else text[at:end]
            raise EvidenceError(display, f"expected a whole entry `[Feb 25 2025 13:59:45] [INFO] [tid 1803] ...`, "
                                f"got {bad[:60]!r}: cut short or garbled. {_FIX}", line=lines.line_at(at))
    if first is None or last is None:
        raise EvidenceError(display, f"expected fabric manager entries `[Feb 25 2025 13:59:45] [INFO] [tid 1803] "
                            f"...`, got none. {_FIX}", line=first_line)
    return FabricManagerLog(file=display, line=lines.line_at(first.start()),
                            last_line=lines.line_at(len(text.rstrip("\n"))), levels=dict(levels), entries=entries,
                            first_stamp=first.group(1), last_stamp=last.group(1))
