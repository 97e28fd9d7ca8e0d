"""What a flow returns reaches its caller without Prefect walking it (the visit the flow engine makes on success)."""

from __future__ import annotations

from typing import Any

from prefect.futures import resolve_futures_to_states
from prefect.utilities.collections import visit_collection

from flows.runners import Parcel, handed_back, received


def _visits(value: Any) -> int:
    seen = [0]

    def count(expr: Any, context: dict[str, Any]) -> Any:
        seen[0] += 1
        return expr

    visit_collection(value, visit_fn=count, return_data=False, context={})
    return seen[0]


def test_a_returned_value_is_not_walked_and_comes_back_whole() -> None:
    results = {"phases": {"scaling": {"collectives": [{"busbw": float(i), "ranks": [i, i + 1]} for i in range(1000)]}}}
    assert _visits(results) > 3000  # what the flow engine's future search visits in a plain return value
    wrapped = handed_back(results)
    assert _visits(wrapped) <= 2  # the annotation and its value, not its contents
    resolved = resolve_futures_to_states(wrapped)  # as Prefect's handle_success does with a flow's return value
    assert received(resolved) is results
    assert received({"outcome": "CERTIFIED"}) == {"outcome": "CERTIFIED"}  # a plain return passes through


def test_a_tasks_parsed_evidence_is_not_walked_when_the_task_engine_links_it_and_survives_persisting() -> None:
    import cloudpickle

    parsed = {f"pair-{i}": {"tests": [{"rows": [i, i + 1]}]} for i in range(1000)}
    # what the task engine visits when a task succeeds (link_state_to_task_run_result: one level deep)
    seen = [0]

    def count(expr: Any) -> None:
        seen[0] += 1

    visit_collection(parsed, visit_fn=count, max_depth=1)
    assert seen[0] > 1000
    seen[0] = 0
    parcel = Parcel(parsed)
    visit_collection(parcel, visit_fn=count, max_depth=1)
    assert seen[0] == 1
    assert received(parcel) is parsed
    # a persisted result is pickled (cloudpickle) and read back by a resumed run
    assert received(cloudpickle.loads(cloudpickle.dumps(parcel))) == parsed
