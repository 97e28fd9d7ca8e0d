"""The shipped catalog loads and matches DOMAIN.md; a malformed catalog is a one-line CatalogError."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.catalog import load_catalog
from clustercert.errors import CatalogError
from clustercert.settings import PROJECT_ROOT

REFS = PROJECT_ROOT / "references"


def test_gb200_catalog_matches_domain_tables() -> None:
    cat = load_catalog("exemplar-gb200", REFS)
    assert cat.spec.peaks_tflops == {"bf16": 2450, "fp8": 4900, "nvfp4": 9800}
    expected = {  # DOMAIN.md section 5, GB200 512 GPUs: step s, MFU
        ("llama3.1-405b", "bf16"): (9.508, 0.466),
        ("llama3.1-405b", "fp8"): (6.244, 0.355),
        ("grok1-314b", "bf16"): (7.324, 0.476),
        ("grok1-314b", "fp8"): (5.193, 0.336),
        ("deepseek-v3", "bf16"): (34.274, 0.1014),
        ("nemotron4-340b", "bf16"): (2.229, 0.394),
        ("nemotron4-340b", "fp8"): (1.549, 0.284),
        ("llama3-70b", "fp8"): (7.758, 0.386),
    }
    got = {(b.workload, b.precision.value): (b.step_time_s, b.mfu_published) for b in cat.spec.baselines}
    assert got == expected
    assert cat.spec.rules.pass_ratio == 0.95 and cat.spec.rules.validity_months == 12


def test_illustrative_baseline_derivation_holds() -> None:
    cat = load_catalog("exemplar-gb200", REFS)
    b = cat.baseline_for("llama3-70b", "fp8", 512)
    assert b is not None and b.illustrative and b.derivation
    assert 2048 * 8192 / (4224 * 512) == pytest.approx(b.step_time_s, abs=5e-4)
    assert 1892 / 4900 == pytest.approx(b.mfu_published, abs=5e-4)


def test_malformed_catalog_names_file_line_and_key(tmp_path: Path) -> None:
    text = (REFS / "exemplar-gb200.yaml").read_text().replace("pass_ratio: 0.95", "pass_ratio: high")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(CatalogError) as exc:
        load_catalog(str(bad), REFS)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "pass_ratio: high" in ln)
    assert str(exc.value).startswith(f"{bad} line {line} field 'rules.pass_ratio':")
    assert "\n" not in str(exc.value)


def test_missing_catalog(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="expected a catalog file"):
        load_catalog("no-such-catalog", tmp_path)


def test_a_catalog_path_typed_on_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--catalog`: an id as typed; a path to a file where the command runs, made absolute; a path the bundle
    holds as typed (bundle.yaml's reading); a path that is nowhere as typed (load_catalog names where it looked)."""
    from clustercert.catalog import typed_catalog

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "bundle.yaml").write_text("schema_version: 1\n")
    (bundle / "inside.yaml").write_text("id: x\n")
    here = tmp_path / "here"
    here.mkdir()
    (here / "mine.yaml").write_text("id: y\n")
    (here / "inside.yaml").write_text("id: z\n")  # the bundle's file of this name wins, as bundle.yaml's would
    monkeypatch.chdir(here)
    assert typed_catalog(None, bundle) is None
    assert typed_catalog("exemplar-gb200", bundle) == "exemplar-gb200"
    assert typed_catalog("mine.yaml", bundle) == str(here / "mine.yaml")
    assert typed_catalog("mine.yaml", bundle / "bundle.yaml") == str(here / "mine.yaml")  # the bundle by its file
    assert typed_catalog("./mine.yaml", Path("../bundle")) == str(here / "mine.yaml")
    assert typed_catalog("inside.yaml", bundle) == "inside.yaml"
    assert typed_catalog("nowhere.yaml", bundle) == "nowhere.yaml"
    assert typed_catalog(str(here / "mine.yaml"), bundle) == str(here / "mine.yaml")
