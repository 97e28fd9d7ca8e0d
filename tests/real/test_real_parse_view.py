"""`clustercert evidence parse` as a user runs it on real files: what it prints is what the file says, each figure
recomputed here from the file's own text (not from the parser), at 80 columns."""

from __future__ import annotations

import itertools
import json
import re
import statistics
from collections import Counter
from pathlib import Path

from tests.conftest import ROOT, run_cli
from tests.real.test_real_parsers import SACCT_FIELDS

SAMPLE = ROOT / "evidence" / "gb200-seed"


def _parse(path: Path, *options: str) -> list[str]:
    """The lines printed for `path` at 80 columns (exit 0, nothing on stderr), each checked to fit."""
    proc = run_cli("evidence", "parse", str(path), *options, env={"COLUMNS": "80"})
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{path}: format {_detected(lines[0])} (detected)"
    assert all(len(line) <= 80 for line in lines[1:]), lines  # the first line is the path as given
    assert lines[-1] == "  (--json prints every value read)"
    return lines


def _detected(first: str) -> str:
    return first.rsplit(": format ", 1)[1].split(" ")[0]


def _joined(lines: list[str]) -> str:
    """The printed lines with wrapped ones joined back (a continuation is indented four columns deeper than its
    line: a line at 2 continues at 6, a row under a heading, at 4, continues at 8)."""
    joined = [lines[0]]
    for line in lines[1:]:
        if len(line) - len(line.lstrip()) >= 6 and (len(joined[-1]) - len(joined[-1].lstrip())) + 4 <= len(line) - \
                len(line.lstrip()):
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    return "\n".join(joined)


def test_nccl_tests_each_test_its_ranks_hosts_sizes_and_largest_size(real_samples: Path) -> None:
    path = real_samples / "nccl-tests" / "nccl_N10_G8.log"
    text = _joined(_parse(path))
    raw = path.read_text().splitlines()
    starts = [i for i, line in enumerate(raw) if "Collective test starting" in line] + [len(raw)]
    assert f"  {len(starts) - 1} tests; busbw in GB/s" in text
    for begin, end in itertools.pairwise(starts):
        block = raw[begin:end]
        name = re.search(r"starting: (\w+)_perf", block[0]).group(1)  # type: ignore[union-attr]
        ranks = [ln for ln in block if re.match(r"#\s+Rank\s+\d+ ", ln)]
        hosts = {re.search(r" on (\S+) ", ln).group(1) for ln in ranks}  # type: ignore[union-attr]
        rows = [(begin + i + 1, ln.split()) for i, ln in enumerate(block) if re.match(r"\s+\d+\s+\d+\s+\w+", ln)]
        number, largest = max(rows, key=lambda r: int(r[1][0]))
        printed = re.search(r"Avg bus bandwidth\s*:\s*(\S+)", "\n".join(block)).group(1)  # type: ignore[union-attr]
        mean = statistics.fmean(float(cells[k]) for _, cells in rows for k in (7, 11))
        sizes = f"{len(rows)} sizes {int(min(int(c[0]) for _, c in rows) / 2**20 + 0.5)}"
        avg_at = begin + next(i for i, ln in enumerate(block) if "Avg bus bandwidth" in ln) + 1
        line = f"  {name}: {len(ranks)} ranks on {len(hosts)} hosts, lines "
        assert line in text, (line, text)
        part = text[text.index(line):].split("\n")[0]
        first, last = map(int, re.match(r"[^,]+, lines (\d+)-(\d+),", part).groups())  # type: ignore[union-attr]
        assert first <= begin + 1 and avg_at <= last <= end, (part, begin, avg_at, end)  # its header to its end
        assert sizes in part and f"busbw {float(largest[7]):g} / {float(largest[11]):g} (line {number})" in part
        shown, computed = re.search(r"average (\S+) / (\S+)$", part).groups()  # type: ignore[union-attr]
        assert shown == printed and abs(float(computed) - mean) <= 5e-6 * mean, (part, mean)  # six digits shown


def test_a_training_log_its_steps_step_times_and_first_and_last_rows(real_samples: Path) -> None:
    path = real_samples / "training-logs" / "megatron-bridge-llama3-8b-8gpu-bf16-20iters.log"
    lines = _parse(path)
    raw = path.read_text().splitlines()
    found = [(number, int(m.group(1)), float(m.group(2)) / 1000)
             for number, line in enumerate(raw, start=1)
             if (m := re.search(r"iteration\s+(\d+)/\s*\d+ .*elapsed time per iteration \(ms\): ([\d.]+)", line))]
    assert len(found) == 20
    text = _joined(lines)
    assert f"  20 steps read of {len(raw):,} lines: iterations 1..20, lines {found[0][0]}-{found[-1][0]}" in text
    times = [t for _, _, t in found]
    assert (f"  step time (s): median {statistics.median(times):.6g} (min {min(times):.6g}, max {max(times):.6g}) "
            "over 20 steps") in text
    rows = lines[lines.index("  steps (iteration, step time s, TFLOPS per GPU, loss, line):") + 1:]
    assert rows[3] == "    ... 14 steps more"
    for row, (number, iteration, seconds) in zip(rows[:3] + rows[4:7], found[:3] + found[-3:], strict=True):
        cells = row.split()
        shown = (int(cells[0]), float(cells[1]), cells[2], int(cells[4]))
        assert shown == (iteration, float(f"{seconds:.6g}"), "-", number)  # six significant digits shown


_NEMO_STEP = re.compile(r"Training epoch (\d+), iteration (\d+)/\d+ \|.*global_step: (\d+) \|.*"
                        r"train_step_timing in s: (-?[\d.]+)")


def _nemo_steps(path: Path) -> list[tuple[int, int, int, float]]:
    """(line, iteration, global step, step time) of each step line of a NeMo log, from its text."""
    return [(number, int(m.group(2)), int(m.group(3)), float(m.group(4)))
            for number, line in enumerate(path.read_text().splitlines(), start=1)
            if (m := _NEMO_STEP.search(line))]


def test_nemo_logs_count_global_steps_and_show_a_restart_and_a_timer_glitch(real_samples: Path) -> None:
    logs = real_samples / "training-logs"
    # The tp2 run's last step starts epoch 1 (iteration 0/19, global_step 19): the counter is the global step
    tp2 = logs / "nemo2-nemorun-llama-54m-8gpu-tp2-20steps.log"
    found = _nemo_steps(tp2)
    assert [f[1] for f in found[-2:]] == [18, 0] and [f[2] for f in found] == list(range(20))
    text = _joined(_parse(tp2))
    assert f"global steps 0..19, lines {found[0][0]}-{found[-1][0]}" in text
    assert f"    19  {found[-1][3]:.6g}  -  11.03  {found[-1][0]}" in text.splitlines()
    # The restart: steps 0..15, then from the checkpoint at step 10 again to 19 (each stretch from the text)
    restart = logs / "nemo2-nemorun-llama-54m-8gpu-crash-and-in-job-restart.log"
    found = _nemo_steps(restart)
    back = next(i for i in range(1, len(found)) if found[i][2] <= found[i - 1][2])
    stretches = f"{found[0][2]}..{found[back - 1][2]}, {found[back][2]}..{found[-1][2]}"
    assert stretches == "0..15, 10..19"
    restart_text = _joined(_parse(restart))
    assert f"  {len(found)} steps read of" in restart_text and f"global steps {stretches}, lines" in restart_text
    # the checkpoint it loaded: line 758 "Restored all states from the checkpoint at .../...step=9..." (by hand)
    assert "  checkpoints loaded: step 9 at line 758" in restart_text.splitlines()
    # The toy log's timer prints a negative step time at one step (SOURCES.md): shown, with its line
    toy = logs / "nemo2-llama3-toy-1gpu-bf16-20steps.log"
    found = _nemo_steps(toy)
    glitches = [(number, seconds) for number, _, _, seconds in found if seconds <= 0]
    assert glitches == [(488, -12.71)]
    toy_text = _joined(_parse(toy)).splitlines()
    assert "  step time zero or negative: 1 step (-12.71 s at line 488)" in toy_text
    assert (f"  step time (s): median {statistics.median(f[3] for f in found):.6g} "
            f"(min {min(f[3] for f in found):.6g}, max {max(f[3] for f in found):.6g}) over 20 steps") in toy_text


def test_a_sacct_dump_its_jobs_states_and_times(real_samples: Path) -> None:
    path = real_samples / "slurm" / "sacct-multi-node.txt"
    lines = _parse(path, "--fields", ",".join(SACCT_FIELDS))
    # line 4: OUT_OF_MEMORY|845|...|Start 2022-07-05T16:17:52|Elapsed 00:05:01|...|End 2022-07-05T16:22:53;
    # line 5 its one step, 845.batch
    assert lines[1:] == [
        "  1 job (OUT_OF_MEMORY 1), 1 step; times in UTC; 25 fields",
        "  jobs (id, state, elapsed, start to end, steps, line):",
        "    845  OUT_OF_MEMORY  00:05:01  2022-07-05T16:17:52+00:00 to 16:22:53  1  4",
        "  (--json prints every value read)",
    ]


def test_an_mlperf_folder_its_runs_and_score(real_samples: Path) -> None:
    folder = real_samples / "mlperf-training" / "dell-xe9680-h100-llama2_70b_lora"
    text = _joined(_parse(folder))
    for result in sorted(folder.glob("result_*.txt")):
        marks = {}
        for line in result.read_text().splitlines():
            if ":::MLLOG" in line:
                event = json.loads(line.split(":::MLLOG", 1)[1])
                if event["key"] in ("run_start", "run_stop"):
                    marks[event["key"]] = event["time_ms"]
        minutes = (marks["run_stop"] - marks["run_start"]) / 60000
        assert f"    {result.name}: success, {minutes:.2f} min, seed " in text, (result.name, minutes)


def test_telemetry_events_and_rank_timings_of_the_sample(tmp_path: Path) -> None:
    prom = SAMPLE / "resilience" / "dcgm.prom"
    values: dict[str, list[float]] = {}
    series = set()
    for line in prom.read_text().splitlines():
        if line and not line.startswith("#"):
            head, value, _ = line.rsplit(" ", 2)
            values.setdefault(head.split("{")[0], []).append(float(value))
            series.add(head)
    lines = _parse(prom)
    assert lines[1] == f"  {sum(map(len, values.values())):,} samples (prometheus) in {len(series)} series: " \
        f"{len(series)} GPUs on 34 hosts"
    for metric, found in values.items():
        assert (f"    {metric}: {len(found):,}, {min(found):,.0f}, {statistics.fmean(found):.6g}, "
                f"{max(found):,.0f}") in lines
    events = SAMPLE / "resilience" / "events.jsonl"
    kinds = Counter(json.loads(line)["type"] for line in events.read_text().splitlines() if line.strip())
    text = _joined(_parse(events))
    assert f"  {sum(kinds.values())} events from 2026-11-02T09:00:00+00:00" in text
    assert "by type: " + ", ".join(f"{kind} {count}" for kind, count in kinds.items()) in text
    timings = SAMPLE / "resilience" / "rank-timings.parquet"
    import pyarrow.parquet as pq

    table = pq.read_table(timings).to_pydict()
    lines = _parse(timings)
    assert lines[1:3] == [
        f"  {len(table['rank']):,} rows: {len(set(table['rank']))} ranks on {len(set(table['node']))} nodes, steps "
        f"{min(table['step'])}..{max(table['step'])}",
        f"  columns: {', '.join(table)}",
    ]


def test_a_megatron_log_shows_the_checkpoint_it_loaded(real_samples: Path) -> None:
    # line 535 of the ms-swift log: "successfully loaded checkpoint from .../Qwen2-0.5B-hf-to-mcore-te-tp1-pp1-new
    # [ t 0, p 0 ] at iteration 0" (the fine-tuning's starting weights; read by hand)
    lines = _parse(real_samples / "training-logs" / "megatron-lm-via-ms-swift-qwen2-0.5b-2gpu-bf16-120iters.log")
    assert "  resilience events: 1 event (checkpoint_loaded 1)" in lines
    assert "  checkpoints loaded: iteration 0 at line 535" in lines
