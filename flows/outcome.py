"""A flow run marked with its certification's outcome where Prefect's UI shows it: its final state named by the
outcome, with why in its message, and tags to filter the runs page by.

The state stays of type COMPLETED: the run did its work, whatever the cluster's outcome; a NOT CERTIFIED cluster is
a finding, not a failed run (Prefect would retry it, and a scheduled run's parent would fail with it)."""

from __future__ import annotations

from typing import Any

from prefect.client.schemas.objects import State
from prefect.states import Completed

from flows.digest import run_tags, state_message

__all__ = ["outcome_state", "tag_run"]


def tag_run(results: dict[str, Any]) -> list[str]:
    """Add the outcome's tags (`flows.digest.run_tags`) to the current flow run, keeping its own; returns them
    (none when the API refused them: a warning in the run's log says why)."""
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return []
    import httpx
    from prefect import get_run_logger

    tags = list(dict.fromkeys([*context.flow_run.tags, *run_tags(results)]))
    try:
        with get_client(sync_client=True) as client:
            client.update_flow_run(context.flow_run.id, tags=tags)
    except httpx.HTTPError as exc:  # the report is signed already: tags missing are no reason to fail the run
        get_run_logger().warning(f"the run's outcome tags were not set: {exc}")
        return []
    return tags


def outcome_state(results: dict[str, Any], value: Any) -> State[Any]:
    """The final state a flow returns to end named by the outcome (CERTIFIED, NOT CERTIFIED, INCOMPLETE) with why as
    its message, its result `value`; the run tagged first (`tag_run`)."""
    tag_run(results)
    return Completed(name=results["outcome"], message=state_message(results), data=value)
