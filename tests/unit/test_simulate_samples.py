"""Every shipped sample under evidence/ is exactly what `clustercert simulate` writes for its documented command."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from clustercert.cli.app import main
from clustercert.settings import PROJECT_ROOT

EVIDENCE = PROJECT_ROOT / "evidence"
# sample folder -> the arguments evidence/README.md documents for it (after `--out DIR`)
SAMPLES = {
    "gb200-seed": "--scenario seed",
    "gb200-degraded": "--scenario degraded",
    "h100-1024": "--scenario h100",
}
MAX_BYTES = 5 * 1024 * 1024


def _files(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


def test_every_shipped_sample_is_listed() -> None:
    shipped = sorted(p.name for p in EVIDENCE.iterdir() if p.is_dir())
    assert shipped == sorted(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_readme_documents_the_command(name: str) -> None:
    readme = (EVIDENCE / "README.md").read_text(encoding="utf-8")
    assert f"clustercert simulate --out evidence/{name} {SAMPLES[name]}" in readme


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_regenerates_byte_identical(name: str, tmp_path: Path) -> None:
    shipped = EVIDENCE / name
    out = tmp_path / name
    assert main(["simulate", "--out", str(out), *shlex.split(SAMPLES[name])]) == 0
    assert _files(out) == _files(shipped)
    for rel in _files(shipped):
        assert (out / rel).read_bytes() == (shipped / rel).read_bytes(), rel


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_is_under_5_mb(name: str) -> None:
    assert sum(p.stat().st_size for p in (EVIDENCE / name).rglob("*") if p.is_file()) < MAX_BYTES
