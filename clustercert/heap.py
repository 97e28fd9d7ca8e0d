"""The run's heap and CPython's cyclic garbage collector: what a certification builds to keep is left out of the
collections that would traverse it again and again and find nothing to free.

At cluster scale a certification holds millions of objects from one stage to the next (a cluster's parsed
collectives, its results), and the collector traverses every tracked object on each full collection, which the
allocations of each later stage keep setting off. Two remedies, each used where it pays:
- `settle()` at the end of a stage collects once and moves what survives to the permanent generation
  (`gc.freeze()`), so later collections traverse only what later stages allocate; reference counting still frees
  what is dropped (the parsed evidence after validation). `settling()` gives the frozen objects back to the
  collector when the run ends (`gc.unfreeze()`): a process that certifies again and again keeps none of them.
- `paused()` around work that builds what it keeps and makes almost no cyclic garbage (a document's layout, a
  phase's parsed files): no collection runs inside it; the first one after it frees what it left."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["frozen", "keep", "paused", "settle", "settling"]

_SETTLING = [0]  # how many settling() blocks this process is in


def settle() -> None:
    """Collect the garbage so far; what survives is not traversed by later collections (until `settling` ends)."""
    gc.collect()
    gc.freeze()


def keep() -> None:
    """Inside `settling()`, what exists now is kept to the run's end: frozen without a collection first. For the end
    of work done under `paused()` whose objects are kept, not dropped (a phase's parsed files): the first
    collections after the pause would traverse each of them, generation after generation, and find next to nothing
    to free. Outside `settling()` (a phase run on its own, a Dask worker) it does nothing: nobody would unfreeze
    them."""
    if _SETTLING[0]:
        gc.freeze()


@contextmanager
def settling() -> Iterator[None]:
    """A run whose stages `settle()`: every object frozen during it is given back to the collector at its end (the
    outermost one's: a run inside a run keeps the outer run's frozen objects frozen)."""
    _SETTLING[0] += 1
    try:
        yield
    finally:
        _SETTLING[0] -= 1
        if not _SETTLING[0]:
            gc.unfreeze()


@contextmanager
def frozen() -> Iterator[None]:
    """What exists now is left out of the collections inside (frozen), so they traverse only what the work inside
    allocates; at the end it is given back to the collector, unless a `settling()` run is under way, which keeps it
    frozen to its own end. `gc.unfreeze()` gives back every frozen object, not only these: inside a run it would
    give back what the run had frozen too (the libraries' objects, the kept evidence), which its next `settle()`
    would then traverse again."""
    gc.freeze()
    try:
        yield
    finally:
        if not _SETTLING[0]:
            gc.unfreeze()


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic garbage collection inside (it resumes after, as it was: a pause inside a pause is one pause)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
