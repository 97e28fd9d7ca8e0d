"""JSON-lines records decoded by orjson (issue 13: the parser bench's 50 MB/s) read exactly what json reads."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import FORMATS
from clustercert.parsers.common import read_json
from clustercert.parsers.dllogger import parse_dllogger
from clustercert.parsers.mlperf import _parse_run
from clustercert.parsers.training import NAN_VALUE, NOT_DECODED, fast_record, may_hold_nan_value

# Valid JSON and near-JSON of every kind a log line may hold; for each, fast_record() gives json.loads()'s value
# or leaves the line to json
LINES = [
    '{"a": 1, "b": [1.5, -0.0, 1e-400, 5e-324, 1.7976931348623157e308], "c": {"d": null, "e": true}}',
    '  {"step": 3, "data": {"x": 0.1}}\t', '{"a": 1, "a": 2}', '{"\\ud83d\\ude00": "\\u00e9\\/"}', '"text"', "[]",
    '{"a": 9223372036854775807, "b": -9223372036854775808, "c": 18446744073709551615}',
    "[NaN]", "[Infinity]", "[-Infinity]", "1e309", '"\\ud83d"', "01", "1.", ".5", "+1", "[1,]", '{"a": 1,}',
    '{"a": 1}{"b": 2}', '{"a": 1} x', '{"a": "x\ty"}', '{"a": "x\x01y"}', "", "   ", "{", "nul",
]


@pytest.mark.parametrize("line", LINES)
def test_a_record_reads_as_json_reads_it_or_is_left_to_json(line: str) -> None:
    got = fast_record(line)
    if got is NOT_DECODED:
        return
    assert repr(got) == repr(json.loads(line))


def test_numbers_read_as_json_reads_them_integers_past_64_bits_as_their_float() -> None:
    rng = random.Random(13)
    for _ in range(20_000):
        text = rng.choice(["", "-"]) + str(rng.randint(0, 10 ** rng.randint(1, 30)))
        if rng.random() < 0.6:
            text += "." + str(rng.randint(0, 10 ** rng.randint(1, 25)))
        if rng.random() < 0.5:
            text += f"e{rng.randint(-340, 320)}"
        got = fast_record(text)
        if got is NOT_DECODED:
            assert json.loads(text) in (float("inf"), float("-inf"))  # 1e309: json's inf, orjson's refusal
            continue
        want = json.loads(text)
        if isinstance(want, int) and not isinstance(got, int):
            assert abs(want) >= 2**63 and got == float(want)  # the one difference, which callers guard
        else:
            assert repr(got) == repr(want)


def test_a_record_deep_enough_for_json_to_give_up_is_left_to_json() -> None:
    deep = "[" * 950 + "]" * 950
    assert fast_record(deep) is NOT_DECODED
    assert fast_record("[" * 50 + "]" * 50) == json.loads("[" * 50 + "]" * 50)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_dllogger_reads_a_step_past_64_bits_exactly_and_nan_values_through_json(tmp_path: Path) -> None:
    big = 2**70 + 1
    path = _write(tmp_path, "d.log", (
        f'DLLL {{"step": {big}, "data": {{"train_step_timing in s": 1.5, "consumed_samples": {2**66}}}}}\n'
        'DLLL {"step": [0, 4], "data": {"train_step_timing in s": 2, "grad_norm": NaN}}\n'
        'DLLL {"step": 5.0, "data": {"train_step_timing in s": 1E400}}\n'
    ))
    log = parse_dllogger(path, "d.log")
    assert [s.iteration for s in log.steps] == [big, 4, 5]
    assert log.steps[0].consumed_samples == 2**66  # float() of the integer, then whole: exactly 2**66
    assert log.steps[2].step_time_s == float("inf")
    assert [(m.line, m.field) for m in log.nan_marks] == [(2, "grad_norm")]


def test_dllogger_names_a_record_too_deep_for_json(tmp_path: Path) -> None:
    path = _write(tmp_path, "d.log", 'DLLL {"step": 1, "data": {"train_step_timing in s": 1}}\n'
                  'DLLL {"step": 2, "x": ' + "[" * 5000 + "]" * 5000 + "}\n")
    with pytest.raises(EvidenceError) as caught:
        parse_dllogger(path, "d.log")
    assert (caught.value.line, caught.value.field) == (2, "DLLL")


def test_mlperf_reads_the_scored_records_exactly(tmp_path: Path) -> None:
    seed, benchmark = 2**65 + 1, 2**70 + 7
    lines = [
        ':::MLLOG {"time_ms": 1000, "key": "run_start", "value": null}',
        f':::MLLOG {{"time_ms": 1001, "key": "submission_benchmark", "value": {benchmark}}}',
        f':::MLLOG {{"time_ms": 1002, "key": "seed", "value": {seed}}}',
        ':::MLLOG {"time_ms": 1003, "key": "train_loss", "value": NaN}',
        ':::MLLOG {"time_ms": 61000, "key": "run_stop", "metadata": {"status": "success"}}',
    ]
    run, bench = _parse_run(_write(tmp_path, "result_0.txt", "\n".join(lines) + "\n"), "result_0.txt", 1 << 20)
    assert (run.start_ms, run.stop_ms, run.seed, bench) == (1000, 61000, seed, str(benchmark))


@pytest.mark.parametrize("time_ms", [str(2**64), "1e300", "-253402300800000"])
def test_mlperf_names_a_time_no_clock_gives(tmp_path: Path, time_ms: str) -> None:
    path = _write(tmp_path, "result_0.txt", f':::MLLOG {{"time_ms": {time_ms}, "key": "run_start"}}\n')
    with pytest.raises(EvidenceError) as caught:
        _parse_run(path, "result_0.txt", 1 << 20)
    assert (caught.value.line, caught.value.field) == (1, "time_ms")


LONG = "1" * 5000  # past the 4,300 digits Python reads as an integer: json raises ValueError, not JSONDecodeError


@pytest.mark.parametrize(
    ("fmt", "line", "field"),
    [
        ("dllogger", f'DLLL {{"step": 1, "data": {{"train_step_timing in s": {LONG}}}}}', "DLLL"),
        ("dllogger", f'DLLL {{"step": 1, "data": {{"train_step_timing in s": 1{"0" * 400}}}}}',
         "train_step_timing in s"),
        ("mlperf", f':::MLLOG {{"time_ms": {LONG}, "key": "run_start"}}', "MLLOG"),
        ("events", f'{{"ts": "2025-03-07T22:39:36+00:00", "type": "job_started", "step": {LONG}}}', None),
    ],
)
def test_an_integer_too_long_for_python_or_a_float_is_named_with_its_line(
    tmp_path: Path, fmt: str, line: str, field: str | None
) -> None:
    path = _write(tmp_path, "result_0.txt", "# first\n" + line + "\n")
    with pytest.raises(EvidenceError) as caught:
        FORMATS[fmt](path, "result_0.txt")
    assert (caught.value.line, caught.value.field) == (2, field)


def test_a_json_file_with_an_integer_too_long_for_python_is_named(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="a number too long to read"):
        read_json(_write(tmp_path, "scaling.json", f'{{"scaling_factor": {LONG}}}'), "scaling.json", limit=1 << 20)


@pytest.mark.parametrize(
    "text",
    ["loss: nan\n", "grad norm :\t-INF |\n", "x:Nan\n", "a: 1 | b:  -inf\n", "lm loss: \x1fnan\n", "é: nan\n",
     "lm loss:\u2003nan\n", "loss: nanx\n", "loss: 1.0 | info: none\n", "INFO: nothing\n", "loss: n an\n",
     "nan inf : 1\n", "loss:\nnan\n", ""],
)
def test_the_nan_prefilter_never_misses_what_the_pattern_finds(text: str) -> None:
    if NAN_VALUE.search(text) is not None:
        assert may_hold_nan_value(text)
    squeezed = re.sub(r"[^\S\n]", "", text.lower())
    if text.isascii() and not any(mark in squeezed for mark in (":nan", ":-nan", ":inf", ":-inf")):
        assert not may_hold_nan_value(text)  # and it lets through no ASCII text without such a value
