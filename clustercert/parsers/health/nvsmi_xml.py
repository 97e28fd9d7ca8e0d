"""`nvidia-smi -q -x` XML reports (DTD v11 to v13), read with the standard library's expat, entities refused."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from xml.parsers import expat

from clustercert.errors import EvidenceError
from clustercert.evidence.guards import read_regular
from clustercert.parsers.common import DEFAULT_LIMIT, refuse_binary
from clustercert.parsers.health.common import LineCounter, Reading
from clustercert.parsers.health.gpus import GpuRecord, GpuReport, bus_id_of, reading_of

__all__ = ["MAX_XML_DEPTH", "parse_nvsmi_xml", "parse_nvsmi_xml_of"]

_FIX = "Re-capture `nvidia-smi -q -x` on the node and add the whole output"
# nvidia-smi nests five levels deep (nvidia_smi_log > gpu > ecc_errors > volatile > value); anything far deeper
# is not its output, and is refused before it costs memory
MAX_XML_DEPTH = 32

# The tool's element paths under <gpu> -> FIELDS name; DTD v12 renamed clocks_throttle_reasons to
# clocks_event_reasons, v13 replaced power_draw by instant/average_power_draw: each spelling is read.
_PATHS: dict[tuple[str, ...], str] = {
    ("product_name",): "name",
    ("uuid",): "uuid",
    ("serial",): "serial",
    ("minor_number",): "minor_number",
    ("pci", "pci_bus_id"): "bus_id",
    ("pci", "replay_counter"): "pcie.replays",
    ("pci", "replay_rollover_counter"): "pcie.replay_rollovers",
    ("ecc_mode", "current_ecc"): "ecc.mode",
    ("ecc_errors", "aggregate", "sram_threshold_exceeded"): "ecc.aggregate.sram_threshold_exceeded",
    ("retired_pages", "multiple_single_bit_retirement", "retired_count"): "retired.single_bit",
    ("retired_pages", "double_bit_retirement", "retired_count"): "retired.double_bit",
    ("retired_pages", "pending_blacklist"): "retired.pending",
    ("retired_pages", "pending_retirement"): "retired.pending",
    ("remapped_rows", "remapped_row_corr"): "remap.correctable",
    ("remapped_rows", "remapped_row_unc"): "remap.uncorrectable",
    ("remapped_rows", "remapped_row_pending"): "remap.pending",
    ("remapped_rows", "remapped_row_failure"): "remap.failure",
    ("gpu_power_readings", "power_draw"): "power.draw",
    ("gpu_power_readings", "instant_power_draw"): "power.draw",
    ("power_readings", "power_draw"): "power.draw",
    ("utilization", "gpu_util"): "utilization.gpu",
    ("fabric", "state"): "fabric.state",
    ("fabric", "status"): "fabric.status",
    ("fabric", "cliqueId"): "fabric.clique_id",
    ("fabric", "clusterUuid"): "fabric.cluster_uuid",
    ("fabric", "health", "summary"): "fabric.health.summary",
    ("fabric", "health", "bandwidth"): "fabric.health.bandwidth",
    ("fabric", "health", "route_unhealthy"): "fabric.health.route_unhealthy",
    ("fabric", "health", "incorrect_configuration"): "fabric.health.incorrect_configuration",
    ("gpu_reset_status", "reset_required"): "reset.required",
    ("gpu_reset_status", "drain_and_reset_recommended"): "reset.drain_and_reset_recommended",
}
for _scope in ("volatile", "aggregate"):
    for _key in ("sram_correctable", "sram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded",
                 "dram_correctable", "dram_uncorrectable"):
        _PATHS[("ecc_errors", _scope, _key)] = f"ecc.{_scope}.{_key}"
    _PATHS[("ecc_errors", _scope, "double_bit", "total")] = f"ecc.{_scope}.double_bit"
for _section, _prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                          ("clocks_throttle_reasons", "clocks_throttle_reason_")):
    for _name, _key in (("gpu_idle", "idle"), ("applications_clocks_setting", "applications_clocks_setting"),
                        ("sw_power_cap", "sw_power_cap"), ("hw_slowdown", "hw_slowdown"),
                        ("hw_thermal_slowdown", "hw_thermal_slowdown"),
                        ("hw_power_brake_slowdown", "hw_power_brake_slowdown"), ("sync_boost", "sync_boost"),
                        ("sw_thermal_slowdown", "sw_thermal_slowdown"),
                        ("display_clocks_setting", "display_clock_setting")):
        _PATHS[(_section, _prefix + _name)] = f"clocks.{_key}"
_HEAD = {"timestamp", "driver_version", "cuda_version", "attached_gpus"}


class _Refused(Exception):
    """Raised inside an expat handler to stop the parse; carries the located refusal."""


def parse_nvsmi_xml(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> GpuReport:
    """Every GPU of an `nvidia-smi -q -x` report with the readings the health rules judge."""
    data = read_regular(path, display, limit=limit)
    if not data.strip():
        raise EvidenceError(display, f"expected `nvidia-smi -q -x` XML, got an empty file. {_FIX}")
    refuse_binary(data[:65536], display)
    return parse_nvsmi_xml_of(data, display)


def parse_nvsmi_xml_of(data: bytes, display: str, *, first_line: int = 1) -> GpuReport:
    """parse_nvsmi_xml() of a document's bytes; `first_line` is the file line the document starts at.

    A document as nvidia-smi writes it (no comment, CDATA, processing instruction past the declaration, entity or
    character reference) is checked whole by expat with no handler, then its kept elements are read by one pattern
    at C speed (_scan); any other document is read element by element through expat's handlers (_Reader). Both
    give the same report (tests/real/test_real_health.py)."""
    text = _plain(data)
    if text is not None:
        checker = expat.ParserCreate()
        checker.EntityDeclHandler = _no_entity  # unreachable without `<!ENTITY`: kept as the refusal's backstop
        try:
            checker.Parse(data, True)
        except expat.ExpatError as exc:
            what = expat.ErrorString(exc.code) if exc.code is not None else str(exc)
            raise EvidenceError(display, f"expected well-formed XML, got {what}: the file looks cut short or "
                                f"garbled. {_FIX}", line=first_line - 1 + (exc.lineno or 1)) from None
        return _scan(text, display, first_line)
    return _Reader(display, first_line).read(data)


_ROOT = re.compile(r"\s*(?:<\?xml[^<>]{0,200}\?>\s*)?(?:<!DOCTYPE nvidia_smi_log[^<>\[\]]{0,200}>\s*)?<nvidia_smi_log>")


def _plain(data: bytes) -> str | None:
    """The document's text when it is plain nvidia-smi output (the pattern's reading is exact for it), else None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text.find("<!", 200) >= 0 or "&" in text or text.count("<?") > 1 or _ROOT.match(text) is None:
        return None
    # nvidia-smi writes one element per line (a leaf's two tags at most): more tags than that is another writer's
    # document, deep nesting on one line among them, read through the handlers and their depth bound
    if text.count("<") > 2 * text.count("\n") + 4:
        return None
    return text


def _no_entity(name: str, *_: object) -> None:
    raise expat.ExpatError(f"entity declaration {name!r} refused")


_SECTIONS = frozenset(name for path in _PATHS for name in path[:-1]) | {"processes", "mig_devices"}
_LEAVES = frozenset(path[-1] for path in _PATHS) | _HEAD
_TAG = re.compile(r"<(?:/(gpu|" + "|".join(sorted(_SECTIONS, key=lambda n: (-len(n), n))) + r")|(gpu|process_info|"
                  + "|".join(sorted(_SECTIONS | _LEAVES, key=lambda n: (-len(n), n)))
                  + r")(?: id=\"([^\"<>]{0,64})\")?)>")  # a leaf's end tag is read with its text, not matched
_CLOSE = {name: f"</{name}>" for name in _LEAVES}


# what nvidia-smi lists at length and no rule reads: most of a report's bytes (73 % of a B200's), passed over by
# str.find instead of the tag pattern
_SKIPPED = ("<supported_clocks>", "</supported_clocks>")


def _tags(text: str) -> Iterator[re.Match[str]]:
    """The kept tags of the document in order, outside the stretches skipped."""
    at = 0
    opening, closing = _SKIPPED
    while True:
        skip = text.find(opening, at)
        yield from _TAG.finditer(text, at, len(text) if skip < 0 else skip)
        if skip < 0:
            return
        end = text.find(closing, skip)
        if end < 0:
            return
        at = end + len(closing)


def _scan(text: str, display: str, first_line: int) -> GpuReport:
    """The kept elements of a checked plain document, by its tags: a stack of the kept sections gives each leaf
    its path under <gpu> (the sections between are nvidia-smi's own, never a kept name: tests hold the reading
    equal to expat's element by element)."""
    lines = LineCounter(text, first_line)
    head: dict[str, tuple[str, int]] = {}
    gpus: list[GpuRecord] = []
    stack: list[str] = []
    readings: dict[str, Reading] = {}
    gpu_id, gpu_line = "", 0
    processes: int | None = None
    processes_line: int | None = None
    path: tuple[str, ...] = ()  # the kept sections open under <gpu>
    skipping = 0  # inside <mig_devices>: a MIG instance's own readings are not the GPU's
    for tag in _tags(text):
        closing, name, ident = tag.groups()
        if closing:
            if stack and stack[-1] == closing:
                stack.pop()
                if closing == "mig_devices":
                    skipping -= 1
                if closing == "gpu" and not stack:
                    bus_id = bus_id_of(gpu_id, file=display, line=gpu_line)
                    gpus.append(GpuRecord(index=len(gpus), bus_id=bus_id, line=gpu_line, readings=readings,
                                          processes=processes, processes_line=processes_line))
                path = tuple(stack[1:])
            continue
        if name == "gpu" and not stack:
            gpu_id, gpu_line = ident or "", lines.line_at(tag.start())
            readings, processes, processes_line = {}, None, None
            stack.append(name)
            path = ()
            continue
        if not stack:
            if name in _HEAD:
                end = text.find("<", tag.end())
                head[name] = (text[tag.end():end].strip(), lines.line_at(tag.start()))
            continue
        if name in _SECTIONS:
            stack.append(name)
            path = tuple(stack[1:])
            if name == "mig_devices":
                skipping += 1
            elif name == "processes" and len(stack) == 2 and not skipping:
                processes, processes_line = 0, lines.line_at(tag.start())
            continue
        if skipping:
            continue
        if name == "process_info":
            if path == ("processes",) and processes is not None:
                processes += 1
            continue
        end = text.find("<", tag.end())
        key = _PATHS.get((*path, name))
        if key is not None and text.startswith(_CLOSE[name], end):  # a leaf: its text, then its end tag
            readings[key] = reading_of(key, text[tag.end():end], file=display, line=lines.line_at(tag.start()))
    attached_text, attached_line = head.get("attached_gpus", ("", first_line))
    if not attached_text.isdigit() or len(attached_text) > 6:
        raise EvidenceError(display, f"expected <attached_gpus> with a number, got {attached_text[:40]!r}. {_FIX}",
                            line=attached_line)
    attached = int(attached_text)
    if attached != len(gpus):
        raise EvidenceError(display, f"expected {attached} <gpu> elements (<attached_gpus> at line {attached_line}), "
                            f"got {len(gpus)}. {_FIX}", line=attached_line)
    root = text.find("<nvidia_smi_log>")
    return GpuReport(
        file=display, source="nvidia-smi -q -x", line=LineCounter(text, first_line).line_at(root),
        last_line=lines.line_at(len(text.rstrip())), attached_gpus=attached, gpus=gpus,
        driver_version=head.get("driver_version", (None, 0))[0], cuda_version=head.get("cuda_version", (None, 0))[0],
        timestamp=head.get("timestamp", (None, 0))[0], attached_line=attached_line)


class _Reader:
    """One pass of expat over the document: the element path is tracked, and text is collected only inside the
    elements kept (the handler is swapped in and out, so the many elements skipped cost two calls each)."""

    def __init__(self, display: str, first_line: int) -> None:
        self.display, self.offset = display, first_line - 1
        self.parser = expat.ParserCreate()
        self.parser.buffer_text = True
        self.stack: list[str] = []
        self.text: list[str] = []
        self.key: str | None = None
        self.key_line = 0
        self.head: dict[str, tuple[str, int]] = {}
        self.gpus: list[GpuRecord] = []
        self.readings: dict[str, Reading] = {}
        self.gpu_id = ""
        self.gpu_line = 0
        self.processes: int | None = None
        self.processes_line: int | None = None
        self.root_line = 0
        self.root_end = 0

    def read(self, data: bytes) -> GpuReport:
        parser = self.parser
        parser.StartElementHandler = self.start
        parser.EndElementHandler = self.end
        parser.EntityDeclHandler = self.entity
        parser.StartDoctypeDeclHandler = None
        try:
            parser.Parse(data, True)
        except _Refused as refused:
            raise refused.args[0] from None
        except expat.ExpatError as exc:
            what = expat.ErrorString(exc.code) if exc.code is not None else str(exc)
            raise EvidenceError(self.display, f"expected well-formed XML, got {what}: the file looks cut short "
                                f"or garbled. {_FIX}", line=self.offset + (exc.lineno or 1)) from None
        if not self.root_line:
            raise EvidenceError(self.display, f"expected an <nvidia_smi_log> document, got none. {_FIX}",
                                line=self.offset + 1)
        attached_text, attached_line = self.head.get("attached_gpus", ("", self.root_line))
        if not attached_text.isdigit() or len(attached_text) > 6:
            raise EvidenceError(self.display, f"expected <attached_gpus> with a number, got {attached_text[:40]!r}. "
                                f"{_FIX}", line=attached_line)
        attached = int(attached_text)
        if attached != len(self.gpus):
            raise EvidenceError(self.display, f"expected {attached} <gpu> elements (<attached_gpus> at line "
                                f"{attached_line}), got {len(self.gpus)}. {_FIX}", line=attached_line)
        return GpuReport(
            file=self.display, source="nvidia-smi -q -x", line=self.root_line,
            last_line=self.root_end or self.offset + parser.CurrentLineNumber, attached_gpus=attached, gpus=self.gpus,
            driver_version=self.head.get("driver_version", (None, 0))[0],
            cuda_version=self.head.get("cuda_version", (None, 0))[0],
            timestamp=self.head.get("timestamp", (None, 0))[0], attached_line=attached_line)

    def refuse(self, message: str) -> None:
        raise _Refused(EvidenceError(self.display, f"{message}. {_FIX}",
                                     line=self.offset + self.parser.CurrentLineNumber))

    def entity(self, name: str, *_: object) -> None:
        # nvidia-smi declares no entity; a declared one is how a document expands itself (billion laughs) or
        # reaches out of it (external entities), so none is read
        self.refuse(f"expected nvidia-smi's XML, got an entity declaration ({name!r}): entities are refused")

    def start(self, name: str, attrs: dict[str, str]) -> None:
        stack = self.stack
        depth = len(stack)
        if depth >= MAX_XML_DEPTH:
            self.refuse(f"expected nvidia-smi's XML (at most {MAX_XML_DEPTH} levels), got deeper nesting")
        stack.append(name)
        if depth == 0:
            if name != "nvidia_smi_log":
                self.refuse(f"expected an <nvidia_smi_log> document, got <{name[:40]}>")
            self.root_line = self.offset + self.parser.CurrentLineNumber
            return
        if depth == 1:
            if name == "gpu":
                self.gpu_id = attrs.get("id", "")
                self.gpu_line = self.offset + self.parser.CurrentLineNumber
                self.readings, self.processes, self.processes_line = {}, None, None
            elif name in _HEAD:
                self.collect(name)
            return
        if stack[1] != "gpu":
            return
        if depth == 2 and name == "processes":
            self.processes, self.processes_line = 0, self.offset + self.parser.CurrentLineNumber
        elif depth == 3 and name == "process_info" and stack[2] == "processes" and self.processes is not None:
            self.processes += 1
        key = _PATHS.get(tuple(stack[2:]))
        if key is not None:
            self.collect(key)

    def collect(self, key: str) -> None:
        self.key, self.key_line = key, self.offset + self.parser.CurrentLineNumber
        self.text = []
        self.parser.CharacterDataHandler = self.text.append

    def end(self, name: str) -> None:
        stack = self.stack
        stack.pop()
        if not stack:
            self.root_end = self.offset + self.parser.CurrentLineNumber
        key = self.key
        if key is not None:
            self.parser.CharacterDataHandler = None
            self.key = None
            value = "".join(self.text)
            if len(stack) == 1:
                self.head[key] = (value.strip(), self.key_line)
            else:
                self.readings[key] = reading_of(key, value, file=self.display, line=self.key_line)
        elif len(stack) == 1 and name == "gpu":
            line = self.gpu_line
            bus_id = bus_id_of(self.gpu_id, file=self.display, line=line)
            self.gpus.append(GpuRecord(index=len(self.gpus), bus_id=bus_id, line=line, readings=self.readings,
                                       processes=self.processes, processes_line=self.processes_line))
