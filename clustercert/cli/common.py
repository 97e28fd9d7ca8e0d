"""What the commands of the command line share: the two consoles, the exit-code carrier, a quiet Prefect, the clock
read once, and commands whose many options are one dataclass."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import inspect
import os
import re
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from rich.console import Console

__all__ = ["Exit", "err", "fit_widths", "now", "options_command", "out", "printable", "quiet_prefect"]

out = Console(highlight=False, soft_wrap=True, markup=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)

Options = TypeVar("Options")

# Control characters (C0, DEL, C1): a file or folder name holding ESC would drive the terminal it is printed on.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with every control character written as its escape (`\\x1b`), so that a name an audited party
    chose is shown, never obeyed, by the terminal; text without one is itself."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def fit_widths() -> None:
    """A console told it is zero (or fewer) columns wide (`COLUMNS=0`) prints at the width of a pipe instead: at
    zero it printed nothing."""
    for console in (out, err):
        if console.width <= 0:
            console.width = 80


class Exit(Exception):
    """A command's exit code, returned by `clustercert.cli.app.main` (Click's own Exit is swallowed there)."""

    def __init__(self, code: int) -> None:
        self.code = code


def quiet_prefect() -> None:
    """Prefect's console logs off for a certification: findings and errors are printed by clustercert itself, and
    Prefect's logs would repeat them with tracebacks. Its logs still reach the Prefect API when a server is set."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "CRITICAL")
    # Prefect's internal services log at ERROR on their own logger ("EventsWorker failed to process item").
    os.environ.setdefault("PREFECT_INTERNAL_LOGGING_LEVEL", "CRITICAL")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_LOGGING_LOG_PRINTS", "false")


def now() -> dt.datetime:
    """The command's one reading of the clock, to the second (run ids, key dates and expiry are said in seconds)."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def options_command(options: type[Options]) -> Callable[[Callable[[Options], None]], Callable[..., None]]:
    """A Typer command taking the fields of the dataclass `options` as its parameters (each field's annotated type,
    Typer's Argument or Option included, and its default, in the fields' order), which calls the decorated function
    with one instance of `options`: a command with many options keeps one parameter. Its name and help are the
    decorated function's."""
    hints = typing.get_type_hints(options, include_extras=True)
    fields = dataclasses.fields(options)  # type: ignore[arg-type]
    parameters = [inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=hints[f.name],
                                    default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default)
                  for f in fields]

    def decorate(command: Callable[[Options], None]) -> Callable[..., None]:
        @functools.wraps(command)
        def typed(**given: Any) -> None:
            command(options(**given))

        # what Typer reads (inspect.signature stops at a __signature__, get_type_hints reads __annotations__)
        typed.__signature__ = inspect.Signature(parameters, return_annotation=None)  # type: ignore[attr-defined]
        typed.__annotations__ = {**{f.name: hints[f.name] for f in fields}, "return": None}
        return typed

    return decorate
