"""NVIDIA's Exemplar prescreen (`microbenchmarks/system_info/launch.sh` in NVIDIA/exemplar-performance): its
`slurm-<jobid>.out` split into the steps the script's banners name, and each tool's output in it read by that
tool's parser, with the lines of the whole file."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.health.common import LineCounter, read_tool_text
from clustercert.parsers.health.gpus import GpuReport
from clustercert.parsers.health.ibstat import IbPort, IbPorts
from clustercert.parsers.health.nvlink import NvlinkStatus, parse_nvlink_status_of
from clustercert.parsers.health.nvsmi_text import parse_nvsmi_text_of
from clustercert.parsers.health.topo import TopoMatrix, parse_topo_of

__all__ = ["BANNER", "START", "SUMMARY", "Prescreen", "PrescreenStep", "parse_prescreen", "parse_prescreen_of"]

_FIX = "Re-run the prescreen (llmb-run's system_info microbenchmark) and add its whole slurm-<jobid>.out"
BANNER = "=" * 80
START = "System Info Collection Start"
SUMMARY = "System Info Collection Summary"
_STEP = re.compile(r"^\[(\w{1,8})\] (.*)$")
_FAILED = re.compile(r"^\[FAILED\] exit code (\d{1,3}) \(non-fatal, continuing\)[ \t]*$", re.MULTILINE)
_INFO = re.compile(r"^(Host|SLURM_JOB_ID|Timestamp|Failed non-fatal steps|Completed at): ?([^\n]*)$", re.MULTILINE)
_NVLINK_HEAD = "--- nvidia-smi nvlink -s ---"
_PORT = re.compile(r"^  (\S{1,64}) port (\d{1,4}): state=([^\n]*?) phys_state=([^\n]*)$", re.MULTILINE)


@dataclass(frozen=True)
class PrescreenStep:
    """One step of the script: its id (`8a`) and title as its banner prints them, its lines, the exit code the
    script printed when the step failed, and the parse error of its output when the output could not be read."""

    step: str
    title: str
    line: int
    last_line: int
    exit_code: int | None = None
    error: str | None = None
    error_line: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"step": self.step, "title": self.title, "line": self.line, "last_line": self.last_line,
                "exit_code": self.exit_code, "error": self.error, "error_line": self.error_line}


@dataclass(frozen=True)
class Prescreen:
    """One prescreen output: the host it ran on, its steps, and the tables read from the steps with a parser
    here (8a `nvidia-smi -q`, 8b `topo -m`, 8d `nvlink -s`, 10b the IB ports' states); a step that was not
    run, failed or could not be read leaves its table None."""

    file: str
    host: str | None
    host_line: int | None
    job_id: str | None
    timestamp: str | None
    line: int
    last_line: int
    steps: list[PrescreenStep]
    failed_steps: int | None
    gpus: GpuReport | None = None
    topo: TopoMatrix | None = None
    nvlink: NvlinkStatus | None = None
    ib_ports: IbPorts | None = None
    infos: dict[str, str] = field(default_factory=dict)

    def step(self, step: str) -> PrescreenStep | None:
        """The step of this id, if the output has it."""
        return next((s for s in self.steps if s.step == step), None)

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.file, "host": self.host, "host_line": self.host_line, "job_id": self.job_id,
            "timestamp": self.timestamp, "line": self.line, "last_line": self.last_line,
            "failed_steps": self.failed_steps, "steps": [s.to_json() for s in self.steps],
            "gpus": None if self.gpus is None else self.gpus.to_json(),
            "topo": None if self.topo is None else self.topo.to_json(),
            "nvlink": None if self.nvlink is None else self.nvlink.to_json(),
            "ib_ports": None if self.ib_ports is None else self.ib_ports.to_json(),
        }


def parse_prescreen(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> Prescreen:
    """The steps of a prescreen output and the tables of those read here."""
    text = read_tool_text(path, display, limit=limit, what="the prescreen's slurm-<jobid>.out")
    return parse_prescreen_of(text, display)


def parse_prescreen_of(text: str, display: str) -> Prescreen:
    """parse_prescreen() of an output's text."""
    lines = LineCounter(text)
    banners = _banners(text)
    titles = [title for _, _, title in banners]
    if START not in titles:
        raise EvidenceError(display, f"expected the prescreen's `{START}` banner, got none. {_FIX}", line=1)
    if SUMMARY not in titles:
        raise EvidenceError(display, f"expected the prescreen's closing `{SUMMARY}` banner, got the file ending at "
                            f"line {lines.line_at(len(text.rstrip(chr(10))))}: the job was cut short. {_FIX}",
                            line=lines.line_at(len(text.rstrip("\n"))))
    start = banners[titles.index(START)]
    infos: dict[str, tuple[str, int]] = {}
    steps: list[PrescreenStep] = []
    tables: dict[str, object] = {}
    for i, (banner_start, banner_end, _) in enumerate(banners):
        body_start = banner_end + 1
        body_end = banners[i + 1][0] if i + 1 < len(banners) else len(text)
        body = text[body_start:body_end]
        banner_line = lines.line_at(banner_start)
        first = lines.line_at(body_start)
        title = titles[i]
        if title in (START, SUMMARY):
            for found in _INFO.finditer(body):
                infos[found.group(1)] = (found.group(2).strip(), first + body.count("\n", 0, found.start()))
            continue
        step = _STEP.match(title)
        if step is None:
            continue  # a banner of the script's own we do not know: its lines stay unread
        failed = list(_FAILED.finditer(body)) if "[FAILED] exit code " in body else []
        exit_code = int(failed[-1].group(1)) if failed else None
        last = first + body.rstrip("\n").count("\n")
        error: EvidenceError | None = None
        reader = _READERS.get(step.group(1))
        if reader is not None and exit_code is None:
            try:
                tables[step.group(1)] = reader(body, display, first)
            except EvidenceError as exc:
                error = exc
        steps.append(PrescreenStep(step.group(1), step.group(2).strip(), banner_line, last,
                                   exit_code=exit_code, error=None if error is None else error.message,
                                   error_line=None if error is None else error.line))
    host = infos.get("Host")
    failed_text = infos.get("Failed non-fatal steps", ("", 0))[0]
    gpus, topo, nvlink, ports = tables.get("8a"), tables.get("8b"), tables.get("8d"), tables.get("10b")
    return Prescreen(
        file=display, host=None if host is None else host[0], host_line=None if host is None else host[1],
        job_id=infos.get("SLURM_JOB_ID", (None, 0))[0], timestamp=infos.get("Timestamp", (None, 0))[0],
        line=lines.line_at(start[0]), last_line=lines.line_at(len(text.rstrip("\n"))), steps=steps,
        failed_steps=int(failed_text) if failed_text.isdigit() and len(failed_text) < 4 else None,
        gpus=gpus if isinstance(gpus, GpuReport) else None, topo=topo if isinstance(topo, TopoMatrix) else None,
        nvlink=nvlink if isinstance(nvlink, NvlinkStatus) else None,
        ib_ports=ports if isinstance(ports, IbPorts) else None,
        infos={key: value for key, (value, _) in infos.items()})


def _banners(text: str) -> list[tuple[int, int, str]]:
    """Each banner as run_step prints it (a line of 80 `=`, the title, another): its start, the end of its last
    line, and its title; found by str.find, one look per line of `=`."""
    out: list[tuple[int, int, str]] = []
    at = text.find(BANNER)
    while at >= 0:
        title_start = at + len(BANNER) + 1
        title_end = text.find("\n", title_start)
        closing_end = title_end + 1 + len(BANNER)
        if ((at == 0 or text[at - 1] == "\n") and text[at + len(BANNER):title_start] == "\n" and title_end > 0
                and text[title_end + 1:closing_end] == BANNER and text[closing_end:closing_end + 1] in ("\n", "")):
            out.append((at, closing_end, text[title_start:title_end].strip()))
            at = text.find(BANNER, closing_end)
        else:
            end = text.find("\n", at)
            at = -1 if end < 0 else text.find(BANNER, end)
    return out


def _nvlink(body: str, display: str, first: int) -> NvlinkStatus:
    """Step 8d: `--- nvidia-smi nvlink -s ---`, the tool's output, a blank line, then the script's verdict lines."""
    at = body.find(_NVLINK_HEAD)
    if at < 0:
        raise EvidenceError(display, f"expected the step's `{_NVLINK_HEAD}` line, got none. {_FIX}", line=first)
    start = body.find("\n", at) + 1
    end = body.find("\n\n", start)
    end = len(body) if end < 0 else end
    return parse_nvlink_status_of(body[start:end], display, first_line=first + body.count("\n", 0, start))


def _ports(body: str, display: str, first: int) -> IbPorts:
    """Step 10b: `  mlx5_0 port 1: state=4: ACTIVE phys_state=5: LinkUp` per port, read from sysfs (no rate)."""
    lines = LineCounter(body, first)
    ports: list[IbPort] = []
    for found in _PORT.finditer(body):
        state, physical = (v.partition(":")[2].strip() or v.strip() for v in (found.group(3), found.group(4)))
        ports.append(IbPort(ca=found.group(1), port=int(found.group(2)),
                            state=state.capitalize() if state.isupper() else state,
                            physical_state=physical, rate_gbps=None, link_layer="", line=lines.line_at(found.start())))
    if not ports and "No InfiniBand devices found" not in body:
        raise EvidenceError(display, f"expected `  mlx5_0 port 1: state=... phys_state=...` lines, got none. {_FIX}",
                            line=first)
    last = first + body.rstrip("\n").count("\n")
    return IbPorts(file=display, source="prescreen /sys/class/infiniband", line=ports[0].line if ports else first,
                   last_line=last, ports=ports)


_READERS: dict[str, Callable[[str, str, int], object]] = {
    "8a": lambda body, display, first: parse_nvsmi_text_of(body, display, first_line=first),
    "8b": lambda body, display, first: parse_topo_of(body, display, first_line=first),
    "8d": _nvlink,
    "10b": _ports,
}
