"""`evidence init` on one real nccl-tests output at a time (and on outputs built from them): its draft passes its own
`evidence check`, or asks (FILL_IN) for what the file cannot say (issue 56). Run as a user runs them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from clustercert.evidence.bundle import PLACEHOLDER
from tests.conftest import run_cli


def _init_and_check(folder: Path) -> tuple[dict[str, object], str, int, str]:
    """init then check, each as its own command: the draft, init's output, check's exit code and output."""
    init = run_cli("evidence", "init", str(folder))
    assert init.returncode == 0, init.stderr
    draft = yaml.safe_load((folder / "bundle.yaml").read_text())
    check = run_cli("evidence", "check", str(folder))
    return draft, init.stdout, check.returncode, check.stdout + check.stderr


@pytest.mark.parametrize(("name", "gpus", "scope"), [
    ("nccl_N10_G8.log", 80, "full-scale"), ("nccl_N10_G1.log", 10, "full-scale"),
    ("nccl_N1_G8_cnode3-002.log", 8, "nvlink-domain"), ("nccl_N2_G1_cnode2-001_cnode2-002.log", 2, "pair"),
])
def test_the_draft_of_each_real_output_passes_its_own_check(real_samples: Path, tmp_path: Path, name: str,
                                                             gpus: int, scope: str) -> None:
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(real_samples / "nccl-tests" / name, folder / name)
    draft, said, code, shown = _init_and_check(folder)
    assert "nothing to fill in" in said, said
    (run,) = draft["runs"]  # type: ignore[index]
    assert (run["gpus"], run["scope"]) == (gpus, scope)  # SOURCES.md: N nodes x G GPUs; one file's hosts are all
    assert code == 0, shown


def test_the_draft_of_a_real_aborted_pair_passes_and_check_names_the_abort(real_samples: Path,
                                                                          tmp_path: Path) -> None:
    name = "nccl_N2_G4_cnode2-001_cnode2-003.log"  # SOURCES.md: alltoall aborted by NCCL, sendrecv complete
    folder = tmp_path / "pair"
    folder.mkdir()
    shutil.copy(real_samples / "nccl-tests" / "cluster00-pairwise-g4" / name, folder / name)
    draft, said, code, shown = _init_and_check(folder)
    assert "nothing to fill in" in said, said
    (run,) = draft["runs"]  # type: ignore[index]
    assert (run["gpus"], run["scope"], run["nodes"]) == (8, "pair", ["cnode2-001", "cnode2-003"])
    # the draft is right; the evidence holds a test NCCL aborted, which check names (exit 3: a failed measurement)
    assert code == 3 and "alltoall test aborted" in shown and "remote process exited" in shown, shown


def test_a_table_without_rank_lines_asks_for_its_scope_and_gpus(real_samples: Path, tmp_path: Path) -> None:
    text = (real_samples / "nccl-tests" / "nccl_N1_G8_cnode3-002.log").read_text()
    folder = tmp_path / "headless"
    folder.mkdir()
    (folder / "all_reduce.log").write_text("\n".join(
        line for line in text.splitlines() if not line.startswith(("#  Rank", "# nThread", "# Using devices"))) + "\n")
    draft, said, code, shown = _init_and_check(folder)
    (run,) = draft["runs"]  # type: ignore[index]
    assert (run["scope"], run["gpus"]) == (PLACEHOLDER, PLACEHOLDER)
    assert draft["system"]["nodes"] == [PLACEHOLDER]  # type: ignore[index]
    assert "do not print all their rank lines" in (folder / "bundle.yaml").read_text()
    assert "FILL_IN" in said and code == 3 and "FILL_IN" in shown  # asked, never drafted as a wrong fact


def test_tests_at_several_scales_in_one_file_ask_for_the_gpu_count(real_samples: Path, tmp_path: Path) -> None:
    # two real outputs appended, 80 and 8 ranks: one run cannot hold both GPU counts
    folder = tmp_path / "scales"
    folder.mkdir()
    (folder / "both.log").write_text((real_samples / "nccl-tests" / "nccl_N10_G8.log").read_text()
                                     + (real_samples / "nccl-tests" / "nccl_N1_G8_cnode3-002.log").read_text())
    draft, _, code, _ = _init_and_check(folder)
    (run,) = draft["runs"]  # type: ignore[index]
    assert run["gpus"] == PLACEHOLDER and "tests at 8, 80 ranks" in (folder / "bundle.yaml").read_text()
    assert code == 3


def test_b200_and_gb200_evidence_in_one_folder_is_a_question(real_samples: Path, tmp_path: Path) -> None:
    text = (real_samples / "nccl-tests" / "nccl_N1_G8_cnode3-002.log").read_text()
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.log").write_text(text.replace("NVIDIA H100 80GB HBM3", "NVIDIA B200"))
    gb200 = text.replace("NVIDIA H100 80GB HBM3", "NVIDIA GB200").replace("cnode3-002", "gb-r1-n01")
    (folder / "b.log").write_text(gb200)
    init = run_cli("evidence", "init", str(folder))
    assert init.returncode == 0, init.stderr
    draft = yaml.safe_load((folder / "bundle.yaml").read_text())
    assert draft["system"]["gpu"] == PLACEHOLDER
    assert "the files name GPUs of 2 systems (b200, gb200-nvl72" in (folder / "bundle.yaml").read_text()


def _gb200(real_samples: Path, folder: Path, hosts: list[str]) -> str:
    """nccl_N10_G1.log as if run on GB200 trays named `hosts` (its 10 hosts renamed in order): the draft's text."""
    text = (real_samples / "nccl-tests" / "nccl_N10_G1.log").read_text()
    text = text.replace("NVIDIA H100 80GB HBM3", "NVIDIA GB200")
    for n, host in zip(range(2, 12), hosts, strict=True):
        text = text.replace(f"cnode3-{n:03d}", host)
    folder.mkdir()
    (folder / "gb.log").write_text(text)
    init = run_cli("evidence", "init", str(folder))
    assert init.returncode == 0, init.stderr
    return (folder / "bundle.yaml").read_text()


def test_nvl72_domains_come_from_the_rack_in_host_names_or_are_asked_for(real_samples: Path, tmp_path: Path) -> None:
    racks = [f"gb-r{r}-n{n:02d}" for r in (1, 2) for n in range(1, 6)]
    draft = yaml.safe_load(_gb200(real_samples, tmp_path / "racks", racks))
    assert draft["system"]["gpu"] == "gb200-nvl72"
    assert draft["system"]["nvlink_domains"] == [{"name": "r1", "nodes": racks[:5]}, {"name": "r2", "nodes": racks[5:]}]
    plain = _gb200(real_samples, tmp_path / "plain", [f"node{n:02d}" for n in range(10)])
    assert yaml.safe_load(plain)["system"]["nvlink_domains"] == PLACEHOLDER  # never "0 NVLink domains" as a fact
    assert "one NVLink domain is at most 18 nodes x 4 GPUs" in plain
