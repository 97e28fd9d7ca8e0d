"""The code's shape a newcomer can read: short parameter lists, no import circles, a certify flow that reads as
its steps, module docstrings, and comments that give reasons rather than one run's clock times."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("clustercert", "flows")
MAX_PARAMETERS = 7
MAX_CERTIFY_FLOW_LINES = 90


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    named = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg not in ("self", "cls")]
    return len(named) + (args.vararg is not None) + (args.kwarg is not None)


def _imports(path: Path, module: str, tree: ast.Module) -> Iterator[str]:
    """Every module name an import statement in `tree` may bind, at module level or inside a function."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if path.name != "__init__.py":
                    base.pop()
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            yield target
            yield from (f"{target}.{alias.name}" for alias in node.names)


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_circle_finder_finds_a_circle_and_only_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_no_function_takes_more_than_seven_parameters() -> None:
    long_lists = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _parameters(node) > MAX_PARAMETERS:
                long_lists.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({_parameters(node)})")
    assert long_lists == []


def test_no_circle_of_imports_between_modules() -> None:
    paths = {_module(p): p for p in _sources()}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        names = set(_imports(path, module, ast.parse(path.read_text(encoding="utf-8"))))
        graph[module] = {name for name in names if name in paths and name != module}
    assert _circles(graph) == []


def test_the_certify_flow_reads_as_its_steps() -> None:
    lines = (ROOT / "flows" / "certify.py").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_CERTIFY_FLOW_LINES


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_says_what_it_is_for(path: Path) -> None:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if path.name == "__init__.py" and not path.read_text(encoding="utf-8").strip():
        return  # an empty package marker
    assert docstring, f"{path.relative_to(ROOT)} has no module docstring"


# A clock time ("16:31 UTC", "10:13-10:18"), a dated measurement ("measured 2026-12-04"), or a run's timing
# given as a finding ("took 0.37 s", "(0.67 s of ...)"): the kind of figure that belongs in bench/results/.
_MEASURED = re.compile(
    r"\b\d{1,2}:\d{2}(:\d{2})?(-\d{1,2}:\d{2})? ?UTC\b"
    r"|\bmeasured (here |on )?(20\d\d-\d\d-\d\d|\d{1,2}:\d{2})"
    r"|\b(took|takes|cost|costs|saves|saved|spent|waited|measured)( about| only| up to)? \d+(\.\d+)? ?(s|ms|µs|us)\b"
    r"|\b\d+\.\d+( ?-> ?|-)?(\d+(\.\d+)?)? ?(s|ms|µs)\b"
    r"|\b\d+ ?(s|ms) (of (a|the|its)\b|here\b)"
)


def _comments_and_docstrings(path: Path) -> Iterator[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
        elif token.type == tokenize.STRING and token.string.lstrip("rbuRBU").startswith(('"""', "'''")):
            yield token.start[0], token.string


def test_the_measurement_pattern_tells_a_figure_from_a_reason() -> None:
    assert _MEASURED.search("# the sample's first one took 0.37 s")
    assert _MEASURED.search("# gc.callbacks, 16:31 UTC")
    assert _MEASURED.search("# (phases 4.1-6.2 s, measured 2026-12-04)")
    assert not _MEASURED.search("# a long read says how far it is every few seconds")
    assert _MEASURED.search("# (20 s of a 4,096-GPU bundle's 23.5 GB)")
    assert _MEASURED.search("# certification 14.1 -> 13.7 s")
    assert not _MEASURED.search("# waits up to the timeout the setting names")
    assert not _MEASURED.search("# up to 300 s per try, three tries")
    assert not _MEASURED.search('"""A number of bytes as a person reads it: 812 B, 4.2 MiB, 22.0 GiB."""')


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_comment_records_one_runs_measurement(path: Path) -> None:
    found = [f"line {line}: {m.group(0)!r}" for line, text in _comments_and_docstrings(path)
             for m in [_MEASURED.search(text)] if m]
    assert found == []
