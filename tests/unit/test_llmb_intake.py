"""What llmb-run writes, taken in: an archive unpacked safely, each job's llmb-config read, a draft bundle.yaml."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest
import yaml

from clustercert.catalog import load_catalog
from clustercert.errors import EvidenceError, UsageError
from clustercert.evidence.archive import ARCHIVE_RECORD, unpack_archive
from clustercert.evidence.bundle import Bundle
from clustercert.evidence.llmb import draft_llmb, is_llmb_tree
from clustercert.parsers.llmb_config import read_llmb_config
from clustercert.simulate.llmb import LlmbJob, pack_llmb_archive, suite_jobs, write_llmb_install
from tests.conftest import ROOT

REFERENCES = ROOT / "references"
NODES = [f"gb-r{r}-n{n:02d}" for r in range(1, 3) for n in range(1, 5)]


@pytest.fixture(scope="module")
def gb200() -> object:
    return load_catalog("exemplar-gb200-26.08", REFERENCES)


def _install(tmp_path: Path, catalog: object, jobs: list[LlmbJob] | None = None) -> Path:
    chosen = jobs if jobs is not None else suite_jobs(catalog)[:2]  # type: ignore[arg-type]
    return write_llmb_install(tmp_path / "install", catalog, chosen, nodes=NODES)  # type: ignore[arg-type]


def _small(tmp_path: Path, catalog: object) -> Path:
    """An install tree holding the prescreen's one output only."""
    return write_llmb_install(tmp_path / "install", catalog, [], nodes=NODES, nccl=False)  # type: ignore[arg-type]


def _member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x\n", link: str = "") -> tuple[
        tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, len(data) if kind == tarfile.REGTYPE else 0, link
    return info, data


# --- the archive ---------------------------------------------------------------------------------------------------

def test_an_archive_is_unpacked_beside_it_with_its_own_sha256(tmp_path: Path, gb200: object) -> None:
    archive = pack_llmb_archive(_install(tmp_path, gb200), tmp_path)
    unpacked = unpack_archive(archive, member_limit=1 << 30)
    assert unpacked.folder == tmp_path / "llmb-archive_26.08.00_20261201T090000Z"
    assert unpacked.sha256 == hashlib.sha256(archive.read_bytes()).hexdigest()  # oracle: the file's own bytes
    assert (unpacked.folder / ARCHIVE_RECORD).read_text() == f"{unpacked.sha256}  {archive.name}\n"
    # llmb-run's top folder is left out; what it archives is there, byte for byte
    config = next(unpacked.folder.glob("pretrain_*/experiments/*/*/llmb-config_*.yaml"))
    original = tmp_path / "install" / "workloads" / config.relative_to(unpacked.folder)
    assert config.read_bytes() == original.read_bytes()
    assert is_llmb_tree(unpacked.folder)
    again = unpack_archive(archive, member_limit=1 << 30)  # the same bytes: the folder is used again
    assert again.reused and again.sha256 == unpacked.sha256


@pytest.mark.parametrize(("member", "says"), [
    (_member("llmb-archive-20261201T090000Z/../x"), "member 'llmb-archive-20261201T090000Z/../x': expected a path "
                                                   "inside the archive"),
    (_member("../x"), "member '../x'"),
    (_member("/etc/passwd"), "member '/etc/passwd': expected a relative path"),
    (_member("llmb-archive-20261201T090000Z/link", tarfile.SYMTYPE, link="/etc/passwd"),
     "got a symbolic link (to '/etc/passwd')"),
    (_member("llmb-archive-20261201T090000Z/hard", tarfile.LNKTYPE, link="llmb-archive-20261201T090000Z/a"),
     "got a hard link"),
    (_member("llmb-archive-20261201T090000Z/dev", tarfile.CHRTYPE), "got a device"),
    (_member("llmb-archive-20261201T090000Z/fifo", tarfile.FIFOTYPE), "got a FIFO"),
])
def test_a_member_that_could_leave_the_folder_or_is_no_file_is_refused_by_name(
        tmp_path: Path, gb200: object, member: tuple[tarfile.TarInfo, bytes], says: str) -> None:
    archive = pack_llmb_archive(_small(tmp_path, gb200), tmp_path, extra=[member])
    with pytest.raises(EvidenceError) as caught:
        unpack_archive(archive, member_limit=1 << 30)
    assert says in str(caught.value) and str(archive) in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["install", archive.name]  # nothing left behind
    assert not (tmp_path / "x").exists()


def test_caps_on_members_and_size_name_the_member(tmp_path: Path, gb200: object) -> None:
    big = pack_llmb_archive(_small(tmp_path, gb200), tmp_path,
                            extra=[_member("llmb-archive-20261201T090000Z/big.out", data=b"y" * 5000)])
    with pytest.raises(EvidenceError, match=r"member 'llmb-archive-20261201T090000Z/big.out': expected at most"):
        unpack_archive(big, member_limit=4096)
    with pytest.raises(EvidenceError, match=r"expected at most 2 members, got more \(member "):
        unpack_archive(big, member_limit=1 << 30, max_members=2)
    twice = [_member("llmb-archive-20261201T090000Z/a"), _member("llmb-archive-20261201T090000Z/a")]
    (tmp_path / "d").mkdir()
    dup = pack_llmb_archive(_small(tmp_path / "d", gb200), tmp_path / "d", extra=twice)
    with pytest.raises(EvidenceError, match="expected each path once"):
        unpack_archive(dup, member_limit=1 << 30)


def test_a_file_that_is_not_a_zstd_tar_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "llmb-archive_26.08.00_x.tar.zst"
    fake.write_bytes(b"not zstd at all\n")
    with pytest.raises(EvidenceError, match="expected a zstd-compressed tar archive"):
        unpack_archive(fake, member_limit=1 << 30)
    assert not (tmp_path / "llmb-archive_26.08.00_x").exists()


def test_a_folder_in_the_way_is_not_overwritten(tmp_path: Path, gb200: object) -> None:
    archive = pack_llmb_archive(_small(tmp_path, gb200), tmp_path)
    (tmp_path / "llmb-archive_26.08.00_20261201T090000Z").mkdir()
    with pytest.raises(UsageError, match="was not unpacked from this archive"):
        unpack_archive(archive, member_limit=1 << 30)


# --- llmb-config ---------------------------------------------------------------------------------------------------

def test_llmb_config_fields_and_their_lines(tmp_path: Path, gb200: object) -> None:
    job = LlmbJob("pretrain_llama3.1_70b", "fp8", 512, 4100777, model_overrides={"num_layers": 40},
                  mbridge_args=("--use-te-rng-tracker",), profile=True)
    install = _install(tmp_path, gb200, [job])
    path = next(install.rglob("llmb-config_4100777.yaml"))
    config = read_llmb_config(path, "c.yaml")
    assert (config.job_id, config.release, config.dtype, config.scale, config.gpu_type) == (
        "4100777", "26.08.00", "fp8", 512, "gb200")
    assert config.framework == "megatron_bridge" and config.images == ("nvcr.io#nvidia/nemo:26.06.01",)
    assert config.model_overrides == {"num_layers": 40} and config.mbridge_args == ("--use-te-rng-tracker",)
    assert config.profile_enabled and not config.proxy
    lines = path.read_text().splitlines()
    assert lines[config.line("job_config.model_overrides") - 1].strip() == "model_overrides:"  # type: ignore[operator]
    assert lines[config.line("workload_info.gsw_version") - 1].strip() == "gsw_version: 26.08.00"  # type: ignore[operator]


def test_a_bad_llmb_config_is_refused_naming_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "llmb-config_12.yaml"
    path.write_text("job_info:\n  job_id: '12'\nworkload_info:\n  framework: megatron_bridge\n  gsw_version: 26.08.00\n"
                    "model_info:\n  model_name: x\n  dtype: fp8\n  scale: many\n  gpu_type: gb200\n")
    with pytest.raises(EvidenceError) as caught:
        read_llmb_config(path, "c/llmb-config_12.yaml")
    assert str(caught.value).startswith(
        "c/llmb-config_12.yaml line 9 field 'model_info.scale': Input should be a valid integer")
    path.write_text(path.read_text().replace("scale: many", "scale: 8").replace("'12'", "'13'"))
    with pytest.raises(EvidenceError, match=r"the job id the file name carries \(12\), got 13"):
        read_llmb_config(path, "c/llmb-config_12.yaml")


# --- the draft -----------------------------------------------------------------------------------------------------

def test_the_draft_of_a_suite_needs_only_the_provider(tmp_path: Path, gb200: object) -> None:
    jobs = suite_jobs(gb200)  # type: ignore[arg-type]
    jobs[0] = LlmbJob(**{**jobs[0].__dict__, "retries": 2})
    install = write_llmb_install(tmp_path / "install", gb200, jobs, nodes=NODES)  # type: ignore[arg-type]
    draft = draft_llmb(install, REFERENCES)
    data = yaml.safe_load(draft.text)
    assert draft.placeholders == ['provider: "FILL_IN"']
    assert data["catalog"] == "exemplar-gb200-26.08" and data["recipe_version"] == "26.08.00"
    assert data["cluster"]["name"] == "example-gb200-su1"
    assert data["system"] == {"gpu": "gb200-nvl72", "gpus_per_node": 4, "nodes": NODES}
    assert draft.optional == ["system.interconnect"] and "  # interconnect: {scale_out: <" in draft.text
    training = [r for r in data["runs"] if r["kind"] == "training"]
    suite = {(e.workload, e.precision.value, e.gpus) for e in gb200.spec.suite}  # type: ignore[attr-defined]
    assert {(r["workload"], r["precision"], r["gpus"]) for r in training} == suite
    first = next(r for r in training if r["id"].endswith(f"job{jobs[0].job_id}"))
    assert first["files"][0].endswith(f"_{jobs[0].job_id}_1.out") and first["retries"][0].endswith("_0.out")
    row = gb200.spec.recipes[jobs[0].workload].configuration(jobs[0].dtype, 512)  # type: ignore[attr-defined]
    assert (first["gbs"], first["seq_len"], first["parallelism"]["tp"]) == (row.gbs, row.seq_len, row.tp)
    collectives = [r for r in data["runs"] if r["kind"] == "collective"]
    assert len(collectives) == 21  # three sweeps of seven nccl-tests outputs
    assert {r["scope"] for r in collectives} == {"full-scale", "nvlink-domain", "pair"}
    assert any("microbenchmark_system_info" in a for a in data["attachments"])
    data["cluster"]["provider"] = "Example Cloud"
    Bundle.model_validate(data)  # the filled draft is a valid bundle.yaml


def test_a_job_without_a_log_is_listed_not_drafted(tmp_path: Path, gb200: object) -> None:
    install = _install(tmp_path, gb200)
    for log in install.rglob("log-*.out"):
        log.unlink()
        break
    draft = draft_llmb(install, REFERENCES)
    assert sum(1 for _ in yaml.safe_load(draft.text)["runs"] if _["kind"] == "training") == 1
    assert any("no training log beside it" in why for _, why in draft.unused)


def test_tar_members_are_streamed_not_listed_first(tmp_path: Path) -> None:
    """A member after a refused one is never written: the stream stops at the first refusal."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name in ("ok", "../bad", "after"):
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"z"))
    import zstandard

    archive = tmp_path / "a.tar.zst"
    archive.write_bytes(zstandard.ZstdCompressor().compress(data.getvalue()))
    with pytest.raises(EvidenceError, match=r"member '\.\./bad'"):
        unpack_archive(archive, member_limit=10)
    assert not (tmp_path / "a").exists() and not list(tmp_path.glob(".a.partial-*"))
