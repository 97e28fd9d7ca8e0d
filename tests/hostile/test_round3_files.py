"""Hostile corpus, third round (issue 55 item 1): the files around the evidence, bundle.yaml and MANIFEST.sha256,
read through the evidence files' guards; a FILL_IN placeholder looked for only inside the loader's bounds; huge
integers and duplicate keys refused; `evidence init` on a folder with a loop of links.

Each case ends with one located line and exit 3, within the subprocess's time bound (a hang fails it)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.hostile.helpers import HEAD, write_bundle

Count = Callable[[int], None]
BOUND_S = 30


def one_line(proc: object, code: int, *needles: str) -> str:
    """The single `error:` line of a refused command (no traceback), holding each of `needles`."""
    out = proc.stdout + proc.stderr  # type: ignore[attr-defined]
    assert proc.returncode == code, out  # type: ignore[attr-defined]
    assert "Traceback" not in out, out
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("note:")]  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("error: "), out
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("kind", ["fifo", "zero"])
@pytest.mark.parametrize("name", ["bundle.yaml", "MANIFEST.sha256"])
def test_bundle_yaml_and_seal_go_through_the_guards(tmp_path: Path, name: str, kind: str, hostile: Count) -> None:
    """bundle.yaml or the seal as a FIFO hung certify; as a link to /dev/zero it read until memory ran out."""
    root = write_bundle(tmp_path / "b")
    target = root / name
    target.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(target)
        needle = "got a named pipe (FIFO)"
    else:
        target.symlink_to("/dev/zero")
        needle = "got a character device"
    commands = [["evidence", "check", str(root)], ["certify", str(root), "--reports-dir", str(tmp_path / "r")]]
    for command in commands:
        hostile(1)
        one_line(run_cli(*command, timeout=BOUND_S), 3, str(target), needle)


def _with_placeholder(body: str) -> str:
    return HEAD.replace("recipe_version: '25.05.05'", "recipe_version: FILL_IN") + body


@pytest.mark.parametrize("trick", ["self-alias", "laughs", "deep", "deep-below-libyaml"])
def test_a_placeholder_is_looked_for_inside_the_loaders_bounds(tmp_path: Path, trick: str, hostile: Count) -> None:
    """With FILL_IN in it, bundle.yaml was first composed by pure-Python YAML and walked alias by alias, before the
    loader's bounds: a self-referential alias, billion laughs or 50,000-deep nesting hung or crashed there."""
    if trick == "self-alias":
        extra, needle = "x: &a [*a, FILL_IN]\n", "nested at most 100 deep"
    elif trick == "laughs":
        lines = ['a0: &a0 ["FILL_IN","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
        lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
        extra, needle = "\n".join(lines) + "\n", "once aliases are expanded"
    elif trick == "deep":  # libyaml itself stops at 1,000 levels
        extra, needle = "deep: " + "[" * 50_000 + "FILL_IN" + "]" * 50_000 + "\n", "exceeded maximum nesting depth"
    else:
        extra, needle = "deep: " + "[" * 900 + "FILL_IN" + "]" * 900 + "\n", "nested at most 100 deep"
    root = write_bundle(tmp_path / "b", text=_with_placeholder("  - {id: r}\n") + extra)
    hostile(1)
    one_line(run_cli("evidence", "check", str(root), timeout=BOUND_S), 3, str(root / "bundle.yaml"), needle)


def test_a_placeholder_is_still_named_by_its_line_and_key(tmp_path: Path, hostile: Count) -> None:
    """The placeholder's own refusal is kept, found once per node: an alias of it is named where it was written."""
    root = write_bundle(tmp_path / "b")
    text = (root / "bundle.yaml").read_text().replace("recipe_version: '25.05.05'", "recipe_version: &r FILL_IN")
    (root / "bundle.yaml").write_text(text + "x: *r\n")
    hostile(1)
    one_line(run_cli("evidence", "check", str(root), timeout=BOUND_S), 3,
             f"{root / 'bundle.yaml'} line 5 field 'recipe_version': expected a value, got the placeholder FILL_IN")


def test_a_huge_integer_is_refused_at_its_line(tmp_path: Path, hostile: Count) -> None:
    """A 5,000-digit integer made the loader's int() raise ValueError (exit 4)."""
    root = write_bundle(tmp_path / "b")
    text = (root / "bundle.yaml").read_text().replace("gpus_per_node: 4", "gpus_per_node: " + "7" * 5000)
    (root / "bundle.yaml").write_text(text)
    for digits in ("7" * 5000, "7" * 20):
        (root / "bundle.yaml").write_text(text.replace("7" * 5000, digits))
        hostile(1)
        one_line(run_cli("evidence", "check", str(root), timeout=BOUND_S), 3, f"{root / 'bundle.yaml'} line 3",
                 f"expected an integer of at most 19 digits, got one of {len(digits)}")


def test_a_key_written_twice_is_refused_naming_it_and_both_lines(tmp_path: Path, hostile: Count) -> None:
    """YAML keeps the last of two equal keys silently: a second `catalog:` replaced the first without a word."""
    root = write_bundle(tmp_path / "b")
    text = (root / "bundle.yaml").read_text()
    (root / "bundle.yaml").write_text(text.replace("runs:\n", "catalog: other\nruns:\n"))
    hostile(1)
    one_line(run_cli("evidence", "check", str(root), timeout=BOUND_S), 3,
             f"{root / 'bundle.yaml'} line 6: expected each key once in a mapping, got 'catalog' again (first at "
             "line 4)")
    nested = text.replace("provider: p}", "provider: p, name: d}")
    (root / "bundle.yaml").write_text(nested)
    hostile(1)
    one_line(run_cli("evidence", "check", str(root), timeout=BOUND_S), 3, "line 2", "got 'name' again")


def test_evidence_init_on_a_loop_of_links_is_a_clean_error(tmp_path: Path, hostile: Count) -> None:
    """A link that names itself made `evidence init` raise RuntimeError (exit 4)."""
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "loop").symlink_to(folder / "loop")
    (folder / "a").symlink_to(folder / "b")
    (folder / "b").symlink_to(folder / "a")
    hostile(1)
    one_line(run_cli("evidence", "init", str(folder), timeout=BOUND_S), 3, str(folder / "a"),
             "a symbolic link that loops")
