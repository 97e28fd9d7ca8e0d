"""Simulated files parse with the project's parsers and have the real samples' structure, line by line."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from clustercert.evidence.bundle import load_bundle
from clustercert.parsers import FORMATS, detect_format
from clustercert.parsers.sacct import parse_sacct
from clustercert.settings import PROJECT_ROOT

EVIDENCE = PROJECT_ROOT / "evidence"
SAMPLES = ("gb200-seed", "gb200-degraded", "h100-1024")
_REAL_DEFAULT = PROJECT_ROOT.parent / "shared" / "samples" / "real"
_NUM = re.compile(r"(?<![A-Za-z_])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@pytest.fixture(scope="module")
def real() -> Path:
    """The real samples (as tests/real finds them); skips when absent unless they are required."""
    root = Path(os.environ.get("CLUSTERCERT_REAL_SAMPLES") or _REAL_DEFAULT)
    if not (root / "SOURCES.md").is_file():
        reason = f"real samples not found at {root} (set CLUSTERCERT_REAL_SAMPLES)"
        if os.environ.get("CLUSTERCERT_REQUIRE_REAL_SAMPLES") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return root


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _shape(line: str) -> str:
    """A line with its values abstracted: job prefix, hosts, paths, numbers."""
    line = re.sub(r"^\S+/0 ", "J ", line)  # NeMo-Run's job prefix (`ining-demo/0 `)
    line = re.sub(r"^J \[default\d+\]:", "J D:", line)
    line = re.sub(r"ft_launcher@\S+\]", "ft_launcher@H]", line)
    line = re.sub(r"Node=\S+", "Node=H", line)
    line = re.sub(r"node='[^']*'", "node='H'", line)
    line = re.sub(r"(?<![\w.])/[^\s)]+", "P", line)
    line = _NUM.sub("N", line)
    line = re.sub(r"StragglerId\(rank=N, node='H'\)(?:, StragglerId\(rank=N, node='H'\))*", "S...", line)
    return re.sub(r"\[N(?:, N)*\]", "[N...]", line)


@pytest.mark.parametrize("sample", SAMPLES)
def test_every_simulated_file_parses_and_is_detected_as_its_format(sample: str) -> None:
    bundle = load_bundle(EVIDENCE / sample)
    kinds = set()
    for run in bundle.spec.runs:
        for rel in run.files:
            path = bundle.resolve(rel)
            FORMATS[run.format](path, rel)
            assert detect_format(path) == run.format, rel
        kinds.add((run.phase.value, run.kind.value))
    assert kinds == {
        ("efficiency", "training"), ("scaling", "training"), ("scaling", "collective"),
        ("resilience", "resilience"), ("resilience", "scheduler"), ("resilience", "events"),
        ("resilience", "rank-timings"), ("resilience", "telemetry"),
    }


def _step_shapes(lines: Iterable[str], marker: str) -> set[str]:
    return {_shape(ln) for ln in lines if marker in ln}


def test_nemo_step_lines_have_the_real_field_order(real: Path) -> None:
    logs = real / "training-logs"
    real_shapes = set()
    for path in logs.glob("nemo2-*.log"):
        real_shapes |= _step_shapes(_lines(path), "Training epoch ")
    seen = set()
    for sample in SAMPLES:
        for path in (EVIDENCE / sample / "training").rglob("*.log"):
            for shape in _step_shapes(_lines(path), "Training epoch "):
                # NVIDIA's performance recipes add TFLOPS_per_GPU at the end; the real samples lack it
                seen.add(shape.replace(" | TFLOPS_per_GPU: N", ""))
        for shape in _step_shapes(_lines(EVIDENCE / sample / "resilience" / "training.log"), "Training epoch "):
            seen.add(shape.replace("J D:", ""))
    real_bare = {s.replace("J D:", "") for s in real_shapes}
    assert seen <= real_bare, sorted(seen - real_bare)
    assert len(seen) == 3  # first step without consumed_samples, later steps, steps after a restart


def test_nemo_resilience_lines_match_the_real_crash_and_straggler_logs(real: Path) -> None:
    logs = real / "training-logs"
    real_shapes = {_shape(ln) for p in logs.glob("nemo2-nemorun-*.log") for ln in _lines(p)}
    markers = ["Worker group FAILED", "restart_count=", "master_port=", "local_ranks=", "Rendezvous complete",
               "Restoring states from the checkpoint path", "Restored all states from the checkpoint",
               "Scheduled async checkpoint save for", "finalized successfully", "GPU relative performance:",
               "GPU individual performance:", "Rank=", "STRAGGLER DETECTION WARNING", "Terminating training",
               "failed (exitcode:", "WorkerState.SUCCEEDED", "successfully finished", "`Trainer.fit` stopped",
               "Experiments will be logged at", "starting workers for entrypoint"]
    for sample in ("gb200-seed", "h100-1024"):
        lines = _lines(EVIDENCE / sample / "resilience" / "training.log")
        for marker in markers:
            shapes = {_shape(ln) for ln in lines if marker in ln}
            assert shapes, (sample, marker)
            assert shapes <= real_shapes, (marker, sorted(shapes - real_shapes)[:2])


def test_megatron_bridge_step_lines_have_the_real_layout(real: Path) -> None:
    real_lines = [ln for ln in _lines(real / "training-logs" / "megatron-bridge-llama3-8b-8gpu-bf16-20iters.log")
                  if re.match(r" \[[\d-]+ [\d:]+\] iteration", ln)]
    simulated = [ln for ln in _lines(EVIDENCE / "gb200-seed" / "training" / "llama3-70b" / "fp8" / "128" / "r1.log")
                 if " iteration " in ln]
    assert len(simulated) == 50
    real_keys = [re.findall(r"\| ([a-z ()]+):", ln) for ln in real_lines[1:]]
    for line in simulated:
        assert re.findall(r"\| ([a-z ()]+):", line) == real_keys[0]
        # fixed-width fields as Megatron prints them: iteration %8d/%8d, samples %12d, batch %5d
        assert re.match(r"^ \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] iteration {1,8}\d+/ {6}50 \| consumed samples: +\d+ \|",
                        line)
        assert len(line.split("|")[1]) == len(real_lines[0].split("|")[1])  # consumed samples width
        assert line.endswith("number of nan iterations:   0 |")


def _rank_line_roundtrips(line: str) -> bool:
    """nccl-tests' `#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s` reproduces the line exactly."""
    m = re.match(r"^#  Rank +(\d+) Group +(\d+) Pid +(\d+) on +(\S+) device +(\d+) (\[\S+\]) (.+)$", line)
    if not m:
        return False
    rank, group, pid, host, dev, bus, name = m.groups()
    text = (f"#  Rank {int(rank):2d} Group {int(group):2d} Pid {int(pid):6d} on {host:>10s} "
            f"device {int(dev):2d} {bus} {name}")
    return text == line


def test_nccl_tests_headers_rows_and_spacing_match_real_output(real: Path) -> None:
    real_lines = _lines(real / "nccl-tests" / "nccl_N10_G8.log")
    header = [ln for ln in real_lines if ln.startswith("#") and "Rank" not in ln and "Reducing" not in ln]
    real_rows = [ln for ln in real_lines if re.match(r"^ +\d+ +\d+ +double", ln)]
    real_columns = {tuple(m.end() for m in re.finditer(r"\S+", ln)) for ln in real_rows}
    for path in sorted((EVIDENCE / "gb200-seed" / "collectives").rglob("*.log"))[:6]:
        lines = _lines(path)
        sim_header = [ln for ln in lines if ln.startswith("#") and "Rank" not in ln]
        assert {_shape(h) for h in sim_header} <= {_shape(h) for h in header} | {_shape(
            "# Collective test starting: sendrecv_perf"), _shape("# Collective test concluded: sendrecv_perf"),
            _shape("# Collective test starting: alltoall_perf"), _shape("# Collective test concluded: alltoall_perf")}
        rows = [ln for ln in lines if re.match(r"^ +\d+ +\d+ +double", ln) and "NCCL INFO" not in ln]
        for row in rows:
            ends = tuple(m.end() for m in re.finditer(r"\S+", row))
            assert ends[:5] == next(iter(real_columns))[:5], row  # size, count, type, redop, root
            assert len(row) == len(real_rows[0]) or row.split()[-1] == "N/A" or len(row) in {
                len(r) for r in real_rows}, row
        ranks = [ln for ln in lines if ln.startswith("#  Rank")]
        assert ranks and all(_rank_line_roundtrips(r) for r in ranks)
        assert any(re.match(r"^\S+:\d+:\d+ \[\d+\] NCCL INFO ", ln) for ln in lines)
        assert any(re.match(r"^ +\d+ +\d+ +double +\w+ +-1\S+:\d+:\d+ \[\d+\] NCCL INFO ", ln) for ln in lines)
    assert all(_rank_line_roundtrips(ln) for ln in real_lines if ln.startswith("#  Rank"))


def test_sacct_dump_is_parsable2_with_a_header(real: Path) -> None:
    real_rows = [ln for ln in _lines(real / "slurm" / "sacct-multi-node.txt") if not ln.startswith("#") and ln]
    real_time = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$")
    real_start = real_rows[0].split("|")[8]
    assert real_time.match(real_start)
    for sample in SAMPLES:
        path = EVIDENCE / sample / "resilience" / "sacct.txt"
        lines = _lines(path)
        assert lines[0].split("|")[:2] == ["JobID", "JobName"]
        result = parse_sacct(path, "sacct")
        header = lines[0].split("|")
        cells = [lines[job.line - 1].split("|") for job in result.jobs]  # each job's row as the file prints it
        assert all(real_time.match(row[header.index("Start")]) for row in cells)
        assert all(len(ln.split("|")) == len(lines[0].split("|")) and not ln.endswith("|") for ln in lines)
        elapsed = [row[header.index("Elapsed")] for row in cells]
        assert all(re.match(r"^(\d+-)?\d\d:\d\d:\d\d$", e) for e in elapsed)
