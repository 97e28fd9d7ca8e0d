"""Megatron-LM golden values: per-metric `{start_step, end_step, step_interval, values}` JSON."""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from clustercert.errors import EvidenceError
from clustercert.parsers.common import DEFAULT_LIMIT, read_json, to_float, to_int
from clustercert.parsers.log_config import LogConfig
from clustercert.parsers.training import NanMark, TrainingLog, TrainingStep, read_text

__all__ = ["MODEL_CONFIG", "parse_megatron_golden", "read_model_config"]

# the functional test's settings, beside its golden values in Megatron-LM's tests/functional_tests/test_cases/
MODEL_CONFIG = "model_config.yaml"
_ARGS = "MODEL_ARGS"
# a flag whose argparse `dest` is not its name with dashes turned to underscores (Megatron-LM arguments.py)
_DEST = {"fp8_format": "fp8"}

FORMAT = "megatron-golden"
_HINT = "Use a golden_values_*.json file from Megatron-LM's functional tests."
_TIME = "iteration-time"
_LOSS = "lm loss"
_GRAD = "grad-norm"


def parse_megatron_golden(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> TrainingLog:
    """One step per measured `iteration-time` value (seconds); `"nan"` (not measured) is left out.

    A JSON file has no lines: `line` holds the step's position (1-based) in the `values` mapping instead.
    """
    doc = read_json(path, display, limit=limit)
    if not isinstance(doc, dict) or not isinstance(doc.get(_TIME), dict):
        raise EvidenceError(
            display, f"expected an object with an '{_TIME}' metric, got none. {_HINT}", field=_TIME
        )
    times = _series(doc, _TIME, display)
    losses = _series(doc, _LOSS, display) if isinstance(doc.get(_LOSS), dict) else {}
    grads = _series(doc, _GRAD, display) if isinstance(doc.get(_GRAD), dict) else {}
    steps: list[TrainingStep] = []
    nans: list[NanMark] = []
    for position, (step, seconds) in enumerate(sorted(times.items()), start=1):
        if math.isnan(seconds):
            continue
        if seconds < 0:
            raise EvidenceError(
                display,
                f"expected a non-negative iteration time, got {seconds}. {_HINT}",
                line=position,
                field=f"{_TIME}.{step}",
            )
        loss = losses.get(step)
        if loss is not None and math.isnan(loss):
            nans.append(NanMark(position, _LOSS))
        steps.append(
            TrainingStep(
                iteration=step, step_time_s=seconds, line=position, loss=loss, grad_norm=grads.get(step)
            )
        )
    if not steps:
        raise EvidenceError(
            display, f"expected at least one measured '{_TIME}' value, got only 'nan'. {_HINT}", field=_TIME
        )
    return TrainingLog(format=FORMAT, file=display, steps=steps, nan_marks=nans, line_count=len(times))


def _series(doc: dict[str, object], metric: str, display: str) -> dict[int, float]:
    block = doc[metric]
    assert isinstance(block, dict)
    values = block.get("values")
    if not isinstance(values, dict):
        raise EvidenceError(
            display,
            f"expected '{metric}' to hold a 'values' object, got none. {_HINT}",
            field=f"{metric}.values",
        )
    for key in ("start_step", "end_step", "step_interval"):
        if key in block:
            to_int(block[key], file=display, line=None, field=f"{metric}.{key}", hint=_HINT)
    out: dict[int, float] = {}
    for key, value in values.items():
        step = to_int(key, file=display, line=None, field=f"{metric}.values", hint=_HINT)
        out[step] = to_float(
            value, file=display, line=None, field=f"{metric}.values.{key}", hint=_HINT, allow_nan=True
        )
    return out


def read_model_config(path: Path, display: str, *, limit: int = DEFAULT_LIMIT) -> LogConfig:
    """The `MODEL_ARGS` of a functional test's model_config.yaml as Megatron's arguments dump names them
    (`--global-batch-size: 8` is `global_batch_size`), each with its line; an empty config without MODEL_ARGS."""
    text = read_text(path, display, limit=limit)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise EvidenceError(display, f"expected YAML, got {getattr(exc, 'problem', None) or 'invalid YAML'}. "
                            "Use the model_config.yaml of the functional test as Megatron-LM ships it.",
                            line=mark.line + 1 if mark is not None else None) from None
    values: dict[str, list[tuple[str, int]]] = {}
    if not isinstance(root, yaml.MappingNode):
        return LogConfig(display, values)
    for key, value in root.value:
        if key.value != _ARGS or not isinstance(value, yaml.MappingNode):
            continue
        for flag, setting in value.value:
            if not isinstance(flag.value, str) or not isinstance(setting, yaml.ScalarNode):
                continue
            name = flag.value.lstrip("-").replace("-", "_")
            seen = values.setdefault(_DEST.get(name, name), [])
            if all(v != setting.value for v, _ in seen):  # each distinct value once, as a log's dump is read
                seen.append((str(setting.value), flag.start_mark.line + 1))
    return LogConfig(display, values)
