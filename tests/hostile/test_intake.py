"""Hostile corpus, intake: file-type tricks, size and expansion bombs, superlinear regexes (issue 14 items 4, 8).

Each case, what it attacks and the expected outcome: tests/hostile/README.md.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from clustercert.catalog import load_catalog
from clustercert.errors import CatalogError, ClusterCertError, EvidenceError
from clustercert.evidence import guards
from clustercert.evidence.bundle import load_bundle, seal_bundle
from clustercert.evidence.hashing import sha256_file
from clustercert.parsers import FORMATS, RESILIENCE_FORMATS, detect_format
from clustercert.parsers.dcgm import parse_dcgm
from clustercert.parsers.nccl_tests import parse_nccl_tests
from clustercert.parsers.rank_timings import parse_rank_timings
from clustercert.settings import PROJECT_ROOT
from tests.hostile.helpers import write_bundle

Count = Callable[[int], None]


def test_fifo_listed_as_evidence_is_refused_at_load_without_blocking(tmp_path: Path, hostile: Count) -> None:
    root = tmp_path / "b"
    root.mkdir()
    os.mkfifo(root / "r1.log")
    hostile(1)
    with pytest.raises(EvidenceError, match=r"r1\.log': expected a regular file, got a named pipe \(FIFO\)"):
        load_bundle(write_bundle(root))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_parser_refuses_a_fifo_and_a_character_device(tmp_path: Path, fmt: str, hostile: Count) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path, kind in ((fifo, "a named pipe"), (Path("/dev/zero"), "a character device")):
        hostile(1)
        with pytest.raises(EvidenceError, match=f"expected a regular file, got {kind}"):
            FORMATS[fmt](path, str(path))
    with pytest.raises(EvidenceError, match="got a named pipe"):
        sha256_file(fifo)
    with pytest.raises(EvidenceError, match="got a named pipe"):
        detect_format(fifo)


def test_folder_in_place_of_a_file_is_located(tmp_path: Path, hostile: Count) -> None:
    root = tmp_path / "b"
    (root / "r1.log").mkdir(parents=True)
    hostile(1)
    with pytest.raises(EvidenceError, match=r"r1\.log': expected a regular file, got a folder"):
        load_bundle(write_bundle(root))


def test_sealing_a_bundle_whose_file_became_a_fifo_is_refused(tmp_path: Path, hostile: Count) -> None:
    bundle = load_bundle(write_bundle(tmp_path / "b"))
    (tmp_path / "b" / "r1.log").unlink()
    os.mkfifo(tmp_path / "b" / "r1.log")
    hostile(1)
    with pytest.raises(EvidenceError, match="named pipe"):
        seal_bundle(bundle)


def test_oversized_file_is_refused_before_it_is_read(tmp_path: Path, hostile: Count) -> None:
    path = tmp_path / "big.log"
    path.write_bytes(b"x" * 5000)
    for fmt in sorted(FORMATS):
        hostile(1)
        with pytest.raises(EvidenceError, match="expected at most 4096 bytes, got 5000"):
            FORMATS[fmt](path, str(path), limit=4096)


def _yaml_error(root: Path) -> str:
    with pytest.raises(EvidenceError) as info:
        load_bundle(root)
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    return message


def test_billion_laughs_bundle_yaml(tmp_path: Path, hostile: Count) -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 12)]
    root = write_bundle(tmp_path / "b", text="\n".join(lines) + "\n")
    hostile(1)
    assert "expected at most 2000000 values once aliases are expanded, got more" in _yaml_error(root)
    many = write_bundle(tmp_path / "m", text="a: &a 1\nb: [" + ", ".join(["*a"] * 1001) + "]\n")
    hostile(1)
    assert "expected at most 1000 YAML aliases (*name), got more" in _yaml_error(many)
    # A few aliases are legal YAML: they are built, and the schema's error names the field in a short line.
    small = write_bundle(tmp_path / "c", text='x: &x ["' + "y" * 10_000 + '"]\nschema_version: *x\n')
    hostile(1)
    assert "field 'schema_version'" in _yaml_error(small)


def test_deep_nesting_in_bundle_yaml_and_catalogs(tmp_path: Path, hostile: Count) -> None:
    for name, text in (("flow", "x: " + "[" * 50_000 + "]" * 50_000 + "\n"),
                       ("block", "".join("  " * i + "k:\n" for i in range(500)))):
        hostile(1)
        message = _yaml_error(write_bundle(tmp_path / name, text=text))
        # libyaml itself stops at 1,000 levels; below that clustercert's own bound says it
        assert "nested at most 100 deep, got deeper" in message or "exceeded maximum nesting depth" in message
    catalog = tmp_path / "deep.yaml"
    catalog.write_text("id: " + "{a: " * 50_000 + "1" + "}" * 50_000 + "\n")
    hostile(1)
    with pytest.raises(CatalogError, match=r"nested at most 100 deep|exceeded maximum nesting depth"):
        load_catalog(str(catalog), PROJECT_ROOT / "references")
    catalog.write_text("id: " + "{a: " * 500 + "1" + "}" * 500 + "\n")  # below libyaml's own bound
    with pytest.raises(CatalogError, match="nested at most 100 deep"):
        load_catalog(str(catalog), PROJECT_ROOT / "references")


def test_bundle_yaml_over_the_size_bound_is_refused_unread(tmp_path: Path, hostile: Count) -> None:
    root = write_bundle(tmp_path / "b")
    with (root / "bundle.yaml").open("a") as handle:
        handle.write("# " + "x" * (40 * 1024**2) + "\n")
    hostile(1)
    assert f"expected at most {guards.MAX_YAML_BYTES} bytes" in _yaml_error(root)


@pytest.mark.parametrize("fmt,prefix", [("dllogger", "DLLL "), ("events", ""), ("mlperf", ":::MLLOG "),
                                        ("nccl-tests", "")])
def test_deeply_nested_json_evidence(tmp_path: Path, fmt: str, prefix: str, hostile: Count) -> None:
    path = tmp_path / "deep"
    path.write_text(prefix + "[" * 50_000 + "]" * 50_000 + "\n")
    hostile(1)
    try:
        FORMATS[fmt](path, str(path), **({"ruleset": "4.0.0"} if fmt == "mlperf" else {}))
    except EvidenceError as exc:
        assert "\n" not in str(exc)


LONG = 1024**2


@pytest.mark.parametrize("line", [
    "0:" * (LONG // 2),                                   # the NCCL debug-print pattern restarted at each offset
    "x" * LONG,
    "  1024 " + "x:1:2 " * (LONG // 6),
    "#" + " " * LONG,
])
def test_nccl_tests_long_lines_are_linear(tmp_path: Path, line: str, hostile: Count) -> None:
    path = tmp_path / "all_reduce.log"
    path.write_text("# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20\n"
                    + line + "\n")
    hostile(1)
    try:
        parse_nccl_tests(path, str(path))
    except EvidenceError:
        pass


@pytest.mark.parametrize(("line", "events"), [
    ("successfully loaded checkpoint from " * 30_000, 0),   # a folder never ended by " at iteration N"
    ("successfully loaded checkpoint from x at iteration 7 " * 20_000, 1),  # a line is read once
    ("successfully saved checkpoint from iteration " * 25_000, 0),
    ("  successfully saved checkpoint at iteration " + " " * LONG + "5 to /c", 1),
])
def test_megatron_checkpoint_lines_are_linear(tmp_path: Path, line: str, events: int, hostile: Count) -> None:
    path = tmp_path / "megatron.log"
    path.write_text(line + "\n")
    hostile(1)
    assert len(RESILIENCE_FORMATS["megatron"](path, str(path)).events) == events


@pytest.mark.parametrize("labels", ["a" * 65536, 'a="' * 20_000, '} ' * 30_000, 'a="b",' * 10_000 + "x"])
def test_dcgm_long_label_lines_are_linear(tmp_path: Path, labels: str, hostile: Count) -> None:
    path = tmp_path / "dcgm.prom"
    path.write_text("DCGM_FI_DEV_GPU_UTIL{" + labels + "} 97 1700000000000\n")
    hostile(1)
    with pytest.raises(EvidenceError, match="line 1"):
        parse_dcgm(path, str(path))


def test_dcgm_labels_still_parse(tmp_path: Path) -> None:
    path = tmp_path / "dcgm.prom"
    path.write_text('DCGM_FI_DEV_GPU_UTIL{gpu="0", UUID="GPU-1",Hostname="n\\"1}",} 97 1700000000000\n')
    sample = parse_dcgm(path, str(path)).sample(0)
    assert (sample.gpu, sample.host, sample.value, sample.time_ms) == ("0", 'n\\"1}', 97.0, 1700000000000)


@pytest.mark.parametrize("text", [
    "rank " * 200_000 + "compute_s",                      # rank-timings header: three nested scans
    '{"ts":' * 150_000,                                   # events detector
    "iteration 1/1 |" * 60_000,                           # megatron detector
    "\n" * LONG,
    " " * LONG + "{",
])
def test_format_detection_is_linear(tmp_path: Path, text: str, hostile: Count) -> None:
    path = tmp_path / "unknown.log"
    path.write_text(text)
    hostile(1)
    try:
        detect_format(path)
    except EvidenceError as exc:
        assert "could not detect" in str(exc)


def test_parquet_declaring_too_many_rows_is_refused_before_reading(tmp_path: Path, hostile: Count,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # The bound is lowered so the case stays small; the file's footer is what is checked, never its rows.
    monkeypatch.setattr(guards, "MAX_TABLE_ROWS", 1000)
    path = tmp_path / "timings.parquet"
    table = pa.table({"rank": pa.array([0] * 600, pa.int64()), "compute_s": pa.array([0.5] * 600)})
    with pq.ParquetWriter(path, table.schema) as writer:
        writer.write_table(table)
        writer.write_table(table)
    hostile(1)
    with pytest.raises(EvidenceError, match="expected at most 1000 rows, got a Parquet file that declares 1200"):
        parse_rank_timings(path, str(path))


def test_guards_name_every_kind_of_file() -> None:
    assert guards.file_kind(stat.S_IFREG) == "a regular file"
    assert guards.file_kind(stat.S_IFBLK) == "a block device"
    assert guards.file_kind(stat.S_IFSOCK) == "a socket"
    with pytest.raises(ClusterCertError, match="got nothing at this path"):
        guards.check_regular(Path("/nonexistent/x"))


def test_numbers_of_thousands_of_digits_in_every_format(tmp_path: Path, hostile: Count) -> None:
    """Every run of digits of every seed line stretched to 5,000 digits: int() and json refuse past 4,300 digits
    with ValueError (exit 4 before); now a located EvidenceError, or the line is read."""
    from tests.mangle import OPTIONS
    from tests.unit.parsers.test_properties import SEEDS

    path = tmp_path / "f"
    for fmt, lines in SEEDS.items():
        name = fmt.strip()
        for i, line in enumerate(lines):
            for match in re.finditer(r"\d+", line):
                stretched = line[:match.start()] + "7" * 5000 + line[match.end():]
                path.write_text("\n".join([*lines[:i], stretched, *lines[i + 1:]]) + "\n")
                hostile(1)
                try:
                    FORMATS[name](path, "f", **OPTIONS.get(name, {})).to_json()
                except EvidenceError as exc:
                    assert "\n" not in str(exc) and len(str(exc)) <= 800


def test_yaml_object_tags_are_never_constructed(tmp_path: Path, hostile: Count) -> None:
    marker = tmp_path / "ran"
    text = f'schema_version: !!python/object/apply:os.system ["touch {marker}"]\n'
    hostile(1)
    assert "expected valid YAML" in _yaml_error(write_bundle(tmp_path / "b", text=text))
    assert not marker.exists()


def test_a_step_time_of_1e308_prints_no_numpy_warning(hostile: Count) -> None:
    """The repeat is refused by window_step_time_plausible (tests/unit/test_validation.py); the statistics of
    it must not print overflow warnings on the terminal (warnings are errors in this suite)."""
    from clustercert.metrics.stats import bootstrap_mean_interval, mean_stats

    values = [7.5] * 30 + [1e308] + [7.5] * 19
    hostile(1)
    stats = mean_stats(values)
    assert stats.n == 50 and stats.mean == pytest.approx(1e308 / 50) and stats.std == float("inf")
    low, high = bootstrap_mean_interval(values, resamples=200, seed=1)
    assert low == 7.5 and not high < 1e306  # meaningless (inf or nan) but silent: the run is refused anyway


def _megatron_log(path: Path, printed_ms: float, clock_s: int = 2, *, checkpoint_ms: float | None = None) -> Path:
    """Ten Megatron records whose stamps advance `clock_s` per step, printing `printed_ms` per step; a
    save-checkpoint timer block of `checkpoint_ms` between iterations 5 and 6 (the clock then jumps by it too)."""
    lines, clock = [], 0.0
    for i in range(1, 11):
        if i == 6 and checkpoint_ms is not None:
            lines += ["(min, max) time across ranks (ms):", f"    save-checkpoint ......: ({checkpoint_ms - 1}, "
                      f"{checkpoint_ms})"]
            clock += checkpoint_ms / 1000
        clock += clock_s
        stamp = f"2025-08-29 17:{int(clock) // 60:02d}:{int(clock) % 60:02d}"
        lines.append(f" [{stamp}] iteration {i:8d}/      10 | consumed samples: {8 * i} | elapsed time per "
                     f"iteration (ms): {printed_ms} | global batch size: 8 | lm loss: 8.0E+00 | grad norm: 1.0 |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_megatron_step_times_faster_than_the_log_clock_make_the_run_incomplete(tmp_path: Path, hostile: Count) -> None:
    """A Megatron log whose `elapsed time per iteration` was halved (1000 ms printed, its own stamps 2 s apart):
    the required `step_times_match_clock` expectation fails at the first step the clock contradicts, checks
    on the file become ERROR and the outcome INCOMPLETE, naming file and line. The honest log, and one with a
    checkpoint save the log times, pass."""
    from clustercert.evidence.bundle import RunKind
    from clustercert.evidence.parse import ParsedFile
    from clustercert.evidence.provenance import Span
    from clustercert.parsers.megatron import parse_megatron
    from clustercert.validation.suites import apply_gating, load_suites, run_tables
    from clustercert.validation.tables import training_table
    from clustercert.verdicts import Check, Outcome, Severity, Status, decide_outcome

    suites = load_suites(PROJECT_ROOT / "checks")

    def validate(path: Path) -> tuple[list[Check], list[str]]:
        log = parse_megatron(path, path.name)
        report = run_tables([training_table(ParsedFile("m", RunKind.TRAINING, path.name, path.name, log))], suites)
        check = Check(id="efficiency.m_meets_baseline", title="t", phase="efficiency", severity=Severity.REQUIRED,
                      status=Status.PASS, measured=1.0, target=1.0, unit="s", message="ok",
                      evidence=(Span(path.name, 1, 10, 10),))
        return apply_gating([check], report), [r.expectation for r in report.blocking]

    hostile(1)
    for honest in (_megatron_log(tmp_path / "honest.log", 2000.0),
                   _megatron_log(tmp_path / "saved.log", 2000.0, checkpoint_ms=30000.0)):
        gated, blocking = validate(honest)
        assert blocking == [] and decide_outcome(gated) is Outcome.CERTIFIED, honest.name
    gated, blocking = validate(_megatron_log(tmp_path / "halved.log", 1000.0))
    assert blocking == ["step_times_match_clock"]
    assert gated[0].status is Status.ERROR and decide_outcome(gated) is Outcome.INCOMPLETE
    # iteration 2 (line 2) printed 1 s, its stamp 2 s after iteration 1: (2 - 1 s resolution) / 1 = 1.0, within
    # 10 %; iteration 3 (line 3): (4 - 1) / 2 = 1.5
    assert gated[1].message.startswith("halved.log line 3: required expectation 'step_times_match_clock' failed")
