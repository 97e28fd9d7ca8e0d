"""Start-up paid once: the light commands import none of the heavy stack (Prefect, Great Expectations, the report
renderer, pandas); those load only in the commands that use them. Run as users run them, in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT

HEAVY = ("prefect", "great_expectations", "weasyprint", "jinja2", "matplotlib", "pandas", "distributed", "dask")
_PROBE = """
import contextlib, io, json, sys
from clustercert.cli.app import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    rc = main(json.loads(sys.argv[1]))
print(json.dumps({"rc": rc, "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def _imported(argv: list[str]) -> tuple[int, set[str]]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.splitlines()[-1])
    return int(found["rc"]), set(found["modules"])


@pytest.mark.parametrize("argv", [["--help"], ["certify", "--help"], ["verify", "/no/such/run"],
                                  ["runs", "--reports-dir", "/no/such/reports"],
                                  ["evidence", "parse", "evidence/gb200-seed/collectives/full-scale/512gpus-1.log"]],
                         ids=["help", "certify-help", "verify-usage", "runs", "evidence-parse"])
def test_light_commands_import_nothing_heavy(argv: list[str]) -> None:
    rc, modules = _imported(argv)
    assert rc in (0, 2)
    assert modules & set(HEAVY) == set()


@pytest.mark.parametrize("argv", [["--help"], [], ["certify", "--out", "x"], ["verify"]],
                         ids=["help", "no-command", "unknown-option", "missing-argument"])
def test_help_and_usage_errors_read_no_settings(argv: list[str]) -> None:
    """The command list and a usage error need no settings model (pydantic-settings and the model: a quarter to a half
    of their start-up); the command list not even pydantic, which typer imports to read a command's arguments."""
    rc, modules = _imported(argv)
    assert rc == (0 if argv == ["--help"] else 2)
    assert "typer" in modules  # the probe sees real imports
    assert "pydantic_settings" not in modules
    if argv in (["--help"], []):
        assert "pydantic" not in modules


def test_verify_of_a_run_folder_loads_no_flow_validation_or_renderer(seed_certified: dict[str, Any]) -> None:
    rc, modules = _imported(["verify", str(seed_certified["run_dir"])])
    assert rc == 0
    assert "pyhanko" in modules  # the PDF signature is checked: the probe sees real imports
    assert modules & set(HEAVY) == set()
