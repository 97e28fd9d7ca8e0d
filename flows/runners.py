"""Task runners for the phase subflows: the default threads, or Prefect's Dask runner on a running cluster."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from prefect import Flow
from prefect.utilities.annotations import opaque

__all__ = ["Parcel", "bulky", "handed_back", "local_dask_cluster", "on_runner", "on_threads", "received"]

F = TypeVar("F", bound=Flow[Any, Any])


def bulky(value: Any) -> Any:
    """`value` as a task argument that Prefect need not walk: in `quote` when this flow's tasks run on threads
    (Prefect otherwise visits every element of every argument looking for futures: seconds per certification,
    most of it in the resilience run's per-rank tables); as it is on Dask, whose serialisation turns the
    quote (a named tuple) into a plain tuple. Never wrap a future: its dependency would be lost."""
    from prefect.context import FlowRunContext
    from prefect.utilities.annotations import quote

    if FlowRunContext.get() is not None and on_threads():
        return quote(value)
    return value


def on_threads() -> bool:
    """Whether this flow's tasks run on threads in this process (outside a flow: yes), not on a Dask cluster."""
    from prefect.context import FlowRunContext
    from prefect.task_runners import ThreadPoolTaskRunner

    context = FlowRunContext.get()
    return context is None or isinstance(context.task_runner, ThreadPoolTaskRunner)


def handed_back(value: dict[str, Any]) -> opaque:
    """A flow's return value as Prefect hands it to the caller without walking it: on success the flow engine visits
    every element of what a flow returns looking for futures (a cluster's results and phase sections are millions
    of them); these values hold none. The caller takes the value out with `received`."""
    return opaque(value)


class Parcel:
    """A task's return value as Prefect keeps it without walking it, and persists it for a resumed run: on success
    the task engine visits each element of what a task returns to link it to the task's state (a sweep's thousands
    of parsed files), but not the inside of an object that is no collection,
    dataclass or model. (Prefect's `opaque` does not survive the pickling of a persisted result: it comes back
    wrapping a tuple.) The caller takes the value out with `received`."""

    __slots__ = ("value",)

    def __init__(self, value: dict[str, Any]) -> None:
        self.value = value

    def __reduce__(self) -> tuple[type[Parcel], tuple[dict[str, Any]]]:
        return Parcel, (self.value,)


def received(value: object) -> dict[str, Any]:
    """What a flow returned through `handed_back`, or a task as a `Parcel` (a value returned plainly passes
    through)."""
    found = value.unwrap() if isinstance(value, opaque) else value.value if isinstance(value, Parcel) else value
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

    # no dashboard, and the scheduler's HTTP endpoint on a free port: its default 8787 may be another cluster's
    cluster = LocalCluster(  # type: ignore[no-untyped-call]
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
        scheduler_kwargs={"dashboard": False, "dashboard_address": ":0"})
    with cluster:
        yield str(cluster.scheduler_address)
