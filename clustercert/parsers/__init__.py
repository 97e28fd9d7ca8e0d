"""One module per evidence format; each turns a file into a typed table that keeps file and line."""

from __future__ import annotations

import functools
import gc
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

from clustercert.errors import EvidenceError, UsageError
from clustercert.evidence.guards import open_regular
from clustercert.parsers.common import DEFAULT_LIMIT, refuse_binary, without_escapes
from clustercert.parsers.dcgm import parse_dcgm
from clustercert.parsers.dllogger import parse_dllogger
from clustercert.parsers.events import parse_events
from clustercert.parsers.health import HEALTH_DETECT, HEALTH_FORMATS, KERNEL_LOG_DETECT
from clustercert.parsers.megatron import parse_megatron
from clustercert.parsers.megatron_deepspeed import parse_megatron_deepspeed
from clustercert.parsers.megatron_golden import parse_megatron_golden
from clustercert.parsers.megatron_resilience import parse_megatron_resilience
from clustercert.parsers.mlperf import parse_mlperf
from clustercert.parsers.nccl_tests import JSON_HEAD as NCCL_JSON_HEAD
from clustercert.parsers.nccl_tests import parse_nccl_tests
from clustercert.parsers.nemo import parse_nemo
from clustercert.parsers.nemo_resilience import ResilienceLog, parse_nemo_resilience
from clustercert.parsers.rank_timings import parse_rank_timings
from clustercert.parsers.sacct import fixed_width_rule, parse_sacct
from clustercert.parsers.sacct_json import is_sacct_json
from clustercert.parsers.training import TrainingLog, TrainingStep

__all__ = [
    "FORMATS",
    "RESILIENCE_FORMATS",
    "TRAINING_FORMATS",
    "TrainingLog",
    "TrainingStep",
    "detect_format",
    "inspect_evidence",
    "parse_resilience_log",
    "parse_training_log",
]

TrainingParser = Callable[..., TrainingLog]
P = TypeVar("P", bound=Callable[..., Any])


def _bounded(parser: P) -> P:
    """`parser`, with the two failures any parser can hit on hostile input turned into a located EvidenceError:
    a number of more than 4,300 digits (int() and json refuse it with ValueError) and nesting deep enough for a
    RecursionError. Other exceptions are bugs and stay what they are."""

    @functools.wraps(parser)
    def run(path: Path, display: str, *args: Any, **kwargs: Any) -> Any:
        # A parser builds an object per row and no cycles: the cyclic collector, run every 700 allocations,
        # would only walk the growing table again and again
        collecting = gc.isenabled()
        gc.disable()
        try:
            return parser(path, display, *args, **kwargs)
        except RecursionError:
            raise EvidenceError(display, "expected data of reasonable depth, got a too deeply nested document. "
                                "Re-export the file") from None
        except ValueError as exc:
            if "integer string conversion" not in str(exc):
                raise
            raise EvidenceError(display, "expected numbers of at most 4300 digits, got a longer one. "
                                "Re-export the file") from None
        finally:
            if collecting:
                gc.enable()

    return cast(P, run)


TRAINING_FORMATS: dict[str, TrainingParser] = {
    "nemo": _bounded(parse_nemo),
    "megatron": _bounded(parse_megatron),
    "megatron-deepspeed": _bounded(parse_megatron_deepspeed),
    "dllogger": _bounded(parse_dllogger),
    "megatron-golden": _bounded(parse_megatron_golden),
}

# the resilience events of a NeMo log (read beside its training steps)
parse_resilience_log = _bounded(parse_nemo_resilience)
# the formats whose logs show restarts, read beside their steps: the checkpoint loaded between a step and an
# earlier one is what makes that a restart, not a spliced log (validation.tables)
RESILIENCE_FORMATS: dict[str, Callable[..., ResilienceLog]] = {
    "nemo": parse_resilience_log,
    "megatron": _bounded(parse_megatron_resilience),
    "megatron-deepspeed": _bounded(parse_megatron_resilience),
}

# every parser returns an object with to_json(); options are passed by keyword
FORMATS: dict[str, Callable[..., Any]] = {
    **TRAINING_FORMATS,
    "nccl-tests": _bounded(parse_nccl_tests),
    "mlperf": _bounded(parse_mlperf),
    "sacct": _bounded(parse_sacct),
    "rank-timings": _bounded(parse_rank_timings),
    "dcgm": _bounded(parse_dcgm),
    "events": _bounded(parse_events),
    **{name: _bounded(parser) for name, parser in HEALTH_FORMATS.items()},  # node health (issue 59)
}

_SNIFF_BYTES = 64 * 1024 * 1024
# Every detector is linear in the text: a regex never restarts a variable-length scan at each offset of a
# line (Python's engine backtracks; a 1 MB line of the wrong shape otherwise takes minutes).
_RANK_HEADER = (re.compile(r"\brank\b"), re.compile(r"\bcompute_s\b"), re.compile(r"\bcomm_s\b"))
_EVENT_KEYS = (re.compile(r'"ts"\s*:'), re.compile(r'"type"\s*:'))
_JSON_LINE = re.compile(r"^[ \t]*\{", re.MULTILINE)


def _in_order(line: str, patterns: tuple[re.Pattern[str], ...]) -> bool:
    """True when each pattern matches `line` after the previous one's match (leftmost matches suffice)."""
    at = 0
    for pattern in patterns:
        found = pattern.search(line, at)
        if found is None:
            return False
        at = found.end()
    return True


def _lines_starting(text: str, start: re.Pattern[str]) -> Iterator[str]:
    """Each line of `text` at whose beginning `start` matches."""
    for match in start.finditer(text):
        end = text.find("\n", match.start())
        yield text[match.start():] if end < 0 else text[match.start():end]


def _before_on_a_line(text: str, pattern: re.Pattern[str], literal: str) -> bool:
    """True when some line has a match of `pattern` ending before an occurrence of `literal`."""
    at = text.find(literal)
    while at >= 0:
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        last = text.rfind(literal, at, end)
        if pattern.search(text, text.rfind("\n", 0, at) + 1, last):
            return True
        at = text.find(literal, end)
    return False


_MEGATRON_ITER = re.compile(r"iteration\s+\d+\s*/\s*\d+\s*\|")
_DETECT: list[tuple[str, Callable[[str], object]]] = [
    ("mlperf", re.compile(r":::MLLOG \{").search),
    ("dllogger", re.compile(r"DLLL \{").search),
    # after a launcher's line prefix, as the parser reads it (srun --label's `0: `: nccl_tests._PREFIX)
    ("nccl-tests", re.compile(r"^(?:[ \t]*\d+:[ \t]|rank\d+:[ \t]?)?\S*?#\s*"
                              r"(?:Collective test starting|nThread \d+ nGpus)", re.MULTILINE).search),
    ("nemo", re.compile(r"Training epoch \d+, iteration \d+/\d+").search),
    ("megatron-deepspeed", re.compile(r"elapsed time per iteration \(s\)").search),
    ("megatron", lambda text: _before_on_a_line(text, _MEGATRON_ITER, "elapsed time per iteration (ms)")),
    ("rank-timings", lambda text: _in_order(text.partition("\n")[0], _RANK_HEADER)),
    # promtool tsdb dump: labels sorted by name, so `__name__` follows any upper-case one (Hostname, UUID)
    ("dcgm", re.compile(r'^(?:DCGM_FI_\w+\{|\{[^\n]*?\b__name__="DCGM_FI_\w+"|#\s?Entity\b)', re.MULTILINE).search),
    ("events", lambda text: any(_in_order(line, _EVENT_KEYS) for line in _lines_starting(text, _JSON_LINE))),
    *HEALTH_DETECT,
    (
        "sacct",
        re.compile(
            r"^(?=[^\n]*\b(?:COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|NODE_FAIL|REQUEUED|RUNNING|"
            r"PENDING|PREEMPTED|State)\b)(?:[^|\n]*\|){3,}",
            re.MULTILINE,
        ).search,
    ),
    # sacct's fixed-width table (no --parsable): its header and rule, for the parser to refuse with the reason
    ("sacct", lambda text: fixed_width_rule(text.splitlines()) is not None),
    KERNEL_LOG_DETECT,
]


def parse_training_log(path: Path, display: str, fmt: str, *, limit: int = DEFAULT_LIMIT) -> TrainingLog:
    """Parse a training log with the parser `fmt`; an unknown format is an EvidenceError."""
    parser = TRAINING_FORMATS.get(fmt)
    if parser is None:
        raise EvidenceError(
            display, f"expected a training format ({', '.join(sorted(TRAINING_FORMATS))}), got '{fmt}'"
        )
    return parser(path, display, limit=limit)


def detect_format(path: Path, display: str | None = None) -> str:
    """The format name of a file or result folder, sniffed from its content; an EvidenceError when unknown."""
    shown = display or str(path)
    if path.is_dir():
        if any(path.glob("result_*.txt")):
            return "mlperf"
        raise EvidenceError(
            shown, "expected a file, or an MLPerf result folder with result_*.txt, got a folder"
        )
    try:
        with open_regular(path, shown, limit=DEFAULT_LIMIT << 10) as handle:
            data = handle.read(_SNIFF_BYTES)
    except OSError as exc:
        raise EvidenceError(shown, f"expected a readable file, got {exc.strerror}") from None
    if not data:
        raise EvidenceError(shown, "expected a known evidence format, got an empty file")
    if data[:4] == b"PAR1":
        return "rank-timings"
    refuse_binary(data, shown)  # compressed, or not text: told as such, not as an unknown format
    text = without_escapes(data.decode("utf-8-sig", errors="replace"))  # told by its plain text
    if "\r" in text:  # lines ended by a lone CR (an old Mac's, a progress bar's) are lines to the detectors too
        text = "\n".join(text.splitlines())
    stripped = text.lstrip()
    if stripped.startswith("{") and '"iteration-time"' in text:
        return "megatron-golden"
    if NCCL_JSON_HEAD.match(stripped) is not None:  # nccl-tests' `-J FILE.json`
        return "nccl-tests"
    if is_sacct_json(text):
        return "sacct"
    for name, detector in _DETECT:
        if detector(text):
            return name
    raise EvidenceError(
        shown,
        f"expected a known evidence format, could not detect one. Pass --format "
        f"({', '.join(sorted(FORMATS))})",
    )


def inspect_evidence(path: Path, fmt: str | None = None, **options: Any) -> dict[str, object]:
    """What a parser read from one file, as the JSON object `evidence parse --json` prints (format named).

    Options go to the parser by keyword (`display`, `limit`, `ruleset`, `fields`, `timezone`, `start_time`,
    `interval_s`); an option the parser does not take is a UsageError.
    """
    display = str(options.pop("display", None) or path)
    name = fmt or detect_format(path, display)
    parser = FORMATS.get(name)
    if parser is None:
        raise UsageError(f"unknown format '{name}': expected one of {', '.join(sorted(FORMATS))}")
    accepted = set(inspect.signature(parser).parameters) - {"path", "display"}
    options = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise UsageError(
            f"format '{name}' takes no option {', '.join(unknown)} (it takes {', '.join(sorted(accepted))})"
        )
    result = parser(path, display, **options)
    out: dict[str, object] = {"format": name, **result.to_json()}
    if name in RESILIENCE_FORMATS:
        out.update(
            RESILIENCE_FORMATS[name](
                path, display, **{k: v for k, v in options.items() if k == "limit"}
            ).to_json()
        )
    out["format"] = name
    return out
