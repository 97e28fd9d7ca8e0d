"""Task runners for the phase subflows: the default threads, or Prefect's Dask runner on a running cluster."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from prefect import Flow
from prefect.utilities.annotations import opaque

__all__ = ["bulky", "handed_back", "local_dask_cluster", "on_runner", "received"]

F = TypeVar("F", bound=Flow[Any, Any])


def bulky(value: Any) -> Any:
    """`value` as a task argument that Prefect need not walk: in `quote` when this flow's tasks run on threads
    (Prefect otherwise visits every element of every argument looking for futures: about 5 s per certification of
    the sample, most of it the resilience run's per-rank tables); as it is on Dask, whose serialisation turns the
    quote (a named tuple) into a plain tuple. Never wrap a future: its dependency would be lost."""
    from prefect.context import FlowRunContext
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect.utilities.annotations import quote

    context = FlowRunContext.get()
    if context is not None and isinstance(context.task_runner, ThreadPoolTaskRunner):
        return quote(value)
    return value


def handed_back(value: dict[str, Any]) -> opaque:
    """A flow's return value as Prefect hands it to the caller without walking it: on success the flow engine visits
    every element of what a flow returns looking for futures (13 s for a 512-GPU certification's results, 10 s more
    for its phase sections); these values hold none. The caller takes the value out with `received`."""
    return opaque(value)


def received(value: object) -> dict[str, Any]:
    """What a flow returned through `handed_back` (a value returned plainly passes through)."""
    found = value.unwrap() if isinstance(value, opaque) else value
    assert isinstance(found, dict)
    return found


def on_runner(subflow: F, dask_address: str | None) -> F:
    """`subflow` itself, or a copy whose tasks run on the Dask scheduler at `dask_address`."""
    if dask_address is None:
        return subflow
    from prefect_dask.task_runners import DaskTaskRunner

    runner: Any = DaskTaskRunner(address=dask_address)
    return subflow.with_options(task_runner=runner)  # type: ignore[return-value]


@contextmanager
def local_dask_cluster(workers: int) -> Iterator[str]:
    """A Dask LocalCluster of `workers` single-threaded worker processes; yields the scheduler's address."""
    from distributed import LocalCluster

    cluster = LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster:
        yield str(cluster.scheduler_address)
