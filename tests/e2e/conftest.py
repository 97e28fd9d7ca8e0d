"""The shipped seed sample certified once per session, shared by every end-to-end test that reads it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, run_cli


@pytest.fixture(scope="session")
def seed_certified(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`certify --json --redact` of a copy of evidence/gb200-seed: exit code, output, run folder, results."""
    work = tmp_path_factory.mktemp("seed")
    bundle = work / "bundle"
    shutil.copytree(ROOT / "evidence" / "gb200-seed", bundle)
    proc = run_cli("certify", str(bundle), "--json", "--redact", "--reports-dir", str(work / "reports"))
    out = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    run_dir = Path(out["run_dir"]) if "run_dir" in out else None
    results = json.loads((run_dir / "results.json").read_text()) if run_dir is not None else {}
    return {"bundle": bundle, "run_dir": run_dir, "out": out, "stderr": proc.stderr, "rc": proc.returncode,
            "results": results}
