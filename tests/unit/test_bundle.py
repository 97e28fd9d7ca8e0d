"""bundle.yaml is strict, and files outside the bundle are refused with the entry named."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import load_bundle, read_seal, seal_bundle

GOOD = """\
schema_version: 1
cluster: {name: c1, provider: P}
system:
  gpu: gb200-nvl72
  gpus_per_node: 4
  nodes: [n1, n2]
catalog: exemplar-gb200
recipe_version: "25.05.05"
runs:
  - id: llama3-70b-fp8-512-r1
    phase: efficiency
    kind: training
    format: nemo
    workload: llama3-70b
    precision: fp8
    gpus: 512
    gbs: 2048
    seq_len: 8192
    files: [{file}]
"""


def _bundle(tmp_path: Path, text: str, file: str = "logs/r1.log") -> Path:
    (tmp_path / "logs").mkdir(exist_ok=True)
    (tmp_path / "logs" / "r1.log").write_text("x\n")
    (tmp_path / "bundle.yaml").write_text(text.replace("{file}", file))
    return tmp_path


def test_good_bundle_loads(tmp_path: Path) -> None:
    b = load_bundle(_bundle(tmp_path, GOOD))
    assert b.spec.runs[0].gpus == 512
    assert b.evidence_files() == ["logs/r1.log"]


def test_the_bundle_is_its_folder_or_its_bundle_yaml_and_no_other_file(tmp_path: Path) -> None:
    """A log named in place of its bundle was read as its folder's bundle.yaml, and a folder without one was
    refused naming bundle.yaml: the file the user gave is named, and why."""
    root = _bundle(tmp_path, GOOD)
    assert load_bundle(root / "bundle.yaml").root == root
    log = root / "logs" / "r1.log"
    with pytest.raises(EvidenceError) as exc:
        load_bundle(log)
    assert str(exc.value) == f"{log}: expected a bundle folder or its bundle.yaml, got another file"


def test_unknown_key_is_rejected_with_line_and_key(tmp_path: Path) -> None:
    text = GOOD.replace("recipe_version:", "colour: blue\nrecipe_version:")
    with pytest.raises(EvidenceError) as exc:
        load_bundle(_bundle(tmp_path, text))
    where = f"{tmp_path / 'bundle.yaml'} line 8 field 'colour'"
    assert str(exc.value).startswith(f"{where}: Extra inputs are not permitted")


def test_bad_precision_names_its_line(tmp_path: Path) -> None:
    text = GOOD.replace("precision: fp8", "precision: fp16")
    line = text.splitlines().index("    precision: fp16") + 1
    with pytest.raises(EvidenceError) as exc:
        load_bundle(_bundle(tmp_path, text))
    message = str(exc.value)
    assert f"line {line} field 'runs[0].precision'" in message and "got 'fp16'" in message


def test_training_run_needs_its_configuration(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="a training run needs gbs"):
        load_bundle(_bundle(tmp_path, GOOD.replace("    gbs: 2048\n", "")))


@pytest.mark.parametrize(
    ("file", "why"),
    [("/etc/passwd", "absolute path"), ("../outside.log", "uses '..'"), ("logs/missing.log", "missing")],
)
def test_files_outside_the_bundle_are_refused(tmp_path: Path, file: str, why: str) -> None:
    with pytest.raises(EvidenceError) as exc:
        load_bundle(_bundle(tmp_path, GOOD, file))
    assert "run 'llama3-70b-fp8-512-r1' files" in str(exc.value) and why in str(exc.value)


def test_link_leaving_the_bundle_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.log"
    outside.write_text("secret\n")
    inner = tmp_path / "b"
    inner.mkdir()
    _bundle(inner, GOOD, "logs/link.log")
    (inner / "logs" / "link.log").symlink_to(outside)
    with pytest.raises(EvidenceError, match="links outside it"):
        load_bundle(inner)


def test_resolve_refuses_what_the_load_refused_and_a_root_that_became_a_link_elsewhere(tmp_path: Path) -> None:
    """LoadedBundle.resolve (each parse's) finds the root's real path once: a file that later links out, a missing
    file, a FIFO, are refused as at load; a bundle folder swapped for a link to another copy refuses its files."""
    import os
    import shutil

    root = tmp_path / "b"
    root.mkdir()
    bundle = load_bundle(_bundle(root, GOOD))
    assert bundle.resolve("logs/r1.log") == root / "logs" / "r1.log"
    (root / "logs" / "out.log").symlink_to(tmp_path / "secret.log")
    (tmp_path / "secret.log").write_text("secret\n")
    with pytest.raises(EvidenceError, match="links outside it"):
        bundle.resolve("logs/out.log")
    with pytest.raises(EvidenceError, match="which is missing"):
        bundle.resolve("logs/r2.log")
    os.mkfifo(root / "logs" / "pipe.log")
    with pytest.raises(EvidenceError, match="a named pipe"):
        bundle.resolve("logs/pipe.log")
    assert bundle.resolve("logs") == root / "logs"  # a folder (an MLPerf result folder) is given back
    (root / "logs" / "pipe.log").unlink()
    shutil.copytree(root, tmp_path / "elsewhere", symlinks=True)
    root.rename(tmp_path / "moved")
    root.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(EvidenceError, match="links outside it"):
        bundle.resolve("logs/r1.log")


def test_seal_lists_every_file_in_sha256sum_format(tmp_path: Path) -> None:
    import hashlib

    b = load_bundle(_bundle(tmp_path, GOOD))
    seal_bundle(b)
    sealed = read_seal(b)
    assert sealed is not None
    assert sealed.digests == {
        "bundle.yaml": hashlib.sha256((tmp_path / "bundle.yaml").read_bytes()).hexdigest(),
        "logs/r1.log": hashlib.sha256(b"x\n").hexdigest(),
    }
    assert sealed.sizes == {"bundle.yaml": (tmp_path / "bundle.yaml").stat().st_size, "logs/r1.log": 2}


def test_a_folders_real_path_remembered_gives_what_realpath_gives(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """load_bundle checks each file's real path with its folder's remembered (one lstat per file, not one per part):
    for files, folders, links to files and folders, inside and out, chains of links, dangling links and missing
    files, relative and absolute, the same path as os.path.realpath."""
    import os

    from clustercert.evidence.bundle import _real_path

    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "x.log").write_text("x")
    root = tmp_path / "b"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.log").write_text("f")
    (root / "a" / "to-b").symlink_to("b")
    (root / "a" / "to-f").symlink_to("b/f.log")
    (root / "a" / "chain").symlink_to("to-f")
    (root / "a" / "out").symlink_to(outside / "deep")
    (root / "a" / "out-file").symlink_to(outside / "deep" / "x.log")
    (root / "a" / "dangling").symlink_to("nowhere")
    (root / "a" / "loop").symlink_to("loop")
    (root / "linked-root").symlink_to(root / "a")
    rels = ["a/b/f.log", "a/to-b/f.log", "a/to-f", "a/chain", "a/out/x.log", "a/out-file", "a/dangling",
            "a/loop", "a/missing.log", "a/b", "a/to-b", "linked-root/to-b/f.log", "linked-root/chain",
            "linked-root/missing/x", "a/to-b/missing/x.log"]
    folders: dict[str, str] = {}
    for base in (root, Path(os.path.relpath(root))):
        for rel in rels * 2:  # the second time from the remembered folders
            path = str(base / rel)
            assert _real_path(path, folders) == os.path.realpath(path), rel
    # the bundle given as '.' or '..' from inside it (`evidence seal .`): the root itself, then its files
    monkeypatch.chdir(root / "a")
    folders = {}  # one load's, from this working folder
    for base in (Path("."), Path(".."), Path("../a"), Path("b/..")):
        for rel in ["", *rels, *(f"../{r}" for r in rels if r.startswith("a/"))]:
            path = str(base / rel) if rel else str(base)
            assert _real_path(path, folders) == os.path.realpath(path), path
