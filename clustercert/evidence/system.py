"""The system under test as the evidence prints it: GPU model, driver, CUDA, NCCL, container, firmware, OS.

Read from each evidence file's head (the banner and config dumps sit there). Values that differ between runs
are listed: every run of a certification must use the same software.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clustercert.evidence.bundle import LoadedBundle

__all__ = ["SOFTWARE_PATTERNS", "SystemFacts", "describe_system", "facts_at", "facts_in"]

_HEAD = 256 * 1024
# field -> pattern whose first group is the value, as real tools print it
SOFTWARE_PATTERNS: dict[str, re.Pattern[str]] = {
    "gpu_model": re.compile(r"#\s+Rank\s+\d+ .*? device\s+\d+ \[[0-9a-fA-F:.]+\] (.+?)\s*$", re.M),
    "nccl": re.compile(r"\bNCCL version (\d+\.\d+\.\d+\S*)"),
    "nccl_tests": re.compile(r"# nccl-tests version (\S+)"),
    "cuda_driver_api": re.compile(r"\bcudaDriverVersion (\d+)"),
    "driver": re.compile(r"\bDriver Version:\s*(\d+(?:\.\d+)+)"),
    "cuda_runtime": re.compile(r"\bCUDA (?:runtime|Runtime) [Vv]ersion[: ]\s*(\d+(?:\.\d+)*)"),
    "nemo": re.compile(r"\bNeMo version[: ]\s*(\S+)"),
    "container": re.compile(r"\b(nvcr\.io/\S+:\S+)"),
    "pytorch": re.compile(r"\btorch(?:\s+version)?[ =:]+(\d+\.\d+\.\d+\S*)"),
    "vbios": re.compile(r"\bVBIOS Version\s*:\s*(\S+)"),
    "cuda_smi": re.compile(r"\bCUDA Version\s*:\s*(\d+\.\d+)"),
    "kernel": re.compile(r"\bLinux version (\S+)"),
    "os": re.compile(r'"operating_system"\s*:\s*"([^"]+)"'),
    "framework": re.compile(r'"framework"\s*:\s*"([^"]+)"'),
    "host_networking": re.compile(r'"host_networking"\s*:\s*"([^"]+)"'),
}


# text every match of the field's pattern contains: a file without it is not searched (Python's re scans for a
# leading \b at every position, and a sweep has thousands of small logs)
_NEEDS = {"gpu_model": "Rank", "nccl": "NCCL version ", "nccl_tests": "# nccl-tests version ",
          "cuda_driver_api": "cudaDriverVersion ", "driver": "Driver Version:", "cuda_runtime": "CUDA ",
          "nemo": "NeMo version", "container": "nvcr.io/", "pytorch": "torch", "vbios": "VBIOS Version",
          "cuda_smi": "CUDA Version", "kernel": "Linux version ", "os": '"operating_system"',
          "framework": '"framework"', "host_networking": '"host_networking"'}


def _driver_api(raw: str) -> str:
    """NCCL's cudaDriverVersion 12080 is CUDA 12.8 (major x 1000 + minor x 10)."""
    n = int(raw)
    return f"{n // 1000}.{(n % 1000) // 10}"


def facts_in(text: str) -> dict[str, str]:
    """The first value of each field found in `text`."""
    return {name: value for name, (value, _) in facts_at(text).items()}


def facts_at(text: str) -> dict[str, tuple[str, int]]:
    """The first value of each field found in `text`, with the line (from 1) it is printed on."""
    out: dict[str, tuple[str, int]] = {}
    for name, pattern in SOFTWARE_PATTERNS.items():
        if _NEEDS.get(name, "") not in text:
            continue
        match = pattern.search(text)
        if match:
            value = match.group(1).strip()
            line = text.count("\n", 0, match.start()) + 1
            out[name] = (_driver_api(value) if name == "cuda_driver_api" else value, line)
    return out


@dataclass(frozen=True)
class SystemFacts:
    declared: dict[str, object]  # bundle.yaml system (and its optional description)
    printed: dict[str, dict[str, list[str]]]  # field -> value -> run ids that print it
    disagreements: list[str]  # one line per field printed with more than one value
    origins: dict[str, dict[str, str]] | None = None  # field -> value -> "file:line" where it is first printed

    def to_json(self) -> dict[str, object]:
        return {"declared": self.declared, "printed": self.printed, "disagreements": self.disagreements,
                "origins": self.origins or {}}


def describe_system(bundle: LoadedBundle) -> SystemFacts:
    spec = bundle.spec.system
    declared = spec.model_dump(mode="json", exclude={"nodes", "nvlink_domains"}, exclude_none=True)
    declared["nodes"] = len(spec.nodes)
    declared["nvlink_domains"] = len(spec.nvlink_domains)
    declared["recipe_version"] = bundle.spec.recipe_version
    found: dict[str, dict[str, dict[str, None]]] = {}  # field -> value -> run ids, ordered, one lookup each
    origins: dict[str, dict[str, str]] = {}
    for run in bundle.spec.runs:
        for rel in run.files:
            path = bundle.root / rel
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            for file in files[:50]:
                if file.suffix in (".parquet", ".gz", ".zst", ".bin") or not file.is_file():
                    continue
                with file.open("rb") as handle:
                    text = handle.read(_HEAD).decode("utf-8", errors="replace")
                for name, (value, line) in facts_at(text).items():
                    found.setdefault(name, {}).setdefault(value, {}).setdefault(run.id, None)
                    origins.setdefault(name, {}).setdefault(value, f"{file.relative_to(bundle.root)}:{line}")
    printed = {name: {value: list(runs) for value, runs in values.items()} for name, values in found.items()}
    disagreements = []
    for name, values in printed.items():
        if len(values) > 1:
            shown = "; ".join(f"{v} ({', '.join(r[:3])}{' ...' if len(r) > 3 else ''})" for v, r in values.items())
            disagreements.append(f"{name} differs between runs: {shown}")
    return SystemFacts(declared=declared, printed=printed, disagreements=disagreements, origins=origins)
