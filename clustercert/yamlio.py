"""Strict YAML loading for bundle.yaml and catalogs: pydantic errors become one line with file, line and key."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
from clustercert.heap import paused

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


_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: in C, many times the pure-Python loader's speed
_INT_TAG = "tag:yaml.org,2002:int"
_MERGE_TAG = "tag:yaml.org,2002:merge"
# No value of a bundle, plan or catalog needs more digits than a 64-bit integer holds; a longer one would make
# Python's int() refuse it (past 4,300 digits) or a later float() overflow.
MAX_INT_DIGITS = 19


def _compose_bounded(text: str, name: str, error: type[ClusterCertError], hint: str,
                     check_node: Callable[[yaml.Node], None] | None = None) -> tuple[yaml.Node | None, Any]:
    """The node tree and the data of one YAML document, after its nesting, its aliases and its size with every
    alias expanded are bounded on the node graph (libyaml composes it; an alias is the same node object, so a
    few hundred aliases can stand for billions of values), its keys found unique and its integers short, and
    before anything is built from it; `check_node` then looks at the bounded tree."""
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_graph(node, name, error, hint)
            if check_node is not None:
                check_node(node)
        data = None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()
    return node, data


def _check_graph(root: yaml.Node, name: str, error: type[ClusterCertError], hint: str) -> None:
    sizes: dict[int, int] = {}
    aliases = 0

    def size(node: yaml.Node, depth: int) -> int:
        nonlocal aliases
        known = sizes.get(id(node))
        if known is not None:  # a second reference to a node: an alias
            aliases += 1
            if aliases > MAX_YAML_ALIASES:
                raise located(error, name, f"expected at most {MAX_YAML_ALIASES} YAML aliases (*name), got more. "
                              f"Write the values out. {hint}".strip(), line=node.start_mark.line + 1)
            return known
        if depth > MAX_NESTING:
            raise located(error, name, f"expected mappings and lists nested at most {MAX_NESTING} deep, got "
                          f"deeper. {hint}".strip(), line=node.start_mark.line + 1)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            _check_keys(node, name, error, hint)
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        elif node.tag == _INT_TAG:
            _check_int(node, name, error, hint)
        sizes[id(node)] = total
        return total

    if size(root, 0) > MAX_YAML_NODES:
        raise located(error, name, f"expected at most {MAX_YAML_NODES} values once aliases are expanded, got "
                      f"more. Write the values out. {hint}".strip())


def _check_keys(node: yaml.MappingNode, name: str, error: type[ClusterCertError], hint: str) -> None:
    """A key written twice in one mapping is refused: YAML loaders keep the last one silently, so a second
    `gpus:` further down would replace what a reader of the first one believes."""
    seen: dict[str, int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
            continue
        line = key.start_mark.line + 1
        if key.value in seen:
            raise located(error, name, f"expected each key once in a mapping, got {short_repr(key.value)} again "
                          f"(first at line {seen[key.value]}). Keep one of them. {hint}".strip(), line=line)
        seen[key.value] = line


def _check_int(node: yaml.Node, name: str, error: type[ClusterCertError], hint: str) -> None:
    digits = sum(ch.isdigit() for ch in str(node.value))
    if digits > MAX_INT_DIGITS:
        raise located(error, name, f"expected an integer of at most {MAX_INT_DIGITS} digits, got one of {digits}. "
                      f"{hint}".strip(), line=node.start_mark.line + 1)


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
    check_node: Callable[[yaml.Node], None] | None = None,
) -> M:
    """Parse `path` as YAML into `model`; any problem raises `error(one line message)`. `check_node` looks at the
    document's node tree once its bounds (size, nesting, aliases, keys, integers) hold, before the model does."""
    name = display or str(path)
    try:
        raw = read_regular(path, name, limit=MAX_YAML_BYTES, fix="Split the bundle (or catalog) into smaller ones")
        text = raw.decode("utf-8")
    except EvidenceError as exc:
        if not path.exists() and not path.is_symlink():
            raise located(error, name, f"expected a file, got nothing at this path. {hint}".strip()) from None
        raise located(error, name, f"{exc.message.rstrip('.')}. {hint}".strip()) from None
    except UnicodeDecodeError as exc:
        raise located(error, name, f"expected UTF-8 text, got {exc.__class__.__name__}. {hint}".strip()) from None
    try:
        with paused():  # builds what it keeps, no garbage: a cluster's bundle.yaml would set off full collections
            node, data = _compose_bounded(text, name, error, hint, check_node)
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
