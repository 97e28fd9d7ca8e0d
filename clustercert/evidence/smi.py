"""What the nvidia-smi reports of a folder say about its system, for `evidence init`: the GPUs' product names, the GPUs
per node and the NVLink domains (Fabric ClusterUUID and CliqueId), each with the file and line it comes from, or
why the reports cannot say."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clustercert.evidence.bundle import PLACEHOLDER
from clustercert.parsers.health import GpuReport

__all__ = ["Inferred", "SmiReport", "gpu_names", "gpus_per_node", "nvlink_domains"]

# the cluster UUID a GPU outside any multi-node NVLink domain prints
_ZERO_UUID = "00000000-0000-0000-0000-000000000000"
_SHOWN = 4  # places named in a comment before "and N more"


@dataclass(frozen=True)
class SmiReport:
    """One `nvidia-smi -q` report of the folder (text, XML, or a prescreen's step 8a) and the node it was given."""

    rel: str
    node: str
    report: GpuReport


@dataclass(frozen=True)
class Inferred:
    """A value the reports give (`value`), with where from; or None with why it is asked for."""

    value: Any
    why: str


def _listed(places: list[str]) -> str:
    more = len(places) - _SHOWN
    return ", ".join(places[:_SHOWN]) + (f" and {more} more" if more > 0 else "")


def gpu_names(reports: list[SmiReport]) -> dict[str, str]:
    """Each product name the reports print, with the first place (`file:line`) it is printed at."""
    names: dict[str, str] = {}
    for smi in reports:
        for gpu in smi.report.gpus:
            if gpu.name is not None:
                names.setdefault(gpu.name, f"{smi.rel}:{gpu.line_of('name')}")
    return names


def gpus_per_node(reports: list[SmiReport]) -> Inferred | None:
    """The GPUs each report attaches, when every report attaches as many; asked for where they differ (two
    systems' evidence in one folder); None without a report."""
    counts: dict[int, list[str]] = {}
    for smi in reports:
        counts.setdefault(smi.report.attached_gpus, []).append(f"{smi.rel}:{smi.report.attached_line}")
    if not counts:
        return None
    if len(counts) == 1:
        (count, places), = counts.items()
        return Inferred(count, f"Attached GPUs {count} in nvidia-smi's {_listed(places)}")
    shown = "; ".join(f"{count} in {_listed(places)}" for count, places in sorted(counts.items()))
    return Inferred(None, f"needed: the nvidia-smi reports attach different GPU counts ({shown}): keep one "
                    "system's evidence in this folder and give its GPUs per node")


def nvlink_domains(reports: list[SmiReport], nodes: list[str], per_domain: int) -> Inferred | None:
    """The NVLink domains as the GPUs' fabric shows them: the nodes whose GPUs print one ClusterUUID and CliqueId
    share a domain. Asked for where a node's report names no node, a node's GPUs print more than one domain or
    none registered, a node has no report, or a domain holds more than `per_domain` nodes; None where no report
    prints a clique (drivers before R550 do not)."""
    seen: dict[str, dict[tuple[str, int], str]] = {}  # node -> (cluster UUID, clique) -> where first
    unnamed: list[str] = []
    for smi in reports:
        for gpu in smi.report.gpus:
            clique, uuid = gpu.value("fabric.clique_id"), gpu.value("fabric.cluster_uuid")
            if not isinstance(clique, int) or not isinstance(uuid, str):
                continue
            if smi.node == PLACEHOLDER:
                unnamed.append(smi.rel)
                break
            seen.setdefault(smi.node, {}).setdefault((uuid.lower(), clique),
                                                     f"{smi.rel}:{gpu.line_of('fabric.clique_id')}")
    if not seen and not unnamed:
        return None
    problems: list[str] = []
    if unnamed:
        problems.append(f"the node of {_listed(sorted(set(unnamed)))} is not known")
    for node, domains in sorted(seen.items()):
        if len(domains) > 1:
            shown = ", ".join(f"clique {clique} of {uuid} ({where})" for (uuid, clique), where in domains.items())
            problems.append(f"{node}'s GPUs print more than one domain: {shown}")
        for (uuid, clique), where in domains.items():
            if uuid == _ZERO_UUID or clique == 0:
                problems.append(f"{node}'s GPUs are in no multi-node NVLink domain (clique {clique}, ClusterUUID "
                                f"{uuid} at {where}): its fabric is not registered")
    missing = [node for node in nodes if node != PLACEHOLDER and node not in seen]
    if missing:
        problems.append(f"{_listed(missing)} show no fabric clique in an nvidia-smi report")
    groups: dict[tuple[str, int], list[str]] = {}
    for node, domains in sorted(seen.items()):
        groups.setdefault(next(iter(domains)), []).append(node)
    problems += [f"clique {clique} of {uuid} holds {len(members)} nodes, more than the {per_domain} of one domain"
                 for (uuid, clique), members in groups.items() if len(members) > per_domain]
    if problems:
        return Inferred(None, "needed: the NVLink domains, each as {name: ..., nodes: [...]}; nvidia-smi's fabric "
                        "cannot tell them: " + "; ".join(problems))
    one_cluster = len({uuid for uuid, _ in groups}) == 1
    declared = [{"name": f"clique-{clique}" if one_cluster else f"{uuid[:8]}-clique-{clique}", "nodes": members}
                for (uuid, clique), members in sorted(groups.items())]
    places = [where for node in sorted(seen) for where in seen[node].values()]
    return Inferred(declared, f"nvidia-smi's Fabric ClusterUUID and CliqueId of each node's GPUs ({_listed(places)})")
