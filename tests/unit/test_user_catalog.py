"""A user's own catalog certifies its own systems and models; a fixed FLOPs-per-sample convention is catalog data."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.catalog import load_catalog
from clustercert.errors import CatalogError, EvidenceError
from clustercert.metrics.flops import model_flops_per_sequence
from clustercert.metrics.throughput import tflops_per_gpu
from clustercert.runs.folder import load_inputs

REFERENCES = Path(__file__).resolve().parents[2] / "references"

# GPT-3 175B (Brown et al. 2020, table 2.1): 96 layers, d_model 12288, 96 heads, d_ff = 4 d_model, GeLU MLP.
CATALOG = """\
schema_version: 1
id: my-a100
version: "1"
title: A100 cluster, GPT-3 175B
system: a100-sxm
sources:
  google: {title: "Google process_training_results.py (2.2e15 FLOPs per GPT-3 175B sample)"}
  gpt3: {title: "Brown et al. 2020, table 2.1"}
peaks_tflops: {bf16: 312}
nvlink_gbps_per_direction: 300
models:
  gpt3-175b: {name: GPT-3 175B, layers: 96, hidden: 12288, ffn_hidden: 49152, heads: 96, vocab: 50257,
              mlp: non-gated, source: gpt3}
baselines:
  - {workload: gpt3-175b, precision: bf16, gpus: 1024, gbs: 1536, seq_len: 2048, parallelism: {tp: 8, pp: 8},
     step_time_s: 11.0, mfu_published: 0.9615, window: {first: 10, last: 19},
     flops_convention: {flops_per_sample: 2.2e15}, source: google, recipe_version: "1", date: "2023-11"}
suite:
  - {workload: gpt3-175b, precision: bf16, gpus: 1024}
rules: {pass_ratio: 0.95, validity_months: 12}
"""

BUNDLE = """\
schema_version: 1
cluster: {name: mine, provider: me}
system: {gpu: a100-sxm, gpus_per_node: 8, nodes: [a1, a2]}
catalog: my-a100.yaml
recipe_version: "1"
runs:
  - {id: gpt3-r1, phase: efficiency, kind: training, format: nemo, workload: WORKLOAD, precision: bf16,
     gpus: 16, gbs: 1536, seq_len: 2048, files: [r1.log]}
"""


def _bundle(tmp_path: Path, workload: str = "gpt3-175b", gpu: str = "a100-sxm") -> Path:
    (tmp_path / "my-a100.yaml").write_text(CATALOG)
    (tmp_path / "r1.log").write_text("x\n")
    (tmp_path / "bundle.yaml").write_text(BUNDLE.replace("WORKLOAD", workload).replace("a100-sxm", gpu))
    return tmp_path


def test_a_user_catalog_certifies_its_own_system_and_model(tmp_path: Path) -> None:
    inputs = load_inputs(_bundle(tmp_path), REFERENCES, "my-a100.yaml")  # named by the person running certify
    assert inputs.bundle.spec.system.gpu == "a100-sxm"
    assert inputs.bundle.spec.runs[0].workload == "gpt3-175b"
    assert inputs.catalog.spec.id == "my-a100" and not inputs.catalog.shipped


def test_a_user_catalog_named_only_by_the_bundle_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"got 'my-a100\.yaml', whose content .* certify --catalog my-a100\.yaml"):
        load_inputs(_bundle(tmp_path), REFERENCES)


def test_a_workload_the_catalog_does_not_define_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError) as exc:
        load_inputs(_bundle(tmp_path, workload="bloom-176b"), REFERENCES, "my-a100.yaml")
    msg = str(exc.value)
    assert msg.startswith(f"{tmp_path / 'bundle.yaml'} field 'workload': run 'gpt3-r1': expected a workload")
    assert "(gpt3-175b), got 'bloom-176b'" in msg


def test_the_shipped_catalog_keeps_its_ids(tmp_path: Path) -> None:
    root = _bundle(tmp_path, gpu="h100-sxm")
    text = (root / "bundle.yaml").read_text().replace("my-a100.yaml", "exemplar-h100")
    (root / "bundle.yaml").write_text(text)
    with pytest.raises(EvidenceError, match=r"got 'gpt3-175b'\. Add the model to the catalog"):
        load_inputs(root, REFERENCES)


def test_a_system_other_than_the_catalogs_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="certifies, 'a100-sxm', got 'h100-sxm'"):
        load_inputs(_bundle(tmp_path, gpu="h100-sxm"), REFERENCES, "my-a100.yaml")


def test_a_fixed_flops_per_sample_convention_reproduces_a_published_tflops(tmp_path: Path) -> None:
    _bundle(tmp_path)
    baseline = load_catalog("my-a100.yaml", REFERENCES, relative_to=tmp_path).spec.baselines[0]
    conv = baseline.flops_convention.flops()
    shape = load_catalog("my-a100.yaml", REFERENCES, relative_to=tmp_path).spec.models["gpt3-175b"].shape()
    flops = model_flops_per_sequence(shape, baseline.seq_len, conv)
    assert flops == 2.2e15
    # by hand: 2.2e15 x 1536 / 11 s / 1024 GPUs = 3.0e14 FLOP/s = 300 TFLOP/s per GPU; 300 / 312 = 0.9615 MFU
    assert tflops_per_gpu(flops, baseline.gbs, baseline.step_time_s, baseline.gpus) == pytest.approx(300.0)
    assert conv.describe() == "fixed 2.2e+15 FLOPs per sample"


def test_a_fixed_convention_with_formula_keys_is_refused(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(CATALOG.replace("{flops_per_sample: 2.2e15}",
                                                     "{flops_per_sample: 2.2e15, attention: causal}"))
    with pytest.raises(CatalogError, match="flops_per_sample replaces the formula"):
        load_catalog("c.yaml", REFERENCES, relative_to=tmp_path)
