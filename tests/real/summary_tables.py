"""The pre-training rows of NVIDIA's Megatron-Bridge performance summary as saved (current and archive files).

Both layouts are read: `#### Model:` tables with a System column (25.11 on) and `#### System:` tables with a Model
column (25.09, 25.11). A cell printing two figures, one in parentheses ("FP8-CS (FP8-MX)", "661 (624)"), is two rows.
Rows without a Precision column (25.09) are left out: their precision is not printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

TABLES = ("megatron-bridge-performance-summary.md", "megatron-bridge-performance-summary-archive.md")
_TWO = re.compile(r"^(\S[^()]*?)\s*\(([^()]+)\)$")
_FOOTNOTE = re.compile(r"\[\^[^\]]*\]")


@dataclass(frozen=True)
class Row:
    file: str
    line: int
    container: str  # "26.04.01", from "## 26.04.01 NeMo Container"
    heading: str  # the table's model name as printed, e.g. "DeepSeekV3 (w/o MTP)"
    cells: dict[str, str]

    @property
    def key(self) -> tuple[str, str, str, int, str, int, int, int, int, int]:
        """(container, model, system, GPUs, precision, GBS, sequence length, TP, tokens/s/GPU, TFLOP/s/GPU)."""
        c = self.cells
        return (self.container, self.heading, c["System"], int(c["#-GPUs"]), c["Precision"], int(c["GBS"]),
                int(c["Sequence Length"]), int(c["TP"]), int(c["Tokens / sec / GPU"]),
                int(c["Model TFLOP / sec / GPU"]))


def _split(cells: dict[str, str]) -> list[dict[str, str]]:
    """One row per printed figure: the plain one, then the parenthesized one where a cell prints two."""
    cells = {k: _FOOTNOTE.sub("", v).strip() for k, v in cells.items()}
    pairs = {k: m.groups() for k, v in cells.items() if k != "Model" and (m := _TWO.match(v))}
    if not pairs:
        return [cells]
    return [{k: (pairs[k][i] if k in pairs else v) for k, v in cells.items()} for i in (0, 1)]


def pretraining_rows(root: Path) -> list[Row]:
    """Every pre-training row that prints its precision, from both files under `root`/published-tables."""
    rows: list[Row] = []
    for name in TABLES:
        container = section = model = system = ""
        header: list[str] = []
        for number, line in enumerate((root / "published-tables" / name).read_text().splitlines(), 1):
            if line.startswith("## "):
                container, section, model, system = line[3:].split()[0], "", "", ""
            elif line.startswith("### "):
                section = line[4:].strip()
            elif line.startswith("#### Model:"):
                model, system, header = line.split(":", 1)[1].strip(), "", []
            elif line.startswith("#### System:"):
                system, model, header = line.split(":", 1)[1].strip(), "", []
            elif line.startswith("|") and section == "Pre-Training Performance" and (model or system):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if cells[0] in ("System", "Model"):
                    header = cells
                elif header and not set(cells[0]) <= set("-: "):
                    assert len(cells) == len(header), f"{name}:{number}: {len(cells)} cells, header has {len(header)}"
                    named = dict(zip(header, cells, strict=True))
                    if "Precision" not in named:
                        continue
                    heading = model or named["Model"]
                    named.setdefault("System", system)
                    rows += [Row(name, number, container, heading, one) for one in _split(named)]
    return rows
