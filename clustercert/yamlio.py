"""Strict YAML loading for bundle.yaml and catalogs: pydantic errors become one line with file, line and key."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from clustercert.errors import ClusterCertError, located

__all__ = ["load_yaml_model", "yaml_line_of"]

M = TypeVar("M", bound=BaseModel)


def yaml_line_of(node: yaml.Node | None, loc: Sequence[int | str]) -> int | None:
    """1-based line of the YAML node at `loc` (or of its nearest existing parent)."""
    line = None if node is None else node.start_mark.line + 1
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if getattr(k, "value", None) == key), None)
            if found is None:
                key_node = next((k for k, _ in node.value if getattr(k, "value", None) == key), None)
                return key_node.start_mark.line + 1 if key_node is not None else line
            node = found
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            return line
        line = node.start_mark.line + 1
    return line


def _dotted(loc: Sequence[int | str]) -> str:
    out = ""
    for key in loc:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out


def load_yaml_model(
    path: Path,
    model: type[M],
    error: type[ClusterCertError],
    *,
    display: str | None = None,
    hint: str = "",
) -> M:
    """Parse `path` as YAML into `model`; any problem raises `error(one line message)`."""
    name = display or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise located(error, name, f"expected a file, got nothing at this path. {hint}".strip()) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise located(error, name, f"expected UTF-8 text, got {exc.__class__.__name__}. {hint}".strip()) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise located(
            error, name, f"expected valid YAML, got {problem}. {hint}".strip(),
            line=mark.line + 1 if mark is not None else None,
        ) from None
    if not isinstance(data, dict):
        raise located(error, name, f"expected a YAML mapping at the top, got {type(data).__name__}. {hint}".strip())
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = [k for k in first["loc"] if isinstance(k, int | str)]
        got = "" if first["type"] == "missing" else f", got {first.get('input')!r}"[:120]
        raise located(
            error, name, f"{first['msg']}{got}. {hint}".strip(),
            line=yaml_line_of(node, loc), field=_dotted(loc) or "(top level)",
        ) from None
