"""Comparison of an original run folder with its re-run: results.json by JSON path, HTML lines, unsigned PDF."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from clustercert.runs.replay import compare_run_folders, key_difference, shown_differences, software_differences


def _folder(path: Path, results: dict[str, object], html: str, pdf: bytes) -> Path:
    path.mkdir()
    (path / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (path / "report.html").write_text(html)
    (path / "report.pdf").write_bytes(pdf)
    return path


PDF = b"%PDF-1.7\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"


def test_identical_folders_have_no_difference(tmp_path: Path) -> None:
    a = _folder(tmp_path / "a", {"x": [1, {"y": 2.5}]}, "<p>1</p>\n", PDF)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    assert compare_run_folders(a, b) == []


def test_a_signature_appended_to_the_replay_is_not_a_difference(tmp_path: Path) -> None:
    a = _folder(tmp_path / "a", {"x": 1}, "<p/>", PDF)
    signed = PDF + b"2 0 obj << /ByteRange [0 60 80 8] /Contents <00> >> endobj\n%%EOF\n"
    b = _folder(tmp_path / "b", {"x": 1}, "<p/>", signed)
    assert compare_run_folders(a, b) == []


def test_each_difference_is_named(tmp_path: Path) -> None:
    a = _folder(tmp_path / "a", {"x": [1, {"y": 2.5}], "gone": True}, "<p>1</p>\n<p>same</p>\n", PDF)
    b = _folder(tmp_path / "b", {"x": [1, {"y": 2.75}], "new": None}, "<p>2</p>\n<p>same</p>\n",
                PDF.replace(b"1.7", b"1.6"))
    assert compare_run_folders(a, b) == [
        "results.json.x[1].y: 2.5 -> 2.75",
        "results.json.gone: removed (was true)",
        "results.json.new: added (null)",
        "report.html: bytes differ: -<p>1</p> | +<p>2</p>",
        # 48 bytes each (9 + 20 + 13 + 6); "%PDF-1." is 7 bytes, so the version digit is at offset 7.
        "report.pdf: unsigned bytes differ from offset 7 (48 vs 48 bytes): "
        "b'7\\n1 0 obj <<>> endobj\\ntrailer <<>>\\n%%EOF' -> b'6\\n1 0 obj <<>> endobj\\ntrailer <<>>\\n%%EOF'",
    ]


def test_software_differences_name_each_package() -> None:
    assert software_differences({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"}) == [
        "b: recorded 2, now 3", "c: recorded absent, now 4"]


def _redacted(folder: Path, html: str, pdf: bytes) -> None:
    (folder / "report.redacted.html").write_text(html)
    (folder / "report.redacted.pdf").write_bytes(pdf)


def test_the_redacted_copy_is_compared_where_the_run_has_one(tmp_path: Path) -> None:
    a = _folder(tmp_path / "a", {"x": 1}, "<p/>", PDF)
    _redacted(a, "<p>host-1a2b3c</p>\n", PDF)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    assert compare_run_folders(a, b) == []
    _redacted(b, "<p>host-ffffff</p>\n", PDF.replace(b"1.7", b"1.6"))  # another key's pseudonyms
    assert compare_run_folders(a, b) == [
        "report.redacted.html: bytes differ: -<p>host-1a2b3c</p> | +<p>host-ffffff</p>",
        "report.redacted.pdf: unsigned bytes differ from offset 7 (48 vs 48 bytes): "
        "b'7\\n1 0 obj <<>> endobj\\ntrailer <<>>\\n%%EOF' -> b'6\\n1 0 obj <<>> endobj\\ntrailer <<>>\\n%%EOF'",
    ]
    (b / "report.redacted.html").unlink()
    (b / "report.redacted.pdf").unlink()
    assert compare_run_folders(a, b) == ["report.redacted.html: missing from the re-run",
                                         "report.redacted.pdf: missing from the re-run"]


def test_without_a_redacted_copy_only_the_report_is_compared(tmp_path: Path) -> None:
    a = _folder(tmp_path / "a", {"x": 1}, "<p/>", PDF)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    _redacted(b, "<p>anything</p>", b"not compared")
    assert compare_run_folders(a, b) == []
    (a / "report.html").unlink()  # a run folder short of its report: named, not a crash
    assert compare_run_folders(a, b) == ["report.html: missing from the run folder"]


def test_another_signing_key_is_named_only_where_a_redacted_copy_depends_on_it() -> None:
    with_copy, without = ["report", "report.redacted"], ["report"]
    note = key_difference("SHA256:aaa", "SHA256:bbb", with_copy)
    assert note is not None
    assert note.startswith("the run was signed by key SHA256:aaa; this re-run signs with SHA256:bbb. ")
    assert "report.redacted.html and report.redacted.pdf will differ" in note
    assert key_difference("SHA256:aaa", "SHA256:aaa", with_copy) is None  # the same key: it reproduces
    assert key_difference("SHA256:aaa", "SHA256:bbb", without) is None  # no copy keyed by it
    assert key_difference("", "SHA256:bbb", with_copy) is None  # a manifest naming no signer: nothing to compare


def test_many_differences_in_one_list_show_the_first_two_and_a_count() -> None:
    evidence = [f"results.json.checks[81].evidence[{i}].{field}: 1 -> 2"
                for i in range(4) for field in ("line", "last")]
    where = [f"results.json.reasons[19].where[{i}]: \"a\" -> \"b\"" for i in range(3)]
    diffs = ["results.json.outcome: \"CERTIFIED\" -> \"NOT CERTIFIED\"", *where, *evidence,
             "results.json.checks[82].evidence[0].line: 1 -> 2", "report.html: bytes differ: - a | + b"]
    assert shown_differences(diffs) == [
        "results.json.outcome: \"CERTIFIED\" -> \"NOT CERTIFIED\"",
        *where,  # three: one more than two is shown whole, not counted
        "results.json.checks[81].evidence[0].line: 1 -> 2",
        "results.json.checks[81].evidence[0].last: 1 -> 2",
        "... and 6 more differences in results.json.checks[81].evidence",
        "results.json.checks[82].evidence[0].line: 1 -> 2",  # the next list is its own
        "report.html: bytes differ: - a | + b",
    ]
    assert shown_differences(diffs, per_list=10) == diffs
    assert shown_differences([]) == []
