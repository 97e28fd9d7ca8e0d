"""Hostile corpus, third round (issue 55 item 8, the smaller cases): NUL and stray ESC bytes past a log's first
64 KiB; terminal escape sequences in evidence and run-folder names printed escaped by `evidence check` and `runs`;
`COLUMNS=0`; the seal's recorded sizes, so that a file of another size is refused before it is hashed."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.hostile.helpers import NEMO_LINE, write_bundle
from tests.hostile.test_round3_files import BOUND_S, one_line

Count = Callable[[int], None]
LINES = 1000  # about 190 KB of step lines: past the first 64 KiB that the binary sniff reads


def _long_log(bad: str) -> tuple[str, int]:
    """A NeMo log of LINES step lines with `bad` at the end of its last line; that line's number."""
    lines = [NEMO_LINE.format(i=i % 19 + 1) for i in range(LINES)]
    lines[-1] = lines[-1].rstrip("\n") + f" {bad}\n"
    return "".join(lines), LINES


@pytest.mark.parametrize(("bad", "what"), [("\x00", "a NUL byte"), ("\x1b", "an ESC byte that starts no complete "
                                                                         "terminal escape sequence")])
def test_a_nul_or_stray_esc_past_the_first_64_kib_is_refused_at_its_line(tmp_path: Path, bad: str, what: str,
                                                                          hostile: Count) -> None:
    text, line = _long_log(bad)
    assert text.index(bad) > 64 * 1024
    log = tmp_path / "r1.log"
    log.write_text(text)
    hostile(1)
    one_line(run_cli("evidence", "parse", str(log), "--format", "nemo", timeout=BOUND_S), 3,
             f"{log} line {line}: expected text, got {what}")


def test_complete_escape_sequences_past_the_first_64_kib_are_still_read(tmp_path: Path) -> None:
    """A coloured log (a logger's \\x1b[0m around its fields) is text: its sequences are taken out, as before."""
    text, _ = _long_log("\x1b[32m")
    log = tmp_path / "r1.log"
    log.write_text(text)
    proc = run_cli("evidence", "parse", str(log), "--format", "nemo", timeout=BOUND_S)
    assert proc.returncode == 0, proc.stderr


def test_names_with_escape_sequences_are_printed_escaped(tmp_path: Path, hostile: Count) -> None:
    """A file or run folder named with ESC ... drove the terminal `evidence check` and `runs` printed it on."""
    name = "r1\x1b]0;owned\x07\x1b[2J.log"
    root = tmp_path / "b"
    root.mkdir()
    (root / name).write_bytes(b"\x00 not a log")  # unusable: its name is printed among the problems
    write_bundle(root, [("llama3-70b-fp8-512-r1", '"r1\\e]0;owned\\a\\e[2J.log"')])  # YAML's own escapes
    hostile(1)
    proc = run_cli("evidence", "check", str(root), timeout=BOUND_S)
    assert proc.returncode == 3
    assert "\x1b" not in proc.stdout + proc.stderr and "\x07" not in proc.stdout + proc.stderr
    assert "r1\\x1b]0;owned\\x07\\x1b[2J.log" in proc.stdout
    reports = tmp_path / "reports"
    (reports / "run\x1b[31m-red").mkdir(parents=True)
    hostile(1)
    proc = run_cli("runs", "--reports-dir", str(reports), timeout=BOUND_S)
    assert "\x1b" not in proc.stdout + proc.stderr, proc.stdout
    assert "run\\x1b[31m-red" in proc.stdout


def test_columns_zero_still_prints(tmp_path: Path, hostile: Count) -> None:
    root = write_bundle(tmp_path / "b")
    hostile(1)
    proc = run_cli("evidence", "check", str(root), env={"COLUMNS": "0"}, timeout=BOUND_S)
    assert f"{root}: not sealed" in proc.stdout, proc.stdout + proc.stderr


def test_the_seal_records_sizes_and_stays_checkable_by_sha256sum(tmp_path: Path, hostile: Count) -> None:
    """A 20 GB sparse file over a sealed log was hashed whole (minutes) before it was refused: the seal records
    each file's size, and a file of another size is refused before any file is hashed."""
    root = write_bundle(tmp_path / "b")
    assert run_cli("evidence", "seal", str(root), timeout=BOUND_S).returncode == 0
    lines = (root / "MANIFEST.sha256").read_text().splitlines()
    size = (root / "r1.log").stat().st_size
    assert f"# size {size}  r1.log" in lines
    checked = subprocess.run(["sha256sum", "-c", "--strict", "MANIFEST.sha256"], cwd=root, capture_output=True,
                             text=True, check=False, timeout=BOUND_S)
    assert checked.returncode == 0 and checked.stdout.splitlines() == ["bundle.yaml: OK", "r1.log: OK"], checked
    with (root / "r1.log").open("r+b") as handle:
        handle.truncate(20 * 1024**3)
    hostile(2)
    for command in (["evidence", "check", str(root)], ["certify", str(root), "--reports-dir", str(tmp_path / "r")]):
        one_line(run_cli(*command, env={"PREFECT_API_URL": ""}, timeout=BOUND_S), 3,
                 f"r1.log: changed since the bundle was sealed ({20 * 1024**3} bytes, {size} in MANIFEST.sha256)")
    os.truncate(root / "r1.log", size)
