"""What the user gave (a folder's name, a cluster's name) is printed as given. The terminal's printer (rich) read
square brackets in it as its own markup: a file under a folder named `[bold]run` was printed without that part of
its name (and the rest in bold), and a key folder named `k[/b]x` ended `keys init` with an internal error."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import ROOT, run_cli

SAMPLE = ROOT / "evidence" / "gb200-seed"


def test_a_path_with_square_brackets_is_printed_as_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "[bold]run"
    folder.mkdir()
    log = folder / "128gpus-1.log"
    shutil.copyfile(SAMPLE / "collectives" / "cross-rack" / "128gpus-1.log", log)
    proc = run_cli("evidence", "parse", str(log))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"{log}: format nccl-tests (detected)"
    assert "\n  all_reduce: 128 ranks on 32 hosts, " in proc.stdout  # what the file holds, printed after it


def test_a_key_folder_whose_name_reads_as_a_closing_tag_is_printed_as_it_is(tmp_path: Path) -> None:
    keys = tmp_path / "k[" / "b]x"
    proc = run_cli("keys", "init", env={"CLUSTERCERT_KEY_DIR": str(keys)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"created keys in {keys}; manifest key SHA256:"), proc.stdout
    assert sorted(p.name for p in keys.iterdir()) == ["manifest_ed25519.pem", "manifest_ed25519.pub",
                                                      "pdf_signer.cert.pem", "pdf_signer.key.pem"]


def test_a_cluster_name_with_square_brackets_is_printed_as_it_is(tmp_path: Path) -> None:
    proc = run_cli("runs", "--reports-dir", str(tmp_path), "--cluster", "[bold]gb200")
    assert (proc.returncode, proc.stdout) == (0, "no runs of cluster [bold]gb200\n"), proc.stdout + proc.stderr
