"""Strict YAML loading for bundle.yaml and catalogs: pydantic errors become one line with file, line and key."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from clustercert.errors import ClusterCertError, EvidenceError, located
from clustercert.evidence.guards import (
    MAX_NESTING,
    MAX_YAML_ALIASES,
    MAX_YAML_BYTES,
    MAX_YAML_NODES,
    read_regular,
    short_repr,
)

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


_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: a 4 MB bundle.yaml in well under a second


def _line(event: yaml.Event) -> int | None:
    return None if event.start_mark is None else event.start_mark.line + 1


def _compose_bounded(text: str, name: str, error: type[ClusterCertError], hint: str) -> tuple[yaml.Node | None, Any]:
    """The node tree and the data of one YAML document, after one streaming pass has bounded its aliases and
    its nesting (an alias re-uses a subtree: a few hundred of them can stand for billions of nodes)."""
    aliases = depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_YAML_ALIASES:
                raise located(error, name, f"expected at most {MAX_YAML_ALIASES} YAML aliases (*name), got more. "
                              f"Write the values out. {hint}".strip(), line=_line(event))
        elif isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_NESTING:
                raise located(error, name, f"expected mappings and lists nested at most {MAX_NESTING} deep, got "
                              f"deeper. {hint}".strip(), line=_line(event))
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is not None and _expanded_size(node, {}) > MAX_YAML_NODES:
            raise located(error, name, f"expected at most {MAX_YAML_NODES} values once aliases are expanded, got "
                          f"more. Write the values out. {hint}".strip())
        data = None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()
    return node, data


def _expanded_size(node: yaml.Node, seen: dict[int, int]) -> int:
    """How many nodes the tree holds with every alias expanded (an alias is the same node object, so each node
    is counted once and multiplied by its uses). Depth is already bounded by MAX_NESTING."""
    known = seen.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, seen) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, seen) + _expanded_size(v, seen) for k, v in node.value)
    seen[id(node)] = size
    return size


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
        raw = read_regular(path, name, limit=MAX_YAML_BYTES)
        text = raw.decode("utf-8")
    except EvidenceError as exc:
        if not path.exists() and not path.is_symlink():
            raise located(error, name, f"expected a file, got nothing at this path. {hint}".strip()) from None
        raise located(error, name, f"{exc.message}. {hint}".strip()) from None
    except UnicodeDecodeError as exc:
        raise located(error, name, f"expected UTF-8 text, got {exc.__class__.__name__}. {hint}".strip()) from None
    try:
        node, data = _compose_bounded(text, name, error, hint)
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
        got = "" if first["type"] == "missing" else f", got {short_repr(first.get('input'))}"[:120]
        raise located(
            error, name, f"{first['msg']}{got}. {hint}".strip(),
            line=yaml_line_of(node, loc), field=_dotted(loc) or "(top level)",
        ) from None
