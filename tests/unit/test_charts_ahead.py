"""Charts drawn ahead in a child process are the charts the report draws, and a child that fails costs nothing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from clustercert.report import ReportInput, build_context, charts, render_html
from clustercert.report.ahead import ChartsAhead, draw_all
from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"
TEMPLATES = ROOT / "templates"


def _input() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / "report_input.json").read_text(encoding="utf-8"))
    return data


def _html(data: dict[str, Any]) -> str:
    return render_html(build_context(ReportInput(**data)), TEMPLATES)


def _what_the_flow_sends(results: dict[str, Any]) -> dict[str, Any]:
    return {"phases": results["phases"], "rules": results["rules"]}


def _phase_by_phase(results: dict[str, Any]) -> list[dict[str, Any]]:
    """What the certify flow sends: each phase's section when that phase is done."""
    return [{"phases": {name: section}, "rules": results["rules"]} for name, section in results["phases"].items()]


# Targets for the child (module level: a spawned child imports them by name).
def _raises(results: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("no charts today")


def _dies(results: dict[str, Any]) -> dict[str, Any]:
    os._exit(3)


def _sleeps(results: dict[str, Any]) -> dict[str, Any]:
    time.sleep(60)
    return {}


def _marks(part: dict[str, Any]) -> dict[str, Any]:
    Path(part["mark"]).write_text("drawn", encoding="utf-8")
    return {part["mark"]: "chart"}


@pytest.fixture(scope="module")
def ahead_drawn() -> dict[str, Any]:
    ahead = ChartsAhead()
    for part in _phase_by_phase(_input()["results"]):
        ahead.send(part)
    try:
        return ahead.drawn()
    finally:
        ahead.close()


def test_the_child_draws_the_bytes_drawn_here(ahead_drawn: dict[str, Any]) -> None:
    here = draw_all(_input()["results"])  # all phases at once, in this process
    assert set(ahead_drawn) == set(here)
    assert ahead_drawn == here  # Chart ids, titles, alt texts and PNG bytes alike
    uris = [c.uri for v in here.values() for c in (v if isinstance(v, list) else [v]) if c is not None]
    # every chart of the report: step time per workload, weak scaling, bus bandwidth, the pair heatmap, resilience
    assert len(uris) >= 6 and all(u.startswith("data:image/png;base64,iVBOR") for u in uris)


def _with_drawn(data: dict[str, Any], drawn_ahead: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The report of `data` given the charts drawn ahead is the report drawn alone; returns one mark per chart it
    drew itself."""
    alone = _html(data)
    drawn: list[str] = []
    png = charts._png
    monkeypatch.setattr(charts, "_png", lambda fig: drawn.append("x") or png(fig))
    with charts.shared_charts(dict(drawn_ahead)):
        together = _html(data)
    assert together == alone
    return drawn


def test_a_report_given_the_charts_drawn_ahead_draws_none_and_is_the_same(
        ahead_drawn: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    assert _with_drawn(_input(), ahead_drawn, monkeypatch) == []


def test_a_chart_whose_data_changed_since_is_drawn_again(ahead_drawn: dict[str, Any],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    data = _input()
    events = data["results"]["phases"]["resilience"]["events"]
    data["results"]["phases"]["resilience"]["events"] = events[:-1]  # one event less than the child drew
    assert _with_drawn(data, ahead_drawn, monkeypatch) == ["x"]  # the event timeline, drawn from its data now


@pytest.mark.parametrize("target", [_raises, _dies], ids=["raises", "dies"])
def test_a_child_that_fails_leaves_the_charts_to_the_report(target: Any) -> None:
    ahead = ChartsAhead(target=target, wait_s=120)
    ahead.send(_what_the_flow_sends(_input()["results"]))
    started = time.monotonic()
    assert ahead.drawn() == {}
    assert time.monotonic() - started < 60  # told at once, not after the wait
    ahead.close()
    assert not ahead._process.is_alive()


def test_a_child_that_is_late_is_stopped_and_the_report_draws() -> None:
    ahead = ChartsAhead(target=_sleeps, wait_s=0.5)
    ahead.send({"phases": {}})
    assert ahead.drawn() == {}
    assert not ahead._process.is_alive()  # killed, not left running beside the report
    ahead.close()  # again: nothing left to do


def test_a_child_killed_before_it_read_its_data_blocks_nothing() -> None:
    # 40 MB: far more than a pipe holds, so the send waits for a reader that is gone
    big = {"phases": {}, "padding": [f"{i:06d}" + "x" * 1000 for i in range(40_000)]}  # distinct: pickled whole
    ahead = ChartsAhead(target=_sleeps, wait_s=120)
    ahead._process.kill()
    ahead.send(big)
    started = time.monotonic()
    assert ahead.drawn() == {}
    ahead.close()
    assert time.monotonic() - started < 60
    assert not ahead._sender.is_alive()


def test_nothing_sent_is_nothing_drawn_and_the_child_is_stopped() -> None:
    ahead = ChartsAhead(wait_s=120)
    started = time.monotonic()
    assert ahead.drawn() == {}  # a run that failed before its phases were done: no wait
    assert time.monotonic() - started < 60
    assert not ahead._process.is_alive()
    with pytest.raises(RuntimeError, match="asked for already"):
        ahead.send({"phases": {}})


def test_each_part_is_drawn_when_it_is_sent_and_drawn_returns_them_all(tmp_path: Path) -> None:
    ahead = ChartsAhead(target=_marks, wait_s=120)
    try:
        first, second = tmp_path / "efficiency", tmp_path / "scaling"
        ahead.send({"mark": str(first)})
        deadline = time.monotonic() + 120
        while not first.exists():  # drawn while the run goes on, before the report asks
            assert time.monotonic() < deadline, "the first part was not drawn before drawn() was called"
            time.sleep(0.05)
        assert not second.exists()
        ahead.send({"mark": str(second)})
        assert ahead.drawn() == {str(first): "chart", str(second): "chart"}
        with pytest.raises(RuntimeError, match="asked for already"):
            ahead.send({"mark": str(tmp_path / "late")})
    finally:
        ahead.close()
    assert not ahead._process.is_alive()
    assert not (tmp_path / "late").exists()


def test_a_run_without_a_core_or_a_process_for_the_charts_draws_them_in_the_report(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.tactics as tactics

    def no_process(**_: Any) -> ChartsAhead:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(tactics, "ChartsAhead", no_process)
    monkeypatch.setattr(tactics, "usable_cores", lambda: 2)
    said: list[str] = []
    monkeypatch.setattr(tactics.log, "warning", lambda text, *args: said.append(text % args))
    assert tactics._charts_ahead() is None
    assert said == ["charts drawn ahead: no child process ([Errno 11] Resource temporarily unavailable); the report "
                    "draws them"]
    monkeypatch.setattr(tactics, "ChartsAhead", lambda **_: pytest.fail("one core: no child"))
    monkeypatch.setattr(tactics, "usable_cores", lambda: 1)
    assert tactics._charts_ahead() is None


def test_no_thread_to_send_the_data_is_nothing_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    ahead = ChartsAhead(wait_s=120)

    def refused(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refused)
    ahead.send({"phases": {}})
    monkeypatch.undo()
    assert ahead.drawn() == {}
    assert not ahead._process.is_alive()


class _Unreadable:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_refuse, ("no",))  # pickles; unpickling in the parent raises


def _refuse(text: str) -> None:
    raise ValueError(text)


def _sends_unreadable(results: dict[str, Any]) -> dict[str, Any]:
    return {"chart": _Unreadable()}


def test_charts_that_cannot_be_read_back_are_left_to_the_report() -> None:
    ahead = ChartsAhead(target=_sends_unreadable, wait_s=120)
    ahead.send({"phases": {}})
    assert ahead.drawn() == {}
    assert not ahead._process.is_alive()


def test_data_that_cannot_be_sent_stops_the_child_and_nothing_waits() -> None:
    ahead = ChartsAhead(wait_s=120)
    ahead.send({"phases": {}, "not data": lambda: None})  # a lambda does not pickle
    started = time.monotonic()
    assert ahead.drawn() == {}
    assert time.monotonic() - started < 60  # not the 120 s wait
    assert not ahead._process.is_alive()
