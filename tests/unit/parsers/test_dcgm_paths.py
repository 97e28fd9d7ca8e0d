"""DCGM telemetry: the columnar reader (bulk lines, chunks) and the per-line reader (CLUSTERCERT_TABLE_PATH=rows)
give the same Telemetry, column for column, and the same first error, on the shipped samples and on every odd
shape of line; to_json is the per-sample summary it always was; the chunked read is recorded whole."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import clustercert.parsers.dcgm as dcgm
from clustercert.errors import EvidenceError, UsageError
from clustercert.evidence.guards import digests_read, parts_read, read_chunks, read_mark
from clustercert.parsers.dcgm import DcgmSample, Telemetry, parse_dcgm
from tests.conftest import ROOT, run_cli

SHIPPED = sorted(ROOT.glob("evidence/*/resilience/dcgm.prom"))
CHUNKS = (1, 7, 64, 4096, dcgm.CHUNK_BYTES)

BASE = (
    "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
    "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1"} 97 1700000000000\n'
    'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",Hostname="n1"} 95 1700000000000\n'
    'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",Hostname="n1"} 612.25 1700000000000\n'
    'DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b",Hostname="n1"} -0.5 1700000000000\n'
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n 2"} 96 1700000001000\n'
    'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",Hostname="n1"} 94 1700000001000\n'
    'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",Hostname="n1"} 0613.50 1700000001000\n'
    'DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b"} 611.0 01700000001000\n'
)
LINES = BASE.splitlines(keepends=True)
MIDDLE = 5


def _with(index: int, line: str) -> str:
    lines = list(LINES)
    lines[index] = line
    return "".join(lines)


def _mangled(index: int, how: str) -> str:
    line = LINES[index].rstrip("\n")
    head, value, stamp = line.rsplit(" ", 2)
    new = {
        "value": f"{head} ninety {stamp}",
        "stamp": f"{head} {value} 1700000000000.5",
        "label": head.replace('gpu="', 'gpu=') + f" {value} {stamp}",
        "no-gpu": head.replace('gpu="0",', "").replace('gpu="1",', "") + f" {value} {stamp}",
        "no-stamp": f"{head} {value}",
        "negative-stamp": f"{head} {value} -1700000000000",
    }[how]
    return _with(index, new + "\n")


def _promtool(text: str) -> str:
    """`text` as `promtool tsdb dump` prints series (`fmt.Printf("%s %g %d\\n", lbs, val, ts)`, the labels'
    String()): the metric as the `__name__` label, the labels sorted by name (`__name__` after upper-case names),
    joined by ', '."""
    import re

    def named(match: re.Match[str]) -> str:
        labels = [*re.findall(r'(\w+)="([^"]*)"', match.group(2)), ("__name__", match.group(1))]
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels)) + "} "

    return re.sub(r"(?m)^(DCGM_FI_\w+)\{(.*)\} ", named, text)


VARIANTS: dict[str, str | bytes] = {
    "base": BASE,
    "promtool tsdb dump": _promtool(BASE),
    "promtool, bad label middle": _promtool(_mangled(MIDDLE, "label")),
    "__name__ label after others": BASE + '{gpu="0",__name__="DCGM_FI_DEV_GPU_UTIL"} 9 1700000002000\n',
    "__name__ not a metric name": BASE + '{__name__="9 lives",gpu="0"} 9 1700000002000\n',
    "no name and no __name__": BASE + '{gpu="0",Hostname="n1"} 9 1700000002000\n',
    "crlf": BASE.replace("\n", "\r\n"),
    "no final newline": BASE.rstrip("\n"),
    "lone cr": BASE.replace("\n", "\r", 3),
    "cr inside a line": _with(3, LINES[3].replace(" 95 ", " 95\r")),
    "tabs": BASE.replace("} 9", "}\t9"),
    "tab before the stamp": _with(4, LINES[4].replace(" 1700", "\t1700")),
    "doubled spaces": BASE.replace(" 17000", "  17000"),
    "doubled space before the value": _with(2, LINES[2].replace("} 97", "}  97")),
    "trailing spaces": BASE.replace("\n", "  \n"),
    "leading spaces": BASE.replace("\nDCGM", "\n   DCGM"),
    "blank lines": BASE.replace("\n", "\n\n\n", 4),
    "whitespace lines": BASE.replace("\n", "\n \t \n", 3),
    "form feed and other breaks": _with(4, LINES[4].rstrip("\n") + "\x0c\x1c\x1d\x1e\n"),
    "unicode line separator": _with(3, LINES[3].replace("n1", "n\u20281")),
    "comments between": BASE.replace("\nDCGM_FI_DEV_POWER", "\n# a comment\n#\n   # indented\nDCGM_FI_DEV_POWER"),
    "comments only": "# HELP x\n# TYPE x gauge\n",
    "nan and inf values": BASE.replace(" 97 ", " NaN ").replace(" 95 ", " +Inf ").replace(" 96 ", " -Inf ")
    .replace(" 94 ", " nan "),
    "exponent values": BASE.replace(" 97 ", " 9.7e1 ").replace(" 95 ", " 95E0 ").replace(" 612.25 ", " 6.1225e+2 "),
    "numbers float() takes": BASE.replace(" 97 ", " 9_7 ").replace(" 95 ", " .5 ").replace(" 96 ", " 96. ")
    .replace(" 94 ", " +94 "),
    "long decimals": BASE.replace(" 97 ", " 0.1000000000000000055511151231257827021181583404541015625 ")
    .replace(" 95 ", " 123456789012345678901234567890 "),
    "values of 40 and 41 digits": BASE.replace(" 97 ", " " + "9" * 40 + " ").replace(" 95 ", " " + "9" * 41 + " "),
    "stamps of 15 digits": BASE.replace(" 1700000001000\n", " 001700000001001\n"),
    "exponent stamps": BASE.replace(" 1700000000000\n", " 1.7e12\n"),
    "long stamps": BASE.replace(" 1700000001000\n", " 000001700000001001\n"),  # > 15 digits: read per line
    "stamps past the year 9999": BASE.replace(" 1700000001000\n", " 12345678901234567\n"),
    "huge stamps": BASE.replace(" 1700000001000\n", " 99999999999999999999999999\n"),
    "negative values": BASE.replace(" 9", " -9"),
    "bad value first": _mangled(2, "value"),
    "bad value middle": _mangled(MIDDLE, "value"),
    "bad value last": _mangled(len(LINES) - 1, "value"),
    "bad stamp first": _mangled(2, "stamp"),
    "bad stamp middle": _mangled(MIDDLE, "stamp"),
    "bad stamp last": _mangled(len(LINES) - 1, "stamp"),
    "bad label first": _mangled(2, "label"),
    "bad label middle": _mangled(MIDDLE, "label"),
    "bad label last": _mangled(len(LINES) - 1, "label"),
    "missing gpu first": _mangled(2, "no-gpu"),
    "missing gpu middle": _mangled(MIDDLE, "no-gpu"),
    "missing gpu last": _mangled(len(LINES) - 1, "no-gpu"),
    "missing stamp": _mangled(MIDDLE, "no-stamp"),
    # chunks are read two at a time: the earlier chunk's error is the one named, whichever is read first
    "a bad value and a later bad stamp": "".join(
        [*LINES[:3], _mangled(3, "value").splitlines(keepends=True)[3], *LINES[4:6],
         _mangled(6, "stamp").splitlines(keepends=True)[6], *LINES[7:]]),
    "negative stamp": _mangled(MIDDLE, "negative-stamp"),
    # a head without a gpu label is refused at its first line, wherever later lines repeat it
    "missing gpu repeated": BASE + 'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-a"} 9 1700000002000\n' * 3,
    "non-ascii label": BASE.replace('Hostname="n1"', 'Hostname="nœud-1"'),
    "delete byte in a label": BASE.replace('Hostname="n1"', 'Hostname="n\x7f1"', 1),
    "escape byte in a label": BASE.replace('Hostname="n1"', 'Hostname="n\x1b1"', 1),
    "non-ascii value": _with(MIDDLE, LINES[MIDDLE].replace(" 96 ", " ٩٦ ")),
    "invalid utf-8": BASE.encode().replace(b'"n1"', b'"n\xff1"', 1),
    "byte order mark": "\ufeff" + BASE,
    "no labels": BASE + "DCGM_FI_DEV_GPU_UTIL 5 1700000002000\n",
    "label with spaces and escapes": BASE + 'M{gpu="0",Hostname="a \\" b} c"} 1 1700000002000\n',
    "long line": BASE + 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="' + "h" * 65536 + '"} 1 1700000002000\n',
    "long bad line": BASE + "DCGM_FI_DEV_GPU_UTIL{" + "a" * 65536 + "} 97 1700000000000\n",
    "empty file": "",
    "whitespace only": " \n\t\n\r\n",
    "one line": LINES[2],
    "nul bytes": "\x00" + BASE,
    "a line of one token": BASE + "DCGM_FI_DEV_GPU_UTIL\n",
    "four tokens": BASE + 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 1 2 3\n',
}

Outcome = tuple[str, object]


def _parse(path: Path, table_path: str, chunk: int, monkeypatch: pytest.MonkeyPatch, *, spill: bool = False
           ) -> Outcome:
    """Parsed through one path; with `spill`, the columns kept in scratch files and read back 3 rows at a time."""
    monkeypatch.setenv("CLUSTERCERT_TABLE_PATH", table_path)
    monkeypatch.setenv("CLUSTERCERT_TELEMETRY_MEMORY_MIB", "0" if spill else "1024")
    try:
        with monkeypatch.context() as small:
            if spill:
                small.setattr(dcgm, "_BLOCK_ROWS", 3)
                small.setattr(dcgm, "_HOST_SCAN_ROWS", 2)
            telemetry = parse_dcgm(path, "t.prom", chunk_bytes=chunk)
            if spill:
                assert telemetry.spilled
                return "telemetry", _Summary(telemetry)
    except EvidenceError as exc:
        return "error", (str(exc), exc.line, exc.field)
    assert not telemetry.spilled
    return "telemetry", telemetry


def _bits(column: np.ndarray) -> list[int]:  # type: ignore[type-arg]
    """A column's values, floats by their bits (so -0.0 and NaN compare exactly)."""
    return (column.view(np.int64) if column.dtype == np.float64 else column).tolist()  # type: ignore[no-any-return]


class _Summary:
    """What a spilled Telemetry gives, computed while its blocks are 3 rows (attributes as Telemetry's)."""

    def __init__(self, t: Telemetry) -> None:
        self.file, self.source, self.metrics, self.gpus, self.hosts = t.file, t.source, t.metrics, t.gpus, t.hosts
        self.metric, self.gpu, self.host, self.value, self.time_ms, self.line = (
            t.metric, t.gpu, t.host, t.value, t.time_ms, t.line)
        self.json = t.to_json()
        self.blocks = [[_bits(column) for column in columns] for _, columns in t.blocks(*dcgm._COLUMNS)]
        self.summaries = (t.metric_names(), t.gpu_count(), t.host_first_lines())
        self.pickled = __import__("pickle").loads(__import__("pickle").dumps(t))

    def to_json(self) -> dict[str, object]:
        return self.json


def _columns(t: Telemetry) -> dict[str, object]:
    """Every column as plain values (floats by their bits, so -0.0 and NaN compare exactly)."""
    assert {t.metric.dtype, t.gpu.dtype, t.host.dtype} == {np.dtype(np.int32)}
    assert {t.value.dtype, t.time_ms.dtype, t.line.dtype} == {np.dtype(np.float64), np.dtype(np.int64)}
    if isinstance(t, Telemetry):  # the series met while reading, against the columns' own
        assert t.series_codes is not None
        assert t.metric_names() == sorted({t.metrics[m] for m in t.metric.tolist()})
        assert t.gpu_count() == len(set(zip(t.host.tolist(), t.gpu.tolist(), strict=True)))
    return {"file": t.file, "source": t.source, "metrics": t.metrics, "gpus": t.gpus, "hosts": t.hosts,
            "metric": t.metric.tolist(), "gpu": t.gpu.tolist(), "host": t.host.tolist(),
            "value": t.value.view(np.int64).tolist(), "time_ms": t.time_ms.tolist(), "line": t.line.tolist()}


def _same(rows: Outcome, columnar: Outcome) -> None:
    assert rows[0] == columnar[0], (rows, columnar)
    if rows[0] == "error":
        assert rows[1] == columnar[1]
    else:
        assert isinstance(rows[1], Telemetry) and isinstance(columnar[1], (Telemetry, _Summary))
        assert _columns(rows[1]) == _columns(columnar[1])  # type: ignore[arg-type]
        assert json.dumps(rows[1].to_json()) == json.dumps(columnar[1].to_json()) == json.dumps(
            _old_to_json(rows[1]))
        if isinstance(columnar[1], _Summary):  # spilled: blocks, summaries and a pickled copy as held in memory
            spilled, t = columnar[1], rows[1]
            whole = (t.metric, t.gpu, t.host, t.value, t.time_ms, t.line)
            assert spilled.blocks == [[_bits(column[at:at + 3]) for column in whole] for at in range(0, len(t), 3)]
            assert spilled.summaries == (t.metric_names(), t.gpu_count(), t.host_first_lines())
            assert not spilled.pickled.spilled and _columns(spilled.pickled) == _columns(t)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_both_paths_agree_on_every_variant(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.prom"
    content = VARIANTS[name]
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    rows = _parse(path, "rows", dcgm.CHUNK_BYTES, monkeypatch)
    for chunk in CHUNKS:
        _same(rows, _parse(path, "columnar", chunk, monkeypatch))
        _same(rows, _parse(path, "rows", chunk, monkeypatch))  # the per-line path over chunks too
    _same(rows, _parse(path, "columnar", 64, monkeypatch, spill=True))


def test_the_variants_reach_what_they_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-line results the variants are compared on are the ones the format says (an oracle by hand)."""
    path = tmp_path / "t.prom"
    outcomes = {}
    for name in ("base", "bad value middle", "missing gpu repeated", "lone cr", "empty file", "nul bytes",
                 "comments only", "nan and inf values", "long stamps", "stamps past the year 9999", "missing stamp"):
        content = VARIANTS[name]
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        outcomes[name] = _parse(path, "columnar", 7, monkeypatch)[1]
    base = outcomes["base"]
    assert isinstance(base, Telemetry)
    assert [(s.metric[12:], s.gpu, s.host, s.value, s.time_ms, s.line) for s in base.head()] == [
        ("GPU_UTIL", "0", "n1", 97.0, 1700000000000, 3), ("GPU_UTIL", "1", "n1", 95.0, 1700000000000, 4),
        ("POWER_USAGE", "0", "n1", 612.25, 1700000000000, 5), ("POWER_USAGE", "1", "n1", -0.5, 1700000000000, 6),
        ("GPU_UTIL", "0", "n 2", 96.0, 1700000001000, 7), ("GPU_UTIL", "1", "n1", 94.0, 1700000001000, 8),
        ("POWER_USAGE", "0", "n1", 613.5, 1700000001000, 9), ("POWER_USAGE", "1", None, 611.0, 1700000001000, 10),
    ]
    assert outcomes["bad value middle"] == ("t.prom line 6 field 'DCGM_FI_DEV_POWER_USAGE': expected a number, "
                                            f"got 'ninety'. {dcgm._HINT}", 6, "DCGM_FI_DEV_POWER_USAGE")
    assert outcomes["missing gpu repeated"][1:] == (11, "gpu")  # type: ignore[index]
    lone = outcomes["lone cr"]
    assert isinstance(lone, Telemetry) and lone.line.tolist() == [3, 4, 5, 6, 7, 8, 9, 10]
    assert outcomes["empty file"][0] == "t.prom: expected log text, got an empty file"  # type: ignore[index]
    assert outcomes["nul bytes"][0] == "t.prom: expected text, got binary data (NUL bytes)"  # type: ignore[index]
    assert "found none" in outcomes["comments only"][0]  # type: ignore[index]
    assert outcomes["stamps past the year 9999"][1:] == (7, "timestamp")  # type: ignore[index]
    # a scrape of the exporter's page (no time on its lines): said, with where timed samples come from
    assert outcomes["missing stamp"] == (
        "t.prom line 6 field 'timestamp': expected a timestamp in milliseconds after the value, got none (the "
        "exporter's live page prints none): take the samples with their times from Prometheus (`promtool tsdb "
        "dump`)", 6, "timestamp")
    nan = outcomes["nan and inf values"]
    assert isinstance(nan, Telemetry) and [s.value for s in nan.head()][:6] == [None, None, 612.25, -0.5, None, None]
    long = outcomes["long stamps"]
    assert isinstance(long, Telemetry) and long.time_ms.tolist()[4:] == [1700000001001] * 3 + [1700000001000]


def test_a_promtool_dump_reads_as_the_exposition_it_was_stored_from(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`promtool tsdb dump` (how a Prometheus server's stored DCGM samples come out, with their timestamps) names the
    metric in the `__name__` label: the same samples as the exporter's exposition, line for line, and detected."""
    text = _promtool(BASE)
    assert text.splitlines()[2] == ('{Hostname="n1", UUID="GPU-a", __name__="DCGM_FI_DEV_GPU_UTIL", gpu="0"} 97 '
                                    "1700000000000")
    exposition, dump = tmp_path / "exposition.prom", tmp_path / "dump.txt"
    exposition.write_text(BASE)
    dump.write_text(text)
    for table_path in ("columnar", "rows"):
        (_, base), (_, dumped) = (_parse(p, table_path, 64, monkeypatch) for p in (exposition, dump))
        assert isinstance(base, Telemetry) and isinstance(dumped, Telemetry)
        assert _columns(dumped) == _columns(base)
    proc = run_cli("evidence", "parse", str(dump))
    assert proc.returncode == 0, proc.stderr
    # BASE by hand: 8 samples of 6 series (metric, gpu, host); GPUs n1/0, n1/1, "n 2"/0 and one without a host;
    # utilization 97, 95, 96, 94; power 612.25, -0.5, 613.5, 611.0; at 1,700,000,000 and 1,700,000,001 s
    assert proc.stdout.splitlines() == [
        f"{dump}: format dcgm (detected)",
        "  8 samples (prometheus) in 6 series: 4 GPUs on 2 hosts",
        "  from 2023-11-14T22:13:20Z to 2023-11-14T22:13:21Z (1 s)",
        "  per metric: samples, min, mean, max (values that are not numbers left out):",
        "    DCGM_FI_DEV_GPU_UTIL: 4, 94, 95.5, 97",
        "    DCGM_FI_DEV_POWER_USAGE: 4, -0.5, 459.062, 613.5",
        "  (--json prints every value read)",
    ]
    for name, line in (("__name__ not a metric name", 11), ("no name and no __name__", 11)):
        path = tmp_path / "odd.prom"
        path.write_text(str(VARIANTS[name]))
        outcome = _parse(path, "columnar", 64, monkeypatch)
        assert outcome[0] == "error" and outcome[1][1] == line, outcome  # type: ignore[index]
    path.write_text(str(VARIANTS["__name__ label after others"]))
    after = _parse(path, "columnar", 64, monkeypatch)[1]
    assert isinstance(after, Telemetry) and after.sample(8).metric == "DCGM_FI_DEV_GPU_UTIL"


@pytest.mark.parametrize("sample", SHIPPED, ids=[p.parent.parent.name for p in SHIPPED])
def test_both_paths_agree_on_the_shipped_samples(sample: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _parse(sample, "rows", dcgm.CHUNK_BYTES, monkeypatch)
    assert rows[0] == "telemetry"
    for chunk in (100_003, dcgm.CHUNK_BYTES):
        _same(rows, _parse(sample, "columnar", chunk, monkeypatch))
    _same(rows, _parse(sample, "columnar", 100_003, monkeypatch, spill=True))


def test_real_samples_hold_no_telemetry() -> None:
    """The real third-party samples carry no DCGM telemetry (SOURCES.md); were one added, it is compared here."""
    root = Path(__import__("os").environ.get("CLUSTERCERT_REAL_SAMPLES", ROOT.parent / "shared" / "samples" / "real"))
    if not root.is_dir():
        pytest.skip(f"real samples not found at {root}")
    found = [p for p in root.rglob("*") if p.is_file() and (p.suffix == ".prom" or "dcgm" in p.name.lower())]
    assert found == [], "compare these through both paths in test_both_paths_agree_on_the_shipped_samples"


def _random_file(rng: random.Random) -> str:
    """Lines mostly regular, some odd, a few bad: random, seeded, so each case is the same on every run."""
    odd = [
        lambda h, v, t: f"{h}\t{v} {t}", lambda h, v, t: f"{h}  {v} {t}", lambda h, v, t: f" {h} {v} {t} ",
        lambda h, v, t: f"{h} {v} {t}\r", lambda h, v, t: f"{h} NaN {t}", lambda h, v, t: f"{h} 1e3 {t}",
        lambda h, v, t: f"{h} {v} {t}.0", lambda h, v, t: "# comment", lambda h, v, t: "",
        lambda h, v, t: f"{h} {v} {t}\x0b{h} {v} {t}", lambda h, v, t: f"{h.replace('n', 'ñ')} {v} {t}",
        lambda h, v, t: f"{h} -{v} {t}", lambda h, v, t: f"{h} 00{v} 0{t}",
    ]
    bad = [lambda h, v, t: f"{h} x{v} {t}", lambda h, v, t: f"{h} {v} {t}x", lambda h, v, t: f"{h} {v}",
           lambda h, v, t: h.replace("gpu=", "gpu") + f" {v} {t}", lambda h, v, t: f"{h} {v} -{t}"]
    heads = [f'DCGM_FI_DEV_{m}{{gpu="{g}",Hostname="n{n}"}}' for m in ("A", "B") for g in range(3) for n in range(2)]
    heads.append('DCGM_FI_DEV_A{Hostname="n0"}')  # no gpu label: refused wherever it comes
    lines = []
    for i in range(rng.randint(1, 60)):
        h = rng.choice(heads[:-1]) if rng.random() > 0.01 else heads[-1]
        v = rng.choice(["1", "0", "97.5", "612.125", "3.14159265358979", "-0", "12345678901234"])
        t = str(1700000000000 + 1000 * i)
        r = rng.random()
        lines.append(rng.choice(bad)(h, v, t) if r < 0.03 else rng.choice(odd)(h, v, t) if r < 0.25
                     else f"{h} {v} {t}")
    return "\n".join(lines) + rng.choice(["\n", "", "\r\n", "\n\n"])


@pytest.mark.parametrize("seed", range(40))
def test_both_paths_agree_on_random_files(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    path = tmp_path / "t.prom"
    path.write_text(_random_file(rng))
    rows = _parse(path, "rows", dcgm.CHUNK_BYTES, monkeypatch)
    for chunk in (1, rng.randint(2, 300), dcgm.CHUNK_BYTES):
        _same(rows, _parse(path, "columnar", chunk, monkeypatch))
    _same(rows, _parse(path, "columnar", rng.randint(2, 300), monkeypatch, spill=True))


def _per_line_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The numbers of the lines the per-line code reads from now on, in order."""
    calls: list[int] = []
    real = dcgm._line_row

    def counted(raw: str, number: int, display: str, heads: dcgm.Heads) -> dcgm.Row | None:
        calls.append(number)
        return real(raw, number, display, heads)

    monkeypatch.setattr(dcgm, "_line_row", counted)
    return calls


def test_regular_lines_are_read_in_bulk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The columnar path reads no regular line by the per-line code; the rows path reads every line by it."""
    calls = _per_line_calls(monkeypatch)
    path = tmp_path / "t.prom"
    path.write_text(VARIANTS["doubled space before the value"])  # type: ignore[arg-type]
    _parse(path, "columnar", 64, monkeypatch)
    assert calls == [3]
    calls.clear()
    _parse(path, "rows", 64, monkeypatch)
    assert calls == list(range(1, len(LINES) + 1))


def test_digits_alone_are_read_in_bulk_up_to_their_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A value of 40 digits and a timestamp of 15 are read in bulk (told by Arrow's character classes), one digit
    more is read by the per-line code; signed and decimal values are still read in bulk (told by the pattern)."""
    calls = _per_line_calls(monkeypatch)
    head = 'DCGM_FI_DEV_POWER_USAGE{gpu="0",Hostname="n1"} '
    path = tmp_path / "t.prom"
    path.write_text(f"{head}{'9' * 40} 1700000000000\n{head}{'9' * 41} 1700000000000\n"
                    f"{head}-12.5 170000000000001\n{head}7 0001700000000000\n{head}+7 1700000000000\n")
    telemetry = _parse(path, "columnar", dcgm.CHUNK_BYTES, monkeypatch)[1]
    assert calls == [2, 4, 5]
    assert isinstance(telemetry, Telemetry)
    assert telemetry.value.tolist() == [float("9" * 40), float("9" * 41), -12.5, 7.0, 7.0]
    assert telemetry.time_ms.tolist() == [1700000000000, 1700000000000, 170000000000001, 1700000000000,
                                          1700000000000]


def test_heads_past_those_kept_read_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file of more distinct series than the bulk reader keeps (and looks up in C) reads as the per-line code
    reads it, whether the heads come in the first chunk or later ones."""
    path = tmp_path / "t.prom"
    path.write_text("".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}",Hostname="n{g % 7}"}} {g % 100} {1700000000000 + t}\n'
                            for t in range(3) for g in range(t * 20, 150)))
    rows = _parse(path, "rows", dcgm.CHUNK_BYTES, monkeypatch)
    for kept in (1, 5, 64, 1 << 16):
        monkeypatch.setattr(dcgm, "_HEADS_KEPT", kept)
        for chunk in (64, 700, dcgm.CHUNK_BYTES):
            _same(rows, _parse(path, "columnar", chunk, monkeypatch))


def test_a_bad_table_path_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.prom"
    path.write_text(BASE)
    monkeypatch.setenv("CLUSTERCERT_TABLE_PATH", "columns")
    with pytest.raises(UsageError, match="CLUSTERCERT_TABLE_PATH: expected 'columnar' or 'rows', got 'columns'"):
        parse_dcgm(path, "t.prom")
    monkeypatch.setenv("CLUSTERCERT_TABLE_PATH", "")
    assert len(parse_dcgm(path, "t.prom")) == 8  # empty is unset: columnar


def _old_to_json(t: Telemetry) -> dict[str, object]:
    """to_json as it was computed from one object per sample (the oracle for the column-wise summary)."""
    samples = [t.sample(i) for i in range(len(t))]
    series: dict[tuple[str, str, str | None], list[DcgmSample]] = {}
    for sample in samples:
        series.setdefault((sample.metric, sample.gpu, sample.host), []).append(sample)
    summary = []
    for (metric, gpu, host), items in series.items():
        values = [s.value for s in items if s.value is not None]
        summary.append({"metric": metric, "gpu": gpu, "host": host, "count": len(items), "values": len(values),
                        "first_ms": items[0].time_ms, "last_ms": items[-1].time_ms, "line": items[0].line,
                        "last_line": items[-1].line, "min": min(values) if values else None,
                        "max": max(values) if values else None,
                        "mean": sum(values) / len(values) if values else None})
    head = [{"metric": s.metric, "gpu": s.gpu, "host": s.host, "value": s.value, "time_ms": s.time_ms,
             "line": s.line} for s in samples[:20]]
    return {"format": "dcgm", "file": t.file, "source": t.source, "samples": len(samples), "series": summary,
            "head": head}


def test_to_json_by_hand(tmp_path: Path) -> None:
    path = tmp_path / "t.prom"
    path.write_text(VARIANTS["nan and inf values"])  # type: ignore[arg-type]
    got = parse_dcgm(path, "t.prom").to_json()
    assert json.dumps(got) == json.dumps(_old_to_json(parse_dcgm(path, "t.prom")))
    series = {(s["metric"][12:], s["gpu"], s["host"]): s for s in got["series"]}  # type: ignore[attr-defined]
    assert got["samples"] == 8 and len(series) == 6
    assert series[("GPU_UTIL", "0", "n1")] == {**series[("GPU_UTIL", "0", "n1")], "count": 1, "values": 0,
                                               "min": None, "mean": None}
    assert {k: series[("GPU_UTIL", "1", "n1")][k] for k in ("count", "values", "min", "max", "mean", "line",
                                                              "last_line", "first_ms", "last_ms")} == {
        "count": 2, "values": 0, "min": None, "max": None, "mean": None, "line": 4, "last_line": 8,
        "first_ms": 1700000000000, "last_ms": 1700000001000}
    power = series[("POWER_USAGE", "0", "n1")]
    assert (power["count"], power["values"], power["min"], power["max"], power["mean"]) == (
        2, 2, 612.25, 613.5, (612.25 + 613.5) / 2)
    # a mean is a left-to-right sum: 0.1 + 0.2 + 0.3 is not 0.6 in floating point, and must stay so
    path.write_text("".join(f'M{{gpu="0"}} {v} {1700000000000 + i}\n' for i, v in enumerate(["0.1", "0.2", "0.3"])))
    (one,) = parse_dcgm(path, "t.prom").to_json()["series"]  # type: ignore[misc]
    assert one["mean"] == ((0.1 + 0.2) + 0.3) / 3 != 0.6 / 3
    # min() and max() keep the first of equal values: 0.0 and -0.0 are told apart in the JSON
    for values, low, high in ((["0", "-0", "-1"], "-1.0", "0.0"), (["-0", "0", "1"], "-0.0", "1.0"),
                              (["1", "-0", "0"], "-0.0", "1.0"), (["-1", "-0.0", "0"], "-1.0", "-0.0")):
        path.write_text("".join(f'M{{gpu="0"}} {v} {1700000000000 + i}\n' for i, v in enumerate(values)))
        telemetry = parse_dcgm(path, "t.prom")
        (one,) = telemetry.to_json()["series"]  # type: ignore[misc]
        assert (json.dumps(one["min"]), json.dumps(one["max"])) == (low, high), values
        assert json.dumps(telemetry.to_json()) == json.dumps(_old_to_json(telemetry))


def test_the_column_summaries(tmp_path: Path) -> None:
    path = tmp_path / "t.prom"
    path.write_text(BASE)
    t = parse_dcgm(path, "t.prom")
    assert t.metric_names() == ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"]
    assert t.gpu_count() == 4  # (n1, 0), (n1, 1), (n 2, 0), (None, 1)
    assert t.host_first_lines() == [("n1", 3), ("n 2", 7)]
    assert t.hosts == ("n 2", "n1") and t.gpus == ("0", "1")  # sorted dictionaries


def test_the_chunked_read_is_recorded_whole(tmp_path: Path) -> None:
    path = tmp_path / "t.prom"
    path.write_text(BASE)
    mark = read_mark()
    parse_dcgm(path, "t.prom", chunk_bytes=5)
    assert digests_read(path, since=mark) == {hashlib.sha256(path.read_bytes()).hexdigest()}


@pytest.mark.parametrize("chunk", [1, 3, 10, 1 << 20])
def test_read_chunks_cuts_at_line_ends(tmp_path: Path, chunk: int) -> None:
    path = tmp_path / "f"
    data = b"ab\ncdefghij\n\n\nxyz\r\n" + b"q" * 50 + b"\nlast"
    path.write_bytes(data)
    pieces = list(read_chunks(path, "f", limit=len(data), chunk_bytes=chunk))
    assert b"".join(pieces) == data
    assert all(p.endswith(b"\n") for p in pieces[:-1]) and pieces[-1].endswith(b"last")
    assert all(b"\n" not in p[:-1] or len(p) <= chunk + 60 for p in pieces)
    with pytest.raises(EvidenceError, match=f"expected at most {len(data) - 1} bytes, got {len(data)}"):
        list(read_chunks(path, "f", limit=len(data) - 1, chunk_bytes=chunk))


def test_read_chunks_stopped_early_records_a_part(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"one\ntwo\nthree\n")
    mark = read_mark()
    chunks = read_chunks(path, "f", limit=100, chunk_bytes=4)
    assert next(chunks) == b"one\n"
    chunks.close()
    assert digests_read(path, since=mark) == set()
    ((offset, length, _),) = parts_read(path, since=mark)
    assert offset == 0 and 4 <= length <= 14


def test_a_long_read_tells_how_far_it_is_where_somebody_listens(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's telemetry file is read for minutes: the listener of `told_reading` where the read starts is told
    (bytes read, the file's size) every `_READ_SHOWN` seconds (here after every block), also when the pieces are
    taken on another thread; no listener, nothing told; the listener's block ended, nothing told either."""
    import threading

    import clustercert.evidence.guards as guards

    monkeypatch.setattr(guards, "_READ_SHOWN", 0.0)
    path = tmp_path / "f"
    data = b"".join(b"line %d\n" % i for i in range(100))  # 10 x 7 + 90 x 8 = 790 bytes
    path.write_bytes(data)
    told: list[tuple[int, int]] = []
    with guards.told_reading(lambda done, size: told.append((done, size))):
        assert b"".join(read_chunks(path, "f", limit=1000, chunk_bytes=100)) == data
        started_here = read_chunks(path, "f", limit=1000, chunk_bytes=400)
    assert told == [(done, 790) for done in (100, 200, 300, 400, 500, 600, 700, 790)]
    told.clear()
    taken: list[bytes] = []
    thread = threading.Thread(target=lambda: taken.extend(started_here))
    thread.start()
    thread.join()
    assert b"".join(taken) == data and told == [(400, 790), (790, 790)]
    told.clear()
    assert b"".join(read_chunks(path, "f", limit=1000, chunk_bytes=100)) == data and told == []


def test_the_listener_hears_nothing_of_a_short_read(tmp_path: Path) -> None:
    """At the real period (5 s) a read of milliseconds tells nothing: no line for each of a sweep's 8,141 logs."""
    import clustercert.evidence.guards as guards

    path = tmp_path / "f"
    path.write_bytes(b"x\n" * 1000)
    told: list[tuple[int, int]] = []
    with guards.told_reading(lambda done, size: told.append((done, size))):
        list(read_chunks(path, "f", limit=10_000, chunk_bytes=10))
    assert guards._READ_SHOWN == 5.0 and told == []


def test_reading_telemetry_imports_no_pandas() -> None:
    """`evidence parse` of a telemetry file stays light: Arrow is used without its pandas bridge."""
    probe = ("import sys; from pathlib import Path; from clustercert.parsers.dcgm import parse_dcgm; "
             f"t = parse_dcgm(Path({str(SHIPPED[0])!r}), 'd', chunk_bytes=65536); t.to_json(); "
             "print(len(t), 'pandas' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    count, pandas = proc.stdout.split()
    assert int(count) > 0 and pandas == "False"


def test_evidence_parse_names_a_bad_table_path(tmp_path: Path) -> None:
    """As a user runs it: a CLUSTERCERT_TABLE_PATH that is neither path is a usage error (exit 2), named."""
    path = tmp_path / "t.prom"
    path.write_text(BASE)
    proc = run_cli("evidence", "parse", str(path), env={"CLUSTERCERT_TABLE_PATH": "column"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("error: CLUSTERCERT_TABLE_PATH: expected 'columnar' or 'rows', got 'column'. "
                                   "Unset it (the columnar path) or set it to rows (the per-line path).")
    proc = run_cli("evidence", "parse", str(path), env={"CLUSTERCERT_TABLE_PATH": "rows"})
    assert proc.returncode == 0 and "\n  8 samples (prometheus) in 6 series: " in proc.stdout, proc.stderr


@pytest.mark.parametrize("rows", [1, 2, 3, 1 << 20])
def test_each_hosts_first_line_across_scan_pieces(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    """The scan for each host's first line goes piece by piece and stops once every host was seen: the same
    hosts, lines and order of first appearance as reading the samples one by one, at any piece size."""
    monkeypatch.setattr(dcgm, "_HOST_SCAN_ROWS", rows)
    hosts = [None, "n9", None, "n9", "n2", None, "n5", "n2", "n0", "n5"]
    samples = [DcgmSample("DCGM_FI_DEV_POWER_USAGE", "0", h, 700.0, 1_000 * i, 10 + 2 * i)
               for i, h in enumerate(hosts)]
    expected: dict[str, int] = {}
    for s in samples:
        if s.host is not None:
            expected.setdefault(s.host, s.line)
    t = Telemetry.from_samples("t.prom", "prometheus", samples)
    assert t.host_first_lines() == list(expected.items()) == [("n9", 12), ("n2", 18), ("n5", 22), ("n0", 26)]


@pytest.mark.parametrize(("mib", "spilled"), [("0", True), ("1", True), ("2", False), ("", False)])
def test_columns_beyond_the_memory_budget_go_to_scratch_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              mib: str, spilled: bool) -> None:
    """40,000 samples are 1.44 MB of columns (36 bytes each): past a 1 MiB budget, within 2 MiB and the default."""
    path = tmp_path / "t.prom"
    path.write_text("".join(f'M{{gpu="{i % 8}"}} {i % 97} {1700000000000 + i}\n' for i in range(40_000)))
    monkeypatch.setenv("CLUSTERCERT_TELEMETRY_MEMORY_MIB", mib)
    t = parse_dcgm(path, "t.prom")
    assert (t.spilled, len(t), t.gpu_count(), t.metric_names()) == (spilled, 40_000, 8, ["M"])
    assert t.value[:3].tolist() == [0.0, 1.0, 2.0] and t.line[-1] == 40_000


class _FullDisk:
    """A scratch file on a full disk: every write fails as the system says."""

    def __init__(self, real: object) -> None:
        self.real = real

    def write(self, data: object) -> int:
        raise OSError(28, "No space left on device")

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)


@pytest.mark.parametrize("where", ["create", "write"])
def test_no_room_for_the_scratch_files_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        where: str) -> None:
    import tempfile

    path = tmp_path / "t.prom"
    path.write_text(BASE)
    monkeypatch.setenv("CLUSTERCERT_TELEMETRY_MEMORY_MIB", "0")
    real = tempfile.TemporaryFile

    def scratch(**kwargs: object) -> object:
        if where == "create":
            raise PermissionError(13, "Permission denied")
        return _FullDisk(real(**kwargs))  # type: ignore[call-overload]

    monkeypatch.setattr(tempfile, "TemporaryFile", scratch)
    reason = "Permission denied" if where == "create" else "No space left on device"
    with pytest.raises(UsageError) as info:
        parse_dcgm(path, "t.prom")
    assert str(info.value) == (
        f"t.prom: could not keep the telemetry's columns in the temporary folder {tempfile.gettempdir()}: {reason}. "
        "Free space there, point TMPDIR at a folder with room (36 bytes a sample), or raise "
        "CLUSTERCERT_TELEMETRY_MEMORY_MIB to hold them in memory.")
    assert info.value.exit_code == 2
