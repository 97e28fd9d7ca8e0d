"""Megatron-LM's golden values with the functional test's model_config.yaml beside them: `evidence init` takes
precision, global batch, sequence length and TP/PP from the config, each naming its line, and asks (FILL_IN) for
what the config does not state (issue 56)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from clustercert.errors import EvidenceError
from clustercert.evidence.bundle import PLACEHOLDER
from clustercert.parsers.megatron_golden import read_model_config
from tests.conftest import run_cli

CASE = "gpt3_7b_tp1_pp4_memory_speed"
CONFIG = f"{CASE}/model_config.yaml"


def _line_of(config: Path, flag: str) -> int:
    """The oracle: the 1-based line of `  --flag: value` in the file as Megatron-LM ships it."""
    return next(n for n, text in enumerate(config.read_text().splitlines(), start=1)
                if text.strip().startswith(f"{flag}:"))


def test_model_args_read_as_megatron_names_them(real_samples: Path) -> None:
    path = real_samples / "megatron-lm" / CONFIG
    config = read_model_config(path, CONFIG)
    # the file: --global-batch-size: 8, --seq-length: 8192, --bf16: true, TP 1, PP 4, 32 layers of 4096
    for key, flag, value in (("global_batch_size", "--global-batch-size", "8"), ("seq_length", "--seq-length", "8192"),
                             ("bf16", "--bf16", "true"), ("tensor_model_parallel_size",
                                                          "--tensor-model-parallel-size", "1"),
                             ("pipeline_model_parallel_size", "--pipeline-model-parallel-size", "4"),
                             ("num_layers", "--num-layers", "32"), ("hidden_size", "--hidden-size", "4096")):
        assert config.one(key) == (value, _line_of(path, flag)), key
    assert config.one("fp8") is None and config.one("world_size") is None  # neither is in the file


def test_a_model_config_that_is_not_yaml_is_refused_at_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "model_config.yaml"
    bad.write_text("MODEL_ARGS:\n  --seq-length: 8192\n  --bf16: [true\n")
    with pytest.raises(EvidenceError) as caught:
        read_model_config(bad, "x/model_config.yaml")
    assert caught.value.file == "x/model_config.yaml" and caught.value.line is not None
    assert "expected YAML" in caught.value.message


def test_init_fills_what_model_config_states_and_asks_the_rest(real_samples: Path, tmp_path: Path) -> None:
    folder = tmp_path / "golden"
    shutil.copytree(real_samples / "megatron-lm" / CASE, folder / CASE)
    init = run_cli("evidence", "init", str(folder))
    assert init.returncode == 0, init.stderr
    text = (folder / "bundle.yaml").read_text()
    draft = yaml.safe_load(text)
    assert draft["attachments"] == [CONFIG]  # sealed with the bundle, no longer among the files not used
    assert "Files not used" not in text
    config = real_samples / "megatron-lm" / CONFIG
    runs = {r["id"]: r for r in draft["runs"]}
    assert sorted(runs) == ["golden_values_dev_dgx_gb200", "golden_values_dev_dgx_h100"]
    for run in runs.values():
        assert (run["precision"], run["gbs"], run["seq_len"]) == ("bf16", 8, 8192)
        assert run["parallelism"] == {"tp": 1, "pp": 4}
        assert (run["gpus"], run["workload"]) == (PLACEHOLDER, PLACEHOLDER)  # the file states no GPU count
    assert f"gbs: 8  # global_batch_size at {CONFIG} line {_line_of(config, '--global-batch-size')}" in text
    assert f"seq_len: 8192  # seq_length at {CONFIG} line {_line_of(config, '--seq-length')}" in text
    assert f'precision: "bf16"  # {CONFIG} states bf16 at line {_line_of(config, "--bf16")}' in text
    assert f"needed: the GPU count of the run ({CONFIG} states none)" in text
    # the draft asks for what no file states; evidence check names the first of them, file, line and key
    assert "9 values to fill in" in init.stdout, init.stdout
    check = run_cli("evidence", "check", str(folder))
    assert check.returncode == 3, check.stdout + check.stderr
    assert f"{folder / 'bundle.yaml'} line 9 field 'system.gpu': expected a value, got the placeholder" in check.stderr
