"""Recipe conformance as the run's own log shows it: the settings it printed at start-up against its baseline's recipe.

Megatron prints its arguments and Megatron-Bridge its configuration when a run starts (parsers.log_config); a value
the log prints is the one compared, with its line, and bundle.yaml's declaration is used only where the log prints
none (and the report says "declared"). Where the two disagree the log's value wins and the check names both.
"""

from __future__ import annotations

from dataclasses import dataclass

from clustercert.catalog import Baseline
from clustercert.editions import RecipeConfig
from clustercert.evidence.bundle import Phase, RunSpec
from clustercert.evidence.provenance import Span
from clustercert.verdicts import Check, Severity, Status

__all__ = ["RecipeValue", "recipe_check", "recipe_values"]

PHASE = Phase.EFFICIENCY.value

PARALLEL = ("tp", "pp", "cp", "vp", "ep", "etp", "fsdp")
LABEL = {"gbs": "GBS", "seq_len": "sequence length", "precision": "precision", "tp": "TP", "pp": "PP",
         "cp": "CP", "vp": "VP", "ep": "EP", "etp": "ETP", "fsdp": "FSDP", "recipe_version": "recipe version",
         "layers": "layers", "mbs": "MBS", "fp8_recipe": "FP8 recipe"}
# what a recipe's configuration table (clustercert.editions.RecipeConfig) fixes, compared where the log prints it
TABLE_FIELDS = ("seq_len", "layers", "tp", "pp", "cp", "ep", "etp", "vp", "mbs", "gbs", "precision", "fp8_recipe")
# the names Megatron-LM prints in its argument dump (Megatron-Bridge's configuration uses the same), per recipe field
_PRINTED = {"tp": ("tensor_model_parallel_size",), "pp": ("pipeline_model_parallel_size",),
            "cp": ("context_parallel_size",), "vp": ("virtual_pipeline_model_parallel_size",),
            "ep": ("expert_model_parallel_size",), "etp": ("expert_tensor_parallel_size",),
            "gbs": ("global_batch_size",), "seq_len": ("seq_length", "encoder_seq_length"),
            "layers": ("num_layers",), "mbs": ("micro_batch_size",), "fp8_recipe": ("fp8_recipe",)}
# Megatron's names of its FP8 recipes (megatron.core.enums.Fp8Recipe) as the recipe tables write them
_FP8_RECIPES = {"tensorwise": "cs", "mxfp8": "mx", "blockwise": "sc"}
_UNSET = {"none", "null", "false", "0", ""}
# sizes where Megatron's 1 and an unset value mean the same layout (no interleaving, no expert split)
_ONE_IS_UNSET = {"vp", "ep", "etp", "fsdp"}


@dataclass(frozen=True)
class RecipeValue:
    """One recipe field of a run: the value compared, and where it comes from."""

    field: str
    value: object
    line: int | None  # the log line that printed it; None: bundle.yaml's declaration (or nothing)
    declared: object  # bundle.yaml's value, None where it declares none
    printed_several: str | None = None  # the log printed several values (none is used): which, where


def _printed(settings: dict[str, list[tuple[str, int]]], names: tuple[str, ...]) -> list[tuple[str, int]]:
    for name in names:
        if settings.get(name):
            return settings[name]
    return []


def _number(text: str) -> int | str | None:
    """A printed size as an int, None where Megatron prints it unset, else the text itself (never equal to one)."""
    if text.lower() in _UNSET - {"0"}:
        return None
    return int(text) if text.isdigit() else text


def _precision(settings: dict[str, list[tuple[str, int]]]) -> tuple[str, int] | None:
    """The precision the log's settings show (nvfp4 over fp8 over bf16), with the line that shows it."""
    for key, name in (("fp4", "nvfp4"), ("fp8", "fp8")):
        values = settings.get(key, [])
        on = [(value, line) for value, line in values if value.lower() not in _UNSET]
        if len(values) == 1 and on:
            return name, on[0][1]
    bf16 = settings.get("bf16", [])
    if len(bf16) == 1 and bf16[0][0].lower() == "true":
        return "bf16", bf16[0][1]
    return None


def recipe_values(run: RunSpec, recipe_version: str, fields: list[str],
                  settings: dict[str, list[tuple[str, int]]]) -> dict[str, RecipeValue]:
    """Each recipe field of `run`: the log's printed value where it prints exactly one, else bundle.yaml's."""
    declared: dict[str, object] = {"gbs": run.gbs, "seq_len": run.seq_len,
                                   "precision": run.precision.value if run.precision else None,
                                   "recipe_version": recipe_version, "layers": None, "mbs": None,
                                   "fp8_recipe": None}
    for name in PARALLEL:
        declared[name] = getattr(run.parallelism, name) if run.parallelism is not None else None
    out: dict[str, RecipeValue] = {}
    for name in fields:
        printed: list[tuple[str, int]] = []
        if name == "precision":
            found = _precision(settings)
            printed = [found] if found else []
        elif name in _PRINTED:
            printed = _printed(settings, _PRINTED[name])
        if len(printed) == 1:
            text, line = printed[0]
            value: object = (text if name == "precision" else _FP8_RECIPES.get(text.lower(), text.lower())
                             if name == "fp8_recipe" else _number(text))
            out[name] = RecipeValue(name, value, line, declared[name])
        else:
            several = ", ".join(f"{text} at line {line}" for text, line in printed) if printed else None
            out[name] = RecipeValue(name, declared[name], None, declared[name], several)
    return out


def _same(name: str, mine: object, theirs: object) -> bool:
    return mine == theirs or (name in _ONE_IS_UNSET and {mine, theirs} <= {1, None})


def _place(run: RunSpec, name: str) -> str:
    return f"runs[{run.id}].parallelism.{name}" if name in PARALLEL else f"runs[{run.id}].{name}"


def _baseline_value(baseline: Baseline, name: str) -> object:
    if name in PARALLEL:
        return getattr(baseline.parallelism, name)
    return {"gbs": baseline.gbs, "seq_len": baseline.seq_len, "precision": baseline.precision.value,
            "recipe_version": baseline.recipe_version}[name]


def _table_value(table: RecipeConfig, name: str) -> object:
    if name == "precision":
        return table.precision.value
    if name == "fp8_recipe":
        return table.fp8_recipe.value if table.fp8_recipe is not None else None
    return getattr(table, name)


def _table_differences(run: RunSpec, file: str, table: tuple[RecipeConfig, str],
                       settings: dict[str, list[tuple[str, int]]]) -> tuple[list[str], list[str]]:
    """Where the run's printed (else declared) configuration differs from its recipe table's row, each said with
    where it comes from; and the table's fields neither printed nor declared."""
    config, source = table
    names = [name for name in TABLE_FIELDS if name != "fp8_recipe" or config.fp8_recipe is not None]
    values = recipe_values(run, "", names, settings)
    unknown = [LABEL[v.field] for v in values.values() if v.line is None and v.declared is None]
    row = f"the recipe table's ({source}: {config.precision.value} at {config.gpus} GPUs)"
    said = []
    for v in values.values():
        expected = _table_value(config, v.field)
        if expected is None and v.field not in _ONE_IS_UNSET:
            continue  # an empty cell of the table fixes nothing (Kimi-K2's row gives no layer count)
        if (v.line is not None or v.declared is not None) and not _same(v.field, v.value, expected):
            where = f"the log prints it at {file}:{v.line}" if v.line is not None else "declared in bundle.yaml"
            said.append(f"{LABEL[v.field]} ({v.field}) {v.value if v.value is not None else 'unset'} vs {row} "
                        f"{expected if expected is not None else 'unset'} ({where})")
    return said, unknown


def recipe_check(run: RunSpec, file: str, recipe_version: str, baseline: Baseline, fields: list[str],
                 settings: dict[str, list[tuple[str, int]]], table: tuple[RecipeConfig, str] | None = None) -> Check:
    """The run's recipe as its log printed it (bundle.yaml's where the log prints nothing) against its baseline's,
    and against its recipe's configuration table (`table`: the row for its precision and GPU count, and the
    table's source) where the catalog has one."""
    values = recipe_values(run, recipe_version, fields, settings)
    check_id, title = f"{PHASE}.{run.id}_recipe_conforms", f"Run {run.id} follows its baseline's recipe"

    def origin(v: RecipeValue) -> str:
        return f"the log prints it at {file}:{v.line}" if v.line is not None else "declared in bundle.yaml"

    def shown(v: RecipeValue) -> str:
        theirs = _baseline_value(baseline, v.field)
        return (f"{LABEL[v.field]} ({v.field}) {v.value if v.value is not None else 'unset'} vs baseline "
                f"{theirs if theirs is not None else 'unset'} ({origin(v)})")

    # parallelism neither printed nor declared cannot be compared
    undeclared = [name for name in fields if name in PARALLEL and values[name].line is None
                  and run.parallelism is None]
    compared = [values[name] for name in fields if name not in undeclared]
    diffs = [v for v in compared if not _same(v.field, v.value, _baseline_value(baseline, v.field))]
    disallowed = [v for v in diffs if baseline.allowed_differences.get(v.field) is None]
    allowed = [v for v in diffs if baseline.allowed_differences.get(v.field) is not None]
    note = "".join(f"; allowed by the catalog: {shown(v)} ({baseline.allowed_differences[v.field]})"
                   for v in allowed)
    # where bundle.yaml says otherwise than the log, the log's value is the one used: both are named
    contradicted = [v for v in values.values() if v.line is not None and v.declared is not None
                    and not _same(v.field, v.declared, v.value)]
    note += "".join(f"; bundle.yaml declares {LABEL[v.field]} {v.declared} ({_place(run, v.field)}) but the log "
                    f"prints {v.value if v.value is not None else 'unset'} at {file}:{v.line}: the log's value is used"
                    for v in contradicted)
    note += "".join(f"; the log prints several {LABEL[v.field]} values ({v.printed_several}): none is used"
                    for v in values.values() if v.printed_several)
    evidence = tuple(Span(file, v.line, v.line, 1) for v in values.values() if v.line is not None)
    off_table, unknown = _table_differences(run, file, table, settings) if table is not None else ([], [])
    if unknown:
        note += f"; the log prints no {', '.join(unknown)} to compare with the recipe table"
    if disallowed or off_table:
        status = Status.ERROR
        said = [shown(v) for v in disallowed] + off_table
        message = (f"{file}: cannot be compared with the baseline ({baseline.source}, recipe "
                   f"{baseline.recipe_version}): {'; '.join(said)}{note}. Re-run with the "
                   "baseline's recipe, or allow the difference in the catalog (baselines[].allowed_differences) "
                   "with its reason.")
    elif undeclared:
        status = Status.WARN
        listed = ", ".join(_value_shown(v, file) for v in compared)
        message = (f"{file}: parallelism is not declared (bundle.yaml runs[].parallelism) nor printed by the log, so "
                   f"{', '.join(LABEL[f] for f in undeclared)} were not compared with the baseline's; "
                   f"{listed} match{note}. Declare the run's parallelism.")
    else:
        status = Status.WARN if contradicted else Status.PASS
        message = f"{', '.join(_value_shown(v, file) for v in compared)} match the baseline's{note}"
        # the report lists the values as a table under this one line
        summary = f"{len(compared)} recipe values match the baseline's{note}"
        return Check(id=check_id, title=title, phase=PHASE, severity=Severity.REQUIRED, status=status,
                     measured=0.0, target=0.0, unit="differences", message=message, evidence=evidence,
                     summary=summary, settings=tuple((f"{LABEL[v.field]} ({v.field})", _value_origin(v, file))
                                                     for v in compared))
    return Check(id=check_id, title=title, phase=PHASE, severity=Severity.REQUIRED, status=status,
                 measured=float(len(disallowed) + len(off_table)), target=0.0, unit="differences", message=message,
                 evidence=evidence)


def _value_shown(v: RecipeValue, file: str) -> str:
    return f"{LABEL[v.field]} {_value_origin(v, file)}"


def _value_origin(v: RecipeValue, file: str) -> str:
    """A recipe value and where it comes from: `4 (train.log:120)`, or `4 (declared)` from bundle.yaml."""
    shown = v.value if v.value is not None else "unset"
    return f"{shown} ({f'{file}:{v.line}' if v.line is not None else 'declared'})"

