"""Property-based fuzzing of the bundle loader and every parser: whatever the bytes, only a ClusterCertError
(one line) escapes, and each example ends within a deadline that Hypothesis enforces (a superlinear regex or a
hang fails the case; the SIGALRM bound of conftest.py backs it up).

Inputs are built to reach the costly paths: real-looking lines repeated, spliced and stretched into long lines,
YAML with anchors, aliases, deep nesting and wrong types. The count of examples is added to the suite's tally.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustercert.errors import ClusterCertError
from clustercert.evidence.bundle import load_bundle
from clustercert.parsers import FORMATS, detect_format
from tests.hostile.helpers import HEAD, NEMO_LINE, TRAIN
from tests.mangle import OPTIONS, mangled
from tests.unit.parsers.test_properties import SEEDS

Count = Callable[[int], None]
DEADLINE = dt.timedelta(seconds=10)  # per example; a linear parse of these inputs takes milliseconds
FUZZ = settings(max_examples=40, deadline=DEADLINE, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                              HealthCheck.too_slow,
                                                                              HealthCheck.data_too_large])


@st.composite
def stretched(draw: st.DrawFn, lines: list[str]) -> bytes:
    """Mangled lines, one of them a fragment of a real line repeated into a line of up to ~200 KB."""
    base = draw(mangled(lines))
    line = draw(st.sampled_from(lines))
    start = draw(st.integers(0, max(0, len(line) - 1)))
    fragment = line[start:start + draw(st.integers(1, 12))] or "x"
    long_line = fragment * draw(st.integers(1, 200_000 // len(fragment)))
    where = draw(st.sampled_from(["start", "end", "inside"]))
    if where == "start":
        return long_line.encode() + b"\n" + base
    if where == "end":
        return base + b"\n" + long_line.encode()
    return line[:start].encode() + long_line.encode() + line[start:].encode() + b"\n" + base


def _only_clustercert_errors(call: Callable[[], object]) -> None:
    try:
        call()
    except ClusterCertError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 2000, str(exc)[:300]


@pytest.mark.parametrize("fmt", sorted(SEEDS))
@FUZZ
@given(data=st.data())
def test_every_parser_only_raises_clustercert_errors_in_time(tmp_path: Path, fmt: str, data: st.DataObject,
                                                             hostile: Count) -> None:
    name = fmt.strip()
    path = tmp_path / "f"
    path.write_bytes(data.draw(stretched(SEEDS[fmt])))
    hostile(1)
    _only_clustercert_errors(lambda: FORMATS[name](path, "f", **OPTIONS.get(name, {})).to_json())
    _only_clustercert_errors(lambda: detect_format(path))


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=True),
                     st.text(max_size=30), st.sampled_from(["training", "nemo", "efficiency", "r1.log", "../x",
                                                            "/etc/passwd", "~root", "gb200-nvl72", "fp8"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                         st.dictionaries(st.text(max_size=12), inner, max_size=5)),
                       max_leaves=30)
_KEYS = ["schema_version", "cluster", "system", "catalog", "recipe_version", "runs", "id", "files", "gpus",
         "kind", "format", "phase", "nodes", "timezone", "synthetic"]


@st.composite
def bundle_texts(draw: st.DrawFn) -> str:
    valid = HEAD + TRAIN.format(id="llama3-70b-fp8-512-r1", file="r1.log", repeat=1)
    choice = draw(st.integers(0, 3))
    if choice == 0:  # damaged lines of a valid bundle.yaml
        return draw(mangled(valid.splitlines())).decode("utf-8", errors="replace")
    if choice == 1:  # a valid one with one key's value replaced by anything
        key = draw(st.sampled_from(_KEYS))
        value = draw(_VALUES)
        import json

        return valid.replace(f"{key}: ", f"{key}: {json.dumps(value)} #", 1)
    if choice == 2:  # anchors and aliases, nested
        depth = draw(st.integers(1, 12))
        width = draw(st.integers(1, 12))
        lines = ["a0: &a0 [x, y]"] + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]"
                                      for i in range(1, depth)]
        return "\n".join(lines) + "\n" + valid
    nesting = draw(st.integers(1, 3000))
    return valid + "extra: " + "[" * nesting + "]" * nesting + "\n"


@FUZZ
@given(text=bundle_texts())
def test_bundle_loader_only_raises_clustercert_errors_in_time(tmp_path: Path, text: str, hostile: Count) -> None:
    root = tmp_path / "b"
    root.mkdir(exist_ok=True)
    (root / "r1.log").write_text("".join(NEMO_LINE.format(i=i) for i in range(1, 20)))
    (root / "bundle.yaml").write_text(text, encoding="utf-8")
    hostile(1)
    _only_clustercert_errors(lambda: load_bundle(root))
