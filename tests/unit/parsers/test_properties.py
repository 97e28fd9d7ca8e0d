"""Property tests: mangled lines of every format only ever raise EvidenceError (hand-written seed lines)."""


from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.mangle import check_only_evidence_error, mangled

SEEDS: dict[str, list[str]] = {
    "nemo": [
        "p [default0]:Training epoch 0, iteration 3/19 | lr: 1.4e-07 | global_batch_size: 512 | global_step: 3 | "
        "reduced_train_loss: 11.03 | train_step_timing in s: 7.6 | consumed_samples: 2048",
        "[NeMo I 2025-03-07 22:38:36 model_checkpoint:497] Scheduled async checkpoint save",
    ],
    "megatron": [
        " [2025-08-29 17:02:51] iteration        2/      20 | consumed samples:           16 | elapsed time per "
        "iteration (ms): 751.4 | learning rate: 5.000000E-05 | global batch size:     8 | lm loss: 1.057679E+01 | "
        "loss scale: 1.0 | grad norm: 16.560 | number of skipped iterations:   0 | number of nan iterations:   0 |",
        "Step Time : 9.09s GPU utilization: 663.5MODEL_TFLOP/s/GPU",
    ],
    "megatron-deepspeed": [
        " iteration       10/     100 | elapsed time per iteration (s): 1.25 | lm loss: 7.5E+00 | grad norm: 2.0 | "
        "samples per second: 6.4 | TFLOPs: 150.25 |",
    ],
    "dllogger": [
        'DLLL {"type": "PARAMETER", "step": "PARAMETER", "data": {"gbs": 8}}',
        'DLLL {"type": "LOG", "step": 5, "data": {"train_step_timing in s": 1.5, "reduced_train_loss": 2.0}}',
    ],
    "megatron-golden": [
        '{"iteration-time": {"start_step": 1, "end_step": 3, "step_interval": 1, "values": {"1": "nan", "2": 1.5}},',
        '"lm loss": {"start_step": 1, "values": {"1": 10.0, "2": 9.5}}}',
    ],
    "nccl-tests": [
        "# Collective test starting: all_reduce_perf",
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20",
        "#  Rank  0 Group  0 Pid   6899 on host-a device  0 [0000:04:00] NVIDIA H100 80GB HBM3",
        "    33554432       4194304    double     sum      -1   182.87  183.49  321.10       0   182.88  183.48  "
        "321.08       0",
        "host-a:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[0] via NET/IB",
        "# Avg bus bandwidth    : 437.957 ",
        "# Collective test concluded: all_reduce_perf",
    ],
    "sacct": [
        "101|CANCELLED by 1234|1-02:03:04|2024-01-02T03:04:05|Unknown",
        "101.batch|CANCELLED|00:05.5|2024-01-02T03:04:05|2024-01-02T03:09:05",
    ],
    "events": [
        '{"ts": "2025-03-07T22:39:36+00:00", "type": "fault_injected", "node": "n1", "gpu": 3, "by": "injector"}',
        '{"ts": "2025-03-07T22:40:00Z", "type": "restart_started", "step": 9}',
    ],
    "dcgm": [
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="n1"} 97 1700000000000',
    ],
    "dcgm ": ["#Entity   GPUTL  POWER", "ID", "GPU 0     10     63.5", "GPU 1     N/A    61.0"],
    "rank-timings": [
        "rank,node,gpu,step,compute_s,comm_s,timestamp",
        "0,n1,0,1,0.5,0.1,2025-03-07T22:39:36+00:00",
        "1,n2,1,1,0.6,0.1,2025-03-07T22:39:36.5+00:00",
    ],
    "mlperf": [
        ':::MLLOG {"time_ms": 1000, "key": "run_start", "value": null, "metadata": {}}',
        ':::MLLOG {"time_ms": 61000, "key": "run_stop", "value": null, "metadata": {"status": "success"}}',
    ],
}


@pytest.mark.parametrize("fmt", sorted(SEEDS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mangled_lines_only_raise_evidence_error(tmp_path: Path, fmt: str, data: st.DataObject) -> None:
    check_only_evidence_error(tmp_path / "f", fmt.strip(), data.draw(mangled(SEEDS[fmt])))
