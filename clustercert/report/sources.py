"""Where each threshold a report shows comes from: its unit and its authority, beside its value."""

from __future__ import annotations

from typing import Any

__all__ = ["RULE_SOURCES", "dotted", "rule_rows", "system_rows"]

# rule -> (unit, source). A source names a published figure where one exists, else says the value is
# clustercert's own choice; the catalog may change every value (its file and version are on the cover).
RULE_SOURCES: dict[str, tuple[str, str]] = {
    "pass_ratio": ("ratio t_baseline / t_measured", "NVIDIA Exemplar Cloud: within 5 % of the reference (DOMAIN.md 1)"),
    "repeats": ("–", "the catalog: how repeats combine (Exemplar does not publish its rule)"),
    "validity_months": ("months", "the catalog"),
    "bootstrap_resamples": ("resamples", "clustercert's own choice"),
    "bootstrap_seed": ("–", "clustercert's own choice"),
    "step_time_cv_max": ("coefficient of variation", "clustercert's own choice (advisory)"),
    "goodput_min": ("fraction of wall time", "NVIDIA Cluster Readiness Engine definition; the value clustercert's own "
                                             "(the Engine's example gate is 0.85)"),
    "scaling_efficiency_min": ("ratio of tokens/s/GPU", "clustercert's own choice (published weak-scaling tables "
                                                        "stay above 0.98)"),
    "straggler_score_min": ("relative score", "clustercert's own choice (nvidia-resiliency-ext flags below 0.75)"),
    "straggler_detect_max_s": ("s", "clustercert's own choice"),
    "restart_max_s": ("s", "clustercert's own choice"),
    "stall_factor": ("x mean step time", "DOMAIN.md 7 (no step for about 3 x the mean step time)"),
    "large_message_bytes": ("bytes", "DOMAIN.md 6 (gate on busbw at >= 1 GiB, not on the average)"),
    "degraded_pair_fraction": ("fraction of the peers' median", "clustercert's own choice"),
    "collective_targets_gbps": ("GB/s", "the catalog's fixed targets, each with its own reason"),
    "collective_model": ("GB/s", "published gates and reference results, else clustercert's link model "
                                 "(Methodology, Collective targets)"),
    "required_phases": ("–", "the catalog"),
    "mlperf_targets_minutes": ("minutes", "the catalog"),
    "recipe_fields": ("–", "the catalog"),
    "loss_check": ("–", "clustercert's own choice"),
    "loss_explode_factor": ("x first logged loss", "clustercert's own choice"),
}

def rule_rows(rules: dict[str, Any]) -> list[dict[str, Any]]:
    """The catalog's rules as the report's thresholds table shows them: name, value, unit, source."""
    return [{"rule": k, "value": _short(k, v), "unit": RULE_SOURCES.get(k, ("–", ""))[0],
             "source": RULE_SOURCES.get(k, ("–", "the catalog"))[1]} for k, v in rules.items()]


def _short(rule: str, value: Any) -> Any:
    """The collective model's lists are counted here: Methodology's "Collective targets" shows each entry."""
    if rule != "collective_model" or not isinstance(value, dict):
        return value
    return {k: (f"{len(v)} (see Collective targets)" if k in ("references", "public_gates")
                and isinstance(v, list | dict) else v) for k, v in value.items()}


# printed field -> the item of the system description it fills, in the order an auditor reads them
_PRINTED_ITEMS = (
    ("gpu_model", "GPU model"), ("host_networking", "Network"), ("container", "Container"),
    ("framework", "Framework"), ("nemo", "NeMo"), ("pytorch", "PyTorch"), ("driver", "Driver"),
    ("cuda_smi", "CUDA (nvidia-smi)"), ("cuda_runtime", "CUDA runtime"),
    ("cuda_driver_api", "CUDA (NCCL's driver API)"),
    ("nccl", "NCCL"), ("nccl_tests", "nccl-tests"), ("vbios", "Firmware (VBIOS)"), ("os", "Operating system"),
    ("kernel", "Kernel"),
)
_WANTED = ("Container", "Driver", "NCCL", "Firmware (VBIOS)", "Operating system")


def dotted(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """A configuration as (key, value) rows, nested keys joined by dots (`efficiency.nvlink.all_reduce`), depth
    first in its order; a value that is not a non-empty mapping is one row under `prefix`."""
    if not isinstance(value, dict) or not value:
        return [(prefix, value)]
    return [row for key, item in value.items() for row in dotted(item, f"{prefix}.{key}" if prefix else str(key))]


def system_rows(sut: dict[str, Any]) -> list[dict[str, Any]]:
    """The system description: declared values first ("declared in bundle.yaml"), then each value the evidence
    prints with the file and line that first prints it; an item nobody printed says so."""
    declared = sut.get("declared", {})
    rows: list[dict[str, Any]] = []
    yaml = "declared in bundle.yaml"

    def add(item: str, value: Any, origin: str | None, runs: int = 1) -> None:
        rows.append({"item": item, "value": value, "origin": origin, "runs": runs})

    interconnect = declared.get("interconnect")
    domains = declared.get("nvlink_domains")
    for item, value in (("Chip (GPU system)", declared.get("gpu")), ("Nodes", declared.get("nodes")),
                        ("GPUs per node", declared.get("gpus_per_node")),
                        ("NVLink domains", f"{domains} declared" if domains else
                         "none declared: each node is its own NVLink domain"),
                        ("Network (scale-out)", None if isinstance(interconnect, dict) else "not declared"),
                        ("Recipe version", declared.get("recipe_version"))):
        if value is not None:
            add(item, value, yaml)
    # a declared configuration is one row per key, nested keys dotted (system.interconnect.nics_per_node), not a
    # string of them all
    for key in ("interconnect", "description"):
        if isinstance(declared.get(key), dict):
            for dotted_key, value in dotted(declared[key], f"system.{key}"):
                add(dotted_key, value, yaml)
    printed, origins = sut.get("printed", {}), sut.get("origins", {})
    for field, item in _PRINTED_ITEMS:
        for value, runs in printed.get(field, {}).items():
            add(item, value, origins.get(field, {}).get(value), len(runs))
    shown = {r["item"] for r in rows}
    for item in _WANTED:
        if item not in shown:
            add(item, "not printed by any evidence file", None)
    return rows
