"""The configuration a training log prints (NeMo reprs, Megatron argument dumps, Megatron-Bridge YAML): key values."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from clustercert.parsers.common import DEFAULT_LIMIT
from clustercert.parsers.training import read_text_lines

__all__ = ["CONFIG_KEYS", "LogConfig", "read_log_config", "startup_settings"]

# the keys `evidence init` reads; NeMo prints `key=value`, Megatron-LM `key ...... value`, Megatron-Bridge `key: value`,
# DLLogger `"key": value` in its JSON
CONFIG_KEYS = (
    "num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "num_query_groups", "global_batch_size",
    "seq_length", "encoder_seq_length", "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "context_parallel_size", "virtual_pipeline_model_parallel_size", "expert_model_parallel_size", "world_size",
    "devices", "num_nodes", "bf16", "fp8", "precision", "micro_batch_size", "fp8_recipe", "fp4",
    "expert_tensor_parallel_size",
)
_PATTERN = re.compile(
    rf"(?<![\w.])({'|'.join(CONFIG_KEYS)})['\"]?\s*(?:=|:|\s\.{{2,}}|\s)\s*['\"]?([\w.+-]+)"
)
# The world size as the launchers print it, read under these names: torchrun's agent prints each local worker's
# `global_world_sizes=[8, 8, ...]` (one value for all, else not read), PyTorch Lightning each rank's
# `Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8`
_LAUNCHED = re.compile(r"\b(global_world_sizes)=\[(\d+)(?:,\s*\2)*\]|Initializing distributed: GLOBAL_RANK: \d+, "
                       r"(MEMBER): \d+/(\d+)")


@dataclass(frozen=True)
class LogConfig:
    """Each key's distinct printed values, each with the first line that printed it (in file order)."""

    file: str
    values: dict[str, list[tuple[str, int]]] = field(default_factory=dict)

    def distinct(self, key: str) -> list[tuple[str, int]]:
        return self.values.get(key, [])

    def one(self, key: str) -> tuple[str, int] | None:
        """The key's value when the log printed exactly one, else None (absent, or several different)."""
        found = self.distinct(key)
        return found[0] if len(found) == 1 else None


def read_log_config(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> LogConfig:
    """Every configuration key the log prints, with its distinct values (a log may print defaults and overrides)."""
    values: dict[str, list[tuple[str, int]]] = {}
    for number, raw in enumerate(read_text_lines(path, display, limit=limit), start=1):
        found = [(match.group(1), match.group(2)) for match in _PATTERN.finditer(raw)]
        if "global_world_sizes" in raw or "MEMBER" in raw:
            found += [(m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
                      for m in _LAUNCHED.finditer(raw)]
        for key, value in found:
            seen = values.setdefault(key, [])
            if all(v != value for v, _ in seen):
                seen.append((value, number))
    return LogConfig(display, values)


# the start-up print read for settings: an argument dump is some 60 kB, a Megatron-Bridge configuration printed by
# every rank some MB; what follows (NCCL's debug lines on a large job) is not searched line by line
_STARTUP_BYTES = 16 << 20
# Megatron-LM's banner before its argument dump (training/arguments.py `_print_args`), after any launcher prefix
_BANNER = "- arguments -"
_BANNER_LINE = re.compile(r"-{3,} arguments -{3,}[ \t]*$")


def startup_settings(text: str, first_record: int) -> dict[str, list[tuple[str, int]]]:
    """The configuration keys printed at the start of the log's last launch, with their distinct values and the
    first line of each: from its last `arguments` banner (else the text's start) to the first step record after it
    (`first_record`: the offset of the log's first record), at most _STARTUP_BYTES of it. `text` is read_text()'s."""
    start = 0
    at = text.rfind(_BANNER)
    while at >= 0:
        line_start = text.rfind("\n", 0, at) + 1
        line_end = text.find("\n", at)
        if _BANNER_LINE.search(text, line_start, len(text) if line_end < 0 else line_end) is not None:
            start = line_start
            break
        at = text.rfind(_BANNER, 0, at)
    stop = min(first_record if start <= first_record else _next_record(text, start), start + _STARTUP_BYTES)
    values: dict[str, list[tuple[str, int]]] = {}
    first_line = text.count("\n", 0, start) + 1
    for number, raw in enumerate(text[start:stop].split("\n"), start=first_line):
        for match in _PATTERN.finditer(raw):
            seen = values.setdefault(match.group(1), [])
            if all(v != match.group(2) for v, _ in seen):
                seen.append((match.group(2), number))
    return values


def _next_record(text: str, start: int) -> int:
    """The offset of the first `iteration N/ M |` record at or after `start` (the text's end when none)."""
    found = _RECORD.search(text, start)
    return len(text) if found is None else found.start()


_RECORD = re.compile(r"iteration\s+\d+\s*/\s*\d+\s*\|")
