"""The software and hardware a log prints, found by each field's pattern (lines as the tools print them)."""

from __future__ import annotations

import pytest

from clustercert.evidence import system
from clustercert.evidence.system import SOFTWARE_PATTERNS, facts_at, facts_in

LINES = {
    "gpu_model": ("#  Rank  0 Group  0 Pid 4180122 on cnode3-002 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3",
                  "NVIDIA H100 80GB HBM3"),
    "nccl": ("7d3aaba68423:444:444 [0] NCCL INFO NCCL version 2.22.3+cuda12.5", "2.22.3+cuda12.5"),
    "nccl_tests": ("# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902", "2.17.8"),
    "cuda_driver_api": ("n1:12:12 [0] NCCL INFO cudaDriverVersion 12080", "12.8"),
    "driver": ("| NVIDIA-SMI 570.124.06   Driver Version: 570.124.06   CUDA Version: 12.8 |", "570.124.06"),
    "cuda_runtime": ("CUDA runtime version: 12.8.93", "12.8.93"),
    "nemo": ("[NeMo I 2025-01-02 10:00:00] NeMo version: 2.1.0", "2.1.0"),
    "container": ("srun --container-image=nvcr.io/nvidia/nemo:25.02 python train.py", "nvcr.io/nvidia/nemo:25.02"),
    "pytorch": ("torch version: 2.6.0a0+ecf3bae40a.nv25.01", "2.6.0a0+ecf3bae40a.nv25.01"),
    # nvidia-smi -a (samples/real/node-health/thamada-gls/nvidia-smi-a.H100SXMx8.txt lines 28 and 6)
    "vbios": ("    VBIOS Version                         : 96.00.74.00.01", "96.00.74.00.01"),
    "cuda_smi": ("CUDA Version                              : 12.7", "12.7"),
    "kernel": ("[    0.000000] Linux version 5.15.0-112-generic (buildd@lcy02-amd64-051) (gcc 11.4.0)",
               "5.15.0-112-generic"),
    # an MLPerf system description (samples/real/mlperf-training/dell-xe9680-h100-llama2_70b_lora/system.json)
    "os": ('    "operating_system"                  : "Red Hat Enterprise Linux 9.1",', "Red Hat Enterprise Linux 9.1"),
    "framework": ('    "framework"                         : "NGC MXNet 23.09, NGC PyTorch 23.09, NGC HugeCTR 23.09",',
                  "NGC MXNet 23.09, NGC PyTorch 23.09, NGC HugeCTR 23.09"),
    "host_networking": ('    "host_networking": "InfiniBand NDR 400 Gb/s",', "InfiniBand NDR 400 Gb/s"),
}


def test_each_value_is_found_with_the_line_it_is_printed_on() -> None:
    text = "header\n" * 27 + LINES["vbios"][0] + "\n" + "footer\n"
    assert facts_at(text)["vbios"] == ("96.00.74.00.01", 28)


def test_every_field_has_its_line_and_the_text_its_matches_contain() -> None:
    assert set(LINES) == set(SOFTWARE_PATTERNS) == set(system._NEEDS)
    for name, (line, _) in LINES.items():
        match = SOFTWARE_PATTERNS[name].search(line)
        assert match is not None and system._NEEDS[name] in match.group(0)


@pytest.mark.parametrize("name", sorted(LINES))
def test_each_field_is_found_among_other_lines(name: str) -> None:
    line, value = LINES[name]
    text = "# nccl-tests style header\n" * 50 + line + "\n" + "#  size  count  type\n" * 50
    assert facts_in(text).get(name) == value
    assert name not in facts_in(text.replace(line, "nothing printed here"))
