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
