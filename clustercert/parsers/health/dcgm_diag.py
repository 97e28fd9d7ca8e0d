"""`dcgmi diag -r N` text tables as DCGM 2.x to 4.x print them: categories, tests, per-GPU results, messages."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.health.common import LineCounter, read_tool_text

__all__ = ["DiagMessage", "DiagRun", "DiagTest", "parse_dcgm_diag", "parse_dcgm_diag_of"]

_FIX = "Re-run `dcgmi diag` on the node and add its whole output"
_ROW = re.compile(r"^\|([^|\n]*)\|([^\n]*)\|[ \t]*$", re.MULTILINE)
_RULE = re.compile(r"^[+|]-+\+-+[+|][ \t]*$")
_RESULTS = ("Pass", "Fail", "Warn", "Skip", "Not Run", "Error")
# `Pass - All`, `Fail - GPU: 1`, `Pass - GPUs: 0, 2, 3` (DCGM 2-3); `GPU0: Pass` (DCGM 4, one per row)
_SPLIT = re.compile(r"^(Pass|Fail|Warn|Skip|Not Run|Error) - (?:(All)|GPUs?: ?(\d+(?:, ?\d+)*))$")
_PER_GPU = re.compile(r"^GPU ?(\d+): ?(Pass|Fail|Warn|Skip|Not Run|Error)$")
_GPU_PREFIX = re.compile(r"^GPU (\d+)\b")
_MESSAGE_KINDS = ("Info", "Warning", "Error")
# DCGM cuts a message into pieces of this many characters, one per table row (Diag.cpp DATA_INFO_TAG_LEN)
_CHUNK = 45


@dataclass(frozen=True)
class DiagMessage:
    """An Info, Warning or Error row (its continuation rows joined), with the GPU it names when it names one."""

    kind: str
    text: str
    line: int
    gpu: int | None

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "text": self.text, "line": self.line, "gpu": self.gpu}


@dataclass
class DiagTest:
    """One test row: its result for all GPUs (`all_gpus`) or per GPU (`per_gpu`), and the messages under it."""

    category: str
    name: str
    line: int
    result: str
    all_gpus: bool
    per_gpu: dict[int, str] = field(default_factory=dict)
    messages: list[DiagMessage] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "category": self.category,
            "name": self.name,
            "line": self.line,
            "result": self.result,
            "all_gpus": self.all_gpus,
            "per_gpu": {str(gpu): result for gpu, result in sorted(self.per_gpu.items())},
            "messages": [m.to_json() for m in self.messages],
        }


@dataclass(frozen=True)
class DiagRun:
    """One `dcgmi diag` output: its metadata (DCGM 3 and later), its tests in table order, and the error line of
    a run that could not start (then there are no tests)."""

    file: str
    line: int
    last_line: int
    tests: list[DiagTest]
    metadata: dict[str, str]
    gpu_count: int | None
    # every category heading in table order, one without rows included (DCGM prints `Stress` with none at -r 2)
    categories: list[str] = field(default_factory=list)
    error: str | None = None
    error_line: int | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "last_line": self.last_line,
            "metadata": self.metadata,
            "gpu_count": self.gpu_count,
            "categories": self.categories,
            "error": self.error,
            "error_line": self.error_line,
            "tests": [t.to_json() for t in self.tests],
        }


def parse_dcgm_diag(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> DiagRun:
    """Every test of a `dcgmi diag` text table, with its results and messages."""
    text = read_tool_text(path, display, limit=limit, what="`dcgmi diag` output")
    return parse_dcgm_diag_of(text, display)


def _join(cells: list[str]) -> str:
    """A message cut over rows, whole again: DCGM's full-width pieces are joined as cut (a word may be split
    between two rows), narrower ones (a hand-wrapped paste) with a space."""
    if len(cells) == 1:
        return cells[0].strip()
    if all(len(cell) >= _CHUNK + 1 for cell in cells[:-1]):
        return ("".join(cell[1:_CHUNK + 1] for cell in cells[:-1]) + cells[-1][1:]).strip()
    return " ".join(cell.strip() for cell in cells if cell.strip())


def parse_dcgm_diag_of(text: str, display: str, *, first_line: int = 1) -> DiagRun:
    """parse_dcgm_diag() of an output's text; `first_line` is the file line the text starts at."""
    lines = LineCounter(text, first_line)
    start = text.find("| Diagnostic ")
    if start < 0:
        error = re.search(r"^Error: ([^\n]*)$", text, re.MULTILINE)
        if error is not None:  # the run could not start: no table, and the reason DCGM gave
            at = lines.line_at(error.start())
            return DiagRun(file=display, line=at, last_line=lines.line_at(len(text.rstrip("\n"))), tests=[],
                           metadata={}, gpu_count=None, error=error.group(1).strip()[:400], error_line=at)
        raise EvidenceError(display, f"expected a `dcgmi diag` table (its `| Diagnostic | Result |` row), got "
                            f"none. {_FIX}", line=first_line)
    table_line = lines.line_at(start)
    tests: list[DiagTest] = []
    metadata: dict[str, str] = {}
    category = ""
    categories: list[str] = []
    message: tuple[str, int, list[str]] | None = None  # kind, line, the cells of its rows
    closed = False
    at = start
    for raw in text[start:].split("\n"):
        line_no = lines.line_at(at)
        at += len(raw) + 1
        row = raw.rstrip()
        if not row or row.startswith("+==="):
            continue
        if closed:
            break  # what follows the table (a second table, a prompt) is not this run's
        named = _category(row)
        if named is not None:
            _flush(message, tests, category)
            message = None
            category = named
            categories.append(category)
            continue
        if _RULE.match(row) is not None:
            _flush(message, tests, category)
            message = None
            closed = True  # the bottom rule: the table is complete
            continue
        cells = _ROW.match(row)
        if cells is None:
            raise EvidenceError(display, f"expected a table row `| name | result |`, got {row[:60]!r}: the table "
                                f"is garbled. {_FIX}", line=line_no)
        name, cell = cells.group(1).strip(), cells.group(2)
        value = cell.strip()
        if name == "Diagnostic" and value == "Result" and not category:
            continue  # the header row
        if category == "Metadata":
            if name:
                metadata[name] = value
            continue
        if name in _MESSAGE_KINDS:
            _flush(message, tests, category)
            message = (name, line_no, [cell])
            continue
        if not name:
            # a message's next row, unless it is a GPU's result (DCGM 4 prints a test's per-GPU rows around the
            # messages of those GPUs)
            if message is not None and _PER_GPU.match(value) is None:
                message[2].append(cell)
                continue
            _flush(message, tests, category)
            message = None
            if not tests:
                raise EvidenceError(display, f"expected a test row before a continuation row, got {value[:60]!r}. "
                                    f"{_FIX}", line=line_no)
            _add_result(tests[-1], value, display, line_no)
            continue
        _flush(message, tests, category)
        message = None
        tests.append(_test(category, name, value, display, line_no))
    last_line = lines.line_at(len(text.rstrip("\n")))
    if not closed:
        raise EvidenceError(display, f"expected the table's bottom rule after its last row, got the file ending at "
                            f"line {last_line}: the output looks cut short. {_FIX}", line=last_line)
    count = metadata.get("GPU Device IDs Detected")
    return DiagRun(file=display, line=table_line, last_line=last_line, tests=tests, metadata=metadata,
                   gpu_count=None if count is None else len([i for i in count.split(",") if i.strip()]),
                   categories=categories)


def _category(row: str) -> str | None:
    """The name a category rule carries (`+-----  Hardware  ----------+------...+`), None for any other row; told
    with string operations, never a pattern that could rescan a long run of spaces."""
    if row[:2] not in ("+-", "|-") or row[-1:] not in ("+", "|"):
        return None
    left, plus, right = row[1:-1].partition("+")
    name = left.strip("-").strip()
    if not plus or not name or right.strip("-") or not left.startswith("-") or not left.endswith("-"):
        return None
    return name if all(part.isalnum() for part in name.split()) else None


def _test(category: str, name: str, value: str, display: str, line: int) -> DiagTest:
    """A test row's first result: `Pass` alone (DCGM 4: per-GPU rows follow) or `Pass - All` / `Fail - GPU: 1`."""
    if value in _RESULTS:
        return DiagTest(category, name, line, value, all_gpus=True)
    split = _SPLIT.match(value)
    if split is None:
        raise EvidenceError(display, f"expected a result ({', '.join(_RESULTS)}, or `Pass - All`, `Fail - GPU: 1`), "
                            f"got {value[:60]!r} for {name[:40]!r}. {_FIX}", line=line)
    result, everyone, gpus = split.groups()
    test = DiagTest(category, name, line, result, all_gpus=everyone is not None)
    if gpus is not None:
        for gpu in gpus.split(","):
            test.per_gpu[int(gpu)] = result
    return test


def _add_result(test: DiagTest, value: str, display: str, line: int) -> None:
    """A continuation row under a test: more GPUs with another result (`Fail - GPU: 1`, `GPU0: Pass`)."""
    split = _SPLIT.match(value)
    per = _PER_GPU.match(value)
    if split is not None and split.group(3) is not None:
        for gpu in split.group(3).split(","):
            test.per_gpu[int(gpu)] = split.group(1)
    elif per is not None:
        test.per_gpu[int(per.group(1))] = per.group(2)
    else:
        raise EvidenceError(display, f"expected more results of {test.name[:40]!r} (`Fail - GPU: 1`, `GPU0: Pass`), "
                            f"got {value[:60]!r}. {_FIX}", line=line)
    if test.per_gpu:
        test.all_gpus = False
        worst = [r for r in ("Fail", "Error", "Warn", "Skip", "Not Run") if r in test.per_gpu.values()]
        test.result = worst[0] if worst else "Pass"


def _flush(message: tuple[str, int, list[str]] | None, tests: list[DiagTest], category: str) -> None:
    """Attach a finished message to the test above it (an Error above every test stands for its category)."""
    if message is None:
        return
    kind, line, cells = message
    text = _join(cells)
    gpu = _GPU_PREFIX.match(text)
    if not tests or tests[-1].category != category:
        tests.append(DiagTest(category, category, line, "Error" if kind == "Error" else "Pass", all_gpus=True))
    tests[-1].messages.append(DiagMessage(kind, text, line, None if gpu is None else int(gpu.group(1))))
