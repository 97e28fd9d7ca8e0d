"""The command's entry point: main's exit code, and a heap left out of the collections at exit."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from clustercert.cli import app
from tests.conftest import ROOT


def test_entry_returns_mains_code_with_the_heap_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "main", lambda argv=None: 3)
    try:
        assert app.entry() == 3
        assert gc.get_freeze_count() > 0  # the interpreter's last collections leave these objects out
    finally:
        gc.unfreeze()


@pytest.mark.parametrize(("argv", "code"), [(["--help"], 0), (["no-such-command"], 2)])
def test_the_module_exits_with_mains_code(argv: list[str], code: int) -> None:
    proc = subprocess.run([sys.executable, "-m", "clustercert", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
