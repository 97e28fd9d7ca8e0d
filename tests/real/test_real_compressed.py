"""A real file an archive compressed (gzip, xz, bzip2, zip; zstd and lz4 by their frame's first bytes) is refused by
every parser and by detection with one line that names the compression and the command that gives the text back;
never read as garbage text, never an unknown format. The evidence is read as the tool wrote it."""

from __future__ import annotations

import bz2
import gzip
import lzma
import zipfile
from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import inspect_evidence
from tests.conftest import run_cli

NCCL = "nccl-tests/nccl_N1_G8_cnode3-002.log"
# zstd's and lz4's frame magic numbers (RFC 8878 section 3.1.1; the LZ4 frame format, "Magic Number"), then bytes
# of no meaning: detection reads the first bytes only (neither tool is in Python's standard library)
_ZSTD_MAGIC, _LZ4_MAGIC = b"\x28\xb5\x2f\xfd", b"\x04\x22\x4d\x18"


def _packed(kind: str, data: bytes, path: Path) -> Path:
    """`data` compressed as `kind` would write it, at `path`."""
    if kind == "gzip":
        path.write_bytes(gzip.compress(data))
    elif kind == "xz":
        path.write_bytes(lzma.compress(data))
    elif kind == "bzip2":
        path.write_bytes(bz2.compress(data))
    elif kind == "zip":
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("inside.log", data)
    else:
        path.write_bytes({"zstd": _ZSTD_MAGIC, "lz4": _LZ4_MAGIC}[kind] + data[:200])
    return path


_COMMAND = {"gzip": "gunzip -k", "xz": "unxz -k", "bzip2": "bunzip2 -k", "zip": "unzip", "zstd": "unzstd",
            "lz4": "unlz4"}


def _said(path: Path, kind: str) -> str:
    return (f"{path}: expected text as the tool wrote it, got {kind}-compressed data: decompress it first "
            f"(`{_COMMAND[kind]} {path.name}`) and give the decompressed file")


@pytest.mark.parametrize("kind", sorted(_COMMAND))
def test_detection_and_the_command_line_name_the_compression(real_samples: Path, tmp_path: Path, kind: str) -> None:
    data = (real_samples / NCCL).read_bytes()
    packed = _packed(kind, data, tmp_path / f"nccl.log.{kind}")
    before = packed.read_bytes()
    proc = run_cli("evidence", "parse", str(packed))
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "", f"error: {_said(packed, kind)}\n")
    told = run_cli("evidence", "parse", str(packed), "--format", "nccl-tests")  # the format told: the same line
    assert (told.returncode, told.stderr) == (3, f"error: {_said(packed, kind)}\n")
    assert packed.read_bytes() == before  # nothing unpacked in place


# every parser, with the options it needs, on a real file of its own kind where the samples have one
_BY_FORMAT = {
    "nccl-tests": (NCCL, {}),
    "megatron": ("training-logs/megatron-bridge-llama3-8b-8gpu-bf16-20iters.log", {}),
    "megatron-deepspeed": ("training-logs/megatron-bridge-llama3-8b-8gpu-bf16-20iters.log", {}),
    "nemo": ("training-logs/nemo2-nemorun-llama-54m-8gpu-tp2-20steps.log", {}),
    "dllogger": ("training-logs/nemo2-nemorun-llama-54m-8gpu-tp2-20steps.log", {}),
    "megatron-golden": ("megatron-lm/gpt3_7b_tp1_pp4_memory_speed/golden_values_dev_dgx_h100.json", {}),
    "sacct": ("slurm/sacct-multi-node.txt", {"fields": "State,JobID"}),
    "events": (NCCL, {}),
    "dcgm": (NCCL, {"start_time": "2024-01-01T00:00:00+00:00"}),
    "rank-timings": (NCCL, {}),
}


@pytest.mark.parametrize("fmt", sorted(_BY_FORMAT))
def test_every_parser_refuses_a_gzip_file_by_name(real_samples: Path, tmp_path: Path, fmt: str) -> None:
    source, options = _BY_FORMAT[fmt]
    packed = _packed("gzip", (real_samples / source).read_bytes(), tmp_path / "evidence.gz")
    with pytest.raises(EvidenceError) as caught:
        inspect_evidence(packed, fmt, display=str(packed), **options)
    assert str(caught.value) == _said(packed, "gzip")


def test_an_mlperf_folder_with_a_compressed_result(real_samples: Path, tmp_path: Path) -> None:
    folder = tmp_path / "mlperf"
    folder.mkdir()
    source = real_samples / "mlperf-training" / "dell-xe9680-h100-llama2_70b_lora"
    (folder / "result_0.txt").write_bytes((source / "result_0.txt").read_bytes())
    packed = _packed("xz", (source / "result_1.txt").read_bytes(), folder / "result_1.txt")
    proc = run_cli("evidence", "parse", str(folder))
    assert proc.returncode == 3
    assert proc.stderr == f"error: {_said(packed, 'xz')}\n"


def test_init_lists_a_compressed_file_as_not_used_with_the_command(real_samples: Path, tmp_path: Path) -> None:
    (tmp_path / "nccl.log").write_bytes((real_samples / NCCL).read_bytes())
    log = real_samples / "training-logs" / "nemo2-nemorun-llama-54m-8gpu-tp2-20steps.log"
    _packed("gzip", log.read_bytes(), tmp_path / "train.log.gz")
    proc = run_cli("evidence", "init", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == (f"drafted {tmp_path / 'bundle.yaml'}: 1 run, 1 file not used (listed "
                                           "at its end)")
    draft = (tmp_path / "bundle.yaml").read_text()
    assert draft.endswith("# Files not used (each with why):\n#   train.log.gz: expected text as the tool wrote it, "
                          "got gzip-compressed data: decompress it first (`gunzip -k train.log.gz`) and give the "
                          "decompressed file\n")
