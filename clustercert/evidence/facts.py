"""What the catalog says about each run of a bundle (its model FLOPs per sequence, dense peak, baseline window).

Worked out once when the evidence set is built: the validation tables read these facts beside the parsed files and
never reach into the catalog or the FLOPs formulas themselves (issue 13)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from clustercert.catalog import LoadedCatalog
from clustercert.evidence.bundle import LoadedBundle, RunSpec
from clustercert.metrics.flops import CANONICAL, model_flops_per_sequence
from clustercert.metrics.megatron_flops import megatron_flops_per_sequence

__all__ = ["BundleFacts", "RunFacts", "bundle_facts", "run_facts"]


@dataclass(frozen=True)
class RunFacts:
    """One run's catalog facts; None where the catalog or bundle.yaml does not give what it needs."""

    flops_per_sequence: float | None = None  # model FLOPs per sequence, canonical convention (DOMAIN.md section 4)
    peak_tflops: float | None = None  # dense peak of the run's precision (catalog peaks_tflops)
    window: tuple[int, int] | None = None  # the matching baseline's measurement window, first and last iteration


@dataclass(frozen=True)
class BundleFacts:
    """Every run's facts, and the bus-bandwidth plausibility ceiling of the catalog's GPU."""

    busbw_ceiling_gbps: float
    runs: Mapping[str, RunFacts] = field(default_factory=dict)

    def of(self, run_id: str) -> RunFacts:
        return self.runs.get(run_id, _NONE)


_NONE = RunFacts()


def run_facts(run: RunSpec, catalog: LoadedCatalog) -> RunFacts:
    """The catalog's facts for one run of bundle.yaml."""
    flops = None
    model = catalog.spec.models.get(run.workload) if run.workload is not None else None
    if model is not None and run.seq_len is not None:
        try:
            flops = model_flops_per_sequence(model.shape(), run.seq_len, CANONICAL)
        except ValueError:  # beyond DOMAIN.md's formula (hybrid, windowed, latent MoE): Megatron-Bridge's count
            tp = run.parallelism.tp if run.parallelism is not None else 1
            flops = megatron_flops_per_sequence(model.architecture(), run.seq_len, tensor_parallel=tp)
    peak = catalog.spec.peaks_tflops.get(run.precision) if run.precision is not None else None
    window = None
    if run.workload and run.precision and run.gpus:
        baseline = catalog.baseline_for(run.workload, run.precision, run.gpus)
        if baseline is not None:
            window = (baseline.window.first, baseline.window.last)
    return RunFacts(flops_per_sequence=flops, peak_tflops=peak, window=window)


def bundle_facts(bundle: LoadedBundle, catalog: LoadedCatalog) -> BundleFacts:
    """DOMAIN.md section 6: the ceiling is twice the GPU's NVLink rate per direction, in GB/s."""
    return BundleFacts(busbw_ceiling_gbps=2.0 * catalog.spec.nvlink_gbps_per_direction,
                       runs={run.id: run_facts(run, catalog) for run in bundle.spec.runs})
