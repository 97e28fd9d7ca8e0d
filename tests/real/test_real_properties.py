"""Property tests on real lines: mangled lines of every real sample only ever raise EvidenceError."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.mangle import check_only_evidence_error, mangled

SAMPLES = {
    "nccl-tests": "nccl-tests/nccl_N2_G1_cnode2-001_cnode2-002.log",
    "nemo": "training-logs/nemo2-nemorun-llama-54m-8gpu-straggler-terminated.log",
    "megatron": "training-logs/megatron-lm-via-ms-swift-qwen2-0.5b-2gpu-bf16-120iters.log",
    "megatron-golden": "megatron-lm/gpt3_7b_tp1_pp4_memory_speed/golden_values_dev_dgx_h100.json",
    "mlperf": "mlperf-training/dell-xe9680-h100-llama2_70b_lora/result_0.txt",
    "sacct": "slurm/sacct-multi-node.txt",
}


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_mangled_real_lines_only_raise_evidence_error(real_samples: Path, fmt: str) -> None:
    lines = (real_samples / SAMPLES[fmt]).read_text().splitlines()
    lines = [line for line in lines if line.strip()][-200:]
    if fmt == "nemo":
        lines = lines[-80:] + [line for line in lines if "Training epoch" in line]

    @settings(max_examples=50, deadline=None)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        with tempfile.TemporaryDirectory() as folder:
            check_only_evidence_error(Path(folder) / "f", fmt, data.draw(mangled(lines)))

    check()
