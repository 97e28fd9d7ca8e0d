"""Every usage error of every command, as users meet them: exit 2 and Click's message naming the problem on stderr,
never "internal error" (exit 4) or a traceback. The cases are derived from the command tree itself, so a new
command or option is covered without editing this file. No case starts a certification."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer.main

from clustercert.cli.app import app
from tests.conftest import run_cli


def _leaves(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    subs = getattr(command, "commands", None)
    if subs:
        for name, sub in subs.items():
            yield from _leaves(sub, (*path, name))
    else:
        yield path, command


def _groups(command: Any, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    subs = getattr(command, "commands", None)
    if subs:
        yield path
        for name, sub in subs.items():
            yield from _groups(sub, (*path, name))


ROOT_COMMAND = typer.main.get_command(app)
LEAVES = dict(_leaves(ROOT_COMMAND, ()))


def _required_args(command: Any, omit: str | None = None) -> list[str]:
    """Placeholder values for every required parameter of `command` except `omit` (arguments first)."""
    args: list[str] = []
    options: list[str] = []
    for p in command.params:
        if not p.required or p.name == omit:
            continue
        if p.param_type_name == "argument":
            args.append("placeholder")
        else:
            options += [p.opts[0], "placeholder"]
    return [*args, *options]


def _cases() -> Iterator[Any]:
    for path, command in LEAVES.items():
        name = " ".join(path)
        yield pytest.param([*path, "--no-such-option"], "No such option: --no-such-option", id=f"{name}-unknown")
        for p in command.params:
            if p.param_type_name == "option" and not p.is_flag:
                opt = p.opts[0]
                yield pytest.param([*path, *_required_args(command, omit=p.name), opt],
                                   f"Option '{opt}' requires an argument", id=f"{name}-{opt}-without-value")
            if p.required:
                what = f"Missing argument '{p.name}'" if p.param_type_name == "argument" \
                    else f"Missing option '{p.opts[0]}'"
                yield pytest.param([*path, *_required_args(command, omit=p.name)], what, id=f"{name}-{p.name}-missing")
        if not any(p.param_type_name == "argument" for p in command.params):
            yield pytest.param([*path, *_required_args(command), "stray"], "Got unexpected extra argument",
                               id=f"{name}-extra-argument")
    for group in _groups(ROOT_COMMAND, ()):
        name = " ".join(group) or "clustercert"
        yield pytest.param([*group, "no-such-command"], "No such command 'no-such-command'",
                           id=f"{name}-unknown-command")
        yield pytest.param([*group, "--no-such-option"], "No such option: --no-such-option",
                           id=f"{name}-unknown-option")
    # Values Click converts before the command runs.
    yield pytest.param(["simulate", "--out", "x", "--gpus", "many"], "Invalid value for '--gpus'", id="gpus-not-int")
    yield pytest.param(["simulate", "--out", "x", "--gpus", "8"], "Invalid value for '--gpus'", id="gpus-below-min")
    yield pytest.param(["simulate", "--out", "x", "--repeats", "11"], "Invalid value for '--repeats'",
                       id="repeats-above-max")
    yield pytest.param(["evidence", "parse", "x", "--interval-s", "soon"], "Invalid value for '--interval-s'",
                       id="interval-not-float")
    yield pytest.param(["server", "--port", "0"], "Invalid value for '--port'", id="port-below-min")
    yield pytest.param(["server", "--port", "65536"], "Invalid value for '--port'", id="port-above-max")


@pytest.mark.parametrize(("argv", "message"), list(_cases()))
def test_usage_error_exits_2_naming_the_problem(argv: list[str], message: str) -> None:
    proc = run_cli(*argv, timeout=60)
    assert proc.returncode == 2, (argv, proc.returncode, proc.stderr)
    assert message in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("Error: "), proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


_GROUPED = sorted({path[-1] for path in LEAVES if len(path) == 2} - set(ROOT_COMMAND.commands))


@pytest.mark.parametrize("name", _GROUPED)
def test_a_groups_command_given_alone_is_named_with_its_group(name: str) -> None:
    """`clustercert seal` (or `init`, in two groups): Click found no look-alike top-level command to suggest, or
    suggested the wrong ones; the message names each group's command, derived from the command tree."""
    proc = run_cli(name, timeout=60)
    groups = sorted(path[0] for path in LEAVES if len(path) == 2 and path[1] == name)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1] == (f"Error: No such command '{name}'. Did you mean "
                                            + " or ".join(f"'clustercert {g} {name}'" for g in groups) + "?")


def test_every_command_is_covered() -> None:
    """The tree walk finds the commands the README documents (a broken walk would test nothing)."""
    names = {" ".join(p) for p in LEAVES}
    assert {"certify", "verify", "simulate", "keys init", "rerun", "runs", "schedule", "server", "evidence seal",
            "evidence check", "evidence parse"} <= names
    assert {"init", "seal", "check", "parse"} <= set(_GROUPED)  # `init` in two groups: evidence and keys


def test_help_exits_0() -> None:
    proc = run_cli("--help")
    assert proc.returncode == 0 and "certify" in proc.stdout


@pytest.mark.parametrize("group", sorted(_groups(ROOT_COMMAND, ())), ids=lambda g: " ".join(g) or "clustercert")
def test_each_listing_names_every_command_in_a_whole_sentence_at_80_columns(group: tuple[str, ...]) -> None:
    """`--help` at 80 columns: one line per command, its summary a whole sentence (Click cut each at about 45
    characters: "Certify BUNDLE: exit 0 CERTIFIED, 1 NOT CERTIFIED, 2..."); certify first at the top."""
    proc = run_cli(*group, "--help", env={"COLUMNS": "80"}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    listing = proc.stdout.split("Commands:\n", 1)[1].splitlines()
    command = ROOT_COMMAND
    for name in group:
        command = command.commands[name]
    assert [line.split()[0] for line in listing] == list(command.commands)
    assert all(len(line) <= 80 and line.endswith(".") and "..." not in line for line in listing), listing
    if not group:
        assert listing[0].split()[:2] == ["certify", "Certify"]
