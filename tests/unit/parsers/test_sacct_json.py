"""`sacct --json` dumps: read as the same jobs and steps as a `--parsable2` dump, in both schemas Slurm has
printed (22.05's `openapi/dbv0.0.38` and the data parser of 23.02 and later), each record with its line.

The expected values are worked by hand from the documents below (epoch 1733390000 is 2024-12-05T09:13:20Z); the
Slurm step (tests/slurm/test_run_e2e.py) checks a real cluster's `sacct --json` against its `--parsable2` dump."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import detect_format, sacct_json
from clustercert.parsers.sacct import parse_sacct
from tests.conftest import run_cli

T0 = 1733390000  # 2024-12-05T09:13:20+00:00


def _dump_2205(jobs: list[dict[str, object]]) -> str:
    """A document as Slurm 22.05's sacct prints it (two-space indent, its meta and errors first)."""
    return json.dumps({"meta": {"plugin": {"type": "openapi/dbv0.0.38", "name": "Slurm OpenAPI DB v0.0.38"},
                                "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}},
                       "errors": [], "jobs": jobs}, indent=2)


def _job_2205(job_id: int, state: str, start: int, end: int, submit: int, steps: list[dict[str, object]]) -> dict:
    return {"account": "root", "job_id": job_id, "state": {"current": state, "reason": "None"},
            "time": {"elapsed": end - start if end else 0, "eligible": submit, "end": end, "start": start,
                     "submission": submit, "suspended": 0, "limit": 15},
            "nodes": "cc-n[1-2]", "steps": steps}


def _step_2205(job_id: int, step: str | int, state: str, start: int, end: int) -> dict:
    return {"step": {"job_id": job_id, "het": {"component": None}, "id": step, "name": str(step)}, "state": state,
            "time": {"elapsed": end - start, "end": end, "start": start, "suspended": 0},
            "nodes": {"list": ["cc-n1"], "count": 1, "range": "cc-n1"}}


def _number(value: int) -> dict:
    return {"set": True, "infinite": False, "number": value}


def _write(tmp_path: Path, text: str, name: str = "sacct.json") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_22_05_dump_reads_its_jobs_steps_times_and_incarnations(tmp_path: Path) -> None:
    """Job 7 was requeued: 22.05 prints its first incarnation (NODE_FAIL) before job 6, as it did on the loopback
    cluster; the incarnations are numbered by submission all the same."""
    text = _dump_2205([
        _job_2205(7, "NODE_FAIL", T0 + 10, T0 + 21, T0 + 9,
                  [_step_2205(7, "batch", "CANCELLED", T0 + 10, T0 + 21), _step_2205(7, 0, "CANCELLED", T0 + 10,
                                                                                     T0 + 21)]),
        _job_2205(6, "COMPLETED", T0, T0 + 2, T0, [_step_2205(6, "batch", "COMPLETED", T0, T0 + 2)]),
        _job_2205(7, "COMPLETED", T0 + 45, T0 + 100, T0 + 21,
                  [_step_2205(7, "batch", "COMPLETED", T0 + 45, T0 + 100), _step_2205(7, 0, "COMPLETED", T0 + 45,
                                                                                      T0 + 100)]),
        _job_2205(8, "PENDING", 0, 0, T0 + 200, []),
    ])
    path = _write(tmp_path, text)
    lines = text.splitlines()
    result = parse_sacct(path, "sacct.json", timezone="Europe/Paris")
    got = [(j.job_id, j.incarnation, j.state, j.elapsed_s, j.start, j.end, j.submit) for j in result.jobs]
    assert got == [
        ("7", 1, "NODE_FAIL", 11.0, "2024-12-05T10:13:30+01:00", "2024-12-05T10:13:41+01:00",
         "2024-12-05T10:13:29+01:00"),
        ("6", 1, "COMPLETED", 2.0, "2024-12-05T10:13:20+01:00", "2024-12-05T10:13:22+01:00",
         "2024-12-05T10:13:20+01:00"),
        ("7", 2, "COMPLETED", 55.0, "2024-12-05T10:14:05+01:00", "2024-12-05T10:15:00+01:00",
         "2024-12-05T10:13:41+01:00"),
        ("8", 1, "PENDING", 0.0, None, None, "2024-12-05T10:16:40+01:00"),
    ]
    assert [(s.step_id, s.state, s.elapsed_s) for s in result.jobs[2].steps] == [("7.batch", "COMPLETED", 55.0),
                                                                                ("7.0", "COMPLETED", 55.0)]
    # each record's line is its object's opening brace: the jobs at indent 4, their steps at indent 8
    job_lines = [n for n, line in enumerate(lines, start=1) if line == "    {"]
    step_lines = [n for n, line in enumerate(lines, start=1) if line == "        {"]
    assert [j.line for j in result.jobs] == job_lines
    assert [s.line for j in result.jobs for s in j.steps] == step_lines
    assert result.fields == [] and result.warnings == [] and result.timezone == "Europe/Paris"


def test_a_later_schema_with_state_lists_whole_step_ids_and_set_numbers(tmp_path: Path) -> None:
    """23.02 and later: states as lists (base state first, then flags), step ids whole, a step's times as
    `{"set", "infinite", "number"}`, an unset end a running step's."""
    job = {"job_id": 41, "state": {"current": ["RUNNING"], "reason": "None"},
           "time": {"elapsed": 30, "start": T0, "end": 0, "submission": T0 - 5, "planned": _number(5)},
           "steps": [{"step": {"id": "41.batch", "name": "batch"}, "state": ["RUNNING"],
                      "time": {"elapsed": 30, "start": _number(T0), "end": {"set": False, "infinite": False,
                                                                             "number": 0}}},
                     {"step": {"id": "41.0", "name": "train"}, "state": ["CANCELLED", "REQUEUED"],
                      "time": {"elapsed": _number(12), "start": _number(T0 + 1), "end": _number(T0 + 13)}}]}
    path = _write(tmp_path, json.dumps({"meta": {"plugin": {"type": "", "data_parser": "data_parser/v0.0.41"}},
                                        "jobs": [job], "warnings": [], "errors": []}, indent=2))
    result = parse_sacct(path, "sacct.json")
    only = result.jobs[0]
    assert (only.job_id, only.state, only.start, only.end, only.submit) == (
        "41", "RUNNING", "2024-12-05T09:13:20+00:00", None, "2024-12-05T09:13:15+00:00")
    assert [(s.step_id, s.state, s.state_raw, s.elapsed_s, s.start, s.end) for s in only.steps] == [
        ("41.batch", "RUNNING", "RUNNING", 30.0, "2024-12-05T09:13:20+00:00", None),
        ("41.0", "CANCELLED", "CANCELLED REQUEUED", 12.0, "2024-12-05T09:13:21+00:00", "2024-12-05T09:13:33+00:00"),
    ]


def test_a_json_dump_is_detected_as_sacct_and_needs_no_field_list(tmp_path: Path) -> None:
    path = _write(tmp_path, _dump_2205([_job_2205(6, "COMPLETED", T0, T0 + 2, T0, [])]))
    assert detect_format(path) == "sacct"
    result = parse_sacct(path, "sacct.json", fields=["State", "JobID"])
    assert [j.job_id for j in result.jobs] == ["6"]
    assert result.warnings == ["sacct.json: a `sacct --json` dump names its own fields: the bundle's `fields` list "
                               "(State, JobID) is not used"]


@pytest.mark.parametrize(("change", "line_of", "field", "said"), [
    (lambda j: j.update(state={"current": "SLEEPING"}), "job", "state", "expected a Slurm state"),
    (lambda j: j.pop("time"), "job", "time", "expected the job's 'time' object, got nothing"),
    (lambda j: j.update(job_id="x7"), "job", "job_id", "expected a whole number, got 'x7'"),
    (lambda j: j["time"].update(start=-5.5), "job", "time.start", "expected a whole number, got -5.5"),
    (lambda j: j["time"].update(elapsed=-3), "job", "time.elapsed", "expected seconds of 0 or more, got -3"),
    (lambda j: j["steps"][1]["step"].update(id=None), "step", "step.id", "expected the step's id (step.id)"),
    (lambda j: j["steps"][1].update(state=[]), "step", "state", "expected a Slurm state, got []"),
])
def test_a_bad_record_is_refused_at_its_line_naming_the_field(tmp_path: Path, change: object, line_of: str,
                                                              field: str, said: str) -> None:
    second = _job_2205(9, "COMPLETED", T0, T0 + 4, T0, [_step_2205(9, "batch", "COMPLETED", T0, T0 + 4),
                                                        _step_2205(9, 0, "COMPLETED", T0, T0 + 4)])
    change(second)  # type: ignore[operator]
    text = _dump_2205([_job_2205(6, "COMPLETED", T0, T0 + 2, T0, []), second])
    lines = text.splitlines()
    want = [n for n, line in enumerate(lines, start=1) if line == "    {"][1] if line_of == "job" else \
        [n for n, line in enumerate(lines, start=1) if line == "        {"][1]
    with pytest.raises(EvidenceError) as caught:
        parse_sacct(_write(tmp_path, text), "sacct.json")
    assert (caught.value.line, caught.value.field) == (want, field)
    assert said in caught.value.message


def test_no_jobs_says_what_sacct_said(tmp_path: Path) -> None:
    empty = json.dumps({"meta": {}, "errors": [{"description": "Unable to connect to slurmdbd", "error_number": 7}],
                        "jobs": []})
    with pytest.raises(EvidenceError) as caught:
        parse_sacct(_write(tmp_path, empty), "sacct.json")
    assert caught.value.message.startswith("expected sacct job records, found none (sacct said: Unable to connect "
                                           "to slurmdbd)")
    with pytest.raises(EvidenceError) as caught:
        parse_sacct(_write(tmp_path, '{"jobs": {"7": {}}}'), "sacct.json")
    assert (caught.value.line, caught.value.field) == (1, "jobs")
    with pytest.raises(EvidenceError) as caught:
        parse_sacct(_write(tmp_path, '{"jobs": [\n  {"job_id": 7,\n'), "sacct.json")
    assert caught.value.line == 3 and "expected valid JSON" in caught.value.message


def test_the_command_line_reads_a_json_dump_and_refuses_a_bad_one_in_one_line(tmp_path: Path) -> None:
    good = _write(tmp_path, _dump_2205([_job_2205(6, "COMPLETED", T0, T0 + 2, T0,
                                                  [_step_2205(6, "batch", "COMPLETED", T0, T0 + 2)])]))
    done = run_cli("evidence", "parse", str(good), "--json")
    assert done.returncode == 0, done.stderr
    parsed = json.loads(done.stdout)
    assert parsed["format"] == "sacct"
    assert [(j["job_id"], j["state"], j["steps"][0]["step_id"]) for j in parsed["jobs"]] == [
        ("6", "COMPLETED", "6.batch")]
    bad = _write(tmp_path, _dump_2205([_job_2205(6, "DONE", T0, T0 + 2, T0, [])]), "bad.json")
    done = run_cli("evidence", "parse", str(bad))
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    # line 18: 15 of meta, the errors' line, the jobs' line, then the job's brace
    assert done.stderr.startswith(f"error: {bad} line 18 field 'state': expected a Slurm state (BOOT_FAIL, ")
    assert done.stderr.rstrip().endswith("got 'DONE'. Dump it again with `sacct --json` (or `sacct --parsable2 "
                                         "--format ...`).")


_GOOD = _dump_2205([_job_2205(6, "COMPLETED", T0, T0 + 2, T0, [_step_2205(6, "batch", "COMPLETED", T0, T0 + 2)]),
                    _job_2205(7, "FAILED", T0, T0 + 9, T0 - 1, [_step_2205(7, 0, "FAILED", T0, T0 + 9)])])


@pytest.mark.parametrize("text", [
    _GOOD,
    _GOOD.replace('"jobs": [', '"jobs": [\n    "not a job",', 1),  # a record that is no object
    _GOOD.replace('"job_id": 7,', '"job_id": 7 "x": 1,', 1),  # a syntax error inside the second job
    _GOOD.replace('"errors": []', '"errors": [}', 1),  # one before the jobs
    _GOOD[:-2] + ',\n  "jobs": [{"job_id": 8}]\n}',  # `jobs` given twice: the last one counts
    _GOOD.replace('"jobs": [', '"jo\\u0062s": [], "jobs": [', 1),  # a key that is `jobs` once decoded
    _GOOD.replace('"jobs"', '"j\\u006fbs"', 1),  # the only `jobs` key, escaped
    _GOOD.replace('"elapsed": 2,', '"elapsed": 1' + "0" * 5000 + ",", 1),  # a number Python does not read
    _GOOD.replace('"nodes": "cc-n[1-2]"', '"nodes": ' + "[" * 50_000 + "]" * 50_000, 1),  # nested too deep
    _GOOD.rstrip()[:-1],  # the document's closing brace cut off
    '{"meta": {}, "jobs": [{"job_id": 5, "state": "COMPLETED", "time": {}}, 7]}',
])
def test_the_jobs_decoded_one_at_a_time_read_as_the_document_decoded_whole(tmp_path: Path, text: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """parse_sacct_json() decodes the objects of the `jobs` list one at a time (the document decoded whole held
    many times its size); where it cannot tell them apart it decodes the document whole. Both read the same jobs,
    or refuse with the same error, line and field."""
    path = _write(tmp_path, text)

    def outcome() -> object:
        try:
            return [j.to_json() for j in parse_sacct(path, "sacct.json").jobs]
        except EvidenceError as exc:
            return (exc.message, exc.line, exc.field)

    apart = outcome()
    with monkeypatch.context() as patch:
        patch.setattr(sacct_json, "_jobs_apart", lambda *args: None)
        whole = outcome()
    assert apart == whole
    if text == _GOOD:
        assert [job["job_id"] for job in apart] == ["6", "7"]  # type: ignore[index, union-attr]
