"""The shipped seed bundle is exactly what the simulator writes for its documented arguments."""

from __future__ import annotations

from pathlib import Path

from clustercert.catalog import load_catalog
from clustercert.settings import PROJECT_ROOT
from clustercert.simulate.seed import write_seed_bundle


def test_seed_sample_regenerates_byte_identical(tmp_path: Path) -> None:
    shipped = PROJECT_ROOT / "evidence" / "gb200-seed"
    out = write_seed_bundle(tmp_path / "seed", load_catalog("exemplar-gb200", PROJECT_ROOT / "references"),
                            seed=7, repeats=3)
    shipped_files = sorted(p.relative_to(shipped) for p in shipped.rglob("*") if p.is_file())
    assert shipped_files == sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    for rel in shipped_files:
        assert (out / rel).read_bytes() == (shipped / rel).read_bytes(), rel
