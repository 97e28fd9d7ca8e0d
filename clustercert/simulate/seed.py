"""The shipped seed scenario: a GB200 NVL72 cluster of 8 racks certifying the suite at 512 GPUs."""

from __future__ import annotations

from pathlib import Path

import yaml

from clustercert.bundle import load_bundle, seal_bundle
from clustercert.catalog import LoadedCatalog
from clustercert.metrics.flops import model_flops_per_sequence
from clustercert.metrics.throughput import tflops_per_gpu
from clustercert.simulate.nemo import NemoRun, render_nemo_log

__all__ = ["SEED_MARGINS", "write_seed_bundle"]

# Step times this much faster than the baseline (the seed announcement's MFU deltas).
SEED_MARGINS = {
    ("deepseek-v3", "bf16"): 0.019,
    ("grok1-314b", "bf16"): 0.047,
    ("llama3.1-405b", "fp8"): 0.038,
    ("llama3-70b", "fp8"): 0.024,
}
RACKS, TRAYS_PER_RACK, GPUS_PER_TRAY = 8, 18, 4


def _nodes() -> list[str]:
    return [f"gb-r{r}-n{n:02d}" for r in range(1, RACKS + 1) for n in range(1, TRAYS_PER_RACK + 1)]


def write_seed_bundle(out: Path, catalog: LoadedCatalog, *, seed: int = 7, repeats: int = 1) -> Path:
    """Write the seed bundle into `out` (created) and seal it; returns the bundle folder."""
    out.mkdir(parents=True, exist_ok=True)
    nodes = _nodes()
    allocation = [n for n in nodes if int(n.rsplit("-n", 1)[1]) <= 16]  # 16 trays per rack: 512 GPUs
    runs: list[dict[str, object]] = []
    for index, ((workload, precision), margin) in enumerate(sorted(SEED_MARGINS.items())):
        baseline = catalog.baseline_for(workload, precision, 512)
        assert baseline is not None
        mean = baseline.step_time_s / (1.0 + margin)
        shape = catalog.spec.models[workload].shape()
        flops = model_flops_per_sequence(shape, baseline.seq_len, baseline.flops_convention.flops())
        for repeat in range(1, repeats + 1):
            rel = f"training/{workload}/{precision}/512/r{repeat}.log"
            log = NemoRun(
                name=f"{workload}-{precision}-512-r{repeat}", steps=50, gbs=baseline.gbs, mean_step_s=mean,
                noise=0.004, tflops_at_mean=tflops_per_gpu(flops, baseline.gbs, mean, 512),
                seed=seed * 1000 + index * 10 + repeat, params=catalog.spec.models[workload].name.split()[-1],
            )
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render_nemo_log(log), encoding="utf-8")
            runs.append({
                "id": f"{workload}-{precision}-512-r{repeat}", "phase": "efficiency", "kind": "training",
                "format": "nemo", "workload": workload, "precision": precision, "gpus": 512,
                "gbs": baseline.gbs, "seq_len": baseline.seq_len,
                "parallelism": baseline.parallelism.model_dump(exclude_none=True), "repeat": repeat,
                "files": [rel],
            })
    doc = {
        "schema_version": 1,
        "cluster": {"name": "example-cloud-gb200-east", "provider": "Example Cloud"},
        "system": {
            "gpu": "gb200-nvl72", "gpus_per_node": GPUS_PER_TRAY, "nodes": nodes,
            "nvlink_domains": [
                {"name": f"rack{r}", "nodes": [n for n in nodes if n.startswith(f"gb-r{r}-")]}
                for r in range(1, RACKS + 1)
            ],
            "interconnect": {"scale_out": "infiniband-ndr", "nics_per_node": 4},
        },
        "catalog": catalog.spec.id,
        "recipe_version": "25.05.05",
        "timezone": "UTC",
        "synthetic": True,
        "runs": runs,
    }
    del allocation
    text = "# Synthetic evidence written by `clustercert simulate`; not from a real cluster.\n"
    text += yaml.safe_dump(doc, sort_keys=False, width=120)
    (out / "bundle.yaml").write_text(text, encoding="utf-8")
    seal_bundle(load_bundle(out))
    return out
