"""What the system under test is, as real evidence prints it (nccl-tests headers, NCCL INFO lines)."""

from __future__ import annotations

from pathlib import Path

from clustercert.evidence.system import facts_in


def test_nccl_tests_header_names_the_tool_and_the_gpu(real_samples: Path) -> None:
    text = (real_samples / "nccl-tests" / "nccl_N1_G8_cnode3-002.log").read_text()
    facts = facts_in(text)
    # the file's first lines: "# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902" and
    # "#  Rank  0 Group  0 Pid 4180122 on cnode3-002 device  0 [0000:1b:00] NVIDIA H100 80GB HBM3"
    assert facts["nccl_tests"] == "2.17.8"
    assert facts["gpu_model"] == "NVIDIA H100 80GB HBM3"


def test_training_logs_print_their_nccl_version(real_samples: Path) -> None:
    logs = real_samples / "training-logs"
    # line 196: "7d3aaba68423:444:444 [0] NCCL INFO NCCL version 2.22.3+cuda12.5"
    assert facts_in((logs / "nemo2-llama3-toy-1gpu-bf16-20steps.log").read_text())["nccl"] == "2.22.3+cuda12.5"
    # line 8346: "NCCL version 2.27.3+cuda12.9" (Megatron-Bridge prints it bare)
    bridge = (logs / "megatron-bridge-llama3-8b-8gpu-bf16-20iters.log").read_text()
    assert facts_in(bridge)["nccl"] == "2.27.3+cuda12.9"
