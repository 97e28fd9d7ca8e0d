"""The configuration training logs print, in each framework's own way, read key by key with its line."""

from __future__ import annotations

from pathlib import Path

from clustercert.parsers.log_config import read_log_config


def test_each_framework_style_is_read_with_its_first_line(tmp_path: Path) -> None:
    text = (
        "│   config=Llama3Config8B(num_layers=1, hidden_size=256,\n"  # NeMo 2 repr
        "  num_attention_heads ............................. 14\n"  # Megatron-LM argument dump
        "  seq_length: 8192\n"  # Megatron-Bridge ConfigContainer YAML
        "  seq_length: 4096\n"  # ... printed again with another value
        "  seq_length: 8192\n"
        'DLLL {"timestamp": "1", "data": {"global_batch_size": 256, "precision": "bf16-mixed"}}\n'
        "grad_reduce_in_bf16=True\n"  # a longer key that ends in a known one is not that key
    )
    path = tmp_path / "x.log"
    path.write_text(text)
    config = read_log_config(path, "x.log")
    assert config.one("num_layers") == ("1", 1) and config.one("hidden_size") == ("256", 1)
    assert config.one("num_attention_heads") == ("14", 2)
    assert config.distinct("seq_length") == [("8192", 3), ("4096", 4)] and config.one("seq_length") is None
    assert config.one("global_batch_size") == ("256", 6) and config.one("precision") == ("bf16-mixed", 6)
    assert config.distinct("bf16") == []


def test_the_world_size_the_launchers_print_is_read_when_it_is_one_value(tmp_path: Path) -> None:
    text = (
        "I0307 22:33:45.964000 170829 torch/distributed/elastic/agent/server/api.py:525]   role_world_sizes=[8, 8]\n"
        "I0307 22:33:45.964000 170829 torch/distributed/elastic/agent/server/api.py:525] global_world_sizes=[16, 16]\n"
        "[default2]:Initializing distributed: GLOBAL_RANK: 2, MEMBER: 3/16\n"  # Lightning, each rank
        "[default0]:Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16\n"
        "   global_world_sizes=[16, 8]\n"  # not one value for every worker: not a world size
        "   global_world_sizes=[16, 16, 16, 1]\n"
    )
    path = tmp_path / "x.log"
    path.write_text(text)
    config = read_log_config(path, "x.log")
    assert config.distinct("global_world_sizes") == [("16", 2)]
    assert config.distinct("MEMBER") == [("16", 3)]
    assert config.distinct("world_size") == []  # role_world_sizes is the role's, and none of these is world_size
