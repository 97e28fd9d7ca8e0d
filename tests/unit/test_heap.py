"""The garbage collector around what a certification builds to keep (clustercert/heap.py)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from clustercert.heap import frozen, keep, paused, settle, settling


def test_no_collection_runs_while_paused_and_it_resumes_as_it_was() -> None:
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        with paused():
            assert not gc.isenabled()
            kept = [[i] for i in range(100_000)]  # far past the 700 allocations that set off a collection
            with paused():
                pass
            assert not gc.isenabled()  # an inner pause does not end the outer one
            inside = list(collections)
        assert inside == [] and len(kept) == 100_000
        assert gc.isenabled()
        with pytest.raises(ValueError), paused():
            raise ValueError("inside")
        assert gc.isenabled()
        gc.disable()
        with paused():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()
        gc.callbacks.remove(count)


def test_settled_objects_are_frozen_until_the_run_ends_and_dropped_ones_still_freed() -> None:
    class Held:
        pass

    import weakref

    with settling():
        held = Held()
        ref = weakref.ref(held)
        settle()
        assert gc.get_freeze_count() > 0 and gc.is_tracked(held)
        del held
        assert ref() is None  # reference counting still frees a settled object that is dropped
        cycle: list[object] = []
        cycle.append(cycle)
        settle()
        frozen = gc.get_freeze_count()
        del cycle
        gc.collect()
        assert gc.get_freeze_count() == frozen  # a frozen cycle waits for the run's end
    assert gc.get_freeze_count() == 0
    with pytest.raises(ValueError), settling():
        settle()
        raise ValueError("inside")
    assert gc.get_freeze_count() == 0


def test_the_pdf_is_laid_out_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    import weasyprint

    from clustercert.report import render_pdf

    seen: list[tuple[str, bool]] = []
    render, write = weasyprint.HTML.render, weasyprint.document.Document.write_pdf

    def laid_out(self: weasyprint.HTML, *args: object, **kwargs: object) -> object:
        seen.append(("layout", gc.isenabled()))
        return render(self, *args, **kwargs)

    def written(self: weasyprint.document.Document, *args: object, **kwargs: object) -> object:
        seen.append(("write", gc.isenabled()))
        return write(self, *args, **kwargs)

    monkeypatch.setattr(weasyprint.HTML, "render", laid_out)
    monkeypatch.setattr(weasyprint.document.Document, "write_pdf", written)
    assert render_pdf("<html><body><p>x</p></body></html>", Path("/nonexistent")).startswith(b"%PDF")
    assert seen == [("layout", False), ("write", False)] and gc.isenabled()


def test_what_the_layout_leaves_is_frozen_inside_a_run_not_collected_when_the_collector_resumes() -> None:
    """The sample's layout left 483,000 objects in cycles; the collection after the render took 0.37 s. Inside a
    run they stay frozen to its end (then given back); outside one, nothing is frozen."""
    from clustercert.report import render_pdf

    html = "<html><body>" + "".join(f"<p>row {i}</p>" for i in range(300)) + "</body></html>"
    gc.collect()
    render_pdf(html, Path("/nonexistent"))
    assert gc.get_freeze_count() == 0  # outside a run
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    with settling():
        before = gc.get_freeze_count()
        gc.callbacks.append(count)
        try:
            assert render_pdf(html, Path("/nonexistent")).startswith(b"%PDF")
            after = gc.get_freeze_count()
            assert gc.get_count()[0] < 100  # the collector resumed with nothing young to traverse
        finally:
            gc.callbacks.remove(count)
        assert after > before + 1_000 and collections == []
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("phase", ["efficiency", "scaling", "resilience"])
def test_each_phase_is_judged_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch, phase: str) -> None:
    """A judge builds what it keeps over the parsed evidence (millions of objects on a cluster): half of a
    512-GPU scaling judge's 3.2 s were collections traversing that evidence."""
    import flows.phases

    seen: list[bool] = []
    monkeypatch.setattr(flows.phases, f"judge_{phase}", lambda *args: seen.append(gc.isenabled()))
    task = getattr(flows.phases, f"judge_{phase}_task")
    inputs = type("Inputs", (), {"bundle": type("Bundle", (), {"spec": None})(), "catalog": None})()
    task.fn(inputs, {}, {}) if phase == "efficiency" else task.fn(inputs, {})
    assert seen == [False] and gc.isenabled()


def test_the_import_steps_leave_the_libraries_frozen_and_the_collector_as_it_was() -> None:
    """The steps a certification takes while its Prefect server starts: imports, then the libraries' objects frozen
    (later collections do not traverse them), with no full collection (the one that traversed them all)."""
    from flows.tactics import IMPORT_STEPS

    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        with settling():
            for step in IMPORT_STEPS:
                step()
                # what the step built is frozen before the collector resumes: the youngest generation starts
                # empty, so no collection traverses the import's objects before the next step
                assert gc.get_count()[0] < 100 and gc.isenabled()
            assert 2 not in collections
            assert gc.get_freeze_count() > 100_000
    finally:
        gc.callbacks.remove(count)
    assert gc.get_freeze_count() == 0


def test_each_import_step_freezes_what_it_built_before_the_collector_resumes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the steps no collection traverses the objects of the import before (0.15 s in the sample's run):
    each step freezes inside its pause. (The steps' imports may be done already in this process, so what is
    checked is where each freeze happens.)"""
    import flows.tactics

    frozen_while: list[bool] = []
    real = flows.tactics._freeze_imports

    def freeze() -> None:
        frozen_while.append(gc.isenabled())
        real()

    monkeypatch.setattr(flows.tactics, "_freeze_imports", freeze)
    with settling():
        for step in flows.tactics.IMPORT_STEPS:
            step()
    assert frozen_while == [False] * len(flows.tactics.IMPORT_STEPS) and gc.isenabled()


def test_kept_objects_are_frozen_without_a_collection_only_within_a_run() -> None:
    """keep() freezes what exists, with no collection first (the parse it follows made no garbage to find), and
    only inside settling(): a phase run on its own, or a Dask worker's task, freezes nothing nobody would unfreeze."""
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    assert gc.get_freeze_count() == 0
    keep()
    assert gc.get_freeze_count() == 0  # outside a run: nothing frozen
    gc.callbacks.append(count)
    try:
        with settling():
            with paused():
                parsed = [[i] for i in range(100_000)]
                keep()
            assert gc.get_freeze_count() >= 100_000 and collections == []
            with settling():  # a run inside a run: the inner one's end gives everything back
                pass
        assert gc.get_freeze_count() == 0 and len(parsed) == 100_000
        keep()
        assert gc.get_freeze_count() == 0  # the run is over: nothing frozen any more
    finally:
        gc.callbacks.remove(count)


def test_frozen_work_leaves_a_runs_frozen_objects_frozen_and_gives_back_its_own_only_outside_a_run() -> None:
    """gc.unfreeze() gives back every frozen object: validation's frozen() inside a run gave back the run's own (the
    libraries, the kept evidence), and the run's next settle() traversed them all again (422,430 objects, 0.30-0.46 s
    of the sample). Inside a run they stay frozen to its end; outside, what frozen() froze is given back."""
    gc.collect()
    assert gc.get_freeze_count() == 0
    with settling():
        kept = [[i] for i in range(1_000)]
        settle()
        before = gc.get_freeze_count()
        with frozen():
            assert gc.get_freeze_count() >= before
            made = [[i] for i in range(1_000)]
        assert gc.get_freeze_count() >= before  # still frozen: the run's next settle() need not traverse them
        with settling():  # a run inside the run: its end leaves the outer run's objects frozen
            pass
        assert gc.get_freeze_count() >= before
    assert gc.get_freeze_count() == 0  # the run's end gives all back
    with frozen():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0  # outside a run: nobody else would unfreeze them
    with pytest.raises(ValueError), frozen():
        raise ValueError("inside")
    assert gc.get_freeze_count() == 0 and len(kept) == len(made) == 1_000
