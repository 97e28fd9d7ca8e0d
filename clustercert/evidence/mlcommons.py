"""MLCommons' result layout for `evidence init`: the system description JSON that belongs to an MLPerf result folder."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = ["MlperfSystem", "find_system"]


@dataclass(frozen=True)
class MlperfSystem:
    """What a submission's system JSON says: where it is (`rel`, relative to the folder init drafts; None when it
    sits inside the result folder, which then lists it already), the system's name, GPU and counts."""

    rel: str | None
    json_rel: str
    name: str | None
    gpu_name: str | None
    gpus_per_node: int | None
    nodes: int | None
    host: str | None
    interconnect: str | None


def _count(value: object) -> int | None:
    """A count as MLCommons' JSON writes it (a string, "8"), None where it is not a positive whole number."""
    text = str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else ""
    return int(text) if text.isdigit() and int(text) > 0 else None


def _text(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def find_system(folder: Path, rel: str) -> MlperfSystem | None:
    """The system JSON of the result folder `rel` under `folder`: MLCommons' `systems/<system>.json` beside the
    `results/` that holds `results/<system>/<benchmark>/`, else a JSON with `system_name` inside the result folder
    itself; None where there is neither (or it is not a JSON object)."""
    parts = PurePosixPath(rel).parts
    candidates: list[tuple[str | None, str]] = []
    if len(parts) >= 3 and parts[-3] == "results":
        beside = PurePosixPath(*parts[:-3], "systems", f"{parts[-2]}.json").as_posix()
        candidates.append((beside, beside))
    inside = folder / rel
    if inside.is_dir():
        candidates += [(None, f"{rel}/{p.name}") for p in sorted(inside.glob("*.json")) if p.name != "scaling.json"]
    for listed, json_rel in candidates:
        path = folder / json_rel
        if not path.is_file():
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or "system_name" not in doc:
            continue
        return MlperfSystem(listed, json_rel, _text(doc.get("system_name")), _text(doc.get("accelerator_model_name")),
                            _count(doc.get("accelerators_per_node")), _count(doc.get("number_of_nodes")),
                            _text(doc.get("host_processor_model_name")), _text(doc.get("accelerator_interconnect")))
    return None
