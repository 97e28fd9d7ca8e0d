"""Kernel logs as `dmesg`, `dmesg -T`, `dmesg --time-format iso [--decode]` and syslog write them: the GPU
driver's Xid lines, the GPUs it names, and network links losing and regaining carrier (IB link flaps)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.health.common import LineCounter, read_tool_text

__all__ = ["CarrierEvent", "KernelLog", "XidEvent", "parse_kernel_log", "parse_kernel_log_of"]

_FIX = "Add the kernel log as `dmesg -T` (or `journalctl -k`) wrote it"
# the forms a kernel log line starts with; `--decode` puts `kern  :warn  : ` before any of them
_TIME = (r"\[ *\d+\.\d+\]|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\]"
         r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[,.]\d+)?(?:Z|[+-]\d\d:?\d\d)?|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d")
_FIRST = re.compile(r"^(?:\w+ *:\w+ *: )?(?:" + _TIME + ")")
_STAMP = re.compile(_TIME)
_STAMP_AT = re.compile(r"(?:\w{1,8} *:\w{1,8} *: )?(" + _TIME + ")")
# a whole line: its time stamp complete, then what it says (a line cut inside its stamp is not one)
_WHOLE = re.compile(_FIRST.pattern + r"[ \t]+\S")
_SYSLOG_HOST = re.compile(r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\S+) (\S+) \S+?(?:\[\d+\])?: ")
_XID_MARK = "NVRM: Xid ("
# starts with its literal, so the scan for it runs at C speed; an Xid line it does not match is found by count
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-9A-Fa-f])?\): "
                  r"(\d{1,4}),[ \t]*(?:pid=([^,\n]*), name=([^,\n]*), )?([^\n]*)")
# The same Xid line read with its time stamp, where the stamp is the whole of what precedes the driver's text (dmesg
# -T's `[Sun Feb 23 16:24:18 2025]`, dmesg's `[ 5107.64]`, `--time-format iso`, each with `--decode`'s level or
# not): the pattern starts at the line end before it, so a flood of Xid lines is read with no Python per line
# beyond the event's tuple. A file where it reads fewer lines than there are Xid marks is read the general way.
_XID_STAMPED = re.compile(r"\n(?:\w{1,8} *:\w{1,8} *: )?(\[ *\d+\.\d+\]|\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d "
                          r"\d\d:\d\d:\d\d \d{4}\]|\d{4}-\d\d-\d\dT[^\s\]]{9,40})[ \t]+" + _XID.pattern)
_GPU_AT = re.compile(r"NVRM: GPU at PCI:([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}): (GPU-[0-9a-fA-F-]{36})")
# the interface before `: lost carrier` (systemd-networkd and the kernel print it so); found from the literal, then
# read back to its line's start, so a long line is scanned once
_CARRIER = re.compile(r": ([Ll]ost|[Gg]ained) carrier[ \t]*$", re.MULTILINE)
_INTERFACE = re.compile(r"[\w.-]{1,32}")


class XidEvent(NamedTuple):
    """One Xid line: the GPU's PCI address (domain:bus:device, as the driver prints it), the code, the process and
    the message, and the time as the line prints it (a tuple: a flood of them is built at C speed)."""

    pci: str
    xid: int
    line: int
    stamp: str
    message: str
    pid: str | None = None
    process: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"pci": self.pci, "xid": self.xid, "line": self.line, "stamp": self.stamp, "message": self.message,
                "pid": self.pid, "process": self.process}


@dataclass(frozen=True)
class CarrierEvent:
    """A network interface losing (`up` False) or regaining its carrier."""

    interface: str
    up: bool
    line: int
    stamp: str

    def to_json(self) -> dict[str, object]:
        return {"interface": self.interface, "up": self.up, "line": self.line, "stamp": self.stamp}


@dataclass(frozen=True)
class KernelLog:
    """The events of one kernel log, in file order, and the hosts its syslog lines name."""

    file: str
    line: int
    last_line: int
    xids: list[XidEvent]
    carrier: list[CarrierEvent]
    gpu_uuids: dict[str, str]
    hosts: list[str]
    first_stamp: str
    last_stamp: str

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "last_line": self.last_line,
            "first_stamp": self.first_stamp,
            "last_stamp": self.last_stamp,
            "hosts": self.hosts,
            "gpu_uuids": self.gpu_uuids,
            "xids": [x.to_json() for x in self.xids],
            "carrier": [c.to_json() for c in self.carrier],
        }


def parse_kernel_log(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> KernelLog:
    """Every Xid and carrier event of a kernel log (none is a clean log, not an error)."""
    text = read_tool_text(path, display, limit=limit, what="a kernel log")
    return parse_kernel_log_of(text, display)


def _stamp(prefix: str) -> str:
    """The time a line's prefix prints (`[Sun Feb 23 16:24:18 2025]`, `2024-11-15T12:02:03,470068+00:00`)."""
    # the two forms a flood of Xid lines comes in, told by string operations (the pattern below reads the rest)
    if prefix[:1] == "[":
        close = prefix.find("]")
        if close > 0 and prefix[close + 1:].strip() == "":
            return prefix[:close + 1]
    last = prefix.rstrip().rpartition(" ")[2]
    if len(last) > 19 and last[4:5] == "-" and last[10:11] == "T" and last[:4].isdigit():
        return last
    found = _STAMP_AT.match(prefix)
    if found is not None:
        return found.group(1)
    anywhere = _STAMP.search(prefix)  # a syslog line's `host kernel: [ 5107.64]`
    return anywhere.group(0) if anywhere is not None else prefix.strip()[:80]


def _refuse_xid(text: str, display: str, read: set[int], first_line: int) -> None:
    """The located refusal of the first Xid line the pattern did not read (cut short or garbled)."""
    lines = LineCounter(text, first_line)
    at = text.find(_XID_MARK)
    while at >= 0:
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        line = lines.line_at(start)
        if line not in read:
            raise EvidenceError(display, f"expected an Xid line `NVRM: Xid (PCI:0000:19:00): 48, ...`, got "
                                f"{text[start:end].strip()[:80]!r}: cut short or garbled. {_FIX}", line=line)
        at = text.find(_XID_MARK, end)


def _xids_stamped(text: str, first_line: int) -> list[XidEvent]:
    """The Xid lines whose prefix is a time stamp alone (_XID_STAMPED), in file order."""
    # split() hands over each event's groups and the text between events as strings, at C speed: an event's line is
    # the line ends before it (its own leading one included), with no match object per line
    parts = iter(_XID_STAMPED.split("\n" + text))  # the first line, too, has a line end before it
    xids: list[XidEvent] = []
    # a flood is thousands of lines: no lookups per line, and each event built by tuple's own constructor (the
    # named tuple's __new__ is a Python function)
    append, new = xids.append, tuple.__new__
    line = first_line - 1 + next(parts).count("\n")
    for stamp, pci, code, pid, process, message, between in zip(parts, parts, parts, parts, parts, parts, parts,
                                                                 strict=False):
        line += 1
        append(new(XidEvent, (pci.lower(), int(code), line, stamp, message.strip(),
                              None if pid is None else pid.strip("'"), None if process is None else process.strip())))
        line += between.count("\n")
    return xids


def _xids(text: str, first_line: int) -> list[XidEvent]:
    """Every Xid line the pattern reads, whatever precedes it (a syslog's host and tag), in file order."""
    xids: list[XidEvent] = []
    append, rfind, count = xids.append, text.rfind, text.count
    line, counted = first_line, 0
    for event in _XID.finditer(text):
        at = event.start()
        start = rfind("\n", 0, at) + 1
        line += count("\n", counted, start)
        counted = start
        pci, code, pid, process, message = event.groups()
        append(XidEvent(pci.lower(), int(code), line, _stamp(text[start:at]), message.strip(),
                        None if pid is None else pid.strip("'"), None if process is None else process.strip()))
    return xids


def parse_kernel_log_of(text: str, display: str, *, first_line: int = 1) -> KernelLog:
    """parse_kernel_log() of a log's text; `first_line` is the file line the text starts at."""
    lines = LineCounter(text, first_line)
    body = text.lstrip("\n")
    body_start = len(text) - len(body)
    first = _FIRST.match(body)
    if first is None:
        raise EvidenceError(display, f"expected kernel log lines (as dmesg, dmesg -T, dmesg --time-format iso or "
                            f"syslog print them), got {body.partition(chr(10))[0][:60]!r}. {_FIX}",
                            line=lines.line_at(body_start))
    marks = text.count(_XID_MARK)
    xids = _xids_stamped(text, first_line) if marks else []
    if len(xids) != marks:
        xids = _xids(text, first_line)
    if len(xids) != marks:
        _refuse_xid(text, display, {x.line for x in xids}, first_line)
    carrier: list[CarrierEvent] = []
    lines = LineCounter(text, first_line)
    for found in _CARRIER.finditer(text):
        start = text.rfind("\n", 0, found.start()) + 1
        before = text[start:found.start()]
        interface = before.rpartition(" ")[2]
        if _INTERFACE.fullmatch(interface) is None:
            continue  # not an interface's carrier line
        carrier.append(CarrierEvent(interface=interface, up=found.group(1).lower() == "gained",
                                    line=lines.line_at(start), stamp=_stamp(before)))
    uuids = {m.group(1).lower(): m.group(2) for m in _GPU_AT.finditer(text)}
    last = body.rstrip("\n").rpartition("\n")[2]
    if last.strip() and _WHOLE.match(last.lstrip()) is None:
        raise EvidenceError(display, f"expected the last line to start with a time stamp as the first does, got "
                            f"{last.strip()[:60]!r}: the log looks cut. {_FIX}",
                            line=lines.line_at(len(text.rstrip(chr(10)))))
    hosts = sorted({m.group(1) for m in (_SYSLOG_HOST.match(body), _SYSLOG_HOST.match(last)) if m is not None})
    return KernelLog(file=display, line=lines.line_at(body_start), last_line=lines.line_at(len(text.rstrip("\n"))),
                     xids=xids, carrier=carrier, gpu_uuids=uuids, hosts=hosts,
                     first_stamp=_stamp(first.group(0)), last_stamp=_stamp(last))
